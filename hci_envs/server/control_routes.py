"""The control plane: OpenEnv's wire protocol (HTTP and WebSocket) plus session management.

HTTP ``/reset``, ``/step`` and ``/state`` act on the server's default session (OpenEnv's reference server
builds a throwaway environment per HTTP call; ours keeps one, so HTTP episodes are real). Every ``/ws``
connection gets a session of its own for its lifetime. ``/sessions`` creates, lists and closes sessions for
callers that want several desktops over HTTP; each gets its own MCP path and agent token.

With a control token configured, every route here requires ``Authorization: Bearer <token>`` (WebSocket
clients may also pass ``?token=``). :data:`router` holds the routes of every mode; :data:`simulation_router`
the ones production mode does not have (``/reset``, ``/step``, ``/state``, per session too).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

import anyio
from fastapi import APIRouter, Body, Depends, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field

from ..errors import (
    ActionTimeoutError,
    AuthError,
    HciEnvsError,
    InvalidActionError,
    wire_form,
)
from ..protocol import EnvState, Observation
from ..sandbox.limits import Limits
from ..sandbox.limits import status as limits_status
from ..sandbox.network import NetworkPolicy
from ..sandbox.network import status as network_status
from ..tools.registry import in_mode
from ..env.steps import STEP_ACTION_SCHEMA
from .core import HciServer
from .deps import CONTROL, bearer, check_control_token, get_server, next_json, session_for
from .openenv_mcp import tools_jsonrpc
from .sessions import Session

log = logging.getLogger(__name__)

#: Seconds past a step's ``timeout_s`` before the server answers without it (its final screenshot).
STEP_TIMEOUT_GRACE = 2.0


class ResetRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    seed: int | None = Field(None, ge=0)
    episode_id: str | None = Field(None, max_length=255)
    snapshot: str | None = None
    #: A task of the server's suite (its id) or a task spec: the episode starts in the task's world, and
    #: ``/score`` runs its checker.
    task: str | dict[str, Any] | None = None
    #: A checkpoint of the session's (``/sessions/{id}/checkpoint``): the episode goes back to that moment.
    checkpoint: str | None = None


class StepRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    action: Any
    timeout_s: float | None = Field(None, gt=0)
    request_id: str | None = Field(None, max_length=255)


def serialize_observation(obs: Observation) -> dict[str, Any]:
    """OpenEnv's shape: ``{"observation": {...}, "reward": r, "done": d, "metadata": m}``."""
    body = obs.model_dump(exclude={"reward", "done"}, exclude_none=True)
    out: dict[str, Any] = {"observation": body, "reward": obs.reward, "done": obs.done}
    out["metadata"] = obs.metadata or None
    return out


router = APIRouter()
simulation_router = APIRouter(dependencies=CONTROL)


# -- metadata ---------------------------------------------------------------------------------------------
@router.get("/metadata")
async def metadata(server: HciServer = Depends(get_server)) -> dict[str, Any]:
    from .. import __version__

    env_class = server.env_class
    doc = (env_class.__doc__ or "").strip()
    return {
        "name": env_class.__name__,
        "description": getattr(env_class, "description", "") or doc.splitlines()[0] if doc else env_class.__name__,
        "readme_content": doc or None,
        "version": __version__,
        "author": "hci-envs",
        "documentation_url": None,
        "tools": sorted(in_mode(env_class.tool_specs(), server.config.mode)),
        # the default session's MCP tool profiles, {name: url} (every session's own are in its state)
        "mcp_profiles": server.mcp_profiles(None),
        "mode": server.config.mode,
        "max_sessions": server.config.max_sessions,
        "supports_concurrent_sessions": True,
        "isolation": server.isolation.to_dict(),
        "limits": limits_status(server.config.env_kwargs.get("limits") or Limits.default(),
                                server.isolation.mode == "uid"),
        "network": network_status(NetworkPolicy.make(server.config.env_kwargs.get("network")),
                                  server.isolation.mode == "uid"),
    }


@router.get("/schema")
async def schema() -> dict[str, Any]:
    return {
        "action": STEP_ACTION_SCHEMA,
        "observation": Observation.model_json_schema(),
        "state": EnvState.model_json_schema(),
        "reset_observation": Observation.model_json_schema(),
    }


