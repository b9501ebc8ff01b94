"""The process-wide watchdog, from the server's side: a small process (``watchdog_process.py``) that outlives
a killed server and then ends what it guarded (process groups, and every process of leased agent accounts) and
removes the temporary folders it was told of (homes, runtime folders with their X authority files): see
:func:`temporary_dir` and :func:`remove_temporary_dir`.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Protocol

from ..errors import ConfigError

log = logging.getLogger(__name__)


class GuardedAccount(Protocol):
    """What the watchdog needs of an agent account (:class:`~hci_envs.sandbox.accounts.AgentAccount`, which
    imports this module: the watchdog names no type of it)."""

    uid: int
    gid: int


class _Watchdog:
    """The process-wide guard; started on first use, restarted after a fork."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid = 0

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._pid != os.getpid() or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(Path(__file__).with_name("watchdog_process.py"))],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
            self._pid = os.getpid()
        return self._proc

    def _send(self, line: str) -> None:
        with self._lock:
            proc = self._ensure()
            assert proc.stdin is not None
            try:
                proc.stdin.write(line.encode() + b"\n")
                proc.stdin.flush()
            except BrokenPipeError:
                self._proc = None
                proc = self._ensure()
                assert proc.stdin is not None
                proc.stdin.write(line.encode() + b"\n")
                proc.stdin.flush()

    def guard(self, pgid: int) -> None:
        self._send(f"+{pgid}")

    def release(self, pgid: int) -> None:
        self._send_if_running(f"-{pgid}")

    def guard_account(self, account: GuardedAccount, lock_file: Path) -> None:
        self._send(f"+u {account.uid} {account.gid} {lock_file}")

    def release_account(self, account: GuardedAccount) -> None:
        self._send_if_running(f"-u {account.uid}")

    def guard_folder(self, path: Path) -> None:
        self._send(f"+p {_path_line(path)}")

    def release_folder(self, path: Path) -> None:
        self._send_if_running(f"-p {_path_line(path)}")

    def _send_if_running(self, line: str) -> None:
        if self._proc is not None and self._pid == os.getpid():
            try:
                self._send(line)
            except OSError:
                pass


WATCHDOG = _Watchdog()


def _path_line(path: Path) -> str:
    text = str(path)
    if "\n" in text or not os.path.isabs(text):
        raise ConfigError(f"the watchdog takes absolute paths on one line, not {text!r}")
    return text


#: The folders :func:`temporary_dir` made in this process and :func:`remove_temporary_dir` has not removed yet.
_MADE: set[str] = set()
_MADE_LOCK = threading.Lock()


def temporary_dir(prefix: str, parent: Path | None = None) -> Path:
    """A new folder in the system's temporary directory (``tempfile.mkdtemp``; in ``parent`` if given) that the
    watchdog removes if this process dies before :func:`remove_temporary_dir` does: nothing of a session stays in
    /tmp after a kill -9."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    with _MADE_LOCK:
        _MADE.add(os.path.normpath(path))
    WATCHDOG.guard_folder(path)
    return path


def remove_temporary_dir(path: Path) -> None:
    """Remove a folder of :func:`temporary_dir` (every mount in it detached first) and tell the watchdog it is
    gone. Any other folder is refused, whatever a caller passes: a removal this deep (mounts detached, then
    everything) must never reach a folder that is not a session's own."""
    from .watchdog_process import remove_folder

    with _MADE_LOCK:
        if os.path.normpath(path) not in _MADE:
            log.error("refused to remove %s: it is not a temporary folder this process made", path)
            return
    if remove_folder(path):
        with _MADE_LOCK:
            _MADE.discard(os.path.normpath(path))
        WATCHDOG.release_folder(path)
    else:  # the watchdog still has it, and the next lease of its account sweeps it
        log.warning("could not remove %s (a mount in it stayed): it is removed later", path)
