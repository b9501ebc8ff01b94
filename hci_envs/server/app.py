"""The one ASGI server of a desktop environment: health, MCP, the control plane, VNC, all on one port.

    app = create_app(ServerConfig(env_class=DesktopEnv))
    uvicorn.run(app, host="127.0.0.1", port=8000)

Routes (documented in README.md): ``/health``; ``/mcp`` and ``/sessions/{id}/mcp`` (MCP over streamable HTTP, the
model's interface); ``/metadata``, ``/schema``, ``/reset``, ``/step``, ``/state``, ``/ws`` (OpenEnv's wire
protocol, the control plane); ``/sessions`` (create, list, close); ``/vnc/`` (the browser view); ``/collect/{session}/{secret}/`` (the
page for recording demonstrations). Every route is also served under ``/t/<control token>/`` (see path_token.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Collection
from typing import Any

import anyio
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .. import __version__
from ..errors import HciEnvsError, SessionNotFoundError
from . import (
    collect_routes,
    control_routes,
    handover_routes,
    openenv_mcp,
    recording_routes,
    supervision_routes,
    task_routes,
    vnc_routes,
)
from .config import ServerConfig
from .core import HciServer
from .deps import bearer, error_response
from .guards import HostGuard, PeerGuard
from .mcp_bridge import SCOPE_KEY
from .path_token import PathToken
from .profiles import DEFAULT_PROFILE

log = logging.getLogger(__name__)

#: Largest MCP request body accepted (a clipboard or type_text payload of MAX_TEXT_CHARS fits easily).
MAX_MCP_BODY = 8 * 1024 * 1024

class McpEndpoint:
    """Routes an MCP request to its session (after checking the agent token) and into the MCP SDK."""

    def __init__(self, server: HciServer) -> None:
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        session_id = scope.get("path_params", {}).get("session_id")
        body = None
        if request.method == "POST":
            body = await _read_body(receive, MAX_MCP_BODY)
            if body is None:
                await JSONResponse({"detail": "request body too large"}, status_code=413)(scope, receive, send)
                return
            # The SDK parses the body; this endpoint parses it too only when its bytes could be something the
            # SDK must not see (see _needs_routing): OpenEnv's session methods, or no JSON-RPC at all.
            message, reply = _parse_jsonrpc(body) if _needs_routing(body) else (None, None)
            if reply is not None:  # OpenEnv's validator posts {}: answer like a JSON-RPC server would
                await JSONResponse(reply)(scope, receive, send)
                return
            if session_id is None and openenv_mcp.is_openenv_request(message):
                try:  # OpenEnv's session methods, and tools of the session they made (see openenv_mcp)
                    reply = await openenv_mcp.openenv_request(self.server, bearer(request.headers), message)
                except HciEnvsError as exc:
                    await error_response(exc)(scope, receive, send)
                    return
                await JSONResponse(reply)(scope, receive, send)
                return
        try:
            session = self.server.sessions.get(session_id) if session_id else self.server.sessions.default()
            session.check_agent_token(bearer(request.headers))
            await session.ensure_started()
        except HciEnvsError as exc:
            await error_response(exc)(scope, receive, send)
            return
        if body is not None:
            receive = _replay(body)
        scope = dict(scope)
        scope[SCOPE_KEY] = session
        mcp = self.server.mcp_servers[scope.get("hci_envs.profile", DEFAULT_PROFILE)]
        await mcp.session_manager.handle_request(scope, receive, send)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await anyio.sleep_forever()
        return {"type": "http.disconnect"}  # pragma: no cover

    return receive


def _needs_routing(body: bytes) -> bool:
    """Whether this endpoint must read an MCP body before the SDK does: it might be one of OpenEnv's session
    methods (``openenv/...``, or a tool method naming ``session_id``) or not a JSON-RPC message at all. A body
    without those bytes cannot be either, unless it spells them with escapes, so any escape is read too."""
    return b"openenv/" in body or b"session_id" in body or b'"jsonrpc"' not in body or b"\\u" in body


def _parse_jsonrpc(body: bytes) -> tuple[Any, dict[str, Any] | None]:
    """The message, and the JSON-RPC error to answer instead when it is not JSON-RPC at all."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return None, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error", "data": None}}
    if isinstance(message, dict) and ("jsonrpc" not in message or ("method" not in message and "id" not in message)):
        return message, {
            "jsonrpc": "2.0",
            "id": message.get("id"),
            "error": {"code": -32600, "message": "Invalid request: not a JSON-RPC 2.0 message", "data": None},
        }
    return message, None


