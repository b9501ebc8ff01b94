"""Whether the app that gets the keys has handled those typed so far: the questions of :mod:`.keys_ack` (a
_NET_WM_PING, or a synthetic Expose and a damage watch) sent and answered on the X event thread of
:class:`.events.DesktopEvents`, and waited on by the typing thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from Xlib import X, error as xerror
from Xlib.ext import damage

from .. import deadline
from ..errors import ActionTimeoutError
from . import keys_ack

#: How long a pause in typing waits for the app that gets the keys to show it has handled them (less when the
#: step's time limit is nearer). Generous: a stopped or busy app only makes typing wait; one that never
#: answers ends the action with a TIMEOUT error after it.
ACK_TIMEOUT = 10.0


@dataclass
class Acknowledgement:
    """The answer of :meth:`KeyAcks.app_acknowledged`; true when the app has handled every key sent so
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


class KeyAcks:
    """The questions to apps of one display, asked and answered in the event thread (the ``on_*`` methods)
    and waited on in :meth:`app_acknowledged`.

    ``call(fn, timeout)`` runs ``fn`` on the event thread and returns its result, ``post(fn)`` hands it ``fn``
    without waiting, and ``flushed(read)`` (on that thread) makes a round trip, handles every event the server
    sent before answering it and returns ``read()``.
    """

    def __init__(self, d: Any, *, has_damage: bool, call: Callable[..., Any], post: Callable[[Callable[[], Any]], None],
                 flushed: Callable[[Callable[[], int]], int]) -> None:
        self._d = d
        self._has_damage = has_damage
        self._call = call
        self._post = post
        self._flushed = flushed
        self._pings: dict[int, _Ack] = {}  # by token (an ack with several windows is here once per token)
        self._watches: dict[int, _Ack] = {}  # by damage object
        self._token = 0
        self._own_clients = {d.display.info.resource_id_base}

    def app_acknowledged(self, timeout: float = ACK_TIMEOUT, *, new_map: bool = False,
                         drawing: bool = True) -> Acknowledgement:
        """Whether the app that gets key events has handled every key the X server took so far: it is asked
        with a message sent after them, which it answers only once it has handled what came before (see
        :mod:`.keys_ack`). With ``new_map``, whether the app's other connections have read the keyboard map
        as it is now (true at once for an app with one connection). Without ``drawing``, an app that can be
        asked only with an Expose is not asked (false, "cannot be asked"): the repaint that answers it is a
        change on the screen, which a caller that then looks at the screen's changes would count. Waits up to
        ``timeout`` seconds, less when the step's time limit is nearer; true at once when no app gets the
        keys."""
        left = deadline.remaining()
        limit = timeout if left is None else min(timeout, left)
        start = time.monotonic()
        if limit <= 0:
            return Acknowledgement(False, "none", 0.0, "the step's time limit was reached")
        try:
            ack = self._call(lambda: self._ask(new_map, drawing), min(limit, 5.0))
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

    # -- in the event thread -------------------------------------------------------------------------------
    def _ask(self, new_map: bool, drawing: bool = True) -> keys_ack.Reader | _Ack:
        """Find who gets the keys and send it the question; a Reader when nobody needs asking or nobody can
        be."""
        try:
            find = keys_ack.find_map_readers if new_map else keys_ack.find_reader
            reader = find(self._d, self._own_clients)
        except xerror.XError as exc:  # a window went away meanwhile
            return keys_ack.Reader("unknown", why=f"its windows changed while being looked at ({exc})")
        if reader.how == "expose" and not (self._has_damage and drawing):
            why = "the display has no DAMAGE extension" if drawing else "only an Expose would ask it, and it draws"
            return keys_ack.Reader("unknown", reader.windows, reader.client, why, reader.name)
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
        # Errors (the window went away, taking the damage object along) are only logged: see on_error.
        for token in ack.tokens:
            self._pings.pop(token, None)
        if self._watches.pop(ack.damage, None) is not None:
            self._d.damage_destroy(ack.damage)
        asked = {w for a in self._acks() for w in a.reader.windows}
        for wid in set(ack.reader.windows) - asked:
            self._d.create_resource_object("window", wid).change_attributes(event_mask=0)
        self._d.flush()

    def _acks(self) -> list[_Ack]:
        return list({id(a): a for a in (*self._pings.values(), *self._watches.values())}.values())

    def on_damage(self, event: Any) -> None:
        """Damage to a window asked about with an Expose (any damage object but the screen's)."""
        ack = self._watches.get(event.damage)
        if ack is not None and ack.armed and keys_ack.touches_box(event.area, ack.reader.box):
            ack.done.set()  # the app repainted what we exposed: it has handled everything before

    def on_window_gone(self, event: Any) -> None:
        for ack in self._acks():
            # no answer can come: say so now (GDK's leader window, pinged unmapped, is never unmapped)
            if event.window.id in ack.reader.windows and event.type == X.DestroyNotify \
                    or event.window.id == ack.reader.window and ack.reader.how == "expose":
                ack.failed = f"its window {event.window.id:#x} went away"
                ack.done.set()

    def on_client_message(self, event: Any) -> None:
        for token, ack in list(self._pings.items()):
            if keys_ack.is_pong(self._d, event, token, ack.tokens.get(token, 0)):
                del self._pings[token]
                ack.tokens.pop(token)
                if not ack.tokens:
                    ack.done.set()

    def on_error(self, error: Any) -> None:
        """An X error of the connection: a question to an app whose window is gone fails at once rather than
        waiting for an answer that cannot come."""
        gone = getattr(error, "resource_id", None)
        for ack in self._acks():
            if gone == ack.damage or gone in ack.reader.windows:
                ack.failed = f"its window {gone:#x} went away"
                ack.done.set()

    def stopped(self, reason: str) -> None:
        """The thread has ended: every question in flight fails with ``reason``."""
        for ack in self._acks():
            ack.failed = reason
            ack.done.set()
