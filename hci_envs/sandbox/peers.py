"""Who owns the other end of a local TCP connection: the kernel's table of sockets (a sock_diag netlink lookup
of that exact connection, or ``/proc/net/tcp`` where netlink is unavailable) names the uid that created the
client's socket. The server's guards judge agents by it (hci_envs.server.guards), OSWorld's guest API and its
tunnel judge the desktop's owner by it. Standard library only: OSWorld's harness side uses it too."""

from __future__ import annotations

import ipaddress
import logging
import socket
import struct

log = logging.getLogger(__name__)


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
