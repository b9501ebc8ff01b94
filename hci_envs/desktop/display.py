"""A desktop's display: Xvfb and its cookies, the accessibility bus, the window manager, the X connections
(screen, input, events) and x11vnc.

:class:`XDisplay` is the display half of :class:`~.desktop.Desktop` (one of its base classes; it is not used
alone). Everything here runs on the server's side, but for a window manager other than openbox, which runs
on the agent's (it may launch programs: menus, key bindings).
"""

from __future__ import annotations

import logging
import os
import select
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import DesktopDiedError, DisplayStartError, MissingDependencyError
from ..protocol import StartState
from ..sandbox.accounts import AgentAccount
from ..sandbox.processes import ProcessSupervisor
from . import xauth
from .a11y import Accessibility
from .a11ybus import AccessibilityBus, available as accessibility_available
from .events import DesktopEvents
from .screen import Screen
from .wm import write_openbox_config
from .xinput import Input

log = logging.getLogger(__name__)

#: Debian packages that provide the programs a desktop needs, for the error that names them.
APT_PACKAGES = {"Xvfb": "xvfb", "openbox": "openbox", "x11vnc": "x11vnc", "xterm": "xterm"}

X_SOCKET_DIR = Path("/tmp/.X11-unix")


class XDisplay:
    """The display of a desktop: started by :meth:`~.desktop.Desktop.start`, torn down by its ``close()``.

    Of the desktop it is part of, it uses the start state, the process supervisor, the agent's account, the
    agent's copy of the cookie (``_client_auth``), whether the desktop is closed, and ``spawn_agent`` (for a
    window manager on the agent's side)."""

    state: StartState
    processes: ProcessSupervisor
    #: The server's runtime directory (the desktop's base makes it): cookies, logs, the window manager's
    #: configuration, the VNC socket.
    _runtime: Path
    account: AgentAccount | None
    _client_auth: Path
    _closed: bool
    if TYPE_CHECKING:
        def spawn_agent(self, name: str, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]: ...
        def host_pid(self, pid: int) -> int | None: ...

    def __init__(self, *, dpi: int, start_timeout: float) -> None:
        self.dpi = dpi
        self.start_timeout = start_timeout
        self.display_number: int | None = None
        self.screen: Screen
        self.input: Input
        self.events: DesktopEvents
        self._xvfb: subprocess.Popen[bytes] | None = None
        self._wm: subprocess.Popen[bytes] | None = None
        self._vnc: subprocess.Popen[bytes] | None = None
        self._vnc_lock = threading.Lock()
        #: The apps' accessibility tree (None without an accessibility bus; :attr:`no_accessibility` says why).
        self.accessibility: Accessibility | None = None
        self.no_accessibility: str | None = None
        self._a11y_bus: AccessibilityBus | None = None

    @property
    def display(self) -> str:
        if self.display_number is None:
            raise DesktopDiedError("the desktop has not started")
        return f":{self.display_number}"

    @property
    def size(self) -> tuple[int, int]:
        return self.state.width, self.state.height

    def server_env(self) -> dict[str, str]:
        """The environment of the server's helpers on this display (x11vnc): the server's cookie file."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("HCI_ENVS_")}
        env.update({"DISPLAY": self.display, "XAUTHORITY": xauth.PROCESS_AUTHORITY.path()})
        return env

    def _start_display(self) -> None:
        xvfb = _which("Xvfb")
        cookie = xauth.new_cookie()
        server_auth = self._runtime / "server-auth"
        xauth.write_server_file(server_auth, cookie)
        log_path = self._runtime / "xvfb.log"
        read_fd, write_fd = os.pipe()
        c = self.state
        _own_socket_dir()
        argv = [
            xvfb, "-displayfd", str(write_fd), "-screen", "0", f"{c.width}x{c.height}x{c.depth}",
            # The abstract socket stays on: X clients try it first, and a name Xvfb does not hold could be
            # bound by an agent to catch other sessions' connections (and their cookies).
            "-dpi", str(self.dpi), "-nolisten", "tcp", "-auth", str(server_auth), "-noreset",
            "+extension", "RANDR",
        ]
        with open(log_path, "wb") as log_file:
            try:
                self._xvfb = self.processes.spawn("Xvfb", argv, pass_fds=(write_fd,), stderr=log_file.fileno())
            finally:
                os.close(write_fd)
        try:
            number = _read_display_number(read_fd, self._xvfb, self.start_timeout)
        finally:
            os.close(read_fd)
        if number is None:
            raise DisplayStartError(
                f"Xvfb did not start within {self.start_timeout}s: {log_tail(log_path)}", log=log_tail(log_path)
            )
        self.display_number = number
        xauth.PROCESS_AUTHORITY.add(number, cookie)
        xauth.write_client_file(self._client_auth, number, cookie)
        if self.account is not None:
            os.chown(self._client_auth, self.account.uid, self.account.gid)

    def _start_accessibility_bus(self) -> None:
        """The display's accessibility bus, when the start state wants one and the machine has its programs (if
        not, the desktop runs without a tree, and says why)."""
        if not self.state.accessibility:
            self.no_accessibility = "accessibility is off in this start state"
            return
        missing = accessibility_available()
        if missing:
            self.no_accessibility = f"no accessibility bus on this machine: {missing}"
            _warn_once(self.no_accessibility)
            return
        self._a11y_bus = self._new_accessibility_bus()
        self._a11y_bus.start()

    def _new_accessibility_bus(self) -> AccessibilityBus:
        """This kind of display's bus (not started yet): the server's, beside the display."""
        return AccessibilityBus(self.processes, agent_uid=self.account.uid if self.account else None,
                                log_dir=self._runtime)

    def _wait_accessibility_bus(self, app_sessions: Callable[[], dict[int, str]]) -> None:
        """Once the bus's registry is up, the tree: :meth:`_open_accessibility`."""
        if self._a11y_bus is not None:
            self._a11y_bus.wait_registry()
            self._open_accessibility(app_sessions)

    def _open_accessibility(self, app_sessions: Callable[[], dict[int, str]]) -> None:
        """The server's connection to the bus, as the bus takes it (anonymous where the server's uid means
        nothing to it); ``app_sessions`` names each app's session, through the pids the bus reports as this
        desktop maps them to the host's (see :class:`~.a11y.Accessibility`)."""
        assert self._a11y_bus is not None
        self.accessibility = Accessibility(self._a11y_bus.address, self.size, app_sessions,
                                           anonymous=self._a11y_bus.anonymous, host_pid=self.host_pid)

    def _connect(self) -> None:
        """Open the X connections that watch, inject and capture; the pointer goes to the corner."""
        self._open_connections()
        self.input.move(0, 0)  # every episode starts with the pointer in the same place

    def _open_connections(self) -> None:
        self.events = DesktopEvents(self.display)
        self.input = Input(self.display, acknowledge=self.events.app_acknowledged)
        self.screen = Screen(self.display)

    def _spawn_window_manager(self) -> Path:
        """Start the window manager; returns the file it touches once it has started. openbox runs on the
        server's side with a configuration that can start no program (see :mod:`.wm`), so it outlives resets;
        any other window manager runs as the agent."""
        name = self.state.window_manager or ""
        argv = [_which(name)] if " " not in name else shlex.split(name)
        ready_file = self._runtime / "wm-ready"
        ready_file.unlink(missing_ok=True)
        log_path = self._runtime / "wm.log"
        with open(log_path, "wb") as log_file:
            if Path(argv[0]).name == "openbox":
                # openbox runs --startup once it has finished starting; until then it can hold up new clients
                # for seconds, so the property check in _wait_window_manager is not enough on its own.
                argv += ["--config-file", str(write_openbox_config(self._runtime)), "--sm-disable",
                         "--startup", f"touch {shlex.quote(str(ready_file))}"]
                self._wm = self.processes.spawn("window-manager", argv, env=self.server_env(),
                                                stdout=log_file.fileno(), stderr=log_file.fileno())
            else:
                self._wm = self.spawn_agent("window-manager", argv, stdout=log_file.fileno(),
                                            stderr=log_file.fileno())
                ready_file.touch()
        return ready_file

    def _wait_window_manager(self, ready_file: Path) -> None:
        assert self._wm is not None
        name = self.state.window_manager
        log_path = self._runtime / "wm.log"
        deadline = time.monotonic() + self.start_timeout
        while not (ready_file.exists() and self.input.root_property("_NET_SUPPORTING_WM_CHECK")):
            if self._wm.poll() is not None:
                raise DisplayStartError(f"the window manager {name!r} exited: {log_tail(log_path)}")
            if time.monotonic() > deadline:
                raise DisplayStartError(f"the window manager {name!r} did not start: {log_tail(log_path)}")
            time.sleep(0.01)

    def vnc_socket(self, timeout: float = 10.0) -> Path:
        """The Unix socket of this display's x11vnc, started on first use. Only this process can open it:
        viewers come in through the server's proxy, which enforces roles and records human input."""
        with self._vnc_lock:
            path = self._runtime / "vnc.sock"
            if self._vnc is not None and self._vnc.poll() is None and path.exists():
                return path
            if self._closed:
                raise DesktopDiedError("the desktop is closed")
            path.unlink(missing_ok=True)
            argv = [
                _which("x11vnc"), "-display", self.display, "-unixsock", str(path), "-rfbport", "0",
                "-forever", "-shared", "-nopw", "-norc", "-quiet", "-nolookup",
                # latency over load: no naps, short polls and no deferred updates while people type
                "-nonap", "-wait", "5", "-defer", "5", "-wait_ui", "2.0", "-setdefer", "-1", "-nowait_bog",
                "-noxrecord", "-ncache", "0",
                # the agent can set properties on its display: x11vnc must take no orders that way, and
                # run no programs
                "-noremote", "-nocmds", *self._vnc_options(),
            ]
            # x11vnc waits until 8 s after a viewer connected (45 s without a window manager) before it makes
            # the window it owns selections with, in case a display manager's login screen would kill it; until
            # then a viewer's clipboard never reaches the apps. There is no display manager here.
            env = {**self.server_env(), "X11VNC_AVOID_WINDOWS": "never"}
            log_path = self._runtime / "x11vnc.log"
            with open(log_path, "wb") as log_file:
                self._vnc = self.processes.spawn("x11vnc", argv, env=env,
                                                 stdout=log_file.fileno(), stderr=log_file.fileno())
            deadline = time.monotonic() + timeout
            # the socket's file comes with bind(), a moment before listen(): until then a viewer is refused
            while not _listening(path):
                if self._vnc.poll() is not None or time.monotonic() > deadline:
                    raise DisplayStartError(f"x11vnc did not start: {log_tail(log_path)}")
                time.sleep(0.01)
            return path

    def _vnc_options(self) -> list[str]:
        """x11vnc's options of this kind of display, beside those every display's takes."""
        return []

    def windows(self) -> list[int]:
        """Top-level client windows, as the window manager lists them (or the root's children without one)."""
        listed = self.input.root_property("_NET_CLIENT_LIST")
        if listed is not None or self._wm is not None:
            return list(listed or [])
        return self.input.mapped_children()

    def window_titles(self) -> list[str]:
        """The titles of :meth:`windows`, as their apps set them on X ("" for one without, or gone meanwhile)."""
        return [self.input.window_title(w) for w in self.windows()]


