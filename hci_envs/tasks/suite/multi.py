"""Multi-app tasks: read something in one app and act on it in another (browser, editor, terminal, calculator).

The apps share the screen side by side, so that a click on a window's own area brings it forward (no
alt+Tab, whose order depends on the history of focus): the browser on the left, the editor on the right
(its size and place in its settings), the terminal at the bottom right or the right, the calculator where
the window manager finds room.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

from . import Variant, template
from .apps import browser, calculator, editor, terminal
from .browser import _site, contact_sent, fill, go_to, site_url
from .browser import go as browser_go
from .common import CITIES, PRODUCTS, WORDS, centre, click, file_text, find, key, person, saved, type_text, until, wait
from .terminal import shell

BROWSER_WIDTH = 760


def left_browser(page: str = "index.html") -> dict[str, Any]:
    """The browser on the left part of the screen."""
    app = browser(page)
    app["command"] = [f"--window-size={BROWSER_WIDTH},800" if part.startswith("--window-size=") else part
                      for part in app["command"]]
    return app


def editor_at(left: int, top: int, width: int, height: int) -> dict[str, str]:
    """mousepad's settings with its window's size and place (remembered state, which it reads at start)."""
    return {".config/glib-2.0/settings/keyfile": (
        "[org/xfce/mousepad/preferences/file]\nsession-restore='never'\nautosave-timer=uint32 0\n\n"
        "[org/xfce/mousepad/preferences/window]\nremember-size=true\nremember-position=true\n"
        "remember-state=false\n\n"
        f"[org/xfce/mousepad/state/window]\nleft=uint32 {left}\ntop=uint32 {top}\nwidth=uint32 {width}\n"
        f"height=uint32 {height}\n")}


def terminal_at(geometry: str) -> dict[str, Any]:
    """xterm with its size in characters and place: ``80x20-0-0`` (bottom right)."""
    app = terminal()
    command = list(app["command"])
    command[command.index("-geometry") + 1] = geometry
    app["command"] = command
    return app


# Where a click brings each app forward without doing anything else: the browser's page margin, the
# editor's text (the oracle moves its cursor with keys afterwards), the terminal's lines.
BROWSER_SPOT = (BROWSER_WIDTH - 40, 760)
EDITOR_SPOT = (1020, 300)
TERMINAL_SPOT = (1020, 700)
EDITOR_RIGHT = editor_at(BROWSER_WIDTH, 0, 1280 - BROWSER_WIDTH, 480)
TERMINAL_RIGHT = "56x15-0-0"


def _browser_start(ctx: Any) -> Iterator[Any]:
    base = yield from site_url(ctx)
    yield wait(1500)  # the browser's first page
    yield click(*BROWSER_SPOT)
    yield wait(300)
    return base


def _save(ctx: Any, path: str, text: str) -> Iterator[Any]:
    yield key("ctrl+s")
    yield from saved(ctx, path, lambda data: data.decode("utf-8", "replace") == text)


@template("multi-web-price-note", app="browser", apps=("browser", "editor"))
def web_price_note(rng: random.Random) -> Variant:
    """Read a product's price in the browser and note it in a text file."""
    files, data = _site(rng)
    product = rng.choice(data["products"])
    others = [p for p in data["products"] if p != product][:2]
    original = "Prices to compare\n" + "".join(f"{p.title()}: {data['prices'][p]}\n" for p in others)
    line = f"{product.title()}: {data['prices'][product]}"
    wanted = original + line + "\n"
    files.update(EDITOR_RIGHT)
    files["prices.txt"] = original

    def oracle(ctx: Any) -> Iterator[Any]:
        base = yield from _browser_start(ctx)
        yield from go_to(ctx, f"{base}/product-{product}.html", f"{product.title()} details")
        yield click(*EDITOR_SPOT)
        yield key("ctrl+End")
        yield type_text(line + "\n", "keys")
        yield from _save(ctx, "prices.txt", wanted)

    return Variant(
        instruction=f"Find the price of the {product.title()} in the shop open in the browser, then add a line "
                    f"\"{product.title()}: PRICE\" (the price as the shop shows it, like the other lines) at the end "
                    "of prices.txt in the text editor, and save the file.",
        files=files, apps=[left_browser(), editor("prices.txt")],
        checker={"type": "file", "path": "prices.txt", "equals": wanted}, oracle=oracle, max_steps=30)