class HciApp:
    """The ASGI entry point: MCP requests go straight to the MCP endpoint (they are the hot path and need
    none of FastAPI's machinery); everything else, including the lifespan, goes to the FastAPI app."""

    def __init__(self, api: FastAPI, server: HciServer, mcp_endpoint: McpEndpoint) -> None:
        self.api = api
        self.hci = server
        config = server.config
        host_checks = {"check_origin": config.guards_origin, "check_host": config.guards_origin and not config.exposed}
        uids = server.agent_uids
        self._mcp = PeerGuard(HostGuard(mcp_endpoint, **host_checks), lambda: uids)
        self._rest = PeerGuard(HostGuard(api, **host_checks), lambda: uids)
        # first of all: a base URL carrying the control token (OpenEnv's from_docker_image) loses it here
        self._entry = PathToken(self._dispatch, config.control_token)
        self._guest: Any = None
        if config.osworld_port is not None:
            from .osworld_guest import OwnerGuard, guest_app

            self._guest = OwnerGuard(guest_app(server.sessions.default), server.osworld_owner)

    def _startup_said_in_one_line(self, send: Send) -> Send:
        """The lifespan's ``send``, with a start-up that failed on our own error (an app that showed no window, a
        missing program) told as that error's one line, not as the traceback Starlette formats."""
        async def said(message: Any) -> None:
            failure = self.hci.startup_error
            if message.get("type") == "lifespan.startup.failed" and failure is not None:
                message = {**message, "message": f"{failure.code}: {failure.message}"}
            await send(message)

        return said

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._guest is not None and scope["type"] in ("http", "websocket") and _on_guest_socket(scope, self.hci.config):
            clients = self.hci.clients  # a client like any other: the server is not orphaned while it works
            clients.begin()
            try:
                await self._guest(scope, receive, send)  # OSWorld's harness, on the socket of its own
            finally:
                clients.end()
            return
        await self._entry(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._rest(scope, receive, self._startup_said_in_one_line(send))
            return
        if scope["type"] != "http" and scope["type"] != "websocket" or scope["path"] == "/health":
            await self._rest(scope, receive, send)  # health probes are no clients
            return
        clients = self.hci.clients
        clients.begin()
        try:
            if scope["type"] == "http":
                route = mcp_route(scope["path"], self.hci.mcp_servers)
                if route is not None:
                    session_id, profile = route
                    scope["path_params"] = {"session_id": session_id} if session_id else {}
                    scope["hci_envs.profile"] = profile
                    await self._mcp(scope, receive, send)
                    return
            await self._rest(scope, receive, send)
        finally:
            clients.end()


def _on_guest_socket(scope: Scope, config: ServerConfig) -> bool:
    """Whether the request came in on the guest API's socket (127.0.0.1, its port), not the main one."""
    server = scope.get("server")
    return bool(server) and server[1] == config.osworld_port and server[0] in ("127.0.0.1", "::ffff:127.0.0.1")


async def exit_when_orphaned(server: HciServer, timeout: float) -> None:
    """End the server (as SIGTERM does) once no client has been here for ``timeout`` seconds: no request in
    flight, no WebSocket open, no VNC viewer."""
    import os
    import signal

    while True:
        await anyio.sleep(min(timeout / 4, 5.0))
        viewers = any(s.vnc is not None and s.vnc.viewers for s in server.sessions.sessions())
        if viewers:
            server.clients.touch()
        if server.clients.idle_for() >= timeout:
            log.warning("no client for %gs (orphan timeout): the server exits", timeout)
            print(f"hci-envs: no client for {timeout:g}s (--orphan-timeout): exiting", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            return


def mcp_route(path: str, profiles: Collection[str]) -> tuple[str | None, str] | None:
    """(session id or None for the default session, the tool profile) for an MCP path, else None: ``/mcp``,
    ``/mcp/<profile>``, ``/sessions/<id>/mcp`` and ``/sessions/<id>/mcp/<profile>`` (see profiles.py)."""
    parts = path.rstrip("/").split("/")[1:]
    profile = DEFAULT_PROFILE
    if len(parts) > 1 and parts[-2] == "mcp" and parts[-1] in profiles:
        profile, parts = parts[-1], parts[:-1]
    if parts == ["mcp"]:
        return None, profile
    if len(parts) == 3 and parts[0] == "sessions" and parts[2] == "mcp" and parts[1]:
        return parts[1], profile
    return None


def create_app(config: ServerConfig) -> HciApp:
    server = HciServer(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as managers:
            for mcp in server.mcp_servers.values():  # before the task group: they end after it
                await managers.enter_async_context(mcp.session_manager.run())
            async with anyio.create_task_group() as tg:
                for hook in server.startup_hooks:
                    await hook()
                if config.start_default_session:
                    try:
                        await server.sessions.create("default", start=not config.lazy_default_session)
                    except HciEnvsError as exc:
                        server.startup_error = exc
                        raise
                if config.on_ready is not None:
                    config.on_ready(server)
                tg.start_soon(server.sessions.reap_forever)
                if config.orphan_timeout is not None:
                    tg.start_soon(exit_when_orphaned, server, config.orphan_timeout)
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
                    for stop in server.shutdown_hooks:
                        stop()
                    with anyio.CancelScope(shield=True):
                        await server.sessions.close_all()

    app = FastAPI(
        title="hci-envs",
        version=__version__,
        description="A virtual desktop environment: MCP tools for agents, OpenEnv control plane, VNC for people.",
        lifespan=lifespan,
    )
    app.state.hci = server
    mcp_endpoint = McpEndpoint(server)
    # Declared for the OpenAPI description (and OpenEnv's validator); requests are served by HciApp first.
    app.router.routes.append(Route("/mcp", mcp_endpoint, methods=["GET", "POST", "DELETE"]))

    @app.exception_handler(HciEnvsError)
    async def _hci_error(request: Request, exc: HciEnvsError) -> Response:
        return error_response(exc)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Server liveness (always "healthy" while it answers) and the default desktop's state."""
        desktop: dict[str, Any] = {"status": "none"}
        try:
            session = server.sessions.default()
        except SessionNotFoundError:
            pass
        else:
            if session.env.desktop is None and not session.env.state.episode_id:
                desktop = {"status": "idle", "reason": "starts on first use"}
            else:
                h = session.env.desktop.health() if session.env.desktop is not None else None
                desktop = {"status": "ok" if h and h.ok else "down", "reason": "not running" if h is None else h.reason}
        return {
            "status": "healthy",
            "version": __version__,
            "sessions": len(server.sessions),
            "max_sessions": config.max_sessions,
            "desktop": desktop,
        }

    app.include_router(control_routes.router)
    app.include_router(openenv_mcp.router)
    if config.mode == "simulation":
        app.include_router(control_routes.simulation_router)
    if config.vnc:
        vnc_routes.install_vnc(app, server)
        handover_routes.install_handover(app, server)  # people answer the agent's ask_human
        supervision_routes.install_supervision(app, server)  # people decide on the agent's actions
        collect_routes.install_collect(app, server)  # the page for people who record demonstrations
    app.include_router(recording_routes.router)
    app.include_router(task_routes.router)  # last: its /{env_name}/... paths never shadow a route above
    return HciApp(app, server, mcp_endpoint)
