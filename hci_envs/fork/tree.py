"""A desktop as one process tree in namespaces of its own, which is what CRIU can dump and restore many times.

The tree's pid 1 (:mod:`.tree_init`) runs in new user, pid, mount, network, ipc and uts namespaces, in a root
of its own: a skeleton of mountpoints shared by every tree (:func:`skeleton`), with the host's /usr and /etc
bound read-only, tmpfs /dev and /tmp, and the session's home bound in. Inside, uid 0 is a host uid of the desktop's own (never the
host's root) and uid 1000 is its agent. Xvfb listens on display :5 in a socket folder of the host's that is
bound onto the tree's /tmp/.X11-unix; the server reaches it through a display number of its own on the host
(:class:`HostDisplay`). Everything else the desktop runs is started inside with :meth:`DesktopTree.spawn`, and
becomes a child of pid 1 (which reaps it and writes how it ended): nothing of the server is in the tree.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import DesktopDiedError, DisplayStartError, MissingDependencyError
from ..sandbox.accounts import run_dir
from ..sandbox.watchdog import temporary_dir
from .sharing import MARK, enabled as sharing_enabled

#: The tree's folders for its own state, as its processes see them (made by its pid 1).
STATE = "/tmp/.hci"
#: A host pid no process can have (above the kernel's largest pid_max): a process of a tree that ended before
#: the server saw it. Never -1 or 0, which kill() takes for "every process" and "my group".
NO_PID = 4_194_305
#: The display inside every tree (each has its own network namespace and socket folder).
INSIDE_DISPLAY = 5
#: Mounts that come into a tree from the host, named for CRIU: at a dump, by mountpoint; at a restore, by source.
#: Their contents are not in a dump: the display's socket folder is each tree's own, and the home is copied.
#: The server's own Python and package come in too (:func:`server_code`): :func:`external_mounts` has them all.
EXTERNAL_MOUNTS = {"/usr": "_usr", "/etc": "_etc", "/tmp/.X11-unix": "_x11", "/home/agent": "_home",
                   **{f"/dev/{n}": f"_dev_{n}" for n in ("null", "zero", "random", "urandom", "full", "tty")}}
#: Where a tree has tmpfs mounts of its own, over the skeleton.
TREE_TMPFS = ("/tmp/", "/var/tmp/", "/run/", "/dev/")
#: The tree's own mountpoints: no folder of the server's is bound at or above one of them.
TREE_MOUNTS = ("/usr", "/etc", "/proc", "/dev", "/tmp", "/var/tmp", "/run", "/home/agent", "/old")


@functools.cache
def server_code() -> tuple[str, ...]:
    """The host folders of the server's Python environment and packages (its virtual environment, and the
    ``hci_envs`` and ``traits`` packages where they are not in it), where they are not under /usr: a tree
    sees them read-only at the same paths, so that an app started as ``{python} -m hci_envs....`` (a task's
    web site, its form) runs in the tree too. Only folders an agent account reaches on the host (every folder
    above them passable by all) come in: the tree sees no more of the server than any desktop's agent. Found once
    per process: every launch, dump and restore must name the same mounts."""
    import importlib.util

    candidates = [sys.prefix]
    for package in ("hci_envs", "traits"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin:
            candidates.append(str(Path(spec.origin).parent))
    found: list[str] = []
    for candidate in candidates:
        place = os.path.realpath(candidate)
        if any(place == d or place.startswith(d + "/") for d in found) or _under_system(place) or \
                not _reachable_by_all(place):
            continue
        found = [f for f in found if not f.startswith(place + "/")]
        found.append(place)
    return tuple(sorted(found))


def _under_system(place: str) -> bool:
    """Whether ``place`` is in /usr or /etc (a tree has them), or at or above a mountpoint of the tree's own."""
    return any(place == d or place.startswith(d + "/") for d in ("/usr", "/etc")) or \
        any(m == place or m.startswith(place.rstrip("/") + "/") for m in TREE_MOUNTS)


