"""Key names: X keysym names plus the aliases people and models actually write.

A key name is one of
  * an alias (case-insensitive): ctrl, alt, shift, super/cmd/win/meta, enter/return, esc, del, pgup, ...
  * an X keysym name (``Return``, ``BackSpace``, ``a``, ``F5``, ``XF86AudioMute``, ``eacute``), matched exactly
    first and then case-insensitively,
  * a single character (``é``, ``你``, ``@``), or ``U+4F60`` / ``U4F60`` for a Unicode code point.
A combo joins key names with ``+`` (``ctrl+shift+t``); ``+`` itself is written ``plus`` (``ctrl+plus``), and a
trailing ``++`` is accepted too (``ctrl++``).

This module needs only python-xlib's pure-Python keysym tables, so it imports on machines without X11.
"""

from __future__ import annotations

import difflib
import functools
import re

from ..errors import UnknownKeyError

MODIFIER_KEYSYMS = {
    "ctrl": "Control_L",
    "shift": "Shift_L",
    "alt": "Alt_L",
    "super": "Super_L",
}

ALIASES: dict[str, str] = {
    "ctrl": "Control_L",
    "control": "Control_L",
    "lctrl": "Control_L",
    "rctrl": "Control_R",
    "shift": "Shift_L",
    "lshift": "Shift_L",
    "rshift": "Shift_R",
    "alt": "Alt_L",
    "lalt": "Alt_L",
    "ralt": "Alt_R",
    "option": "Alt_L",
    "altgr": "ISO_Level3_Shift",
    "super": "Super_L",
    "cmd": "Super_L",
    "command": "Super_L",
    "win": "Super_L",
    "windows": "Super_L",
    "meta": "Super_L",
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "space": "space",
    "spacebar": "space",
    "backspace": "BackSpace",
    "bksp": "BackSpace",
    "delete": "Delete",
    "del": "Delete",
    "insert": "Insert",
    "ins": "Insert",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "page_up": "Prior",
    "pgup": "Prior",
    "pagedown": "Next",
    "page_down": "Next",
    "pgdn": "Next",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "arrowup": "Up",
    "arrowdown": "Down",
    "arrowleft": "Left",
    "arrowright": "Right",
    "capslock": "Caps_Lock",
    "numlock": "Num_Lock",
    "printscreen": "Print",
    "print": "Print",
    "menu": "Menu",
    "pause": "Pause",
    "plus": "plus",
    "minus": "minus",
}

# Keysym -> the short name recorded actions use (the inverse of the aliases that matter).
_CANONICAL = {
    "Control_L": "ctrl",
    "Control_R": "ctrl",
    "Shift_L": "shift",
    "Shift_R": "shift",
    "Alt_L": "alt",
    "Alt_R": "alt",
    "Meta_L": "alt",
    "Meta_R": "alt",
    "Super_L": "super",
    "Super_R": "super",
    "ISO_Level3_Shift": "altgr",
    "Return": "enter",
    "KP_Enter": "enter",
    "Escape": "esc",
    "Tab": "tab",
    "ISO_Left_Tab": "tab",
    "BackSpace": "backspace",
    "Delete": "delete",
    "Prior": "pageup",
    "Next": "pagedown",
    "Up": "up",
    "Down": "down",
    "Left": "left",
    "Right": "right",
    "Home": "home",
    "End": "end",
    "Insert": "insert",
    "space": "space",
    "plus": "plus",
}

_GROUPS = (
    "latin2", "latin3", "latin4", "greek", "cyrillic", "katakana", "arabic", "hebrew", "thai", "korean",
    "technical", "special", "publishing", "apl", "xkb", "xf86",
)
_UNICODE_NAME = re.compile(r"^[Uu]\+?([0-9A-Fa-f]{4,6})$")
UNICODE_KEYSYM_BASE = 0x01000000


