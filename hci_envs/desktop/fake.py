"""A desktop without X: the declared test seam for everything that is not about the display.

:class:`FakeDesktop` is the real desktop's sibling (both are :class:`~.base_desktop.BaseDesktop`, which owns the agent's side)
and keeps its interface and its agent side (the agent's account, runtime
directory, processes, the sweep at reset), so ``bash``, ``python``, CodeAct, containment, the control plane,
MCP and the clients run for real; only the display is replaced. Its screen is an in-memory frame on which
input leaves marks (a click paints a block where it landed, typed text and keys paint a band at the top),
so a step's screenshot changes with its action; its input is recorded in :attr:`FakeDesktop.log` and typed
text in :attr:`FakeDesktop.typed`; its clipboard is a dictionary, and a paste chord "pastes" it into
``typed``. :meth:`FakeDesktop.fail` produces a display failure on demand.

It is what android_env's fake simulator is to its emulator: use it (``Environment(desktop="fake")``,
``hci-envs serve --desktop fake``) for tests of everything else; tests of screen, input and apps use the real
desktop.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import DesktopDiedError, DisplayStartError
from ..protocol import AppState, StartState
from .base_desktop import BaseDesktop, DesktopHealth
from .encode import Frame
from .screen import Screen
from .xinput import Typed

#: Background and mark colours of the fake screen (B, G, R, X).
_BACKGROUND = (48, 40, 32, 255)
_PASTE_CHORDS = {("ctrl", "v"), ("shift", "Insert"), ("ctrl", "shift", "v")}


class FakeDesktop(BaseDesktop):
    """A desktop whose display is a frame in memory. Not thread-safe beyond what the executor's lock gives (it
    serialises actions). Takes the real desktop's arguments (``home``, ``account``, ``max_processes``; the
    display's own, such as ``dpi``, are accepted and mean nothing here)."""

    no_accessibility = "the fake desktop has no accessibility tree (use the real desktop)"

    def __init__(self, state: StartState | None = None, *, home: str | None = None, account: Any = None,
                 max_processes: int = 0, limits: Any = None, network: Any = None, **display_options: Any) -> None:
        super().__init__(state, home=home, account=account, max_processes=max_processes, limits=limits,
                         network=network)
        #: Every input event, in order: ("move", x, y), ("button", n, pressed), ("key", name, pressed), ...
        self.log: list[tuple[Any, ...]] = []
        #: The text typed or pasted into the "focused app" since the last reset.
        self.typed = ""
        self._failure: str | None = None
        self._windows: list[AppState] = []
        self._frame = np.empty((self.state.height, self.state.width, 4), dtype=np.uint8)

    # -- lifecycle -------------------------------------------------------------------------------------
    @property
    def display(self) -> str:
        return ":fake"

    def start(self) -> FakeDesktop:
        if self._started:
            return self
        self._started = True
        self._make_agent_tmp()
        self.events = FakeEvents(self)
        self.input = FakeInput(self)
        self.screen = FakeScreen(self)
        self._clear()
        for app in self.state.apps:
            self.launch(app)
        return self

    def launch(self, app: AppState) -> Any:
        """An app of the fake desktop is a window: no program starts (the real desktop's tests cover apps)."""
        if not app.argv:
            raise DisplayStartError("an app needs a command")
        self._windows.append(app)
        self.events.maps += 1
        return None

    def stop_apps(self, grace: float = 0.0) -> None:
        """The fake's apps are windows, not programs: a restart clears them."""

    def forget_apps(self) -> None:
        """As :meth:`stop_apps`."""

    def restart_session(self, state: StartState) -> None:
        self.end_agent_side()
        self.state = state
        self.input.release_all()
        self.events.clear_clipboard()
        self._windows.clear()
        self._clear()
        for app in state.apps:
            self.launch(app)

    def _clear(self) -> None:
        self._frame[:] = _BACKGROUND
        self.log.clear()
        self.typed = ""
        self.input.x = self.input.y = 0
        self.events.damage()

    def fail(self, reason: str = "Xvfb exited") -> None:
        """Make the display fail as Xvfb's death would: the next call truncates the episode."""
        self._failure = reason
        self.events.alive = False

    def vnc_socket(self, timeout: float = 10.0) -> Any:
        raise DisplayStartError("the fake desktop has no VNC server; use the real desktop for VNC")

    def windows(self) -> list[int]:
        return list(range(1, len(self._windows) + 1))

    def apps(self) -> list[tuple[AppState, Any]]:
        return [(app, None) for app in self._windows]

    def quick_failure(self) -> str | None:
        return self._failure

    def health(self) -> DesktopHealth:
        if not self._started or self._closed:
            return DesktopHealth(False, self.display, "not running")
        apps = {f"{i}:{app.label}": self._failure is None for i, app in enumerate(self._windows)}
        return DesktopHealth(self._failure is None, self.display, self._failure, apps)

    # -- what input does to the fake screen ------------------------------------------------------------
    def _check(self) -> None:
        if self._failure is not None or self._closed:
            raise DesktopDiedError(f"the display is gone ({self._failure or 'closed'})")

    def _mark(self, x: int, y: int, colour: tuple[int, int, int, int], size: int = 4) -> None:
        h, w = self._frame.shape[:2]
        x0, y0 = max(0, x - size), max(0, y - size)
        x1, y1 = min(w, x + size + 1), min(h, y + size + 1)
        self._frame[y0:y1, x0:x1] = colour
        self.events.damage((x0, y0, x1 - x0, y1 - y0))

    def _band(self) -> None:
        """Typed text as a band at the top: its length, and a colour from its last character."""
        w = self._frame.shape[1]
        self._frame[0:6, :] = _BACKGROUND
        length = min(w, 4 * len(self.typed))
        last = ord(self.typed[-1]) if self.typed else 0
        self._frame[0:6, :length] = (last * 37 % 256, last * 91 % 256, 200, 255)
        self.events.damage((0, 0, w, 6))


