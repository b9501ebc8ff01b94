"""A spare desktop: the next episode's desktop, prepared in the background, so that a reset only swaps it in.

A warm reset ends the agent's processes, restores the home, relaunches the apps and waits for them to draw:
fast for xterm, seconds for chromium or LibreOffice. With a spare, all of that happens while the current
episode runs. The spare is a whole second set of parts: a desktop (display, window manager, apps), a home and
an agent account of its own (the account is what a reset kills by: the spare's apps must not be the current
episode's). A reset swaps the two; the retired set is cleaned and prepared again as the next spare, reusing
its display when it can, so a session alternates between two desktops and two accounts.

The spare costs one desktop's memory. It is prepared only for the declared start state: a reset to a
snapshot or to another start state (a task's) rebuilds in place, and the spare is then prepared again for
whatever is declared. When there is no second account or little memory, there is no spare and resets are
the warm kind; :meth:`SpareDesktop.status` says why.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..sandbox.homes import HomeStore
from ..protocol import StartState

log = logging.getLogger(__name__)

#: Below this much available memory no spare is prepared (it would cost a second desktop).
MIN_AVAILABLE_BYTES = 1 << 30


@dataclass
class DesktopParts:
    """What one episode runs on: a desktop, the home its apps see, and the agent account they run as."""

    desktop: Any
    homes: HomeStore
    lease: Any  # hci_envs.sandbox.accounts.Lease, or None without isolation
    #: The home's fingerprint when the parts reached the start state (taken by whoever prepared them: walking
    #: a browser profile's files costs tens of milliseconds, which a swap should not spend).
    home_fingerprint: frozenset[tuple[str, int, int]] | None = None

    @classmethod
    def new(cls, isolation: Any, max_snapshot_bytes: int, disk: int | None = None) -> DesktopParts:
        """Parts without a desktop yet: an agent account leased from ``isolation`` (None without isolation)
        and an empty home of its own."""
        lease = isolation.lease()
        try:
            homes = HomeStore(lease.account if lease is not None else None, max_snapshot_bytes=max_snapshot_bytes,
                              disk=disk)
        except BaseException:
            if lease is not None:
                lease.release()
            raise
        return cls(None, homes, lease)

    @property
    def account(self) -> Any:
        return self.lease.account if self.lease is not None else None

    def close(self) -> None:
        # each part goes even when the one before failed: a home left behind outlives its account's lease
        try:
            if self.desktop is not None:
                desktop, self.desktop = self.desktop, None
                desktop.close()
        finally:
            try:
                self.homes.close()
            finally:
                if self.lease is not None:
                    lease, self.lease = self.lease, None
                    lease.release()


def state_key(state: StartState) -> str:
    return state.model_dump_json()


def available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class SpareDesktop:
    """Keeps one spare :class:`DesktopParts` ready for a start state, prepared by a background thread.

    ``prepare(parts, state)`` (given by the environment) makes a ready set for ``state`` from ``parts``, or
    from nothing when ``parts`` is None; it runs only in this class's thread, never under the environment's
    lock."""

    def __init__(self, prepare: Callable[[DesktopParts | None, StartState], DesktopParts]) -> None:
        self._prepare = prepare
        self._cond = threading.Condition()
        self._wanted: StartState | None = None
        self._ready: DesktopParts | None = None
        self._ready_key: str | None = None
        self._recycled: list[DesktopParts] = []
        self._busy = False
        self._closed = False
        self._reason: str | None = None
        self._thread: threading.Thread | None = None

    # -- what the environment calls --------------------------------------------------------------------
    def want(self, state: StartState, recycled: DesktopParts | None = None) -> None:
        """Have a spare ready for ``state``; ``recycled`` (parts an episode is done with) is reused for it."""
        with self._cond:
            if self._closed:
                if recycled is not None:
                    threading.Thread(target=recycled.close, daemon=True).start()
                return
            self._wanted = state
            self._reason = None  # each reset tries again (an account may have been freed, memory too)
            if recycled is not None:
                self._recycled.append(recycled)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hci-envs-spare", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def take(self, state: StartState) -> DesktopParts | None:
        """The spare, if it is ready for ``state`` and healthy; never waits."""
        with self._cond:
            parts = self._ready
            if parts is None or self._ready_key != state_key(state):
                return None
            if parts.desktop is None or parts.desktop.quick_failure() is not None:
                return None  # the thread prepares it again at the next want()
            self._ready, self._ready_key = None, None
            return parts

    def status(self) -> dict[str, Any]:
        with self._cond:
            if self._ready is not None:
                state = "ready"
            elif self._busy or self._recycled:
                state = "preparing"
            else:
                state = "off" if self._reason else "idle"
            return {"state": state, "reason": self._reason}

    def close(self, timeout: float = 60.0) -> None:
        """Stop preparing and close every part held (waits for a preparation under way to finish)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._cond:
            leftovers = [p for p in (self._ready, *self._recycled) if p is not None]
            self._ready, self._recycled = None, []
        for parts in leftovers:
            _close_quietly(parts)

    # -- the thread ------------------------------------------------------------------------------------
    def _next_job(self) -> tuple[DesktopParts | None, StartState] | None:
        """Under the lock: the parts to prepare and for which state, or None to wait."""
        wanted = self._wanted
        if wanted is None:
            return None
        key = state_key(wanted)
        if self._ready is not None and self._ready_key == key and self._ready.desktop is not None \
                and self._ready.desktop.quick_failure() is None:
            # ready already: what was handed back is surplus (one spare per session)
            surplus, self._recycled = self._recycled, []
            for parts in surplus:
                threading.Thread(target=_close_quietly, args=(parts,), daemon=True).start()
            return None
        if self._ready is not None:  # ready for another state, or broken: prepare it again
            parts, self._ready, self._ready_key = self._ready, None, None
            return parts, wanted
        if self._recycled:
            return self._recycled.pop(0), wanted
        memory = available_memory()
        if memory is not None and memory < MIN_AVAILABLE_BYTES:
            self._reason = f"low memory ({memory >> 20} MiB available)"
            return None
        return None if self._reason else (None, wanted)

    def _run(self) -> None:
        while True:
            with self._cond:
                job = None
                while not self._closed and (job := self._next_job()) is None:
                    self._cond.wait(1.0)
                if self._closed:
                    return
                self._busy = True
            parts, state = job
            try:
                ready = self._prepare(parts, state)
            except Exception as exc:  # noqa: BLE001 - a spare is an optimisation: say why, reset the warm way
                log.warning("no spare desktop: %s", exc)
                if parts is not None:
                    _close_quietly(parts)
                with self._cond:
                    self._busy = False
                    self._reason = str(exc)
                continue
            with self._cond:
                self._busy = False
                if self._closed:
                    leftover = ready
                else:
                    leftover = None
                    self._ready, self._ready_key = ready, state_key(state)
                    self._reason = None
            if leftover is not None:
                _close_quietly(leftover)
                return


def _close_quietly(parts: DesktopParts) -> None:
    try:
        parts.close()
    except Exception:  # noqa: BLE001 - closing what nobody uses any more must not take the caller down
        log.warning("closing a spare desktop failed", exc_info=True)