def _reachable_by_all(place: str) -> bool:
    """Whether every folder above ``place`` lets anyone through, and ``place`` lets anyone read it."""
    path = Path(place)
    try:
        return all(os.stat(p).st_mode & 0o001 for p in path.parents) and os.stat(path).st_mode & 0o005 == 0o005
    except OSError:
        return False


def external_mounts() -> dict[str, str]:
    """Every mount a tree has from the host, by its mountpoint, with the key CRIU knows it by."""
    return {**EXTERNAL_MOUNTS, **{place: f"_code{i}" for i, place in enumerate(server_code())}}
#: Where pid 1 comes from (its text is passed with -c: the tree never sees this checkout).
_INIT = Path(__file__).with_name("tree_init.py")
#: Made in the new namespaces by a launcher process (never the server itself, whose threads must not fork into
#: namespaces); root writes the uid and gid maps. Prints pid 1's host pid. With "merge" in its settings, everything
#: it starts is open to KSM (see .sharing), as is everything _SPAWN starts with "merge" in its spec.
_LAUNCH = r'''
import ctypes, json, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
NEW = 0x10000000 | 0x00020000 | 0x20000000 | 0x40000000 | 0x08000000 | 0x04000000  # user ns pid net ipc uts
uid_map, gid_map, init, settings = sys.argv[1:5]
if json.loads(settings).get("merge"):
    ''' + MARK + r'''
go_r, go_w = os.pipe()
pid_r, pid_w = os.pipe()
child = os.fork()
if child == 0:
    if libc.unshare(NEW) != 0:
        os.write(pid_w, b"unshare: " + os.strerror(ctypes.get_errno()).encode())
        os._exit(1)
    os.read(go_r, 1)
    os.setgroups([]); os.setgid(0); os.setuid(0)
    libc.mount(b"none", b"/", None, 0x40000 | 0x4000, None)  # MS_REC | MS_PRIVATE
    first = os.fork()
    if first == 0:
        os.setsid()
        os.execv("/usr/bin/python3", ["python3", "-c", init, settings])
    os.write(pid_w, str(first).encode())
    os._exit(0)
mine = os.readlink("/proc/self/ns/user")
while os.readlink(f"/proc/{child}/ns/user") == mine and os.waitpid(child, os.WNOHANG) == (0, 0):
    time.sleep(0.001)
for kind, text in (("uid_map", uid_map), ("gid_map", gid_map)):
    with open(f"/proc/{child}/{kind}", "w") as f:
        f.write(text)
os.write(go_w, b"x")
os.waitpid(child, 0)
print(os.read(pid_r, 256).decode(), flush=True)
'''
#: Run inside a tree by nsenter, as the tree's root: starts a program as ``uid`` in a session of its own, with
#: its output in the tree's log folder or the descriptors it was handed (``fds``: pairs of the program's number
#: and nsenter's), and exits at once so that the program becomes pid 1's. Prints its pid (as the tree sees it)
#: or why it could not start.
_SPAWN = r'''
import ctypes, json, os, resource, sys
spec = json.loads(sys.argv[1])
if spec["merge"]:
    ''' + MARK + r'''
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        os.close(r)
        os.setsid()
        open(f"/tmp/.hci/exits/{os.getpid()}", "w").close()  # watched: pid 1 writes how it ends
        out = os.open("/dev/null", os.O_WRONLY)
        if spec["log"]:
            path = f"/tmp/.hci/logs/{spec['log']}"
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0); os.dup2(out, 1); os.dup2(out, 2)
        handed = [(target, os.dup(fd)) for target, fd in spec["fds"]]  # out of the way of the targets first
        for target, fd in handed:
            os.dup2(fd, target)  # inheritable
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd > 2 and fd not in dict(spec["fds"]):
                try:
                    os.set_inheritable(fd, False)
                except OSError:
                    pass
        if spec["nproc"]:
            resource.setrlimit(resource.RLIMIT_NPROC, (spec["nproc"], spec["nproc"]))
        if spec["uid"]:
            os.setgroups([]); os.setgid(spec["uid"]); os.setuid(spec["uid"])
            if ctypes.CDLL(None).prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
                raise OSError("no_new_privs")
        os.umask(spec["umask"])
        os.chdir(spec["cwd"])
        os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
    except BaseException as exc:
        os.write(w, f"{type(exc).__name__}: {exc}".encode())
        os._exit(127)
os.close(w)
error = os.read(r, 4096).decode()
print(json.dumps({"pid": pid, "error": error or None}), flush=True)
'''


