"""What every route module needs, written once: the running server, the control-token check, the session a
route names, and the error response. Route modules import this, never the app that includes them."""

from __future__ import annotations

import hmac
import json
from typing import TYPE_CHECKING, Any

from fastapi import Depends, WebSocket, WebSocketDisconnect
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse

from ..errors import AuthError, HciEnvsError, wire_form

if TYPE_CHECKING:
    from .core import HciServer
    from .sessions import Session


def bearer(headers: Any) -> str | None:
    value = headers.get("authorization")
    if value and value.lower().startswith("bearer "):
        return value[7:].strip()
    return None


def get_server(connection: HTTPConnection) -> HciServer:
    """The server of this app (an HTTP request or a WebSocket alike)."""
    return connection.app.state.hci


def check_control_token(server: HciServer, presented: str | None) -> None:
    token = server.config.control_token
    if token is None:
        return
    if presented is None or not hmac.compare_digest(presented.encode(), token.encode()):
        raise AuthError("missing or wrong control token")


def require_control(connection: HTTPConnection, server: HciServer = Depends(get_server)) -> None:
    """The control token, from ``Authorization: Bearer`` (WebSockets may pass ``?token=`` instead)."""
    presented = bearer(connection.headers)
    if presented is None and connection.scope["type"] == "websocket":
        presented = connection.query_params.get("token")
    check_control_token(server, presented)


#: For routes of the control plane: ``dependencies=CONTROL``.
CONTROL = [Depends(require_control)]


def session_for(server: HciServer, session_id: str | None) -> Session:
    """The session a route names, or the default session."""
    return server.sessions.get(session_id) if session_id else server.sessions.default()


async def next_json(ws: WebSocket) -> tuple[Any, Exception | None] | None:
    """The next text frame as JSON: ``(message, None)``, ``(None, why it is not JSON)``, or None once the
    peer has gone. Nesting deeper than the parser goes is a parse error, not a crash."""
    try:
        raw = await ws.receive_text()
    except WebSocketDisconnect:
        return None
    try:
        return json.loads(raw), None
    except (ValueError, RecursionError) as exc:
        return None, exc


def error_response(exc: HciEnvsError) -> JSONResponse:
    status = wire_form(exc).http_status
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, AuthError) else None
    return JSONResponse({"error": exc.to_dict(), "detail": exc.message}, status_code=status, headers=headers)
