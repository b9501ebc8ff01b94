"""Raw human input (RFB PointerEvent, KeyEvent, ClientCutText) to canonical actions.

The rules (thresholds are parameters, with these defaults):
  * pointer moves never stand alone: they become the ``pre_move`` path of the next action;
  * a press and release that travel at most ``click_travel`` (6 px) are a click at the press point; more is a
    drag, whose path keeps at most ``drag_points`` (20) points;
  * a press held at least ``hold_ms`` (300 ms) without travelling is a hold: ``mouse_move`` to the press point,
    ``mouse_down``, ``wait`` for the held time, ``mouse_up`` (modifiers held are ``key_down``/``key_up``
    around it), so that a scrollbar arrow held for 0.8 s replays as 0.8 s, not as a click;
  * presses of the same button at most ``multi_click_ms`` (500 ms) and ``multi_click_px`` (4 px) after the
    previous press make it a double, then a triple click (no more); a press that would make it one but drags
    or is held is a drag or a hold of its own, after a click of the presses before it (a double click
    dragged to select by words replays as a click and a drag, which the app counts as a person's were);
  * wheel clicks on one axis, in one direction, at one place (within ``click_travel``), with the same
    modifiers, with gaps of at most ``scroll_gap_ms`` (400 ms) are one scroll, summed; a change of direction
    starts a new scroll (15 down then 1 up are dy 15 and dy -1), and so does a move to another place (the
    notches there scrolled whatever is there) or a modifier pressed or let go (ctrl+wheel zooms);
  * printable keys, with no modifier but Shift or AltGr, gather into one ``type_text`` until any other
    action; keys pressed while Ctrl, Alt or Super is held are a ``key`` chord ("ctrl+shift+t"); Enter, Tab,
    Escape, BackSpace, Delete, arrows, F-keys and the like are a ``key`` of their own; a Ctrl, Alt or Super
    pressed and released alone is a ``key`` too;
  * a viewer's clipboard (ClientCutText) is a ``clipboard_set``;
  * a keysym with a Unicode value types its character (``type_text``; ``key "U200B"`` for a character that
    does not print); a keysym without a key name (0x2713) cannot be an action.

Every action the reducer emits passes the canonical parser (with the screen, when given). Input that no
canonical action can represent is never an error: its raw span is listed in ``Reducer.unreduced`` (the
recorder reports it in meta.json) and its messages stay in raw/input.jsonl.

Feed events in arrival order with :meth:`Reducer.feed`; completed actions come out of ``feed`` and of
:meth:`Reducer.tick` (which ends actions whose waiting time is over) and :meth:`Reducer.flush` (all).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from hci_envs.actions import MAX_REPEAT, MAX_TEXT_CHARS, MAX_WAIT_MS, parse_action
from hci_envs.actions.keys import UNICODE_KEYSYM_BASE, canonical_key_name, resolve_key
from hci_envs.errors import HciEnvsError
from hci_envs.vnc.rfb import ClientMessage

log = logging.getLogger(__name__)

BUTTONS = {1: "left", 2: "middle", 4: "right"}
WHEEL = {8: ("dy", -1), 16: ("dy", 1), 32: ("dx", -1), 64: ("dx", 1)}
_MODIFIERS = {
    0xFFE1: "shift", 0xFFE2: "shift", 0xFFE3: "ctrl", 0xFFE4: "ctrl", 0xFFE9: "alt", 0xFFEA: "alt",
    0xFFE7: "alt", 0xFFE8: "alt", 0xFFEB: "super", 0xFFEC: "super", 0xFE03: "altgr", 0xFF7E: "altgr",
}
_CHORD_MODIFIERS = ("ctrl", "alt", "super")
_MODIFIER_ORDER = ("ctrl", "alt", "super", "shift")
_UNICODE_KEYSYMS = range(UNICODE_KEYSYM_BASE, UNICODE_KEYSYM_BASE + 0x110000)


@dataclass(frozen=True)
class Thresholds:
    click_travel: float = 6.0
    multi_click_ms: float = 500.0
    multi_click_px: float = 4.0
    scroll_gap_ms: float = 400.0
    drag_points: int = 20
    pre_move_points: int = 20
    hold_ms: float = 300.0  # Tk starts repeating a held scrollbar arrow after 300 ms, GTK a little later

    def to_dict(self) -> dict[str, float]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Thresholds:
        """Thresholds as meta.json records them; keys this version does not know are ignored."""
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass
class ReducedAction:
    """A canonical action (as a dict) with the span of raw input it came from."""

    action: dict[str, Any]
    t_start: float
    t_end: float
    raw: tuple[int, int]
    pre_move: list[list[int]] = field(default_factory=list)
    #: What the action answered, as its tool's text (agent actions only: people's input answers nothing).
    result: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "t_start": round(self.t_start, 6),
                               "t_end": round(self.t_end, 6), "raw": list(self.raw)}
        if self.pre_move:
            out["pre_move"] = self.pre_move
        if self.result is not None:
            out["result"] = self.result
        return out


@dataclass
class Unreduced:
    """Raw input no canonical action can represent: it stays in raw/input.jsonl and is reported, not dropped."""

    raw: tuple[int, int]
    t: float
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"raw": list(self.raw), "t": round(self.t, 6), "reason": self.reason}


def unicode_char(keysym: int) -> str | None:
    """The character of a Unicode keysym (0x01000000 + code point), if it is one."""
    return chr(keysym - UNICODE_KEYSYM_BASE) if keysym in _UNICODE_KEYSYMS else None


def printable(keysym: int) -> str | None:
    """The character a keysym types, if it is a printable one."""
    if 0x20 <= keysym <= 0x7E or 0xA0 <= keysym <= 0xFF:
        return chr(keysym)
    ch = unicode_char(keysym)
    return ch if ch is not None and ch.isprintable() else None


def key_name(keysym: int) -> str | None:
    """The name a ``key`` action gives a keysym, or None if it has none (0x2713 is no keysym of X's).

    A Unicode keysym that does not print is named by its code point (``U200B``), which ``key`` accepts and a
    JSON line can hold (a lone surrogate as a character cannot be written as UTF-8)."""
    ch = unicode_char(keysym)
    if ch is not None:
        return ch if ch.isprintable() else f"U{ord(ch):04X}"
    try:
        name = canonical_key_name(keysym)
        resolve_key(name)
    except (HciEnvsError, ValueError):  # ValueError: chr() of a keysym past the Unicode range
        return None
    return name


def _thin(points: list[list[int]], most: int) -> list[list[int]]:
    """Keep at most ``most`` points, evenly spread, always the first and the last."""
    if len(points) <= most:
        return points
    step = (len(points) - 1) / (most - 1)
    return [points[round(k * step)] for k in range(most)]


def _distance(a: tuple[int, int], b: tuple[int, int]) -> float:
    return ((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5


class Reducer:
    """``screen`` (width, height) checks emitted actions against the screen as ``load_episode`` will;
    ``unreduced`` is the list input that cannot be an action is reported into (default: a new one)."""

    def __init__(self, thresholds: Thresholds | None = None, *, screen: tuple[int, int] | None = None,
                 unreduced: list[Unreduced] | None = None) -> None:
        self.th = thresholds or Thresholds()
        self.screen = screen
        self.unreduced: list[Unreduced] = [] if unreduced is None else unreduced
        self._mask = 0
        self._pos = (0, 0)
        self._mods: dict[str, int] = {}  # modifier name -> keysym held
        self._moves: list[ClientMessage] = []  # motion not yet attached to an action
        self._pending: dict[str, Any] | None = None  # the action still open: click/type/scroll
        self._press: dict[str, Any] | None = None  # a button held down
        self._lone_modifier: tuple[int, ClientMessage] | None = None

    # -- output helpers ------------------------------------------------------------------------------
    def _modifiers(self, exclude_shift: bool = False) -> list[str]:
        names = [m for m in _MODIFIER_ORDER if m in self._mods and m != "altgr"]
        return [m for m in names if not (exclude_shift and m == "shift")]

    def _take_moves(self, until: float | None = None) -> tuple[list[list[int]], int | None, float | None]:
        moves = self._moves if until is None else [m for m in self._moves if m.t <= until]
        self._moves = [] if until is None else [m for m in self._moves if m.t > until]
        path = _thin([[m.x, m.y] for m in moves], self.th.pre_move_points)
        return path, (moves[0].i if moves else None), (moves[0].t if moves else None)

    def _finish(self, action: dict[str, Any], first: ClientMessage, last: ClientMessage,
                moves: tuple[list[list[int]], int | None, float | None]) -> ReducedAction:
        path, move_i, move_t = moves
        start_i = move_i if move_i is not None else first.i
        return ReducedAction(action, first.t, last.t, (start_i, last.i), path)

    def _close_pending(self) -> list[ReducedAction]:
        pending, self._pending = self._pending, None
        if pending is None:
            return []
        return [pending["build"](pending)]

    def _report(self, raw: tuple[int, int], t: float, reason: str) -> None:
        log.warning("raw input %s..%s cannot be a canonical action: %s", raw[0], raw[1], reason)
        self.unreduced.append(Unreduced(raw, t, reason))

    def _checked(self, actions: list[ReducedAction]) -> list[ReducedAction]:
        """Only actions the canonical parser accepts leave the reducer: a recorded episode must replay and
        export as a whole, so what cannot be an action is reported instead of written."""
        out = []
        for a in actions:
            try:
                parse_action(a.action, screen=self.screen)
            except HciEnvsError as exc:
                self._report(a.raw, a.t_start, f"{a.action.get('type')}: {exc.message}")
                continue
            out.append(a)
        return out

    # -- input ---------------------------------------------------------------------------------------
    def feed(self, ev: ClientMessage) -> list[ReducedAction]:
        out = self._tick(ev.t)
        try:
            if ev.msg == "PointerEvent":
                out += self._pointer(ev)
            elif ev.msg == "KeyEvent":
                out += self._key(ev)
            elif ev.msg == "ClientCutText":
                out += self._close_pending()
                out.append(self._finish({"type": "clipboard_set", "text": ev.text}, ev, ev, self._take_moves()))
        except Exception as exc:  # a bug here must cost one message, not the recording or the actions before it
            log.exception("reducing raw input %s", ev.i)
            self._report((ev.i, ev.i), ev.t, f"reducer error: {exc!r}")
        return self._checked(out)

    def tick(self, now: float) -> list[ReducedAction]:
        """End the open action if its waiting time is over (no double click, no further wheel click)."""
        return self._checked(self._tick(now))

    def _tick(self, now: float) -> list[ReducedAction]:
        p = self._pending
        if p is None:
            return []
        held_in_it = self._press is not None and self._press["multi"] is p  # it may still become a drag or hold
        if p["kind"] == "click" and not held_in_it and (now - p["press_t"]) * 1000 > self.th.multi_click_ms:
            return self._close_pending()
        if p["kind"] == "scroll" and (now - p["last"].t) * 1000 > self.th.scroll_gap_ms:
            return self._close_pending()
        return []

    def flush(self) -> list[ReducedAction]:
        """End everything open (at stop or pause). A held button is ended where it is."""
        out = self._close_pending()
        if self._press is not None:
            out += self._release(self._press["last"])
        self._moves = []
        return self._checked(out)

    # -- pointer -------------------------------------------------------------------------------------
    def _pointer(self, ev: ClientMessage) -> list[ReducedAction]:
        out: list[ReducedAction] = []
        previous, self._mask = self._mask, ev.mask
        moved = (ev.x, ev.y) != self._pos
        self._pos = (ev.x, ev.y)
        for bit, (axis, sign) in WHEEL.items():
            if ev.mask & bit and not previous & bit:
                out += self._wheel(ev, axis, sign)
        pressed = [b for b in BUTTONS if ev.mask & b and not previous & b]
        released = [b for b in BUTTONS if previous & b and not ev.mask & b]
        if self._press is not None:
            if self._press["path"][-1] != [ev.x, ev.y]:
                self._press["path"].append([ev.x, ev.y])
            self._press["last"] = ev
            if self._press["button"] in released:
                out += self._release(ev)
        elif pressed:
            out += self._button_down(ev, pressed[0])
        elif moved and not any(ev.mask & bit for bit in WHEEL):
            self._moves.append(ev)
            self._lone_modifier = None
        return out

    def _button_down(self, ev: ClientMessage, button: int) -> list[ReducedAction]:
        self._lone_modifier = None
        out: list[ReducedAction] = []
        p = self._pending
        if (p is not None and p["kind"] == "click" and p["button"] == button and p["count"] < 3
                and (ev.t - p["press_t"]) * 1000 <= self.th.multi_click_ms
                and _distance((ev.x, ev.y), p["at"]) <= self.th.multi_click_px):
            p["count"] += 1
            p["press_t"] = ev.t
            self._moves = []  # jitter between the presses of a multi-click belongs to the click
            self._press = {"button": button, "first": ev, "last": ev, "path": [[ev.x, ev.y]], "multi": p,
                           "moves": ([], None, None), "mods": self._modifiers()}
            return out
        out += self._close_pending()
        self._press = {"button": button, "first": ev, "last": ev, "path": [[ev.x, ev.y]], "multi": None,
                       "moves": self._take_moves(), "mods": self._modifiers()}
        return out

    def _release(self, ev: ClientMessage) -> list[ReducedAction]:
        press, self._press = self._press, None
        assert press is not None
        first = press["first"]
        travelled = _distance((ev.x, ev.y), (first.x, first.y)) > self.th.click_travel
        held = (ev.t - first.t) * 1000 >= self.th.hold_ms
        multi = press["multi"]
        if multi is None:
            return self._press_action(press, ev, travelled, held)
        if not travelled and not held:  # the second or third press of a multi-click
            multi["last"] = ev
            return []
        # A double click dragged (to select by words) or held: counted into the click, the drag or the hold
        # would be lost. The presses before it stay a click, and this one follows it as a drag or a hold:
        # replayed on the recorded timing, the app counts its press into a double click just as it did live.
        out: list[ReducedAction] = []
        if self._pending is multi:  # not yet closed by other input during the press
            multi["count"] -= 1
            out = self._close_pending()
        return out + self._press_action(press, ev, travelled, held)

    def _press_action(self, press: dict[str, Any], ev: ClientMessage, travelled: bool,
                      held: bool) -> list[ReducedAction]:
        """A press released at ``ev``: a drag or a hold at once, or a click kept open for the next press."""
        first, name = press["first"], BUTTONS[press["button"]]
        if travelled:
            action: dict[str, Any] = {"type": "drag", "path": _thin(press["path"], self.th.drag_points)}
            if name != "left":
                action["button"] = name
            if press["mods"]:
                action["modifiers"] = press["mods"]
            return [self._finish(action, first, ev, press["moves"])]
        mods, moves = press["mods"], press["moves"]
        if held:
            return self._hold(first, ev, name, mods, moves)

        def build(p: dict[str, Any]) -> ReducedAction:
            action: dict[str, Any] = {"type": "click", "x": first.x, "y": first.y}
            if name != "left":
                action["button"] = name
            if p["count"] > 1:
                action["count"] = p["count"]
            if mods:
                action["modifiers"] = mods
            return self._finish(action, first, p["last"], moves)

        self._pending = {"kind": "click", "button": press["button"], "count": 1, "press_t": first.t,
                         "at": (first.x, first.y), "last": ev, "build": build}
        return []

    def _hold(self, first: ClientMessage, last: ClientMessage, button: str, mods: list[str],
              moves: tuple[list[list[int]], int | None, float | None]) -> list[ReducedAction]:
        """A press held in place: mouse_down, wait, mouse_up, so that replay holds it as long.

        Why not a ``click`` with a hold time: the vocabulary already says this exactly, and every consumer
        (the executor, MCP tools, adapters) already runs it; a new click field would change the action every
        agent and adapter sees for the sake of one recording rule. It is never part of a double click (no
        person double-clicks with a press this long), so it is emitted at once."""
        path, move_i, _ = moves
        start = move_i if move_i is not None else first.i
        button_field = {} if button == "left" else {"button": button}
        held = round((last.t - first.t) * 1000)
        out = [ReducedAction({"type": "key_down", "key": m}, first.t, first.t, (first.i, first.i)) for m in mods]
        out.append(ReducedAction({"type": "mouse_move", "x": first.x, "y": first.y}, first.t, first.t,
                                 (start, first.i), path))
        out.append(ReducedAction({"type": "mouse_down", **button_field}, first.t, first.t, (first.i, first.i)))
        while held > 0:  # a wait is at most MAX_WAIT_MS
            chunk = min(held, MAX_WAIT_MS)
            out.append(ReducedAction({"type": "wait", "ms": chunk}, first.t, last.t, (first.i, last.i)))
            held -= chunk
        out.append(ReducedAction({"type": "mouse_up", **button_field}, last.t, last.t, (last.i, last.i)))
        out += [ReducedAction({"type": "key_up", "key": m}, last.t, last.t, (last.i, last.i))
                for m in reversed(mods)]
        return out

    def _wheel(self, ev: ClientMessage, axis: str, sign: int) -> list[ReducedAction]:
        self._lone_modifier = None
        p = self._pending
        mods = self._modifiers()
        if p is not None and p["kind"] == "scroll" and p["axis"] == axis and p["sign"] == sign \
                and p["mods"] == mods and _distance((ev.x, ev.y), p["at"]) <= self.th.click_travel \
                and abs(p["amount"]) < MAX_REPEAT and (ev.t - p["last"].t) * 1000 <= self.th.scroll_gap_ms:
            p["amount"] += sign
            p["last"] = ev
            return []
        # A new axis, a new direction, a new place, other modifiers, a pause or a full burst: a new scroll.
        # Summing 15 down and 1 up into 14 would replay neither (a list stops at its ends); summing down and up
        # into 0 would be no action at all; a scroll replays every notch where its first one was, so notches
        # over another widget, or with ctrl now held, would scroll the wrong thing.
        out = self._close_pending()
        first, moves = ev, self._take_moves()

        def build(p: dict[str, Any]) -> ReducedAction:
            action: dict[str, Any] = {"type": "scroll", "x": first.x, "y": first.y, p["axis"]: p["amount"]}
            if mods:
                action["modifiers"] = mods
            return self._finish(action, first, p["last"], moves)

        self._pending = {"kind": "scroll", "axis": axis, "sign": sign, "amount": sign, "last": ev, "build": build,
                         "mods": mods, "at": (ev.x, ev.y)}
        return out

    # -- keyboard ------------------------------------------------------------------------------------
    def _key(self, ev: ClientMessage) -> list[ReducedAction]:
        modifier = _MODIFIERS.get(ev.keysym)
        if modifier is not None:
            return self._modifier(ev, modifier)
        if not ev.down:
            return []
        self._lone_modifier = None
        char = printable(ev.keysym)
        chord = [m for m in _CHORD_MODIFIERS if m in self._mods]
        if char is not None and not chord:
            return self._type(ev, char)
        out = self._close_pending()
        name = key_name(ev.keysym)
        if name is None:
            self._take_moves()  # the motion before it belongs to no action either; it stays in raw
            self._report((ev.i, ev.i), ev.t, f"keysym 0x{ev.keysym:x} has no key name")
            return out
        if chord and len(name) == 1 and name.isalpha():
            name = name.lower()  # ctrl+shift+T arrives as keysym "T"; the chord is spelled ctrl+shift+t
        combo = "+".join([*self._modifiers(), name])
        out.append(self._finish({"type": "key", "keys": combo}, ev, ev, self._take_moves()))
        return out

    def _modifier(self, ev: ClientMessage, name: str) -> list[ReducedAction]:
        if ev.down:
            self._mods[name] = ev.keysym
            if name in _CHORD_MODIFIERS and not [m for m in self._mods if m != name]:
                self._lone_modifier = (ev.keysym, ev)
            else:
                self._lone_modifier = None
            return []
        self._mods.pop(name, None)
        lone, self._lone_modifier = self._lone_modifier, None
        if lone is not None and lone[0] == ev.keysym:
            out = self._close_pending()
            out.append(self._finish({"type": "key", "keys": name}, lone[1], ev, self._take_moves()))
            return out
        return []

    def _type(self, ev: ClientMessage, char: str) -> list[ReducedAction]:
        p = self._pending
        if p is not None and p["kind"] == "type" and len(p["text"]) < MAX_TEXT_CHARS:
            p["text"] += char
            p["last"] = ev
            return []
        out = self._close_pending()
        first, moves = ev, self._take_moves()

        def build(p: dict[str, Any]) -> ReducedAction:
            return self._finish({"type": "type_text", "text": p["text"]}, first, p["last"], moves)

        self._pending = {"kind": "type", "text": char, "last": ev, "build": build}
        return out


def reduce_events(events: list[ClientMessage], thresholds: Thresholds | None = None, *,
                  screen: tuple[int, int] | None = None,
                  unreduced: list[Unreduced] | None = None) -> list[ReducedAction]:
    """Reduce a whole recorded stream at once (what the recorder does live, event by event)."""
    reducer = Reducer(thresholds, screen=screen, unreduced=unreduced)
    out: list[ReducedAction] = []
    for ev in events:
        out += reducer.feed(ev)
    out += reducer.flush()
    return out
