"""glibc's malloc, tuned for a server of desktops. Each setting is a no-op where the C library is not glibc."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable

#: glibc's mallopt parameters: allocations below the first come from the heap, not from fresh mmaps; free
#: memory at the top of the heap is returned to the system only past the second; the third caps the heaps.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_KEEP_BUFFERS_BELOW = 32 << 20
_TRIM_ABOVE = 128 << 20


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


@functools.cache  # once per process: every desktop's Screen asks
def keep_frame_buffers_mapped() -> None:
    """Stop glibc from giving every frame-sized buffer its own mmap.

    A 1280x800 frame makes several 3-4 MB temporaries per screenshot (RGB rows, the base64 text, the JSON
    body). Above glibc's mmap threshold each one is a fresh mapping whose 4 KiB pages fault in one by one
    and are unmapped again on free; in a virtual machine those faults cost more than the encoding
    (PNG at 1280x800: 9.3 ms with fresh mappings, 1.6 ms from the heap, on the 2-core VM of bench/).
    """
    mallopt = _mallopt()
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _KEEP_BUFFERS_BELOW)
        mallopt(_M_TRIM_THRESHOLD, _TRIM_ABOVE)


def one_heap() -> bool:
    """Let every thread of this process allocate from one heap (glibc gives each busy thread its own, up
    to eight per core); call it before the threads start. For ``hci-envs serve`` only, never in a process
    hci-envs does not own (a trainer's threads may want their heaps).

    Why: a server's resets run on whichever worker threads are free. No allocation outlives its reset (a heap
    profile showed the live allocations flat), but each thread's heap keeps the pages of its own busiest moment,
    and with many heaps those high-water marks kept rising for as long as a soak ran: the memory grew with the
    number of resets. One heap reaches its high-water mark and stays there (``bench/bench_soak.py
    --beside-default-heaps``, 30 minutes: flat over the second half's 462 resets, where glibc's default grew
    13.5 KiB a reset).
    A ``MALLOC_ARENA_MAX`` in the environment wins: glibc has read it already. Returns whether the cap was set.
    """
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    mallopt = _mallopt()
    return mallopt is not None and bool(mallopt(_M_ARENA_MAX, 1))
