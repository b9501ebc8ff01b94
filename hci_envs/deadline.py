"""A deadline for everything one call does on this thread: a step's ``timeout_s``.

    with deadline(2.5):
        env.step(...)            # waits are cut short, commands get at most the time that is left

Long actions consult it: ``wait`` and ``hold_key`` stop at the deadline and raise
:class:`~hci_envs.errors.ActionTimeoutError`; tools with a ``timeout`` parameter (bash, python, CodeAct) get
at most the time left; nothing new starts once it has passed. Deadlines nest (the earlier one wins).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from .errors import ActionError, ActionTimeoutError

_local = threading.local()
#: Seconds between two looks at a sleep's ``until`` (a hand-over's end, or its deadline, which is found only when
#: someone asks).
UNTIL_LOOK = 0.05


@contextlib.contextmanager
def deadline(seconds: float | None, clock: Callable[[], float] | None = None) -> Iterator[None]:
    """``seconds`` on ``clock`` (the monotonic clock by default; an environment's agent clock stands still while
    the agent waits for a person, if it was made to: :meth:`~hci_envs.env.handover.Handover.agent_clock`)."""
    previous = getattr(_local, "at", None), getattr(_local, "clock", None)
    if seconds is not None:
        clock = clock or time.monotonic
        at = clock() + seconds
        if previous[0] is not None:  # the earlier one wins, measured on this deadline's clock
            at = min(at, clock() + (previous[0] - previous[1]()))
        _local.at, _local.clock = at, clock
    try:
        yield
    finally:
        _local.at, _local.clock = previous


def remaining() -> float | None:
    """Seconds left before this thread's deadline, or None without one."""
    at = getattr(_local, "at", None)
    return None if at is None else at - _local.clock()


def check(what: str) -> None:
    """Raise ActionTimeoutError if the deadline has passed, before ``what`` starts."""
    left = remaining()
    if left is not None and left <= 0:
        raise ActionTimeoutError(f"{what}: the step's time limit was reached before it started")


def sleep(seconds: float, what: str, interrupt: threading.Event | None = None,
          until: Callable[[], bool] | None = None) -> bool:
    """Sleep, but not past the deadline (then raise ActionTimeoutError), and not past ``interrupt`` being set
    (a reset of the episode: then raise ActionError). With ``until``, return early (True) once it answers True,
    looked at every UNTIL_LOOK seconds: an agent's wait during a hand-over ends when the desktop is its again.
    The deadline is looked at again whenever the time it had left is up (its clock may have stood still)."""
    end = time.monotonic() + seconds
    while True:
        if until is not None and until():
            return True
        now, left = time.monotonic(), remaining()
        if now >= end:
            return False
        if left is not None and left <= 0:
            raise ActionTimeoutError(f"{what}: cut short by the step's time limit")
        step = end - now if left is None else min(end - now, left)
        if until is not None:
            step = min(step, UNTIL_LOOK)
        if interrupt is not None:
            if interrupt.wait(step):
                raise ActionError(f"{what}: interrupted, the episode was reset")
        else:
            time.sleep(step)
