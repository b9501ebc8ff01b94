"""Starting and stopping the processes of a desktop, leaving no orphans.

Every process starts in its own process group (its own session), so that terminating the group also takes
the children it forked. Processes on the agent's side run as the session's agent account
(:mod:`hci_envs.sandbox.accounts`); ending the session ends every process of that uid, including daemons that left their
group. One watchdog process per Python process (see :mod:`.watchdog`) knows every live group and leased
account and kills them all if this process dies without cleaning up, even under SIGKILL.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .watchdog import WATCHDOG

if TYPE_CHECKING:
    from .accounts import AgentAccount

log = logging.getLogger(__name__)




def _group_alive(pgid: int) -> bool:
    """Whether a process of the group can still run. Zombies do not count: the group's killed children wait
    for whoever they were reparented to (init) to reap them, which can take a while, and waiting for that
    held a reset up for the whole SIGKILL grace."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _wait_group_gone(proc: subprocess.Popen[bytes], pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        proc.poll()  # reap the leader, or its zombie keeps the group alive
        if not _group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 3.0) -> None:
    """SIGTERM the process's whole group, SIGKILL what is left after ``timeout``, and reap the process."""
    pgid = proc.pid
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        if _wait_group_gone(proc, pgid, wait):
            break
    else:
        log.warning("process group %s survived SIGKILL", pgid)
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        log.warning("process %s was not reaped", pgid)
    WATCHDOG.release(pgid)


def _ambient_capabilities() -> int:
    """This process's ambient capabilities (a non-root server of an image holds the uid switch this way)."""
    global _AMBIENT
    if _AMBIENT is None:
        _AMBIENT = 0
        try:
            with open("/proc/self/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("CapAmb:"):
                        _AMBIENT = int(line.split()[1], 16)
        except OSError:
            pass
    return _AMBIENT


_AMBIENT: int | None = None


def _drop_capabilities(argv: Sequence[str]) -> list[str]:
    """The server's own helpers (Xvfb, x11vnc) need none of its capabilities: they would otherwise inherit
    them as ambient capabilities."""
    from .accounts import _program

    return [_program("setpriv"), "--inh-caps=-all", "--ambient-caps=-all", "--", *argv]


class ProcessSupervisor:
    """The processes one desktop started, in start order; ``close()`` stops them newest first."""

    def __init__(self) -> None:
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._lock = threading.Lock()

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        pass_fds: Sequence[int] = (),
        stdin: int | None = subprocess.DEVNULL,
        stdout: int | None = subprocess.DEVNULL,
        stderr: int | None = subprocess.DEVNULL,
        account: AgentAccount | None = None,
        max_processes: int = 0,
        namespace: Sequence[str] = (),
        groups: Sequence[str] = (),
        file_size: int | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in a new process group; as ``account`` when given (with a private umask), else as
        this process's user without its capabilities. ``namespace`` is a command that runs first, with this
        process's privileges, and execs the rest (a mount namespace of the agent's own, say). An account's
        program first joins the control groups whose cgroup.procs files ``groups`` names (its session's limits)
        and gets a /proc of its own, and with ``file_size``, files of at most that many bytes
        (:func:`~hci_envs.sandbox.accounts.agent_start`)."""
        start: list[str] = []
        if account is not None:
            from .accounts import agent_start

            argv = account.command(argv, max_processes=max_processes)
            # first of all, as root: the session's limits, its own /proc and user
            start = agent_start(groups, account, file_size)
        elif _ambient_capabilities():
            argv = _drop_capabilities(argv)
        argv = [*start, *namespace, *argv]
        proc = subprocess.Popen(
            list(argv),
            env=dict(env) if env is not None else None,
            cwd=cwd,
            pass_fds=tuple(pass_fds),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            close_fds=True,
            umask=0o077 if account is not None else -1,
        )
        WATCHDOG.guard(proc.pid)
        with self._lock:
            self._procs.append((name, proc))
        return proc

    def processes(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        with self._lock:
            return list(self._procs)

    def replace(self, proc: subprocess.Popen[bytes], stand_in: subprocess.Popen[bytes]) -> None:
        """Supervise ``stand_in`` in the place of ``proc`` (a process seen through its starter: a forkable
        desktop's command, whose group is its own)."""
        with self._lock:
            self._procs = [(n, stand_in if p is proc else p) for n, p in self._procs]

    def stop(self, proc: subprocess.Popen[bytes], timeout: float = 3.0) -> None:
        stop_group(proc, timeout)
        with self._lock:
            self._procs = [(n, p) for n, p in self._procs if p is not proc]

    def finished(self, proc: subprocess.Popen[bytes]) -> None:
        """``proc`` has exited: forget it if nothing of its group runs on, else keep its group supervised (a
        command that left something running in the background, which ends with the desktop)."""
        if proc.poll() is not None and not _group_alive(proc.pid):
            self.stop(proc, timeout=0.1)

    def close(self, timeout: float = 3.0) -> None:
        with self._lock:
            procs, self._procs = self._procs, []
        for _name, proc in reversed(procs):
            stop_group(proc, timeout)

    def pids(self) -> list[int]:
        return [p.pid for _, p in self.processes()]
