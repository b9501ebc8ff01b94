"""What every kind of desktop shares: the declared start state and the agent's side.

:class:`BaseDesktop` is the base of the Xvfb desktop (:class:`~.desktop.Desktop`) and of the in-memory one
(:class:`~.fake.FakeDesktop`), siblings under one interface (:class:`~.interface.VirtualDesktop`), as
android_env's emulator and fake simulator are under its base simulator. It owns the agent's side, which is the
same whatever draws the screen: the agent's account, its home, its private runtime and temporary directory,
the processes started for it, the sweep at a reset, and waiting for its terminals to catch up. Each kind
brings its display: how it starts, launches apps, reports health, and what it closes.
"""

from __future__ import annotations

import abc
import functools
import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DesktopDiedError, MissingDependencyError
from ..protocol import AppState, StartState
from ..sandbox.accounts import ACCOUNT_NAME, AGENT_PATH, AgentAccount, remove_private_dir
from ..sandbox.limits import Limits, hierarchy
from ..sandbox.network import NetworkPolicy, egress
from ..sandbox.space import bound_folder, resize_folder
from ..sandbox.space import full as space_full
from ..sandbox.space import unavailable as space_unavailable
from ..sandbox.watchdog import remove_temporary_dir, temporary_dir
from ..sandbox.processes import ProcessSupervisor
from . import quiescence

log = logging.getLogger(__name__)

#: Run by ``sh -c`` as the server in a new mount namespace: $0 the home, $1 where the agent sees it, then the
#: command (which drops to the agent's account).
_BIND_HOME = 'mkdir -p -- "$1" && mount --bind -- "$0" "$1" || exit 125; shift; exec "$@"'
#: Run by ``sh -c`` as the agent: $0 the folder to start in (entered with the agent's rights, not root's).
_ENTER = 'cd -- "$0" || exit 125; exec "$@"'


#: The desktop whose home each home_view link points at now (see view_link): one at a time.
_LINK_HOLDERS: dict[str, BaseDesktop] = {}


def view_link(view: str) -> Path | None:
    """Where the home_view is a symlink into a folder of this server's own (a container's image makes
    ``/home/user -> /var/lib/hci-envs/view/home``: a container may not make mount namespaces), the link the server
    points at the current desktop's home; None where the view is made with a mount namespace. The path at the
    view is fixed in root's /home; what it leads to is a link in a folder only this server may write."""
    import stat

    if os.geteuid() == 0 or not os.path.islink(view):
        return None
    target = Path(os.readlink(view))
    if not target.is_absolute():
        return None
    try:
        folder = os.lstat(target.parent)
    except OSError:
        return None
    if not stat.S_ISDIR(folder.st_mode) or folder.st_uid != os.geteuid() or folder.st_mode & 0o022:
        return None
    return target


def _check_home_view(view: str) -> None:
    """``home_view`` needs root (it mounts), or a view link (see view_link), and a place no one else can change
    under it: /home a real folder of root's that only root may write (so no one can put a symlink at the view),
    the view, if it is there, a real folder (or that link)."""
    import stat

    try:
        home, existing = os.lstat("/home"), os.lstat(view) if os.path.lexists(view) else None
    except OSError as exc:
        raise ConfigError(f"home_view: {exc}", field="home_view") from None
    if not stat.S_ISDIR(home.st_mode) or home.st_uid != 0 or home.st_mode & 0o022:
        raise ConfigError("home_view: /home must be a folder of root's that no one else may write",
                          field="home_view")
    if view_link(view) is not None:
        return
    if os.geteuid() != 0:
        raise ConfigError(f"home_view {view!r} binds the home in a mount namespace of the agent's: the server must "
                          f"run as root, or {view} be a link into a folder of this server's own (a container's "
                          "image: see hci_envs.desktop.base_desktop.view_link)", field="home_view")
    if existing is not None and not stat.S_ISDIR(existing.st_mode):
        raise ConfigError(f"home_view: {view} is there and is not a folder (a symlink?)", field="home_view")
    refused = _mount_namespaces_refused()
    if refused is not None:
        raise ConfigError(f"home_view needs mount namespaces (CAP_SYS_ADMIN), which this server may not make: "
                          f"{refused}", field="home_view")


