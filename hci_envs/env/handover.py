"""A hand-over asked by the agent: it asks for a person, a person takes the desktop, and hands it back.

The states, in ``state().human["status"]``::

    none ──ask──▶ requested ──accept──▶ held ──hand back──▶ handed_back ──ask──▶ requested ...
                      │                   └──hold time over──▶ handed_back (the note says the time ran out)
                      └──nobody within answer_within──▶ unanswered ──ask──▶ requested ...

From the request until the hand-over ends, the agent's input is refused (never queued): the episode is
paused for it, while its looks (screenshots, the tree) and the step deadline go on (unless the clock is made to
stop for people, ``pause_clock``: then a step's ``timeout_s`` and a task's time limit count the agent's time
only, :meth:`Handover.agent_clock`). Deadlines are checked
whenever anyone asks (no timer thread, nothing an agent could outrun). When the hand-over ends, the agent's
next result carries a report once: the person's note and what they did, as canonical actions.

This is bookkeeping only: who may drive the desktop (the VNC side) and what the person did (their input,
reduced) are the server's to plug in (:mod:`hci_envs.server.handover_routes`); observers hear every change
(the recorder keeps them in the episode).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError, HandoverError

log = logging.getLogger(__name__)

Status = Literal["none", "requested", "held", "handed_back", "unanswered"]

#: Seconds a request waits for a person to take it, by default.
DEFAULT_ANSWER_WITHIN = 300.0
#: Seconds a person may hold the desktop before it goes back to the agent, by default.
DEFAULT_HOLD_FOR = 1800.0
#: Characters of a reason or a note.
MAX_TEXT = 2000
#: The agent's last actions shown beside a request.
RECENT_ACTIONS = 10


@dataclass
class HandoverRecord:
    """One hand-over, from the agent's request to its end (times are the monotonic clock's)."""

    reason: str
    requested_at: float
    answer_by: float
    recent_actions: list[dict[str, Any]] = field(default_factory=list)
    person: str | None = None
    accepted_at: float | None = None
    hold_until: float | None = None
    ended_at: float | None = None
    #: "handed_back" (by the person), "hold_time_over" or "unanswered"; None while it runs.
    outcome: str | None = None
    note: str = ""
    #: What the person did while holding the desktop, as canonical actions.
    actions: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self, now: float) -> dict[str, Any]:
        out: dict[str, Any] = {"reason": self.reason, "asked_seconds_ago": round(now - self.requested_at, 3),
                               "recent_actions": self.recent_actions}
        if self.outcome is None and self.accepted_at is None:
            out["answer_within_seconds"] = round(max(0.0, self.answer_by - now), 3)
        if self.person is not None:
            out["person"] = self.person
        if self.accepted_at is not None and self.hold_until is not None and self.outcome is None:
            out["held_seconds"] = round(now - self.accepted_at, 3)
            out["hold_left_seconds"] = round(max(0.0, self.hold_until - now), 3)
        if self.outcome is not None:
            out.update(outcome=self.outcome, note=self.note, actions=self.actions)
        return out


class Handover:
    """The hand-over of one environment. Thread-safe; ``clock`` is the test seam for its deadlines."""

    def __init__(self, *, answer_within: float = DEFAULT_ANSWER_WITHIN, hold_for: float = DEFAULT_HOLD_FOR,
                 pause_clock: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        for name, value in (("answer_within", answer_within), ("hold_for", hold_for)):
            if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
                raise ConfigError(f"{name} must be a positive number of seconds, not {value!r}", field=name)
        self.answer_within, self.hold_for = float(answer_within), float(hold_for)
        #: Whether the agent's clock (step deadlines, a task's time limit) stops while it waits for a person.
        self.pause_clock = bool(pause_clock)
        self._clock = clock
        self._paused_before = 0.0  # seconds the agent waited for people in hand-overs that ended
        self._lock = threading.Lock()
        # Changes are queued under _lock, in the order they happen, and told to observers in that order, one
        # teller at a time: an accept and a hand back racing must not be heard the other way round.
        self._told: list[tuple[str, HandoverRecord]] = []
        self._telling = threading.RLock()
        self._current: HandoverRecord | None = None
        self._status: Status = "none"
        self._report: HandoverRecord | None = None  # ended, not yet told to the agent
        #: Called (outside the lock) with each change: ``(event, record)``, event one of "requested",
        #: "accepted", "handed_back", "hold_time_over", "unanswered", "cancelled".
        self.observers: list[Callable[[str, HandoverRecord], Any]] = []

    # -- the agent's side ------------------------------------------------------------------------------
    def request(self, reason: str, recent_actions: list[dict[str, Any]] | None = None) -> HandoverRecord:
        reason = _text(reason, "reason")
        if not reason:
            raise ConfigError("ask_human needs a reason: what the person should do, or why you are stuck",
                              field="reason")
        try:
            with self._lock:
                self._expire_locked()
                if self._status in ("requested", "held"):
                    asked = self._current.reason  # type: ignore[union-attr]
                    raise HandoverError(f"a person was already asked ({asked!r}); {self._blocked_locked(self._clock())}")
                now = self._clock()
                record = HandoverRecord(reason, now, now + self.answer_within,
                                        list((recent_actions or [])[-RECENT_ACTIONS:]))
                self._current, self._status, self._report = record, "requested", None
                self._told.append(("requested", record))
        finally:
            self._tell()
        return record

    def agent_blocked(self) -> str | None:
        """Why the agent's input is refused right now (a person was asked, or holds the desktop), or None."""
        try:
            with self._lock:
                self._expire_locked()
                return self._blocked_locked(self._clock()) if self._status in ("requested", "held") else None
        finally:
            self._tell()

    def agent_clock(self) -> float:
        """The clock of the agent's deadlines, in seconds: the monotonic clock, which with ``pause_clock`` stands
        still from a request until its hand-over ends (the time spent waiting for people is not the agent's)."""
        try:
            with self._lock:
                self._expire_locked()
                now = self._clock()
                if not self.pause_clock:
                    return now
                paused = self._paused_before
                if self._status in ("requested", "held") and self._current is not None:
                    paused += now - self._current.requested_at
                return now - paused
        finally:
            self._tell()

    def agent_may_act(self) -> bool:
        """Whether no hand-over pauses the agent now (a deadline that passed ends it here)."""
        return self.agent_blocked() is None

    def _blocked_locked(self, now: float) -> str:
        record = self._current
        assert record is not None
        if self._status == "requested":
            return (f"you asked for a person ({record.reason!r}); your input is refused until one hands the desktop "
                    f"back, or until nobody has answered in {max(0.0, record.answer_by - now):.0f}s more. "
                    "Screenshots still work; `wait` ends early when the desktop comes back.")
        left = max(0.0, (record.hold_until or now) - now)
        return (f"a person ({record.person}) holds the desktop, as you asked ({record.reason!r}); your input is "
                f"refused until they hand it back (at most {left:.0f}s more). "
                "Screenshots still work; `wait` ends early when the desktop comes back.")

    def take_report(self) -> str | None:
        """Once, after a hand-over ended: what the agent is told (the note, what the person did)."""
        try:
            with self._lock:
                self._expire_locked()
                record, self._report = self._report, None
        finally:
            self._tell()
        return report_text(record) if record is not None else None

    # -- the person's side -----------------------------------------------------------------------------
    def accept(self, person: str, *, at: float | None = None) -> HandoverRecord:
        """A person takes the desktop. One wins; anyone after is told who has it. ``at``: when (on the
        monotonic clock) their first input arrived, if that is how they took it."""
        person = _text(person, "person") or "a person"
        try:
            with self._lock:
                self._expire_locked()
                record = self._current
                if self._status == "held" and record is not None:
                    raise HandoverError(f"{record.person} has already taken this hand-over")
                if self._status != "requested" or record is None:
                    raise HandoverError(f"nothing to accept: the agent has not asked for a person ({self._status})")
                now = self._clock() if at is None else min(at, self._clock())
                record.person, record.accepted_at, record.hold_until = person, now, now + self.hold_for
                self._status = "held"
                self._told.append(("accepted", record))
        finally:
            self._tell()
        return record

    def hand_back(self, note: str = "", actions: list[dict[str, Any]] | None = None, *,
                  person: str | None = None) -> HandoverRecord:
        """The person gives the desktop back, with a note for the agent and what they did. With ``person``,
        only the person who holds it may (a viewer other than the one that took it is refused)."""
        note = _text(note, "note")
        try:
            with self._lock:
                self._expire_locked()
                record = self._current
                if self._status != "held" or record is None:
                    raise HandoverError(f"nothing to hand back: no person holds the desktop ({self._status})")
                if person is not None and person != record.person:
                    raise HandoverError(f"{record.person} holds the desktop, not {person}")
                self._end_locked("handed_back", note, actions or [])
        finally:
            self._tell()
        return record

    def cancel(self) -> None:
        """The episode ends (a reset, a close): whatever ran ends without a report."""
        try:
            with self._lock:
                record, running = self._current, self._status in ("requested", "held")
                if running and record is not None:
                    record.ended_at, record.outcome = self._clock(), "cancelled"
                    self._paused_before += record.ended_at - record.requested_at
                    self._told.append(("cancelled", record))
                self._current, self._status, self._report = None, "none", None
        finally:
            self._tell()

    @property
    def current(self) -> Status:
        """The status alone (cheap enough for each input message of a person)."""
        try:
            with self._lock:
                self._expire_locked()
                return self._status
        finally:
            self._tell()

    @property
    def holder(self) -> str | None:
        """The person who holds the desktop now, or None."""
        try:
            with self._lock:
                self._expire_locked()
                return self._current.person if self._status == "held" and self._current else None
        finally:
            self._tell()

    def status(self) -> dict[str, Any]:
        """``state().human``: the status, and the current (or last) hand-over."""
        try:
            with self._lock:
                self._expire_locked()
                out: dict[str, Any] = {"status": self._status}
                if self._current is not None:
                    out.update(self._current.to_dict(self._clock()))
                return out
        finally:
            self._tell()

    # -- deadlines, checked whenever anyone asks -------------------------------------------------------
    def _expire_locked(self) -> None:
        record, now = self._current, self._clock()
        if record is None:
            return
        if self._status == "requested" and now >= record.answer_by:
            self._end_locked("unanswered", f"nobody answered within {self.answer_within:g}s", [], at=record.answer_by)
        elif self._status == "held" and record.hold_until is not None and now >= record.hold_until:
            self._end_locked("hold_time_over", f"the person's time ({self.hold_for:g}s) ran out before they "
                                               "handed the desktop back", [], at=record.hold_until)

    def _end_locked(self, outcome: str, note: str, actions: list[dict[str, Any]], *,
                    at: float | None = None) -> None:
        """End the hand-over, at ``at`` (a deadline, found only when someone asked) or now."""
        record = self._current
        assert record is not None
        ended = self._clock() if at is None else at
        record.ended_at, record.outcome, record.note, record.actions = ended, outcome, note, list(actions)
        self._paused_before += record.ended_at - record.requested_at
        self._status = "unanswered" if outcome == "unanswered" else "handed_back"
        self._report = record
        self._told.append((outcome, record))

    def _tell(self) -> None:
        """Tell the observers what changed, in order (outside the state's lock: they may take their own)."""
        with self._telling:
            while True:
                with self._lock:
                    if not self._told:
                        return
                    event, record = self._told.pop(0)
                for observer in list(self.observers):
                    try:
                        observer(event, record)
                    except Exception:  # an observer's failure must not undo the hand-over or stop the others
                        log.exception("a hand-over observer failed on %s", event)