# -- episodes over HTTP (the default session, or one named) --------------------------------------------------
async def do_reset(server: HciServer, session: Session, request: ResetRequest) -> dict[str, Any]:
    obs = await server.reset_session(session, request.model_dump(exclude_none=True))
    return serialize_observation(obs)


async def do_step(session: Session, request: StepRequest) -> dict[str, Any]:
    await session.ensure_started()
    if request.timeout_s is None:
        obs = await session.run_control(session.env.step, request.action)
        return serialize_observation(obs)
    # The step itself keeps to the deadline (waits and commands are cut short); the grace covers a
    # screenshot after it. Past that, the caller gets its answer anyway. Both on the agent's clock, which may
    # stand still while it waits for a person (serve --pause-clock-for-people).
    clock = session.env.handover.agent_clock
    started = clock()
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            async def guard() -> None:
                while (left := request.timeout_s + STEP_TIMEOUT_GRACE - (clock() - started)) > 0:
                    await anyio.sleep(min(left, 0.5))
                scope.cancel()

            group.start_soon(guard)
            obs = await session.run_control(session.env.step, request.action, timeout_s=request.timeout_s)
            group.cancel_scope.cancel()
        return serialize_observation(obs)
    raise ActionTimeoutError(f"the step did not finish within timeout_s={request.timeout_s:g}",
                             timeout_s=request.timeout_s)


