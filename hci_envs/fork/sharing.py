"""Copies that share the memory they have not changed: KSM, the kernel's same-page merging (an opt-in).

A copy's anonymous memory is the source's, page for page, and CRIU restores it as pages of the copy's own: without
help, N copies hold N times the memory. KSM merges identical pages into one, copied again when written, but only
in processes that opted in. With ``HCI_ENVS_FORK_SHARE_MEMORY=1`` in the server's environment (``serve
--fork-share-memory``), every process of a forkable desktop does (``prctl(PR_SET_MEMORY_MERGE)``): the tree's
launcher and each program started into it set it first (``"merge"`` in their settings), and CRIU restores the
copies under it (:func:`mergeable`), so that the restored processes have it too. The merging itself runs only while
the machine runs ksmd (``echo 1 > /sys/kernel/mm/ksm/run``, root).

Off by default, and both switches are the operator's: ksmd costs CPU, and merging is a timing side channel between
all the processes whose pages merge, which are then every opted-in desktop of the machine (its copies, but also
other sessions' desktops, other agents'). Needs a kernel that keeps the mark through exec (6.7 and later); an older
one refuses the call or drops the mark, which is ignored (nothing is shared then).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: The server's setting (serve --fork-share-memory).
SETTING = "HCI_ENVS_FORK_SHARE_MEMORY"
#: Where the kernel says whether ksmd runs, and how it scans.
KSM = Path("/sys/kernel/mm/ksm")
#: prctl(PR_SET_MEMORY_MERGE, 1), as a line of a script that has imported ctypes (the tree's scripts use it).
MARK = "ctypes.CDLL(None).prctl(67, 1, 0, 0, 0)  # PR_SET_MEMORY_MERGE (fork/sharing.py)"
#: Runs its arguments as a program, marked: a command's prefix (see :func:`mergeable`).
_EXEC = f"import ctypes, os, sys\n{MARK}\nos.execvp(sys.argv[1], sys.argv[1:])\n"


def enabled() -> bool:
    """Whether forkable desktops are opened to KSM here (the server's SETTING: 1, true, yes or on)."""
    return os.environ.get(SETTING, "").strip().lower() in ("1", "true", "yes", "on")


def mergeable(argv: list[str]) -> list[str]:
    """``argv``, run with its memory and all its children's open to KSM when :func:`enabled`: through a short
    Python prelude that sets the mark and executes it (a process can set the mark on itself only)."""
    return [sys.executable, "-I", "-S", "-c", _EXEC, *argv] if enabled() else list(argv)


def _stat(pid: int) -> dict[str, str]:
    try:
        lines = Path(f"/proc/{pid}/ksm_stat").read_text().splitlines()
    except OSError:
        return {}
    return {name.rstrip(":"): value.strip() for name, _, value in (line.partition(" ") for line in lines)}


def merging_pages(pid: int) -> int | None:
    """How many of process ``pid``'s pages KSM has merged with others' (its ``ksm_stat``); None when the kernel
    does not say or the process is gone."""
    value = _stat(pid).get("ksm_merging_pages")
    return int(value) if value is not None and value.isdigit() else None


def opted_in(pid: int) -> bool | None:
    """Whether process ``pid`` is open to KSM as a whole (``ksm_merge_any``); None when the kernel does not say
    or the process is gone."""
    value = _stat(pid).get("ksm_merge_any")
    return None if value is None else value == "yes"
