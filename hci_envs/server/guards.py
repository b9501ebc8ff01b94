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
import ipaddress
import logging
import socket
import struct
from collections.abc import Callable
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .config import is_loopback

log = logging.getLogger(__name__)

#: Seconds a client has to send a request's headers.
HEADER_TIMEOUT = 10.0


# -- who owns the other end of a local TCP connection -----------------------------------------------------
def _proc_net_key(host: str, port: int) -> str | None:
    """``host:port`` as /proc/net/tcp{,6} writes it (addresses as 32-bit words in host byte order)."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    packed = address.packed
    words = [int.from_bytes(packed[i:i + 4], "little") for i in range(0, len(packed), 4)]
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2
_NETLINK_SOCK_DIAG = 4


def _diag_address(host: str) -> tuple[int, bytes] | None:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # a dual-stack listener: the client's socket is an IPv4 one
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    return family, address.packed.ljust(16, b"\0")


def _owner_by_netlink(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """One sock_diag request for exactly this connection: the kernel looks it up by its addresses (O(1),
    where /proc/net/tcp walks the whole hash table). Raises OSError where sock_diag is unavailable."""
    src, dst = _diag_address(client[0]), _diag_address(server[0])
    if src is None or dst is None or src[0] != dst[0]:
        return None
    # struct inet_diag_req_v2: family, protocol, ext, pad, states; inet_diag_sockid: sport, dport (big
    # endian), src[16], dst[16], interface, cookie (none: 2 x ~0)
    request = struct.pack("=BBBxI", src[0], socket.IPPROTO_TCP, 0, 0xFFFFFFFF)
    request += struct.pack("!HH", client[1], server[1]) + src[1] + dst[1] + struct.pack("=III", 0, 0xFFFFFFFF,
                                                                                          0xFFFFFFFF)
    header = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, 1, 1, 0)  # NLM_F_REQUEST
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(1.0)
        nl.sendto(header + request, (0, 0))
        reply = nl.recv(8192)
    length, kind = struct.unpack_from("=IH", reply, 0)
    if kind == _NLMSG_ERROR or length < 16 + 72:
        return None  # no such connection here (its client end is on another machine)
    # struct inet_diag_msg: 4 bytes, sockid (48), expires, rqueue, wqueue, uid, inode
    (uid,) = struct.unpack_from("=I", reply, 16 + 4 + 48 + 12)
    return uid


_NETLINK_WORKS = True

Connection = tuple[tuple[str, int], tuple[str, int]]
_UNTRACKED = object()
#: The owners of the client ends of the HTTP connections open now, found at a connection's first request and
#: forgotten when it closes (HeaderTimeoutProtocol keeps this): a socket's owner is set when it is created, so
#: one lookup serves every request of a keep-alive connection. Only connections known to be open are kept: an
#: address pair outlives its connection and may be someone else's later.
_open_connections: dict[Connection, int | None] = {}


def socket_owner(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid that owns the client end of the TCP connection ``client`` -> ``server``, if that end is on
    this machine (in this network namespace); else None."""
    known = _open_connections.get((client, server), _UNTRACKED)
    if isinstance(known, int):
        return known
    owner = _look_up_owner(client, server)
    if known is None and owner is not None:
        _open_connections[(client, server)] = owner
    return owner


def _look_up_owner(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    global _NETLINK_WORKS
    if _NETLINK_WORKS:
        try:
            return _owner_by_netlink(client, server)
        except OSError as exc:
            log.info("sock_diag is not available (%s); reading /proc/net/tcp instead", exc)
            _NETLINK_WORKS = False
    return _owner_by_proc(client, server)


def _owner_by_proc(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    local, remote = _proc_net_key(*client), _proc_net_key(*server)
    if local is None or remote is None:
        return None
    tables = ("/proc/net/tcp6", "/proc/net/tcp") if len(local) > 13 else ("/proc/net/tcp", "/proc/net/tcp6")
    mapped = None
    if len(local) == 13:  # an IPv4 client of a dual-stack socket appears as ::ffff:a.b.c.d in tcp6
        mapped = (_proc_net_key("::ffff:" + client[0], client[1]), _proc_net_key("::ffff:" + server[0], server[1]))
    for table in tables:
        try:
            with open(table, "rb") as f:
                data = f.read()
        except OSError:
            continue
        for wanted in ((local, remote), mapped):
            if wanted is None or wanted[0] is None:
                continue
            needle = f" {wanted[0]} {wanted[1]} ".encode()
            at = data.find(needle)
            if at >= 0:
                line = data[at:data.find(b"\n", at)].split()
                # local rem st tx:rx tr:when retrnsmt uid ...
                return int(line[6])
    return None


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str) -> None:
    if scope["type"] == "http":
        body = {"error": {"code": code, "message": message}, "detail": message}
        await JSONResponse(body, status_code=status)(scope, receive, send)
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})


def is_local_address(host: str) -> bool:
    """Whether ``host`` is an address of this machine (in this network namespace): only local processes can
    send from one, since the kernel drops packets from outside that claim a local source."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if address.is_loopback:
        return True
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((str(address), 0))  # succeeds only for an address of one of our interfaces
        except OSError:
            return False
    return True


def _owner_by_port(client_port: int, server: tuple[str, int]) -> int | None:
    """The owner of a socket connected to ``server`` from local port ``client_port``, whatever its local
    address: a connection whose source address was rewritten on the way (a masquerading rule for a
    container network applies to loopback traffic too) has no socket with the tuple the server sees."""
    remote = _proc_net_key(*server)
    if remote is None:
        return None
    owner = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, "rb") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 7 and fields[2].decode() == remote and int(fields[1].rsplit(b":", 1)[1], 16) == client_port:
                owner = int(fields[7])
    return owner


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
    owner = _owner_by_port(client[1], server)
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
