"""Copies that share the memory they have not changed: KSM, the kernel's same-page merging.

A copy's anonymous memory is the source's, page for page, and CRIU restores it as pages of the copy's own: without
help, N copies hold N times the memory. KSM merges identical pages into one, copied again when written, but only
in processes that opted in. Every process of a forkable desktop does (``prctl(PR_SET_MEMORY_MERGE)``, kept through
fork and exec, from kernel 6.4): the tree's launcher and each program started into it set it first
(:data:`PRELUDE`), and CRIU restores the copies under it (:func:`mergeable`), so the restored processes have it
too. The merging itself runs only while the machine runs ksmd (``echo 1 > /sys/kernel/mm/ksm/run``, root): a
machine-wide choice, left to whoever runs the machine. It costs ksmd's CPU, and page merging is a timing side
channel between the processes whose pages merge (here a desktop's copies, all of one moment). Without ksmd the
mark costs nothing; a kernel without it refuses the call, which is ignored.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: Where the kernel says whether ksmd runs, and how it scans.
KSM = Path("/sys/kernel/mm/ksm")
#: prctl(PR_SET_MEMORY_MERGE, 1), in a script that has imported ctypes: its first line.
PRELUDE = "ctypes.CDLL(None).prctl(67, 1, 0, 0, 0)  # PR_SET_MEMORY_MERGE (sharing.py); refused before 6.4\n"
#: Runs its arguments as a program, mergeable: a command's prefix (see :func:`mergeable`).
_EXEC = "import ctypes, os, sys\n" + PRELUDE + "os.execvp(sys.argv[1], sys.argv[1:])\n"


def mergeable(argv: list[str]) -> list[str]:
    """``argv`` run with its memory, and all its children's, open to KSM: through a short Python prelude that
    sets the mark and executes it (a process can set the mark on itself only)."""
    return [sys.executable, "-I", "-S", "-c", _EXEC, *argv]


def ksm_running() -> bool:
    """Whether ksmd merges pages on this machine now (``/sys/kernel/mm/ksm/run`` is 1)."""
    try:
        return (KSM / "run").read_text().strip() == "1"
    except OSError:
        return False


def merging_pages(pid: int) -> int | None:
    """How many of process ``pid``'s pages KSM has merged with others' (its ``ksm_stat``); None when the kernel
    does not say or the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/ksm_stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "ksm_merging_pages":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def opted_in(pid: int) -> bool:
    """Whether process ``pid`` is open to KSM as a whole (``ksm_merge_any: yes`` in its ``ksm_stat``)."""
    try:
        return "ksm_merge_any: yes" in Path(f"/proc/{pid}/ksm_stat").read_text()
    except OSError:
        return False
