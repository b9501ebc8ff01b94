"""The clipboard of one display, on the X event thread of :class:`.events.DesktopEvents`: owning the selections
and serving their text to the apps that ask, and reading the text of a selection another client owns
(INCR transfers included).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from Xlib import X, Xatom
from Xlib.protocol import event as xevent, request

from ..errors import ActionTimeoutError, DesktopDiedError

#: Largest property chunk we write at once (the core protocol caps requests at 256 KiB).
_CHUNK = 128 * 1024
_TEXT_TARGETS = ("UTF8_STRING", "text/plain;charset=utf-8", "STRING", "TEXT", "text/plain")


class _PendingRead:
    """A clipboard read in flight: ConvertSelection sent, waiting for SelectionNotify (and INCR chunks)."""

    def __init__(self, prop: int) -> None:
        self.prop = prop
        self.done = threading.Event()
        self.data = bytearray()
        self.incr = False
        self.failed = False


class Clipboard:
    """The selections of one display, owned, served and read in the event thread (the ``on_*`` methods) on
    behalf of any other.

    ``call(fn)`` runs ``fn`` on the event thread and returns its result, and ``alive()`` says whether the
    thread still runs.
    """

    def __init__(self, d: Any, root: Any, *, call: Callable[..., Any], alive: Callable[[], bool]) -> None:
        self._d = d
        self._call = call
        self._alive = alive
        # The window that owns our selections and receives the ones we read.
        self._window = root.create_window(
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

    def _atom(self, name: str) -> int:
        atom = self._atoms.get(name)
        if atom is None:
            atom = self._atoms[name] = self._d.intern_atom(name)
        return atom

    def _timestamp(self) -> int:
        return X.CurrentTime

    # -- owning and serving --------------------------------------------------------------------------------
    def set_text(self, text: str, selections: tuple[str, ...] = ("CLIPBOARD",)) -> None:
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

    def held(self) -> tuple[str | None, tuple[str, ...]]:
        """The text this connection serves and the selections it owns (what a new connection must own again
        for the clipboard to stay as it is)."""
        def read() -> tuple[str | None, tuple[str, ...]]:
            names = tuple(name for name in ("CLIPBOARD", "PRIMARY") if self._atom(name) in self._owned)
            return (self._clipboard_text if names else None), names

        return self._call(read)

    def clear(self, selections: tuple[str, ...] = ("CLIPBOARD", "PRIMARY"), *, only_ours: bool = False) -> None:
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
        with self._served:
            self._served.wait_for(lambda: self._requests_served > after or not self._alive(), timeout)
            return self._requests_served > after

    def on_selection_request(self, ev: Any) -> None:
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

    def on_selection_clear(self, ev: Any) -> None:
        self._owned.discard(ev.atom)

    # -- reading -------------------------------------------------------------------------------------------
    def get_text(self, selection: str = "CLIPBOARD", timeout: float = 2.0) -> str | None:
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

    def on_selection_notify(self, ev: Any) -> None:
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

    def on_property(self, ev: Any) -> None:
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

    def stopped(self) -> None:
        """The thread has ended: a read in flight fails."""
        if self._read is not None:
            self._read.failed = True
            self._read.done.set()


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("latin-1", errors="replace")
    try:
        return bytes(value)
    except Exception:
        return b""
