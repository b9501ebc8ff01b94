"""Pieces the suite's templates share: words and names to draw from, and the oracles' moves.

An oracle is a generator of steps (an action or a list of actions each); it may look at the session as a
privileged agent would (the home's files, the accessibility tree) to aim, and waits by yielding ``wait``
steps, so that a task's time and step limits bound it like any agent.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...errors import ActionTimeoutError

WORDS = ("amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper", "kelp",
         "lantern", "maple", "nectar", "orchid", "pepper", "quartz", "raven", "saffron", "tundra", "umber",
         "velvet", "willow", "yarrow", "zephyr", "copper", "meadow", "pebble", "thistle", "walnut")
FIRST_NAMES = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Margaret", "Dennis",
               "Radia", "Tim", "Hedy", "John", "Katherine", "Linus", "Sophie", "Niklaus", "Karen", "Bjarne")
LAST_NAMES = ("Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov", "Knuth", "Allen", "Thompson", "Hamilton",
              "Ritchie", "Perlman", "Berners-Lee", "Lamarr", "Backus", "Johnson", "Torvalds", "Wilson", "Wirth",
              "Jones", "Stroustrup")
CITIES = ("Lisbon", "Oslo", "Quito", "Hanoi", "Nairobi", "Lima", "Perth", "Tallinn", "Accra", "Osaka", "Porto",
          "Dakar", "Bergen", "Cusco", "Malmo", "Izmir")
PRODUCTS = ("stapler", "notebook", "lamp", "kettle", "umbrella", "backpack", "headphones", "mug", "scissors",
            "calendar", "charger", "blanket", "teapot", "compass", "thermos")

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")

Step = Any
log = logging.getLogger(__name__)


def words(rng: random.Random, n: int) -> list[str]:
    return rng.sample(WORDS, n)


def person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def wait(ms: int) -> dict[str, Any]:
    return {"type": "wait", "ms": ms}


def key(keys: str | list[str], repeat: int = 1) -> dict[str, Any]:
    return {"type": "key", "keys": keys, "repeat": repeat}


def type_text(text: str, mode: str = "auto") -> dict[str, Any]:
    return {"type": "type_text", "text": text, "mode": mode}


def click(x: int, y: int, count: int = 1, button: str = "left") -> dict[str, Any]:
    return {"type": "click", "x": x, "y": y, "count": count, "button": button}


def home(ctx: Any) -> Path:
    return Path(ctx.env.home)


#: The longest wait between two looks of an oracle's ``until``: a wait of a minute costs about 20 steps.
LONGEST_POLL_MS = 4000


def until(predicate: Callable[[], Any], what: str, timeout: float = 15.0, every_ms: int = 200) -> Iterator[Step]:
    """Wait steps until ``predicate()`` holds; its value is the generator's return value. The waits grow by half
    each time (up to :data:`LONGEST_POLL_MS`) as the wait drags on: every wait is a step of the task's budget,
    and a loaded machine, on which an office suite takes half a minute to show its document, must not make an
    oracle run out of steps (at one second a poll it did: 30 steps gone before the first key)."""
    waited = 0
    step = every_ms
    while True:
        value = predicate()
        if value:
            return value
        if waited >= timeout * 1000:
            raise ActionTimeoutError(f"the oracle waited {timeout:g}s for {what}")
        step = min(step, max(1, int(timeout * 1000) - waited))  # not past the timeout
        yield wait(step)
        waited += step
        step = min(max(step + 1, int(step * 1.5)), max(every_ms, LONGEST_POLL_MS))


def tree(ctx: Any, **query: Any) -> list[dict[str, Any]]:
    """The accessibility tree's nodes now (boxes in screen pixels); the oracle's numbers, not the agent's."""
    from ...desktop.a11y_model import Query

    accessibility = getattr(ctx.env.desktop, "accessibility", None)
    if accessibility is None:
        return []
    read = accessibility.tree(Query(**query), remember=False)
    if read.left_out:
        # an app that did not answer in time is missing from this read: an oracle that then waits in vain for
        # one of its elements says why in the log rather than only that it waited
        log.warning("the oracle's tree (%s): %s", query, "; ".join(read.left_out))
    return read.nodes


def find(ctx: Any, role: str | None = None, name: str | None = None, *, app: str | None = None,
         contains: str | None = None, timeout: float = 20.0) -> Iterator[Step]:
    """Wait until an element on screen matches, and return its node."""

    def look() -> dict[str, Any] | None:
        for node in tree(ctx, app=app):
            if role is not None and node["role"] != role:
                continue
            if name is not None and node["name"] != name:
                continue
            if contains is not None and contains not in node["name"]:
                continue
            if on_screen(node):
                return node
        return None

    return (yield from until(look, f"{role or 'an element'} {name or contains or ''} on screen", timeout))


def on_screen(node: dict[str, Any]) -> bool:
    """Whether a node has a box with an area (one a click can land on)."""
    return bool(node.get("box")) and node["box"][2] > 0 and node["box"][3] > 0


def centre(node: dict[str, Any]) -> tuple[int, int]:
    x, y, w, h = node["box"]
    return x + w // 2, y + h // 2


def click_on(ctx: Any, role: str | None = None, name: str | None = None, *, app: str | None = None,
             contains: str | None = None, count: int = 1) -> Iterator[Step]:
    node = yield from find(ctx, role, name, app=app, contains=contains)
    x, y = centre(node)
    yield click(x, y, count)
    return node


def current(ctx: Any, node: dict[str, Any], *, app: str) -> dict[str, Any] | None:
    """``node`` as the tree shows it now (the element of its role at its box), or None if it is not there."""
    return next((n for n in tree(ctx, app=app) if n["role"] == node["role"] and n.get("box") == node.get("box")),
                None)


def click_into(ctx: Any, node: dict[str, Any], *, app: str, timeout: float = 20.0) -> Iterator[Step]:
    """Click a field and wait until the accessibility tree says it has the keyboard focus. Keys sent right after
    a click go wherever the focus is when the app handles them, and on a loaded machine an app may handle the
    click later than X delivered it."""
    yield click(*centre(node))

    def focused() -> bool:
        now = current(ctx, node, app=app)
        return now is not None and "focused" in now.get("states", ())

    yield from until(focused, f"the {node['role']} clicked to take the focus", timeout)


def file_text(ctx: Any, relative: str) -> str | None:
    try:
        return (home(ctx) / relative).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def saved(ctx: Any, relative: str, check: Callable[[bytes], bool] = lambda data: bool(data),
          timeout: float = 20.0) -> Iterator[Step]:
    """Wait until the app has written ``relative`` (and ``check`` holds of its bytes)."""

    def written() -> bool:
        try:
            return check((home(ctx) / relative).read_bytes())
        except OSError:
            return False

    yield from until(written, f"{relative} to be saved", timeout)