@template("multi-form-from-file", app="browser", apps=("browser", "editor"))
def form_from_file(rng: random.Random) -> Variant:
    """Send the web site's contact form with the details written in a text file."""
    files, _data = _site(rng)
    name = person(rng)
    email = f"{name.split()[-1].lower()}.{rng.randint(10, 99)}@example.org"
    files.update(EDITOR_RIGHT)
    files["contact.txt"] = f"Details to send through the shop's contact form\n\nName: {name}\nEmail: {email}\n"
    sent = contact_sent(name, email)

    def oracle(ctx: Any) -> Iterator[Any]:
        base = yield from _browser_start(ctx)
        yield from browser_go(ctx, f"{base}/contact.html")
        yield from fill(ctx, [name, email])
        yield wait(1500)

    return Variant(
        instruction="contact.txt, open in the text editor, holds a name and an email address. Send them with the "
                    "contact form of the shop open in the browser (its \"Contact us\" page).",
        files=files, apps=[left_browser(), editor("contact.txt")],
        checker={"type": "browser", "app": "browser", "visited": {"url_contains": sent}}, oracle=oracle,
        max_steps=30)


@template("multi-download-sum", app="browser", apps=("browser", "terminal"))
def download_sum(rng: random.Random) -> Variant:
    """Download a CSV file in the browser, then add up its values in the terminal."""
    files, data = _site(rng)
    wanted = rng.choice(data["downloads"])
    values = [int(line.split(",")[1]) for line in files[f"site/downloads/{wanted}"].splitlines()[1:]]
    out = "total.txt"

    def oracle(ctx: Any) -> Iterator[Any]:
        base = yield from _browser_start(ctx)
        yield from browser_go(ctx, f"{base}/downloads/{wanted}")
        yield from until(lambda: file_text(ctx, f"Downloads/{wanted}"), "the download", 20)
        yield click(*TERMINAL_SPOT)
        yield shell(f"awk -F, 'NR > 1 {{s += $2}} END {{print s}}' Downloads/{wanted} > {out}")
        yield from saved(ctx, out, lambda data: data.strip() == str(sum(values)).encode())

    return Variant(
        instruction=f"In the browser, download {wanted} from the shop's Downloads page (into the Downloads folder). "
                    f"Then, in the terminal, add up the numbers of its value column and write the total into {out} "
                    "in your home folder.",
        files=files, apps=[left_browser(), terminal_at("56x40-0+0")],
        checker={"type": "weighted", "parts": [
            {"name": "downloaded", "weight": 1,
             "check": {"type": "file", "path": f"Downloads/{wanted}", "contains": "id,value"}},
            {"name": "total", "weight": 2, "check": {"type": "file", "path": out,
                                                     "matches": rf"\A\s*{sum(values)}\s*\Z"}},
        ]},
        oracle=oracle, max_steps=30)


SETTINGS = {"host": lambda r: f"{r.choice(WORDS)}.example.org", "port": lambda r: str(r.randint(1024, 9999)),
            "workers": lambda r: str(r.randint(2, 32)), "timeout": lambda r: str(r.randint(5, 120)),
            "log_level": lambda r: r.choice(["debug", "info", "warning", "error"]),
            "cache_size": lambda r: f"{r.randint(16, 512)}M", "theme": lambda r: r.choice(WORDS),
            "language": lambda r: r.choice(["en", "fr", "de", "pt", "ja", "es"]),
            "backup_dir": lambda r: f"/srv/{r.choice(WORDS)}", "max_users": lambda r: str(r.randint(10, 900)),
            "retries": lambda r: str(r.randint(1, 9)), "city": lambda r: r.choice(CITIES)}

CHECK_SCRIPT = ("#!/bin/sh\n# The settings the service reads, one key=value a line, into settings-check.txt\n"
                "grep -v '^#' settings.conf | grep '=' | sed 's/ *= */=/' | sort > settings-check.txt\n"
                "echo \"checked $(wc -l < settings-check.txt) settings\"\n")


