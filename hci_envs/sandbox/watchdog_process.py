"""Kills a parent's process groups and agent accounts' processes when the parent dies, however it dies.

Run by :class:`hci_envs.sandbox.processes.ProcessSupervisor` as a separate process in its own session, with
its stdin a pipe from the parent. The parent writes ``+PGID`` when it starts a process group and ``-PGID``
when it has reaped it, ``+u UID GID LOCKFILE`` / ``-u UID`` when it leases and returns an agent account, and
``+p PATH`` / ``-p PATH`` when it makes and removes a temporary folder. End of file on stdin means the parent is
gone: every group still registered gets SIGTERM, then SIGKILL after a grace period, every process of each leased
account gets SIGKILL (whatever its process group: daemons that called setsid are found by their uid), and then,
with nothing left to write in them, the folders still registered are removed (a symlink put in a folder's place
is not followed). The watchdog holds each account's lease lock (shared with the
parent) until those processes are gone, so no other server can lease the account before then.

It runs as the server's user, so agent accounts cannot signal it. Standard library only, so it starts fast and
needs no install.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
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


def _uid_alive(uid: int) -> bool:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                lines = f.read(2048).split(b"\n")
        except OSError:
            continue
        state = next((line.split()[1] for line in lines if line.startswith(b"State:")), b"?")
        real = next((int(line.split()[1]) for line in lines if line.startswith(b"Uid:")), -1)
        if real == uid and state not in (b"Z", b"X"):
            return True
    return False


def _kill_account(uid: int, gid: int) -> None:
    """SIGKILL every process of ``uid``: kill(-1) sent as the uid itself (see hci_envs.sandbox.accounts)."""
    argv = ["setpriv", "--reuid", str(uid), "--regid", str(gid), "--clear-groups", "--inh-caps=-all",
            "--ambient-caps=-all", "--no-new-privs", "--", "kill", "-KILL", "--", "-1"]
    deadline = time.monotonic() + 10
    while _uid_alive(uid) and time.monotonic() < deadline:
        try:
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return
        time.sleep(0.01)


def mounts_under(path: str | bytes) -> list[str]:
    """The mount points at or below ``path`` in this process's mount namespace, deepest first."""
    root = os.fsdecode(path).rstrip("/")
    points = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
            for line in table:
                fields = line.split(" ")
                point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n") \
                    .replace("\\134", "\\")
                if point == root or point.startswith(root + "/"):
                    points.append(point)
    except OSError:
        return []
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def remove_folder(path: str | bytes) -> bool:
    """Remove a temporary folder and what is in it, once every mount at or below it is detached (a folder
    bound in from elsewhere is never walked into: its files are not the folder's); a folder that keeps a
    mount is left where it is. Returns whether it is gone."""
    for point in mounts_under(path):
        subprocess.run(["umount", "--lazy", point], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
    if mounts_under(path):
        return False
    shutil.rmtree(path, ignore_errors=True)  # refuses a symlink in the folder's place
    return not os.path.lexists(path)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the parent must not kill the guard
    grace = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    groups: set[int] = set()
    accounts: dict[int, tuple[int, int]] = {}  # uid -> (gid, lock file descriptor)
    folders: set[bytes] = set()
    for line in sys.stdin.buffer:
        if line[:3] in (b"+p ", b"-p "):
            path = line[3:].rstrip(b"\n")
            if line.startswith(b"+"):
                folders.add(path)
            else:
                folders.discard(path)
            continue
        parts = line.split()
        try:
            if len(parts) == 4 and parts[0] == b"+u":
                uid, gid = int(parts[1]), int(parts[2])
                fd = os.open(parts[3], os.O_RDONLY | os.O_CLOEXEC)
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except OSError:
                    pass
                old = accounts.pop(uid, None)
                if old is not None:
                    os.close(old[1])
                accounts[uid] = (gid, fd)
            elif len(parts) == 2 and parts[0] == b"-u":
                old = accounts.pop(int(parts[1]), None)
                if old is not None:
                    os.close(old[1])
            elif len(parts) == 1 and parts[0][:1] in (b"+", b"-"):
                pgid = int(parts[0][1:])
                if parts[0].startswith(b"+"):
                    groups.add(pgid)
                else:
                    groups.discard(pgid)
        except (ValueError, OSError):
            continue
    for uid, (gid, _fd) in accounts.items():
        _kill_account(uid, gid)
    _kill_all(groups, grace)
    for folder in folders:
        remove_folder(folder)
    for _gid, fd in accounts.values():
        os.close(fd)


if __name__ == "__main__":
    main()
