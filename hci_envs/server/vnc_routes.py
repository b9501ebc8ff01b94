"""VNC on the server's port: the noVNC page at ``/vnc/``, its RFB WebSocket at
``/vnc/ws/{session}/{secret}`` (the secret picks the role), an optional raw VNC TCP port for native
viewers (the VNC password picks the session and the role), and the takeover controls of the control plane.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import anyio
from fastapi import APIRouter, Body, Depends, FastAPI, Request, WebSocket
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles

from ..errors import ConfigError, DesktopDiedError, RfbError, SessionNotFoundError
from ..vnc.proxy import (
    AsyncioStream,
    VncSession,
    WebSocketStream,
    finish_security,
    viewer_handshake,
)
from ..vnc.rfb import SECURITY_NONE, SECURITY_VNC
from .core import HciServer
from .deps import CONTROL, get_server, session_for
from .guards import is_agent_connection, peer_of
from .sessions import Session

log = logging.getLogger(__name__)

NOVNC_DIR = Path("/usr/share/novnc")
#: Seconds before a wrong secret is refused. On the native port failed attempts also take turns (one at a time
#: for the whole port), since VNC authentication reads only 8 characters of a secret.
REFUSAL_DELAY = 0.5


def attach_vnc(server: HciServer, session: Session) -> dict[str, Any]:
    """Give a session its VNC side; returns the URLs its state reports."""

    async def socket_path() -> Path:
        await session.ensure_started()
        desktop = session.env.desktop
        if desktop is None:
            raise SessionNotFoundError(f"session {session.id} has no desktop")
        return await anyio.to_thread.run_sync(desktop.vnc_socket)

    def release_input(**expected: object) -> None:
        desktop = session.env.desktop
        if desktop is not None:
            desktop.input.release_stray(**expected)  # type: ignore[arg-type]

    def buttons_delivered(down: frozenset[int], changed: frozenset[int]) -> None:
        desktop = session.env.desktop
        if desktop is not None:
            with contextlib.suppress(DesktopDiedError):  # a display that is gone delivers nothing: go on
                desktop.input.buttons_delivered(down, changed)  # type: ignore[attr-defined]

    vnc = VncSession(socket_path, takeover_timeout=server.config.takeover_timeout,
                     on_human_input=session.env.mark_touched, release_input=release_input,
                     buttons_delivered=buttons_delivered)
    session.vnc = vnc
    session.env.hooks.input_blocked = vnc.agent_input_blocked

    def on_env_event(event: str) -> None:
        if event == "reset":
            vnc.pointer_moved_elsewhere()
        elif event == "desktop":
            vnc.desktop_replaced()

    session.env.hooks.listeners.append(on_env_event)
    base = server.config.base_url()
    prefix = urllib.parse.urlsplit(base).path.strip("/")

    def page(secret: str, view_only: bool) -> str:
        path = "/".join(p for p in (prefix, "vnc", "ws", session.id, secret) if p)
        # a reset that swaps in the spare desktop lets viewers go: be back within half a second, not noVNC's 5
        query = {"autoconnect": "1", "reconnect": "1", "reconnect_delay": "500", "resize": "scale", "path": path}
        if view_only:
            query["view_only"] = "1"
        return f"{base}/vnc/vnc.html?{urllib.parse.urlencode(query)}"

    info: dict[str, Any] = {
        "vnc_url": page(vnc.control_password, False),
        "vnc_view_url": page(vnc.view_password, True),
        "vnc_secrets": {"control": vnc.control_password, "view": vnc.view_password},
    }
    if server.config.vnc_port is not None:
        host = urllib.parse.urlsplit(base).hostname or "127.0.0.1"
        port = server.vnc_port or server.config.vnc_port
        info["vnc_native_port"] = port
        info["vnc_native"] = (
            f"vnc://{host}:{port} (control password {vnc.control_password}, "
            f"view-only password {vnc.view_password})"
        )
    return info


router = APIRouter()


@router.websocket("/vnc/ws/{session_id}/{secret}")
async def vnc_websocket(ws: WebSocket, session_id: str, secret: str, server: HciServer = Depends(get_server)) -> None:
    # Refusals are a close code after the handshake (4401), which a browser can show, rather than a bare
    # HTTP 403 it cannot tell apart from a network failure. An unknown session and a wrong secret are
    # refused alike, after the same delay: the answer tells nothing about which sessions exist.
    await ws.accept()
    try:
        session = server.sessions.get(session_id)
    except SessionNotFoundError:
        session = None
    role = session.vnc.role_for_token(secret) if session is not None and session.vnc else None
    if session is None or role is None:
        await asyncio.sleep(REFUSAL_DELAY)  # slow down guessing
        await ws.close(code=4401, reason="wrong session or VNC secret")
        return
    stream = WebSocketStream(ws)
    try:
        await viewer_handshake(stream, SECURITY_NONE)  # the URL secret already authenticated the viewer
    except (EOFError, RfbError) as exc:
        log.info("browser viewer handshake failed: %s", exc)
        await stream.close()
        return
    await session.vnc.serve(stream, role, "websocket")


def vnc_of(session: Session) -> VncSession:
    if session.vnc is None:
        raise ConfigError("this server runs without VNC")
    return session.vnc


def control_status(session: Session) -> dict[str, Any]:
    vnc = vnc_of(session)
    return {**vnc.control.status().to_dict(), "viewers": [v.to_dict() for v in vnc.viewers.values()]}


def set_control(session: Session, holder: Literal["human", "agent", "auto"]) -> dict[str, Any]:
    control = vnc_of(session).control
    {"human": control.grant, "agent": control.revoke, "auto": control.auto}[holder]()
    return control_status(session)


@router.get("/control", dependencies=CONTROL)
async def get_control(server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """Who drives the default session's desktop: the agent, or a person over VNC."""
    return control_status(session_for(server, None))


