"""What an environment asks of a desktop, declared once: the X desktop (:class:`~hci_envs.desktop.Desktop`,
Xvfb) and :class:`~hci_envs.desktop.fake.FakeDesktop` (in memory, the test seam) are two implementations of
:class:`VirtualDesktop`, and the environment and the executor are typed against it, not against either.

Four faces: the **screen** (:class:`ScreenSource`: grab and encode), the **input** (:class:`InputDevice`:
pointer, buttons, keys, typing), the **events** (:class:`EventSource`: damage and settling, the clipboard,
requests served) and the **lifecycle** (start, reuse, restart, the agent side, health, close). A desktop of
another kind (a VNC-backed one, a remote one) is a third implementation of the same protocols.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..protocol import StartState


@runtime_checkable
class ScreenSource(Protocol):
    """The screen's pixels."""

    width: int
    height: int

    def capture(self, *args: Any, **kwargs: Any) -> Any:
        """An encoded image (``EncodedImage``) of the screen or a region, scaled and in a format."""

    def grab(self, left: int = 0, top: int = 0, width: int | None = None, height: int | None = None,
             *args: Any, **kwargs: Any) -> Any:
        """The raw frame (BGRA) of the screen or a region."""


@runtime_checkable
class InputDevice(Protocol):
    """The keyboard and the mouse, as the agent's input."""

    def pointer(self) -> tuple[int, int]: ...
    def move(self, x: int, y: int) -> None: ...
    def button(self, button: int, press: bool) -> None: ...
    def click(self, button: int, count: int = 1, at: tuple[int, int] | None = None, *args: Any,
              **kwargs: Any) -> None: ...
    def drag(self, path: Sequence[tuple[int, int]], button: int, modifiers: Sequence[str] = ()) -> None: ...
    def scroll(self, dx: int, dy: int, at: tuple[int, int] | None = None, modifiers: Sequence[str] = ()) -> None: ...
    def key_down(self, name: str) -> None: ...
    def key_up(self, name: str) -> None: ...
    def combo(self, names: Sequence[str], hold_seconds: float = 0.0) -> None: ...
    def fits(self, text: str) -> bool: ...
    def type_keys(self, text: str) -> Any: ...
    def focused_class(self) -> str: ...
    def focused_window(self) -> int | None:
        """The window with the keyboard focus, or None when nothing has it."""
    def delivered(self) -> None:
        """Return once the X server has handed on what was sent so far (round trips on the connection)."""
    def handled(self, timeout: float = 2.0, *, drawing: bool = True) -> Any:
        """Truthy once the app that gets the keys has handled every key sent so far, waiting up to ``timeout``
        (``drawing``: it may be asked in a way that changes the screen); falsy with ``how == "unknown"`` when it
        cannot be asked."""
    def release_all(self) -> None: ...
    def restore_access_control(self) -> None: ...


@runtime_checkable
class EventSource(Protocol):
    """What the desktop reports: screen damage and settling, the clipboard, requests served."""

    def damage_generation(self) -> int | None: ...
    def damage_count(self) -> int: ...
    def wait_settled(self, quiet: float = 0.05, timeout: float = 2.0, *, since: float | None = None,
                     **kwargs: Any) -> Any: ...
    def wait_for_damage(self, count: int | None, timeout: float) -> bool:
        """Whether the screen changed more than ``count`` times (a damage_generation) within ``timeout``."""
    def map_count(self) -> int: ...
    def wait_for_map(self, count: int, timeout: float) -> bool: ...
    def set_clipboard(self, text: str, selections: tuple[str, ...] = ("CLIPBOARD",)) -> None: ...
    def clear_clipboard(self, selections: tuple[str, ...] = ("CLIPBOARD", "PRIMARY"), **kwargs: Any) -> None: ...
    def get_clipboard(self, selection: str = "CLIPBOARD", timeout: float = 2.0) -> str | None: ...
    def wait_served(self, after: int, timeout: float) -> bool: ...
    def changes_since(self, since: float, until: float | None = None) -> list[tuple[int, int, int, int]]:
        """Where the screen changed (its background aside) between two moments (time.monotonic())."""


@runtime_checkable
class VirtualDesktop(Protocol):
    """A desktop an environment runs episodes on: its faces and its lifecycle."""

    screen: ScreenSource
    input: InputDevice
    events: EventSource

    @property
    def size(self) -> tuple[int, int]: ...
    @property
    def display(self) -> str: ...

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> Any:
        """Bring the desktop up (display, window manager, apps) and return it."""
    def can_reuse(self, state: StartState) -> bool:
        """Whether a reset to ``state`` may keep this display (warm) instead of starting another."""
    def restart_session(self, state: StartState) -> None:
        """Relaunch the apps of ``state`` on the same display (after the agent side ended)."""
    def end_agent_side(self) -> None:
        """End every process of the agent (apps, commands): nothing of an episode outlives its reset."""
    def quick_failure(self) -> str | None:
        """Why the desktop can no longer run the episode, without a round trip; None when it can."""
    def health(self) -> Any:
        """A round-trip check (``DesktopHealth``: ``ok`` and ``reason``)."""
    def close(self) -> None: ...

    # -- the agent side ------------------------------------------------------------------------------------
    @property
    def agent_home(self) -> str:
        """The home as the agent's programs see it."""
    def agent_path(self, path: Any) -> str:
        """A path of the server's (in the home) as the agent's programs see it."""
    def app_env(self, extra: dict[str, str] | None = None) -> Mapping[str, str]:
        """The environment variables of a program run as the agent on this desktop."""
    def spawn_agent(self, name: str, argv: list[str], **kwargs: Any) -> Any:
        """Start a program as the agent on this desktop (its process group is the desktop's to end)."""
    def spawn_lasting(self, name: str, argv: list[str], **kwargs: Any) -> Any:
        """Start a program of the agent's that lives from one tool call to the next (a fork carries it)."""
    def lasting_process(self, inside_pid: int) -> Any:
        """The lasting process a fork or checkpoint carried into this desktop, by its pid in the desktop."""
    def wait_caught_up(self, since: float, timeout: float, *, cancelled: Any = None) -> list[str]:
        """Wait until no command the agent started since ``since`` still runs; what was still busy."""
    def vnc_socket(self, timeout: float = 10.0) -> Any:
        """The Unix socket of the desktop's VNC server (started on first use)."""
