"""A virtual X desktop: an Xvfb display, a window manager and apps, with screen, input and clipboard access.

    with Desktop(StartState(width=1280, height=800, apps=[AppState(command=["xterm"])])) as desktop:
        image = desktop.screen.capture(fmt="jpeg")
        desktop.input.click(1, at=(100, 100))

Two sides: the server's (Xvfb, x11vnc, openbox with a configuration that can start no program, the X
connections that capture and inject; files in a runtime directory only the server can open) and the agent's
(the apps and everything started for the agent, as the desktop's agent account when it has one; a private
runtime directory with the display's cookie). A window manager other than openbox runs on the agent's side,
since it may launch programs (menus, key bindings).
"""

from __future__ import annotations

import logging
import os
import select
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..accounts import AGENT_PATH, AgentAccount
from ..errors import ConfigError, DesktopDiedError, DisplayStartError, MissingDependencyError
from ..protocol import AppState, StartState
from . import quiescence, xauth
from .a11y import Accessibility, Query
from .a11ybus import AccessibilityBus, available as accessibility_available
from .events import DesktopEvents
from .processes import ProcessSupervisor
from .screen import Screen
from .wm import write_openbox_config
from .xinput import Input

log = logging.getLogger(__name__)

#: Quiet time after start and restart that counts as "the screen has settled".
SETTLE_QUIET = 0.05
#: The longest a reset waits for an app's window to show more than one flat colour (see AppState.ready).
DRAWN_TIMEOUT = 5.0
#: An app that asks for "accessible" is up once its tree lists interactive elements and the count held for
#: ACCESSIBLE_STILL seconds (LibreOffice fills its menus in a moment after its window is drawn); waited for at
#: most ACCESSIBLE_TIMEOUT (or the app's own timeout), then the app counts as up all the same (its tree says
#: what it has).
ACCESSIBLE_STILL = 0.3
ACCESSIBLE_TIMEOUT = 20.0

#: Debian packages that provide the programs a desktop needs, for the error that names them.
APT_PACKAGES = {"Xvfb": "xvfb", "openbox": "openbox", "x11vnc": "x11vnc", "xterm": "xterm"}


