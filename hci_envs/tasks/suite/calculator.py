"""Calculator tasks (galculator, GTK): work out a number and leave it on the display.

The checkers read the display, an unnamed text element of the accessibility tree whose text is the value as
galculator shows it (up to 12 significant digits, no trailing zeros: "473.75"). Every answer has decimals and
several digits: the display starts at 0, and a random agent's typing (no decimal point) cannot make it.

galculator drops keys that come faster than its buttons' press animation, so the oracles press one key at a
time with a pause, then wait for the display to show the answer (and start over if it does not).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from ...errors import ActionTimeoutError
from . import Variant, template
from .apps import calculator
from .common import PRODUCTS, centre, click, find, key, tree, until, wait

_KEYSYMS = {".": "period", "*": "asterisk", "+": "plus", "-": "minus", "/": "slash", "=": "equal",
            "(": "parenleft", ")": "parenright", "^": "asciicircum"}


def shown(value: Decimal) -> str:
    """A value as galculator's display writes it."""
    return format(value.normalize(), "f")


def _display_check(answer: str) -> dict[str, Any]:
    # the value is the display's first line (the scientific mode adds a line of base and angle indicators)
    return {"type": "accessibility", "app": "calculator", "role": "text",
            "text_matches": rf"\A\s*{re.escape(answer)}[ \t]*(\n|\Z)"}


def _display(ctx: Any) -> str | None:
    for node in tree(ctx, app="calculator"):
        if node["role"] == "text" and "multi line" in node.get("states", ()):
            return (node.get("text") or "").strip().split("\n")[0].strip()
    return None


def _press(keys: str) -> list[dict[str, Any]]:
    """The keys of ``keys`` one at a time (a single oracle step)."""
    actions: list[dict[str, Any]] = []
    for char in keys:
        actions += [key(_KEYSYMS.get(char, char)), wait(150)]
    return actions


def _enter(ctx: Any, keys: str, answer: str, attempts: int = 3) -> Iterator[Any]:
    """Clear the calculator, press ``keys`` and wait until the display shows ``answer``; again if a key was lost."""
    yield from find(ctx, "text", app="calculator")  # the window is up
    for attempt in range(attempts):
        yield [key("Escape"), wait(300)]
        yield _press(keys)
        try:
            yield from until(lambda: _display(ctx) == answer, f"the display to show {answer}", 5)
            return
        except ActionTimeoutError:
            if attempt == attempts - 1:
                raise


def _digits(rng: random.Random, whole: tuple[int, int], places: int) -> Decimal:
    """A number with ``places`` decimals whose last decimal is not 0 (so it is typed as shown)."""
    while True:
        value = Decimal(rng.randint(whole[0] * 10 ** places, whole[1] * 10 ** places)).scaleb(-places)
        if value % 1 and str(value)[-1] != "0":
            return value


def _fits(value: Decimal) -> bool:
    """Exactly shown by galculator (12 significant digits at most) and not a whole number."""
    return bool(value % 1) and len(value.normalize().as_tuple().digits) <= 11 and value > 0


def _variant(instruction: str, keys: str, answer: Decimal, *, checker: dict[str, Any] | None = None,
             before: Any = None, max_steps: int = 25, **params: Any) -> Variant:
    text = shown(answer)

    def oracle(ctx: Any) -> Iterator[Any]:
        if before is not None:
            yield from before(ctx)
        yield from _enter(ctx, keys, text)

    return Variant(instruction=instruction, apps=[calculator()], checker=checker or _display_check(text),
                   oracle=oracle, max_steps=max_steps, params={"answer": text, **params})


@template("calculator-expression", app="calculator")
def expression(rng: random.Random) -> Variant:
    """Work out an expression with decimals, brackets and precedence."""
    while True:
        a, b, c = _digits(rng, (2, 90), 1), _digits(rng, (2, 40), 2), _digits(rng, (1, 60), 2)
        shape = rng.randrange(3)
        if shape == 0:
            written, keys, answer = f"{a} × {b} + {c}", f"{a}*{b}+{c}=", a * b + c
        elif shape == 1:
            written, keys, answer = f"({a} + {b}) × {c}", f"({a}+{b})*{c}=", (a + b) * c
        else:
            written, keys, answer = f"{a} × {b} − {c}", f"{a}*{b}-{c}=", a * b - c
        if _fits(answer):
            break
    return _variant(f"Use the calculator to work out {written}. Leave the result on the calculator's display.",
                    keys, answer)


@template("calculator-percentage", app="calculator")
def percentage(rng: random.Random) -> Variant:
    """A percentage of an amount (a tip, a tax, a discount)."""
    while True:
        rate = Decimal(rng.choice([125, 175, 225, 85, 65, 145, 235, 375])).scaleb(-1)
        amount = _digits(rng, (40, 900), 2)
        answer = amount * rate / 100
        if _fits(answer):
            break
    what = rng.choice(["the tip", "the sales tax", "the discount", "the commission"])
    return _variant(f"{what.capitalize()} is {rate}% of {amount}. Use the calculator to work out {what} "
                    "(the amount of money, not the new total) and leave it on the display, unrounded.",
                    f"{amount}*{rate}/100=", answer)


@template("calculator-sum", app="calculator")
def total(rng: random.Random) -> Variant:
    """The total of a list of prices."""
    while True:
        items = rng.sample(PRODUCTS, rng.randint(4, 6))
        prices = [_digits(rng, (1, 80), 2) for _ in items]
        answer = sum(prices, Decimal(0))
        if _fits(answer):
            break
    listed = "; ".join(f"{item} {price}" for item, price in zip(items, prices))
    return _variant(f"A receipt lists these prices: {listed}. Use the calculator to add them up and leave the "
                    "total on the display.", "+".join(map(str, prices)) + "=", answer)