@template("multi-config-edit-verify", app="editor", apps=("editor", "terminal"), long=True)
def config_edit_verify(rng: random.Random) -> Variant:
    """Change six settings of a configuration file in the editor, one by one, then run its check script in the
    terminal."""
    keys = rng.sample(sorted(SETTINGS), 10)
    values = {k: SETTINGS[k](rng) for k in keys}
    changed = rng.sample(keys, 6)
    new = {}
    for k in changed:
        value = values[k]
        while value == values[k]:
            value = SETTINGS[k](rng)
        new[k] = value
    title = f"# {rng.choice(WORDS)} service settings"
    original = title + "\n" + "".join(f"{k} = {values[k]}\n" for k in keys)
    final = {**values, **new}
    wanted = title + "\n" + "".join(f"{k} = {final[k]}\n" for k in keys)
    report = "".join(f"{k}={final[k]}\n" for k in sorted(keys))
    files = {**editor_at(0, 0, 1280, 440), "settings.conf": original, "check-settings.sh": CHECK_SCRIPT}

    def oracle(ctx: Any) -> Iterator[Any]:
        yield wait(1000)
        yield click(640, 250)
        for k in changed:  # one edit at a time, as a person goes down the list
            yield key("ctrl+Home")
            yield key("Down", repeat=keys.index(k) + 1)
            yield key(["End", "shift+Home"])
            yield type_text(f"{k} = {new[k]}", "keys")
        yield from _save(ctx, "settings.conf", wanted)
        yield click(640, 650)
        yield shell("sh check-settings.sh")
        yield from saved(ctx, "settings-check.txt", lambda data: data.decode() == report)

    changes = "; ".join(f"{k} to {new[k]}" for k in changed)
    return Variant(
        instruction=f"In the text editor, change these settings in settings.conf (keep the \"key = value\" form and "
                    f"every other line as it is): {changes}. Save the file, then run the script check-settings.sh "
                    "in the terminal (sh check-settings.sh) so that it writes settings-check.txt.",
        files=files, apps=[editor("settings.conf"), terminal_at("140x18+0-0")],
        checker={"type": "weighted", "parts": [
            *({"name": f"{k} changed", "weight": 1,
               "check": {"type": "file", "path": "settings.conf", "matches": rf"(?m)^{k} = {re.escape(new[k])}$"}}
              for k in changed),
            {"name": "the rest unchanged", "weight": 1, "check": {"type": "file", "path": "settings.conf",
                                                                  "equals": wanted}},
            {"name": "check script run", "weight": 2,
             "check": {"type": "file", "path": "settings-check.txt", "equals": report}},
        ]},
        oracle=oracle, max_steps=60, time_limit=400)


@template("multi-web-prices-total", app="browser", apps=("browser", "editor", "terminal"), long=True)
def web_prices_total(rng: random.Random) -> Variant:
    """Copy every product's price from the shop's pages into a text file, then total them in the terminal."""
    files, data = _site(rng)
    products = data["products"]
    original = "# product price\n"
    lines = [f"{p.title()} {data['prices'][p]}" for p in products]
    wanted = original + "".join(line + "\n" for line in lines)
    total = sum(float(data["prices"][p]) for p in products)
    files.update(EDITOR_RIGHT)
    files["prices.txt"] = original

    def oracle(ctx: Any) -> Iterator[Any]:
        base = yield from _browser_start(ctx)
        for product, line in zip(products, lines):
            yield from go_to(ctx, f"{base}/product-{product}.html", f"{product.title()} details")
            yield click(*EDITOR_SPOT)
            yield key("ctrl+End")
            yield type_text(line + "\n", "keys")
            yield click(*BROWSER_SPOT)
            yield wait(300)
        yield click(*EDITOR_SPOT)
        yield from _save(ctx, "prices.txt", wanted)
        yield click(*TERMINAL_SPOT)
        yield shell("awk '{s += $2} END {printf \"%.2f\\n\", s}' prices.txt > total.txt")
        yield from saved(ctx, "total.txt", lambda data: data.strip() == f"{total:.2f}".encode())

    return Variant(
        instruction="The shop open in the browser sells five products, each with its page and price. In prices.txt "
                    "(open in the text editor) add one line per product, \"Name PRICE\" (like \"Lamp 12.50\", the "
                    "name as the shop writes it), and save it. Then, in the terminal, write the sum of the five "
                    "prices into total.txt.",
        files=files, apps=[left_browser(), editor("prices.txt"), terminal_at(TERMINAL_RIGHT)],
        checker={"type": "weighted", "parts": [
            *({"name": p, "weight": 1, "check": {"type": "file", "path": "prices.txt",
                                                 "matches": rf"(?m)^{line.replace('.', '[.]')}\s*$"}}
              for p, line in zip(products, lines)),
            {"name": "total", "weight": 2, "check": {
                "type": "command", "run": f"awk 'NF {{ exit !($1 + 0 > {total - 0.005:.3f} && $1 + 0 < "
                                          f"{total + 0.005:.3f}) }}' total.txt && grep -q '[0-9]' total.txt"}},
        ]},
        oracle=oracle, max_steps=70, time_limit=400)