@functools.cache
def _tables() -> tuple[dict[str, int], dict[str, str], dict[int, str]]:
    from Xlib import XK

    for group in _GROUPS:
        XK.load_keysym_group(group)
    by_name: dict[str, int] = {}
    for attr, value in vars(XK).items():
        if attr.startswith("XK_") and isinstance(value, int):
            name = attr[3:]
            if name.startswith("XF86_"):  # python-xlib spells XF86AudioMute as XF86_AudioMute
                by_name.setdefault("XF86" + name[5:], value)
            by_name.setdefault(name, value)
    lower: dict[str, str] = {}
    for name in sorted(by_name):
        lower.setdefault(name.lower(), name)
    by_value: dict[int, str] = {}
    for name, value in sorted(by_name.items(), key=lambda kv: (len(kv[0]), kv[0])):
        by_value.setdefault(value, name)
    return by_name, lower, by_value


def keysym_for_char(ch: str) -> int:
    """The keysym that types ``ch``: Latin-1 keysyms are the code point, everything else the Unicode keysym."""
    cp = ord(ch)
    if 0x20 <= cp <= 0x7E or 0xA0 <= cp <= 0xFF:
        return cp
    return UNICODE_KEYSYM_BASE + cp


def resolve_key(name: str) -> tuple[str, int]:
    """Return ``(keysym_name, keysym)`` for one key name, or raise :class:`UnknownKeyError`."""
    if not isinstance(name, str) or name == "":
        raise UnknownKeyError("empty key name")
    by_name, lower, _ = _tables()
    alias = ALIASES.get(name.lower())
    if alias is not None:
        return alias, by_name[alias]
    if name in by_name:
        return name, by_name[name]
    if len(name) == 1:
        return name, keysym_for_char(name)
    m = _UNICODE_NAME.match(name)
    if m:
        cp = int(m.group(1), 16)
        if cp > 0x10FFFF:
            raise UnknownKeyError(f"code point out of range in key name {name!r}")
        return f"U{cp:04X}", keysym_for_char(chr(cp))
    folded = lower.get(name.lower())
    if folded is not None:
        return folded, by_name[folded]
    if re.fullmatch(r"[Ff]\d{1,2}", name):
        raise UnknownKeyError(f"unknown key name {name!r}: function keys go from F1 to F35")
    candidates = list(ALIASES) + list(by_name)
    close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.75)
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    raise UnknownKeyError(
        f"unknown key name {name!r}{hint}; use an X keysym name (Return, BackSpace, a, F5), "
        "an alias (ctrl, alt, shift, super, enter, esc, tab, up, pageup, ...) or a single character"
    )


def split_combo(combo: str) -> list[str]:
    """Split ``ctrl+shift+t`` into names; ``ctrl++`` and a lone ``+`` mean the plus key."""
    if not isinstance(combo, str) or combo.strip() == "":
        raise UnknownKeyError("empty key combination")
    combo = combo.strip()
    if combo == "+":
        return ["plus"]
    parts: list[str] = []
    if combo.endswith("++"):
        combo, trailing_plus = combo[:-2], True
    else:
        trailing_plus = False
    if combo:
        parts = [p.strip() for p in combo.split("+")]
    if trailing_plus:
        parts.append("plus")
    if any(p == "" for p in parts):
        raise UnknownKeyError(f"malformed key combination {combo!r}: empty name between '+' signs")
    return parts


def parse_combo(combo: str) -> list[tuple[str, int]]:
    """Resolve every key of a combo; the last is the key pressed, the others are held while it is."""
    return [resolve_key(p) for p in split_combo(combo)]


def canonical_key_name(keysym: int) -> str:
    """A short, stable name for a keysym, as recorded actions spell it (``ctrl``, ``enter``, ``t``, ``F5``)."""
    _, _, by_value = _tables()
    name = by_value.get(keysym)
    if name is None:
        if keysym >= UNICODE_KEYSYM_BASE:
            return chr(keysym - UNICODE_KEYSYM_BASE)
        return f"0x{keysym:x}"
    if name in _CANONICAL:
        return _CANONICAL[name]
    if len(name) == 1:
        return name.lower() if name.isalpha() else name
    return name


def is_modifier_keysym(keysym: int) -> bool:
    _, _, by_value = _tables()
    name = by_value.get(keysym, "")
    return name in {
        "Control_L", "Control_R", "Shift_L", "Shift_R", "Alt_L", "Alt_R", "Meta_L", "Meta_R",
        "Super_L", "Super_R", "Hyper_L", "Hyper_R", "ISO_Level3_Shift", "Mode_switch",
    }
