"""Copying a forked desktop's home into its copies' homes, while CRIU holds the desktop frozen.

A desktop's home is a folder of the host's (its session's, with its snapshots and disk limit), bound into the
tree: CRIU leaves such a mount out of the dump, so each copy needs its own copy of the home as it was at the
dump, or the files its processes hold open would not be there, or not as they were. CRIU runs this as its
``post-dump`` action, after the images are written and before it lets the desktop run again:

    python -m hci_envs.fork.home_copy SOURCE TARGET:UID:GID [TARGET:UID:GID ...]

Each target (a new, empty home) is filled as :meth:`~hci_envs.sandbox.homes.HomeStore.restore` fills a home from a
snapshot (holes stay holes, symlinks stay links; sockets, pipes and devices are left out), then given to its
copy's agent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..sandbox.accounts import AgentAccount
from ..sandbox.homes import fill_home


def copy_home(source: Path, target: Path, uid: int, gid: int) -> None:
    """Fill ``target`` with ``source``'s folders, files and links, not its sockets, pipes or devices (a program
    that holds one open cannot be restored; one that does not will not miss it), and give it all to ``uid``."""
    fill_home(target, source, ignore=_special_files)
    AgentAccount("copy", uid, gid).chown_tree(target)


def _special_files(folder: str, names: list[str]) -> set[str]:
    import stat

    left_out = set()
    for name in names:
        try:
            mode = os.lstat(os.path.join(folder, name)).st_mode
        except OSError:
            continue
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            left_out.add(name)
    return left_out


def main(argv: list[str]) -> int:
    if os.environ.get("CRTOOLS_SCRIPT_ACTION", "post-dump") != "post-dump":
        return 0  # CRIU runs its action script at other moments too
    source = Path(argv[0])
    for spec in argv[1:]:
        target, uid, gid = spec.rsplit(":", 2)
        copy_home(source, Path(target), int(uid), int(gid))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
