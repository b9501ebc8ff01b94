"""The bookkeeping of an environment's episodes: which episode runs, how far it got, how it ended.

An :class:`EpisodeTracker` knows nothing of desktops; the environment facade asks it what a call may do
(:meth:`require_running`, :meth:`require_steppable`) and tells it what happened (:meth:`begin`,
:meth:`truncate`, :meth:`touch`).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

from ..errors import DesktopDiedError, EnvironmentStateError, NotResetError

log = logging.getLogger(__name__)


@dataclass
class EpisodeTracker:
    id: str | None = None
    step_count: int = 0
    done: bool = False
    #: Why the episode ended early (the desktop failed), or None.
    truncated_reason: str | None = None
    seed: int | None = None
    #: The desktop has been brought up at least once.
    started: bool = False
    #: ``step()`` is allowed: after a reset (or, in production, after the start).
    active: bool = False
    closed: bool = False
    #: Nothing has acted on the desktop since a reset left it (a reset may then skip the rebuild).
    pristine: bool = False
    #: The home directory as the last reset left it (names, sizes, times).
    pristine_home: frozenset[tuple[str, int, int]] = frozenset()
    last_used: float = field(default_factory=time.monotonic)
    #: When the agent first acted in this episode (boot-clock seconds, as /proc dates processes), or None: a
    #: command started since then is the agent's, and a checker waits for it (Environment.catch_up).
    agent_since: float | None = None
    #: The signal (DONE or FAIL) the agent's last OSWorld action was, or None: OSWorld's evaluator scores an
    #: infeasible task by it (hci_envs.tasks.osworld).
    signal: str | None = None

    def begin(self, seed: int | None, episode_id: str | None) -> None:
        self.id = episode_id or str(uuid.uuid4())
        self.step_count = 0
        self.done = False
        self.truncated_reason = None
        self.seed = seed
        self.last_used = time.monotonic()
        self.agent_since = None
        self.signal = None

    def touch(self, by_agent: bool = True) -> None:
        """Something acts on the desktop: it is no longer as the reset left it. ``by_agent``: the agent, not
        the control plane (a task's setup)."""
        self.pristine = False
        self.last_used = time.monotonic()
        if by_agent and self.agent_since is None:
            self.agent_since = time.clock_gettime(time.CLOCK_BOOTTIME)

    def truncate(self, reason: str) -> None:
        if self.truncated_reason is None:
            log.warning("episode %s truncated: %s", self.id, reason)
        self.truncated_reason = reason
        self.done = True

    def require_running(self) -> None:
        """The desktop is up and the episode has not been truncated (tools may run)."""
        if self.closed:
            raise EnvironmentStateError("the environment is closed")
        if not self.started:
            raise NotResetError("the environment has not been reset yet; call reset() first")
        if self.truncated_reason is not None:
            raise DesktopDiedError(f"the episode was truncated ({self.truncated_reason}); call reset()")

    def require_steppable(self) -> None:
        """A step may run: reset was called and the episode is not over."""
        if self.closed:
            raise EnvironmentStateError("the environment is closed")
        if not self.active:
            raise NotResetError("step() before reset(): call reset() first")
        if self.truncated_reason is not None or self.done:
            raise EnvironmentStateError(
                f"the episode is over ({self.truncated_reason or 'done'}); call reset() to start a new one"
            )
