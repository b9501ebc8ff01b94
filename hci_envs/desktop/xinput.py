"""Mouse and keyboard input through the XTEST extension on one persistent X connection.

Nothing here starts a subprocess or opens a connection per action; every call sends a few XTEST requests and
one round trip (``sync``) so that the X server has processed the input before the call returns.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from Xlib import X, XK, display as xdisplay, error as xerror
from Xlib.ext import xtest

from ..actions.keys import keysym_for_char, resolve_key
from ..errors import ActionTimeoutError, DesktopDiedError, InvalidActionError
from .keyboard import Keyboard

WHEEL_BUTTONS = {"up": 4, "down": 5, "left": 6, "right": 7}
#: Longest straight step of a drag; longer segments are split so that apps see intermediate motion.
DRAG_STEP_PX = 24
#: How long pointer input waits for the X server to deliver its release (see Input._delivered) at most.
DELIVERY_TIMEOUT = 1.0


def _mask(buttons: Iterable[int]) -> int:
    """The core protocol's state mask of ``buttons`` (it has bits for buttons 1 to 5 only)."""
    bits = 0
    for button in buttons:
        if 1 <= button <= 5:
            bits |= X.Button1Mask << (button - 1)
    return bits

_NEWLINES = {"\n": "Return", "\t": "Tab"}


def _text_keysyms(text: str) -> tuple[list[int], list[int]]:
    """The keysyms that type ``text`` (a line break, however written, is Return), and for each the offset in
    ``text`` just after it (where typing stopped if it stops after that key)."""
    keysyms: list[int] = []
    ends: list[int] = []
    i = 0
    while i < len(text):
        ch = text[i]
        i += 2 if text.startswith("\r\n", i) else 1
        name = _NEWLINES.get("\n" if ch == "\r" else ch)
        keysyms.append(resolve_key(name)[1] if name else keysym_for_char(ch))
        ends.append(i)
    return keysyms, ends


@dataclass
class Typed:
    """What :meth:`Input.type_keys` did: how many characters of the text it typed, how many times it paused
    for the app to catch up, and why it stopped short of the end (or "")."""

    chars: int
    pauses: int = 0
    stopped: str = ""


def _nobody_answers(timeout: float = 0.0, *, new_map: bool = False, drawing: bool = True) -> bool:
    return new_map  # nobody to ask: a busy key stays busy, and nobody else reads the map


