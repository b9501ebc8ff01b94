"""MCP as plain JSON-RPC, the way OpenEnv's own server and clients speak it beside the MCP SDK's transport.

- ``tools/list`` and ``tools/call`` of one session (the WebSocket's ``{"type": "mcp"}`` frames, the
  ``/mcp`` WebSocket, and ``/mcp`` POSTs that name a session);
- OpenEnv's session methods on HTTP ``/mcp``: ``openenv/session/create`` (a session, as ``POST /sessions``
  makes) and ``openenv/session/close``, then ``tools/*`` with ``params.session_id``; OpenEnv's
  ``MCPToolClient`` steps the same session over ``/ws?session_id=``.

Making and closing sessions is the control plane's (the control token, where one is set); a session's tools
take its agent token or the control token. Tool lists and results are rendered by :mod:`hci_envs.tools.rendering`.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from fastapi import APIRouter, Depends, WebSocket, WebSocketDisconnect

from ..errors import AuthError, HciEnvsError, InvalidActionError
from ..tools.rendering import error_output, tool_listing, tool_result
from .core import HciServer
from .deps import bearer, check_control_token, get_server, next_json
from .sessions import Session

SESSION_METHODS = ("openenv/session/create", "openenv/session/close")
TOOL_METHODS = ("tools/list", "tools/call")

router = APIRouter()


def _error(rid: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message, "data": data}}


def _ok(rid: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


async def tools_jsonrpc(session: Session, request: Any) -> dict[str, Any]:
    """One JSON-RPC ``tools/list`` or ``tools/call`` for ``session``."""
    if not isinstance(request, dict) or request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
        return _error(None, -32600, "Invalid request")
    rid = request.get("id")
    method = request["method"]
    params = request.get("params") or {}
    if not isinstance(params, dict):
        return _error(rid, -32602, "params must be an object")
    env = session.env
    if method == "tools/list":
        return _ok(rid, {"tools": tool_listing(env.tools())})
    if method == "tools/call":
        name = params.get("name")
        if not isinstance(name, str):
            return _error(rid, -32602, "missing tool name")
        try:
            out = await session.run_sync(env.call_tool, name, params.get("arguments") or {}, epoch=env.epoch)
        except HciEnvsError as exc:
            out = error_output(exc)
        return _ok(rid, tool_result(out))
    return _error(rid, -32601, f"Method not found: {method}")


def is_openenv_request(message: Any) -> bool:
    """An OpenEnv session method, or a tool method that names its session in ``params.session_id``."""
    if not isinstance(message, dict):
        return False
    method, params = message.get("method"), message.get("params")
    return method in SESSION_METHODS or (method in TOOL_METHODS and isinstance(params, dict)
                                         and "session_id" in params)


async def openenv_request(server: HciServer, token: str | None, message: dict[str, Any]) -> dict[str, Any]:
    """Answer one of OpenEnv's session-bound JSON-RPC requests. Raises :class:`AuthError` (HTTP 401)."""
    rid, method = message.get("id"), message.get("method")
    params = message.get("params") or {}
    if not isinstance(params, dict):
        return _error(rid, -32602, "params must be an object")
    try:
        if method == "openenv/session/create":
            check_control_token(server, token)
            session = await server.sessions.create("api")
            return _ok(rid, {"session_id": session.id})
        session_id = params.get("session_id")
        if not isinstance(session_id, str) or not session_id:
            raise InvalidActionError("'session_id' is required", field="session_id")
        if method == "openenv/session/close":
            check_control_token(server, token)
            server.sessions.get(session_id)
            await server.sessions.close(session_id)
            return _ok(rid, {"session_id": session_id, "closed": True})
        session = server.sessions.get(session_id)
        try:
            session.check_agent_token(token)
        except AuthError:
            check_control_token(server, token)
        await session.ensure_started()
        rest = {k: v for k, v in params.items() if k != "session_id"}
        return await tools_jsonrpc(session, {**message, "params": rest})
    except AuthError:
        raise
    except HciEnvsError as exc:
        code = -32602 if isinstance(exc, InvalidActionError) else -32000
        return _error(rid, code, exc.message, exc.to_dict())


@router.websocket("/mcp")
async def mcp_websocket(ws: WebSocket, server: HciServer = Depends(get_server)) -> None:
    """OpenEnv's MCP WebSocket: a session of its own for the connection's lifetime, JSON-RPC tools/list and
    tools/call on it (the control token, where one is set, opens it)."""
    await ws.accept()
    try:
        check_control_token(server, bearer(ws.headers) or ws.query_params.get("token"))
        session = await server.sessions.create("ws")
    except HciEnvsError as exc:
        await ws.send_text(json.dumps(_error(None, -32000, exc.message, exc.to_dict())))
        await ws.close(code=1008 if isinstance(exc, AuthError) else 1000)
        return
    try:
        while True:
            received = await next_json(ws)
            if received is None:
                return
            message, invalid = received
            if invalid is not None:
                reply = _error(None, -32700, f"Parse error: {invalid}")
            else:
                reply = await tools_jsonrpc(session, message)
            try:
                await ws.send_text(json.dumps(reply))
            except (WebSocketDisconnect, RuntimeError):
                return
    finally:
        with anyio.CancelScope(shield=True):
            await server.sessions.close(session.id)