class FakeScreen(Screen):
    """The fake desktop's frame, through the real capture path (region, scaling, encoders)."""

    def __init__(self, desktop: FakeDesktop) -> None:  # no X connection: nothing of Screen.__init__
        self._desktop = desktop
        self._lock = threading.Lock()
        self.width, self.height = desktop.size

    @property
    def uses_shared_memory(self) -> bool:
        return False

    def grab(self, left: int = 0, top: int = 0, width: int | None = None, height: int | None = None,
             *, cursor: bool = False) -> Frame:
        self._desktop._check()
        width = self.width - left if width is None else width
        height = self.height - top if height is None else height
        pixels = self._desktop._frame[top:top + height, left:left + width].copy()
        if cursor:
            x, y = self._desktop.input.x - left, self._desktop.input.y - top
            if 0 <= x < width and 0 <= y < height:
                pixels[y:y + 3, x:x + 3] = (255, 255, 255, 255)
        return Frame(pixels.tobytes(), width, height)

    def close(self) -> None:
        pass


class FakeKeyboard:
    def restore(self) -> None:
        pass


class FakeInput:
    """Pointer and keyboard of the fake desktop: recorded, and marked on its screen."""

    def __init__(self, desktop: FakeDesktop) -> None:
        self._desktop = desktop
        self.keyboard = FakeKeyboard()
        self.x = self.y = 0
        self._held_buttons: set[int] = set()
        self._held_keys: list[str] = []

    def _event(self, *event: Any) -> None:
        self._desktop._check()
        self._desktop.log.append(event)

    def pointer(self) -> tuple[int, int]:
        self._desktop._check()
        return self.x, self.y

    def delivered(self) -> None:
        """The fake's input takes effect when it is sent: nothing is ever in flight."""

    def handled(self, timeout: float = 2.0, *, drawing: bool = True) -> bool:
        """The fake has no apps that could lag behind its keys."""
        return True

    def move(self, x: int, y: int) -> None:
        self._event("move", x, y)
        self.x, self.y = x, y

    def button(self, button: int, press: bool) -> None:
        self._event("button", button, press)
        (self._held_buttons.add if press else self._held_buttons.discard)(button)
        if press:
            self._desktop._mark(self.x, self.y, (0, 0, 255, 255) if button == 1 else (0, 255, 0, 255))

    def click(self, button: int, count: int = 1, at: tuple[int, int] | None = None,
              modifiers: Sequence[str] = ()) -> None:
        if at is not None:
            self.move(*at)
        for name in modifiers:
            self.key_down(name)
        for _ in range(count):
            self.button(button, True)
            self.button(button, False)
        for name in reversed(modifiers):
            self.key_up(name)

    def drag(self, path: Sequence[tuple[int, int]], button: int, modifiers: Sequence[str] = ()) -> None:
        self.move(*path[0])
        for name in modifiers:
            self.key_down(name)
        self.button(button, True)
        for point in path[1:]:
            self.move(*point)
            self._desktop._mark(*point, (0, 200, 200, 255), size=1)
        self.button(button, False)
        for name in reversed(modifiers):
            self.key_up(name)

    def scroll(self, dx: int, dy: int, at: tuple[int, int] | None = None, modifiers: Sequence[str] = ()) -> None:
        if at is not None:
            self.move(*at)
        self._event("scroll", dx, dy)
        self._desktop._mark(self.x, self.y, (200, 0, 200, 255), size=2)

    def key_down(self, name: str) -> None:
        self._event("key", name, True)
        self._held_keys.append(name)

    def key_up(self, name: str) -> None:
        self._event("key", name, False)
        if name in self._held_keys:
            self._held_keys.remove(name)

    def combo(self, names: Sequence[str], hold_seconds: float = 0.0) -> None:
        for name in names:
            self.key_down(name)
        if hold_seconds:
            from .. import deadline

            deadline.sleep(hold_seconds, "hold_key")
        for name in reversed(names):
            self.key_up(name)
        if tuple(names) in _PASTE_CHORDS:
            self._desktop.events.paste_requested()
        elif len(names) == 1 and len(names[0]) == 1:
            self._desktop.typed += names[0]
            self._desktop._band()

    def fits(self, text: str) -> bool:
        return True

    def keys_needed(self, text: str) -> int:
        return 0

    def type_keys(self, text: str) -> Typed:
        self._event("type", text)
        self._desktop.typed += text
        self._desktop._band()
        return Typed(len(text))

    def release_all(self) -> None:
        for name in reversed(self._held_keys):
            self._desktop.log.append(("key", name, False))
        for button in sorted(self._held_buttons):
            self._desktop.log.append(("button", button, False))
        self._held_keys.clear()
        self._held_buttons.clear()

    def restore_access_control(self) -> None:
        pass

    def focused_window(self) -> int | None:
        """The newest window has the focus; with no window, nothing has it."""
        windows = self._desktop.windows()
        return windows[-1] if windows else None

    def focused_class(self) -> str:
        return "fake"

    def activate(self, window: int) -> None:
        self._event("activate", window)

    def root_property(self, name: str) -> list[int] | None:
        return None

    def mapped_children(self) -> list[int]:
        return self._desktop.windows()

    def close(self) -> None:
        pass