def _listening(path: Path) -> bool:
    """Whether a Unix socket is bound at ``path`` and listening (the kernel's table: __SO_ACCEPTCON)."""
    if not path.exists():
        return False
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:  # no procfs: the file's presence is all there is to go on
        return True
    name = str(path)
    return any(len(f) >= 8 and f[7] == name and int(f[3], 16) & 0x10000 for f in (line.split() for line in lines))


def _which(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        package = APT_PACKAGES.get(program, program)
        raise MissingDependencyError(
            f"'{program}' is not installed; on Debian or Ubuntu: sudo apt-get install {package}",
            program=program,
        )
    return path


def _own_socket_dir() -> None:
    """Where the X socket folder does not exist yet (a container's fresh /tmp), make it the server's, 0755: X
    clients only need to reach the sockets, and agents cannot then leave socket files there that a server
    without the right to remove them would take for a display in use. An existing folder (made world-
    writable and sticky by the system) is left alone: a root X server replaces a stale socket itself."""
    try:
        X_SOCKET_DIR.mkdir(mode=0o755)
    except FileExistsError:
        return
    except OSError as exc:
        log.info("cannot make %s: %s", X_SOCKET_DIR, exc)
        return
    os.chmod(X_SOCKET_DIR, 0o755)


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning("%s; the desktops run without an accessibility tree", message)


def _read_display_number(fd: int, proc: subprocess.Popen[bytes], timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    data = b""
    while time.monotonic() < deadline:
        readable, _, _ = select.select([fd], [], [], 0.05)
        if readable:
            chunk = os.read(fd, 64)
            if not chunk:
                break
            data += chunk
            if data.endswith(b"\n"):
                return int(data.strip())
        elif proc.poll() is not None:
            break
    return None


def log_tail(path: Path, lines: int = 8) -> str:
    """The last lines of a program's log, on one line, for an error that says why it failed."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"
