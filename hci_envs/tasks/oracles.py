"""Scripted solutions of the built-in tasks: generators of actions (one step each) that read the task apps'
state files to aim. Each must score 1.0; they are the suite's own test that every task is solvable."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ActionTimeoutError

Script = Callable[[Any], Iterator[Any]]
ORACLES: dict[str, Script] = {}


def oracle(task_id: str) -> Callable[[Script], Script]:
    def register(fn: Script) -> Script:
        ORACLES[task_id] = fn
        return fn

    return register


def _state(ctx: Any, path: str) -> Iterator[Any]:
    """Wait (one step at a time) until the app has written its state; the last value is the state."""
    for _ in range(50):
        state = ctx.read_json(path)
        if state and state.get("ready"):
            yield state
            return
        yield {"type": "wait", "ms": 100}
    raise ActionTimeoutError(f"the app never wrote {path}", path=path)


def _center(box: list[int]) -> dict[str, int]:
    return {"x": box[0] + box[2] // 2, "y": box[1] + box[3] // 2}


def _form(ctx: Any) -> Iterator[Any]:
    for item in _state(ctx, ".form.json"):
        if isinstance(item, dict) and item.get("type") == "wait":
            yield item
        else:
            return item  # noqa: B901 - the generator's return value is the state


def _fill(widgets: dict[str, list[int]], field: str, text: str) -> Iterator[Any]:
    # The click is its own step with a pause after it: the window manager may hold the first click on a window
    # it has not focused yet while it raises it, and keys sent in the same instant would land in the old focus.
    yield [{"type": "click", **_center(widgets[field])}, {"type": "wait", "ms": 150}]
    yield [{"type": "key", "keys": "ctrl+a"}, {"type": "type_text", "text": text}]


def _fill_form(ctx: Any, fields: list[tuple[str, str]], clicks: tuple[str, ...] = ()) -> Iterator[Any]:
    """Type into each named field, click the named widgets, submit."""
    state = yield from _form(ctx)
    w = state["widgets"]
    for name, text in fields:
        yield from _fill(w, name, text)
    if clicks:
        yield [{"type": "click", **_center(w[name])} for name in clicks]
    yield {"type": "click", **_center(w["submit"])}


@oracle("form-contact")
def form_contact(ctx: Any) -> Iterator[Any]:
    return _fill_form(ctx, [("name", "Ada Lovelace"), ("email", "ada@example.org")])


@oracle("form-country")
def form_country(ctx: Any) -> Iterator[Any]:
    state = yield from _form(ctx)
    w = state["widgets"]
    first_row = state["country_rows"]["Argentina"]
    yield [{"type": "click", "x": w["countries"][0] + 20, "y": w["countries"][1] + first_row[1] + first_row[3] // 2},
           {"type": "wait", "ms": 150}]
    yield {"type": "key", "keys": "Down", "repeat": 8}  # Argentina + 8 = Japan
    yield {"type": "click", **_center(w["submit"])}


@oracle("form-plan")
def form_plan(ctx: Any) -> Iterator[Any]:
    return _fill_form(ctx, [("name", "Grace")], clicks=("newsletter", "plan_pro"))


@oracle("form-age")
def form_age(ctx: Any) -> Iterator[Any]:
    return _fill_form(ctx, [("name", "Linus"), ("age", "36")])


def _game(ctx: Any) -> Iterator[Any]:
    for item in _state(ctx, ".game.json"):
        if isinstance(item, dict) and item.get("type") == "wait":
            yield item
        else:
            return item  # noqa: B901


def _walk(start: list[int], goal: list[int]) -> list[dict[str, Any]]:
    dx, dy = goal[0] - start[0], goal[1] - start[1]
    keys = (["Right"] * dx if dx > 0 else ["Left"] * -dx) + (["Down"] * dy if dy > 0 else ["Up"] * -dy)
    return [{"type": "key", "keys": keys}] if keys else []


@oracle("game-goal")
def game_goal(ctx: Any) -> Iterator[Any]:
    state = yield from _game(ctx)
    yield _walk(state["player"], [8, 5])


@oracle("game-coins")
def game_coins(ctx: Any) -> Iterator[Any]:
    state = yield from _game(ctx)
    position = state["player"]
    for coin in sorted(state["coins"]):
        yield _walk(position, coin)
        position = coin


@oracle("game-targets")
def game_targets(ctx: Any) -> Iterator[Any]:
    state = yield from _game(ctx)
    for _ in range(6):  # three hits; a click that missed (the window was moved meanwhile) is made again, as a
        hits = state["hits"]  # player who saw the target stay would
        if hits >= 3:
            return
        canvas, cell, target = state["canvas"], state["cell"], state["target"]
        yield {"type": "click", "x": canvas[0] + target[0] * cell + cell // 2, "y": canvas[1] + target[1] * cell + cell // 2}
        for _ in range(30):  # wait until the game has moved the target
            state = ctx.read_json(".game.json") or state
            if state["hits"] > hits:
                break
            yield {"type": "wait", "ms": 50}


def _terminal(command: str) -> Iterator[Any]:
    yield {"type": "wait", "ms": 300}  # the shell's prompt
    yield {"type": "type_text", "text": command + "\n", "mode": "keys"}
    yield {"type": "wait", "ms": 300}


@oracle("term-hello")
def term_hello(ctx: Any) -> Iterator[Any]:
    yield from _terminal("echo hello world > hello.txt")


@oracle("term-mkdir")
def term_mkdir(ctx: Any) -> Iterator[Any]:
    yield from _terminal("mkdir -p projects/alpha && touch projects/alpha/README")


@oracle("term-count")
def term_count(ctx: Any) -> Iterator[Any]:
    yield from _terminal("wc -l < data.txt > count.txt")


def _editor(ctx: Any, keys: list[Any]) -> Iterator[Any]:
    yield {"type": "wait", "ms": 500}
    for item in keys:
        yield item
    yield {"type": "key", "keys": "ctrl+s"}
    yield {"type": "wait", "ms": 500}


@oracle("edit-append")
def edit_append(ctx: Any) -> Iterator[Any]:
    yield from _editor(ctx, [{"type": "key", "keys": "ctrl+End"}, {"type": "type_text", "text": "done\n", "mode": "keys"}])


@oracle("edit-replace")
def edit_replace(ctx: Any) -> Iterator[Any]:
    yield from _editor(ctx, [{"type": "key", "keys": ["ctrl+Home", "shift+End"]},
                             {"type": "type_text", "text": "DONE: write report", "mode": "keys"}])