#: Run inside a tree by nsenter, as the tree's root: becomes ``uid`` and executes the program, which stays the
#: child of nsenter (outside the tree) with the descriptors the server handed it (pipes).
_EXEC = r'''
import ctypes, json, os, resource, sys
spec = json.loads(sys.argv[1])
os.setsid()  # a group of its own, which the server signals and ends (nsenter's is the starter's)
if spec["nproc"]:
    resource.setrlimit(resource.RLIMIT_NPROC, (spec["nproc"], spec["nproc"]))
if spec["uid"]:
    os.setgroups([]); os.setgid(spec["uid"]); os.setuid(spec["uid"])
    if ctypes.CDLL(None).prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        sys.exit("no_new_privs")
os.umask(spec["umask"])
os.chdir(spec["cwd"])
os.execvpe(spec["argv"][0], spec["argv"], spec["env"])
'''


def _program(name: str) -> str:
    found = shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if found is None:
        raise MissingDependencyError(f"a forkable desktop needs {name!r}, which is not installed", program=name)
    return found


def _mountpoint(root: Path, folder: str) -> None:
    place = root
    for part in Path(folder).relative_to("/").parts:
        place = place / part
        if not place.is_dir():
            place.mkdir(mode=0o755, exist_ok=True)
            place.chmod(0o755)


def fork_dir() -> Path:
    """The run directory's folder of forkable desktops. A tree's pid 1 reaches its root and its socket folder
    through it as the tree's own root uid, not the host's: it and the run directory let anyone through
    (0711, whatever the umask was when they were made), and what is in them keeps its own modes."""
    folder = run_dir() / "fork"
    folder.mkdir(parents=True, exist_ok=True)
    for place in (run_dir(), folder):
        mode = place.stat().st_mode
        if mode & 0o011 != 0o011:
            place.chmod(mode | 0o011)
    return folder


def skeleton() -> Path:
    """The root every tree pivots into, and CRIU's ``--root`` at a restore: mountpoints only (every tree's
    mounts are its own), made once per machine."""
    root = fork_dir() / "root"
    marker = root / ".hci-envs-skeleton-1"
    if marker.exists():
        return root
    import tempfile

    fresh = Path(tempfile.mkdtemp(prefix="root.", dir=root.parent))  # one per maker: two may race on a new machine
    for d in ("usr", "etc", "proc", "dev", "tmp", "home/agent", "old", "run", "var/tmp"):
        (fresh / d).mkdir(parents=True)
    for link in ("bin", "sbin", "lib", "lib64"):
        if Path(f"/{link}").is_symlink():
            (fresh / link).symlink_to(os.readlink(f"/{link}").lstrip("/"))
    for folder in [fresh, *fresh.rglob("*")]:
        if folder.is_dir() and not folder.is_symlink():
            folder.chmod(0o755)
    (fresh / marker.name).touch()
    try:
        fresh.rename(root)
    except OSError as exc:  # another maker was first
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        shutil.rmtree(fresh, ignore_errors=True)
    return root


def tree_folder(group: int) -> Path:
    """A host folder for one tree: root's, which only the tree's root (its group, ``group``) may pass through
    to the display's socket folder (:func:`socket_folder`: the X server takes any client that reaches it, so no
    one else may), and which the tree can neither list nor change (root writes a copy's images there). The
    watchdog removes it if the server dies."""
    trees = fork_dir() / "trees"
    trees.mkdir(parents=True, exist_ok=True)
    trees.chmod(0o711)
    folder = temporary_dir("tree-", parent=trees)
    os.chown(folder, 0, group)
    folder.chmod(0o710)
    return folder


