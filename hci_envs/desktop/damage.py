"""What the screen's damage says, counted on the X event thread of :class:`.events.DesktopEvents`: how often and
when the screen changed (apart from its background), whether it has settled, and how many top-level windows
have been mapped.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from Xlib.ext import damage

#: The screen's background: what keeps changing on a screen that nobody touches (a spinner, an animation, a
#: video) must not keep it from settling. A change is background when it falls only in cells of a grid of
#: BACKGROUND_CELL pixels that changed BACKGROUND_REPEATS times in the last BACKGROUND_WINDOW seconds (a
#: page that paints in stages changes a cell fewer times). A caret that blinks or a clock that ticks need no
#: such rule: they are still for longer than the quiet period between changes.
BACKGROUND_WINDOW = 1.5
BACKGROUND_REPEATS = 4
BACKGROUND_CELL = 64

#: How many recent changes are kept with their boxes, for saying where an action's effect showed
#: (:meth:`DamageWatch.changes_since`). A second of a busy screen is well within it.
RECENT_CHANGES = 512
#: What an action's effect is not: a change to a part of the screen that was animating when it came, that is,
#: whose cells had changed within ANIMATING_GAP seconds and over more than ANIMATING_SPAN seconds (an app's
#: first paint is a burst of changes in a few milliseconds; an animation keeps changing for seconds).
ANIMATING_GAP = 0.25
ANIMATING_SPAN = 0.25


class DamageWatch:
    """Damage to the screen and maps of top-level windows on one display: counted by the event thread
    (``on_damage``, ``on_map``), waited on from any other.

    ``call(fn)`` runs ``fn`` on the event thread and returns its result, ``flushed(read)`` (on that thread)
    makes a round trip, handles every event the server sent before answering it and returns ``read()``, and
    ``alive()`` says whether the thread still runs.
    """

    def __init__(self, d: Any, root: Any, *, call: Callable[..., Any],
                 flushed: Callable[[Callable[[], int]], int], alive: Callable[[], bool]) -> None:
        self._d = d
        self._root = root
        self._call = call
        self._flushed = flushed
        self._alive = alive
        self._last_damage = time.monotonic()
        #: When the screen last changed at all (damage with an area), and outside its background.
        self._last_drawn = self._last_change = self._last_damage
        #: When each cell of the background grid changed lately (its last BACKGROUND_REPEATS changes).
        self._cell_changes: dict[tuple[int, int], deque[float]] = {}
        self._damage_count = 0
        #: (when, box, animating) of the latest changes with an area.
        self._recent: deque[tuple[float, tuple[int, int, int, int], bool]] = deque(maxlen=RECENT_CHANGES)
        self._damage_cond = threading.Condition()
        self._maps = 0
        self._override_maps = 0  # menus, tooltips, splashes: and an app whose only window is one of them
        self.has_damage = bool(d.query_extension("DAMAGE"))
        #: The damage object on the whole screen (its DamageNotify events are ours; others are questions to
        #: apps, see :mod:`.acks`).
        self.screen_damage: int | None = None
        if self.has_damage:
            d.damage_query_version()
            # Delta rectangles: each event is a part of the screen that changed since the last subtract, as it
            # changed. Not NonEmpty (Xvfb reports it as the whole screen), nor a bounding box: an event read late,
            # on a loaded machine, would be the box around every change since the last subtract (a word at the
            # top and the status bar at the bottom make a box over the whole window), and say that places
            # changed that did not. Each is timed when it is read, not by the server's timestamp: a place
            # changed and not yet subtracted reports no further change, so a change read late may stand for
            # a later one there too (an action's own redraw of it), which it must not hide.
            self.screen_damage = root.damage_create(damage.DamageReportDeltaRectangles)

    # -- in the event thread -------------------------------------------------------------------------------
    def on_damage(self, event: Any) -> None:
        self._d.damage_subtract(self.screen_damage)
        now = time.monotonic()
        area = event.area
        rect = (area.x, area.y, area.width, area.height)
        background, animating = self._is_background(now, rect)
        with self._damage_cond:
            self._last_damage = now
            if rect[2] > 0 and rect[3] > 0:
                self._last_drawn = now
                self._recent.append((now, rect, animating))
            if not background:
                self._last_change = now
            self._damage_count += 1
            self._damage_cond.notify_all()

    def on_map(self, event: Any) -> None:
        # top-levels only (a window asked about in app_acknowledged reports its own maps too)
        if event.event.id != self._root.id:
            return
        with self._damage_cond:
            if event.override:
                self._override_maps += 1
                return
            self._maps += 1
            self._damage_cond.notify_all()

    def stopped(self) -> None:
        """The thread has ended: wake every waiter (they see ``alive()`` false)."""
        with self._damage_cond:
            self._damage_cond.notify_all()

    def _is_background(self, now: float, rect: tuple[int, int, int, int]) -> tuple[bool, bool]:
        """Whether damage to ``rect`` at ``now`` is background (see BACKGROUND_WINDOW), and whether its part of
        the screen was animating (see ANIMATING_GAP). In the event thread."""
        x, y, w, h = rect
        if w <= 0 or h <= 0:  # an empty box: the damage was subtracted meanwhile
            return True, True
        since = now - BACKGROUND_WINDOW
        busy = animating = True
        for cx in range(x // BACKGROUND_CELL, (x + w - 1) // BACKGROUND_CELL + 1):
            for cy in range(y // BACKGROUND_CELL, (y + h - 1) // BACKGROUND_CELL + 1):
                times = self._cell_changes.setdefault((cx, cy), deque(maxlen=BACKGROUND_REPEATS))
                busy = busy and len(times) == BACKGROUND_REPEATS and times[0] >= since
                animating = animating and len(times) >= 2 and times[-1] >= now - ANIMATING_GAP \
                    and times[-1] - times[0] >= ANIMATING_SPAN
                times.append(now)
        return busy, animating

    # -- windows ---------------------------------------------------------------------------------------
    def map_count(self) -> int:
        """How many top-level windows (not menus or tooltips) have been mapped so far, exact up to now."""

        return int(self._call(lambda: self._flushed(lambda: self._maps)))

    def override_map_count(self) -> int:
        """How many override-redirect windows (menus, tooltips, splashes: not managed) have been mapped so far."""
        return int(self._call(lambda: self._flushed(lambda: self._override_maps)))

    def wait_for_map(self, count: int, timeout: float) -> bool:
        """Block until more than ``count`` top-level windows have been mapped, or ``timeout`` seconds."""
        with self._damage_cond:
            self._damage_cond.wait_for(lambda: self._maps > count or not self._alive(), timeout)
            return self._maps > count

    def wait_for_damage(self, count: int | None, timeout: float) -> bool:
        """Block until the screen has changed more than ``count`` times (a :meth:`damage_generation`), or
        ``timeout`` seconds. Without the DAMAGE extension it just waits."""

        def changed() -> bool:
            return count is not None and self._damage_count > count

        with self._damage_cond:
            self._damage_cond.wait_for(lambda: changed() or not self._alive(), timeout)
            return changed()

    # -- settling --------------------------------------------------------------------------------------
    @property
    def damage_count(self) -> int:
        """How many times the screen has changed, as far as this connection has read (it may lag the X server;
        :meth:`damage_generation` is exact)."""
        return self._damage_count

    def damage_generation(self) -> int | None:
        """How many times the screen has changed so far, exact up to this call: a round trip makes the X
        server flush every damage event that precedes it. None without the DAMAGE extension."""
        if not self.has_damage:
            return None

        return int(self._call(lambda: self._flushed(lambda: self._damage_count)))

    def wait_settled(self, quiet: float = 0.05, timeout: float = 2.0, *, since: float | None = None,
                     effect: float = 0.0) -> bool:
        """Block until the screen has not changed for ``quiet`` seconds (counting from now), or ``timeout``.

        Changes to the screen's background (parts that keep changing: a spinner, an animation; see
        BACKGROUND_WINDOW) do not count, so a screen that never stops moving still settles. With ``since``
        (a time.monotonic() taken before an action) and ``effect`` > 0, it first waits up to ``effect``
        seconds for the screen to change after ``since`` (the action's effect: an animation's next frame
        counts, since an app draws it after handling the input), so that an app that has not drawn yet is
        not taken for a settled screen; an action without a visible effect costs ``effect`` seconds. Returns
        True if it settled. Without the DAMAGE extension it just waits ``quiet``.
        """
        start = time.monotonic()
        deadline = start + timeout
        if not self.has_damage:
            time.sleep(quiet)
            return True
        if since is not None and effect > 0:
            self._call(lambda: self._flushed(lambda: 0))  # count every change the X server made until now
            effect_deadline = min(deadline, max(start, since) + effect)
            with self._damage_cond:
                while self._last_drawn <= since and self._alive():
                    now = time.monotonic()
                    if now >= effect_deadline:
                        break
                    self._damage_cond.wait(effect_deadline - now)
        with self._damage_cond:
            while True:
                now = time.monotonic()
                quiet_since = max(self._last_change, start)
                if now - quiet_since >= quiet:
                    return True
                if now >= deadline or not self._alive():
                    return False
                self._damage_cond.wait(min(deadline, quiet_since + quiet) - now)

    def changes_since(self, since: float, until: float | None = None) -> list[tuple[int, int, int, int]]:
        """The boxes (x, y, width, height) where the screen changed between ``since`` and ``until``
        (time.monotonic(); until now without it), as far as this connection has read, leaving out changes to
        parts that were animating (ANIMATING_GAP): what an action there could have caused."""
        with self._damage_cond:
            return [rect for when, rect, animating in self._recent
                    if when > since and (until is None or when <= until) and not animating]

    def seconds_since_damage(self) -> float:
        return time.monotonic() - self._last_damage
