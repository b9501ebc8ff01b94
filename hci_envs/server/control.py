"""The control plane: OpenEnv's wire protocol (HTTP and WebSocket) plus session management.

HTTP ``/reset``, ``/step`` and ``/state`` act on the server's default session (OpenEnv's reference server
builds a throwaway environment per HTTP call; ours keeps one, so HTTP episodes are real). Every ``/ws``
connection gets a session of its own for its lifetime. ``/sessions`` creates, lists and closes sessions for
callers that want several desktops over HTTP; each gets its own MCP path and agent token.

With a control token configured, every route here requires ``Authorization: Bearer <token>`` (WebSocket
clients may also pass ``?token=``).
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any, Literal, Union

import anyio
from fastapi import Body, Depends, FastAPI, Request, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from ..actions import ACTION_MODELS
from ..protocol import EnvState, Observation
from ..errors import ActionTimeoutError, AuthError, HciEnvsError, InvalidActionError
from .app import HciServer, bearer
from .sessions import Session

log = logging.getLogger(__name__)

#: Seconds past a step's ``timeout_s`` before the server answers without it (its final screenshot).
STEP_TIMEOUT_GRACE = 2.0


class ResetRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    seed: int | None = Field(None, ge=0)
    episode_id: str | None = Field(None, max_length=255)
    snapshot: str | None = None


class StepRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    action: Any
    timeout_s: float | None = Field(None, gt=0)
    request_id: str | None = Field(None, max_length=255)


class ToolCall(BaseModel):
    """Call one tool by name."""

    model_config = ConfigDict(extra="forbid")
    tool: str
    arguments: dict[str, Any] = {}


class CallToolAction(BaseModel):
    """OpenEnv's MCP tool call."""

    model_config = ConfigDict(extra="forbid")
    type: str = Field("call_tool", pattern="^call_tool$")
    tool_name: str
    arguments: dict[str, Any] = {}
    metadata: dict[str, Any] = {}


class ListToolsAction(BaseModel):
    """OpenEnv's MCP tool listing."""

    model_config = ConfigDict(extra="forbid")
    type: str = Field("list_tools", pattern="^list_tools$")
    metadata: dict[str, Any] = {}


class CodeAction(BaseModel):
    """A CodeAct step: Python in which every tool is a function."""

    model_config = ConfigDict(extra="forbid")
    code: str


_STEP_ITEM = Union[tuple([*ACTION_MODELS, ToolCall, CallToolAction, ListToolsAction, CodeAction])]  # noqa: UP007
STEP_ACTION_SCHEMA = TypeAdapter(Union[_STEP_ITEM, list[_STEP_ITEM]]).json_schema()  # noqa: UP007


def serialize_observation(obs: Observation) -> dict[str, Any]:
    """OpenEnv's shape: ``{"observation": {...}, "reward": r, "done": d, "metadata": m}``."""
    body = obs.model_dump(exclude={"reward", "done"}, exclude_none=True)
    out: dict[str, Any] = {"observation": body, "reward": obs.reward, "done": obs.done}
    out["metadata"] = obs.metadata or None
    return out


