"""One thread per desktop that listens to the X server: screen damage (to know when the screen has settled),
selection traffic (to own and read the clipboard), and the answers of apps asked whether they have handled
the keys typed so far (see :mod:`.keys_ack`).

All X requests on this connection are made from the thread itself; other threads hand it work through a
queue, so python-xlib never sees two threads on one connection.
"""

from __future__ import annotations

import logging
import os
import queue
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from Xlib import X, Xatom, display as xdisplay, error as xerror
from Xlib.ext import damage
from Xlib.protocol import event as xevent, request

from .. import deadline
from ..errors import ActionTimeoutError, DesktopDiedError
from . import keys_ack

log = logging.getLogger(__name__)

#: The screen's background: what keeps changing on a screen that nobody touches (a spinner, an animation, a
#: video) must not keep it from settling. A change is background when it falls only in cells of a grid of
#: BACKGROUND_CELL pixels that changed BACKGROUND_REPEATS times in the last BACKGROUND_WINDOW seconds (a
#: page that paints in stages changes a cell fewer times). A caret that blinks or a clock that ticks need no
#: such rule: they are still for longer than the quiet period between changes.
BACKGROUND_WINDOW = 1.5
BACKGROUND_REPEATS = 4
BACKGROUND_CELL = 64

#: How long a pause in typing waits for the app that gets the keys to show it has handled them (less when the
#: step's time limit is nearer). Generous: a stopped or busy app only makes typing wait; one that never
#: answers ends the action with a TIMEOUT error after it.
ACK_TIMEOUT = 10.0

#: Largest property chunk we write at once (the core protocol caps requests at 256 KiB).
_CHUNK = 128 * 1024
_TEXT_TARGETS = ("UTF8_STRING", "text/plain;charset=utf-8", "STRING", "TEXT", "text/plain")


@dataclass
class _Request:
    fn: Callable[[], Any]
    done: threading.Event
    result: Any = None
    error: BaseException | None = None


@dataclass
class Acknowledgement:
    """The answer of :meth:`DesktopEvents.app_acknowledged`; true when the app has handled every key sent so
    far (or nobody gets the keys). ``how`` is how it was asked (ping, expose, none, unknown) and ``why``
    says why it is false."""

    ok: bool
    how: str
    waited: float = 0.0
    why: str = ""

    def __bool__(self) -> bool:
        return self.ok


class _Ack:
    """One question to an app in flight: its ping tokens (each window pinged, by token) or damage watch, and
    whether it has answered."""

    def __init__(self, reader: keys_ack.Reader) -> None:
        self.reader = reader
        self.done = threading.Event()
        self.created = time.monotonic()
        self.failed = ""
        self.tokens: dict[int, int] = {}
        self.damage = 0
        self.armed = False


class _PendingRead:
    """A clipboard read in flight: ConvertSelection sent, waiting for SelectionNotify (and INCR chunks)."""

    def __init__(self, prop: int) -> None:
        self.prop = prop
        self.done = threading.Event()
        self.data = bytearray()
        self.incr = False
        self.failed = False


