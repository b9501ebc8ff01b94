"""A desktop that can be forked: every process of it in one tree (:mod:`.tree`), and :meth:`ForkableDesktop.fork`
makes live copies of it as it is at that moment.

It is a :class:`~hci_envs.desktop.Desktop` whose display runs inside the tree: Xvfb, openbox (as the tree's
root, with the configuration that can start no program) and the apps (as its agent). The server's parts stay
outside and reach the display through a host display number (:class:`.tree.HostDisplay`): the X connections
that capture, inject and watch, and x11vnc. Those are connections from outside the tree, which CRIU cannot
dump, so a fork closes them, dumps the tree (left running), opens them again, and restores the copies, each
with host uids of its own. What the server's connection held is carried over: the clipboard it served and
the pointer (the X server's, dumped with it).

Its accessibility bus runs in the tree too (:mod:`.bus`), and the server's connection to it is closed around
a fork as its X connections are. The agent's lasting processes (the persistent shell, the python tool's
interpreter, CodeAct's worker: :meth:`spawn_lasting`) are pid 1's children too, and a fork carries them with
new pipes to the server (:mod:`.kept`); its other commands attached to the server (a one-shot bash command)
end at a fork, as they end at the end of their tool call. Not yet in a forkable desktop: a network (the tree's
namespace has only its loopback: an egress policy other than ``none`` is refused).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..desktop.base_desktop import X_RESOURCES
from ..desktop.desktop import Desktop
from ..desktop.wm import write_openbox_config
from ..errors import ConfigError, DesktopDiedError, ForkError
from ..protocol import AppState, StartState
from ..sandbox.accounts import AGENT_PATH, AgentAccount
from ..sandbox.limits import Limits
from ..sandbox.network import NetworkPolicy
from ..sandbox.watchdog import WATCHDOG, remove_temporary_dir, temporary_dir
from . import criu, kept
from .bus import TreeBus
from .kept import KeptProcess, KeptSpec, NewPipes
from .snapshot import Dump, HomeCopy, dump, restore
from .tree import (
    INSIDE_DISPLAY, STATE, AttachedProcess, DesktopTree, HostDisplay, TreeProcess, started_child, tree_folder,
)
from .uids import UidLease, lease_uid

log = logging.getLogger(__name__)

#: The agent's home, as the tree's processes see it.
HOME = "/home/agent"
#: The most copies one fork makes.
MAX_COPIES = 16


class ForkableDesktop(Desktop):
    """A :class:`~hci_envs.desktop.Desktop` in a process tree of its own, which :meth:`fork` copies live.
    Needs a server running as root and CRIU 4.2 or later (``python3 -m hci_envs install --fork``)."""

    def __init__(self, state: StartState | None = None, *, home: str | None = None,
                 account: AgentAccount | None = None, max_processes: int = 0, limits: Limits | None = None,
                 network: NetworkPolicy | None = None, dpi: int = 96, start_timeout: float = 15.0) -> None:
        why = criu.unavailable()
        if why is not None:
            raise ForkError(f"a forkable desktop cannot run here: {why}", reason="unavailable")
        if network is not None and network.mode != "none":
            raise ConfigError("a forkable desktop has no network yet: its egress policy must be 'none'",
                              field="network")
        if state is not None and state.home_view is not None:
            raise ConfigError("a forkable desktop shows the home at /home/agent only: its start state cannot ask "
                              f"for a home_view ({state.home_view})", field="home_view")
        super().__init__(state, home=home, account=account, max_processes=max_processes, limits=limits,
                         network=network, dpi=dpi, start_timeout=start_timeout)
        self.tree: DesktopTree | None = None
        self._host_display: HostDisplay | None = None
        self._uid_leases: list[UidLease] = []
        self._root_uid = self._agent_uid = self._agent_gid = -1
        self.last_dump: dict[str, float] = {}
        self._own_home: Path | None = None
        self._fork_lock = threading.Lock()
        #: The agent's lasting processes, by their pid in the tree.
        self._lasting: dict[int, KeptProcess] = {}

    # -- the tree --------------------------------------------------------------------------------------
    def _take_ids(self) -> None:
        """Host ids for the tree's root (leased) and agent (the account's, or leased), and a home of the
        desktop's own when it was given none (a folder of the host's, bound in: see :mod:`.home_copy`)."""
        self._uid_leases.append(lease_uid())
        self._root_uid = self._uid_leases[0].uid
        if self.account is not None:
            self._agent_uid, self._agent_gid = self.account.uid, self.account.gid
        else:
            self._uid_leases.append(lease_uid())
            self._agent_uid = self._agent_gid = self._uid_leases[1].uid
        if self.home_path is None:
            self._own_home = temporary_dir("hci-envs-home-")
            self._own_home.chmod(0o700)
            self.home_path = str(self._own_home)
        if self.account is None:  # a home made for no account is the server's: the tree's agent must own it
            os.chown(self.home_path, self._agent_uid, self._agent_gid)

    def _start_display(self) -> None:
        self._take_ids()
        config = write_openbox_config(self._runtime)
        menu = config.with_name("openbox-menu.xml")
        files = {"openbox.xml": config.read_text().replace(str(menu), f"{STATE}/openbox-menu.xml"),
                 "openbox-menu.xml": menu.read_text(), "xresources": X_RESOURCES.read_text(), **TreeBus.files()}
        c = self.state
        folder = tree_folder(self._root_uid)
        try:
            tree = DesktopTree.launch(folder, root_uid=self._root_uid, agent_uid=self._agent_uid,
                                      agent_gid=self._agent_gid, home=Path(self.home), dpi=self.dpi,
                                      screen=f"{c.width}x{c.height}x{c.depth}", files=files,
                                      timeout=self.start_timeout, tmp_bytes=self.limits.disk if self.limits else None)
        except BaseException:
            remove_temporary_dir(folder)
            raise
        self._took(tree)

    def _took(self, tree: DesktopTree) -> None:
        """Make ``tree`` this desktop's: guarded by the watchdog, reachable on a host display number."""
        self.tree = tree
        WATCHDOG.guard(tree.pid1)  # pid 1 leads its session: the watchdog's kill of the group ends the tree
        self._host_display = HostDisplay(tree.folder / "x11" / f"X{INSIDE_DISPLAY}")
        self.display_number = self._host_display.number
        self._xvfb = tree.xvfb()  # type: ignore[assignment]

    def can_reuse(self, state: StartState) -> bool:
        return state.home_view is None and super().can_reuse(state)  # else a new one, which says why it cannot

    def _vnc_options(self) -> list[str]:
        return ["-noshm"]  # the X server is in an IPC namespace of its own: it cannot attach x11vnc's segments

    def _new_accessibility_bus(self) -> TreeBus:  # type: ignore[override]
        """The bus in the tree (:mod:`.bus`): anonymous, since the server's uid is nobody's there."""
        assert self.tree is not None
        return TreeBus(self.tree)

    def host_pid(self, pid: int) -> int | None:
        """The tree's pid ``pid`` as the host sees it (None: no such process runs)."""
        return self.tree.pids().get(pid) if self.tree is not None else None

    def _spawn_window_manager(self) -> Path:
        assert self.tree is not None
        name = self.state.window_manager or ""
        ready = f"{STATE}/wm-ready"
        self.tree.path(ready).unlink(missing_ok=True)  # an earlier window manager's (a warm reset starts another)
        if name == "openbox":
            argv = ["openbox", "--config-file", f"{STATE}/openbox.xml", "--sm-disable", "--startup",
                    f"touch {ready}"]
            env = {"DISPLAY": f":{INSIDE_DISPLAY}", "HOME": "/run", "PATH": AGENT_PATH, "LANG": "C.UTF-8"}
            self._wm = self.tree.spawn(argv, env=env, uid=0, log="wm.log")  # type: ignore[assignment]
        else:
            self._wm = self._in_tree(name.split())  # type: ignore[assignment]
            self.tree.spawn(["touch", ready], env={"PATH": AGENT_PATH}, uid=0).wait(10)
        return self.tree.path(ready)

    # -- the agent's side, inside the tree ---------------------------------------------------------------
    @property
    def agent_home(self) -> str:
        return HOME

    def app_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = super().app_env()
        env.update({"HOME": HOME, "DISPLAY": f":{INSIDE_DISPLAY}", "XDG_RUNTIME_DIR": "/tmp", "TMPDIR": "/tmp",
                    "XENVIRONMENT": f"{STATE}/xresources"})
        env.pop("XAUTHORITY", None)  # the tree's X server takes any client of the tree: nothing else reaches it
        env.update(self.state.env)
        if extra:
            env.update(extra)
        return env

    def _filled(self, argv: list[str]) -> list[str]:
        return [part.replace("{home}", HOME) for part in argv]

    def spawn_logged(self, name: str, argv: list[str],  # type: ignore[override]
                     **kwargs: object) -> tuple[TreeProcess, Path]:
        """An app: a process of the tree, its output in the tree's log folder (its root's: the agent cannot
        write there but through the program's own output; the server reads it from outside, and cannot make
        files inside)."""
        self._logs += 1
        log_name = f"{self._logs}-app-{name.replace('/', '_')}.log"
        proc = self._in_tree(argv, log=log_name, **kwargs)
        return proc, proc.tree.path(f"{STATE}/logs/{log_name}")

    def _in_tree(self, argv: list[str], *, log: str | None = None, **kwargs: object) -> TreeProcess:
        """A process of the tree as the agent, child of its pid 1: it is in a dump, and in every copy."""
        if self.tree is None:
            raise DesktopDiedError("the desktop has not started")
        proc = self.tree.spawn(argv, env=kwargs.get("env") or self.app_env(), uid=1000,  # type: ignore[arg-type]
                               cwd=self._inside(kwargs.get("cwd")), log=log, max_processes=self.max_processes)
        self._limit(proc.pid)
        return proc

    def spawn_agent(self, name: str, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        """A command of the agent's (a tool's shell, its Python, a probe) in the tree, attached to the server
        by the descriptors it is handed (``stdin``, ``stdout``, ``stderr``, ``pass_fds``). A fork ends such
        commands first: a descriptor of the server's cannot be in a dump (the tools start them again)."""
        if self.tree is None:
            raise DesktopDiedError("the desktop has not started")
        env = kwargs.pop("env", None) or self.app_env()
        command = self.tree.attached(argv, env=env, uid=1000,  # type: ignore[arg-type]
                                     cwd=self._inside(kwargs.pop("cwd", None)), max_processes=self.max_processes)
        starter = self.processes.spawn(name, command, env={}, cwd="/", **kwargs)  # type: ignore[arg-type]
        try:
            proc = AttachedProcess(starter, started_child(starter))
        except BaseException:
            self.processes.stop(starter, timeout=0)
            raise
        self.processes.replace(starter, proc)  # type: ignore[arg-type]
        # the watchdog need not end the starter's group: the command is the tree's, which ends with its pid 1
        WATCHDOG.release(starter.pid)
        self._limit(proc.pid)
        return proc  # type: ignore[return-value]

    def spawn_lasting(self, name: str, argv: list[str], **kwargs: Any) -> KeptProcess:  # type: ignore[override]
        """A process of the agent's that lives from one tool call to the next (a persistent shell, an
        interpreter), with pipes to the server as ``subprocess.Popen`` makes them (``stdin``, ``stdout``,
        ``stderr``, ``pass_fds``): pid 1's child, which a fork carries into every copy (where
        :meth:`lasting_process` gives it, with the server's new ends of its pipes)."""
        if self.tree is None:
            raise DesktopDiedError("the desktop has not started")
        self._forget_ended_lasting()
        env = kwargs.pop("env", None) or self.app_env()
        proc = kept.spawn(self.tree, name, argv, env=env, cwd=self._inside(kwargs.pop("cwd", None)),
                          max_processes=self.max_processes, **kwargs)
        self._limit(proc.pid)
        self._lasting[proc.inside_pid] = proc
        return proc

    def _forget_ended_lasting(self) -> None:
        """Close the server's ends of the lasting processes that have ended."""
        for pid, ended in [(pid, proc) for pid, proc in self._lasting.items() if proc.poll() is not None]:
            ended.close_ends()
            del self._lasting[pid]

    def lasting_process(self, inside_pid: int) -> KeptProcess | None:
        """The lasting process that was ``inside_pid`` in the tree when a fork or a checkpoint took this desktop
        (None: it is not running)."""
        proc = self._lasting.get(inside_pid)
        return proc if proc is not None and proc.poll() is None else None

    def _inside(self, cwd: object) -> str:
        """A working folder as the tree sees it (relative: to the home)."""
        return os.path.join(HOME, self.agent_path(str(cwd or HOME)))

    def _limit(self, pid: int) -> None:
        """The session's limits (its control groups) for a process just started: what it forked before it got
        there escapes them."""
        if self.groups is None:
            return
        for procs_file in self.groups.procs_files():
            try:
                Path(procs_file).write_text(str(pid))
            except OSError as exc:
                log.info("could not put process %s in %s: %s", pid, procs_file, exc)

    def end_agent_side(self) -> None:
        if self.account is not None:
            super().end_agent_side()
        else:
            self._end_agent_processes()
        self._sweep_tree()
        self._forget_ended_lasting()

    def _sweep_tree(self) -> None:
        """Remove what the agent left in the tree's own shared places (its /tmp, /var/tmp, /dev/shm): the
        account's sweep sees the host's only."""
        if self.tree is None or not self.tree.alive():
            return
        for place in ("/tmp", "/var/tmp", "/dev/shm"):
            try:
                entries = list(self.tree.path(place).iterdir())
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.lstat().st_uid != self._agent_uid:
                        continue
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink(missing_ok=True)
                except OSError as exc:
                    log.info("could not remove %s from the desktop: %s", entry, exc)

    def _end_agent_processes(self) -> None:
        """Without an account: every process of the tree that runs as its agent."""
        assert self.tree is not None
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            left = [pid for pid in self.tree.pids().values() if _uid(pid) == self.tree.agent_uid]
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.005)
        self.forget_apps()
        for _name, proc in self.processes.processes():
            if proc.poll() is not None:
                self.processes.stop(proc, timeout=0.1)  # forget and reap

    def _close_display_server(self) -> None:
        if self._host_display is not None:
            self._host_display.close()
            self._host_display = None
        lasting, self._lasting = self._lasting, {}
        for proc in lasting.values():
            proc.close_ends()
        if self.tree is not None:
            self.tree.kill()
            WATCHDOG.release(self.tree.pid1)
            remove_temporary_dir(self.tree.folder)
        if self._own_home is not None:
            remove_temporary_dir(self._own_home)
            self._own_home = None
        for lease in self._uid_leases:
            lease.release()
        self._uid_leases.clear()

    # -- forking -------------------------------------------------------------------------------------------
    def fork(self, n: int, accounts: Sequence[AgentAccount] | None = None,
             homes: Sequence[str | Path] | None = None) -> list[ForkableDesktop]:
        """``n`` live copies of this desktop as it is now: every process of it with its memory, the home, the
        clipboard and the pointer. Each copy runs as host ids of its own (``accounts[i]`` for its agent when
        given: a desktop with an account needs one per copy) with its own home (``homes[i]``, an empty folder
        its agent owns, when given), and goes on independently. This desktop goes on unchanged but for a pause
        (its X connections are closed and opened again, and x11vnc's viewers must reconnect) and for the
        agent's commands attached to the server, which end. All or nothing: when one copy fails, the others are
        closed and :class:`ForkError` says why."""
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_COPIES:
            raise ConfigError(f"n must be a whole number of copies from 1 to {MAX_COPIES}, not {n!r}", field="n")
        if self.account is not None and (accounts is None or len(accounts) != n):
            raise ConfigError("a desktop with an agent account needs one account for each copy", field="accounts")
        if accounts is not None and len(accounts) != n:
            raise ConfigError("one account for each copy", field="accounts")
        if homes is not None and len(homes) != n:
            raise ConfigError("one home for each copy", field="homes")
        with self._fork_lock:
            self._require_running()
            copies: list[ForkableDesktop] = []
            images = Path(tempfile.mkdtemp(prefix="fork-", dir=self._runtime))
            try:
                for i in range(n):
                    copies.append(self._new_copy(accounts[i] if accounts is not None else None,
                                                 str(homes[i]) if homes is not None else None))
                moment = self._moment(images / "dump", [HomeCopy(Path(c.home), c._agent_uid, c._agent_gid)
                                                        for c in copies])
                _restore_all(moment, copies)
            except BaseException:
                for copy in copies:
                    copy.close()
                raise
            finally:
                shutil.rmtree(images, ignore_errors=True)
            return copies

    def checkpoint(self, folder: Path) -> Moment:
        """This desktop as it is now, kept in ``folder`` (a new folder, the caller's to remove): its dump and a
        copy of its home, from which :meth:`restored` makes it again, later. It goes on as :meth:`fork` says."""
        self._require_running()
        folder.mkdir(mode=0o700)
        home = folder / "home"
        home.mkdir(mode=0o700)
        with self._fork_lock:
            return self._moment(folder / "dump", [HomeCopy(home, 0, 0)], home=home)

    @classmethod
    def restored(cls, moment: Moment, *, home: str, account: AgentAccount | None = None, max_processes: int = 0,
                 limits: Limits | None = None, network: NetworkPolicy | None = None, dpi: int = 96,
                 start_timeout: float = 15.0) -> ForkableDesktop:
        """A desktop made again from ``moment`` (see :meth:`checkpoint`): ``home`` must hold the moment's home
        already (given to its agent). Raises :class:`ForkError` when the restore fails."""
        desktop = cls(moment.state, home=home, account=account, max_processes=max_processes, limits=limits,
                      network=network, dpi=dpi, start_timeout=start_timeout)
        desktop._started = True
        try:
            desktop._take_ids()
            _restore_all(moment, [desktop])
        except BaseException:
            desktop.close()
            raise
        return desktop

    def _require_running(self) -> None:
        if self.tree is None or self._closed or not self.tree.alive():
            raise ForkError("the desktop is not running", reason="unavailable")

    def _new_copy(self, account: AgentAccount | None, home: str | None) -> ForkableDesktop:
        """A copy not restored yet: its ids and its (empty) home, for the dump to fill."""
        copy = ForkableDesktop(self.state, home=home, account=account, max_processes=self.max_processes,
                               limits=self.server_limits, network=self.network, dpi=self.dpi,
                               start_timeout=self.start_timeout)
        copy._started = True  # from now on, close() takes down whatever of it there is
        try:
            copy._take_ids()
        except BaseException:
            copy.close()
            raise
        return copy

    def _moment(self, images: Path, homes: list[HomeCopy], home: Path | None = None) -> Moment:
        """Dump the tree with the server's connections to it closed (they cannot be in a dump) and its home
        copied into ``homes``, and open the connections again whatever happened; what the server's connection
        held is held again."""
        self._require_running()
        held = self.events.clipboard_held()
        paused = time.perf_counter()
        # held until the server's connections are back: a viewer that reconnects meanwhile would start an
        # x11vnc connected into the tree, which the dump could not take
        with self._vnc_lock:
            if self._vnc is not None:
                self.processes.stop(self._vnc, timeout=1)
                self._vnc = None
            for _name, proc in self.processes.processes():  # the agent's commands, attached to the server
                self.processes.stop(proc, timeout=0)
            self._close_display()
            try:
                snapshot = dump(self.tree, images, Path(self.home), homes)  # type: ignore[arg-type]
            finally:
                self._reconnect(held)
        #: What the last fork or checkpoint cost this desktop: CRIU's dump, how long its processes were frozen,
        #: how long the server could not reach it (the pause), and the images' size.
        self.last_dump = {"dump_seconds": snapshot.seconds, "frozen_seconds": snapshot.frozen_seconds,
                          "pause_seconds": time.perf_counter() - paused, "image_bytes": snapshot.size}
        return Moment(snapshot, self.state, [(spec, proc.inside_pid) for spec, proc in self._apps],  # type: ignore
                      self._wm.inside_pid if self._wm is not None else None, self._logs, held, home,  # type: ignore
                      self._a11y_bus.pids if self._a11y_bus is not None else None,  # type: ignore[attr-defined]
                      self.no_accessibility, [p.spec for p in self._lasting.values() if p.poll() is None])

    def _reconnect(self, held: tuple[str | None, tuple[str, ...]]) -> None:
        self._open_connections()
        if self._a11y_bus is not None:
            self._open_accessibility(self._app_sessions)
        text, selections = held
        if text is not None and selections:
            self.events.set_clipboard(text, selections)

    def _restore_moment(self, moment: Moment) -> None:
        """Become a new tree restored from ``moment``, with this desktop's ids and home, and new pipes between
        the server and the agent's lasting processes."""
        pipes = NewPipes(moment.lasting)
        try:
            self._took(restore(moment.dump, Path(self.home), root_uid=self._root_uid, agent_uid=self._agent_uid,
                               agent_gid=self._agent_gid, pipes=pipes.tree_ends()))
            assert self.tree is not None
            self._lasting = pipes.processes(self.tree)
        finally:
            pipes.close()
        if moment.window_manager is not None:
            self._wm = self.tree.process(moment.window_manager)  # type: ignore[assignment]
        self._apps = [(spec, self.tree.process(pid)) for spec, pid in moment.apps]  # type: ignore[misc]
        self._logs = moment.logs
        self.no_accessibility = moment.no_accessibility
        for pid in self.tree.pids().values():  # the agent's processes in this desktop's own limits
            if _uid(pid) == self._agent_uid:
                self._limit(pid)
        if moment.accessibility_bus is not None:
            self._a11y_bus = TreeBus(self.tree).adopt(*moment.accessibility_bus)  # type: ignore[assignment]
        self._reconnect(moment.clipboard)

    def processes_inside(self) -> dict[int, int]:
        """Every process of the desktop: its pid inside the tree and on the host."""
        return self.tree.pids() if self.tree is not None else {}