def install_control_plane(app: FastAPI, server: HciServer) -> None:
    config = server.config
    env_class = server.env_class

    def require_control(request: Request) -> None:
        check_control_token(server, bearer(request.headers))

    guard = [Depends(require_control)]

    async def run(session: Session, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await session.run_control(fn, *args, **kwargs)

    def session_for(session_id: str | None) -> Session:
        return server.sessions.get(session_id) if session_id else server.sessions.default()

    # -- metadata -----------------------------------------------------------------------------------
    @app.get("/metadata")
    async def metadata() -> dict[str, Any]:
        from .. import __version__

        doc = (env_class.__doc__ or "").strip()
        return {
            "name": env_class.__name__,
            "description": getattr(env_class, "description", "") or doc.splitlines()[0] if doc else env_class.__name__,
            "readme_content": doc or None,
            "version": __version__,
            "author": "hci-envs",
            "documentation_url": None,
            "tools": sorted(env_class.tool_specs()),
            "mode": config.mode,
            "max_sessions": config.max_sessions,
            "supports_concurrent_sessions": True,
            "isolation": server.isolation.to_dict(),
        }

    @app.get("/schema")
    async def schema() -> dict[str, Any]:
        return {
            "action": STEP_ACTION_SCHEMA,
            "observation": Observation.model_json_schema(),
            "state": EnvState.model_json_schema(),
            "reset_observation": Observation.model_json_schema(),
        }

    # -- the default session over HTTP ----------------------------------------------------------------
    async def do_reset(session: Session, request: ResetRequest) -> dict[str, Any]:
        options = request.model_dump(exclude_none=True)
        seed = options.pop("seed", None)
        episode_id = options.pop("episode_id", None)
        obs = await run(session, session.env.reset, seed=seed, episode_id=episode_id, **options)
        return serialize_observation(obs)

    async def do_step(session: Session, request: StepRequest) -> dict[str, Any]:
        await session.ensure_started()
        if request.timeout_s is None:
            obs = await run(session, session.env.step, request.action)
            return serialize_observation(obs)
        # The step itself keeps to the deadline (waits and commands are cut short); the grace covers a
        # screenshot after it. Past that, the caller gets its answer anyway.
        with anyio.move_on_after(request.timeout_s + STEP_TIMEOUT_GRACE):
            obs = await run(session, session.env.step, request.action, timeout_s=request.timeout_s)
            return serialize_observation(obs)
        raise ActionTimeoutError(f"the step did not finish within timeout_s={request.timeout_s:g}",
                                 timeout_s=request.timeout_s)

    # OpenEnv's mode contract: in production the model's only way in is MCP, and the simulation routes
    # (/reset, /step, /state) do not exist.
    if config.mode == "simulation":

        @app.post("/reset", dependencies=guard)
        async def reset(request: ResetRequest = Body(default_factory=ResetRequest)) -> dict[str, Any]:
            """Reset the default session's desktop to its start state (or a snapshot)."""
            return await do_reset(session_for(None), request)

        @app.post("/step", dependencies=guard)
        async def step(request: StepRequest) -> dict[str, Any]:
            """Run one action (or a list) on the default session and observe."""
            return await do_step(session_for(None), request)

        @app.get("/state", dependencies=guard)
        async def state() -> dict[str, Any]:
            return session_for(None).env.state.model_dump()

    @app.post("/snapshot", dependencies=guard)
    async def snapshot(name: str = Body(..., embed=True), session_id: str | None = Body(None, embed=True)) -> dict[str, Any]:
        session = session_for(session_id)
        await session.ensure_started()
        return await run(session, session.env.snapshot, name)

    # -- sessions -------------------------------------------------------------------------------------
    def session_info(session: Session, with_token: bool = False) -> dict[str, Any]:
        info = {"session_id": session.id, "kind": session.kind, **session.env.session_info}
        if with_token and session.agent_token:
            info["agent_token"] = session.agent_token
        return info

    @app.post("/sessions", dependencies=guard)
    async def create_session(
        mode: Literal["tools", "code"] | None = Body(None, embed=True),
    ) -> dict[str, Any]:
        """A new session with its own desktop, MCP path and agent token; ``mode`` picks the agent interface
        its state advertises (one tool per call, or CodeAct)."""
        session = await server.sessions.create("api", mode=mode)
        return session_info(session, with_token=True)

    @app.get("/sessions", dependencies=guard)
    async def list_sessions() -> list[dict[str, Any]]:
        return [session_info(s) for s in server.sessions.sessions()]

    @app.delete("/sessions/{session_id}", dependencies=guard)
    async def close_session(session_id: str) -> dict[str, Any]:
        server.sessions.get(session_id)
        await server.sessions.close(session_id)
        return {"session_id": session_id, "closed": True}

    if config.mode == "simulation":

        @app.post("/sessions/{session_id}/reset", dependencies=guard)
        async def session_reset(
            session_id: str, request: ResetRequest = Body(default_factory=ResetRequest)
        ) -> dict[str, Any]:
            return await do_reset(session_for(session_id), request)

        @app.post("/sessions/{session_id}/step", dependencies=guard)
        async def session_step(session_id: str, request: StepRequest) -> dict[str, Any]:
            return await do_step(session_for(session_id), request)

        @app.get("/sessions/{session_id}/state", dependencies=guard)
        async def session_state(session_id: str) -> dict[str, Any]:
            return session_for(session_id).env.state.model_dump()

    # -- WebSocket ------------------------------------------------------------------------------------
    @app.websocket("/ws")
    async def websocket(ws: WebSocket) -> None:
        await ws.accept()
        try:
            check_control_token(server, bearer(ws.headers) or ws.query_params.get("token"))
        except AuthError as exc:
            await _send_error(ws, exc.message, "UNAUTHORIZED")
            await ws.close(code=1008)
            return
        try:
            session = await server.sessions.create("ws")
        except HciEnvsError as exc:
            await _send_error(ws, exc.message, exc.code, **exc.details)
            await ws.close(code=1000)
            return
        try:
            await _serve_ws(ws, session, run)
        finally:
            with anyio.CancelScope(shield=True):
                await server.sessions.close(session.id)


def check_control_token(server: HciServer, presented: str | None) -> None:
    token = server.config.control_token
    if token is None:
        return
    if presented is None or not hmac.compare_digest(presented.encode(), token.encode()):
        raise AuthError("missing or wrong control token")


async def _send_error(ws: WebSocket, message: str, code: str, **extra: Any) -> None:
    try:
        await ws.send_text(json.dumps({"type": "error", "data": {"message": message, "code": code, **extra}}))
    except Exception:
        pass


_WS_FIELDS = {"reset": {"type", "data"}, "step": {"type", "data"}, "state": {"type"}, "close": {"type"},
              "mcp": {"type", "data"}}


async def _serve_ws(ws: WebSocket, session: Session, run: Any) -> None:
    env = session.env
    while True:
        try:
            raw = await ws.receive_text()
        except WebSocketDisconnect:
            return
        try:
            message = json.loads(raw)
        except ValueError as exc:
            await _send_error(ws, f"Invalid JSON: {exc}", "INVALID_JSON")
            continue
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            await _send_error(ws, "a message must be an object with a string 'type'", "VALIDATION_ERROR")
            continue
        kind = message["type"]
        if kind not in _WS_FIELDS:
            await _send_error(ws, f"Unknown message type: {kind}", "UNKNOWN_TYPE")
            continue
        extra = set(message) - _WS_FIELDS[kind]
        if extra:
            await _send_error(ws, f"Invalid message: unexpected field(s) {', '.join(sorted(extra))}",
                              "VALIDATION_ERROR")
            continue
        if kind == "close":
            await ws.close(code=1000)
            return
        try:
            if kind == "reset":
                data = message.get("data") or {}
                if not isinstance(data, dict):
                    raise InvalidActionError("reset data must be an object", field="data")
                request = ResetRequest.model_validate(data)
                options = request.model_dump(exclude_none=True)
                seed, episode_id = options.pop("seed", None), options.pop("episode_id", None)
                obs = await run(session, env.reset, seed=seed, episode_id=episode_id, **options)
                reply = {"type": "observation", "data": _ws_observation(obs)}
            elif kind == "step":
                if "data" not in message:
                    raise InvalidActionError("step needs 'data' (the action)", field="data")
                obs = await run(session, env.step, message["data"])
                reply = {"type": "observation", "data": _ws_observation(obs)}
            elif kind == "state":
                reply = {"type": "state", "data": env.state.model_dump()}
            else:  # mcp
                reply = {"type": "mcp", "data": await _ws_mcp(session, message.get("data"), run)}
        except HciEnvsError as exc:
            code = exc.code if exc.code in ("VALIDATION_ERROR", "CAPACITY_REACHED", "SESSION_ERROR") else (
                "VALIDATION_ERROR" if isinstance(exc, InvalidActionError) else "EXECUTION_ERROR"
            )
            await _send_error(ws, exc.message, code, error=exc.to_dict())
            continue
        except Exception as exc:  # pydantic errors from ResetRequest, or a bug: report, keep the socket
            from pydantic import ValidationError

            if isinstance(exc, ValidationError):
                await _send_error(ws, "Invalid message", "VALIDATION_ERROR", errors=exc.errors(include_url=False))
            else:
                log.exception("WebSocket step failed")
                await _send_error(ws, str(exc), "EXECUTION_ERROR")
            continue
        try:
            await ws.send_text(json.dumps(reply))
        except (WebSocketDisconnect, RuntimeError):
            return


def _ws_observation(obs: Observation) -> dict[str, Any]:
    out = serialize_observation(obs)
    if out["metadata"] is None:
        del out["metadata"]
    return out


async def _ws_mcp(session: Session, request: Any, run: Any) -> dict[str, Any]:
    """JSON-RPC tools/list and tools/call over the WebSocket (OpenEnv's ``{"type": "mcp"}`` frames)."""
    from .mcp_bridge import output_to_mcp_dict

    if not isinstance(request, dict) or request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
        return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid request", "data": None}}
    rid = request.get("id")
    method = request["method"]
    params = request.get("params") or {}
    env = session.env
    if method == "tools/list":
        tools = [{"name": s.name, "description": s.description, "inputSchema": s.input_schema()}
                 for s in env.tools().values()]
        return {"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}}
    if method == "tools/call":
        name = params.get("name")
        if not isinstance(name, str):
            return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "missing tool name", "data": None}}
        try:
            out = await session.run_sync(env.call_tool, name, params.get("arguments") or {}, epoch=env.epoch)
            result = output_to_mcp_dict(out)
        except HciEnvsError as exc:
            result = {"content": [{"type": "text", "text": exc.message}], "structured_content": {"error": exc.to_dict()},
                      "meta": None, "data": None, "is_error": True}
        return {"jsonrpc": "2.0", "id": rid, "result": result}
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"Method not found: {method}", "data": None}}