@template("calculator-currency", app="calculator")
def currency(rng: random.Random) -> Variant:
    """Convert an amount of money at a given exchange rate."""
    # (from, to, about how many of "to" one of "from" buys)
    pairs = [("euro", "US dollars", 1.08), ("US dollar", "Japanese yen", 150), ("pound", "euros", 1.17),
             ("Swiss franc", "euros", 1.05), ("euro", "Swedish kronor", 11.4), ("Canadian dollar", "US dollars", 0.73)]
    while True:
        source, target, about = rng.choice(pairs)
        amount = _digits(rng, (20, 950), 2)
        places = 2 if about > 100 else 4
        rate = Decimal(round(about * rng.uniform(0.95, 1.05), places)).quantize(Decimal(1).scaleb(-places))
        answer = amount * rate
        if _fits(answer) and str(rate)[-1] != "0":
            break
    return _variant(f"The exchange rate is 1 {source} = {rate} {target}. Use the calculator to convert {amount} "
                    f"{source}s to {target}, and leave the exact result (not rounded) on the display.",
                    f"{amount}*{rate}=", answer)


@template("calculator-square-root", app="calculator")
def square_root(rng: random.Random) -> Variant:
    """The square root of a number (a square's side from its area)."""
    side = _digits(rng, (11, 99), 3)
    area = side * side
    return _variant(f"A square plot of land has an area of {area} square metres. Use the calculator's square "
                    "root to find the length of its side in metres, and leave it on the display.",
                    f"{area}r", side)


def _scientific(ctx: Any) -> Iterator[Any]:
    """View > Scientific Mode, then wait for its buttons."""
    menu = yield from find(ctx, "menu", "View", app="calculator")
    yield click(*centre(menu))
    item = yield from find(ctx, "radio menu item", "Scientific Mode", app="calculator")
    yield click(*centre(item))
    yield from find(ctx, "toggle button", "x^y", app="calculator")


@template("calculator-power", app="calculator")
def power(rng: random.Random) -> Variant:
    """Switch to scientific mode and raise a number to a power (compound growth)."""
    while True:
        rate = Decimal(rng.randint(2, 19)).scaleb(-2)
        years = rng.randint(2, 5)
        base = 1 + rate
        answer = base ** years
        if _fits(answer):
            break
    text = shown(answer)
    checker = {"type": "weighted", "parts": [
        {"name": "scientific mode", "weight": 1, "check": {
            "type": "accessibility", "app": "calculator", "role": "radio menu item", "name": "Scientific Mode",
            "states": ["checked"]}},
        {"name": "the power on the display", "weight": 3, "check": _display_check(text)},
    ]}
    return _variant(f"Switch the calculator to its scientific mode (View menu) and use its power key (x^y) to "
                    f"work out {base} to the power of {years}, the growth factor of {years} years at "
                    f"{rate * 100:.0f}% a year. Leave the result on the display.",
                    f"{base}^{years}=", answer, checker=checker, before=_scientific)


def _memory(ctx: Any, button: str, item: str | None) -> Iterator[Any]:
    """Press a memory button and choose in its pop-up menu ``item`` (None: the first memory slot)."""
    node = yield from find(ctx, "toggle button", button, app="calculator")
    yield click(*centre(node))

    def choice() -> dict[str, Any] | None:
        for n in tree(ctx, app="calculator"):
            if n["role"] == "menu item" and "showing" in n.get("states", ()) and (
                    n["name"] == item if item else re.match(r"-?[0-9]", n["name"])):
                return n
        return None

    entry = yield from until(choice, f"the {button} menu")
    yield click(*centre(entry))
    yield wait(300)


@template("calculator-memory", app="calculator")
def memory(rng: random.Random) -> Variant:
    """Add up an order's lines (quantity × price) with the memory keys."""
    while True:
        items = rng.sample(PRODUCTS, 3)
        lines = [(rng.randint(2, 9), _digits(rng, (1, 40), 2)) for _ in items]
        answer = sum((q * p for q, p in lines), Decimal(0))
        if _fits(answer):
            break
    listed = "; ".join(f"{item}: {q} at {p} each" for (q, p), item in zip(lines, items))
    text = shown(answer)
    checker = {"type": "weighted", "parts": [
        # MR is greyed out until something is stored in the memory
        {"name": "the memory used", "weight": 1, "check": {
            "type": "accessibility", "app": "calculator", "role": "toggle button", "name": "MR",
            "states": ["enabled"]}},
        {"name": "the order's total on the display", "weight": 3, "check": _display_check(text)},
    ]}
    def oracle(ctx: Any) -> Iterator[Any]:
        for index, (q, p) in enumerate(lines):
            yield from _enter(ctx, f"{q}*{p}=", shown(q * p))
            # MS offers a new memory slot ("save here"); M+ and MR list the slots by value: the first one
            yield from _memory(ctx, "MS" if index == 0 else "M+", "save here" if index == 0 else None)
        yield [key("Escape"), wait(300)]
        yield from _memory(ctx, "MR", None)
        yield from until(lambda: _display(ctx) == text, f"the display to show {text}", 5)

    return Variant(
        instruction=f"An order has three lines ({listed}). Use the calculator's memory keys (MS, M+, MR) to add "
                    "up the three lines' amounts, and leave the order's total on the display.",
        apps=[calculator()], checker=checker, oracle=oracle, max_steps=40, params={"answer": text})
