"""Whether the agent's terminals have caught up with its input: what a checker waits for before it reads.

A screen that has settled says that the apps have drawn the input, not that a command typed into a terminal
has finished: ``sleep 1; echo hello > hello.txt`` draws its line at once and writes the file a second
later, and a checker that reads the file in between scores an episode that is not over. So the terminals'
side of the agent (every agent process with a controlling terminal, and the terminal emulators holding
them) has caught up when, for ``quiet`` seconds in a row:

* no command the agent started this episode runs in the foreground of a terminal: each terminal's
  foreground process group (``tpgid``) is its shell's own, or a program that was already there when the
  agent first acted (an editor the task opened in the terminal waits for keys, not for time);
* none of those processes is running or in disk sleep (a shell reading a line, a command finishing, a
  terminal emulator handling keys), and none started or ended (a pipeline going on).

Everything here comes from ``/proc/PID/stat``, which every user may read: the server needs no tracing
rights over the agent's account. Apps without terminals are the screen's business (their state is what
they draw). Standard library only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK")


def boot_clock() -> float:
    """Seconds since boot, the clock ``/proc/PID/stat`` dates processes by."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    state: str
    ppid: int
    pgrp: int
    session: int
    tty: int
    tpgid: int
    start: float  # seconds since boot
    uid: int


def read_stat(pid: int) -> ProcStat | None:
    """One process's ``/proc/PID/stat`` (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("utf-8", "replace")
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    head, _, rest = data.rpartition(")")  # the command name may hold spaces and parentheses
    fields = rest.split()
    try:
        return ProcStat(pid=pid, comm=head.partition("(")[2], state=fields[0], ppid=int(fields[1]),
                        pgrp=int(fields[2]), session=int(fields[3]), tty=int(fields[4]), tpgid=int(fields[5]),
                        start=int(fields[19]) / _TICKS, uid=uid)
    except (IndexError, ValueError):
        return None


def all_processes() -> dict[int, ProcStat]:
    procs = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = read_stat(int(entry.name))
            if stat is not None:
                procs[stat.pid] = stat
    return procs


def descendants(procs: dict[int, ProcStat], roots: Iterable[int]) -> dict[int, ProcStat]:
    """``roots`` and every process below them."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found, todo = {}, [r for r in roots if r in procs]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found[pid] = procs[pid]
            todo.extend(children.get(pid, ()))
    return found


def terminal_side(procs: dict[int, ProcStat]) -> dict[int, ProcStat]:
    """The processes with a controlling terminal, and the terminal emulators (parents of their sessions'
    leaders) among ``procs``."""
    side = {pid: p for pid, p in procs.items() if p.tty and p.state not in "ZX"}
    for p in list(side.values()):
        if p.pid == p.session and p.ppid in procs:
            side[p.ppid] = procs[p.ppid]
    return side


def busy(side: dict[int, ProcStat], since: float) -> list[str]:
    """Why the terminals have not caught up (see the module), or nothing. ``since``: boot-clock seconds of
    the agent's first input of the episode."""
    reasons = [f"{p.comm} (pid {p.pid}) is running" for p in side.values() if p.state in "RD"]
    for leader in side.values():
        if leader.pid != leader.session or not leader.tty or leader.tpgid <= 0 or leader.tpgid == leader.pgrp:
            continue
        job = [p for p in side.values() if p.pgrp == leader.tpgid]
        if any(p.start >= since for p in job):
            names = ", ".join(f"{p.comm} (pid {p.pid})" for p in job)
            reasons.append(f"a command runs in the foreground of a terminal: {names}")
    return reasons


def wait_caught_up(processes: Callable[[], dict[int, ProcStat]], since: float, timeout: float, *,
                   quiet: float = 0.1, interval: float = 0.01,
                   cancelled: Callable[[], bool] = lambda: False) -> list[str]:
    """Poll until the terminals of ``processes()`` (the agent's side) have caught up for ``quiet`` seconds;
    returns [] then, or what was still busy once ``timeout`` ran out (or ``cancelled()`` said so)."""
    deadline = time.monotonic() + timeout
    calm_from: float | None = None
    seen: frozenset[int] | None = None
    while True:
        side = terminal_side(processes())
        if not side:
            return []  # no terminal on this desktop: the screen says the rest
        reasons = busy(side, since)
        now = time.monotonic()
        if reasons or frozenset(side) != seen:
            calm_from = None if reasons else now
            seen = frozenset(side)
        elif calm_from is None:
            calm_from = now
        if calm_from is not None and now - calm_from >= quiet:
            return []
        if now >= deadline or cancelled():
            return reasons or ["processes in the terminals kept starting and ending"]
        time.sleep(interval)
