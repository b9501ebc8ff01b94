"""glibc's heaps: a server's threads share one (its memory stays flat over resets), a process it does not own is
left as it is, and MALLOC_ARENA_MAX in the environment wins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ServerProcess

#: glibc maps each heap beside the main one as a 64 MiB region aligned to its size (HEAP_MAX_SIZE on 64 bits)
HEAP_SIZE = 64 << 20

THREADS_ALLOCATE = """
import sys, threading
if sys.argv[1] == "capped":
    from hci_envs.desktop.allocator import one_heap
    assert one_heap(), "the cap was not set"
def work():
    kept = [bytearray(100_000) for _ in range(50)]  # above pymalloc's sizes: from malloc, in this thread's heap
    del kept
threads = [threading.Thread(target=work) for _ in range(6)]
for t in threads: t.start()
for t in threads: t.join()
print(open("/proc/self/maps").read())
"""


def other_heaps(maps: str) -> int:
    """How many heaps besides the main one a process's /proc/PID/maps shows."""
    regions = []
    for line in maps.splitlines():
        fields = line.split()
        if len(fields) == 5:  # anonymous: no path or name
            low, high = (int(x, 16) for x in fields[0].split("-"))
            regions.append((low, high))
    # a heap is one or two anonymous mappings (the part in use, then the reserved rest) filling an aligned slot
    count = 0
    for (low, high), after in zip(regions, [*regions[1:], (0, 0)]):
        if low % HEAP_SIZE == 0:
            end = after[1] if high - low < HEAP_SIZE and after[0] == high else high
            if end - low == HEAP_SIZE:
                count += 1
    return count


def _run(mode: str, **env: str) -> str:
    return subprocess.run([sys.executable, "-c", THREADS_ALLOCATE, mode], capture_output=True, text=True, check=True,
                          env={**os.environ, **env}, timeout=60).stdout


@pytest.mark.fake
def test_threads_share_one_heap_once_capped_and_have_their_own_otherwise():
    left_alone = other_heaps(_run("default"))
    assert left_alone >= 1, "glibc gave the threads no heap of their own: the count below proves nothing"
    assert other_heaps(_run("capped")) == 0


@pytest.mark.fake
def test_malloc_arena_max_in_the_environment_wins():
    out = subprocess.run([sys.executable, "-c", "from hci_envs.desktop.allocator import one_heap; print(one_heap())"],
                         capture_output=True, text=True, check=True, env={**os.environ, "MALLOC_ARENA_MAX": "4"})
    assert out.stdout.strip() == "False"
    assert other_heaps(_run("default", MALLOC_ARENA_MAX="1")) == 0  # glibc reads it itself


@pytest.mark.x11
def test_a_server_s_threads_share_one_heap_through_steps_and_resets(x11):
    with ServerProcess("--no-spare", "--no-vnc") as server, server.http() as http:
        for _ in range(3):
            assert http.post("/reset", json={}).status_code == 200
            for action in ({"type": "click", "x": 40, "y": 40}, {"type": "type_text", "text": "ab"}, {"type": "key", "keys": "Return"}):
                assert http.post("/step", json={"action": action}, timeout=60).status_code == 200
        maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
    assert other_heaps(maps) == 0, "the server's threads took heaps of their own"