class DesktopEvents:
    """Damage tracking and the clipboard of one display."""

    def __init__(self, display_name: str) -> None:
        try:
            self._d = xdisplay.Display(display_name)
        except Exception as exc:
            raise DesktopDiedError(f"cannot connect to display {display_name}: {exc}") from exc
        self._name = display_name
        self._root = self._d.screen().root
        self._window = self._root.create_window(
            -10, -10, 1, 1, 0, X.CopyFromParent, X.InputOutput, X.CopyFromParent,
            event_mask=X.PropertyChangeMask,
            override_redirect=True,
        )
        self._atoms: dict[str, int] = {}
        self._clipboard_text: str | None = None
        self._owned: set[int] = set()
        self._read: _PendingRead | None = None
        self._requests_served = 0
        self._served = threading.Condition()
        self._last_damage = time.monotonic()
        #: When the screen last changed at all (damage with an area), and outside its background.
        self._last_drawn = self._last_change = self._last_damage
        #: When each cell of the background grid changed lately (its last BACKGROUND_REPEATS changes).
        self._cell_changes: dict[tuple[int, int], deque[float]] = {}
        self._damage_count = 0
        self._damage_cond = threading.Condition()
        self._queue: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        self._alive = True
        self._dead_reason: str | None = None
        self._maps = 0
        self._pings: dict[int, _Ack] = {}  # by token (an ack with several windows is here once per token)
        self._watches: dict[int, _Ack] = {}  # by damage object
        self._token = 0
        self._own_clients = {self._d.display.info.resource_id_base}
        self._d.set_error_handler(self._on_error)
        # SubstructureNotify also brings the answers to our pings, which apps send to the root window.
        self._root.change_attributes(event_mask=X.SubstructureNotifyMask)
        self._has_damage = bool(self._d.query_extension("DAMAGE"))
        if self._has_damage:
            self._d.damage_query_version()
            # BoundingBox, not NonEmpty: Xvfb reports NonEmpty damage as the whole screen, and the settle
            # logic needs where the screen changed.
            self._damage = self._root.damage_create(damage.DamageReportBoundingBox)
        self._d.sync()
        self._thread = threading.Thread(target=self._run, name=f"x-events{display_name}", daemon=True)
        self._thread.start()

    # -- thread --------------------------------------------------------------------------------------------
    def _atom(self, name: str) -> int:
        atom = self._atoms.get(name)
        if atom is None:
            atom = self._atoms[name] = self._d.intern_atom(name)
        return atom

    def _run(self) -> None:
        try:
            while self._alive:
                readable, _, _ = select.select([self._d.fileno(), self._wake_r], [], [], 1.0)
                if self._wake_r in readable:
                    os.read(self._wake_r, 4096)
                while True:
                    try:
                        request = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    try:
                        request.result = request.fn()
                    except BaseException as exc:  # handed back to the caller
                        request.error = exc
                    request.done.set()
                while self._d.pending_events():
                    self._handle(self._d.next_event())
        except Exception as exc:
            if self._alive:
                self._dead_reason = f"X connection to {self._name} lost: {exc}"
                log.info("%s", self._dead_reason)
        finally:
            self._alive = False
            with self._damage_cond:
                self._damage_cond.notify_all()
            while True:  # fail whatever still waits on us
                try:
                    request = self._queue.get_nowait()
                except queue.Empty:
                    break
                request.error = DesktopDiedError(self._dead_reason or "display closed")
                request.done.set()
            if self._read is not None:
                self._read.failed = True
                self._read.done.set()
            for ack in self._acks():
                ack.failed = self._dead_reason or "the display closed"
                ack.done.set()

    def _call(self, fn: Callable[[], Any], timeout: float = 5.0) -> Any:
        if not self._alive:
            raise DesktopDiedError(self._dead_reason or f"display {self._name} is closed")
        request = _Request(fn, threading.Event())
        self._queue.put(request)
        os.write(self._wake_w, b"x")
        if not request.done.wait(timeout):
            raise ActionTimeoutError(f"the X event thread of {self._name} did not answer within {timeout}s")
        if request.error is not None:
            raise request.error
        return request.result

    def _post(self, fn: Callable[[], Any]) -> None:
        """Hand the thread work without waiting for it."""
        if self._alive:
            self._queue.put(_Request(fn, threading.Event()))
            os.write(self._wake_w, b"x")

    def _on_error(self, error: Any, request: Any) -> None:
        """X errors of this connection (in the thread): a window gone under a clipboard transfer or a question
        to an app. The question then fails at once rather than waiting for an answer that cannot come."""
        log.debug("X error on the events connection: %s", error)
        gone = getattr(error, "resource_id", None)
        for ack in self._acks():
            if gone == ack.damage or gone in ack.reader.windows:
                ack.failed = f"its window {gone:#x} went away"
                ack.done.set()

    def _acks(self) -> list[_Ack]:
        return list({id(a): a for a in (*self._pings.values(), *self._watches.values())}.values())

    def _handle(self, event: Any) -> None:
        if self._has_damage and event.type == self._d.extension_event.DamageNotify and event.damage != self._damage:
            ack = self._watches.get(event.damage)
            if ack is not None and ack.armed and keys_ack.touches_box(event.area, ack.reader.box):
                ack.done.set()  # the app repainted what we exposed: it has handled everything before
        elif self._has_damage and event.type == self._d.extension_event.DamageNotify:
            self._d.damage_subtract(self._damage)
            now = time.monotonic()
            area = event.area
            rect = (area.x, area.y, area.width, area.height)
            background = self._is_background(now, rect)
            with self._damage_cond:
                self._last_damage = now
                if rect[2] > 0 and rect[3] > 0:
                    self._last_drawn = now
                if not background:
                    self._last_change = now
                self._damage_count += 1
                self._damage_cond.notify_all()
        elif event.type == X.MapNotify:
            # top-levels only (a window asked about in app_acknowledged reports its own maps too)
            if not event.override and event.event.id == self._root.id:
                with self._damage_cond:
                    self._maps += 1
                    self._damage_cond.notify_all()
        elif event.type in (X.DestroyNotify, X.UnmapNotify):
            for ack in self._acks():
                # no answer can come: say so now (GDK's leader window, pinged unmapped, is never unmapped)
                if event.window.id in ack.reader.windows and event.type == X.DestroyNotify \
                        or event.window.id == ack.reader.window and ack.reader.how == "expose":
                    ack.failed = f"its window {event.window.id:#x} went away"
                    ack.done.set()
        elif event.type == X.ClientMessage:
            for token, ack in list(self._pings.items()):
                if keys_ack.is_pong(self._d, event, token, ack.tokens.get(token, 0)):
                    del self._pings[token]
                    ack.tokens.pop(token)
                    if not ack.tokens:
                        ack.done.set()
        elif event.type == X.SelectionRequest:
            self._serve(event)
        elif event.type == X.SelectionClear:
            self._owned.discard(event.atom)
        elif event.type == X.SelectionNotify:
            self._on_selection_notify(event)
        elif event.type == X.PropertyNotify:
            self._on_property(event)

    # -- windows ---------------------------------------------------------------------------------------
    def map_count(self) -> int:
        """How many top-level windows (not menus or tooltips) have been mapped so far, exact up to now."""

        return int(self._call(lambda: self._flushed(lambda: self._maps)))

    def wait_for_map(self, count: int, timeout: float) -> bool:
        """Block until more than ``count`` top-level windows have been mapped, or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._damage_cond:
            while self._maps <= count:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._alive:
                    return False
                self._damage_cond.wait(remaining)
            return True

    def wait_for_damage(self, count: int | None, timeout: float) -> bool:
        """Block until the screen has changed more than ``count`` times (a :meth:`damage_generation`), or
        ``timeout`` seconds. Without the DAMAGE extension it just waits."""
        deadline = time.monotonic() + timeout
        with self._damage_cond:
            while count is None or self._damage_count <= count:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._alive:
                    return False
                self._damage_cond.wait(remaining)
            return True

    # -- settling --------------------------------------------------------------------------------------
    @property
    def has_damage(self) -> bool:
        return self._has_damage

    @property
    def damage_count(self) -> int:
        """How many times the screen has changed, as far as this connection has read (it may lag the X server;
        :meth:`damage_generation` is exact)."""
        return self._damage_count

    def damage_generation(self) -> int | None:
        """How many times the screen has changed so far, exact up to this call: a round trip makes the X
        server flush every damage event that precedes it. None without the DAMAGE extension."""
        if not self._has_damage:
            return None

        return int(self._call(lambda: self._flushed(lambda: self._damage_count)))

    def _flushed(self, read: Callable[[], int]) -> int:
        """In the thread: a round trip, then handle every event the server sent before answering it."""
        self._d.sync()
        while self._d.pending_events():
            self._handle(self._d.next_event())
        return read()

    def _is_background(self, now: float, rect: tuple[int, int, int, int]) -> bool:
        """Whether damage to ``rect`` at ``now`` is background (see BACKGROUND_WINDOW). In the event thread."""
        x, y, w, h = rect
        if w <= 0 or h <= 0:  # an empty box: the damage was subtracted meanwhile
            return True
        since = now - BACKGROUND_WINDOW
        busy = True
        for cx in range(x // BACKGROUND_CELL, (x + w - 1) // BACKGROUND_CELL + 1):
            for cy in range(y // BACKGROUND_CELL, (y + h - 1) // BACKGROUND_CELL + 1):
                times = self._cell_changes.setdefault((cx, cy), deque(maxlen=BACKGROUND_REPEATS))
                busy = busy and len(times) == BACKGROUND_REPEATS and times[0] >= since
                times.append(now)
        return busy

    def wait_settled(self, quiet: float = 0.05, timeout: float = 2.0, *, since: float | None = None,
                     effect: float = 0.0) -> bool:
        """Block until the screen has not changed for ``quiet`` seconds (counting from now), or ``timeout``.

        Changes to the screen's background (parts that keep changing: a spinner, an animation; see
        BACKGROUND_WINDOW) do not count, so a screen that never stops moving still settles. With ``since``
        (a time.monotonic() taken before an action) and ``effect`` > 0, it first waits up to ``effect``
        seconds for the screen to change after ``since`` (the action's effect: an animation's next frame
        counts, since an app draws it after handling the input), so that an app that has not drawn yet is
        not taken for a settled screen; an action without a visible effect costs ``effect`` seconds. Returns True if it settled. Without the
        DAMAGE extension it just waits ``quiet``.
        """
        start = time.monotonic()
        deadline = start + timeout
        if not self._has_damage:
            time.sleep(quiet)
            return True
        if since is not None and effect > 0:
            self._call(lambda: self._flushed(lambda: 0))  # count every change the X server made until now
            effect_deadline = min(deadline, max(start, since) + effect)
            with self._damage_cond:
                while self._last_drawn <= since and self._alive:
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
                if now >= deadline or not self._alive:
                    return False
                self._damage_cond.wait(min(deadline, quiet_since + quiet) - now)

    def seconds_since_damage(self) -> float:
        return time.monotonic() - self._last_damage

    # -- has the app handled the keys? -----------------------------------------------------------------
    def app_acknowledged(self, timeout: float = ACK_TIMEOUT, *, new_map: bool = False) -> Acknowledgement:
        """Whether the app that gets key events has handled every key the X server took so far: it is asked
        with a message sent after them, which it answers only once it has handled what came before (see
        :mod:`.keys_ack`). With ``new_map``, whether the app's other connections have read the keyboard map
        as it is now (true at once for an app with one connection). Waits up to ``timeout`` seconds, less
        when the step's time limit is nearer; true at once when no app gets the keys."""
        left = deadline.remaining()
        limit = timeout if left is None else min(timeout, left)
        start = time.monotonic()
        if limit <= 0:
            return Acknowledgement(False, "none", 0.0, "the step's time limit was reached")
        try:
            ack = self._call(lambda: self._ask(new_map), min(limit, 5.0))
        except ActionTimeoutError:
            return Acknowledgement(False, "none", time.monotonic() - start, "the X event thread was too busy to ask")
        if isinstance(ack, keys_ack.Reader):
            return Acknowledgement(ack.how == "none", ack.how, time.monotonic() - start,
                            "" if ack.how == "none" else f"{ack.describe()} cannot be asked: {ack.why}")
        try:
            answered = ack.done.wait(max(0.0, start + limit - time.monotonic()))
        finally:
            self._post(lambda: self._forget(ack))
        waited = time.monotonic() - start
        if answered and not ack.failed:
            return Acknowledgement(True, ack.reader.how, waited)
        asked = "_NET_WM_PING" if ack.reader.how == "ping" else "a synthetic Expose"
        why = ack.failed or (f"no answer to {asked} within {waited:.1f}s"
                             + (" (the step's time limit)" if limit < timeout else ""))
        return Acknowledgement(False, ack.reader.how, waited, f"the app of {ack.reader.describe()}: {why}")

    def _ask(self, new_map: bool) -> keys_ack.Reader | _Ack:
        """In the thread: find who gets the keys and send it the question; a Reader when nobody needs asking
        or nobody can be."""
        try:
            find = keys_ack.find_map_readers if new_map else keys_ack.find_reader
            reader = find(self._d, self._own_clients)
        except xerror.XError as exc:  # a window went away meanwhile
            return keys_ack.Reader("unknown", why=f"its windows changed while being looked at ({exc})")
        if reader.how == "expose" and not self._has_damage:
            return keys_ack.Reader("unknown", reader.windows, reader.client, "the display has no DAMAGE extension",
                                  reader.name)
        if reader.how not in ("ping", "expose"):
            return reader
        stale = time.monotonic() - 2 * ACK_TIMEOUT  # questions whose asker gave up before they were sent
        for old in [a for a in self._acks() if a.created < stale]:
            self._forget(old)
        ack = _Ack(reader)
        for wid in reader.windows:  # to learn at once if one goes away
            self._d.create_resource_object("window", wid).change_attributes(event_mask=X.StructureNotifyMask)
        window = self._d.create_resource_object("window", reader.window)
        if reader.how == "ping":
            for wid in reader.windows:
                # a token no earlier question used: only the answer to this one counts
                self._token = max(self._token + 1, int(time.monotonic() * 1000) & 0x7FFFFFFF)
                ack.tokens[self._token] = wid
                self._pings[self._token] = ack
                message = keys_ack.ping_message(self._d, wid, self._token)
                self._d.send_event(self._d.create_resource_object("window", wid), message,
                                   event_mask=0)  # to the window's own client
            self._d.flush()
            return ack
        # A new damage object first reports its whole window: drain that before the Expose goes out, so that
        # only drawing after it can answer.
        ack.damage = window.damage_create(damage.DamageReportRawRectangles)
        self._watches[ack.damage] = ack
        self._flushed(lambda: 0)
        ack.armed = True
        self._d.send_event(window, keys_ack.expose_event(self._d, reader.window, reader.box),
                           event_mask=X.ExposureMask)
        self._d.flush()
        return ack

    def _forget(self, ack: _Ack) -> None:
        # Errors (the window went away, taking the damage object along) are only logged: see _on_error.
        for token in ack.tokens:
            self._pings.pop(token, None)
        if self._watches.pop(ack.damage, None) is not None:
            self._d.damage_destroy(ack.damage)
        asked = {w for a in self._acks() for w in a.reader.windows}
        for wid in set(ack.reader.windows) - asked:
            self._d.create_resource_object("window", wid).change_attributes(event_mask=0)
        self._d.flush()

    # -- clipboard -------------------------------------------------------------------------------------
    def _timestamp(self) -> int:
        return X.CurrentTime

    def set_clipboard(self, text: str, selections: tuple[str, ...] = ("CLIPBOARD",)) -> None:
        def own() -> None:
            self._clipboard_text = text
            for name in selections:
                atom = self._atom(name)
                self._window.set_selection_owner(atom, self._timestamp())
                self._owned.add(atom)
            self._d.sync()
            for name in selections:
                if self._d.get_selection_owner(self._atom(name)) != self._window:
                    raise DesktopDiedError(f"could not take ownership of the {name} selection")

        self._call(own)

    def clear_clipboard(self, selections: tuple[str, ...] = ("CLIPBOARD", "PRIMARY"), *,
                        only_ours: bool = False) -> None:
        """Leave the selections without an owner (the clipboard is empty); with ``only_ours``, only those this
        connection still owns (another client's selection stays)."""

        def disown() -> None:
            for name in selections:
                atom = self._atom(name)
                if only_ours and atom not in self._owned:
                    continue
                request.SetSelectionOwner(
                    display=self._d.display, window=X.NONE, selection=atom, time=X.CurrentTime
                )
                self._owned.discard(atom)
            if not self._owned:
                self._clipboard_text = None
            self._d.sync()

        self._call(disown)

    @property
    def requests_served(self) -> int:
        return self._requests_served

    def wait_served(self, after: int, timeout: float) -> bool:
        """Wait until a client has fetched our clipboard more than ``after`` times in total."""
        deadline = time.monotonic() + timeout
        with self._served:
            while self._requests_served <= after:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._alive:
                    return False
                self._served.wait(remaining)
            return True

    def _serve(self, ev: Any) -> None:
        prop = ev.property or ev.target
        ok = False
        target_name = ""
        text = self._clipboard_text
        if text is not None and ev.selection in self._owned:
            target_name = self._d.get_atom_name(ev.target)
            requestor = self._d.create_resource_object("window", ev.requestor)
            if target_name == "TARGETS":
                targets = [self._atom(n) for n in ("TARGETS", *_TEXT_TARGETS)]
                requestor.change_property(prop, Xatom.ATOM, 32, targets)
                ok = True
            elif target_name in _TEXT_TARGETS:
                encoding = "latin-1" if target_name == "STRING" else "utf-8"
                data = text.encode(encoding, errors="replace")
                kind = Xatom.STRING if target_name == "STRING" else self._atom("UTF8_STRING")
                if target_name.startswith("text/plain"):
                    kind = ev.target
                requestor.change_property(prop, kind, 8, data[:_CHUNK])
                for i in range(_CHUNK, len(data), _CHUNK):
                    requestor.change_property(prop, kind, 8, data[i:i + _CHUNK], X.PropModeAppend)
                ok = True
        notify = xevent.SelectionNotify(
            time=ev.time, requestor=ev.requestor, selection=ev.selection, target=ev.target,
            property=prop if ok else X.NONE,
        )
        self._d.send_event(ev.requestor, notify)
        self._d.flush()
        if ok and target_name != "TARGETS":
            with self._served:
                self._requests_served += 1
                self._served.notify_all()

    def get_clipboard(self, selection: str = "CLIPBOARD", timeout: float = 2.0) -> str | None:
        """The text on the selection, or None if nobody owns it or the owner offers no text."""

        def start() -> _PendingRead | str | None:
            atom = self._atom(selection)
            owner = self._d.get_selection_owner(atom)
            if owner == X.NONE:
                return None
            if owner == self._window.id or getattr(owner, "id", None) == self._window.id:
                return self._clipboard_text
            pending = _PendingRead(self._atom("HCI_ENVS_CLIP"))
            self._read = pending
            self._window.convert_selection(atom, self._atom("UTF8_STRING"), pending.prop, self._timestamp())
            self._d.flush()
            return pending

        first = self._call(start)
        if not isinstance(first, _PendingRead):
            return first
        if not first.done.wait(timeout):
            self._read = None
            raise ActionTimeoutError(f"the clipboard owner did not answer within {timeout}s")
        self._read = None
        if first.failed:
            return None
        return bytes(first.data).decode("utf-8", errors="replace")

    def _on_selection_notify(self, ev: Any) -> None:
        pending = self._read
        if pending is None:
            return
        if ev.property == X.NONE:
            pending.failed = True
            pending.done.set()
            return
        reply = self._window.get_full_property(pending.prop, X.AnyPropertyType)
        if reply is None:
            pending.failed = True
            pending.done.set()
            return
        if reply.property_type == self._atom("INCR"):
            pending.incr = True
            self._window.delete_property(pending.prop)  # tells the owner to send the first chunk
            self._d.flush()
            return
        pending.data.extend(_as_bytes(reply.value))
        self._window.delete_property(pending.prop)
        pending.done.set()

    def _on_property(self, ev: Any) -> None:
        pending = self._read
        if pending is None or not pending.incr or ev.atom != pending.prop or ev.state != X.PropertyNewValue:
            return
        reply = self._window.get_full_property(pending.prop, X.AnyPropertyType)
        self._window.delete_property(pending.prop)
        self._d.flush()
        chunk = _as_bytes(reply.value) if reply is not None else b""
        if not chunk:
            pending.done.set()
        else:
            pending.data.extend(chunk)

    # -- lifecycle -------------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._alive

    def ping(self, timeout: float = 2.0) -> bool:
        """A round trip to the X server through the event thread."""
        try:
            self._call(self._d.sync, timeout)
            return True
        except Exception:
            return False

    def close(self) -> None:
        if self._alive:
            self._alive = False
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass
            self._thread.join(timeout=2.0)
        try:
            self._d.close()
        except Exception:
            pass
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("latin-1", errors="replace")
    try:
        return bytes(value)
    except Exception:
        return b""
