"""What the suite's Tk apps share: an atomic JSON state file and widget geometry."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any


def write_state(path: str, state: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, ensure_ascii=False)
    os.replace(tmp, path)


def geometry(widget: Any) -> list[int]:
    """[x, y, width, height] of a widget on the screen."""
    return [widget.winfo_rootx(), widget.winfo_rooty(), widget.winfo_width(), widget.winfo_height()]


def on_screen(root: Any) -> bool:
    """Whether the app's window is shown, so that its widgets' places are where a click lands: before it is
    mapped, Tk gives places the window manager has not settled yet (an oracle that clicked where the first state
    said missed, on a loaded machine). The state files say "ready" only from then on."""
    return bool(root.winfo_viewable())


def save_every(root: Any, save: Callable[[], None], ms: int = 150) -> None:
    """Write the app's state shortly after start and every ``ms`` from then on: the window's places as they are
    now (the window manager may move it), also while nobody acts."""
    def tick() -> None:
        save()
        root.after(ms, tick)

    root.after(50, tick)
