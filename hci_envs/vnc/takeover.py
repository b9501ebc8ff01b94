"""Who may drive the desktop: the agent, or a person who took over through VNC.

A viewer with the control role takes the desktop with its first input; from then until it disconnects, or
has sent no input for ``timeout`` seconds, agent input tools are refused with a clear error (screenshots
still work), and other controlling viewers watch. A viewer that :meth:`let_go` (a person handed the desktop
back) takes it again only with input that acts (a key, a button, the wheel): its pointer passing over the
view is dropped meanwhile, so that the agent is not refused because the person's hand rests on the mouse. The control plane can force
either side: ``grant()`` gives people the desktop (agents refused even before anyone types), ``revoke()`` gives
it to the agent (human input is dropped), ``auto()`` returns to taking turns.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Literal

Forced = Literal["human", "agent"] | None


@dataclass
class ControlStatus:
    holder: Literal["agent", "human"]
    viewer: str | None
    forced: Forced
    idle_seconds: float | None
    timeout: float

    def to_dict(self) -> dict[str, object]:
        return {"holder": self.holder, "viewer": self.viewer, "forced": self.forced,
                "idle_seconds": self.idle_seconds, "timeout": self.timeout}


class HumanControl:
    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        self._viewer: str | None = None
        self._last_input = 0.0
        self._forced: Forced = None
        self._let_go: set[str] = set()  # viewers whose bare pointer moves do not take the desktop back

    def _held(self, now: float) -> bool:
        return self._viewer is not None and now - self._last_input < self.timeout

    def human_input(self, viewer: str, acts: bool = True) -> bool:
        """A controlling viewer sent input: may it reach the desktop? Taking it if free. ``acts``: not a bare
        pointer move (which does not take it back for a viewer that let go)."""
        now = time.monotonic()
        with self._lock:
            if self._forced == "agent":
                return False
            if self._held(now) and self._viewer != viewer:
                return False
            if viewer in self._let_go:
                if not acts and self._forced != "human":
                    return False
                self._let_go.discard(viewer)
            self._viewer, self._last_input = viewer, now
            return True

    def let_go(self) -> None:
        """Whoever holds the desktop by their input lets it go now (a person handed it back to the agent)."""
        with self._lock:
            if self._viewer is not None:
                self._let_go.add(self._viewer)
            self._viewer = None

    def viewer_left(self, viewer: str) -> None:
        with self._lock:
            self._let_go.discard(viewer)
            if self._viewer == viewer:
                self._viewer = None

    def agent_blocked(self) -> str | None:
        """Why agent input is refused right now, or None if the agent may act."""
        now = time.monotonic()
        with self._lock:
            if self._forced == "human":
                return "desktop under human control: the control plane gave it to people (revoke to take it back)"
            if self._forced != "agent" and self._held(now):
                left = self.timeout - (now - self._last_input)
                return (
                    "desktop under human control: a person is using it over VNC; it returns to the agent "
                    f"when they disconnect or after {self.timeout:g}s without their input (about {left:.0f}s "
                    "from now), or when the control plane revokes it"
                )
            return None

    def grant(self) -> None:
        with self._lock:
            self._forced = "human"

    def revoke(self) -> None:
        with self._lock:
            self._forced = "agent"
            self._viewer = None

    def auto(self) -> None:
        with self._lock:
            self._forced = None

    def status(self) -> ControlStatus:
        now = time.monotonic()
        with self._lock:
            held = self._forced == "human" or (self._forced != "agent" and self._held(now))
            return ControlStatus(
                holder="human" if held else "agent",
                viewer=self._viewer if self._held(now) else None,
                forced=self._forced,
                idle_seconds=round(now - self._last_input, 3) if self._viewer else None,
                timeout=self.timeout,
            )
