"""Set-of-marks: numbered boxes drawn over a screenshot on the elements an agent can act on.

A mark's number is the element number of the accessibility tree read with it, so ``click(element=7)`` acts
on the box labelled 7. Boxes come in the screenshot's own pixels (the tree was read at its scale).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from PIL import ImageDraw, ImageFont

from .encode import Frame

#: Outline colours, by mark number: strong, and distinct from their neighbours.
PALETTE = ((230, 25, 75), (60, 140, 60), (0, 110, 220), (245, 130, 48), (145, 30, 180), (0, 150, 150),
           (200, 40, 160), (120, 100, 0), (0, 0, 128), (128, 0, 0))


@lru_cache(maxsize=8)
def _font(size: int) -> Any:
    return ImageFont.load_default(size=size)


def draw_marks(frame: Frame, marks: list[dict[str, Any]]) -> Frame:
    """``frame`` with each mark's ``box`` outlined and its ``element`` number in a tag at its top left corner:
    inside a box tall enough to hold it beside its content (a tag above a box in a tight column would read as
    the label of the box above), else just above it."""
    if not marks:
        return frame
    image = frame.to_pil()
    draw = ImageDraw.Draw(image)
    size = max(11, min(16, frame.height // 50))
    font = _font(size)
    for mark in marks:
        x, y, w, h = mark["box"]
        colour = PALETTE[mark["element"] % len(PALETTE)]
        draw.rectangle((x, y, x + w - 1, y + h - 1), outline=colour, width=2)
        label = str(mark["element"])
        left, top, right, bottom = draw.textbbox((0, 0), label, font=font)
        tw, th = right - left + 4, bottom - top + 2
        ty = y if h >= 2 * th or y - th < 0 else y - th
        tx = min(max(x, 0), max(frame.width - tw, 0))
        draw.rectangle((tx, ty, tx + tw - 1, ty + th - 1), fill=colour)
        draw.text((tx + 2 - left, ty + 1 - top), label, fill=(255, 255, 255), font=font)
    return Frame.from_pil(image)


def mark_table(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The marks of a tree read for marking: every interactive element with a box."""
    return [{"element": n["element"], "role": n["role"], "name": n["name"], "box": n["box"]}
            for n in nodes if n.get("box") and n.get("interactive")]

