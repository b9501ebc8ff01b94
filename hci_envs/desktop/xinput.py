"""Mouse and keyboard input through the XTEST extension on one persistent X connection.

Nothing here starts a subprocess or opens a connection per action; every call sends a few XTEST requests and
one round trip (``sync``) so that the X server has processed the input before the call returns.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from Xlib import X, XK, display as xdisplay, error as xerror
from Xlib.ext import xtest

from ..actions.keys import keysym_for_char, resolve_key
from ..errors import DesktopDiedError, InvalidActionError
from .keyboard import Keyboard

WHEEL_BUTTONS = {"up": 4, "down": 5, "left": 6, "right": 7}
#: Longest straight step of a drag; longer segments are split so that apps see intermediate motion.
DRAG_STEP_PX = 24

_NEWLINES = {"\n": "Return", "\t": "Tab"}


def _text_keysyms(text: str) -> list[int]:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    out = []
    for ch in text:
        name = _NEWLINES.get(ch)
        out.append(resolve_key(name)[1] if name else keysym_for_char(ch))
    return out


class Input:
    """Injects pointer and keyboard events into one display. Thread-safe (one lock serialises actions)."""

    def __init__(self, display_name: str) -> None:
        try:
            self._d = xdisplay.Display(display_name)
        except Exception as exc:
            raise DesktopDiedError(f"cannot connect to display {display_name}: {exc}") from exc
        if not self._d.query_extension("XTEST"):
            raise DesktopDiedError(f"display {display_name} has no XTEST extension")
        self._root = self._d.screen().root
        self.lock = threading.RLock()
        self.keyboard = Keyboard(self._d)
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
            return [w.id for w in tree.children  # type: ignore[attr-defined]
                    if w.get_attributes().map_state == X.IsViewable]

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

    def window_title(self, window: int) -> str:
        with self.lock:
            win = self._d.create_resource_object("window", window)
            for name in ("_NET_WM_NAME", "WM_NAME"):
                prop = self._guard(lambda n=name: win.get_full_property(self._atom(n), X.AnyPropertyType))
                if prop is not None and prop.value:  # type: ignore[attr-defined]
                    value = prop.value  # type: ignore[attr-defined]
                    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            return ""

    # -- pointer -----------------------------------------------------------------------------------------
    def pointer(self) -> tuple[int, int]:
        with self.lock:
            reply = self._guard(self._root.query_pointer)
            return int(reply.root_x), int(reply.root_y)  # type: ignore[attr-defined]

    def move(self, x: int, y: int) -> None:
        with self.lock:
            self._guard(lambda: self._fake(X.MotionNotify, x=x, y=y))
            self.sync()

    def button(self, button: int, press: bool) -> None:
        with self.lock:
            self._guard(lambda: self._fake(X.ButtonPress if press else X.ButtonRelease, button))
            (self._held_buttons.add if press else self._held_buttons.discard)(button)
            self.sync()

    def click(self, button: int, count: int = 1, at: tuple[int, int] | None = None,
              modifiers: Sequence[str] = ()) -> None:
        with self.lock, self.holding(modifiers):
            def send() -> None:
                if at is not None:
                    self._fake(X.MotionNotify, x=at[0], y=at[1])
                for _ in range(count):
                    self._fake(X.ButtonPress, button)
                    self._fake(X.ButtonRelease, button)
            self._guard(send)
            self.sync()

    def drag(self, path: Sequence[tuple[int, int]], button: int, modifiers: Sequence[str] = ()) -> None:
        with self.lock, self.holding(modifiers):
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

    def scroll(self, dx: int, dy: int, at: tuple[int, int] | None = None, modifiers: Sequence[str] = ()) -> None:
        with self.lock, self.holding(modifiers):
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

    # -- keyboard ----------------------------------------------------------------------------------------
    def _keycode(self, keysym: int, name: str) -> tuple[int, int]:
        found = self.keyboard.keycode_for(keysym)
        if found is None:
            plan = self.keyboard.plan([keysym], wait_ok=True)
            if keysym not in plan.keys:
                raise InvalidActionError(f"no key can produce {name!r} on this display", field="keys")
            found = plan.keys[keysym]
        return found

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
            codes = []
            for name in names:
                _, keysym = resolve_key(name)
                keycode, level = self._keycode(keysym, name)
                codes.append((keycode, level))
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
        codes = [self._keycode(resolve_key(name)[1], name)[0] for name in modifiers]

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
        return sum(1 for sym in set(_text_keysyms(text)) if self.keyboard.keycode_for(sym) is None)

    def fits(self, text: str) -> bool:
        """Whether ``text`` can be typed as key strokes without waiting for a busy scratch key."""
        return self.keyboard.fits(set(_text_keysyms(text)))

    def type_keys(self, text: str, wait_for_apps: Callable[[], None]) -> int:
        """Type ``text`` as key strokes. Returns how many times it paused to remap scratch keys.

        ``wait_for_apps`` blocks until the apps have processed the input sent so far; it is called before
        scratch keys still in use are remapped.
        """
        keysyms = _text_keysyms(text)
        pauses = 0
        with self.lock:
            self.keyboard.refresh()
            start = 0
            while start < len(keysyms):
                plan = self.keyboard.plan(keysyms[start:], wait_ok=pauses > 0)
                stop = len(keysyms)
                if plan.missing:
                    first_missing = set(plan.missing)
                    stop = next(i for i in range(start, len(keysyms)) if keysyms[i] in first_missing)
                    if stop == start and pauses:
                        raise InvalidActionError(
                            "this display has no spare keys to type the text with; use mode 'paste'",
                            field="text",
                        )
                self._send_keysyms(keysyms[start:stop], plan.keys)
                self.keyboard.touch(keysyms[start:stop])
                if stop < len(keysyms):
                    wait_for_apps()
                    pauses += 1
                    # every slot is now free to reuse: the apps have caught up with all we sent
                start = stop
        return pauses

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

    def release_stray(self) -> None:
        """Release what X says is down and this connection did not press: a VNC viewer that left with Shift
        or a button held (x11vnc never releases them), another client's XTEST presses. The agent's own
        key_down/mouse_down stay held. Asked of X because nobody else knows the whole state."""
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
