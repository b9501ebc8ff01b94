"""What an agent's programs may connect to over IP: a declared policy, enforced by the kernel per agent account.

Policies (``serve --network`` and ``--allow``, ``Environment(network=...)``):

- ``none`` (the default): no connection anywhere, loopback and the machine's other addresses included, except
  to the agent's own listeners (its desktop's web site, its apps talking to each other over TCP);
- ``allowlist``: ``none``, plus the listed destinations (``HOST``, ``HOST:PORT``, ``CIDR``, ``CIDR:PORT``, IPv6
  in brackets when a port follows; host names are resolved when the policy is made);
- ``open``: whatever the machine reaches.

Unix sockets (the X display, the accessibility bus) are not IP: their files' modes keep them apart.

How: one nftables table, ``inet hci_envs``, in the server's network namespace (a container's own, in an image).
Its output hook matches the owner of the socket that sends each packet (``meta skuid``), so the rules follow
every program of an agent account, whatever it does; nothing polls:

- a connection an agent account begins is judged by its account's chain: the policy's allowed destinations are
  let through; else, TCP to a local address (routed through ``lo``) is let through marked with the account's
  uid (conntrack's mark), and anything else is rejected at once (ECONNREFUSED);
- the answer to a marked connection must come from the same account: an answer from another user's listener
  (a SYN-ACK is its listener's) is dropped and the connection marked refused, so that the agent's next try of
  its SYN (within a second) is answered with a reset. Nothing the agent sends reaches the other program, whose
  side of the connection never completes.

Each account has a chain of its own (``uid_<uid>``) that jumps to its policy's chain; an account no server has
given a policy (between sessions, or after a server was killed) has ``none``. The table is shared by the
servers of the machine, which change it under a lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError

TABLE = "hci_envs"
#: conntrack mark bits of a connection an agent account began to a local address: the flag, and the account's
#: uid below it; the flag alone marks a connection refused.
FLAG = 0x40000000
#: Bumped when the table's shape changes: a table of another version is replaced.
VERSION = "hci-envs egress 1"

Mode = Literal["none", "allowlist", "open"]


@dataclass(frozen=True)
class Destination:
    """One allowed destination: an address or network, and a port (None: every port and protocol)."""

    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    port: int | None = None
    written: str = ""

    def rule(self) -> str:
        family = "ip" if self.network.version == 4 else "ip6"
        if self.port is None:
            return f"{family} daddr {self.network} accept"
        return f"{family} daddr {self.network} meta l4proto {{ tcp, udp }} th dport {self.port} accept"

    @classmethod
    def parse(cls, text: str) -> list[Destination]:
        """``text`` as destinations (a host name gives one per address it resolves to); raises ConfigError."""
        entry = text.strip()
        host, port = entry, None
        if entry.startswith("["):  # [v6]:port or [v6]
            close = entry.find("]")
            if close < 0:
                raise ConfigError(f"allowed destination {text!r}: no closing bracket", field="network")
            host, rest = entry[1:close], entry[close + 1:]
            if rest:
                if not rest.startswith(":"):
                    raise ConfigError(f"allowed destination {text!r}: expected ':PORT' after ']'", field="network")
                port = rest[1:]
        elif entry.count(":") == 1:
            host, port = entry.split(":")
        number = None
        if port is not None:
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(f"allowed destination {text!r}: the port must be 1 to 65535", field="network")
            number = int(port)
        if not host:
            raise ConfigError(f"allowed destination {text!r}: no host", field="network")
        try:
            return [cls(ipaddress.ip_network(host, strict=False), number, entry)]
        except ValueError:
            pass
        if not re.fullmatch(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*\.?", host):
            raise ConfigError(f"allowed destination {text!r}: not an address, a network (CIDR) or a host name",
                              field="network")
        try:
            found = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
        except OSError as exc:
            raise ConfigError(f"allowed destination {text!r}: the host name does not resolve here ({exc})",
                              field="network") from None
        return [cls(ipaddress.ip_network(address.split("%")[0]), number, entry) for address in sorted(found)]


@dataclass(frozen=True)
class NetworkPolicy:
    """What an agent account's programs may connect to (see the module's words)."""

    mode: Mode = "none"
    allow: tuple[Destination, ...] = field(default=())

    @classmethod
    def make(cls, value: NetworkPolicy | str | Sequence[str] | None) -> NetworkPolicy:
        """A policy from its name (``none``, ``open``), a list of allowed destinations, or a policy; None: the
        default (``none``)."""
        if isinstance(value, NetworkPolicy):
            return value
        if value is None:
            return cls()
        if isinstance(value, str):
            if value in ("none", "open"):
                return cls(value)  # type: ignore[arg-type]
            if value == "allowlist":
                raise ConfigError("network 'allowlist' needs its destinations (serve --allow HOST[:PORT], or "
                                  "network=[...])", field="network")
            raise ConfigError(f"network must be 'none', 'open' or a list of allowed destinations, not {value!r}",
                              field="network")
        entries = [entry for entry in value]
        if not entries or not all(isinstance(entry, str) for entry in entries):
            raise ConfigError("an allowlist is a non-empty list of 'HOST[:PORT]' or 'CIDR[:PORT]' strings",
                              field="network")
        return cls("allowlist", tuple(d for entry in entries for d in Destination.parse(entry)))

    @property
    def chain(self) -> str:
        """The name of this policy's chain in the table."""
        if self.mode != "allowlist":
            return self.mode
        digest = hashlib.sha256("\n".join(d.rule() for d in self.allow).encode()).hexdigest()[:12]
        return f"allow_{digest}"

    def rules(self) -> list[str]:
        if self.mode == "open":
            return ["accept"]
        return [d.rule() for d in self.allow]

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.mode, "allow": sorted({d.written for d in self.allow})}


