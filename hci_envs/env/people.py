"""People in the loop, the environment's side: the agent's hand-over (``ask_human``, :mod:`.handover`) and
propose-and-accept (:mod:`.supervision`).

A mixin of :class:`~hci_envs.env.environment.Environment`: it keeps the agent's last actions (shown to the person
it asks), refuses what could drive the desktop while a hand-over pauses the agent, says which calls are the
agent's own (only those are proposed), and words the hand-over's news for the agent's next result.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from ..errors import HandoverError, HumanControlError
from .handover import RECENT_ACTIONS, describe_action

#: Tools that may run while a hand-over pauses the agent, besides the read-only ones: waiting for the person,
#: and asking (which answers that a person was already asked).
PAUSED_TOOLS = frozenset({"wait", "ask_human"})


class PeopleInTheLoop:
    """Needs the environment's ``_lock``, ``episode``, ``hooks``, ``executor`` and ``_performing``."""

    def _join_people(self, parts: Any) -> None:
        #: The agent's hand-over to a person (``ask_human``): see :mod:`hci_envs.env.handover`.
        self.handover = parts.handover
        #: Propose and accept (see :mod:`hci_envs.env.supervision`): off unless asked for.
        self.supervision = parts.supervision
        self._recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=RECENT_ACTIONS)
        self._agent_calls = threading.local()  # this thread is running the agent's tool call or step
        self.executor.observers.append(self._note_action)  # type: ignore[attr-defined]

    def _people_leave(self) -> None:
        """The episode ends: a hand-over ends without a report, and the agent's last actions are forgotten."""
        self.handover.cancel()
        self._recent.clear()

    @contextlib.contextmanager
    def _agent_call(self) -> Iterator[None]:
        self._agent_calls.depth = getattr(self._agent_calls, "depth", 0) + 1
        try:
            yield
        finally:
            self._agent_calls.depth -= 1

    @property
    def agent_acting(self) -> bool:
        """Whether this thread is running one of the agent's calls (a tool, a step), not the control plane's (a
        task's set-up through ``perform``) or a replay's: only the agent's actions are proposed."""
        return getattr(self._agent_calls, "depth", 0) > 0 and not self._performing  # type: ignore[attr-defined]

    def _refuse_while_paused(self) -> None:
        """While a hand-over pauses the agent, whatever could act on the desktop is refused, not only the input
        tools: a shell or an interpreter could drive it too (xdotool)."""
        blocked = self.handover.agent_blocked()
        if blocked:
            raise HumanControlError(blocked)

    def _handover_news(self) -> tuple[str | None, bool]:
        """What the agent is told of the hand-over with its next result: the report once it ended (True), or
        that it still runs, or nothing."""
        report = self.handover.take_report()
        if report is not None:
            return report, True
        blocked = self.handover.agent_blocked()
        return (f"[human] {blocked}" if blocked else None), False

    def _note_action(self, action: Any, result: Any) -> None:
        """The executor's observer: the agent's last actions, shown to the person it asks for help."""
        if not action.read_only and action.type != "wait" and not self._performing:  # type: ignore[attr-defined]
            self._recent.append({"action": describe_action(action.model_dump(mode="json", exclude_defaults=True)
                                                           | {"type": action.type}), "text": result.text})

    def ask_human_for(self, reason: str) -> dict[str, Any]:
        """The agent asks for a person (the ``ask_human`` tool): the episode pauses for it until a person hands
        the desktop back or nobody answers in time (see :mod:`hci_envs.env.handover`)."""
        with self._lock:  # type: ignore[attr-defined]
            self.episode.require_running()  # type: ignore[attr-defined]
            if self.hooks.people is None:  # type: ignore[attr-defined]
                raise HandoverError("no person can answer here: this environment is not served with VNC viewers "
                                    "or a collection page (serve it, with --vnc-port or the collection page)")
            record = self.handover.request(reason, list(self._recent))
            where = self.hooks.people  # type: ignore[attr-defined]
            return {"status": "requested", "reason": record.reason, "where": where,
                    "answer_within_seconds": self.handover.answer_within}
