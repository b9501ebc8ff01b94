"""Key names across schemas. Ours are X keysym names and aliases (``hci_envs.actions.keys``); OpenAI's
computer-use names keys in capitals ("CTRL", "ENTER", "ARROWLEFT"); OSWorld uses pyautogui's names
("enter", "win", "pageup", "num0", "volumemute"). Outgoing names go through our short canonical names, so
every alias of a key maps to the same foreign name; a key the other schema cannot name is refused."""

from __future__ import annotations

import re

from ..actions.keys import UNICODE_KEYSYM_BASE, UnknownKeyError, canonical_key_name, resolve_key, split_combo
from . import UnsupportedActionError

_FUNCTION_KEY = re.compile(r"^F(\d{1,2})$")

_TO_OPENAI = {
    "enter": "ENTER", "esc": "ESC", "tab": "TAB", "backspace": "BACKSPACE", "delete": "DELETE", "space": "SPACE",
    "up": "ARROWUP", "down": "ARROWDOWN", "left": "ARROWLEFT", "right": "ARROWRIGHT", "pageup": "PAGEUP",
    "pagedown": "PAGEDOWN", "home": "HOME", "end": "END", "insert": "INSERT", "ctrl": "CTRL", "alt": "ALT",
    "shift": "SHIFT", "super": "SUPER", "plus": "+", "Caps_Lock": "CAPSLOCK",
}

_TO_PYAUTOGUI = {
    "enter": "enter", "esc": "esc", "tab": "tab", "backspace": "backspace", "delete": "delete", "space": "space",
    "up": "up", "down": "down", "left": "left", "right": "right", "pageup": "pageup", "pagedown": "pagedown",
    "home": "home", "end": "end", "insert": "insert", "ctrl": "ctrl", "alt": "alt", "shift": "shift",
    "super": "win", "plus": "+", "Caps_Lock": "capslock", "Num_Lock": "numlock", "Print": "printscreen",
    "Pause": "pause", "Menu": "apps", "XF86AudioMute": "volumemute", "XF86AudioRaiseVolume": "volumeup",
    "XF86AudioLowerVolume": "volumedown", "XF86AudioPlay": "playpause", "XF86AudioNext": "nexttrack",
    "XF86AudioPrev": "prevtrack", **{f"KP_{d}": f"num{d}" for d in range(10)},
}

#: pyautogui names that are not already names or aliases of ours.
_FROM_PYAUTOGUI = {
    "\n": "Return", "\r": "Return", "\t": "Tab", " ": "space", "+": "plus",
    "ctrlleft": "Control_L", "ctrlright": "Control_R", "altleft": "Alt_L", "altright": "Alt_R",
    "shiftleft": "Shift_L", "shiftright": "Shift_R", "winleft": "Super_L", "winright": "Super_R",
    "prtsc": "Print", "prtscr": "Print", "prntscrn": "Print", "printscrn": "Print", "apps": "Menu",
    "volumemute": "XF86AudioMute", "volumeup": "XF86AudioRaiseVolume", "volumedown": "XF86AudioLowerVolume",
    "playpause": "XF86AudioPlay", "nexttrack": "XF86AudioNext", "prevtrack": "XF86AudioPrev",
    **{f"num{d}": f"KP_{d}" for d in range(10)},
}


#: X names F11-F35 also L1-L10 and R1-R15; the keysym table may answer with either.
_SUN_FUNCTION_KEY = re.compile(r"^([LR])(\d{1,2})$")


def _short_name(name: str) -> str:
    keysym_name, keysym = resolve_key(name)
    if len(name) == 1:
        return name
    if 0x20 < keysym < 0x100 and keysym != 0x7F:  # a Latin-1 character key ("eacute"): other schemas name it by itself
        return chr(keysym)
    if UNICODE_KEYSYM_BASE + 0x100 <= keysym <= UNICODE_KEYSYM_BASE + 0x10FFFF:  # a Unicode keysym
        return chr(keysym - UNICODE_KEYSYM_BASE)
    short = canonical_key_name(keysym)
    sun = _SUN_FUNCTION_KEY.match(short)
    if _FUNCTION_KEY.match(keysym_name):
        return keysym_name
    if sun:
        return f"F{int(sun.group(2)) + (10 if sun.group(1) == 'L' else 20)}"
    return short


def _short_names(combo: str) -> list[str]:
    try:
        return [_short_name(name) for name in split_combo(combo)]
    except UnknownKeyError as exc:
        raise UnsupportedActionError(str(exc), field="keys") from None


def _foreign(combo: str, table: dict[str, str], schema: str, function_key: str) -> list[str]:
    out = []
    for name in _short_names(combo):
        if name in table:
            out.append(table[name])
        elif len(name) == 1:
            out.append(name)
        elif match := _FUNCTION_KEY.match(name):
            out.append(function_key.format(match.group(1)))
        else:
            raise UnsupportedActionError(f"{schema} has no name for the key {name!r}", field="keys")
    return out


def to_openai_keys(combo: str) -> list[str]:
    """``ctrl+shift+t`` -> ["CTRL", "SHIFT", "t"]."""
    return _foreign(combo, _TO_OPENAI, "OpenAI computer-use", "F{}")


def to_pyautogui_keys(combo: str) -> list[str]:
    """``super+pgup`` -> ["win", "pageup"]."""
    return _foreign(combo, _TO_PYAUTOGUI, "OSWorld computer_13", "f{}")


def from_openai_key(name: str) -> str:
    """One OpenAI key name as ours: their capitalised names are our aliases in lower case."""
    return "plus" if name == "+" else (name.lower() if len(name) > 1 else name)


def from_pyautogui_key(name: str) -> str:
    """One pyautogui key name as ours."""
    return _FROM_PYAUTOGUI.get(name, _FROM_PYAUTOGUI.get(name.lower(), name) if len(name) > 1 else name)