def socket_folder(folder: Path, owner: int) -> Path:
    """The host folder bound onto a tree's /tmp/.X11-unix, its X server's (the tree's root) to write in; the
    tree's apps reach it inside, through the bind. Outside, it is in the tree's folder, which no one but root
    and the tree's root may pass (an X server in a tree takes any client that reaches its socket)."""
    x11 = folder / "x11"
    x11.mkdir(mode=0o755)
    os.chown(x11, owner, owner)
    return x11


@dataclass
class ProcessEnd:
    """How a process of a tree ended: its exit code (negative: the signal that ended it)."""

    code: int


class Signalled:
    """What a process the server sees from outside offers to be signalled, as ``subprocess.Popen`` does:
    ``pid`` is where its signals go, and none goes once it has ended."""

    pid: int
    if TYPE_CHECKING:
        def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None:
        if self.pid > 0 and self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class TreeProcess(Signalled):
    """A process started in a tree, as the server sees it (what ``subprocess.Popen`` offers that a desktop
    uses: ``pid``, ``poll``, ``wait``, ``returncode``, signals). Its parent is the tree's pid 1, which writes
    how it ended; ``pid`` is its host pid (its group's too: it leads a session)."""

    def __init__(self, tree: DesktopTree, inside_pid: int, host_pid: int) -> None:
        self.tree = tree
        self.inside_pid = inside_pid
        self.pid = host_pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        try:
            text = self.tree.path(f"{STATE}/exits/{self.inside_pid}").read_text()
        except OSError:
            text = None if self.tree.alive() else "-9"
        if text:
            self.returncode = int(text)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.inside_pid), timeout or 0)
            time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]


class AttachedProcess(Signalled):
    """A command of the agent's in a tree, attached to the server: the ``subprocess.Popen`` of its starter
    (nsenter, outside the tree: its pipes, its exit status) with the command's own host ``pid``, which leads a
    process group of its own (what the server signals, and ends with its group)."""

    def __init__(self, starter: subprocess.Popen[bytes], pid: int) -> None:
        self.starter = starter
        self.pid = pid

    def __getattr__(self, name: str) -> Any:
        return getattr(self.starter, name)  # poll, wait, returncode, the pipes: the starter's


