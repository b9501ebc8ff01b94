"""Anthropic's computer tool (``computer_20250124``, and ``computer_20251124`` with ``zoom``) and the canonical
actions.

Coordinates: the computer-use demo shows the model a screenshot scaled down to a target resolution and
takes its coordinates in that space; pass the factor as ``scale`` (image pixels per screen pixel, as our
screenshots report it). Everything then happens in the model's space: clicks and drags are mapped back to
the screen by the executor, screenshots are taken at that scale, ``cursor_position`` answers in it, and
``zoom`` (a region given in it) is captured at full resolution.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidActionError
from . import UnsupportedActionError, parse_for, require, translator, with_scale

SCHEMA = "Anthropic computer_20250124/computer_20251124"
_CLICKS = {"left_click": ("left", 1), "right_click": ("right", 1), "middle_click": ("middle", 1),
           "double_click": ("left", 2), "triple_click": ("left", 3)}
_SCROLL = {"up": ("dy", -1), "down": ("dy", 1), "left": ("dx", -1), "right": ("dx", 1)}


def _xy(payload: dict[str, Any], schema: str, key: str = "coordinate") -> tuple[int, int]:
    value = require(payload, key, schema)
    if not (isinstance(value, list | tuple) and len(value) == 2):
        raise UnsupportedActionError(f"{schema}: {key} must be [x, y], not {value!r}", field=key)
    return int(value[0]), int(value[1])


def held_modifiers(payload: dict[str, Any]) -> list[str]:
    """The keys a pointer action holds, from its ``text`` ("ctrl+shift")."""
    text = payload.get("text")
    return [m for m in text.split("+") if m] if text else []


def _pointer(out: dict[str, Any], payload: dict[str, Any], scale: float | None, schema: str) -> dict[str, Any]:
    """A click or scroll: at the payload's coordinate if it has one, with the modifiers held in its text."""
    if "coordinate" in payload:
        out["x"], out["y"] = _xy(payload, schema)
    if payload.get("text"):
        out["modifiers"] = held_modifiers(payload)
    return with_scale(out, scale)


@translator(SCHEMA)
def from_anthropic(payload: dict[str, Any], *, scale: float | None = None) -> list[dict[str, Any]]:
    return translate_action(payload, scale=scale)


def translate_action(payload: dict[str, Any], *, scale: float | None = None,
                     schema: str = SCHEMA) -> list[dict[str, Any]]:
    """The canonical actions of one action, ``payload["action"]``, errors naming ``schema``: the computer tool's
    actions, and the computer toolset's members, which take the same inputs (:mod:`.anthropic_toolset`)."""
    action = payload.get("action")
    if action in _CLICKS:
        button, count = _CLICKS[action]
        return [_pointer({"type": "click", "button": button, "count": count}, payload, scale, schema)]
    if action == "mouse_move":
        x, y = _xy(payload, schema)
        return [with_scale({"type": "mouse_move", "x": x, "y": y}, scale)]
    if action == "left_click_drag":
        start, end = _xy(payload, schema, "start_coordinate"), _xy(payload, schema)
        return [with_scale({"type": "drag", "path": [list(start), list(end)]}, scale)]
    if action in ("left_mouse_down", "left_mouse_up"):
        return [{"type": "mouse_down" if action == "left_mouse_down" else "mouse_up", "button": "left"}]
    if action == "type":
        return [{"type": "type_text", "text": str(require(payload, "text", schema))}]
    if action == "key":
        combos = str(require(payload, "text", schema)).split()  # xdotool style: "ctrl+a BackSpace"
        if not combos:
            raise InvalidActionError(f"{schema}: key needs key names in 'text'", field="text")
        return [with_scale({"type": "key", "keys": combos if len(combos) > 1 else combos[0]}, None)]
    if action == "hold_key":
        return [with_scale({"type": "hold_key", "keys": str(require(payload, "text", schema)),
                             "seconds": float(require(payload, "duration", schema))}, None)]
    if action == "scroll":
        direction = require(payload, "scroll_direction", schema)
        if direction not in _SCROLL:
            raise UnsupportedActionError(f"{schema}: scroll_direction {direction!r} is not up, down, left or right",
                                         field="scroll_direction")
        axis, sign = _SCROLL[direction]
        amount = int(payload.get("scroll_amount", 1))
        return [_pointer({"type": "scroll", axis: sign * amount}, payload, scale, schema)]
    if action == "wait":
        return [{"type": "wait", "ms": int(round(float(require(payload, "duration", schema)) * 1000))}]
    if action == "screenshot":
        return [with_scale({"type": "screenshot"}, scale)]
    if action == "cursor_position":
        return [with_scale({"type": "cursor_position"}, scale)]
    if action == "zoom":  # computer_20251124: a region of the model's screenshot, at full resolution
        region = require(payload, "region", schema)
        if not (isinstance(region, list | tuple) and len(region) == 4
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in region)):
            raise UnsupportedActionError(f"{schema}: zoom region must be [x0, y0, x1, y1], not {region!r}",
                                         field="region")
        factor = scale if scale else 1.0
        x0, y0, x1, y1 = (int(round(v / factor)) for v in region)
        if x1 <= x0 or y1 <= y0:
            raise InvalidActionError(f"{schema}: zoom region {region!r} is empty (x1 > x0 and y1 > y0 needed)",
                                     field="region")
        return [{"type": "screenshot", "region": {"x": x0, "y": y0, "width": x1 - x0, "height": y1 - y0}}]
    raise UnsupportedActionError(f"{schema}: unknown action {action!r}", field="action")


