"""X authority cookies, so that only holders of a desktop's cookie can connect to its display.

Each display gets a random MIT-MAGIC-COOKIE-1. The X server reads it from a server file; clients find it in
an Xauthority file. This process keeps one file with the cookies of every display it runs (our own X
connections read ``XAUTHORITY``, which is process-wide); the apps of a desktop get a file with only their own
display's cookie, so a shell in one session cannot reach another session's screen.
"""

from __future__ import annotations

import atexit
import os
import secrets
import socket
import struct
import tempfile
import threading
from pathlib import Path

from ..sandbox.watchdog import remove_temporary_dir, temporary_dir

_FAMILY_LOCAL = 256
_FAMILY_WILD = 0xFFFF
_PROTOCOL = b"MIT-MAGIC-COOKIE-1"


def _field(data: bytes) -> bytes:
    return struct.pack(">H", len(data)) + data


def _entry(display: str, cookie: bytes) -> bytes:
    # Two entries for one cookie: libxcb and libX11 match the wildcard family, python-xlib only the local
    # family with this host's name.
    tail = _field(display.encode()) + _field(_PROTOCOL) + _field(cookie)
    local = struct.pack(">H", _FAMILY_LOCAL) + _field(socket.gethostname().encode()) + tail
    wild = struct.pack(">H", _FAMILY_WILD) + _field(b"") + tail
    return local + wild


def _write_private(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".xauth-")
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def new_cookie() -> bytes:
    return secrets.token_bytes(16)


def write_server_file(path: Path, cookie: bytes) -> None:
    """The file given to ``Xvfb -auth``: the server accepts every cookie in it, whatever display it names."""
    _write_private(path, _entry("0", cookie))


def write_client_file(path: Path, display_number: int, cookie: bytes) -> None:
    _write_private(path, _entry(str(display_number), cookie))


class ProcessAuthority:
    """This process's own Xauthority file, holding the cookie of every display it runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cookies: dict[int, bytes] = {}
        self._path: Path | None = None

    def _file(self) -> Path:
        if self._path is None:
            directory = temporary_dir("hci-envs-xauth-")
            self._path = directory / "Xauthority"
            os.environ["XAUTHORITY"] = str(self._path)
            atexit.register(self._remove, os.getpid())
        return self._path

    def path(self) -> str:
        with self._lock:
            return str(self._file())

    def _remove(self, owner: int) -> None:
        """At exit, the file and its folder go too (only in the process that made them, not a fork)."""
        if self._path is not None and os.getpid() == owner:
            remove_temporary_dir(self._path.parent)

    def add(self, display_number: int, cookie: bytes) -> None:
        with self._lock:
            self._cookies[display_number] = cookie
            self._flush()

    def remove(self, display_number: int) -> None:
        with self._lock:
            if self._cookies.pop(display_number, None) is None:
                return
            if self._cookies:
                self._flush()
            elif self._path is not None:
                # The last display is gone: so is the folder. atexit alone does not do: uvicorn ends a server
                # on SIGTERM by raising the signal again once it has shut down, and then no atexit runs.
                remove_temporary_dir(self._path.parent)
                self._path = None

    def _flush(self) -> None:
        data = b"".join(_entry(str(n), c) for n, c in sorted(self._cookies.items()))
        _write_private(self._file(), data)


PROCESS_AUTHORITY = ProcessAuthority()