@template("multi-todo-terminal", app="terminal", apps=("terminal", "editor"), long=True)
def todo_terminal(rng: random.Random) -> Variant:
    """Work through a to-do list in the terminal, ticking each item off in the editor."""
    folder = f"{rng.choice(WORDS)}-archive"
    report = f"report-{rng.randint(10, 99)}.txt"
    renamed = f"{rng.choice(WORDS)}.txt"
    city = rng.choice(CITIES)
    old = f"{rng.choice(['old', 'stale', 'previous'])}.log"
    items = [
        (f"make a folder named {folder}", f"mkdir {folder}", {"type": "command", "run": f"test -d {folder}"}),
        (f"move {report} into {folder}", f"mv {report} {folder}/",
         {"type": "command", "run": f"test -f {folder}/{report} && test ! -e {report}"}),
        (f"rename draft.txt to {renamed}", f"mv draft.txt {renamed}",
         {"type": "command", "run": f"test -f {renamed} && test ! -e draft.txt"}),
        (f"write the single line {city} into destination.txt", f"echo {city} > destination.txt",
         {"type": "file", "path": "destination.txt", "matches": rf"\A{city}\s*\Z"}),
        (f"delete {old}", f"rm {old}", {"type": "command", "run": f"test ! -e {old}"}),
    ]
    rng.shuffle(items)
    items.sort(key=lambda item: item[0].startswith("move"))  # the folder is made before anything moves into it
    head = "Today's chores (mark each one done with [x])\n"
    original = head + "".join(f"[ ] {text}\n" for text, _, _ in items)
    wanted = head + "".join(f"[x] {text}\n" for text, _, _ in items)
    files = {**EDITOR_RIGHT, "todo.txt": original, report: "quarterly numbers\n", "draft.txt": "first draft\n",
             old: "nothing to see\n"}

    def oracle(ctx: Any) -> Iterator[Any]:
        yield wait(1000)
        for index, (_text, command, _check) in enumerate(items):
            yield click(*TERMINAL_SPOT)
            yield shell(command)
            yield click(*EDITOR_SPOT)
            yield key("ctrl+Home")
            yield key("Down", repeat=index + 1)
            yield key(["Home", "Right", "shift+Right"])
            yield type_text("x", "keys")
        yield from _save(ctx, "todo.txt", wanted)

    return Variant(
        instruction="todo.txt, open in the text editor, lists chores for your home folder. Do each of them in the "
                    "terminal, mark each one done by changing its \"[ ]\" into \"[x]\" in todo.txt, and save the file.",
        files=files, apps=[editor("todo.txt"), terminal_at(TERMINAL_RIGHT)],
        checker={"type": "weighted", "parts": [
            *({"name": text, "weight": 1, "check": check} for text, _, check in items),
            {"name": "all ticked off", "weight": 1, "check": {"type": "file", "path": "todo.txt", "equals": wanted}},
        ]},
        oracle=oracle, max_steps=70, time_limit=400)



def _calculate(ctx: Any, keys: list[str]) -> Iterator[Any]:
    """Bring the calculator forward (a click on its display) and type the key sequences into it."""
    display = yield from find(ctx, "text", app="calculator")
    yield click(*centre(display))
    yield key("Escape")  # a fresh calculation
    # galculator loses keys typed in a burst (a repeated digit, an operator): one key at a time
    for char in "".join(keys):
        yield type_text(char, "keys")
        yield wait(120)


def _display(ctx: Any, wanted: str) -> Iterator[Any]:
    from .common import tree

    yield from until(lambda: any(n["role"] == "text" and (n.get("text") or "").strip() == wanted
                                 for n in tree(ctx, app="calculator")), f"the calculator to show {wanted}", 10)


def display_check(value: int) -> dict[str, Any]:
    return {"type": "accessibility", "app": "calculator", "role": "text", "text": str(value)}


