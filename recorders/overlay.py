"""What an episode video draws over a screen: the pointer where an action happened, the path it moved along,
and the action as a short label (``click 512,320``, ``type_text "héllo"``, ``key ctrl+shift+t``).

Actions are the canonical dicts of actions.jsonl (checked by ``load_episode``); coordinates given in a
screenshot's scaled space (``scale``) are mapped back to the screen, as the executor maps them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

Point = tuple[int, int]

#: Longest label, in characters, before it is cut with an ellipsis.
MAX_LABEL_CHARS = 80
#: Colours of the marks: a click's ring by button, a drag's path, the pointer's path before an action.
BUTTON_COLOURS = {"left": (255, 45, 85), "right": (40, 120, 255), "middle": (40, 200, 90)}
DRAG_COLOUR = (255, 150, 0)
MOVE_COLOUR = (255, 230, 0)
SCROLL_COLOUR = (170, 90, 255)
# The arrow of a pointer, tip at (0, 0), in pixels at scale 1.
_ARROW = [(0, 0), (0, 21), (5, 16), (9, 25), (13, 23), (9, 15), (16, 15)]

# Fonts are picked per label: DejaVu has the symbols, Noto Sans CJK the Han, kana and hangul (Pillow does no
# per-glyph fallback). Both come with the desktop's system packages; Pillow's own font is the last resort.
_LATIN_FONTS = ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",)
_CJK_FONTS = ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
              "/usr/share/fonts/opentype/noto/NotoSansCJK-Medium.ttc")


def _scaled(action: dict[str, Any], x: float, y: float) -> Point:
    scale = action.get("scale") or 1.0
    return round(x / scale), round(y / scale)


def action_point(action: dict[str, Any]) -> Point | None:
    """Where on the screen an action put the pointer, if it says."""
    kind = action["type"]
    if kind == "drag":
        return _scaled(action, *action["path"][-1])
    if kind in ("click", "scroll", "mouse_move") and action.get("x") is not None and action.get("y") is not None:
        return _scaled(action, action["x"], action["y"])
    return None


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def action_label(action: dict[str, Any]) -> str:
    """A short human-readable line for an action."""
    kind = action["type"]
    point = action_point(action)
    at = f" {point[0]},{point[1]}" if point is not None else ""
    mods = "".join(f"{m}+" for m in action.get("modifiers") or [])
    if kind == "click":
        button = action.get("button", "left")
        count = {1: "", 2: "double ", 3: "triple "}[action.get("count", 1)]
        name = f"{count}{'' if button == 'left' else button + ' '}click"
        return f"{mods}{name}{at}"
    if kind == "drag":
        start = _scaled(action, *action["path"][0])
        button = action.get("button", "left")
        return f"{mods}drag{'' if button == 'left' else ' ' + button} {start[0]},{start[1]} → {point[0]},{point[1]}"
    if kind == "scroll":
        parts = [f"{'down' if dy > 0 else 'up'} {abs(dy)}" for dy in [action.get("dy", 0)] if dy]
        parts += [f"{'right' if dx > 0 else 'left'} {abs(dx)}" for dx in [action.get("dx", 0)] if dx]
        return f"{mods}scroll{at} {', '.join(parts)}"
    if kind in ("type_text", "clipboard_set"):
        return f"{kind} {_quote(action['text'])}"
    if kind == "key":
        keys = action["keys"]
        text = ", ".join(keys) if isinstance(keys, list) else keys
        repeat = action.get("repeat", 1)
        return f"key {text}" + (f" ×{repeat}" if repeat > 1 else "")
    if kind in ("key_down", "key_up"):
        return f"{kind} {action['key']}"
    if kind == "hold_key":
        return f"hold_key {action['keys']} {action['seconds']:g}s"
    if kind == "wait":
        return f"wait {action['ms']} ms"
    if kind in ("mouse_down", "mouse_up"):
        return f"{kind} {action.get('button', 'left')}"
    if kind == "mouse_move":
        return f"mouse_move{at}"
    return kind


def _is_cjk(ch: str) -> bool:
    o = ord(ch)
    return (0x2E80 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF or 0xF900 <= o <= 0xFAFF or 0xFF00 <= o <= 0xFFEF
            or 0x20000 <= o <= 0x3FFFF)


@lru_cache(maxsize=16)
def _font(size: int, cjk: bool) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    for path in (_CJK_FONTS if cjk else ()) + _LATIN_FONTS + _CJK_FONTS:
        if Path(path).exists():
            return ImageFont.truetype(path, size)
    return ImageFont.load_default(size)


def font_for(text: str, size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return _font(size, any(_is_cjk(ch) for ch in text))


@dataclass(frozen=True)
class Mark:
    """What to draw on one video frame: the pointer (and the action's marks) and the label."""

    label: str
    pointer: Point | None = None
    action: dict[str, Any] | None = None
    moved: tuple[Point, ...] = ()  # the path the pointer took to get there (a human's moves before the action)
    counter: str = ""  # "3/12": the step among the episode's
    arrow: bool = True  # draw a pointer (off where the capture has the real one)


def label_size(height: int) -> int:
    """The label's font size for a screen ``height`` pixels high."""
    return max(14, height // 42)


def label_box(screen: tuple[int, int], text_width: int, pointer: Point | None) -> tuple[int, int, int, int]:
    """Where the label goes: bottom left, or top left when the pointer is down there (it must stay visible)."""
    width, height = screen
    size = label_size(height)
    pad, margin = size // 2, size // 2
    w, h = text_width + 2 * pad, size + 2 * pad
    box = (margin, height - margin - h, margin + w, height - margin)
    if pointer is not None and box[0] - 40 <= pointer[0] <= box[2] + 40 and pointer[1] >= box[1] - 40:
        box = (margin, margin, margin + w, margin + h)
    return box


def _fit(text: str, font: Any, max_width: int) -> str:
    if len(text) > MAX_LABEL_CHARS:
        text = text[: MAX_LABEL_CHARS - 1] + "…"
    while len(text) > 1 and font.getlength(text) > max_width:
        text = text[: max(1, len(text) - max(1, len(text) // 10)) - 1] + "…"
    return text


def draw_label(image: Image.Image, text: str, counter: str, pointer: Point | None) -> tuple[int, int, int, int]:
    """The label on a darkened box; returns the box."""
    size = label_size(image.height)
    font = font_for(text, size)
    lead = f"{counter}  " if counter else ""
    text = _fit(text, font, image.width - 3 * size - int(font.getlength(lead)))
    text_width = int(font.getlength(lead + text)) + 1
    box = label_box(image.size, text_width, pointer)
    box = (box[0], box[1], min(box[2], image.width), min(box[3], image.height))
    region = image.crop(box)
    image.paste(Image.blend(region, Image.new("RGB", region.size, (0, 0, 0)), 0.72), box[:2])
    draw = ImageDraw.Draw(image)
    pad = size // 2
    x, y = box[0] + pad, box[1] + pad - size // 8
    if lead:
        draw.text((x, y), lead, font=font, fill=(170, 170, 170))
        x += int(font.getlength(lead))
    draw.text((x, y), text, font=font, fill=(255, 255, 255))
    return box


def draw_pointer(draw: ImageDraw.ImageDraw, at: Point, size: float) -> None:
    x, y = at
    outline = [(x + px * size, y + py * size) for px, py in _ARROW]
    draw.polygon(outline, fill=(255, 255, 255), outline=(0, 0, 0), width=max(1, round(size * 1.5)))


def _ring(draw: ImageDraw.ImageDraw, at: Point, radius: float, colour: tuple[int, int, int], width: int) -> None:
    x, y = at
    draw.ellipse((x - radius, y - radius, x + radius, y + radius), outline=colour, width=width)


def draw_mark(image: Image.Image, mark: Mark) -> Image.Image:
    """Draw ``mark`` on ``image`` (RGB, changed in place) and return it."""
    draw = ImageDraw.Draw(image)
    size = max(1.0, image.height / 600)  # marks grow with the screen, so they stay visible when it is shown small
    width = max(2, round(2 * size))
    action = mark.action or {}
    if len(mark.moved) > 1:
        draw.line(list(mark.moved), fill=MOVE_COLOUR, width=max(1, width // 2))
    kind = action.get("type")
    if kind == "drag":
        path = [_scaled(action, *p) for p in action["path"]]
        draw.line(path, fill=DRAG_COLOUR, width=width + 1, joint="curve")
        _ring(draw, path[0], 6 * size, DRAG_COLOUR, width)
    elif kind == "click" and mark.pointer is not None:
        colour = BUTTON_COLOURS.get(action.get("button", "left"), BUTTON_COLOURS["left"])
        for n in range(action.get("count", 1)):
            _ring(draw, mark.pointer, (12 + 7 * n) * size, colour, width + 1)
    elif kind == "scroll" and mark.pointer is not None:
        _ring(draw, mark.pointer, 12 * size, SCROLL_COLOUR, width + 1)
    elif kind in ("mouse_down", "mouse_up") and mark.pointer is not None:
        colour = BUTTON_COLOURS.get(action.get("button", "left"), BUTTON_COLOURS["left"])
        r = 6 * size
        x, y = mark.pointer
        draw.ellipse((x - r, y - r, x + r, y + r), fill=colour if kind == "mouse_down" else None, outline=colour,
                     width=width)
    if mark.pointer is not None and mark.arrow:
        draw_pointer(draw, mark.pointer, size)
    if mark.label:
        draw_label(image, mark.label, mark.counter, mark.pointer)
    return image


__all__ = ["Mark", "action_label", "action_point", "draw_mark", "label_box", "label_size"]