class Input:
    """Injects pointer and keyboard events into one display. Thread-safe (one lock serialises actions).

    ``acknowledge`` answers (truthy or not) whether the app that gets the keys has handled every key sent so
    far, and with ``new_map=True`` whether it has read the keyboard map as it is now
    (:meth:`DesktopEvents.app_acknowledged`). Scratch keys still in use are remapped only after a true answer,
    and typed on only after a true answer about the new map. Without it busy keys are never remapped.
    """

    def __init__(self, display_name: str, acknowledge: Callable[..., object] | None = None) -> None:
        try:
            self._d = xdisplay.Display(display_name)
        except Exception as exc:
            raise DesktopDiedError(f"cannot connect to display {display_name}: {exc}") from exc
        if not self._d.query_extension("XTEST"):
            raise DesktopDiedError(f"display {display_name} has no XTEST extension")
        self._root = self._d.screen().root
        self.lock = threading.RLock()
        self.keyboard = Keyboard(self._d)
        self._acknowledge = acknowledge or _nobody_answers
        self._held_keys: dict[int, int] = {}  # keysym -> keycode
        self._held_buttons: set[int] = set()
        self._atoms: dict[str, int] = {}
        shift = self.keyboard.keycode_for(XK.XK_Shift_L)
        self._shift_keycode = shift[0] if shift else None

    # -- plumbing ----------------------------------------------------------------------------------------
    def _guard(self, fn: Callable[[], object]) -> object:
        try:
            return fn()
        except (xerror.ConnectionClosedError, BrokenPipeError, ConnectionResetError, OSError) as exc:
            raise DesktopDiedError(f"the X display went away: {exc}") from exc

    def sync(self) -> None:
        self._guard(self._d.sync)

    def delivered(self) -> None:
        """Return once the X server has handed every event sent so far to its clients: two round trips, the
        first answered once it has queued them as events, the second once those went out with a reply."""
        with self.lock:
            self.sync()
            self.sync()

    def handled(self, timeout: float = 2.0, *, drawing: bool = True) -> Any:
        """Whether the app that gets the keys has handled every key sent so far, waiting up to ``timeout``
        seconds: what it does about a key (a copy to the clipboard, a file saved) is done when it answers,
        not when the X server has delivered the key. Truthy at once when nobody gets the keys; falsy when the
        app cannot be asked or does not answer in time (the caller goes on with what it finds): the
        :class:`.acks.Acknowledgement`, whose ``how`` and ``why`` say which. Without ``drawing`` it asks no app
        in a way that changes the screen (see DesktopEvents.app_acknowledged)."""
        return self._acknowledge(timeout, drawing=drawing)

    def _fake(self, event_type: int, detail: int = 0, x: int = 0, y: int = 0) -> None:
        if event_type == X.MotionNotify:
            xtest.fake_input(self._d, X.MotionNotify, x=x, y=y, root=self._root)
        else:
            xtest.fake_input(self._d, event_type, detail)

    # -- window queries --------------------------------------------------------------------------------
    def _atom(self, name: str) -> int:
        atom = self._atoms.get(name)
        if atom is None:
            atom = self._atoms[name] = int(self._guard(lambda: self._d.intern_atom(name)))  # type: ignore[arg-type]
        return atom

    def root_property(self, name: str) -> list[int] | None:
        """A property of the root window as a list of integers (e.g. _NET_CLIENT_LIST), or None if unset."""
        with self.lock:
            atom = self._atom(name)
            prop = self._guard(lambda: self._root.get_full_property(atom, X.AnyPropertyType))
            return None if prop is None else [int(v) for v in prop.value]  # type: ignore[attr-defined]

    def mapped_children(self) -> list[int]:
        with self.lock:
            tree = self._guard(self._root.query_tree)
            shown = []
            for child in tree.children:  # type: ignore[attr-defined]
                try:
                    if child.get_attributes().map_state == X.IsViewable:
                        shown.append(child.id)
                except (xerror.BadWindow, xerror.BadDrawable):  # gone since the tree was read
                    continue
            return shown

    def activate(self, window: int) -> None:
        """Ask the window manager to focus and raise ``window`` (EWMH _NET_ACTIVE_WINDOW, from a pager)."""
        from Xlib.protocol import event as xevent

        with self.lock:
            message = xevent.ClientMessage(
                window=self._d.create_resource_object("window", window),
                client_type=self._atom("_NET_ACTIVE_WINDOW"),
                data=(32, [2, X.CurrentTime, 0, 0, 0]),
            )
            mask = X.SubstructureRedirectMask | X.SubstructureNotifyMask
            self._guard(lambda: self._root.send_event(message, event_mask=mask))
            self.sync()

    def close_window(self, window: int) -> None:
        """Ask the window manager to close ``window`` as its close button would (EWMH _NET_CLOSE_WINDOW, from
        a pager): the app is sent WM_DELETE_WINDOW and quits the way it does for a person."""
        from Xlib.protocol import event as xevent

        with self.lock:
            message = xevent.ClientMessage(
                window=self._d.create_resource_object("window", window),
                client_type=self._atom("_NET_CLOSE_WINDOW"),
                data=(32, [X.CurrentTime, 2, 0, 0, 0]),
            )
            mask = X.SubstructureRedirectMask | X.SubstructureNotifyMask
            self._guard(lambda: self._root.send_event(message, event_mask=mask))
            self.sync()

    def focused_window(self) -> int | None:
        """The app window that has the keyboard focus (the top-level that carries WM_CLASS), or None when no app
        window has it: no focus, the root, or a window manager's own window where it parks the focus."""
        with self.lock:
            try:
                focus = self._d.get_input_focus().focus
                if focus == X.PointerRoot:  # keys go to the top-level window under the pointer, if any
                    focus = self._root.query_pointer().child
                found = self._app_window(focus)
            except (xerror.BadWindow, xerror.BadDrawable, xerror.BadMatch):
                return None
            return found[0].id if found is not None else None

    def focused_class(self) -> str:
        """The WM_CLASS class of the top-level window that has the keyboard focus ("" if none says)."""
        with self.lock:
            try:
                found = self._app_window(self._d.get_input_focus().focus)
            except (xerror.BadWindow, xerror.BadDrawable, xerror.BadMatch):
                return ""
            return found[1] if found is not None else ""

    def _app_window(self, window: Any) -> tuple[Any, str] | None:
        """Up from ``window`` to the window that carries WM_CLASS, and its class; None if none does."""
        for _ in range(32):
            if not hasattr(window, "get_wm_class"):  # X.NONE, X.PointerRoot: plain numbers
                return None
            names = window.get_wm_class()
            if names:
                return window, str(names[-1])
            parent = window.query_tree().parent
            if parent is None or parent.id in (0, self._root.id):
                return None
            window = parent
        return None

    def window_pid(self, window: int) -> int | None:
        """The process a window says it belongs to (_NET_WM_PID), if it says."""
        with self.lock:
            win = self._d.create_resource_object("window", window)
            try:
                prop = win.get_full_property(self._atom("_NET_WM_PID"), X.AnyPropertyType)
            except (xerror.BadDrawable, xerror.BadWindow):
                return None
            return int(prop.value[0]) if prop is not None and len(prop.value) else None  # type: ignore[attr-defined]

    def window_box(self, window: int) -> tuple[int, int, int, int] | None:
        """A window's (x, y, width, height) on the screen, or None if it is gone."""
        with self.lock:
            win = self._d.create_resource_object("window", window)
            try:
                geometry = win.get_geometry()
                origin = win.translate_coords(self._root, 0, 0)
            except (xerror.BadDrawable, xerror.BadWindow):
                return None
            return -origin.x, -origin.y, geometry.width, geometry.height

    def window_class(self, window: int) -> tuple[str, ...]:
        """A window's WM_CLASS (instance, class), or () if it has none or is gone."""
        with self.lock:
            win = self._d.create_resource_object("window", window)
            try:
                names = self._guard(win.get_wm_class)
            except (xerror.BadWindow, xerror.BadDrawable):
                return ()
            return tuple(str(n) for n in names) if names else ()  # type: ignore[union-attr]

    def window_title(self, window: int) -> str:
        """A window's title, or "" if it has none or is gone (windows come and go while a list is walked)."""
        with self.lock:
            win = self._d.create_resource_object("window", window)
            for name in ("_NET_WM_NAME", "WM_NAME"):
                try:
                    prop = self._guard(lambda n=name: win.get_full_property(self._atom(n), X.AnyPropertyType))
                except (xerror.BadWindow, xerror.BadDrawable):
                    return ""
                if prop is not None and prop.value:  # type: ignore[attr-defined]
                    value = prop.value  # type: ignore[attr-defined]
                    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            return ""

    # -- pointer -----------------------------------------------------------------------------------------
    def pointer(self) -> tuple[int, int]:
        with self.lock:
            reply = self._guard(self._root.query_pointer)
            return int(reply.root_x), int(reply.root_y)  # type: ignore[attr-defined]

    def _buttons_down(self) -> int:
        """The X server's button mask (Button1Mask .. Button5Mask): what it has delivered, not what is queued."""
        return int(self._guard(self._root.query_pointer).mask)  # type: ignore[attr-defined]

    def _delivered(self, buttons: Iterable[int], before: int) -> None:
        """Return once the X server has delivered the release of ``buttons``.

        A window manager that focuses windows on a click (openbox) takes the press with a synchronous grab:
        the pointer is frozen, and the release queued, until it lets the press through to the app. The
        keyboard is not frozen, so a key sent meanwhile reaches the app first, and text typed right after a
        click into another field lands in the field that had the focus. The button mask shows the release
        only once it is delivered. Buttons down in ``before`` (someone else holds them) are not waited for.
        """
        self._wait_buttons(_mask(buttons) & ~before, 0, DELIVERY_TIMEOUT)

    def _wait_buttons(self, bits: int, shown: int, timeout: float) -> bool:
        """Wait until the X server's buttons ``bits`` are ``shown`` (a mask): whether they came to be. The lock
        (reentrant) is taken for each look: a caller that does not hold it lets others in between."""
        deadline = time.monotonic() + timeout
        while bits:
            with self.lock:
                down = self._buttons_down()
            if down & bits == shown:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def buttons_delivered(self, down: Iterable[int], changed: Iterable[int],
                          timeout: float = DELIVERY_TIMEOUT) -> bool:
        """Wait until X shows the buttons ``changed`` (of 1 to 5) as ``down`` has them: a VNC viewer's press or
        release, which x11vnc injects on its own schedule and a window manager's click-to-focus grab holds (see
        :meth:`_delivered`), has reached the app once this returns True. Other buttons (held by someone else) do
        not matter. The lock is taken per look, not held."""
        return self._wait_buttons(_mask(changed), _mask(set(down) & set(changed)), timeout)

    def move(self, x: int, y: int) -> None:
        with self.lock:
            self._guard(lambda: self._fake(X.MotionNotify, x=x, y=y))
            self.sync()

    def button(self, button: int, press: bool) -> None:
        with self.lock:
            self._guard(lambda: self._fake(X.ButtonPress if press else X.ButtonRelease, button))
            (self._held_buttons.add if press else self._held_buttons.discard)(button)
            self.sync()
            if not press:
                self._delivered([button], 0)

    def click(self, button: int, count: int = 1, at: tuple[int, int] | None = None,
              modifiers: Sequence[str] = ()) -> None:
        with self.lock, self.holding(modifiers):
            before = self._buttons_down()

            def send() -> None:
                if at is not None:
                    self._fake(X.MotionNotify, x=at[0], y=at[1])
                for _ in range(count):
                    self._fake(X.ButtonPress, button)
                    self._fake(X.ButtonRelease, button)
            self._guard(send)
            self.sync()
            self._delivered([button], before)  # before the modifiers go up, and before any key after it

    def drag(self, path: Sequence[tuple[int, int]], button: int, modifiers: Sequence[str] = ()) -> None:
        with self.lock, self.holding(modifiers):
            before = self._buttons_down()
            points = list(_interpolate(path, DRAG_STEP_PX))
            self._guard(lambda: self._fake(X.MotionNotify, x=points[0][0], y=points[0][1]))
            self.sync()
            self._guard(lambda: self._fake(X.ButtonPress, button))
            self._held_buttons.add(button)
            try:
                for x, y in points[1:]:
                    self._guard(lambda x=x, y=y: self._fake(X.MotionNotify, x=x, y=y))
                    self.sync()  # let apps see each motion before the next (some ignore coalesced moves)
            finally:
                self._guard(lambda: self._fake(X.ButtonRelease, button))
                self._held_buttons.discard(button)
                self.sync()
                self._delivered([button], before)

    def scroll(self, dx: int, dy: int, at: tuple[int, int] | None = None, modifiers: Sequence[str] = ()) -> None:
        with self.lock, self.holding(modifiers):
            before = self._buttons_down()
            wheels = [WHEEL_BUTTONS[pos if amount > 0 else neg]
                      for amount, neg, pos in ((dy, "up", "down"), (dx, "left", "right")) if amount]

            def send() -> None:
                if at is not None:
                    self._fake(X.MotionNotify, x=at[0], y=at[1])
                for amount, neg, pos in ((dy, "up", "down"), (dx, "left", "right")):
                    wheel = WHEEL_BUTTONS[pos if amount > 0 else neg]
                    for _ in range(abs(amount)):
                        self._fake(X.ButtonPress, wheel)
                        self._fake(X.ButtonRelease, wheel)
            self._guard(send)
            self.sync()
            self._delivered(wheels, before)  # ctrl+wheel: a window manager may hold wheel clicks too

    # -- keyboard ----------------------------------------------------------------------------------------
    def _keys(self, names: Sequence[str]) -> list[tuple[int, int]]:
        """The (keycode, level) of each key name, mapping scratch keys for keysyms the map lacks; when none is
        idle, once the app has caught up with the keys sent on them."""
        keysyms = [resolve_key(name)[1] for name in names]
        plan = self.keyboard.plan(keysyms)
        if plan.missing and self.keyboard.scratch_slots:
            answer = self._acknowledge()
            if not answer:
                raise ActionTimeoutError(
                    f"no spare key is free to press {names[keysyms.index(plan.missing[0])]!r}: they all carry "
                    f"keys the app has not shown it has handled ({getattr(answer, 'why', '')})")
            self.keyboard.acknowledged(plan.batch)
            plan = self.keyboard.plan(keysyms)
        if plan.missing:
            name = names[keysyms.index(plan.missing[0])]
            raise InvalidActionError(f"no key can produce {name!r} on this display", field="keys")
        if plan.remapped:
            answer = self._acknowledge(new_map=True)
            if not answer:
                raise ActionTimeoutError(f"the app did not show it had read the keyboard map with {names!r} on "
                                         f"spare keys ({getattr(answer, 'why', '')})")
        return [plan.keys[k] for k in keysyms]

    def _keycode(self, keysym: int, name: str) -> tuple[int, int]:
        found = self.keyboard.keycode_for(keysym)
        return found if found is not None else self._keys([name])[0]

    def key_down(self, name: str) -> None:
        with self.lock:
            _, keysym = resolve_key(name)
            keycode, _level = self._keycode(keysym, name)
            self._guard(lambda: self._fake(X.KeyPress, keycode))
            self._held_keys[keysym] = keycode
            self.sync()

    def key_up(self, name: str) -> None:
        with self.lock:
            _, keysym = resolve_key(name)
            keycode = self._held_keys.pop(keysym, None)
            if keycode is None:
                keycode = self._keycode(keysym, name)[0]
            self._guard(lambda: self._fake(X.KeyRelease, keycode))
            self.sync()

    def combo(self, names: Sequence[str], hold_seconds: float = 0.0) -> None:
        """Press ``names[:-1]`` as held keys, tap ``names[-1]`` (holding it ``hold_seconds``), release all."""
        with self.lock:
            codes = self._keys(names)
            *held, (last, level) = codes
            if level == 1 and self._shift_keycode is not None and len(codes) == 1:
                held = [(self._shift_keycode, 0)]  # "A" or "@" on its own means the shifted key

            def press() -> None:
                for keycode, _ in held:
                    self._fake(X.KeyPress, keycode)
                self._fake(X.KeyPress, last)

            def release() -> None:
                self._fake(X.KeyRelease, last)
                for keycode, _ in reversed(held):
                    self._fake(X.KeyRelease, keycode)

            self._guard(press)
            try:
                if hold_seconds:
                    self.sync()
                    time.sleep(hold_seconds)
            finally:
                self._guard(release)
                self.sync()

    @contextlib.contextmanager
    def holding(self, modifiers: Sequence[str]) -> Iterator[None]:
        """Hold modifier keys down for the duration of the block."""
        codes = [keycode for keycode, _ in self._keys(modifiers)] if modifiers else []

        def press() -> None:
            for keycode in codes:
                self._fake(X.KeyPress, keycode)

        def release() -> None:
            for keycode in reversed(codes):
                self._fake(X.KeyRelease, keycode)

        self._guard(press)
        try:
            yield
        finally:
            self._guard(release)
            if codes:
                self.sync()

    # -- text --------------------------------------------------------------------------------------------
    def keys_needed(self, text: str) -> int:
        """How many keysyms of ``text`` are on no key and would need a scratch slot."""
        return sum(1 for sym in set(_text_keysyms(text)[0]) if self.keyboard.keycode_for(sym) is None)

    def fits(self, text: str) -> bool:
        """Whether ``text`` can be typed as key strokes: it needs no more scratch keys than the keyboard has
        (those still in use are freed by one answer from the app)."""
        return self.keyboard.fits(set(_text_keysyms(text)[0]))

    def type_keys(self, text: str) -> Typed:
        """Type ``text`` as key strokes, as far as it can be typed exactly.

        When the scratch keys run out, it pauses until the app that gets the keys has handled all it was
        sent (``acknowledge``), then remaps them and goes on. If the app does not show that it has, typing
        stops there, since remapping would change what the keys already sent mean; the result says how far
        it got and why.
        """
        keysyms, ends = _text_keysyms(text)
        pauses = 0
        with self.lock:
            self.keyboard.refresh()
            start = 0
            while start < len(keysyms):
                plan = self.keyboard.plan(keysyms[start:])
                stop = len(keysyms)
                if plan.missing:
                    first_missing = set(plan.missing)
                    stop = next(i for i in range(start, len(keysyms)) if keysyms[i] in first_missing)
                    # nothing fits even with every slot idle (after a pause, or with none at all)
                    if stop == start and (pauses or not self.keyboard.scratch_slots):
                        raise InvalidActionError(
                            "this display has no spare keys to type the text with; use mode 'paste'",
                            field="text",
                        )
                if plan.remapped and stop > start:
                    # keys are typed on the new map only once every connection of the app has read it
                    answer = self._acknowledge(new_map=True)
                    if not answer:
                        return Typed(ends[start - 1] if start else 0, pauses, str(getattr(answer, "why", "")))
                if stop > start:
                    self._send_keysyms(keysyms[start:stop], plan.keys)
                if stop == len(keysyms):
                    break
                answer = self._acknowledge()
                pauses += 1
                if not answer:
                    return Typed(ends[stop - 1] if stop else 0, pauses, str(getattr(answer, "why", "")))
                self.keyboard.acknowledged(plan.batch)  # every slot is idle now: the app has handled all we sent
                start = stop
        return Typed(len(text), pauses)

    def _send_keysyms(self, keysyms: Iterable[int], keys: dict[int, tuple[int, int]]) -> None:
        shift = self._shift_keycode

        def send() -> None:
            for sym in keysyms:
                keycode, level = keys[sym]
                if level and shift is not None:
                    self._fake(X.KeyPress, shift)
                self._fake(X.KeyPress, keycode)
                self._fake(X.KeyRelease, keycode)
                if level and shift is not None:
                    self._fake(X.KeyRelease, shift)

        self._guard(send)
        self.sync()

    # -- lifecycle ---------------------------------------------------------------------------------------
    def restore_access_control(self) -> None:
        """Put the display's access control back to "cookie holders only": an agent holding the cookie can
        open its display to other local users (``xhost +``), which must not outlast the episode."""

        def restore() -> None:
            for host in self._d.list_hosts().hosts:
                self._d.change_hosts(X.HostDelete, host.family, host.name)
            self._d.set_access_control(X.EnableAccess)
            self._d.sync()

        self._guard(restore)

    def _down_in_x(self) -> tuple[set[int], set[int]]:
        """The keycodes and buttons (1-5) the X server says are down, whoever pressed them."""
        keymap: list[int] = self._guard(self._d.query_keymap)  # type: ignore[assignment]
        keys = {byte * 8 + bit for byte, bits in enumerate(keymap) for bit in range(8) if bits >> bit & 1}
        mask = int(self._guard(self._root.query_pointer).mask)  # type: ignore[attr-defined]
        buttons = {n for n in range(1, 6) if mask & (X.Button1Mask << (n - 1))}
        return keys, buttons

    def release_stray(self, *, expect_buttons: frozenset[int] = frozenset(), expect_keys: int = 0,
                      timeout: float = 1.0) -> None:
        """Release what X says is down and this connection did not press: a VNC viewer that left with Shift
        or a button held (x11vnc never releases them), another client's XTEST presses. The agent's own
        key_down/mouse_down stay held. Asked of X because nobody else knows the whole state.

        ``expect_buttons`` and ``expect_keys``: what a viewer that just left had down. x11vnc injects a
        client's input on its own schedule, even after it has closed the client's connection, so a press
        can reach X after the release meant for it; the release waits (at most ``timeout``) until X shows
        that much down."""
        deadline = time.monotonic() + timeout
        while expect_buttons or expect_keys:
            with self.lock:
                keys, buttons = self._down_in_x()
            if (expect_buttons <= buttons and len(keys - set(self._held_keys.values())) >= expect_keys) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        with self.lock:
            keys, buttons = self._down_in_x()
            keys -= set(self._held_keys.values())
            buttons -= self._held_buttons

            def send() -> None:
                for keycode in sorted(keys):
                    self._fake(X.KeyRelease, keycode)
                for button in sorted(buttons):
                    self._fake(X.ButtonRelease, button)

            if keys or buttons:
                self._guard(send)
                self.sync()

    def release_all(self) -> None:
        """Release every key and button still held: by key_down, mouse_down or an interrupted action, and
        whatever else X says is down (see :meth:`release_stray`)."""
        with self.lock:
            def send() -> None:
                for keycode in self._held_keys.values():
                    self._fake(X.KeyRelease, keycode)
                for button in self._held_buttons:
                    self._fake(X.ButtonRelease, button)
            self._guard(send)
            self._held_keys.clear()
            self._held_buttons.clear()
            self.release_stray()
            self.sync()

    def close(self) -> None:
        with self.lock:
            try:
                self.release_all()
                self.keyboard.restore()
            except Exception:
                pass
            try:
                self._d.close()
            except Exception:
                pass


def _interpolate(path: Sequence[tuple[int, int]], step: int) -> Iterable[tuple[int, int]]:
    yield path[0]
    for (x0, y0), (x1, y1) in zip(path, path[1:]):
        n = max(1, int(max(abs(x1 - x0), abs(y1 - y0)) // step))
        for i in range(1, n + 1):
            yield (x0 + (x1 - x0) * i // n, y0 + (y1 - y0) * i // n)
