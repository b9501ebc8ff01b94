"""OpenAI's computer-use actions and the canonical actions.

OpenAI scrolls by pixels (``scroll_x``, ``scroll_y``); one wheel click is ``pixels_per_click`` pixels of the
screen (100 by default, what browsers use). ``keypress`` names keys in capitals ("CTRL", "ENTER",
"ARROWLEFT"); see :mod:`.keynames`.

Coordinates: a model shown screenshots scaled down clicks in their pixels; pass the factor as ``scale``
(image pixels per screen pixel, as our screenshots report it) to :func:`from_openai`. Clicks, moves, drags
and scroll positions are then mapped back to the screen, scroll distances too (``scroll_y`` pixels of the
image are ``scroll_y / scale`` pixels of the screen), and ``screenshot`` is taken at that scale.
"""

from __future__ import annotations

from typing import Any

from . import UnsupportedActionError, parse_for, require, translator, with_scale
from .keynames import from_openai_key, to_openai_keys

SCHEMA = "OpenAI computer-use"
_BUTTONS = {"left": "left", "right": "right", "wheel": "middle", "middle": "middle"}


def _point(payload: dict[str, Any]) -> tuple[int, int]:
    return int(require(payload, "x", SCHEMA)), int(require(payload, "y", SCHEMA))


@translator(SCHEMA)
def from_openai(payload: dict[str, Any], *, pixels_per_click: int = 100,
                scale: float | None = None) -> list[dict[str, Any]]:
    kind = payload.get("type")
    out: list[dict[str, Any]]
    if kind == "click":
        button = payload.get("button", "left")
        if button not in _BUTTONS:
            raise UnsupportedActionError(f"{SCHEMA}: the {button!r} button has no equivalent here", field="button")
        x, y = _point(payload)
        out = [with_scale({"type": "click", "x": x, "y": y, "button": _BUTTONS[button]}, scale)]
    elif kind == "double_click":
        x, y = _point(payload)
        out = [with_scale({"type": "click", "x": x, "y": y, "count": 2}, scale)]
    elif kind == "scroll":
        x, y = _point(payload)
        screen_pixels = pixels_per_click * (scale or 1.0)  # a wheel click, in the image's pixels
        dx = round(int(payload.get("scroll_x", 0)) / screen_pixels)
        dy = round(int(payload.get("scroll_y", 0)) / screen_pixels)
        if dx == 0 and dy == 0:  # less than a click: a single click in its direction
            dx = (payload.get("scroll_x", 0) > 0) - (payload.get("scroll_x", 0) < 0)
            dy = (payload.get("scroll_y", 0) > 0) - (payload.get("scroll_y", 0) < 0)
        out = [with_scale({"type": "scroll", "x": x, "y": y, "dx": dx, "dy": dy}, scale)]
    elif kind == "type":
        out = [{"type": "type_text", "text": str(require(payload, "text", SCHEMA))}]
    elif kind == "wait":
        out = [{"type": "wait", "ms": int(payload.get("ms", 1000))}]
    elif kind == "move":
        x, y = _point(payload)
        out = [with_scale({"type": "mouse_move", "x": x, "y": y}, scale)]
    elif kind == "keypress":
        keys = require(payload, "keys", SCHEMA)
        if not isinstance(keys, list) or not keys:
            raise UnsupportedActionError(f"{SCHEMA}: keypress needs a non-empty list of keys", field="keys")
        out = [{"type": "key", "keys": "+".join(from_openai_key(str(k)) for k in keys)}]
    elif kind == "drag":
        path = require(payload, "path", SCHEMA)
        out = [with_scale({"type": "drag", "path": [[int(p["x"]), int(p["y"])] for p in path]}, scale)]
    elif kind == "screenshot":
        out = [with_scale({"type": "screenshot"}, scale)]
    else:
        raise UnsupportedActionError(f"{SCHEMA}: unknown action {kind!r}", field="type")
    return out


def to_openai(action: dict[str, Any], *, pixels_per_click: int = 100) -> dict[str, Any]:
    a = parse_for(SCHEMA, action)
    if a.type == "click":
        if a.x is None or a.modifiers or a.count == 3:
            raise UnsupportedActionError(f"{SCHEMA} clicks need a position, no modifiers, one or two clicks",
                                         field="count")
        if a.count == 2:
            if a.button != "left":
                raise UnsupportedActionError(f"{SCHEMA} double clicks with the left button only", field="button")
            return {"type": "double_click", "x": a.x, "y": a.y}
        return {"type": "click", "x": a.x, "y": a.y, "button": "wheel" if a.button == "middle" else a.button}
    if a.type == "scroll" and a.x is not None and not a.modifiers:
        return {"type": "scroll", "x": a.x, "y": a.y, "scroll_x": a.dx * pixels_per_click,
                "scroll_y": a.dy * pixels_per_click}
    if a.type == "type_text":
        return {"type": "type", "text": a.text}
    if a.type == "wait":
        return {"type": "wait", "ms": a.ms}
    if a.type == "mouse_move":
        return {"type": "move", "x": a.x, "y": a.y}
    if a.type == "key" and isinstance(a.keys, str) and a.repeat == 1:
        return {"type": "keypress", "keys": to_openai_keys(a.keys)}
    if a.type == "drag" and a.button == "left" and not a.modifiers:
        return {"type": "drag", "path": [{"x": x, "y": y} for x, y in a.path]}
    if a.type == "screenshot":
        return {"type": "screenshot"}
    raise UnsupportedActionError(f"{SCHEMA} has no equivalent of this {a.type!r}", field="type")
