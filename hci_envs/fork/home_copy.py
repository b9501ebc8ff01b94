"""Copying a forked desktop's home into its copies' homes, while CRIU holds the desktop frozen.

A desktop's home is a folder of the host's (its session's, with its snapshots and disk limit), bound into the
tree: CRIU leaves such a mount out of the dump, so each copy needs its own copy of the home as it was at the
dump, or the files its processes hold open would not be there, or not as they were. CRIU runs this as its
``post-dump`` action, after the images are written and before it lets the desktop run again:

    python -m hci_envs.fork.home_copy SOURCE TARGET:UID:GID [TARGET:UID:GID ...]

Each target (a new, empty home) is filled as :meth:`~hci_envs.sandbox.homes.HomeStore.restore` fills a home from a
snapshot (holes stay holes, symlinks stay links), then given to its copy's agent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..sandbox.accounts import AgentAccount
from ..sandbox.homes import fill_home


def copy_home(source: Path, target: Path, uid: int, gid: int) -> None:
    fill_home(target, source)
    AgentAccount("copy", uid, gid).chown_tree(target)


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