@template("multi-orders-calculator", app="calculator", apps=("calculator", "terminal"))
def orders_calculator(rng: random.Random) -> Variant:
    """Look up a product's orders in a long file with the terminal, and work out their value in the
    calculator."""
    product, *others = rng.sample(PRODUCTS, 5)
    rows = [(rng.choice(others), rng.randint(1, 20)) for _ in range(rng.randint(30, 45))]
    for index in rng.sample(range(len(rows)), rng.randint(2, 4)):
        rows[index] = (product, rng.randint(1, 20))
    quantities = [q for p, q in rows if p == product]
    price = rng.randint(3, 49)
    answer = sum(quantities) * price
    orders = "order,product,quantity\n" + "".join(f"{1000 + i},{p},{q}\n" for i, (p, q) in enumerate(rows))

    def oracle(ctx: Any) -> Iterator[Any]:
        yield wait(1000)
        yield click(260, 400)
        yield shell(f"grep ',{product},' orders.csv")
        yield from _calculate(ctx, ["+".join(map(str, quantities)) + "=", f"*{price}="])
        yield from _display(ctx, str(answer))

    return Variant(
        instruction=f"orders.csv in your home folder lists orders (order, product, quantity). Use the terminal to "
                    f"find the orders of the {product}, then, in the calculator, work out what they are worth "
                    f"together at {price} per {product} (their total quantity times {price}), and leave the "
                    "result on the calculator's display.",
        files={"orders.csv": orders}, apps=[terminal_at("56x40+0+0"), calculator()],
        checker=display_check(answer), oracle=oracle, max_steps=100)


@template("multi-budget-calculator", app="editor", apps=("editor", "calculator"))
def budget_calculator(rng: random.Random) -> Variant:
    """Add up a budget's amounts in the calculator and write the total into the budget file."""
    items = rng.sample(("rent", "food", "travel", "books", "phone", "gym", "gifts", "power", "water", "repairs"),
                       rng.randint(4, 6))
    amounts = [rng.randint(12, 900) for _ in items]
    total = sum(amounts)
    month = rng.choice(["January", "March", "May", "August", "October", "December"])
    original = f"Budget for {month}\n\n" + "".join(f"{i}: {a}\n" for i, a in zip(items, amounts))
    wanted = original + f"total: {total}\n"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield wait(1000)
        yield from _calculate(ctx, ["+".join(map(str, amounts)) + "="])
        yield from _display(ctx, str(total))
        yield click(300, 300)
        yield key("ctrl+End")
        yield type_text(f"total: {total}\n", "keys")
        yield from _save(ctx, "budget.txt", wanted)

    return Variant(
        instruction=f"budget.txt, open in the text editor, lists the amounts spent in {month}. Add them up in the "
                    "calculator (leave the sum on its display), then add a last line \"total: SUM\" to budget.txt "
                    "and save it.",
        files={**editor_at(0, 0, 640, 800), "budget.txt": original}, apps=[editor("budget.txt"), calculator()],
        checker={"type": "weighted", "parts": [
            {"name": "sum on the calculator", "weight": 1, "check": display_check(total)},
            {"name": "total line saved", "weight": 2, "check": {"type": "file", "path": "budget.txt",
                                                                "equals": wanted}},
        ]},
        oracle=oracle, max_steps=100)


@template("multi-terminal-search", app="browser", apps=("browser", "terminal"))
def terminal_search(rng: random.Random) -> Variant:
    """Look up a code in a file with the terminal and search the web site for it."""
    files, _data = _site(rng)
    product, city = rng.choice(PRODUCTS), rng.choice(CITIES)
    codes = rng.sample(range(10000, 99999), 40)
    rows = [(f"SKU-{code}", rng.choice(PRODUCTS), rng.choice(CITIES)) for code in codes]
    rows = [r for r in rows if (r[1], r[2]) != (product, city)]
    target = f"SKU-{rng.randint(10000, 99999)}"
    while any(r[0] == target for r in rows):
        target = f"SKU-{rng.randint(10000, 99999)}"
    rows.insert(rng.randrange(len(rows) + 1), (target, product, city))
    files["stock.csv"] = "sku,product,warehouse\n" + "".join(",".join(r) + "\n" for r in rows)

    def oracle(ctx: Any) -> Iterator[Any]:
        base = yield from _browser_start(ctx)
        yield click(*TERMINAL_SPOT)
        yield shell(f"grep {product},{city} stock.csv")
        yield click(*BROWSER_SPOT)
        yield wait(300)
        yield from browser_go(ctx, f"{base}/search.html")
        yield from fill(ctx, [target])
        yield wait(1500)

    return Variant(
        instruction=f"stock.csv in your home folder lists stock keeping units (sku, product, warehouse). Use the "
                    f"terminal to find the SKU of the {product} kept in the {city} warehouse, then search the shop "
                    "open in the browser for that SKU with its Search page.",
        files=files, apps=[left_browser(), terminal_at("56x40-0+0")],
        checker={"type": "browser", "app": "browser", "visited": {"url_contains": f"results.html?q={target}"}},
        oracle=oracle, max_steps=30)