@dataclass
class Moment:
    """A desktop as it was at a dump: the images, and what the server knew of it then (its apps and window
    manager by their pids inside, its log count, the clipboard the server's connection served); for a
    checkpoint, the copy of its home."""

    dump: Dump
    state: StartState
    apps: list[tuple[AppState, int]]
    window_manager: int | None
    logs: int
    clipboard: tuple[str | None, tuple[str, ...]]
    home: Path | None = None
    #: The pids inside of the accessibility bus's daemon and registry (None: the desktop has no bus; why).
    accessibility_bus: tuple[int, int] | None = None
    no_accessibility: str | None = None
    #: The agent's lasting processes that ran (:mod:`.kept`).
    lasting: list[KeptSpec] = field(default_factory=list)


def _restore_all(moment: Moment, desktops: list[ForkableDesktop]) -> None:
    """Restore every one of ``desktops`` from ``moment`` at once; the first failure is raised once all have
    ended (the caller closes them all)."""
    with ThreadPoolExecutor(len(desktops)) as pool:
        outcomes = [pool.submit(desktop._restore_moment, moment) for desktop in desktops]
    for outcome in outcomes:
        failure = outcome.exception()
        if failure is None:
            continue
        if isinstance(failure, ForkError):
            raise failure
        raise ForkError(f"a copy of the desktop failed: {failure}", reason="restore failed") from failure


def _uid(pid: int) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1


def fork_unavailable() -> str | None:
    """Why no desktop can be forked on this machine, or None."""
    return criu.unavailable()


__all__ = ["ForkableDesktop", "Moment", "fork_unavailable", "MAX_COPIES"]
