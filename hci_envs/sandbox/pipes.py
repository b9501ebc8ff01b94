"""Reading a command's output pipes until it ends: one reader for every tool that runs a command as the agent.

The end of a command is not the end of its pipes: a program it left in the background may hold them open. So
the reader stops once the command has ended *and* everything it wrote has been read, not when the pipes
close. What a command writes just before it exits is in the pipe when its exit is seen, and is read then,
never lost to the race between a quiet moment and the exit.
"""

from __future__ import annotations

import os
import selectors
import time
from collections.abc import Callable, Mapping

#: After the command has ended, reading goes on no longer than this past ``grace``, even if a program it left
#: behind keeps writing.
LAST_READS = 1.0


class OutputBuffer:
    """Keeps the first ``cap`` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.size = 0

    def add(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.size += len(chunk)

    def add_kept(self, data: bytes, size: int) -> None:
        """Add what another buffer kept of a stream: its first bytes ``data`` of ``size`` in all (the rest counted
        as dropped, here as there)."""
        self.add(data)
        self.size += size - len(data)

    @property
    def dropped(self) -> int:
        return self.size - len(self.data)

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def read_pipes(buffers: Mapping[int, OutputBuffer], deadline: float, finished: Callable[[], bool], *,
               grace: float = 0.0, runaway: int | None = None) -> str | None:
    """Read each pipe (fd -> buffer) until all have closed, or until ``finished()`` and then nothing more is
    ready within ``grace`` seconds. Returns "timeout" when ``deadline`` (a ``time.monotonic()``) came first,
    "runaway" when the buffers took in more than ``runaway`` bytes together, else None."""
    with selectors.DefaultSelector() as selector:
        for fd in buffers:
            selector.register(fd, selectors.EVENT_READ)
        ended_at: float | None = None
        while selector.get_map():
            now = time.monotonic()
            if ended_at is None and finished():
                ended_at = now
            if ended_at is None:
                if now >= deadline:
                    return "timeout"
                wait = min(deadline - now, 0.1)
            else:
                if now >= ended_at + grace + LAST_READS:
                    return None
                wait = max(0.0, ended_at + grace - now)
            ready = selector.select(wait)
            for key, _ in ready:
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    buffers[key.fd].add(chunk)
                else:
                    selector.unregister(key.fd)
            if runaway is not None and sum(buffer.size for buffer in buffers.values()) > runaway:
                return "runaway"
            if ended_at is not None and not ready:
                return None  # ended, and all it wrote has been read
    return None
