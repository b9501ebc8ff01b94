"""What the server refuses before any route runs: agent accounts, foreign web pages, slow clients.

* :class:`PeerGuard`: a connection made by a process of an agent account (a session's apps, its bash, a
  browser it drives) is refused, on every route, whatever token it carries: the agent's way in is its MCP
  endpoint, used by its harness, never the desktop itself. The kernel says who owns the client's socket (a
  sock_diag netlink lookup of that exact connection, or ``/proc/net/tcp`` where netlink is unavailable), so
  this holds on a tokenless loopback server too, where any local user could otherwise reset the desktop or
  read another session's state.
* :class:`HostGuard`: unless both a control token and agent tokens are set, a request whose Origin is not a
  loopback page (or is ``null``: sandboxed frames, ``file:`` pages) is refused, and so is one whose Host is
  not loopback on a loopback-bound server (DNS rebinding).
* :class:`HeaderTimeoutProtocol`: uvicorn's HTTP protocol with a deadline for a request's headers, from the
  moment the connection opens or the previous response ends: a client that connects and sends nothing, or
  trickles its headers, is cut off instead of holding a connection for ever. It also keeps the connections
  open now, so that the kernel is asked about a connection's owner once, not at each of its requests.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ..sandbox import peers
from ..sandbox.peers import Connection, _open_connections, is_local_address, socket_owner
from .config import is_loopback

log = logging.getLogger(__name__)

#: Seconds a client has to send a request's headers.
HEADER_TIMEOUT = 10.0


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str) -> None:
    if scope["type"] == "http":
        body = {"error": {"code": code, "message": message}, "detail": message}
        await JSONResponse(body, status_code=status)(scope, receive, send)
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})


def is_agent_connection(client: tuple[str, int], server: tuple[str, int], agent_uids: frozenset[int]) -> bool:
    """Whether the TCP connection ``client`` -> ``server`` was made by a process of an agent account. Every
    connection is asked about, whatever its source address (a local process may bind any of the machine's
    addresses); one from this machine whose owner cannot be found counts as an agent's (fail closed)."""
    if not agent_uids:
        return False
    owner = socket_owner(client, server)
    if owner is not None:
        return owner in agent_uids
    if not is_local_address(client[0]):
        return False  # a client on another machine
    owner = peers._owner_by_port(client[1], server)
    return owner is None or owner in agent_uids


class PeerGuard:
    """Refuses connections whose client socket belongs to an agent account (see the module's docstring)."""

    def __init__(self, app: ASGIApp, agent_uids: Callable[[], frozenset[int]]) -> None:
        self.app = app
        self.agent_uids = agent_uids

    def refuses(self, client: Any, server: Any) -> bool:
        if not client or not server:
            return False
        return is_agent_connection(tuple(client), tuple(server), self.agent_uids())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self.refuses(scope.get("client"), scope.get("server")):
            await _refuse(scope, receive, send, 403, "AGENT_PEER",
                          "refused: this connection comes from the agent side of a session")
            return
        await self.app(scope, receive, send)


class HostGuard:
    """Refuses foreign web pages (Origin) and, on loopback, foreign Host names (see the module's docstring)."""

    def __init__(self, app: ASGIApp, *, check_origin: bool, check_host: bool) -> None:
        self.app = app
        self.check_origin = check_origin
        self.check_host = check_host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (self.check_origin or self.check_host) and scope["type"] in ("http", "websocket"):
            host = origin = None
            for key, value in scope.get("headers", []):
                if key == b"host":
                    host = value.decode("latin-1")
                elif key == b"origin":
                    origin = value.decode("latin-1")
            if self.check_host and host and not is_loopback(_hostname(host)):
                await _refuse(scope, receive, send, 403, "FORBIDDEN_HOST",
                              "request refused: this server answers only loopback host names")
                return
            if self.check_origin and origin is not None and not _loopback_origin(origin):
                await _refuse(scope, receive, send, 403, "FORBIDDEN_ORIGIN",
                              "request refused: web pages other than this machine's may not call this server")
                return
        await self.app(scope, receive, send)


def _hostname(host: str) -> str:
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _loopback_origin(origin: str) -> bool:
    """An Origin of a page served from this machine (http(s)://loopback[:port]); ``null`` is not one."""
    scheme, sep, rest = origin.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return False
    return is_loopback(_hostname(rest.split("/", 1)[0]))


# -- a deadline for request headers -------------------------------------------------------------------------
def header_timeout_protocol(timeout: float = HEADER_TIMEOUT) -> type | None:
    """uvicorn's httptools protocol with a header deadline (None if httptools is not installed)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is part of the server extra
        return None

    class HeaderTimeoutProtocol(HttpToolsProtocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._header_timer: asyncio.TimerHandle | None = None
            self._connection: Connection | None = None
            if self.client and self.server:  # the scope's client and server, as PeerGuard reads them
                self._connection = (tuple(self.client), tuple(self.server))
                _open_connections[self._connection] = None
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(timeout, self._headers_late)

        def _disarm(self) -> None:
            timer, self._header_timer = getattr(self, "_header_timer", None), None
            if timer is not None:
                timer.cancel()

        def _headers_late(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                log.info("closing a connection that sent no complete request headers within %gs", timeout)
                self.transport.close()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's headers are due within the timeout too

        def handle_websocket_upgrade(self) -> None:
            self._disarm()
            self._forget()  # the connection now belongs to a WebSocket protocol: no connection_lost comes here
            super().handle_websocket_upgrade()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._forget()
            super().connection_lost(exc)

        def _forget(self) -> None:
            if self._connection is not None:
                _open_connections.pop(self._connection, None)
                self._connection = None

    return HeaderTimeoutProtocol


def peer_of(writer: asyncio.StreamWriter) -> tuple[tuple[str, int], tuple[str, int]] | None:
    """(client, server) addresses of a raw TCP connection (the native VNC port)."""
    try:
        client = writer.get_extra_info("peername")
        server = writer.get_extra_info("sockname")
    except (OSError, socket.error):
        return None
    if not client or not server:
        return None
    return (client[0], client[1]), (server[0], server[1])