@functools.cache
def _mount_namespaces_refused() -> str | None:
    """Why this process may not make a mount namespace, or None: asked once (every desktop, spares included,
    checks its home_view, and the answer does not change)."""
    probe = subprocess.run([_program_path("unshare"), "--mount", "--propagation", "private", "--", "true"],
                           capture_output=True, text=True, timeout=30, check=False)
    return None if probe.returncode == 0 else probe.stderr.strip() or f"exit code {probe.returncode}"


def _program_path(name: str) -> str:
    found = shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if found is None:
        raise MissingDependencyError(f"{name} is not installed (util-linux)", program=name)
    return found

#: Variables of the server's own environment that the agent side may inherit (locale and time zone); every
#: other one (secrets, the server's PATH and virtual environment) stays with the server.
_INHERITED = ("LANG", "LANGUAGE", "TZ")


@dataclass
class DesktopHealth:
    ok: bool
    display: str
    reason: str | None = None
    apps: dict[str, bool] = field(default_factory=dict)


#: The X resources every app of the desktop reads (a start state's env may name another file).
X_RESOURCES = Path(__file__).with_name("xresources")


class BaseDesktop(abc.ABC):
    """A desktop's start state and agent side; its display is the subclass's. With ``account``, the agent's
    side runs as that account, and every process of the account ends when the desktop closes or its session
    restarts."""

    #: The apps' accessibility tree (None when the desktop has none: :attr:`no_accessibility` says why).
    accessibility: Any = None
    no_accessibility: str | None = None

    def __init__(self, state: StartState | None = None, *, home: str | None = None,
                 account: AgentAccount | None = None, max_processes: int = 0, limits: Limits | None = None,
                 network: NetworkPolicy | None = None) -> None:
        #: The declared screen, window manager, apps and variables (a start state; its home template and
        #: clipboard are the environment's business).
        self.state = state or StartState()
        if self.state.home_view is not None:
            _check_home_view(self.state.home_view)
        self.home_path = home
        self.account = account
        self.max_processes = max_processes
        #: The server's limits, and the episode's: those with what the start state asks over them (a task's).
        self.server_limits = limits
        self.limits = limits.over(self.state.limits) if limits is not None else None
        # (groups even with no limit: a task may ask for some in a later episode)
        self.groups = hierarchy().account(account.uid) if account is not None and limits is not None else None
        if self.groups is not None:
            self.groups.apply(self.limits)  # type: ignore[arg-type]
        #: What the agent side may connect to: its account's chain in the machine's table, where it can be had.
        self.network = network
        self._confined = account is not None and network is not None and egress().unavailable() is None
        if self._confined:
            egress().assign(account.uid, network)  # type: ignore[union-attr,arg-type]
        self.processes = ProcessSupervisor()
        # the server's runtime directory: cookies, logs, the window manager's configuration, the VNC socket
        self._runtime = temporary_dir("hci-envs-desktop-")
        # the agent's runtime directory (XDG_RUNTIME_DIR, TMPDIR, its copy of the cookie), private to it
        #: Whether the disk limit holds here: the runtime folder a tmpfs of its size, and no file larger.
        self.bounded = account is not None and self.limits is not None and self.limits.disk is not None and \
            space_unavailable() is None
        if account is not None:
            self.agent_runtime = account.private_dir("hci-envs-agent-")
            if self.bounded:
                try:
                    bound_folder(self.agent_runtime, self.limits.disk, account.uid,  # type: ignore[union-attr]
                                 account.gid)
                except BaseException:
                    remove_private_dir(self.agent_runtime)
                    raise
        else:
            self.agent_runtime = self._runtime / "agent"
            self.agent_runtime.mkdir(mode=0o700)
        self._client_auth = self.agent_runtime / "Xauthority"
        self._started = False
        self._closed = False
        self._full: set[str] = set()  # the disk limit's places said to be full

    # -- the display: each kind's own ------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def display(self) -> str: ...

    @property
    def size(self) -> tuple[int, int]:
        return self.state.width, self.state.height

    @abc.abstractmethod
    def start(self) -> BaseDesktop:
        """Bring the display up and launch the start state's apps; the desktop itself."""

    @abc.abstractmethod
    def restart_session(self, state: StartState) -> None:
        """A warm reset to ``state`` on the same display: the agent's side ends, the apps start again."""

    @abc.abstractmethod
    def launch(self, app: AppState) -> Any: ...

    @abc.abstractmethod
    def stop_apps(self, grace: float = 0.0) -> None:
        """End the apps this desktop launched (the agent's side without an account of its own)."""

    @abc.abstractmethod
    def forget_apps(self) -> None:
        """Forget the apps (their processes already ended with the agent's account)."""

    @abc.abstractmethod
    def apps(self) -> list[tuple[AppState, Any]]: ...

    @abc.abstractmethod
    def windows(self) -> list[int]: ...

    @abc.abstractmethod
    def quick_failure(self) -> str | None:
        """A cheap liveness check (no round trip): why the desktop is broken, or None."""

    @abc.abstractmethod
    def health(self) -> DesktopHealth: ...

    @abc.abstractmethod
    def vnc_socket(self, timeout: float = 10.0) -> Path: ...

    def _display_env(self) -> dict[str, str]:
        """What the agent's programs need to reach this display, beside DISPLAY and XAUTHORITY: by default,
        that there is no accessibility bus (GTK would look for one on every start, and warn)."""
        return {"NO_AT_BRIDGE": "1"}

    def _display_reusable(self) -> bool:
        """Whether the display's own parts allow a warm reset (beside the screen and health)."""
        return True

    def _close_display(self) -> None:
        """Close the display's connections (before the agent's processes end)."""
        for part in ("input", "screen", "events"):
            obj = getattr(self, part, None)
            if obj is not None:
                try:
                    obj.close()
                except Exception:  # the display may already be gone
                    log.debug("closing %s failed", part, exc_info=True)

    def _close_display_server(self) -> None:
        """Tear down what serves the display (after the agent's processes ended)."""

    # -- the agent's side ------------------------------------------------------------------------------
    @property
    def home(self) -> str:
        return self.home_path or str(self.agent_runtime)

    @property
    def agent_home(self) -> str:
        """The home as the agent's processes see it: the start state's ``home_view``, else where it is."""
        return self.state.home_view or self.home

    def host_pid(self, pid: int) -> int | None:
        """A pid an app of this desktop reports (a window's ``_NET_WM_PID``, its bus connection's) as the server
        sees it: the same here; a desktop whose apps run in a pid namespace of their own maps it (None: gone)."""
        return pid

    def agent_path(self, path: str | os.PathLike[str]) -> str:
        """A path of the server's as the agent's processes see it: under the home, where they see their home
        (:attr:`agent_home`); any other path as it is."""
        path, home = os.fspath(path), self.home
        if path == home or path.startswith(home + os.sep):
            return self.agent_home + path[len(home):]
        return path

    def app_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of the agent's side, built from nothing: the display and its cookie, the home, the
        private runtime and temporary directory, the system PATH, a UTF-8 locale and the declared variables.
        Nothing of the server's own environment (its secrets above all) but locale and time zone."""
        env = {k: os.environ[k] for k in _INHERITED if k in os.environ}
        env.setdefault("LANG", "C.UTF-8")
        # the name every agent account's programs see as their user's (their own is hci-agent-N: see accounts)
        user = ACCOUNT_NAME if self.account is not None else _user_name()
        tmp = self.agent_runtime / "tmp"
        env.update({
            "PATH": AGENT_PATH,
            "HOME": self.agent_home,
            "USER": user,
            "LOGNAME": user,
            "SHELL": "/bin/bash",
            "DISPLAY": self.display,
            "XAUTHORITY": str(self._client_auth),
            "XDG_RUNTIME_DIR": str(self.agent_runtime),
            "TMPDIR": str(tmp),
            "XENVIRONMENT": str(X_RESOURCES),  # fonts with the desktop's glyphs for xterm (see the file)
        })
        env.update(self._display_env())
        env.update(self.state.env)
        if extra:
            env.update(extra)
        return env

    def spawn_agent(self, name: str, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        """Start a process on the agent's side of this desktop (as its account, if it has one; with a
        ``home_view``, in a mount namespace of its own where the home is also there)."""
        kwargs.setdefault("env", self.app_env())
        cwd = os.path.join(self.agent_home, str(kwargs.pop("cwd", None) or self.agent_home))
        view = self.state.home_view
        link = view_link(view) if view is not None else None
        if link is not None:
            self._hold_view_link(link)
        if view is None or link is not None:
            kwargs["cwd"] = cwd
        else:
            # The bind happens in the new namespace, before the account's privileges are dropped; the process
            # then enters its folder as it sees it (its parent's view has no home there), as the agent.
            kwargs["cwd"] = "/"
            kwargs["namespace"] = [_program_path("unshare"), "--mount", "--propagation", "private", "--",
                                   "/bin/sh", "-c", _BIND_HOME, self.home, view]
            argv = ["/bin/sh", "-c", _ENTER, cwd, *argv]
        return self.processes.spawn(name, argv, account=self.account,  # type: ignore[arg-type]
                                    max_processes=self.max_processes,
                                    groups=self.groups.procs_files() if self.groups is not None else (),
                                    file_size=self.limits.disk if self.bounded else None,  # type: ignore[union-attr]
                                    **kwargs)

    def spawn_lasting(self, name: str, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        """A process of the agent's that lives from one tool call to the next (a persistent shell, an
        interpreter); here, as any of its commands (a forkable desktop carries it into its copies)."""
        return self.spawn_agent(name, argv, **kwargs)

    def lasting_process(self, inside_pid: int) -> Any:
        """A lasting process a fork or checkpoint carried into this desktop: none here (only a forkable desktop
        has copies)."""
        return None

    def limits_enforced(self) -> str | None:
        """What the kernel did to the agent side for its limits since the last time this was asked, in words for
        the agent's next observation; None when nothing."""
        if self.limits is None:
            return None
        enforced = self.groups.enforced_since_apply() if self.groups is not None else {}
        said = []
        if enforced.get("memory"):
            said.append(f"the kernel stopped {enforced['memory']} process(es) of this session: its memory limit "
                        f"({self.limits.memory // 1024**2} MiB) was reached" if self.limits.memory else
                        f"the kernel stopped {enforced['memory']} process(es) of this session for memory")
        if enforced.get("processes"):
            said.append(f"{enforced['processes']} new process(es) or thread(s) were refused: this session may run "
                        f"{self.limits.processes} at once")
        said += self._space_full()
        return "; ".join(said) or None

    def _space_full(self) -> list[str]:
        """The disk limit's places that have just become full (said once each, until they have room again)."""
        if self.limits is None or self.limits.disk is None or self.account is None:
            return []
        places = {"home": Path(self.home)} if self.home_path else {}
        if self.bounded:
            places["runtime folder (XDG_RUNTIME_DIR, with TMPDIR)"] = self.agent_runtime
        said = []
        for name, path in places.items():
            now = space_full(path)
            if now and name not in self._full:
                said.append(f"the session's {name} is full: it may hold {self.limits.disk // 1024**2} MiB, "
                            "and writing more fails with 'No space left on device'")
            (self._full.add if now else self._full.discard)(name)
        return said

    def _hold_view_link(self, link: Path) -> None:
        """Point the view link at this desktop's home, unless another open desktop holds it: a link is one
        path for every process, so it serves one desktop at a time (no spare desktops, one session)."""
        holder = _LINK_HOLDERS.get(str(link))
        if holder is not None and holder is not self and not holder._closed:
            raise ConfigError(f"home_view {self.state.home_view}: its link serves one desktop at a time and another "
                              "one holds it (run this server with one session and no spare desktops)",
                              field="home_view")
        _LINK_HOLDERS[str(link)] = self
        if os.path.islink(link) and os.readlink(link) == self.home:
            return
        fresh = link.with_name(f".{link.name}.{os.getpid()}")
        fresh.unlink(missing_ok=True)
        os.symlink(self.home, fresh)
        os.replace(fresh, link)

    def _make_agent_tmp(self) -> None:
        tmp = self.agent_runtime / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        if self.account is not None:
            os.chown(tmp, self.account.uid, self.account.gid)

    def can_reuse(self, state: StartState) -> bool:
        """Whether a reset to ``state`` can keep this display and window manager (same screen, healthy, and a
        runtime folder that is bounded, or not, as its limits ask: its size can change, its kind cannot)."""
        c = self.state
        same = (c.width, c.height, c.depth, c.window_manager, c.accessibility) == (
            state.width, state.height, state.depth, state.window_manager, state.accessibility
        )
        wanted = self._limits_for(state)
        same_room = (wanted is not None and wanted.disk is not None) == self.bounded or self.account is None \
            or space_unavailable() is not None
        return same and same_room and self._display_reusable() and self._started and not self._closed \
            and self.health().ok

    def _limits_for(self, state: StartState) -> Limits | None:
        return self.server_limits.over(state.limits) if self.server_limits is not None else None

    def take_limits(self, state: StartState) -> None:
        """Take the limits ``state`` asks for (over the server's) for the next episode, before its agent side
        starts: its control groups get them when they are renewed, and its runtime folder its new size."""
        wanted = self._limits_for(state)
        if wanted == self.limits:
            return
        if self.bounded:  # first: a room that could not be resized keeps the limits it has (and says so)
            resize_folder(self.agent_runtime, wanted.disk)  # type: ignore[union-attr,arg-type]
        self.limits = wanted
        self._full.clear()

    def end_agent_side(self) -> None:
        """End every process of the agent's side: with an account, every process of its uid (whatever it
        did to its process group); without one, the apps and the process groups this desktop started for
        the agent."""
        if self.account is None:
            self.stop_apps()
            return
        self.account.kill_all()
        self.forget_apps()
        for _name, proc in self.processes.processes():
            if proc.poll() is not None:
                self.processes.stop(proc, timeout=0.1)  # forget and reap
        if self.groups is not None:  # the next episode in fresh groups: zombies still count in these ones
            self.groups = self.groups.renewed(self.limits)  # type: ignore[arg-type]
        self.account.sweep_files(keep=(self.agent_runtime, Path(self.home)))
        # the runtime folder starts empty too, but for the display's cookie: what the agent left there (an app's
        # files, a filler) must not reach the next episode, nor take its room
        for child in (list(self.agent_runtime.iterdir()) if self.home_path else [self.agent_runtime / "tmp"]):
            if child == self._client_auth:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
        self._make_agent_tmp()

    def agent_processes(self) -> dict[int, quiescence.ProcStat]:
        """The agent's side of this desktop as ``/proc`` shows it: every process of its account, or (without
        one) every process below those this desktop started."""
        procs = quiescence.all_processes()
        if self.account is not None:
            return {pid: p for pid, p in procs.items() if p.uid == self.account.uid}
        return quiescence.descendants(procs, self.processes.pids())

    def wait_caught_up(self, since: float, timeout: float, *,
                       cancelled: Callable[[], bool] = lambda: False) -> list[str]:
        """Wait until the agent's terminals have caught up with its input (see :mod:`.quiescence`); returns
        what was still busy when ``timeout`` ran out, or [] once caught up."""
        # until the display has handed the last keys to the app, the terminals look idle: on a loaded machine
        # the Return of a command could still sit in its queue
        try:
            self.input.delivered()  # type: ignore[attr-defined]
        except DesktopDiedError:
            pass  # nothing is in flight on a display that is gone; the checker reads what is left
        return quiescence.wait_caught_up(self.agent_processes, since, timeout, cancelled=cancelled)

    # -- the end ---------------------------------------------------------------------------------------
    def __enter__(self) -> BaseDesktop:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Tear every process of the desktop down: the display's connections, the agent's processes, what
        serves the display, then the runtime directories."""
        if self._closed:
            return
        self._closed = True
        try:
            self._close_display()
            if self.account is not None:
                self.account.kill_all()
            self.processes.close()
            self._close_display_server()
            if self.groups is not None:
                self.groups.retire()
            if self._confined:
                egress().clear(self.account.uid)  # type: ignore[union-attr]
        finally:  # the folders go whatever failed before: the agent's would outlive its account's lease
            if self.account is not None:
                remove_private_dir(self.agent_runtime)
            remove_temporary_dir(self._runtime)
            for link, holder in list(_LINK_HOLDERS.items()):
                if holder is self:
                    del _LINK_HOLDERS[link]


def _user_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())
