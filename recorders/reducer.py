"""Raw human input (RFB PointerEvent, KeyEvent, ClientCutText) to canonical actions.

The rules (thresholds are parameters, with these defaults):
  * pointer moves never stand alone: they become the ``pre_move`` path of the next action;
  * a press and release that travel at most ``click_travel`` (6 px) are a click at the press point; more is a
    drag, whose path keeps at most ``drag_points`` (20) points;
  * presses of the same button at most ``multi_click_ms`` (500 ms) and ``multi_click_px`` (4 px) after the
    previous press make it a double, then a triple click (no more);
  * wheel clicks on one axis with gaps of at most ``scroll_gap_ms`` (400 ms) are one scroll, summed;
  * printable keys, with no modifier but Shift or AltGr, gather into one ``type_text`` until any other
    action; keys pressed while Ctrl, Alt or Super is held are a ``key`` chord ("ctrl+shift+t"); Enter, Tab,
    Escape, BackSpace, Delete, arrows, F-keys and the like are a ``key`` of their own; a Ctrl, Alt or Super
    pressed and released alone is a ``key`` too;
  * a viewer's clipboard (ClientCutText) is a ``clipboard_set``.

Feed events in arrival order with :meth:`Reducer.feed`; completed actions come out of ``feed`` and of
:meth:`Reducer.tick` (which ends actions whose waiting time is over) and :meth:`Reducer.flush` (all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hci_envs.actions.keys import UNICODE_KEYSYM_BASE, canonical_key_name
from hci_envs.vnc.rfb import ClientMessage

BUTTONS = {1: "left", 2: "middle", 4: "right"}
WHEEL = {8: ("dy", -1), 16: ("dy", 1), 32: ("dx", -1), 64: ("dx", 1)}
_MODIFIERS = {
    0xFFE1: "shift", 0xFFE2: "shift", 0xFFE3: "ctrl", 0xFFE4: "ctrl", 0xFFE9: "alt", 0xFFEA: "alt",
    0xFFE7: "alt", 0xFFE8: "alt", 0xFFEB: "super", 0xFFEC: "super", 0xFE03: "altgr", 0xFF7E: "altgr",
}
_CHORD_MODIFIERS = ("ctrl", "alt", "super")
_MODIFIER_ORDER = ("ctrl", "alt", "super", "shift")


@dataclass(frozen=True)
class Thresholds:
    click_travel: float = 6.0
    multi_click_ms: float = 500.0
    multi_click_px: float = 4.0
    scroll_gap_ms: float = 400.0
    drag_points: int = 20
    pre_move_points: int = 20

    def to_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass
class ReducedAction:
    """A canonical action (as a dict) with the span of raw input it came from."""

    action: dict[str, Any]
    t_start: float
    t_end: float
    raw: tuple[int, int]
    pre_move: list[list[int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "t_start": round(self.t_start, 6),
                               "t_end": round(self.t_end, 6), "raw": list(self.raw)}
        if self.pre_move:
            out["pre_move"] = self.pre_move
        return out


def printable(keysym: int) -> str | None:
    """The character a keysym types, if it is a printable one."""
    if 0x20 <= keysym <= 0x7E or 0xA0 <= keysym <= 0xFF:
        return chr(keysym)
    if keysym >= UNICODE_KEYSYM_BASE:
        ch = chr(keysym - UNICODE_KEYSYM_BASE)
        return ch if ch.isprintable() else None
    return None


def _thin(points: list[list[int]], most: int) -> list[list[int]]:
    """Keep at most ``most`` points, evenly spread, always the first and the last."""
    if len(points) <= most:
        return points
    step = (len(points) - 1) / (most - 1)
    return [points[round(k * step)] for k in range(most)]


def _distance(a: tuple[int, int], b: tuple[int, int]) -> float:
    return ((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5


class Reducer:
    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.th = thresholds or Thresholds()
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

    # -- input ---------------------------------------------------------------------------------------
    def feed(self, ev: ClientMessage) -> list[ReducedAction]:
        out = self.tick(ev.t)
        if ev.msg == "PointerEvent":
            out += self._pointer(ev)
        elif ev.msg == "KeyEvent":
            out += self._key(ev)
        elif ev.msg == "ClientCutText":
            out += self._close_pending()
            out.append(self._finish({"type": "clipboard_set", "text": ev.text}, ev, ev, self._take_moves()))
        return out

    def tick(self, now: float) -> list[ReducedAction]:
        """End the open action if its waiting time is over (no double click, no further wheel click)."""
        p = self._pending
        if p is None:
            return []
        if p["kind"] == "click" and (now - p["press_t"]) * 1000 > self.th.multi_click_ms:
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
        return out

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
            self._press = {"button": button, "first": ev, "last": ev, "path": [[ev.x, ev.y]], "multi": p}
            return out
        out += self._close_pending()
        self._press = {"button": button, "first": ev, "last": ev, "path": [[ev.x, ev.y]], "multi": None,
                       "moves": self._take_moves(), "mods": self._modifiers()}
        return out

    def _release(self, ev: ClientMessage) -> list[ReducedAction]:
        press, self._press = self._press, None
        assert press is not None
        first = press["first"]
        if press["multi"] is not None:  # the second or third press of a multi-click
            press["multi"]["last"] = ev
            return []
        name = BUTTONS[press["button"]]
        if _distance((ev.x, ev.y), (first.x, first.y)) > self.th.click_travel:
            action: dict[str, Any] = {"type": "drag", "path": _thin(press["path"], self.th.drag_points)}
            if name != "left":
                action["button"] = name
            if press["mods"]:
                action["modifiers"] = press["mods"]
            return [self._finish(action, first, ev, press["moves"])]
        mods, moves = press["mods"], press["moves"]

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

    def _wheel(self, ev: ClientMessage, axis: str, sign: int) -> list[ReducedAction]:
        self._lone_modifier = None
        p = self._pending
        if p is not None and p["kind"] == "scroll" and p["axis"] == axis \
                and (ev.t - p["last"].t) * 1000 <= self.th.scroll_gap_ms:
            p["amount"] += sign
            p["last"] = ev
            return []
        out = self._close_pending()
        first, mods, moves = ev, self._modifiers(), self._take_moves()

        def build(p: dict[str, Any]) -> ReducedAction:
            action: dict[str, Any] = {"type": "scroll", "x": first.x, "y": first.y, p["axis"]: p["amount"]}
            if mods:
                action["modifiers"] = mods
            return self._finish(action, first, p["last"], moves)

        self._pending = {"kind": "scroll", "axis": axis, "amount": sign, "last": ev, "build": build}
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
        name = canonical_key_name(ev.keysym)
        if chord:
            mods = self._modifiers()
            if len(name) == 1 and name.isalpha():
                name = name.lower()  # ctrl+shift+T arrives as keysym "T"; the chord is spelled ctrl+shift+t
            combo = "+".join([*mods, name])
        else:
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
        if p is not None and p["kind"] == "type":
            p["text"] += char
            p["last"] = ev
            return []
        out = self._close_pending()
        first, moves = ev, self._take_moves()

        def build(p: dict[str, Any]) -> ReducedAction:
            return self._finish({"type": "type_text", "text": p["text"]}, first, p["last"], moves)

        self._pending = {"kind": "type", "text": char, "last": ev, "build": build}
        return out


def reduce_events(events: list[ClientMessage], thresholds: Thresholds | None = None) -> list[ReducedAction]:
    """Reduce a whole recorded stream at once (what the recorder does live, event by event)."""
    reducer = Reducer(thresholds)
    out: list[ReducedAction] = []
    for ev in events:
        out += reducer.feed(ev)
    out += reducer.flush()
    return out