def status(policy: NetworkPolicy, isolated: bool) -> dict[str, Any]:
    """The policy and what enforces it, as ``state()`` and ``/metadata`` report them."""
    if not isolated:
        how = "none: the agent side runs as the server's user (no account to confine)"
    else:
        how = egress().mechanism()
    return {**policy.to_dict(), "enforced_by": how}


class Egress:
    """The machine's table and its accounts' policies (one per process: :func:`egress`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None  # why it cannot be enforced here (None: it can)
        self._ready: frozenset[int] | None = None  # the agent uids the table was made for

    def mechanism(self) -> str:
        reason = self.unavailable()
        if reason:
            return f"none here: {reason}"
        return "nftables: the owner of each packet's socket, per agent account (table inet hci_envs)"

    def unavailable(self) -> str | None:
        """Why the policy cannot be enforced here, or None."""
        from .accounts import agent_uids

        with self._lock:
            if self._ready is None and self._reason is None:
                try:
                    self._make_table(agent_uids())
                except ConfigError as exc:
                    self._reason = exc.message
            return self._reason

    def assign(self, uid: int, policy: NetworkPolicy) -> None:
        """Give agent account ``uid`` ``policy`` (from its next packet on); raises ConfigError where it cannot."""
        from .accounts import agent_uids

        reason = self.unavailable()
        if reason:
            raise ConfigError(f"the network policy cannot be enforced here: {reason}", field="network")
        with self._lock:
            if uid not in (self._ready or ()):
                self._make_table(agent_uids() | {uid})
            lines = []
            if policy.mode != "none":
                lines += [f"add chain inet {TABLE} {policy.chain}", f"flush chain inet {TABLE} {policy.chain}",
                          *(f"add rule inet {TABLE} {policy.chain} {rule}" for rule in policy.rules())]
            lines += [f"add chain inet {TABLE} uid_{uid}", f"flush chain inet {TABLE} uid_{uid}"]
            if policy.mode != "none":
                lines.append(f"add rule inet {TABLE} uid_{uid} jump {policy.chain}")
            _nft("\n".join(lines))

    def clear(self, uid: int) -> None:
        """Back to ``none`` for ``uid`` (its session ended)."""
        if self.unavailable() is None:
            self.assign(uid, NetworkPolicy())

    def _make_table(self, uids: Iterable[int]) -> None:
        """The table with a chain per agent account, made (or made again for new accounts) under the machine's
        lock; kept as it is where another server made it for the same accounts."""
        uids = frozenset(uids)
        if os.geteuid() != 0 and not _has_net_admin():
            raise ConfigError("the server is not root and has no CAP_NET_ADMIN (its image or `serve` as root has)")
        if shutil.which("nft") is None and not os.path.exists("/usr/sbin/nft"):
            raise ConfigError("nftables is not installed (sudo apt-get install nftables)")
        with _machine_lock():
            listed = _nft(f"list table inet {TABLE}", check=False)
            if VERSION in listed and all(f"chain uid_{uid} " in listed for uid in uids):
                self._ready = uids
                return
            _nft(_table_script(uids, replace=f"table inet {TABLE}" in listed))
            self._ready = uids


def _table_script(uids: frozenset[int], replace: bool) -> str:
    marks = ", ".join(f"{uid} : {FLAG | uid:#x}" for uid in sorted(uids))
    own = ", ".join(f"{FLAG | uid:#x} . {uid}" for uid in sorted(uids))
    chains = ", ".join(f"{uid} : jump uid_{uid}" for uid in sorted(uids))
    elements = lambda text: f" elements = {{ {text} }}" if text else ""  # noqa: E731 - a local spelling
    lines = [f"add table inet {TABLE}", f"delete table inet {TABLE}"] if replace else []
    lines += [
        f"table inet {TABLE} {{",
        f'  comment "{VERSION}"',
        f"  map marks {{ typeof meta skuid : ct mark;{elements(marks)} }}",
        f"  set own {{ typeof ct mark . meta skuid;{elements(own)} }}",
        f"  map accounts {{ type uid : verdict;{elements(chains)} }}",
        "  chain output {",
        "    type filter hook output priority filter; policy accept;",
        # an answer to a connection an agent account began to a local address, by anyone but that account
        f"    ct direction reply ct mark & {FLAG:#x} == {FLAG:#x} ct mark . meta skuid != @own "
        f"ct mark set {FLAG:#x} drop",
        f"    ct direction original ct mark {FLAG:#x} meta l4proto tcp reject with tcp reset",
        "    meta skuid @marks jump agent",
        "  }",
        "  chain agent {",
        "    ct state established,related accept",
        "    meta skuid vmap @accounts",
        "    oif lo meta l4proto tcp ct state new ct mark set meta skuid map @marks accept",
        "    meta l4proto tcp reject with tcp reset",
        "    reject with icmpx admin-prohibited",
        "  }",
        *(f"  chain uid_{uid} {{ }}" for uid in sorted(uids)),
        "}",
    ]
    return "\n".join(lines) + "\n"


def _nft(script: str, check: bool = True) -> str:
    program = shutil.which("nft") or "/usr/sbin/nft"
    try:
        done = subprocess.run([program, "-f", "-"], input=script, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"nft could not run: {exc}") from None
    if done.returncode != 0 and check:
        raise ConfigError(f"nft refused the rules: {done.stderr.strip()[:300]}")
    return done.stdout


def _has_net_admin() -> bool:
    from .accounts import effective_capabilities

    return bool(effective_capabilities() & (1 << 12))


class _machine_lock:
    """The lock of the machine's servers around a change of the table (a file in the run directory)."""

    def __enter__(self) -> None:
        from .accounts import run_dir

        directory = run_dir()
        directory.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(directory / "network.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)


_EGRESS: Egress | None = None


def egress() -> Egress:
    global _EGRESS
    if _EGRESS is None:
        _EGRESS = Egress()
    return _EGRESS
