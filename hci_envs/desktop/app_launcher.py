"""A desktop's apps: launching the start state's apps on the agent's side, and waiting until they are what an
agent can act on (a window mapped and drawn, the accessibility tree filled, the app's own readiness probe).

:class:`AppLauncher` is the apps half of :class:`~.desktop.Desktop` (one of its base classes; it is not used
alone).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, DisplayStartError, MissingDependencyError
from ..protocol import AppState, StartState
from ..sandbox.processes import ProcessSupervisor
from .a11y import Accessibility
from .a11y_model import Query
from .display import log_tail
from .events import DesktopEvents
from .screen import Screen
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


class AppLauncher:
    """The apps of a desktop, each in a session of its own on the agent's side.

    Of the desktop it is part of, it uses the start state, the process supervisor, the display (its X
    connections, window list, accessibility tree, window manager and runtime directory) and the agent's side
    (``spawn_agent``, ``app_env``, ``home``)."""

    state: StartState
    processes: ProcessSupervisor
    screen: Screen
    input: Input
    events: DesktopEvents
    accessibility: Accessibility | None
    _wm: subprocess.Popen[bytes] | None
    _runtime: Path
    if TYPE_CHECKING:
        home: str

        def spawn_agent(self, name: str, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]: ...
        def app_env(self, extra: dict[str, str] | None = None) -> dict[str, str]: ...
        def windows(self) -> list[int]: ...

    def __init__(self) -> None:
        self._apps: list[tuple[AppState, subprocess.Popen[bytes]]] = []
        self._logs = 0

    def log_file(self, name: str) -> Path:
        """A new file for a program's output, in the desktop's runtime folder (the server's: the agent can
        neither read nor fill it past the program's own writes); it goes with the desktop."""
        self._logs += 1
        return self._runtime / f"{self._logs}-{name.replace('/', '_')}.log"

    def spawn_logged(self, name: str, argv: list[str], **kwargs: object) -> tuple[subprocess.Popen[bytes], Path]:
        """Start a program on the agent's side with its output in a new log file (:meth:`log_file`); the
        process and where its output goes."""
        log_path = self.log_file(f"app-{name}")
        with open(log_path, "wb") as log_file:
            return self.spawn_agent(name, argv, stdout=log_file.fileno(), stderr=log_file.fileno(),
                                    **kwargs), log_path

    def launch(self, app: AppState) -> subprocess.Popen[bytes]:
        """Start an app on this desktop; with ``app.wait_for_window`` return once it has mapped a window."""
        argv = self._filled(app.argv)
        if not argv:
            raise ConfigError("an app needs a command")
        program = shutil.which(argv[0], path=self.app_env().get("PATH")) or argv[0]
        if not os.path.exists(program):
            raise MissingDependencyError(f"app {app.label!r}: program {argv[0]!r} not found", program=argv[0])
        # Count window maps rather than compare window ids: a relaunched app may get its old ids back.
        maps_before, overrides_before = self.events.map_count(), self.events.override_map_count()
        proc, log_path = self.spawn_logged(app.label, [program, *argv[1:]], env=self.app_env(app.env))
        self._apps.append((app, proc))
        if app.wait_for_window:
            deadline = time.monotonic() + app.timeout
            while not self.events.wait_for_map(maps_before, 0.05):
                if proc.poll() is not None:
                    raise DisplayStartError(
                        f"app {app.label!r} exited with status {proc.returncode}: {log_tail(log_path)}"
                    )
                if time.monotonic() > deadline:
                    raise DisplayStartError(self._no_window(app, self.events.override_map_count() - overrides_before,
                                                            log_path))
        return proc

    @staticmethod
    def _no_window(app: AppState, overrides: int, log_path: Path) -> str:
        """What an app that mapped no managed window in time showed instead, and how to say when it is up."""
        if overrides:
            seen = (f"showed only {overrides} override-redirect window{'s' if overrides > 1 else ''} (a menu, a "
                    "splash or a window that bypasses the window manager), no managed window")
        else:
            seen = "mapped no window"
        tail = log_tail(log_path)
        return (f"app {app.label!r} {seen} within {app.timeout:g}s; if that is how it shows itself, say when it is "
                f"up in its start state: \"wait_for_window\": false (with a \"ready_command\" to probe it), or a "
                f"longer \"timeout\" (serve --app takes the start state as JSON); its output: {tail}")

    def _start_apps(self, apps: list[AppState]) -> None:
        """Launch ``apps``, focus the newest one's window, and return once they are ready and the screen has
        settled."""
        for app in apps:
            self.launch(app)
        self._focus_newest()
        self._wait_ready(apps)
        self.events.wait_settled(quiet=SETTLE_QUIET, timeout=3.0)

    def stop_apps(self, grace: float = 0.0) -> None:
        """End the apps' process groups; by default at once (SIGKILL): a reset does not wait out a grace."""
        for _spec, proc in reversed(self._apps):
            self.processes.stop(proc, timeout=grace)
        self._apps.clear()

    def forget_apps(self) -> None:
        """Reap and forget the apps (their processes ended with the agent's account)."""
        for _spec, proc in self._apps:
            proc.poll()  # reap
        self._apps.clear()

    def apps(self) -> list[tuple[AppState, subprocess.Popen[bytes]]]:
        return list(self._apps)

    def _app_sessions(self) -> dict[int, str]:
        """Each app's session (its process id: every app starts a session of its own) and its label."""
        return {proc.pid: spec.label for spec, proc in self._apps}

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
