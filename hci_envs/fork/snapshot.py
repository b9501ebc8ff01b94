"""A tree dumped with CRIU (left running), and restored as copies with host uids of their own.

A dump holds every process of the tree with its memory, and the contents of its tmpfs mounts (/tmp, /dev/shm).
The mounts that come from the host are named external: each copy gets its own display socket folder in place
of the source's, and its own home, which the dump's ``post-dump`` action fills while the tree is still frozen.
A copy's images are hard links to the dump's, but for the two small ones rewritten for its uids
(:func:`.criu_image.give_copy_its_uids`). The pipes between the server and the agent's lasting processes are
dumped as the processes' ends alone; a restore is handed new ones (:mod:`.kept`).
"""

from __future__ import annotations

import errno
import os
import struct
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ForkError
from ..sandbox.watchdog import remove_temporary_dir
from . import criu
from .criu_image import frozen_seconds, give_copy_its_uids
from .sharing import mergeable
from .tree import DesktopTree, external_mounts, skeleton, socket_folder, tree_folder


@dataclass
class Dump:
    """A tree's images, and what taking them cost."""

    images: Path
    seconds: float
    frozen_seconds: float

    @property
    def size(self) -> int:
        return sum(f.stat().st_size for f in self.images.iterdir() if f.is_file())


def _criu() -> list[str]:
    why = criu.unavailable()
    if why is not None:
        raise ForkError(why, reason="unavailable")
    return criu.command()  # type: ignore[return-value]


@dataclass
class HomeCopy:
    """Where one copy's home is, and the host uid and gid its files go to."""

    path: Path
    uid: int
    gid: int


def dump(tree: DesktopTree, images: Path, home: Path, copies: list[HomeCopy]) -> Dump:
    """Dump ``tree`` into ``images`` (made here), leaving it running; while it is still frozen, its ``home``
    is copied into each of ``copies``. Raises :class:`ForkError` with CRIU's own words when the tree holds
    what cannot be dumped (the copies' homes may then hold part of the home: their owners discard them)."""
    command = _criu()
    images.mkdir(mode=0o700)
    script = images.with_name("post-dump.sh")
    argv = [sys.executable, "-m", "hci_envs.fork.home_copy", str(home), *(f"{c.path}:{c.uid}:{c.gid}" for c in copies)]
    script.write_text(f"#!/bin/sh\nexec {shlex.join(argv)}\n")  # the server's Python, which has this package
    script.chmod(0o700)
    # chromium keeps deleted files open (its metrics, 4 MiB), which CRIU saves whole up to the ghost limit, and
    # locks its profile, which CRIU saves only when asked; the network is left as it is (no iptables lock), and
    # the apps' TCP connections (inside the tree's namespace) are dumped as they are, and restored in each copy
    external = [f"--external=mnt[{mountpoint}]:{key}" for mountpoint, key in external_mounts().items()]
    started = time.perf_counter()
    done = subprocess.run([*command, "dump", "-t", str(tree.pid1), "-D", str(images), "--leave-running",
                           "--network-lock", "skip", "--tcp-established", "--ghost-limit", "64M", "--file-locks",
                           *external, "--action-script", str(script), "-o", "dump.log"],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise ForkError(f"CRIU could not dump the desktop: {criu.errors_of(images / 'dump.log')}",
                        reason="dump failed")
    try:
        frozen = frozen_seconds(images)
    except (OSError, LookupError, ValueError, struct.error):  # the figure only: the dump itself is whole
        frozen = float("nan")
    return Dump(images, seconds, frozen)


def restore(source: Dump, home: Path, *, root_uid: int, agent_uid: int, agent_gid: int,
            pipes: Mapping[int, int] | None = None, timeout: float = 60.0) -> DesktopTree:
    """A new tree from ``source``'s images, its root and agent running as ``root_uid`` and ``agent_uid``, with
    ``home`` (filled at the dump) as its home and a display socket folder of its own. ``pipes`` gives the tree
    new ends of the pipes whose other end was the server's at the dump (by the dumped pipe's inode: the
    server's descriptor of the tree's end of a new pipe, whose other end the server keeps). Its processes stay in the
    server's control groups (the caller puts the agent's in the copy's own): not in the source's, where the dump
    found them. Raises :class:`ForkError` with CRIU's words when the restore fails, and leaves nothing then."""
    command = _criu()
    folder = tree_folder(root_uid)
    images = folder / "images"
    pidfile = images / "pid"
    try:
        images.mkdir()
        images.chmod(0o755)  # CRIU reads some images once it runs as the copy's root (the folder above lets it)
        for image in source.images.iterdir():
            if image.suffix == ".img" or image.name == "stats-dump":
                _link_or_copy(image, images / image.name)
        give_copy_its_uids(images, {0: root_uid, 1000: agent_uid}, {0: root_uid, 1000: agent_gid})
        x11 = socket_folder(folder, root_uid)
        own = {"/tmp/.X11-unix": x11, "/home/agent": home}
        external = [f"--external=mnt[{key}]:{own.get(mountpoint, mountpoint)}"
                    for mountpoint, key in external_mounts().items()]
        handed = [f"--inherit-fd=fd[{fd}]:pipe:[{inode}]" for inode, fd in (pipes or {}).items()]
        try:
            # under the KSM mark, which the processes it restores keep: copies share what they did not change
            done = subprocess.run([*mergeable(command), "restore", "-D", str(images), "-W", str(images), "--restore-detached",
                                   "--file-locks", "--tcp-established", "--manage-cgroups=ignore", "--pidfile",
                                   str(pidfile), "--root", str(skeleton()), *external, *handed, "-o", "restore.log"],
                                  capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout,
                                  pass_fds=tuple((pipes or {}).values()))
        except subprocess.TimeoutExpired:
            raise ForkError(f"CRIU did not restore a copy within {timeout:.0f}s", reason="restore failed") from None
        if done.returncode:
            raise ForkError(f"CRIU could not restore a copy of the desktop: {criu.errors_of(images / 'restore.log')}",
                            reason="restore failed")
        tree = DesktopTree(int(pidfile.read_text()), folder, root_uid, agent_uid, agent_gid)
    except BaseException:
        _kill_restored(pidfile)
        remove_temporary_dir(folder)
        raise
    shutil.rmtree(images, ignore_errors=True)  # the copy runs; its images (links and two small files) are spent
    return tree


def _link_or_copy(image: Path, to: Path) -> None:
    """A copy's image: a hard link to the dump's, or a copy where they are on two filesystems."""
    try:
        os.link(image, to)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.copyfile(image, to)


def _kill_restored(pidfile: Path) -> None:
    """Whatever CRIU had restored of a copy that failed (its pid 1 ends every process of it)."""
    import signal

    try:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)
    except (OSError, ValueError):
        pass