@router.post("/control", dependencies=CONTROL)
async def post_control(holder: Literal["human", "agent", "auto"] = Body(..., embed=True),
                       server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """Give the desktop to people ("human"), to the agent ("agent"), or let them take turns ("auto")."""
    return set_control(session_for(server, None), holder)


@router.get("/sessions/{session_id}/control", dependencies=CONTROL)
async def get_session_control(session_id: str, server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return control_status(session_for(server, session_id))


@router.post("/sessions/{session_id}/control", dependencies=CONTROL)
async def post_session_control(session_id: str, holder: Literal["human", "agent", "auto"] = Body(..., embed=True),
                               server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return set_control(session_for(server, session_id), holder)


@router.get("/vnc", include_in_schema=False)
@router.get("/vnc/", include_in_schema=False)
async def vnc_index(request: Request) -> Any:
    if not NOVNC_DIR.is_dir():
        return JSONResponse(
            {"detail": "the noVNC page is not installed here; on Debian: apt-get install novnc"},
            status_code=503,
        )
    query = request.url.query
    return RedirectResponse(f"/vnc/vnc.html{'?' + query if query else ''}")


@router.get("/vnc/vnc.html", include_in_schema=False)
async def novnc_page() -> Any:
    """Debian's noVNC page with the hand-over banner added (collect_page/vnc_human.js): a control viewer sees the
    agent's request for a person there too."""
    page = NOVNC_DIR / "vnc.html"
    if not page.is_file():
        return JSONResponse({"detail": "the noVNC page is not installed here; on Debian: apt-get install novnc"},
                            status_code=503)
    html = await anyio.to_thread.run_sync(page.read_text)
    return HTMLResponse(html.replace("</body>", '<script src="hci-envs-human.js"></script>\n</body>', 1),
                        headers={"Cache-Control": "no-store"})


@router.get("/vnc/hci-envs-human.js", include_in_schema=False)
async def novnc_human_script() -> Any:
    data = resources.files("hci_envs.server").joinpath("collect_page", "vnc_human.js").read_bytes()
    return Response(data, media_type="text/javascript; charset=utf-8", headers={"Cache-Control": "no-store"})


@router.get("/vnc/package.json", include_in_schema=False)
async def novnc_version() -> dict[str, str]:
    # the noVNC page asks for its version; Debian's package does not ship the file
    return {"name": "@novnc/novnc", "version": "debian"}


def install_vnc(app: FastAPI, server: HciServer) -> None:
    """The VNC routes, the noVNC page's files, and the native port when one is configured."""
    app.include_router(router)
    server.session_services.append(attach_vnc)
    if NOVNC_DIR.is_dir():
        app.mount("/vnc", StaticFiles(directory=NOVNC_DIR, follow_symlink=True), name="novnc")
    if server.config.vnc_port is not None:
        server.startup_hooks.append(lambda: start_native_listener(server))


async def start_native_listener(server: HciServer) -> None:
    """A raw RFB port for native viewers: VNC authentication, where the password picks session and role."""

    failures = asyncio.Lock()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = AsyncioStream(reader, writer)
        peer = peer_of(writer)
        if peer is not None and is_agent_connection(*peer, server.agent_uids):
            await stream.close()  # the agent side of a session: see hci_envs.server.guards
            return
        try:
            challenge, response = await viewer_handshake(stream, SECURITY_VNC)
            assert challenge is not None and response is not None
            match = None
            for session in server.sessions.sessions():
                role = session.vnc.role_for_response(challenge, response) if session.vnc else None
                if role is not None:
                    match = (session, role)
                    break
            if match is None:
                async with failures:  # one guess at a time for the whole port
                    await asyncio.sleep(REFUSAL_DELAY)
                await finish_security(stream, False)
                await stream.close()
                return
            await finish_security(stream, True)
        except (EOFError, RfbError, ConnectionError) as exc:
            log.info("native viewer handshake failed: %s", exc)
            await stream.close()
            return
        session, role = match
        await session.vnc.serve(stream, role, "tcp")

    host = server.config.host
    listener = await asyncio.start_server(handle, host, server.config.vnc_port)
    server.vnc_port = listener.sockets[0].getsockname()[1]
    server.shutdown_hooks.append(listener.close)
