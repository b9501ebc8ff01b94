"""A virtual X desktop: an Xvfb display, a window manager and apps, with screen, input and clipboard access.

    with Desktop(StartState(width=1280, height=800, apps=[AppState(command=["xterm"])])) as desktop:
        image = desktop.screen.capture(fmt="jpeg")
        desktop.input.click(1, at=(100, 100))

Two sides: the server's (Xvfb, x11vnc, openbox with a configuration that can start no program, the X
connections that capture and inject; files in a runtime directory only the server can open) and the agent's
(the apps and everything started for the agent, as the desktop's agent account when it has one; a private
runtime directory with the display's cookie). A window manager other than openbox runs on the agent's side,
since it may launch programs (menus, key bindings).

:class:`Desktop` puts together its display (:mod:`.display`) and its apps (:mod:`.app_launcher`) on the agent's
side every desktop shares (:mod:`.base_desktop`); :class:`~.fake.FakeDesktop` is its sibling without X.
"""

from __future__ import annotations

import logging

from ..protocol import StartState
from ..sandbox.accounts import AgentAccount
from ..sandbox.limits import Limits
from ..sandbox.network import NetworkPolicy
from . import xauth
from .app_launcher import AppLauncher
from .base_desktop import BaseDesktop, DesktopHealth
from .display import XDisplay

__all__ = ["Desktop", "DesktopHealth"]

log = logging.getLogger(__name__)


class Desktop(XDisplay, AppLauncher, BaseDesktop):
    """One running virtual desktop. ``start()`` brings it up, ``close()`` tears every process of it down.

    With ``account``, the agent's side runs as that account, and every process of the account ends when the
    desktop closes or its session restarts."""

    def __init__(self, state: StartState | None = None, *, home: str | None = None,
                 account: AgentAccount | None = None, max_processes: int = 0, limits: Limits | None = None,
                 network: NetworkPolicy | None = None, dpi: int = 96, start_timeout: float = 15.0) -> None:
        BaseDesktop.__init__(self, state, home=home, account=account, max_processes=max_processes, limits=limits,
                             network=network)
        XDisplay.__init__(self, dpi=dpi, start_timeout=start_timeout)
        AppLauncher.__init__(self)

    def _display_env(self) -> dict[str, str]:
        return self._a11y_bus.agent_env() if self._a11y_bus is not None else BaseDesktop._display_env(self)

    # -- lifecycle -------------------------------------------------------------------------------------
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
            self._connect()
            if wm_ready is not None:
                self._wait_window_manager(wm_ready)
            self._wait_accessibility_bus(self._app_sessions)
            self._start_apps(self.state.apps)
        except BaseException:
            self.close()
            raise
        return self

    def _display_reusable(self) -> bool:
        return self._a11y_bus is None or self._a11y_bus.alive()

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
        self._start_apps(state.apps)

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

    def _close_display(self) -> None:
        if self.accessibility is not None:
            self.accessibility.close()
        BaseDesktop._close_display(self)

    def _close_display_server(self) -> None:
        if self._a11y_bus is not None:
            self._a11y_bus.close()
        if self.display_number is not None:
            xauth.PROCESS_AUTHORITY.remove(self.display_number)
