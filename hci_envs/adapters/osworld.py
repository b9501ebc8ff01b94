"""OSWorld's ``computer_13`` action space and the canonical actions.

Payloads look like ``{"action_type": "CLICK", "parameters": {"button": "left", "x": 10, "y": 20,
"num_clicks": 2}}``. Key names are pyautogui's ("enter", "ctrl", "win", "pageup"). OSWorld's SCROLL follows
pyautogui (positive dy scrolls up); ours scrolls down for positive dy, so the sign flips. DRAG_TO drags from
wherever the pointer is. DONE and FAIL raise :class:`EpisodeSignal`.
"""

from __future__ import annotations

from typing import Any

from ..actions import parse_action
from . import EpisodeSignal, UnsupportedActionError, translator
from .keynames import from_pyautogui_key, to_pyautogui_keys

SCHEMA = "OSWorld computer_13"
ACTION_TYPES = ("MOVE_TO", "CLICK", "MOUSE_DOWN", "MOUSE_UP", "RIGHT_CLICK", "DOUBLE_CLICK", "DRAG_TO", "SCROLL",
                "TYPING", "PRESS", "KEY_DOWN", "KEY_UP", "HOTKEY", "WAIT", "FAIL", "DONE")


def _param(p: dict[str, Any], key: str, default: Any = ...) -> Any:
    if key in p:
        return p[key]
    if default is ...:
        raise UnsupportedActionError(f"{SCHEMA}: this action needs the parameter {key!r}", field=key)
    return default


@translator(SCHEMA)
def from_osworld(payload: dict[str, Any], *, wait_ms: int = 1000) -> list[dict[str, Any]]:
    kind = payload.get("action_type")
    p = payload.get("parameters") or {}
    out: list[dict[str, Any]]
    if kind == "MOVE_TO":
        out = [{"type": "mouse_move", "x": _param(p, "x"), "y": _param(p, "y")}]
    elif kind in ("CLICK", "RIGHT_CLICK", "DOUBLE_CLICK"):
        button = "right" if kind == "RIGHT_CLICK" else p.get("button", "left")
        count = 2 if kind == "DOUBLE_CLICK" else int(p.get("num_clicks", 1))
        action: dict[str, Any] = {"type": "click", "button": button, "count": count}
        if ("x" in p) != ("y" in p):
            missing = "y" if "x" in p else "x"
            raise UnsupportedActionError(f"{SCHEMA}: a click at a position needs both x and y; {missing!r} is missing",
                                         field=missing)
        if "x" in p:
            action["x"], action["y"] = p["x"], p["y"]
        out = [action]
    elif kind in ("MOUSE_DOWN", "MOUSE_UP"):
        out = [{"type": kind.lower(), "button": p.get("button", "left")}]
    elif kind == "DRAG_TO":
        out = [{"type": "mouse_down", "button": "left"}, {"type": "mouse_move", "x": _param(p, "x"), "y": _param(p, "y")},
               {"type": "mouse_up", "button": "left"}]
    elif kind == "SCROLL":
        out = [{"type": "scroll", "dx": int(p.get("dx", 0)), "dy": -int(p.get("dy", 0))}]
    elif kind == "TYPING":
        out = [{"type": "type_text", "text": str(_param(p, "text"))}]
    elif kind == "PRESS":
        out = [{"type": "key", "keys": from_pyautogui_key(str(_param(p, "key")))}]
    elif kind in ("KEY_DOWN", "KEY_UP"):
        out = [{"type": kind.lower(), "key": from_pyautogui_key(str(_param(p, "key")))}]
    elif kind == "HOTKEY":
        keys = _param(p, "keys")
        if not isinstance(keys, list) or not keys:
            raise UnsupportedActionError(f"{SCHEMA}: HOTKEY needs a list of keys", field="keys")
        out = [{"type": "key", "keys": "+".join(from_pyautogui_key(str(k)) for k in keys)}]
    elif kind == "WAIT":
        out = [{"type": "wait", "ms": wait_ms}]
    elif kind in ("DONE", "FAIL"):
        raise EpisodeSignal(kind)
    else:
        raise UnsupportedActionError(f"{SCHEMA}: unknown action_type {kind!r}; known: {', '.join(ACTION_TYPES)}",
                                     field="action_type")
    return out


def to_osworld(action: dict[str, Any]) -> list[dict[str, Any]]:
    a = parse_action(action)

    def act(kind: str, **parameters: Any) -> dict[str, Any]:
        return {"action_type": kind, "parameters": parameters}

    if a.type == "mouse_move":
        return [act("MOVE_TO", x=a.x, y=a.y)]
    if a.type == "click" and not a.modifiers:
        position = {"x": a.x, "y": a.y} if a.x is not None else {}
        return [act("CLICK", button=a.button, num_clicks=a.count, **position)]
    if a.type in ("mouse_down", "mouse_up"):
        return [act(a.type.upper(), button=a.button)]
    if a.type == "drag" and a.button == "left" and not a.modifiers:
        (x0, y0), *rest = a.path
        if len(rest) == 1:
            return [act("MOVE_TO", x=x0, y=y0), act("DRAG_TO", x=rest[0][0], y=rest[0][1])]
        # DRAG_TO goes straight to one point; a path goes through the button held across its moves.
        return ([act("MOVE_TO", x=x0, y=y0), act("MOUSE_DOWN", button="left")]
                + [act("MOVE_TO", x=x, y=y) for x, y in rest] + [act("MOUSE_UP", button="left")])
    if a.type == "scroll" and not a.modifiers:
        moves = [act("MOVE_TO", x=a.x, y=a.y)] if a.x is not None else []
        return moves + [act("SCROLL", dx=a.dx, dy=-a.dy)]
    if a.type == "type_text":
        return [act("TYPING", text=a.text)]
    if a.type == "key" and a.repeat == 1:
        out = []
        for combo in a.combos:
            parts = to_pyautogui_keys(combo)
            out.append(act("PRESS", key=parts[0]) if len(parts) == 1 else act("HOTKEY", keys=parts))
        return out
    if a.type in ("key_down", "key_up"):
        return [act(a.type.upper(), key=to_pyautogui_keys(a.key)[0])]
    if a.type == "wait":
        return [act("WAIT")]
    raise UnsupportedActionError(f"{SCHEMA} has no equivalent of this {a.type!r}", field="type")
