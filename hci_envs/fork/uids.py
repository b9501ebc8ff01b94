"""Host uids for the inside of forkable desktops: each tree's root (uid 0 inside) runs as one of these, and so
does its agent (uid 1000 inside) when the desktop has no agent account. None of them is a user of the machine;
each is held by the process that leased it (a lock file, as agent accounts are), so two servers never give one
to two desktops."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..errors import CapacityError
from .tree import fork_dir

#: The range: far above the machine's users and the agent accounts, below the 32-bit overflow ids.
FIRST, COUNT = 3_900_000, 4096


class UidLease:
    """One host uid, held until :meth:`release`."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _folder() -> Path:
    folder = fork_dir() / "uids"
    folder.mkdir(parents=True, mode=0o700, exist_ok=True)
    return folder


def lease_uid() -> UidLease:
    """The first uid of the range no live process holds."""
    folder = _folder()
    for uid in range(FIRST, FIRST + COUNT):
        fd = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return UidLease(uid, fd)
    raise CapacityError(f"every one of the {COUNT} uids for forkable desktops is in use")