def started_child(starter: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """The host pid of the process nsenter ``starter`` started in a tree (its only child), once it leads a
    process group of its own (before that, signalling its group would miss it); :data:`NO_PID` for one that has
    ended already (a quick command: its output is in the starter's pipes)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            children = Path(f"/proc/{starter.pid}/task/{starter.pid}/children").read_text().split()
            if children and _group_of(int(children[0])) == int(children[0]):
                return int(children[0])
        except OSError:
            pass
        if starter.poll() is not None:
            return NO_PID
        if time.monotonic() > deadline:
            raise DisplayStartError(f"a command did not start in the desktop within {timeout:.0f}s")
        time.sleep(0.001)


class DesktopTree:
    """One desktop's process tree: its pid 1 on the host, the host folder of its display socket, and the host
    ids its root (0 inside; its uid is its gid) and agent (1000 inside) run as."""

    def __init__(self, pid1: int, folder: Path, root_uid: int, agent_uid: int, agent_gid: int) -> None:
        self.pid1 = pid1
        self.folder = folder
        self.root_uid = root_uid
        self.agent_uid = agent_uid
        self.agent_gid = agent_gid
        self._pid_ns = os.readlink(f"/proc/{pid1}/ns/pid")

    # -- starting ----------------------------------------------------------------------------------------
    @classmethod
    def launch(cls, folder: Path, *, root_uid: int, agent_uid: int, agent_gid: int, home: Path, screen: str,
               dpi: int, files: Mapping[str, str], timeout: float, tmp_bytes: int | None = None) -> DesktopTree:
        """Start a tree whose X server runs with ``screen`` ("WxHxD") and whose agent's home is the host folder
        ``home``; ``files`` are written into its state folder (by name). Returns once its display listens."""
        for program in ("nsenter", "mount", "umount", "pivot_root", "ip", "Xvfb"):
            _program(program)
        x11 = socket_folder(folder, root_uid)
        code = server_code()
        for place in code:  # mountpoints in the skeleton every tree shares (the tree's root cannot make them
            if not place.startswith(TREE_TMPFS):  # there); in its own tmpfs (a checkout in /tmp), it makes them
                _mountpoint(skeleton(), place)
        settings = json.dumps({"root": str(skeleton()), "x11": str(x11), "screen": screen, "dpi": dpi, "code": code,
                               "files": dict(files), "home": str(home), "timeout": timeout, "tmp_bytes": tmp_bytes,
                               "merge": sharing_enabled()})
        uid_map, gid_map = f"0 {root_uid} 1\n1000 {agent_uid} 1\n", f"0 {root_uid} 1\n1000 {agent_gid} 1\n"
        try:
            launcher = subprocess.run([sys.executable, "-c", _LAUNCH, uid_map, gid_map, _INIT.read_text(),
                                       settings], capture_output=True, text=True, timeout=timeout + 30, cwd="/",
                                      stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise DisplayStartError(f"a forkable desktop did not start within {timeout + 30:.0f}s") from None
        first = launcher.stdout.strip()
        if launcher.returncode or not first.isdigit():
            raise DisplayStartError(f"a forkable desktop could not start: {(first + ' ' + launcher.stderr).strip()}")
        tree = cls(int(first), folder, root_uid, agent_uid, agent_gid)
        deadline = time.monotonic() + timeout
        while not tree.path(f"{STATE}/xvfb.pid").exists():
            if not tree.alive() or time.monotonic() > deadline:
                # pid 1's own errors (building the root) went to the launcher's output; Xvfb's to its log
                said = launcher.stderr.strip().splitlines()[-3:] or [tree.log_tail("xvfb.log")]
                tree.kill()
                raise DisplayStartError(f"a forkable desktop's X server did not start: {' | '.join(said)}")
            time.sleep(0.01)
        return tree

    # -- looking at it ---------------------------------------------------------------------------------------
    def path(self, inside: str) -> Path:
        """A path of the tree's, from the host (through its pid 1's root)."""
        return Path(f"/proc/{self.pid1}/root{inside}")

    def log_tail(self, name: str, lines: int = 8) -> str:
        try:
            text = self.path(f"{STATE}/logs/{name}").read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    def alive(self) -> bool:
        try:
            return os.readlink(f"/proc/{self.pid1}/ns/pid") == self._pid_ns and _state(self.pid1) not in "ZX"
        except OSError:
            return False

    def pids(self) -> dict[int, int]:
        """Every live process of the tree: its pid inside (key) and on the host (value)."""
        found: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") != self._pid_ns:
                    continue
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("NSpid:"):
                    found[int(line.split()[-1])] = int(entry)
        return found

    def process(self, inside_pid: int) -> TreeProcess:
        """The tree's process ``inside_pid`` (one that has ended, if it is not found running: its host pid is
        then one no process can have, which no signal reaches)."""
        return TreeProcess(self, inside_pid, self.pids().get(inside_pid, NO_PID))

    def xvfb(self) -> TreeProcess:
        return self.process(int(self.path(f"{STATE}/xvfb.pid").read_text()))

    # -- acting on it ----------------------------------------------------------------------------------------
    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str], uid: int = 1000, cwd: str = "/",
              log: str | None = None, max_processes: int = 0, umask: int = 0o077,
              fds: Mapping[int, int] | None = None) -> TreeProcess:
        """Start ``argv`` in the tree as ``uid`` (its own: 0 the tree's root, 1000 its agent), in a session of its
        own, with no new privileges; its output goes to ``log`` in the tree's log folder. ``fds`` hands it
        descriptors of the server's: its number for each (0, 1 and 2 among them replace /dev/null and the log).
        The process is pid 1's, and in a dump with them: a pipe whose other end stays with the server is dumped
        as the process's end alone, which a restore is given anew (:func:`.snapshot.restore`)."""
        handed = dict(fds or {})
        spec = json.dumps({"argv": list(argv), "env": dict(env), "uid": uid, "cwd": cwd, "log": log,
                           "nproc": max_processes, "umask": umask, "fds": sorted(handed.items()),
                           "merge": sharing_enabled()})
        try:
            done = subprocess.run(self._enter(_SPAWN, spec), capture_output=True, text=True, timeout=30, env={},
                                  cwd="/", stdin=subprocess.DEVNULL, pass_fds=tuple(handed.values()))
        except subprocess.TimeoutExpired:
            raise DisplayStartError(f"could not start {argv[0]!r} in the desktop within 30s") from None
        try:
            said = json.loads(done.stdout)
        except ValueError:
            if not self.alive():
                raise DesktopDiedError("the desktop's process tree has ended") from None
            raise DisplayStartError(f"could not start {argv[0]!r} in the desktop: {done.stderr.strip()}") from None
        if said["error"]:
            raise MissingDependencyError(f"could not start {argv[0]!r} in the desktop: {said['error']}",
                                         program=argv[0]) if "FileNotFound" in said["error"] else \
                DisplayStartError(f"could not start {argv[0]!r} in the desktop: {said['error']}")
        return self.process(said["pid"])

    def attached(self, argv: Sequence[str], *, env: Mapping[str, str], uid: int = 1000, cwd: str = "/",
                 max_processes: int = 0, umask: int = 0o077) -> list[str]:
        """The command that runs ``argv`` in the tree as ``uid`` while staying attached to its starter: the
        child of nsenter, with the descriptors it was handed (pipes to the server). Such a process cannot be
        in a dump: a fork ends it first."""
        spec = json.dumps({"argv": list(argv), "env": dict(env), "uid": uid, "cwd": cwd, "nproc": max_processes,
                           "umask": umask})
        return self._enter(_EXEC, spec)

    def _enter(self, script: str, spec: str) -> list[str]:
        return [_program("nsenter"), f"--target={self.pid1}", "--user", "--mount", "--pid", "--net", "--ipc",
                "--uts", "--root", "--wd=/", "--", "/usr/bin/python3", "-c", script, spec]

    def kill(self) -> None:
        """End the whole tree: its pid 1 killed, the kernel ends every other process of its pid namespace."""
        if self.alive():
            try:
                os.kill(self.pid1, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _group_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])


