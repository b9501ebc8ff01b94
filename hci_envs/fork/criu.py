"""CRIU, the checkpoint/restore tool a desktop is forked with: finding one that works here, and running it.

Debian 12's CRIU (3.17) fails on kernels from 6.16. Debian 13's 4.1.1 dumps a desktop, but no process of it
that holds a TCP socket (on kernels from 6.16, CRIU 4.1 asks every socket for SO_PASSCRED, which only Unix and
netlink sockets answer now); 4.2, in Debian 14 ("forky", testing), dumps and restores them, established
connections included. It must not be installed over Debian 12's C library, so :func:`fetch` puts Debian 14's
package with its own libraries in a tree of its own (debootstrap, once) and CRIU runs through that tree's loader
(``ld-linux --library-path``): nothing of the host changes. It still calls the host's ``ip``, ``iptables-save``
and ``tar`` while it dumps a namespace.

Standard library only: ``python3 -m hci_envs install --test`` fetches it before any virtual environment exists.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from ..errors import MissingDependencyError

#: The Debian release whose CRIU is fetched, and where it is kept (made by :func:`fetch`).
RELEASE = "forky"
DEFAULT_TREE = Path(f"/var/cache/hci-envs/criu-{RELEASE}")
TREE = Path(os.environ.get("HCI_ENVS_CRIU_TREE", DEFAULT_TREE))
#: Where the fetch of earlier versions put Debian 13's CRIU (4.1, which cannot dump TCP sockets here).
EARLIER_TREE = Path("/var/cache/hci-envs/criu-trixie")
MIRROR = "http://deb.debian.org/debian"
#: The first version that dumps and restores a desktop on this project's kernels, its TCP sockets included.
MINIMUM = (4, 2)


def _version(argv: list[str]) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"Version:\s*(\d+)\.(\d+)", out)
    return (int(found.group(1)), int(found.group(2))) if found else None


def tree_command(tree: Path = TREE) -> list[str]:
    """CRIU of the Debian tree ``tree``, run through that tree's own loader and libraries."""
    libs = f"{tree}/usr/lib/x86_64-linux-gnu:{tree}/lib/x86_64-linux-gnu"
    return [f"{tree}/usr/lib64/ld-linux-x86-64.so.2", "--library-path", libs, f"{tree}/usr/sbin/criu"]


@functools.cache
def command() -> list[str] | None:
    """A CRIU of version 4.2 or later: the host's ``criu``, else the fetched tree's; None when neither."""
    host = shutil.which("criu")
    if host and (_version([host]) or (0,)) >= MINIMUM:
        return [host]
    if (TREE / "usr/sbin/criu").exists():
        argv = tree_command()
        if (_version(argv) or (0,)) >= MINIMUM:
            return argv
    return None


def unavailable() -> str | None:
    """Why a desktop cannot be forked on this machine (in words that say what to do), or None."""
    if os.geteuid() != 0:
        return "forking a desktop needs a server running as root (CRIU and namespaces with host uid maps)"
    if command() is None:
        return (f"no CRIU {'.'.join(map(str, MINIMUM))} or later here: `python3 -m hci_envs install --fork` fetches "
                f"Debian's into {TREE} (or install one on PATH)")
    for program in ("ip", "iptables-save", "tar", "nsenter", "setpriv"):
        if shutil.which(program, path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
            return f"forking a desktop needs {program!r}, which is not installed"
    return None


def fetch(tree: Path = TREE, log: object = print) -> None:
    """Put Debian 14's CRIU into ``tree`` with debootstrap, unless a working one is there already. Debian 12's
    debootstrap knows the release by the script of the one in development (``sid``)."""
    if (tree / "usr/sbin/criu").exists() and (_version(tree_command(tree)) or (0,)) >= MINIMUM:
        return
    if shutil.which("debootstrap") is None:
        raise MissingDependencyError("fetching CRIU needs debootstrap (apt-get install debootstrap)",
                                     program="debootstrap")
    log(f"fetching Debian's CRIU ({RELEASE}) into {tree} (debootstrap, once)")  # type: ignore[operator]
    partial = tree.with_name(tree.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["debootstrap", "--variant=minbase", "--include=criu", RELEASE, str(partial), MIRROR,
                    "/usr/share/debootstrap/scripts/sid"], check=True, stdout=subprocess.DEVNULL)
    found = _version(tree_command(partial))
    if (found or (0,)) < MINIMUM:
        shutil.rmtree(partial, ignore_errors=True)
        raise MissingDependencyError(f"Debian's {RELEASE} gave CRIU {found or 'that does not run'}, not "
                                     f"{'.'.join(map(str, MINIMUM))} or later: install one on PATH", program="criu")
    shutil.rmtree(tree, ignore_errors=True)
    partial.rename(tree)
    command.cache_clear()
    if tree == DEFAULT_TREE:  # the earlier release's tree, no longer run by this version
        shutil.rmtree(EARLIER_TREE, ignore_errors=True)


def errors_of(log_path: Path, limit: int = 6) -> str:
    """CRIU's error lines from its log, on one line (its harmless RLIMIT_NOFILE complaint left out)."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    found = [line.strip() for line in lines if "Error" in line and "RLIMIT_NOFILE" not in line]
    return " | ".join(found[-limit:]) or " | ".join(lines[-3:]) or "(empty log)"