def _anthropic_pointer(out: dict[str, Any], a: Any) -> dict[str, Any]:
    if a.x is not None:
        out["coordinate"] = [a.x, a.y]
    if a.modifiers:
        out["text"] = "+".join(a.modifiers)
    return out


def to_anthropic(action: dict[str, Any]) -> dict[str, Any]:
    a = parse_for(SCHEMA, action)
    kind = a.type
    if kind == "click":
        name = {("left", 1): "left_click", ("right", 1): "right_click", ("middle", 1): "middle_click",
                ("left", 2): "double_click", ("left", 3): "triple_click"}.get((a.button, a.count))
        if name is None:
            raise UnsupportedActionError(f"{SCHEMA} has no {a.button} click x{a.count}", field="button")
        return _anthropic_pointer({"action": name}, a)
    if kind == "mouse_move":
        return {"action": "mouse_move", "coordinate": [a.x, a.y]}
    if kind == "drag":
        if len(a.path) != 2 or a.button != "left" or a.modifiers:
            raise UnsupportedActionError(f"{SCHEMA} drags with the left button between two points only", field="path")
        return {"action": "left_click_drag", "start_coordinate": list(a.path[0]), "coordinate": list(a.path[1])}
    if kind in ("mouse_down", "mouse_up"):
        if a.button != "left":
            raise UnsupportedActionError(f"{SCHEMA} holds the left button only", field="button")
        return {"action": "left_mouse_down" if kind == "mouse_down" else "left_mouse_up"}
    if kind == "type_text":
        return {"action": "type", "text": a.text}
    if kind == "key":
        if a.repeat != 1:
            raise UnsupportedActionError(f"{SCHEMA} has no key repeat", field="repeat")
        return {"action": "key", "text": " ".join(a.combos)}
    if kind == "hold_key":
        return {"action": "hold_key", "text": a.keys, "duration": a.seconds}
    if kind == "scroll":
        if a.dx and a.dy:
            raise UnsupportedActionError(f"{SCHEMA} scrolls one axis at a time", field="dx")
        direction = ("down" if a.dy > 0 else "up") if a.dy else ("right" if a.dx > 0 else "left")
        amount = abs(a.dy or a.dx)
        return _anthropic_pointer({"action": "scroll", "scroll_direction": direction, "scroll_amount": amount}, a)
    if kind == "wait":
        return {"action": "wait", "duration": a.ms / 1000}
    if kind == "screenshot" and a.region is not None:
        r = a.region
        return {"action": "zoom", "region": [r.x, r.y, r.x + r.width, r.y + r.height]}
    if kind in ("screenshot", "cursor_position"):
        return {"action": kind}
    raise UnsupportedActionError(f"{SCHEMA} has no equivalent of {kind!r}", field="type")