def _which(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        package = APT_PACKAGES.get(program, program)
        raise MissingDependencyError(
            f"'{program}' is not installed; on Debian or Ubuntu: sudo apt-get install {package}",
            program=program,
        )
    return path


@dataclass
class DesktopHealth:
    ok: bool
    display: str
    reason: str | None = None
    apps: dict[str, bool] = field(default_factory=dict)


#: Variables of the server's own environment that the agent side may inherit (locale and time zone); every
#: other one (secrets, the server's PATH and virtual environment) stays with the server.
_INHERITED = ("LANG", "LANGUAGE", "TZ")


class Desktop:
    """One running virtual desktop. ``start()`` brings it up, ``close()`` tears every process of it down.

    With ``account``, the agent's side runs as that account, and every process of the account ends when the
    desktop closes or its session restarts."""

    def __init__(self, state: StartState | None = None, *, home: str | None = None,
                 account: AgentAccount | None = None, max_processes: int = 0, dpi: int = 96,
                 start_timeout: float = 15.0) -> None:
        #: The declared screen, window manager, apps and variables (a start state; its home template and
        #: clipboard are the environment's business).
        self.state = state or StartState()
        self.home_path = home
        self.dpi = dpi
        self.start_timeout = start_timeout
        self.account = account
        self.max_processes = max_processes
        self.processes = ProcessSupervisor()
        self.display_number: int | None = None
        self.screen: Screen
        self.input: Input
        self.events: DesktopEvents
        self._xvfb: subprocess.Popen[bytes] | None = None
        self._wm: subprocess.Popen[bytes] | None = None
        self._apps: list[tuple[AppState, subprocess.Popen[bytes]]] = []
        self._runtime = Path(tempfile.mkdtemp(prefix="hci-envs-desktop-"))
        # the agent's runtime directory (XDG_RUNTIME_DIR, TMPDIR, its copy of the cookie), private to it
        if account is not None:
            self.agent_runtime = account.private_dir("hci-envs-agent-")
        else:
            self.agent_runtime = self._runtime / "agent"
            self.agent_runtime.mkdir(mode=0o700)
        self._vnc: subprocess.Popen[bytes] | None = None
        self._vnc_lock = threading.Lock()
        self._client_auth = self.agent_runtime / "Xauthority"
        #: The apps' accessibility tree (None without an accessibility bus; :attr:`no_accessibility` says why).
        self.accessibility: Accessibility | None = None
        self.no_accessibility: str | None = None
        self._a11y_bus: AccessibilityBus | None = None
        self._started = False
        self._closed = False

    # -- properties ------------------------------------------------------------------------------------
    @property
    def display(self) -> str:
        if self.display_number is None:
            raise DesktopDiedError("the desktop has not started")
        return f":{self.display_number}"

    @property
    def size(self) -> tuple[int, int]:
        return self.state.width, self.state.height

    @property
    def home(self) -> str:
        return self.home_path or str(self.agent_runtime)

    def app_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of the agent's side, built from nothing: the display and its cookie, the home, the
        private runtime and temporary directory, the system PATH, a UTF-8 locale and the declared variables.
        Nothing of the server's own environment (its secrets above all) but locale and time zone."""
        env = {k: os.environ[k] for k in _INHERITED if k in os.environ}
        env.setdefault("LANG", "C.UTF-8")
        user = self.account.name if self.account is not None else _user_name()
        tmp = self.agent_runtime / "tmp"
        env.update({
            "PATH": AGENT_PATH,
            "HOME": self.home,
            "USER": user,
            "LOGNAME": user,
            "SHELL": "/bin/bash",
            "DISPLAY": self.display,
            "XAUTHORITY": str(self._client_auth),
            "XDG_RUNTIME_DIR": str(self.agent_runtime),
            "TMPDIR": str(tmp),
        })
        if self._a11y_bus is not None:
            env.update(self._a11y_bus.agent_env())
        else:
            env["NO_AT_BRIDGE"] = "1"  # GTK would look for a bus on every start, and warn
        env.update(self.state.env)
        if extra:
            env.update(extra)
        return env

    def server_env(self) -> dict[str, str]:
        """The environment of the server's helpers on this display (x11vnc): the server's cookie file."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("HCI_ENVS_")}
        env.update({"DISPLAY": self.display, "XAUTHORITY": xauth.PROCESS_AUTHORITY.path()})
        return env

    def spawn_agent(self, name: str, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        """Start a process on the agent's side of this desktop (as its account, if it has one)."""
        kwargs.setdefault("env", self.app_env())
        kwargs.setdefault("cwd", self.home)
        return self.processes.spawn(name, argv, account=self.account,  # type: ignore[arg-type]
                                    max_processes=self.max_processes, **kwargs)

    # -- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> Desktop:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> Desktop:
        if self._started:
            return self
        self._started = True
        try:
            self._make_agent_tmp()
            self._start_display()
            self._start_accessibility_bus()
            # The window manager starts while we open our connections; we wait for it afterwards.
            wm_ready = self._spawn_window_manager() if self.state.window_manager else None
            self.events = DesktopEvents(self.display)
            self.input = Input(self.display, acknowledge=self.events.app_acknowledged)
            self.input.move(0, 0)  # every episode starts with the pointer in the same place
            self.screen = Screen(self.display)
            if wm_ready is not None:
                self._wait_window_manager(wm_ready)
            self._wait_accessibility_bus()
            for app in self.state.apps:
                self.launch(app)
            self._focus_newest()
            self._wait_ready(self.state.apps)
            self.events.wait_settled(quiet=SETTLE_QUIET, timeout=3.0)
        except BaseException:
            self.close()
            raise
        return self

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
                f"Xvfb did not start within {self.start_timeout}s: {_tail(log_path)}", log=_tail(log_path)
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
        self._a11y_bus = AccessibilityBus(self.processes, agent_uid=self.account.uid if self.account else None,
                                          log_dir=self._runtime)
        self._a11y_bus.start()

    def _wait_accessibility_bus(self) -> None:
        if self._a11y_bus is not None:
            self._a11y_bus.wait_registry()
            self.accessibility = Accessibility(self._a11y_bus.address, self.size, self._app_sessions)

    def _app_sessions(self) -> dict[int, str]:
        """Each app's session (its process id: every app starts a session of its own) and its label."""
        return {proc.pid: spec.label for spec, proc in self._apps}

    def _make_agent_tmp(self) -> None:
        tmp = self.agent_runtime / "tmp"
        tmp.mkdir(mode=0o700, exist_ok=True)
        if self.account is not None:
            os.chown(tmp, self.account.uid, self.account.gid)

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
                raise DisplayStartError(f"the window manager {name!r} exited: {_tail(log_path)}")
            if time.monotonic() > deadline:
                raise DisplayStartError(f"the window manager {name!r} did not start: {_tail(log_path)}")
            time.sleep(0.01)

    def launch(self, app: AppState) -> subprocess.Popen[bytes]:
        """Start an app on this desktop; with ``app.wait_for_window`` return once it has mapped a window."""
        argv = self._filled(app.argv)
        if not argv:
            raise ConfigError("an app needs a command")
        program = shutil.which(argv[0], path=self.app_env().get("PATH")) or argv[0]
        if not os.path.exists(program):
            raise MissingDependencyError(f"app {app.label!r}: program {argv[0]!r} not found", program=argv[0])
        # Count window maps rather than compare window ids: a relaunched app may get its old ids back.
        maps_before = self.events.map_count()
        log_path = self._runtime / f"app-{len(self._apps)}-{app.label}.log"
        with open(log_path, "wb") as log_file:
            proc = self.spawn_agent(app.label, [program, *argv[1:]], env=self.app_env(app.env),
                                    stdout=log_file.fileno(), stderr=log_file.fileno())
        self._apps.append((app, proc))
        if app.wait_for_window:
            deadline = time.monotonic() + app.timeout
            while not self.events.wait_for_map(maps_before, 0.05):
                if proc.poll() is not None:
                    raise DisplayStartError(
                        f"app {app.label!r} exited with status {proc.returncode}: {_tail(log_path)}"
                    )
                if time.monotonic() > deadline:
                    raise DisplayStartError(f"app {app.label!r} showed no window within {app.timeout}s")
        return proc

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
                "-noremote", "-nocmds",
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
            while not path.exists():
                if self._vnc.poll() is not None or time.monotonic() > deadline:
                    raise DisplayStartError(f"x11vnc did not start: {_tail(log_path)}")
                time.sleep(0.01)
            return path

    def can_reuse(self, state: StartState) -> bool:
        """Whether a reset to ``state`` can keep this display and window manager (same screen, healthy)."""
        c = self.state
        same = (c.width, c.height, c.depth, c.window_manager, c.accessibility) == (
            state.width, state.height, state.depth, state.window_manager, state.accessibility
        )
        bus_ok = self._a11y_bus is None or self._a11y_bus.alive()
        return same and bus_ok and self._started and not self._closed and self.health().ok

    def stop_apps(self, grace: float = 0.0) -> None:
        """End the apps' process groups; by default at once (SIGKILL): a reset does not wait out a grace."""
        for _spec, proc in reversed(self._apps):
            self.processes.stop(proc, timeout=grace)
        self._apps.clear()

    def end_agent_side(self) -> None:
        """End every process of the agent's side: with an account, every process of its uid (whatever it
        did to its process group); without one, the apps and the process groups this desktop started for
        the agent."""
        if self.account is None:
            self.stop_apps()
            return
        self.account.kill_all()
        for _spec, proc in self._apps:
            proc.poll()  # reap
        self._apps.clear()
        for _name, proc in self.processes.processes():
            if proc.poll() is not None:
                self.processes.stop(proc, timeout=0.1)  # forget and reap
        self.account.sweep_files(keep=(self.agent_runtime, Path(self.home)))
        # the private temporary directory starts empty too
        tmp = self.agent_runtime / "tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        self._make_agent_tmp()

    def restart_session(self, state: StartState) -> None:
        """A warm reset: end the agent's side, put input, clipboard and access control back to neutral,
        relaunch the apps of ``state`` (and a window manager on the agent's side, which ended with the rest),
        and wait for the screen to settle. The display stays up."""
        self.end_agent_side()
        self.state = state
        if self.accessibility is not None:
            self.accessibility.forget()
        self.input.release_all()
        self.input.keyboard.restore()
        self.input.restore_access_control()
        self.input.move(0, 0)
        self.events.clear_clipboard()
        if self.state.window_manager and (self._wm is None or self._wm.poll() is not None):
            # before the apps: a window manager still starting can hold up their windows for seconds
            self._wait_window_manager(self._spawn_window_manager())
        for app in state.apps:
            self.launch(app)
        self._focus_newest()
        self._wait_ready(state.apps)
        self.events.wait_settled(quiet=SETTLE_QUIET, timeout=3.0)

    def _wait_ready(self, apps: list[AppState]) -> None:
        """Return once the apps are what an agent can act on: every window drawn (not one flat colour) when
        an app asks for "drawn", then each app's own readiness probe. A window that stays flat is waited for
        at most DRAWN_TIMEOUT (an app may legitimately show a blank canvas); a probe that never passes is a
        start error, as a window that never shows is."""
        if any(app.wait_for_window and app.ready in ("drawn", "accessible") for app in apps):
            deadline = time.monotonic() + min(DRAWN_TIMEOUT, max(a.timeout for a in apps))
            while self._windows_not_drawn():
                if time.monotonic() > deadline:
                    log.info("a window still shows one flat colour after %.0fs", DRAWN_TIMEOUT)
                    break
                self.events.wait_for_damage(self.events.damage_generation(), 0.05)
        for app in apps:
            if app.ready == "accessible":
                self._wait_accessible(app)
            if app.ready_command is not None:
                self._probe(app)

    def _wait_accessible(self, app: AppState) -> None:
        """Wait until the app's accessibility tree lists interactive elements and their number held still
        (see ACCESSIBLE_STILL): an agent's first tree should not be half of one. Without an accessibility bus
        there is nothing to wait for."""
        if self.accessibility is None:
            return
        query = Query(app=app.label, interactive_only=True)
        bound = min(app.timeout, ACCESSIBLE_TIMEOUT)
        deadline = time.monotonic() + bound
        last = -1
        while time.monotonic() < deadline:
            try:
                count = len(self.accessibility.tree(query, remember=False).nodes)
            except Exception as exc:  # noqa: BLE001 - the tree is the agent's aid: its failure must not stop the app
                log.info("app %r: its accessibility tree could not be read (%s)", app.label, exc)
                return
            if count and count == last:
                return
            last = count
            time.sleep(ACCESSIBLE_STILL)
        log.info("app %r: its accessibility tree did not hold still within %.0fs", app.label, bound)

    def _windows_not_drawn(self) -> bool:
        """Whether no window is listed yet (a window manager lists a new one a moment after it maps), or one
        shows a single flat colour."""
        windows = self.windows()
        if not windows:
            return True
        for window in windows:
            box = self.input.window_box(window)
            if box is None:
                continue
            x, y, w, h = box
            x0, y0 = max(x, 0), max(y, 0)
            x1, y1 = min(x + w, self.state.width), min(y + h, self.state.height)
            if x1 - x0 < 2 or y1 - y0 < 2:
                continue  # off screen: nothing an agent could see either way
            data = self.screen.grab(x0, y0, x1 - x0, y1 - y0).data
            if data == data[:4] * (len(data) // 4):
                return True
        return False

    def _filled(self, argv: list[str]) -> list[str]:
        """``{home}`` in an app's command is this desktop's home: a spare desktop has a home (and an account)
        of its own, so a task cannot write the path into its start state."""
        return [part.replace("{home}", self.home) for part in argv]

    def _probe(self, app: AppState) -> None:
        argv = self._filled(app.ready_argv)
        deadline = time.monotonic() + app.timeout
        while True:
            proc = self.spawn_agent(f"{app.label}-ready", argv, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                status = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                status = None
            self.processes.stop(proc, timeout=0)
            if status == 0:
                return
            if time.monotonic() > deadline:
                raise DisplayStartError(f"app {app.label!r}: its readiness probe did not pass within {app.timeout}s")
            time.sleep(0.05)

    def _focus_newest(self) -> None:
        """Focus the last app's window. Window managers may refuse to focus a new window after recent
        input elsewhere (focus-stealing prevention); an episode must not start with that depending on what
        the last one did."""
        if self._wm is None:
            return
        windows = self.windows()
        if not windows:
            return
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # a window manager may not take the request until it manages it
            self.input.activate(windows[-1])
            active = self.input.root_property("_NET_ACTIVE_WINDOW") or [0]
            if active[0] == windows[-1]:
                return
            time.sleep(0.05)
        log.info("the window manager did not focus window %s", windows[-1])

    def windows(self) -> list[int]:
        """Top-level client windows, as the window manager lists them (or the root's children without one)."""
        listed = self.input.root_property("_NET_CLIENT_LIST")
        if listed is not None or self._wm is not None:
            return list(listed or [])
        return self.input.mapped_children()

    def apps(self) -> list[tuple[AppState, subprocess.Popen[bytes]]]:
        return list(self._apps)

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
        # until the X server has handed the last keys to the app, the terminals look idle: on a loaded machine
        # the Return of a command could still sit in its queue
        try:
            self.input.delivered()
        except DesktopDiedError:
            pass  # nothing is in flight on a display that is gone; the checker reads what is left
        return quiescence.wait_caught_up(self.agent_processes, since, timeout, cancelled=cancelled)

    def quick_failure(self) -> str | None:
        """A cheap liveness check (no X round trip): why the desktop is broken, or None."""
        if self._xvfb is None or self._xvfb.poll() is not None:
            return "Xvfb exited"
        if not self.events.alive:
            return "the X connection was lost"
        if self._wm is not None and self._wm.poll() is not None:
            return "the window manager exited"
        for spec, proc in self._apps:
            if spec.required and proc.poll() is not None:
                return f"app {spec.label!r} exited with status {proc.returncode}"
        return None

    def health(self) -> DesktopHealth:
        display = f":{self.display_number}" if self.display_number is not None else "?"
        if not self._started or self._closed:
            return DesktopHealth(False, display, "not running")
        apps = {f"{i}:{spec.label}": proc.poll() is None for i, (spec, proc) in enumerate(self._apps)}
        if self._xvfb is None or self._xvfb.poll() is not None:
            return DesktopHealth(False, display, "Xvfb exited", apps)
        if not self.events.alive or not self.events.ping():
            return DesktopHealth(False, display, "the X server does not answer", apps)
        if self._wm is not None and self._wm.poll() is not None:
            return DesktopHealth(False, display, "the window manager exited", apps)
        return DesktopHealth(True, display, None, apps)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.accessibility is not None:
            self.accessibility.close()
        for part in ("input", "screen", "events"):
            obj = getattr(self, part, None)
            if obj is not None:
                try:
                    obj.close()
                except Exception:  # the display may already be gone
                    log.debug("closing %s failed", part, exc_info=True)
        if self.account is not None:
            self.account.kill_all()
        self.processes.close()
        if self._a11y_bus is not None:
            self._a11y_bus.close()
        if self.display_number is not None:
            xauth.PROCESS_AUTHORITY.remove(self.display_number)
        if self.account is not None:
            shutil.rmtree(self.agent_runtime, ignore_errors=True)
        shutil.rmtree(self._runtime, ignore_errors=True)


X_SOCKET_DIR = Path("/tmp/.X11-unix")


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


def _user_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


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


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"
