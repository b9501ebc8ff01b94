"""Propose and accept: a watching person decides on each of the agent's input actions before it runs.

With supervision on, an input action of the agent (a click, keys, typing, a drag...) does not run at once: it
becomes a *proposal* that the person sees (the collection page draws where it would click and what it would
type), and the person

  * **accepts** it: it runs as proposed;
  * **edits** it: the action they give runs instead (checked like any action);
  * **overrides** it: it does not run; the desktop is the person's until they say they are done, and what
    they did is the agent's answer (their input, reduced to canonical actions by the server).

Nobody deciding within ``decide_within`` seconds runs it as proposed (``timed_out``); an override not said done
within OVERRIDE_FOR seconds ends as done. The agent's call waits
for the decision (its step deadline goes on) and its result says what was decided. Each decision, beside its
proposal, is told to the observers (the recorder keeps them: meta.json's ``proposals``).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from .. import deadline
from ..errors import ActionTimeoutError, ConfigError, HandoverError
from ..errors import HumanControlError
from .handover import describe_action

log = logging.getLogger(__name__)

Decision = Literal["accept", "edit", "override", "timed_out", "turned_off", "cancelled"]
#: Every decision that ends a proposal.
DECISIONS: tuple[str, ...] = get_args(Decision)

#: Seconds a proposal waits for a decision, by default.
DEFAULT_DECIDE_WITHIN = 120.0
#: Seconds a person who overrode a proposal may act before the agent's call answers with what they did.
OVERRIDE_FOR = 600.0
_ids = itertools.count(1)


@dataclass
class Proposal:
    """One of the agent's actions, waiting for a person's decision (times on the monotonic clock)."""

    id: int
    action: dict[str, Any]
    proposed_at: float
    decide_by: float
    decision: Decision | None = None
    decided_at: float | None = None
    #: The action run instead (edit).
    edited: dict[str, Any] | None = None
    #: What the person did instead (override), as canonical actions.
    actions: list[dict[str, Any]] = field(default_factory=list)
    person: str | None = None
    #: An override: the person has the desktop until they are done.
    overriding: bool = False
    #: Checks an edited action against the screen (the executor's parser); returns it as a dict.
    validate: Callable[[dict[str, Any]], dict[str, Any]] | None = field(default=None, repr=False)
    _settled: threading.Event = field(default_factory=threading.Event, repr=False)

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "action": self.action}
        if self.decision is None:
            out["decide_within_seconds"] = round(max(0.0, self.decide_by - (now or time.monotonic())), 3)
            out["overriding"] = self.overriding
        else:
            out["decision"] = self.decision
        for key in ("edited", "person"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.actions:
            out["actions"] = self.actions
        return out


class Supervision:
    """The propose-and-accept mode of one environment (off until turned on). Thread-safe."""

    def __init__(self, *, decide_within: float = DEFAULT_DECIDE_WITHIN) -> None:
        if not isinstance(decide_within, int | float) or isinstance(decide_within, bool) or not decide_within > 0:
            raise ConfigError(f"decide_within must be a positive number of seconds, not {decide_within!r}",
                              field="decide_within")
        self.decide_within = float(decide_within)
        self.on = False
        self._lock = threading.Lock()
        self._current: Proposal | None = None
        self._last: Proposal | None = None
        #: Called with ``(event, proposal)``: "proposed", "overriding", then the decision ("accept", "edit",
        #: "override", "timed_out", "cancelled").
        self.observers: list[Callable[[str, Proposal], Any]] = []

    def turn(self, on: bool) -> None:
        """Turn the mode on or off; turning it off lets a proposal waiting now run as proposed."""
        with self._lock:
            self.on = bool(on)
            waiting = self._current
        if not on and waiting is not None:  # an override ends with what the person did; a proposal runs
            self._decide(waiting, "override" if waiting.overriding else "turned_off", person=waiting.person)

    # -- the agent's side ------------------------------------------------------------------------------
    def propose(self, action: dict[str, Any], validate: Callable[[dict[str, Any]], dict[str, Any]],
                interrupt: threading.Event | None = None) -> Proposal:
        """Show ``action`` and wait for the decision (``validate`` checks an edited action). Returns the decided
        proposal; an override returns once the person is done."""
        now = time.monotonic()
        proposal = Proposal(next(_ids), action, now, now + self.decide_within, validate=validate)
        with self._lock:
            if self._current is not None:  # one at a time: the environment's lock already orders the agent's calls
                raise HandoverError("another action is waiting for a person's decision")
            self._current = proposal
        self._tell("proposed", proposal)
        while not proposal._settled.wait(0.05):
            left = deadline.remaining()  # the agent's step's own time limit (this is the agent's thread)
            if (interrupt is not None and interrupt.is_set()) or (left is not None and left <= 0):
                self._decide(proposal, "cancelled")
                break
            if time.monotonic() >= proposal.decide_by:
                self._decide(proposal, "override" if proposal.overriding else "timed_out")
        return proposal

    # -- the person's side -----------------------------------------------------------------------------
    def current(self) -> Proposal | None:
        with self._lock:
            return self._current

    def status(self) -> dict[str, Any]:
        with self._lock:
            current, last = self._current, self._last
        out: dict[str, Any] = {"on": self.on, "decide_within": self.decide_within}
        if current is not None:
            out["proposal"] = current.to_dict()
        if last is not None:
            out["last"] = last.to_dict()
        return out

    def decide(self, proposal_id: int, decision: Literal["accept", "edit", "override", "done"], *,
               action: dict[str, Any] | None = None, person: str | None = None,
               actions: list[dict[str, Any]] | None = None) -> Proposal:
        """The person's decision on the proposal ``proposal_id``: accept, edit (with ``action``), override (the
        desktop is theirs), then done (with what they did, ``actions``)."""
        with self._lock:
            proposal = self._current
            if proposal is None or proposal.id != proposal_id:
                raise HandoverError(f"proposal {proposal_id} is not waiting for a decision"
                                    + (f" (proposal {proposal.id} is)" if proposal is not None else ""))
            if decision == "done" and not proposal.overriding:
                raise HandoverError("done ends an override; this proposal was not overridden")
            if decision != "done" and proposal.overriding:
                raise HandoverError("the person is doing it themselves: say done when they are")
        if decision == "edit":
            if not isinstance(action, dict):
                raise ConfigError("edit needs the action to run instead", field="action")
            assert proposal.validate is not None
            checked = proposal.validate(action)
            self._decide(proposal, "edit", person=person or "a person", edited=checked)
        elif decision == "override":
            with self._lock:
                proposal.overriding, proposal.person = True, person or "a person"
                proposal.decide_by = time.monotonic() + OVERRIDE_FOR
            self._tell("overriding", proposal)
        elif decision == "done":
            self._decide(proposal, "override", person=person, actions=actions or [])
        else:
            self._decide(proposal, "accept", person=person or "a person")
        return proposal

    def _decide(self, proposal: Proposal, decision: Decision, *, person: str | None = None,
                edited: dict[str, Any] | None = None, actions: list[dict[str, Any]] | None = None) -> None:
        with self._lock:
            if proposal.decision is not None:
                return
            proposal.decision, proposal.decided_at = decision, time.monotonic()
            proposal.person = person or proposal.person
            proposal.edited, proposal.actions = edited, list(actions or [])
            if self._current is proposal:
                self._current, self._last = None, proposal
        self._tell(decision, proposal)
        proposal._settled.set()

    def _tell(self, event: str, proposal: Proposal) -> None:
        for observer in list(self.observers):
            try:
                observer(event, proposal)
            except Exception:
                log.exception("a supervision observer failed on %s", event)


def supervisor(supervision: Supervision, executor: Any,
               agent_acting: Callable[[], bool]) -> Callable[[Any], tuple[Any, str]]:
    """The executor's ``supervise`` hook over ``supervision``: the agent's input actions become proposals while it
    is on; anything else (a task's set-up, a replay, the mode off) runs as it is."""

    def supervise(action: Any) -> tuple[Any, str]:
        if not supervision.on or not agent_acting():
            return action, ""
        proposed = action.model_dump(mode="json", exclude_defaults=True) | {"type": action.type}
        proposal = supervision.propose(proposed, lambda edited: _edit(executor, edited), interrupt=executor.interrupt)
        who = proposal.person or "a person"
        if proposal.decision == "cancelled":
            left = deadline.remaining()
            if left is not None and left <= 0:
                raise ActionTimeoutError(f"{action.type}: the step's time limit passed while the action waited for "
                                         "a person's decision; it did not run")
            raise HandoverError("the episode was reset while your action waited for a person's decision")
        blocked = executor.input_blocked()  # a person may have taken the desktop meanwhile
        if blocked and proposal.decision != "override":
            raise HumanControlError(blocked)
        if proposal.decision == "edit" and proposal.edited is not None:
            return executor.validate(proposal.edited), f"[human] {who} changed your action; this ran instead: " \
                                                       f"{describe_action(proposal.edited)}"
        if proposal.decision == "override":
            done = "; ".join(describe_action(a) for a in proposal.actions) or "no input"
            return None, (f"[human] {who} did something else instead of your {describe_action(proposed)} "
                          f"({len(proposal.actions)} actions): {done}. Take a screenshot to see the desktop now.")
        if proposal.decision == "timed_out":
            return action, f"[human] nobody decided on your action in {supervision.decide_within:g}s; it ran"
        if proposal.decision == "turned_off":
            return action, "[human] the people turned propose-and-accept off; your action ran"
        return action, f"[human] {who} accepted your action"

    return supervise


def _edit(executor: Any, edited: dict[str, Any]) -> dict[str, Any]:
    """A person's edit, checked: an input action (doing nothing instead is an override with no input), by
    coordinates (element numbers are the agent's own observation's), valid on this screen."""
    if isinstance(edited, dict) and edited.get("element") is not None:
        raise ConfigError("an edit names where to act with x and y, not an element number", field="element")
    checked = executor.validate(edited)
    if not checked.injects_input:
        raise ConfigError(f"an edit is an input action, not {checked.type}; to do nothing instead, do it yourself "
                          "(override) and say done without input", field="type")
    return checked.model_dump(mode="json", exclude_defaults=True) | {"type": checked.type}