def _stale(lock: Path) -> bool:
    """Whether a display's lock file names a process that is gone."""
    try:
        pid = int(lock.read_text().strip())
    except (OSError, ValueError):
        return False
    return not Path(f"/proc/{pid}").exists()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


class HostDisplay:
    """A display number on the host that leads to a tree's X server: a link in /tmp/.X11-unix to its socket.
    The number's lock file (which X servers honour) and its abstract socket name are held, so that neither an
    X server nor an agent can take the number (an agent binding the abstract name would catch the server's
    connections)."""

    FIRST, LAST = 700, 999

    def __init__(self, target: Path) -> None:
        links = Path("/tmp/.X11-unix")
        links.mkdir(mode=0o755, exist_ok=True)
        st = links.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
            raise DisplayStartError(f"{links} must be a folder of root's (it is not): forkable desktops link their "
                                    "displays there")
        for number in range(self.FIRST, self.LAST + 1):
            lock = Path(f"/tmp/.X{number}-lock")
            link = links / f"X{number}"
            if link.is_symlink() and _stale(lock):  # a number a server that was killed held
                link.unlink(missing_ok=True)
                lock.unlink(missing_ok=True)
            if lock.exists() or os.path.lexists(link):
                continue
            held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                held.bind(f"\0/tmp/.X11-unix/X{number}")
            except OSError:
                held.close()
                continue
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            except FileExistsError:
                held.close()
                continue
            os.write(fd, f"{os.getpid():>10}\n".encode())
            os.close(fd)
            try:
                link.symlink_to(target)
            except OSError:
                lock.unlink(missing_ok=True)
                held.close()
                continue
            self.number, self._held, self._lock, self._link = number, held, lock, link
            return
        raise DisplayStartError(f"no free display number between {self.FIRST} and {self.LAST} for a forkable desktop")

    @property
    def name(self) -> str:
        return f":{self.number}"

    def close(self) -> None:
        self._link.unlink(missing_ok=True)
        self._lock.unlink(missing_ok=True)
        self._held.close()
