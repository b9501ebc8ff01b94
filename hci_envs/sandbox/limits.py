"""Per-session limits the kernel enforces: how many processes (threads count too), how much memory and what
share of the CPU each agent account may take, so that one agent cannot take the machine, the server or the
other sessions down.

The mechanism is the kernel's control groups, a group per episode of an agent account under the server's own
group of each controller (so a limit set on the server, by a container or a CI host, still bounds them all;
and a new episode is not charged for the zombies of the last one's killed processes, which count until init
reaps them):
cgroup v2 where the server's group is writable (``pids.max``, ``memory.max``, ``cpu.weight``), else the v1
controllers a root server can write (``pids.max``, ``memory.limit_in_bytes``, ``cpu.shares``). The agent's
programs are put in their account's group by the root-run start of each program (before it becomes the
agent), and everything they start stays there: a group is left only by writing to another group's files,
which are root's. Nothing polls: the kernel refuses the fork past ``processes`` and stops (OOM-kills) the
largest process of the group past ``memory``; what it did is read back from the group's event counters
(``events``) and said in the session's next observation.

Where neither is available (a server that is not root, in a container for one), the limits are the
container's own (Docker's ``--memory``, ``--pids-limit``) and the process limit an RLIMIT_NPROC per account;
:func:`mechanism` says which holds.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..protocol import LimitsRequest
from ..protocol import parse_size as protocol_parse_size

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: The group, under the server's own, that holds one group per agent account.
GROUP = "hci-envs-agents"


@dataclass(frozen=True)
class Limits:
    """What one session's agent side may take. ``None``: no limit of that kind."""

    processes: int | None = None
    memory: int | None = None  # bytes
    cpu_weight: int = 100  # a share against the other sessions (cgroup v2's weight; 100 is the default)
    disk: int | None = None  # bytes: the home, and the runtime folder (with TMPDIR), each; and any one file

    @classmethod
    def default(cls, max_sessions: int = 8) -> Limits:
        """Derived from the machine: each session may take a fair part of its memory (at least 2 GiB, and never
        more than 3/4 of it, so the server and the rest keep room) and 1024 processes and threads."""
        total = _total_memory()
        share = max(2 * 1024**3, total // max(1, max_sessions))
        memory = min(share, total * 3 // 4) if total else None
        return cls(processes=1024, memory=memory, disk=_disk_for(memory) if memory else 1024**3)

    @classmethod
    def none(cls) -> Limits:
        """No limit: the agent side may take the whole machine (``serve --no-limits``)."""
        return cls(processes=None, memory=None, disk=None)

    @property
    def any(self) -> bool:
        return self.processes is not None or self.memory is not None or self.cpu_weight != 100 or \
            self.disk is not None

    @classmethod
    def from_options(cls, options: dict[str, Any] | None, base: Limits | None = None) -> Limits:
        """``{"processes": N, "memory": "2G" | bytes, "cpu_weight": W, "disk": "1G" | bytes}`` over ``base`` (or the
        defaults)."""
        base = base or cls.default()
        if not options:
            return base
        unknown = set(options) - {"processes", "memory", "cpu_weight", "disk"}
        if unknown:
            raise ConfigError(f"unknown limits: {', '.join(sorted(unknown))} (processes, memory, cpu_weight, disk)",
                              field="limits")
        processes = options.get("processes", base.processes)
        memory = parse_size(options["memory"]) if "memory" in options else base.memory
        weight = options.get("cpu_weight", base.cpu_weight)
        disk = parse_size(options["disk"]) if "disk" in options else base.disk
        if "disk" not in options and "memory" in options and memory and base.disk is not None and \
                (base.memory is None or base.disk == _disk_for(base.memory)):
            disk = _disk_for(memory)  # the default follows the memory asked for; a disk limit someone set stays
        if disk is not None and disk < 16 * 1024**2:
            raise ConfigError(f"limits.disk is at least 16M, or null, not {disk!r}", field="limits")
        if processes is not None and (isinstance(processes, bool) or not isinstance(processes, int)
                                      or processes < 16):
            raise ConfigError(f"limits.processes is an integer of at least 16, or null, not {processes!r}",
                              field="limits")
        if memory is not None and memory < 64 * 1024**2:
            raise ConfigError(f"limits.memory is at least 64M, or null, not {memory!r}", field="limits")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 10_000:
            raise ConfigError(f"limits.cpu_weight is an integer from 1 to 10000, not {weight!r}", field="limits")
        return cls(processes, memory, weight, disk)

    def over(self, request: LimitsRequest | None) -> Limits:
        """These limits with what a start state asks for over them (:class:`~hci_envs.protocol.LimitsRequest`)."""
        return self if request is None else Limits.from_options(request.asked(), base=self)

    def to_dict(self) -> dict[str, Any]:
        return {"processes": self.processes, "memory": self.memory, "cpu_weight": self.cpu_weight,
                "disk": self.disk}


def parse_size(value: Any) -> int | None:
    """Bytes from ``2G``, ``512M``, ``1.5G``, a number of bytes, or None."""
    try:
        return protocol_parse_size(value)
    except ValueError as exc:
        raise ConfigError(str(exc), field="limits") from None


def _disk_for(memory: int) -> int:
    """The default disk limit for a memory limit: the disk's files are in memory (tmpfs) and count against it,
    so half of it, at most 4 GiB."""
    return max(16 * 1024**2, min(memory // 2, 4 * 1024**3))


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


class AccountGroups:
    """The control groups of one agent account's episode: made with its limits, events read back, and retired
    when the episode's processes are gone (:meth:`renewed`): the next episode starts in fresh groups, since
    the killed processes' zombies count against the process limit until init reaps them."""

    def __init__(self, uid: int, paths: dict[str, Path], version: int) -> None:
        self.uid = uid
        self.paths = paths  # controller ("pids", "memory", "cpu") -> the account's group folder
        self.version = version
        self._seen: dict[str, int] = {}

    def apply(self, limits: Limits) -> None:
        """Write ``limits`` (the episode's), and start counting what the kernel enforces from here."""
        v2 = self.version == 2
        values = {
            "pids": ("pids.max", "max" if limits.processes is None else str(limits.processes)),
            "memory": ("memory.max" if v2 else "memory.limit_in_bytes",
                       ("max" if v2 else "-1") if limits.memory is None else str(limits.memory)),
            "cpu": ("cpu.weight" if v2 else "cpu.shares",
                    str(limits.cpu_weight if v2 else max(2, limits.cpu_weight * 1024 // 100))),
        }
        # v1 keeps memory+swap at or above memory: lift it first, then set both (where swap is accounted)
        memsw = self.paths["memory"] / "memory.memsw.limit_in_bytes" if not v2 and "memory" in self.paths else None
        if memsw is not None and not memsw.exists():
            memsw = None
        try:
            if memsw is not None:
                memsw.write_text("-1")
            for controller, (name, value) in values.items():
                if controller in self.paths:
                    (self.paths[controller] / name).write_text(value)
            if memsw is not None and limits.memory is not None:
                memsw.write_text(str(limits.memory))  # no swap beyond the memory limit
        except OSError as exc:
            raise ConfigError(f"cannot set the limits of agent account {self.uid} ({exc.filename}: "
                              f"{exc.strerror or exc})", field="limits") from None
        self._seen = self.counters()

    def renewed(self, limits: Limits) -> AccountGroups:
        """Fresh groups for the account's next episode, with ``limits``; these are removed once empty."""
        fresh = hierarchy().account(self.uid)
        if fresh is None:  # none could be made: the episode stays in these (never in groups being removed)
            return self
        self.retire()
        fresh.apply(limits)
        return fresh

    def retire(self) -> None:
        """Remove these groups, now or once the last zombie in them has been reaped."""
        with _DRAINING_LOCK:
            _DRAINING.extend(self.paths.values())
        _remove_drained()

    def procs_files(self) -> list[str]:
        """The files a program's start writes its pid into, one per controller."""
        return sorted(str(path / "cgroup.procs") for path in set(self.paths.values()))

    def counters(self) -> dict[str, int]:
        """How often the kernel has enforced each limit so far: refused forks, OOM kills."""
        out: dict[str, int] = {}
        pids = self.paths.get("pids")
        if pids is not None:
            out["processes"] = _event(pids / "pids.events", "max")  # the same file in v1 and v2
        memory = self.paths.get("memory")
        if memory is not None:
            out["memory"] = _event(memory / ("memory.events" if self.version == 2 else "memory.oom_control"),
                                   "oom_kill")
        return out

    def enforced_since_apply(self) -> dict[str, int]:
        """What the kernel enforced since the last :meth:`apply` or call of this: ``{"memory": 1}`` after an
        OOM kill, say; empty when nothing."""
        now = self.counters()
        fresh = {k: v - self._seen.get(k, 0) for k, v in now.items() if v > self._seen.get(k, 0)}
        self._seen = now
        return fresh


def _event(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


class _Hierarchy:
    """Where this machine lets this process make groups, found once."""

    def __init__(self) -> None:
        self.version = 0
        self.bases: dict[str, Path] = {}
        self.reason = ""
        self._detect()

    def _detect(self) -> None:
        if os.geteuid() != 0:
            self.reason = "the server is not root (a container's own limits hold, and RLIMIT_NPROC)"
            return
        own = _own_groups()
        unified = CGROUP_ROOT / own.get("", "/").lstrip("/")
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            wanted = {"pids", "memory", "cpu"}
            enabled = set((unified / "cgroup.controllers").read_text().split()) if unified.exists() else set()
            if wanted <= enabled and self._make(unified / GROUP, version=2, controllers=wanted):
                self.version = 2
                self.bases = {c: unified / GROUP for c in wanted}
                return
        bases = {}
        for controller in ("pids", "memory", "cpu"):
            mount = CGROUP_ROOT / controller
            if not (mount / "cgroup.procs").exists():
                continue
            base = mount / own.get(controller, "/").lstrip("/") / GROUP
            if self._make(base, version=1, controllers={controller}):
                bases[controller] = base
        if bases:
            self.version, self.bases = 1, bases
        else:
            self.reason = self.reason or "no control group controller this process can write"

    def _make(self, base: Path, *, version: int, controllers: set[str]) -> bool:
        try:
            base.mkdir(exist_ok=True)
            if version == 2:  # hand the controllers down to the accounts' groups
                (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in sorted(controllers)))
            return True
        except OSError as exc:
            self.reason = f"cannot make {base} ({exc.strerror or exc})"
            return False

    def account(self, uid: int) -> AccountGroups | None:
        """New groups for an episode of account ``uid`` (named for the account, this server and the episode)."""
        if not self.bases:
            return None
        _remove_drained()
        paths = {}
        name = f"uid-{uid}-{os.getpid()}-{next(_EPISODES)}"
        for controller, base in self.bases.items():
            path = base / name
            try:
                path.mkdir(exist_ok=True)
            except OSError as exc:
                log.warning("cannot make the control group %s: %s", path, exc)
                return None
            paths[controller] = path
        return AccountGroups(uid, paths, self.version)


def _own_groups() -> dict[str, str]:
    """This process's group in each hierarchy: controller name ('' for v2's unified one) -> path."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _id, names, path = line.split(":", 2)
        for name in names.split(",") if names else [""]:
            out[name] = path
    return out


_HIERARCHY: _Hierarchy | None = None
_EPISODES = itertools.count(1)
#: Retired groups not yet empty (a zombie is charged to its group until init reaps it): removed when they are.
_DRAINING: list[Path] = []
_DRAINING_LOCK = threading.Lock()  # the spare desktop's thread retires groups too


@atexit.register
def _remove_drained() -> None:
    with _DRAINING_LOCK:
        for path in list(_DRAINING):
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                continue  # still holds a task
            _DRAINING.remove(path)


def hierarchy() -> _Hierarchy:
    global _HIERARCHY
    if _HIERARCHY is None:
        _HIERARCHY = _Hierarchy()
    return _HIERARCHY


def shared_bounds() -> dict[str, Any]:
    """The bounds of the server's own control group, which every session's agent side shares with the server:
    a container's (Docker's ``--memory``, ``--pids-limit``, ``--cpus``) or a CI host's. ``None``: unbounded."""
    own = _own_groups()
    v2 = (CGROUP_ROOT / "cgroup.controllers").exists()

    def read(controller: str, *names: str) -> list[str] | None:
        mount = CGROUP_ROOT if v2 else CGROUP_ROOT / controller
        folder = mount / own.get("" if v2 else controller, "/").lstrip("/")
        if not folder.is_dir():  # a container sees its own group at the mount's root, whatever its path says
            folder = mount
        try:
            return [(folder / name).read_text().strip() for name in names]
        except OSError:
            return None

    def number(text: str | None, unbounded: int = 2**62) -> int | None:
        return None if text is None or text == "max" or not text.lstrip("-").isdigit() or int(text) < 0 \
            or int(text) >= unbounded else int(text)

    memory = read("memory", "memory.max" if v2 else "memory.limit_in_bytes")
    pids = read("pids", "pids.max")
    cpu = read("cpu", "cpu.max") if v2 else read("cpu", "cpu.cfs_quota_us", "cpu.cfs_period_us")
    quota = cpu[0].split() if v2 and cpu else cpu
    cpus = None
    if quota and len(quota) == 2 and number(quota[0]) and number(quota[1]):
        cpus = round(int(quota[0]) / int(quota[1]), 2)
    return {"memory": number(memory[0]) if memory else None, "processes": number(pids[0]) if pids else None,
            "cpus": cpus}


def status(limits: Limits, isolated: bool) -> dict[str, Any]:
    """The limits and what enforces them, as ``state()`` and ``/metadata`` report them."""
    from .space import shared_tmp, unavailable

    bounds = shared_bounds()
    how = mechanism(bounds) if isolated else "none: the agent side runs as the server's user (no account to limit)"
    if not limits.any:
        how = "none: no limits were asked for"
    disk = "none: no disk limit was asked for" if limits.disk is None else \
        "none: the agent side runs as the server's user (no account to limit)" if not isolated else \
        f"none here: {unavailable()}" if unavailable() else \
        f"tmpfs per session (the home; the runtime folder, with TMPDIR) and RLIMIT_FSIZE (any file); {shared_tmp()}"
    return {**limits.to_dict(), "enforced_by": how, "disk_enforced_by": disk, "shared": bounds}


def mechanism(bounds: dict[str, Any] | None = None) -> str:
    """What enforces the limits here, in words (``/metadata`` and ``state()``); ``bounds``: the server's own
    group's, when the caller has read them already (:func:`shared_bounds`)."""
    found = hierarchy()
    if found.version == 2:
        return "cgroup v2 (pids, memory, cpu) per agent account"
    if found.version == 1:
        return f"cgroup v1 ({', '.join(sorted(found.bases))}) per agent account"
    bounds = shared_bounds() if bounds is None else bounds
    said = ", ".join(f"{value / 1024**3:.1f} GiB of memory" if name == "memory" else
                     f"{value} processes" if name == "processes" else f"{value} CPUs"
                     for name, value in bounds.items() if value is not None)
    shared = f"; only the server's own control group bounds them, all together with the server ({said})" if said \
        else "; nothing bounds them but the machine"
    return f"none per session here: {found.reason}{shared}"
