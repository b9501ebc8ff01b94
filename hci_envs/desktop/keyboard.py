"""Where each keysym lives on the keyboard, and temporary keys for the ones that live nowhere.

Typing "你" needs a keycode whose keysym is U+4F60, and the keyboard map has none. We map such keysyms onto
scratch keys: keycodes with no keysyms at all, and keycodes that carry only XF86 media keysyms (nobody
presses "XF86Launch5" on a virtual desktop). Each scratch key offers two slots, plain and shifted.

Why slots are not reused at once: an X client looks up the keysym of a key event when it *processes* the
event, from the keyboard map as it is at that moment. Remapping a key before the app has caught up makes the
app read the new keysym for the old event. So a slot keeps its keysym until it has been idle for
``REUSE_AFTER`` seconds, and the caller learns when a text needs more slots than are idle (then it types in
chunks with a pause for the app to catch up, or pastes).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

REUSE_AFTER = 1.0
_XF86_RANGE = range(0x1008FF00, 0x10090000)


@dataclass
class _Slot:
    keycode: int
    level: int
    keysym: int = 0
    last_used: float = 0.0


@dataclass
class KeyPlan:
    """How to type a sequence of keysyms: ``(keycode, level)`` per keysym, or the keysyms that did not fit."""

    keys: dict[int, tuple[int, int]] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)


class Keyboard:
    """The live keyboard map of one display and its scratch slots. Thread-safe."""

    def __init__(self, display) -> None:  # Xlib.display.Display
        self._d = display
        self._lock = threading.Lock()
        self.min_keycode = display.display.info.min_keycode
        self.max_keycode = display.display.info.max_keycode
        mapping = self._read()
        self._width = len(mapping[0]) if mapping else 2
        self._original: dict[int, list[int]] = {}
        modifier_keycodes = {kc for row in display.get_modifier_mapping() for kc in row if kc}
        self._slots: list[_Slot] = []
        for offset, syms in enumerate(mapping):
            keycode = self.min_keycode + offset
            if keycode in modifier_keycodes:
                continue
            nonzero = [s for s in syms if s]
            if not nonzero or all(s in _XF86_RANGE for s in nonzero):
                self._original[keycode] = list(syms)
                self._slots.extend((_Slot(keycode, 0), _Slot(keycode, 1)))
        self._lookup = self._index(mapping)

    # -- the map ---------------------------------------------------------------------------------------
    def _read(self) -> list[list[int]]:
        count = self.max_keycode - self.min_keycode + 1
        return [list(row) for row in self._d.get_keyboard_mapping(self.min_keycode, count)]

    def _index(self, mapping: list[list[int]]) -> dict[int, tuple[int, int]]:
        lookup: dict[int, tuple[int, int]] = {}
        scratch = {s.keycode for s in self._slots}
        for level in (0, 1):
            for offset, syms in enumerate(mapping):
                keycode = self.min_keycode + offset
                if keycode in scratch or len(syms) <= level:
                    continue
                sym = syms[level]
                if sym and sym not in lookup:
                    lookup[sym] = (keycode, level)
        return lookup

    @property
    def scratch_slots(self) -> int:
        return len(self._slots)

    def keycode_for(self, keysym: int) -> tuple[int, int] | None:
        """The (keycode, level) that produces ``keysym`` on the standing map, without remapping anything."""
        with self._lock:
            return self._lookup.get(keysym)

    def refresh(self) -> None:
        """Re-read the map, e.g. after another client (a VNC server adding keysyms) changed it."""
        with self._lock:
            mapping = self._read()
            for slot in self._slots:
                row = mapping[slot.keycode - self.min_keycode]
                current = row[slot.level] if len(row) > slot.level else 0
                if current != slot.keysym and slot.keysym:
                    slot.keysym = 0  # someone else remapped it; forget our assignment
            self._lookup = self._index(mapping)

    # -- scratch slots ---------------------------------------------------------------------------------
    def plan(self, keysyms: list[int], *, now: float | None = None, wait_ok: bool = False) -> KeyPlan:
        """Find keys for ``keysyms`` (in order of first use), remapping idle scratch slots as needed.

        Slots that are not idle yet are used only with ``wait_ok`` (the caller then makes sure the apps have
        caught up before typing). Keysyms that still have no key are listed in ``missing``, in text order.
        """
        now = time.monotonic() if now is None else now
        with self._lock:
            plan = KeyPlan()
            slot_of = {s.keysym: s for s in self._slots if s.keysym}
            needed: list[int] = []
            for sym in dict.fromkeys(keysyms):
                if sym in self._lookup:
                    plan.keys[sym] = self._lookup[sym]
                elif sym in slot_of:
                    plan.keys[sym] = (slot_of[sym].keycode, slot_of[sym].level)
                else:
                    needed.append(sym)
            if not needed:
                return plan
            in_use = {(kc, lvl) for kc, lvl in plan.keys.values()}
            free = sorted(
                (s for s in self._slots if (s.keycode, s.level) not in in_use
                 and (wait_ok or not s.keysym or now - s.last_used >= REUSE_AFTER)),
                key=lambda s: (s.keysym != 0, s.last_used),
            )
            assigned: dict[int, list[int]] = {}
            for sym, slot in zip(needed, free):
                slot.keysym = sym
                row = assigned.setdefault(slot.keycode, self._row(slot.keycode))
                row[slot.level] = sym
                plan.keys[sym] = (slot.keycode, slot.level)
            plan.missing = needed[len(free):]
            self._write(assigned)
            return plan

    def fits(self, keysyms: set[int], *, now: float | None = None) -> bool:
        """Whether ``keysyms`` can all be typed now without remapping a scratch slot that is still busy."""
        now = time.monotonic() if now is None else now
        with self._lock:
            assigned = {s.keysym for s in self._slots if s.keysym}
            needed = [k for k in keysyms if k not in self._lookup and k not in assigned]
            idle = sum(
                1 for s in self._slots
                if s.keysym not in keysyms and (not s.keysym or now - s.last_used >= REUSE_AFTER)
            )
            return len(needed) <= idle

    def touch(self, keysyms: list[int], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        wanted = set(keysyms)
        with self._lock:
            for slot in self._slots:
                if slot.keysym in wanted:
                    slot.last_used = now

    def _row(self, keycode: int) -> list[int]:
        row = [0] * self._width
        for slot in self._slots:
            if slot.keycode == keycode and slot.keysym:
                row[slot.level] = slot.keysym
        return row

    def _write(self, rows: dict[int, list[int]]) -> None:
        # One request per run of consecutive keycodes: every request makes each client reload its map.
        for run in _runs(sorted(rows)):
            self._d.change_keyboard_mapping(run[0], [self._complete(rows[kc]) for kc in run])
        if rows:
            self._d.sync()

    def _complete(self, row: list[int]) -> list[int]:
        # A scratch key that holds one keysym is typed at level 0; give XKB both levels so that it does not
        # invent a shifted variant that could shadow another slot.
        if row[0] and not row[1]:
            row = [row[0], row[0]] + row[2:]
        elif row[1] and not row[0]:
            row = [row[1], row[1]] + row[2:]
        return row

    def restore(self) -> None:
        """Put the borrowed keys back as they were (on close; the display may already be gone)."""
        with self._lock:
            rows = {kc: syms for kc, syms in self._original.items()
                    if any(s.keysym for s in self._slots if s.keycode == kc)}
            for slot in self._slots:
                slot.keysym = 0
            for run in _runs(sorted(rows)):
                self._d.change_keyboard_mapping(run[0], [rows[kc] for kc in run])
            if rows:
                self._d.sync()


def _runs(keycodes: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for kc in keycodes:
        if runs and runs[-1][-1] == kc - 1:
            runs[-1].append(kc)
        else:
            runs.append([kc])
    return runs

