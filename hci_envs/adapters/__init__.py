"""Translators between the canonical actions and the computer-use schemas agents already speak.

    from hci_envs.adapters import anthropic, openai, osworld_actions
    actions = anthropic.from_anthropic({"action": "left_click", "coordinate": [512, 384]}, scale=0.8)
    payload = openai.to_openai({"type": "click", "x": 10, "y": 20})

``from_*`` returns a list of canonical action dicts (a foreign action can take several of ours); ``to_*``
returns the foreign payload. A model shown screenshots scaled down works in their pixels: give ``from_*`` the
factor as ``scale`` (image pixels per screen pixel, as our screenshots report it) and every coordinate it
sends is mapped to the screen, and what it asks to see comes back in its own space (screenshots,
Anthropic's ``cursor_position``, OSWorld's observations). Anything without a faithful translation is refused with
:class:`UnsupportedActionError`, which names the action. OSWorld's DONE and FAIL are not desktop actions:
they raise :class:`EpisodeSignal` carrying the status. Client-side: no server packages needed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..errors import HciEnvsError, InvalidActionError, UnsupportedActionError


class EpisodeSignal(Exception):
    """An agent's "done" or "fail": the end of its episode, not an action for the desktop."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


def require(payload: dict, key: str, schema: str) -> object:
    if key not in payload:
        raise InvalidActionError(f"{schema} action {payload.get('action') or payload.get('type') or payload.get('action_type')!r} "
                                 f"needs '{key}'", field=key)
    return payload[key]


def with_scale(action: dict[str, Any], scale: float | None) -> dict[str, Any]:
    """``action`` (one with coordinates, a screenshot, cursor_position) in a model's space at ``scale``: the
    executor maps its coordinates to the screen, takes its screenshot at that scale, answers in that space."""
    if scale is not None and scale != 1:
        action["scale"] = scale
    return action


def parse_for(schema: str, action: dict[str, Any]) -> Any:
    """A canonical action to translate into ``schema``: validated, and acting at coordinates (an element
    number names a widget of one episode's latest observation, which no other schema can carry)."""
    from ..actions import parse_action

    a = parse_action(action)
    if getattr(a, "element", None) is not None:
        raise UnsupportedActionError(f"{schema} has no element numbers: give this {a.type!r} coordinates (a "
                                     "recorded episode keeps the coordinates an element was clicked at)",
                                     field="element")
    return a


def translator(schema: str) -> Callable[[Callable[..., list[dict[str, Any]]]], Callable[..., list[dict[str, Any]]]]:
    """Wrap a ``from_*`` translator: a malformed payload raises InvalidActionError naming the schema (never a
    raw KeyError or TypeError), and every action it produces is checked against the vocabulary."""
    from ..actions import parse_action

    def wrap(fn: Callable[..., list[dict[str, Any]]]) -> Callable[..., list[dict[str, Any]]]:
        @functools.wraps(fn)
        def translate(payload: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
            if not isinstance(payload, dict):
                raise InvalidActionError(f"{schema}: an action is a JSON object, not {type(payload).__name__}")
            try:
                out = fn(payload, *args, **kwargs)
            except (HciEnvsError, EpisodeSignal):
                raise
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
                shown = repr(payload)
                shown = shown if len(shown) <= 200 else shown[:200] + "..."
                raise InvalidActionError(f"{schema}: malformed action {shown}: {exc}") from None
            for action in out:
                parse_action(action)
            return out

        return translate

    return wrap


__all__ = ["EpisodeSignal", "UnsupportedActionError", "require", "translator", "with_scale"]
