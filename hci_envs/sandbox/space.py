"""Bounded room for an agent's files: its home and its runtime folder (``XDG_RUNTIME_DIR``, with the ``TMPDIR``
its apps write their temporary files to) each on a tmpfs of the session's disk limit, so that a disk filler
stops at its own session's limit (``No space left on device``) while the machine's disk, the server and the
other sessions carry on; and no file an agent program writes anywhere (the machine's shared ``/tmp`` and
``/var/tmp`` included) may grow past that limit (``RLIMIT_FSIZE``, set by the root-run start of each agent
program: :func:`hci_envs.sandbox.accounts.agent_start`).

The tmpfs pages count against the session's memory limit as well (the kernel charges them to the group of the
process that writes them). Mounting takes a root server; elsewhere :func:`unavailable` says why, and a
container's own ``/tmp`` (a tmpfs the Docker provider sizes) is the bound. What an agent leaves in the shared
``/tmp`` is removed at each reset (:meth:`~hci_envs.sandbox.accounts.AgentAccount.sweep_files`), but many files
there, each under the limit, are bounded together only where ``/tmp`` is a tmpfs, whose pages count against the
writer's memory limit (:func:`shared_tmp` says which holds). A folder holding a mount is removed only once the mount
is detached (:func:`~.watchdog_process.remove_folder`), by the server or, after it was killed, by its watchdog.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from ..errors import ConfigError

_UNAVAILABLE: list[str | None] = []


def unavailable() -> str | None:
    """Why the disk limit cannot be enforced here, or None."""
    if not _UNAVAILABLE:
        _UNAVAILABLE.append(None if os.geteuid() == 0 else "the server is not root (the homes and runtime "
                            "folders are tmpfs mounts a root server makes)")
    return _UNAVAILABLE[0]


def bound_folder(path: Path, size: int, uid: int, gid: int) -> None:
    """The folder ``path`` (empty, its account's) as a tmpfs of ``size`` bytes, 0700 to ``uid``:``gid``."""
    options = f"size={size},uid={uid},gid={gid},mode=700,nosuid,nodev"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise ConfigError(f"a tmpfs for {path} could not be mounted: {done.stderr.strip()[:200]}")


def resize_folder(path: Path, size: int) -> None:
    """A folder :func:`bound_folder` made, to hold ``size`` bytes from now on (what it holds must fit)."""
    done = subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise ConfigError(f"the tmpfs of {path} could not be resized to {size} bytes: {done.stderr.strip()[:200]}")


def unbind_folder(path: Path) -> None:
    """Undo :func:`bound_folder`: the folder underneath again (empty: what the tmpfs held goes with it)."""
    done = subprocess.run(["umount", str(path)], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise ConfigError(f"the tmpfs of {path} could not be unmounted: {done.stderr.strip()[:200]}")


@functools.cache  # asked with every state(); what /tmp is on does not change under a running server
def shared_tmp() -> str:
    """What bounds what an agent leaves in the machine's shared ``/tmp`` together, in words: on a tmpfs, the
    pages of its files are charged to the writer's control group, so the session's memory limit bounds them all;
    on a disk, only each file is bounded (RLIMIT_FSIZE), not their number."""
    kind = filesystem_type(Path("/tmp"))
    if kind == "tmpfs":
        return "the machine's /tmp is a tmpfs: what an agent leaves there counts against its memory limit"
    return (f"the machine's /tmp is on {kind or 'a disk'}: each file an agent writes there is bounded, not all of "
            "them together (a tmpfs /tmp would count them against each session's memory limit)")


def filesystem_type(path: Path) -> str | None:
    """The type of the file system ``path`` is on (the mount with the longest prefix of it), or None."""
    found, best = None, -1
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    target = str(path.resolve())
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        point = fields[4]
        if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) >= best:
            found, best = line.split(" - ", 1)[1].split()[0], len(point)
    return found


def full(path: Path) -> bool:
    """Whether the file system of ``path`` has (almost) no room left: a block or two, or no inode."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail <= 2 or (st.f_files > 0 and st.f_favail == 0)
