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
def deadline(seconds: float | None) -> Iterator[None]:
    previous = getattr(_local, "at", None)
    if seconds is not None:
        at = time.monotonic() + seconds
        _local.at = at if previous is None else min(previous, at)
    try:
        yield
    finally:
        _local.at = previous


def remaining() -> float | None:
    """Seconds left before this thread's deadline, or None without one."""
    at = getattr(_local, "at", None)
    return None if at is None else at - time.monotonic()


def check(what: str) -> None:
    """Raise ActionTimeoutError if the deadline has passed, before ``what`` starts."""
    left = remaining()
    if left is not None and left <= 0:
        raise ActionTimeoutError(f"{what}: the step's time limit was reached before it started")


def sleep(seconds: float, what: str, interrupt: threading.Event | None = None,
          until: Callable[[], bool] | None = None) -> bool:
    """Sleep, but not past the deadline (then raise ActionTimeoutError), and not past ``interrupt`` being set
    (a reset of the episode: then raise ActionError). With ``until``, return early (True) once it answers True,
    looked at every UNTIL_LOOK seconds: an agent's wait during a hand-over ends when the desktop is its again."""
    left = remaining()
    cut = left is not None and left < seconds
    duration = max(0.0, left) if cut and left is not None else seconds
    if until is not None:
        end = time.monotonic() + duration
        while not until():
            step = min(end - time.monotonic(), UNTIL_LOOK)
            if step <= 0:
                break
            if interrupt is not None and interrupt.wait(step):
                raise ActionError(f"{what}: interrupted, the episode was reset")
            if interrupt is None:
                time.sleep(step)
        else:
            return True
    elif interrupt is not None:
        if interrupt.wait(duration):
            raise ActionError(f"{what}: interrupted, the episode was reset")
    else:
        time.sleep(duration)
    if cut:
        raise ActionTimeoutError(f"{what}: cut short by the step's time limit")
    return False
