"""A person's turn at a session's desktop, for the hand-over and for propose-and-accept.

While it lasts, VNC's control is forced to people (the agent is refused even while the person only reads),
and their input is kept; when it ends, their viewer lets go (the agent may act at once), control goes back to
what it was, and their input is reduced to canonical actions (the recorders' reducer).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from .. import plugins


class PersonsTurn:
    def __init__(self, session: Any) -> None:
        self.session = session
        self._lock = threading.Lock()
        self._events: list[Any] = []
        self._forced_before: Any = None
        self.active = False
        session.vnc.taps.append(self._on_input)

    def begin(self) -> None:
        control = self.session.vnc.control
        with self._lock:
            if self.active:
                return
            self._events, self.active = [], True
            self._forced_before = control.status().forced
        control.grant()

    def end(self) -> list[dict[str, Any]]:
        """End the turn; what the person did, as canonical actions."""
        actions = self.actions()
        with self._lock:
            was, self.active = self.active, False
        if was:
            control = self.session.vnc.control
            # the agent's again at once: the person's viewer lets go (its next click or key would take it back,
            # as any person's does; its pointer passing over the view does not)
            control.let_go()
            {None: control.auto, "human": control.grant, "agent": control.revoke}[self._forced_before]()
        return actions

    def _on_input(self, viewer: Any, message: Any, arrived: float) -> None:
        """A VNC tap (on the proxy's loop): keep the person's input while the turn lasts."""
        with self._lock:
            if self.active:
                self._events.append(dataclasses.replace(message, i=len(self._events), t=arrived))

    def actions(self) -> list[dict[str, Any]]:
        """What the person has done so far in this turn, as canonical actions."""
        with self._lock:
            events = list(self._events)
        if not events:
            return []
        reduce_events = plugins.load(plugins.RECORDERS, "reduce_events")
        state = self.session.env.declared_state
        return [r.action for r in reduce_events(events, screen=(state.width, state.height))]