# OpenEnv's mode contract: in production the model's only way in is MCP, and the simulation routes
# (/reset, /step, /state) do not exist.
@simulation_router.post("/reset")
async def reset(request: ResetRequest = Body(default_factory=ResetRequest),
                server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """Reset the default session's desktop to its start state (or a snapshot)."""
    return await do_reset(server, session_for(server, None), request)


@simulation_router.post("/step")
async def step(request: StepRequest, server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """Run one action (or a list) on the default session and observe."""
    return await do_step(session_for(server, None), request)


@simulation_router.get("/state")
async def state(server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return session_for(server, None).env.state.model_dump()


@simulation_router.post("/sessions/{session_id}/reset")
async def session_reset(session_id: str, request: ResetRequest = Body(default_factory=ResetRequest),
                        server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return await do_reset(server, session_for(server, session_id), request)


@simulation_router.post("/sessions/{session_id}/step")
async def session_step(session_id: str, request: StepRequest,
                       server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return await do_step(session_for(server, session_id), request)


@simulation_router.get("/sessions/{session_id}/state")
async def session_state(session_id: str, server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return session_for(server, session_id).env.state.model_dump()


@router.post("/score", dependencies=CONTROL)
async def score(server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """Run the checker of the task the default session was reset into: ``{task, score, success, details}``."""
    return await server.score_session(session_for(server, None))


@router.post("/sessions/{session_id}/score", dependencies=CONTROL)
async def session_score(session_id: str, server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return await server.score_session(session_for(server, session_id))


@router.post("/snapshot", dependencies=CONTROL)
async def snapshot(name: str = Body(..., embed=True), session_id: str | None = Body(None, embed=True),
                   server: HciServer = Depends(get_server)) -> dict[str, Any]:
    session = session_for(server, session_id)
    await session.ensure_started()
    return await session.run_control(session.env.snapshot, name)


@router.post("/sessions/{session_id}/checkpoint", dependencies=CONTROL)
async def checkpoint(session_id: str, name: str = Body(..., embed=True),
                     server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """Keep the session as it is now (a forkable desktop: every process with its memory, the home, the
    episode) under ``name``; a reset with ``{"checkpoint": name}`` returns to it."""
    session = server.sessions.get(session_id)
    await session.ensure_started()
    return await session.run_control(session.env.checkpoint, name)


# -- sessions ---------------------------------------------------------------------------------------------
def session_info(session: Session, with_token: bool = False) -> dict[str, Any]:
    info = {"session_id": session.id, "kind": session.kind, **session.env.session_info}
    if with_token and session.agent_token:
        info["agent_token"] = session.agent_token
    return info


@router.post("/sessions", dependencies=CONTROL)
async def create_session(mode: Literal["tools", "code"] | None = Body(None, embed=True),
                         server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """A new session with its own desktop, MCP path and agent token; ``mode`` picks the agent interface
    its state advertises (one tool per call, or CodeAct)."""
    session = await server.sessions.create("api", mode=mode)
    return session_info(session, with_token=True)


@router.post("/sessions/{session_id}/fork", dependencies=CONTROL)
async def fork_session(session_id: str, n: Any = Body(..., embed=True),
                       server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """``n`` new sessions whose desktops are live copies of this session's as it is now (a forkable desktop:
    ``serve --desktop forkable``), each with its own agent account, token and MCP path."""
    return await do_fork(server, server.sessions.get(session_id), n)


async def do_fork(server: HciServer, session: Session, n: Any) -> dict[str, Any]:
    await session.ensure_started()
    copies = await server.sessions.fork(session, n)
    return {"sessions": [session_info(copy, with_token=True) for copy in copies]}


@router.get("/sessions", dependencies=CONTROL)
async def list_sessions(server: HciServer = Depends(get_server)) -> list[dict[str, Any]]:
    return [session_info(s) for s in server.sessions.sessions()]


@router.delete("/sessions/{session_id}", dependencies=CONTROL)
async def close_session(session_id: str, server: HciServer = Depends(get_server)) -> dict[str, Any]:
    server.sessions.get(session_id)
    await server.sessions.close(session_id)
    return {"session_id": session_id, "closed": True}


# -- WebSocket --------------------------------------------------------------------------------------------
@router.websocket("/ws")
async def websocket(ws: WebSocket, server: HciServer = Depends(get_server)) -> None:
    await ws.accept()
    try:
        check_control_token(server, bearer(ws.headers) or ws.query_params.get("token"))
    except AuthError as exc:
        await _send_error(ws, exc.message, "UNAUTHORIZED")
        await ws.close(code=1008)
        return
    # ``?session_id=`` attaches to a session made elsewhere (OpenEnv's MCPToolClient makes one over /mcp and
    # steps it here); that session outlives the socket. Otherwise the socket gets a session of its own.
    attach = ws.query_params.get("session_id")
    try:
        session = server.sessions.get(attach) if attach else await server.sessions.create("ws")
        if attach:
            await session.ensure_started()
    except HciEnvsError as exc:
        await _send_exception(ws, exc)
        await ws.close(code=1000)
        return
    try:
        await _serve_ws(ws, server, session)
    finally:
        if not attach:
            with anyio.CancelScope(shield=True):
                await server.sessions.close(session.id)


async def _send_exception(ws: WebSocket, exc: HciEnvsError) -> None:
    """An error frame for one of ours: OpenEnv's code (from the one table), the error's own code and details."""
    details = {k: v for k, v in exc.details.items() if k not in ("message", "code", "error")}
    await _send_error(ws, exc.message, wire_form(exc).ws_code, **details, error=exc.to_dict())


async def _send_error(ws: WebSocket, message: str, code: str, **extra: Any) -> None:
    try:
        await ws.send_text(json.dumps({"type": "error", "data": {"message": message, "code": code, **extra}}))
    except Exception:
        pass


_WS_FIELDS = {"reset": {"type", "data"}, "step": {"type", "data"}, "state": {"type"}, "close": {"type"},
              "mcp": {"type", "data"}, "fork": {"type", "data"}}


async def _serve_ws(ws: WebSocket, server: HciServer, session: Session) -> None:
    env = session.env
    while True:
        received = await next_json(ws)
        if received is None:
            return
        message, invalid = received
        if invalid is not None:
            await _send_error(ws, f"Invalid JSON: {invalid}", "INVALID_JSON")
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
                obs = await server.reset_session(session, request.model_dump(exclude_none=True))
                reply = {"type": "observation", "data": _ws_observation(obs)}
            elif kind == "step":
                if "data" not in message:
                    raise InvalidActionError("step needs 'data' (the action)", field="data")
                obs = await session.run_control(env.step, message["data"])
                reply = {"type": "observation", "data": _ws_observation(obs)}
            elif kind == "state":
                reply = {"type": "state", "data": env.state.model_dump()}
            elif kind == "fork":
                data = message.get("data") or {}
                if not isinstance(data, dict) or set(data) != {"n"}:
                    raise InvalidActionError("fork data must be {\"n\": copies}", field="data")
                reply = {"type": "fork", "data": await do_fork(server, session, data["n"])}
            else:  # mcp
                reply = {"type": "mcp", "data": await tools_jsonrpc(session, message.get("data"))}
        except HciEnvsError as exc:
            await _send_exception(ws, exc)
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
