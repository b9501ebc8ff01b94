"""One thread per desktop that listens to the X server, and hands each event to the job that owns it: screen
damage, to know when the screen has settled (:mod:`.damage`); selection traffic, to own and read the
clipboard (:mod:`.clipboard`); and the answers of apps asked whether they have handled the keys typed so far
(:mod:`.acks`).

All X requests on this connection are made from the thread itself; other threads hand it work through a
queue, so python-xlib never sees two threads on one connection.
"""

from __future__ import annotations

import logging
import os
import queue
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from Xlib import X, display as xdisplay

from ..errors import ActionTimeoutError, DesktopDiedError
from .acks import ACK_TIMEOUT, Acknowledgement, KeyAcks
from .clipboard import Clipboard
from .damage import DamageWatch

log = logging.getLogger(__name__)


@dataclass
class _Request:
    fn: Callable[[], Any]
    done: threading.Event
    result: Any = None
    error: BaseException | None = None


class DesktopEvents:
    """The X event thread of one display, with its jobs: damage and settling (:class:`.damage.DamageWatch`),
    the clipboard (:class:`.clipboard.Clipboard`) and whether apps have handled the keys
    (:class:`.acks.KeyAcks`). Their methods for other threads are this class's."""

    def __init__(self, display_name: str) -> None:
        try:
            self._d = xdisplay.Display(display_name)
        except Exception as exc:
            raise DesktopDiedError(f"cannot connect to display {display_name}: {exc}") from exc
        self._name = display_name
        root = self._d.screen().root
        self._queue: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._wake_r, self._wake_w = os.pipe()
        self._alive = True
        self._dead_reason: str | None = None
        self._clipboard = Clipboard(self._d, root, call=self._call, alive=lambda: self._alive)
        self._d.set_error_handler(self._on_error)
        # SubstructureNotify brings the maps of top-level windows, and the answers to our pings, which apps
        # send to the root window.
        root.change_attributes(event_mask=X.SubstructureNotifyMask)
        self._damage = DamageWatch(self._d, root, call=self._call, flushed=self._flushed, alive=lambda: self._alive)
        self._acks = KeyAcks(self._d, has_damage=self._damage.has_damage, call=self._call, post=self._post,
                             flushed=self._flushed)
        #: The job that owns each kind of event (DamageNotify: see _on_damage).
        self._handlers: dict[int, Callable[[Any], None]] = {
            X.MapNotify: self._damage.on_map,
            X.DestroyNotify: self._acks.on_window_gone,
            X.UnmapNotify: self._acks.on_window_gone,
            X.ClientMessage: self._acks.on_client_message,
            X.SelectionRequest: self._clipboard.on_selection_request,
            X.SelectionClear: self._clipboard.on_selection_clear,
            X.SelectionNotify: self._clipboard.on_selection_notify,
            X.PropertyNotify: self._clipboard.on_property,
        }
        if self._damage.has_damage:
            self._handlers[self._d.extension_event.DamageNotify] = self._on_damage
        self._d.sync()
        self._thread = threading.Thread(target=self._run, name=f"x-events{display_name}", daemon=True)
        self._thread.start()

    # -- thread --------------------------------------------------------------------------------------------
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
            self._damage.stopped()
            while True:  # fail whatever still waits on us
                try:
                    request = self._queue.get_nowait()
                except queue.Empty:
                    break
                request.error = DesktopDiedError(self._dead_reason or "display closed")
                request.done.set()
            self._clipboard.stopped()
            self._acks.stopped(self._dead_reason or "the display closed")

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

    def _flushed(self, read: Callable[[], int]) -> int:
        """In the thread: a round trip, then handle every event the server sent before answering it."""
        self._d.sync()
        while self._d.pending_events():
            self._handle(self._d.next_event())
        return read()

    def _on_error(self, error: Any, request: Any) -> None:
        """X errors of this connection (in the thread): a window gone under a clipboard transfer or a question
        to an app. The question then fails at once rather than waiting for an answer that cannot come."""
        log.debug("X error on the events connection: %s", error)
        self._acks.on_error(error)

    def _handle(self, event: Any) -> None:
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(event)

    def _on_damage(self, event: Any) -> None:
        # The screen's own damage object, or one watching a window asked about with an Expose.
        if event.damage == self._damage.screen_damage:
            self._damage.on_damage(event)
        else:
            self._acks.on_damage(event)

    # -- windows and settling (DamageWatch) --------------------------------------------------------------
    def map_count(self) -> int:
        """How many top-level windows have been mapped so far: :meth:`.damage.DamageWatch.map_count`."""
        return self._damage.map_count()

    def override_map_count(self) -> int:
        return self._damage.override_map_count()

    def wait_for_map(self, count: int, timeout: float) -> bool:
        return self._damage.wait_for_map(count, timeout)

    def wait_for_damage(self, count: int | None, timeout: float) -> bool:
        return self._damage.wait_for_damage(count, timeout)

    def changes_since(self, since: float, until: float | None = None) -> list[tuple[int, int, int, int]]:
        """Where the screen changed between two moments: :meth:`.damage.DamageWatch.changes_since`."""
        return self._damage.changes_since(since, until)

    @property
    def has_damage(self) -> bool:
        return self._damage.has_damage

    @property
    def damage_count(self) -> int:
        return self._damage.damage_count

    def damage_generation(self) -> int | None:
        return self._damage.damage_generation()

    def wait_settled(self, quiet: float = 0.05, timeout: float = 2.0, *, since: float | None = None,
                     effect: float = 0.0) -> bool:
        """Block until the screen has settled: :meth:`.damage.DamageWatch.wait_settled`."""
        return self._damage.wait_settled(quiet, timeout, since=since, effect=effect)

    def seconds_since_damage(self) -> float:
        return self._damage.seconds_since_damage()

    # -- has the app handled the keys? (KeyAcks) ---------------------------------------------------------
    def app_acknowledged(self, timeout: float = ACK_TIMEOUT, *, new_map: bool = False,
                         drawing: bool = True) -> Acknowledgement:
        """Whether the app that gets the keys has handled them: :meth:`.acks.KeyAcks.app_acknowledged`."""
        return self._acks.app_acknowledged(timeout, new_map=new_map, drawing=drawing)

    # -- clipboard (Clipboard) ---------------------------------------------------------------------------
    def set_clipboard(self, text: str, selections: tuple[str, ...] = ("CLIPBOARD",)) -> None:
        self._clipboard.set_text(text, selections)

    def clipboard_held(self) -> tuple[str | None, tuple[str, ...]]:
        """The text this connection serves as the clipboard, and the selections it owns."""
        return self._clipboard.held()

    def clear_clipboard(self, selections: tuple[str, ...] = ("CLIPBOARD", "PRIMARY"), *,
                        only_ours: bool = False) -> None:
        """Leave the selections without an owner: :meth:`.clipboard.Clipboard.clear`."""
        self._clipboard.clear(selections, only_ours=only_ours)

    @property
    def requests_served(self) -> int:
        return self._clipboard.requests_served

    def wait_served(self, after: int, timeout: float) -> bool:
        """Wait until our clipboard has been fetched: :meth:`.clipboard.Clipboard.wait_served`."""
        return self._clipboard.wait_served(after, timeout)

    def get_clipboard(self, selection: str = "CLIPBOARD", timeout: float = 2.0) -> str | None:
        """The text on the selection: :meth:`.clipboard.Clipboard.get_text`."""
        return self._clipboard.get_text(selection, timeout)

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
