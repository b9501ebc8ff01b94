"""Kills a parent's process groups when the parent dies, however it dies (even SIGKILL).

Run by :class:`hci_envs.desktop.processes.ProcessSupervisor` as a separate process in its own session, with
its stdin a pipe from the parent. The parent writes ``+PGID`` when it starts a process group and ``-PGID``
when it has reaped it. End of file on stdin means the parent is gone: every group still registered gets
SIGTERM, then SIGKILL after a grace period. Standard library only, so it starts fast and needs no install.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_all(groups: set[int], grace: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in list(groups):
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                groups.discard(pgid)
        deadline = time.monotonic() + grace
        while groups and time.monotonic() < deadline:
            groups = {g for g in groups if _alive(g)}
            time.sleep(0.05)
        if not groups:
            return


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the parent must not kill the guard
    grace = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    groups: set[int] = set()
    for line in sys.stdin.buffer:
        line = line.strip()
        if not line:
            continue
        try:
            pgid = int(line[1:])
        except ValueError:
            continue
        if line.startswith(b"+"):
            groups.add(pgid)
        elif line.startswith(b"-"):
            groups.discard(pgid)
    _kill_all(groups, grace)


if __name__ == "__main__":
    main()