class FakeEvents:
    """Damage, clipboard and window maps of the fake desktop."""

    def __init__(self, desktop: FakeDesktop) -> None:
        self._desktop = desktop
        self.alive = True
        self.maps = 0
        self._generation = 0
        self._clipboard: dict[str, str] = {}
        self.requests_served = 0
        self._recent: deque[tuple[float, tuple[int, int, int, int]]] = deque(maxlen=512)

    def damage(self, box: tuple[int, int, int, int] | None = None) -> None:
        """The fake screen changed (in ``box``, or all of it)."""
        self._generation += 1
        w, h = self._desktop.size
        self._recent.append((time.monotonic(), box or (0, 0, w, h)))

    def changes_since(self, since: float, until: float | None = None) -> list[tuple[int, int, int, int]]:
        return [box for when, box in self._recent if when > since and (until is None or when <= until)]

    def damage_generation(self) -> int | None:
        return self._generation

    has_damage = True

    @property
    def damage_count(self) -> int:
        return self._generation

    def wait_settled(self, quiet: float = 0.05, timeout: float = 2.0, *, since: float | None = None,
                     effect: float = 0.0) -> bool:
        return True

    def wait_for_damage(self, count: int | None, timeout: float) -> bool:
        return count is not None and self._generation > count  # the fake screen changes only when told to

    def map_count(self) -> int:
        return self.maps

    def wait_for_map(self, count: int, timeout: float) -> bool:
        return self.maps > count

    def set_clipboard(self, text: str, selections: tuple[str, ...] = ("CLIPBOARD",)) -> None:
        self._desktop._check()
        for selection in selections:
            self._clipboard[selection] = text

    def clear_clipboard(self, selections: tuple[str, ...] = ("CLIPBOARD", "PRIMARY"), *,
                        only_ours: bool = False) -> None:
        for selection in selections:
            self._clipboard.pop(selection, None)

    def get_clipboard(self, selection: str = "CLIPBOARD", timeout: float = 2.0) -> str | None:
        self._desktop._check()
        return self._clipboard.get(selection)

    def paste_requested(self) -> None:
        """The focused app asked for the clipboard (a paste chord) and inserted it."""
        text = self._clipboard.get("CLIPBOARD")
        if text is not None:
            self.requests_served += 1
            self._desktop.typed += text
            self._desktop._band()

    def wait_served(self, after: int, timeout: float) -> bool:
        return self.requests_served > after

    def ping(self, timeout: float = 2.0) -> bool:
        return self.alive

    def close(self) -> None:
        self.alive = False
