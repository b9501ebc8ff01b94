"""Where each keysym lives on the keyboard, and temporary keys for the ones that live nowhere.

Typing "你" needs a keycode whose keysym is U+4F60, and the keyboard map has none. We map such keysyms onto
scratch keys: keycodes with no keysyms at all, and keycodes that carry only XF86 media keysyms (nobody
presses "XF86Launch5" on a virtual desktop) other than the few an app acts on by keycode. Each scratch key
offers two slots, plain and shifted.

Why slots are not reused at once: an X client looks up the keysym of a key event when it *processes* the
event, from the keyboard map as it is at that moment. Remapping a key before the app has caught up makes the
app read the new keysym for the old event. So every plan is a numbered *batch*, a slot remembers the last
batch that used it, and it may be remapped only once the app has acknowledged that batch (see
:mod:`.keys_ack`): the caller reports it with :meth:`Keyboard.acknowledged`. Time plays no part: a stopped app
keeps its slots busy for as long as it is stopped, and a fast one frees them as soon as it answers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

_XF86_RANGE = range(0x1008FF00, 0x10090000)
#: Media keys that are no scratch keys: chromium reads a key's command from its keycode when the keysym means
#: nothing to it (as a CJK character does), so these keycodes copy, cut, paste or navigate whatever keysym
#: they carry (found by typing on every scratch key in a text area).
_COMMAND_KEYSYMS = frozenset({
    0x1008FF57, 0x1008FF58, 0x1008FF6D,  # XF86Copy, XF86Cut, XF86Paste
    0x1008FF26, 0x1008FF27, 0x1008FF73, 0x1008FF29, 0x1008FF28,  # Back, Forward, Reload, Refresh, Stop
    0x1008FF18, 0x1008FF1B, 0x1008FF30,  # HomePage, Search, Favorites
})


@dataclass
class _Slot:
    keycode: int
    level: int
    keysym: int = 0
    batch: int = 0  # the last plan that used this slot's keysym


@dataclass
class KeyPlan:
    """How to type a sequence of keysyms: ``(keycode, level)`` per keysym, or the keysyms that did not fit.
    ``batch`` numbers the plan; once the apps have handled its keys, ``Keyboard.acknowledged(batch)``.
    ``remapped`` says whether it changed the keyboard map."""

    keys: dict[int, tuple[int, int]] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)
    batch: int = 0
    remapped: bool = False


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
        self._batch = 0  # the number of the latest plan
        self._acknowledge = 0  # the apps have handled every key of the plans up to this one
        for offset, syms in enumerate(mapping):
            keycode = self.min_keycode + offset
            if keycode in modifier_keycodes:
                continue
            nonzero = [s for s in syms if s]
            if not nonzero or all(s in _XF86_RANGE and s not in _COMMAND_KEYSYMS for s in nonzero):
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
    def plan(self, keysyms: list[int]) -> KeyPlan:
        """Find keys for ``keysyms`` (in order of first use), remapping idle scratch slots as needed.

        A slot is idle when it holds no keysym or the apps have caught up with the last plan that used it.
        Keysyms that still have no key are listed in ``missing``, in text order; the caller types up to the
        first of them, asks the apps to catch up, reports it (:meth:`acknowledged`) and plans the rest again.
        """
        with self._lock:
            self._batch += 1
            plan = KeyPlan(batch=self._batch)
            slot_of = {s.keysym: s for s in self._slots if s.keysym}
            needed: list[int] = []
            used: list[_Slot] = []
            for sym in dict.fromkeys(keysyms):
                if sym in self._lookup:
                    plan.keys[sym] = self._lookup[sym]
                elif sym in slot_of:
                    used.append(slot_of[sym])
                    plan.keys[sym] = (slot_of[sym].keycode, slot_of[sym].level)
                else:
                    needed.append(sym)
            in_use = {(kc, lvl) for kc, lvl in plan.keys.values()}
            # unmapped slots first, then the least recently used: a keysym typed lately may come back
            free = sorted(
                (s for s in self._slots if (s.keycode, s.level) not in in_use and self._idle(s)),
                key=lambda s: (s.keysym != 0, s.batch),
            ) if needed else []
            assigned: dict[int, list[int]] = {}
            for sym, slot in zip(needed, free):
                slot.keysym = sym
                used.append(slot)
                row = assigned.setdefault(slot.keycode, self._row(slot.keycode))
                row[slot.level] = sym
                plan.keys[sym] = (slot.keycode, slot.level)
            for slot in used:
                slot.batch = plan.batch
            plan.missing = needed[len(free):]
            plan.remapped = bool(assigned)
            self._write(assigned)
            return plan

    def _idle(self, slot: _Slot) -> bool:
        return not slot.keysym or slot.batch <= self._acknowledge

    def acknowledged(self, batch: int) -> None:
        """The apps have handled every key typed with the plans up to ``batch``: their slots are idle."""
        with self._lock:
            self._acknowledge = max(self._acknowledge, batch)

    def fits(self, keysyms: set[int]) -> bool:
        """Whether ``keysyms`` need no more scratch slots than the keyboard has (busy slots are freed by one
        acknowledgement from the apps, so they count)."""
        with self._lock:
            return sum(1 for k in keysyms if k not in self._lookup) <= len(self._slots)

    def busy(self) -> int:
        """How many slots wait for the apps to catch up before they can be remapped."""
        with self._lock:
            return sum(1 for s in self._slots if not self._idle(s))

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

