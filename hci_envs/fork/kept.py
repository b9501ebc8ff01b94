"""The agent's lasting processes in a forkable desktop, which a fork carries with their memory: the persistent
shell, the python tool's interpreter, CodeAct's worker.

Each talks to the server through pipes. It is started as a child of the tree's pid 1 (so that it is in a dump)
with the pipes' ends the server hands it. CRIU dumps such a pipe as the process's end alone; at a restore,
the copy's process gets the end of a new pipe in its place (``--inherit-fd``), whose other end the copy's
server side takes (:meth:`KeptProcess.take_end`). A fork happens between the agent's tool calls (the
environment's lock), when these processes wait for their next command and their pipes are empty.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .tree import NO_PID, DesktopTree, TreeProcess


@dataclass(frozen=True)
class KeptSpec:
    """What a moment records of one lasting process: its pid in the tree, and for each of its descriptors that
    is a pipe to the server, the pipe's inode and whether the process reads it."""

    name: str
    inside_pid: int
    pipes: dict[int, tuple[int, bool]] = field(default_factory=dict)
    #: Which of its stdin, stdout and stderr the server made (its side of them is a file object, as Popen's).
    standard: tuple[int, ...] = ()


class KeptProcess(TreeProcess):
    """A lasting process of the agent's: ``pid`` (its host pid, leading its own group), ``poll``, ``wait``
    and the signals, as any process of the tree; ``stdin``, ``stdout`` and ``stderr`` as ``Popen`` has them
    when the server piped them. In a copy, the server's ends of its other pipes wait in :meth:`take_end`."""

    def __init__(self, tree: DesktopTree, spec: KeptSpec, host_pid: int, ends: dict[int, int]) -> None:
        super().__init__(tree, spec.inside_pid, host_pid)
        self.spec = spec
        self._ends = dict(ends)
        self.stdin: Any = os.fdopen(self._ends.pop(0), "wb") if 0 in spec.standard else None
        self.stdout: Any = os.fdopen(self._ends.pop(1), "rb") if 1 in spec.standard else None
        self.stderr: Any = os.fdopen(self._ends.pop(2), "rb") if 2 in spec.standard else None

    def take_end(self, number: int) -> int:
        """The server's end of the pipe the process has as descriptor ``number``, now the caller's to close."""
        try:
            return self._ends.pop(number)
        except KeyError:
            raise LookupError(f"the process has no pipe of the server's as descriptor {number}") from None

    def close_ends(self) -> None:
        """Close what of the server's ends no one took (the process sees its pipes close)."""
        for pipe in (self.stdin, self.stdout, self.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        ends, self._ends = self._ends, {}
        for fd in ends.values():
            os.close(fd)


def spawn(tree: DesktopTree, name: str, argv: Sequence[str], *, env: Mapping[str, str], cwd: str,
          max_processes: int, stdin: Any = subprocess.DEVNULL, stdout: Any = subprocess.DEVNULL,
          stderr: Any = subprocess.DEVNULL, pass_fds: Sequence[int] = ()) -> KeptProcess:
    """Start ``argv`` as the tree's agent, pid 1's child, with what ``subprocess.Popen`` would give it:
    ``PIPE``, ``DEVNULL`` or a descriptor for each standard stream, and ``pass_fds`` under their own numbers."""
    handed: dict[int, int] = {}
    ours: dict[int, int] = {}  # the server's ends of the pipes made here
    made: list[int] = []  # the process's ends of them, closed here once it has them
    try:
        for number, how in ((0, stdin), (1, stdout), (2, stderr)):
            if how == subprocess.PIPE:
                r, w = os.pipe()
                mine, theirs = (r, w) if number == 0 else (w, r)
                handed[number], ours[number] = mine, theirs
                made.append(mine)
            elif isinstance(how, int) and how >= 0:
                handed[number] = how
            elif how not in (None, subprocess.DEVNULL):
                handed[number] = how.fileno()
        for fd in pass_fds:
            handed[fd] = fd
        pipes = {number: end for number, fd in handed.items() if (end := _pipe(fd)) is not None}
        started = tree.spawn(argv, env=env, uid=1000, cwd=cwd, max_processes=max_processes, fds=handed)
    except BaseException:
        for fd in ours.values():
            os.close(fd)
        raise
    finally:
        for fd in made:
            os.close(fd)
    spec = KeptSpec(name, started.inside_pid, pipes, tuple(sorted(ours)))
    return KeptProcess(tree, spec, started.pid, ours)


def _pipe(fd: int) -> tuple[int, bool] | None:
    """The inode of the pipe ``fd`` is an end of, and whether it is the reading end (None: not a pipe)."""
    if not os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
        return None
    return os.fstat(fd).st_ino, fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY


class NewPipes:
    """New pipes for a restore, one for each pipe of ``specs`` (by the dumped pipe's inode): the restore
    gives the tree's ends to its processes (``tree_ends``), and :meth:`processes` gives the server's to the
    restored processes. Closing gives up what was not handed on."""

    def __init__(self, specs: Sequence[KeptSpec]) -> None:
        self.specs = list(specs)
        self._tree: dict[int, int] = {}
        self._server: dict[int, int] = {}
        try:
            for spec in self.specs:
                for inode, reads in spec.pipes.values():
                    if inode in self._tree:
                        continue
                    r, w = os.pipe()
                    self._tree[inode], self._server[inode] = (r, w) if reads else (w, r)
        except BaseException:
            self.close()
            raise

    def tree_ends(self) -> dict[int, int]:
        return dict(self._tree)

    def processes(self, tree: DesktopTree) -> dict[int, KeptProcess]:
        """The restored processes, by their pid in the tree, each with the server's ends of its pipes (an end
        of a pipe the process has twice is handed twice, as two descriptors). Their specs name the new pipes,
        so that this desktop can be forked in its turn."""
        pids = tree.pids()
        kept: dict[int, KeptProcess] = {}
        handed: dict[int, int] = {}
        try:
            for spec in self.specs:
                ends, pipes = {}, {}
                for number, (inode, reads) in spec.pipes.items():
                    ends[number] = os.dup(handed[inode]) if inode in handed else self._server.pop(inode)
                    handed.setdefault(inode, ends[number])
                    pipes[number] = (os.fstat(ends[number]).st_ino, reads)
                now = KeptSpec(spec.name, spec.inside_pid, pipes, spec.standard)
                kept[spec.inside_pid] = KeptProcess(tree, now, pids.get(spec.inside_pid, NO_PID), ends)
                ends = {}
        except BaseException:
            for fd in ends.values():
                os.close(fd)
            for made in kept.values():
                made.close_ends()
            raise
        return kept

    def close(self) -> None:
        for fd in [*self._tree.values(), *self._server.values()]:
            os.close(fd)
        self._tree.clear()
        self._server.clear()