def report_text(record: HandoverRecord) -> str:
    """What the agent reads when a hand-over ended."""
    if record.outcome == "unanswered":
        return (f"[human] Nobody answered your request ({record.reason!r}) in time; the desktop is yours again, "
                "as you left it.")
    done = "; ".join(describe_action(a) for a in record.actions) or "no input"
    head = (f"[human] {record.person} handed the desktop back" if record.outcome == "handed_back"
            else f"[human] The desktop is yours again: {record.note}")
    note = f" with a note: {record.note!r}" if record.outcome == "handed_back" and record.note else ""
    return (f"{head}{note}. What they did ({len(record.actions)} actions): {done}. This result's screenshot shows "
            "the desktop now.")


def describe_action(action: dict[str, Any]) -> str:
    """One canonical action in a line: ``click(412, 300)``, ``type_text('hello')``, ``key('ctrl+s')``."""
    kind = action.get("type", "?")
    args = [f"{action[k]!r}" if isinstance(action[k], str) else str(action[k])
            for k in ("x", "y", "text", "keys", "key", "dx", "dy", "ms") if k in action]
    return f"{kind}({', '.join(args)})"


def _text(value: Any, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be text, not {type(value).__name__}", field=name)
    if len(value) > MAX_TEXT:
        raise ConfigError(f"{name} is {len(value)} characters; at most {MAX_TEXT}", field=name)
    return value.strip()
