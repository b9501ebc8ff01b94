"""The canonical action vocabulary (see :mod:`hci_envs.actions.models`)."""

from .keys import UnknownKeyError, canonical_key_name, keysym_for_char, parse_combo, resolve_key, split_combo
from .models import (
    ACTION_MODELS,
    ACTIONS,
    BUTTON_NUMBERS,
    MAX_DRAG_POINTS,
    MAX_HOLD_SECONDS,
    MAX_REPEAT,
    MAX_TEXT_CHARS,
    MAX_WAIT_MS,
    Action,
    ActionBase,
    Click,
    ClipboardGet,
    ClipboardSet,
    CursorPosition,
    Drag,
    HoldKey,
    Key,
    KeyDown,
    KeyUp,
    MouseDown,
    MouseMove,
    MouseUp,
    Region,
    ScreenSize,
    Screenshot,
    Scroll,
    TypeText,
    Wait,
    format_validation_error,
    parse_action,
)

__all__ = [
    "ACTIONS", "ACTION_MODELS", "BUTTON_NUMBERS", "MAX_DRAG_POINTS", "MAX_HOLD_SECONDS", "MAX_REPEAT",
    "MAX_TEXT_CHARS", "MAX_WAIT_MS", "Action", "ActionBase", "Click", "ClipboardGet", "ClipboardSet",
    "CursorPosition", "Drag", "HoldKey", "Key", "KeyDown", "KeyUp", "MouseDown", "MouseMove", "MouseUp",
    "Region", "ScreenSize", "Screenshot", "Scroll", "TypeText", "UnknownKeyError", "Wait",
    "canonical_key_name", "format_validation_error", "keysym_for_char", "parse_action", "parse_combo",
    "resolve_key", "split_combo",
]
