"""Spreadsheet tasks (LibreOffice Calc): totals and statistics, sorting, formulas filled down, corrected and
deleted rows, sheets, bold headers, Save As another format, and a table typed in by hand.

The workbooks are CSV text or ODS files built here from the seed (a fixed zip date: the same bytes for the
same seed). Checkers read the saved file as :mod:`..documents` reads it: the values Calc cached when it saved,
its formulas, sheet names and bold cells.

The oracles work the keyboard, as is most reliable in Calc: ctrl+Home then arrow keys to a cell (waiting until
the Name Box shows it), typing a value or formula with Tab and Return, shift+arrows to select, ctrl+s to save;
they wait until the file on disk holds the change.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

from ..documents import cell_position, read_workbook
from . import Variant, template
from .apps import OFFICE_SETUP, calc
from .common import (CITIES, FIRST_NAMES, MONTHS, PRODUCTS, WORDS, click_on, find, key, person, saved, tree,
                     type_text, until, wait)
from .office_files import ods

Rows = list[list[Any]]


# -- workbooks as files --------------------------------------------------------------------------------------
def _csv(rows: Rows) -> str:
    return "".join(",".join(str(v) for v in row) + "\n" for row in rows)


def _column(index: int) -> str:
    return "ABCDEFGHIJ"[index]


def _expect(rows: Rows, first_row: int = 1) -> list[dict[str, Any]]:
    """``columns`` conditions: these rows exactly, from ``first_row``, then nothing below."""
    width = max(len(r) for r in rows)
    return [{"column": _column(c), "from_row": first_row, "values": [r[c] for r in rows]} for c in range(width)]


# -- the oracle's moves --------------------------------------------------------------------------------------
def _ready(ctx: Any) -> Iterator[Any]:
    """Wait until Calc shows its sheet (the start may count it started before its document is drawn)."""
    yield from find(ctx, "table", app="calc", contains="Sheet", timeout=60)
    yield wait(500)


def _goto(ctx: Any, ref: str) -> Iterator[Any]:
    """To a cell from the first one with arrow keys (the Name Box's focus is less sure than the grid's), then
    wait until the Name Box shows it. On a loaded machine Calc handled text typed right after the keys before
    some of them (a formula landed in a cell on the way, the keys' moves came after it), although X delivered
    them in order; the Name Box says when the moves are done."""
    row, column = cell_position(ref)
    steps: list[Any] = [key("ctrl+Home")]
    if column > 1:
        steps.append(key("Right", column - 1))
    if row > 1:
        steps.append(key("Down", row - 1))
    yield steps
    yield from until(lambda: any(n["role"] == "text" and n.get("text") == ref for n in tree(ctx, app="calc")),
                     f"the Name Box to show {ref}", timeout=20)


def _type_rows(rows: Rows) -> Any:
    """Typed rows from the current cell: Tab between cells, Return back to the first column of the next row."""
    return type_text("".join("\t".join(str(v) for v in row) + "\n" for row in rows), "keys")


def _book_holds(check: Callable[[Any], bool]) -> Callable[[bytes], bool]:
    def holds(data: bytes) -> bool:
        try:
            return check(read_workbook(data))
        except Exception:  # noqa: BLE001 - a file half written
            return False

    return holds


def _cells_are(wanted: dict[str, Any], sheet: str | None = None) -> Callable[[bytes], bool]:
    def check(book: Any) -> bool:
        found = book.sheet(sheet)
        return found is not None and all(_same(found.cell(ref).value, v) for ref, v in wanted.items())

    return _book_holds(check)


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, int | float):
        return isinstance(got, int | float) and abs(got - want) < 0.01
    return got == want


def _save(ctx: Any, path: str, check: Callable[[bytes], bool]) -> Iterator[Any]:
    yield key("ctrl+s")
    yield from saved(ctx, path, check, timeout=30)


def _spreadsheet(path: str, **condition: Any) -> dict[str, Any]:
    return {"type": "spreadsheet", "path": path, **condition}


# -- data ----------------------------------------------------------------------------------------------------
def _people(rng: random.Random, n: int) -> Rows:
    names = rng.sample(FIRST_NAMES, n)
    scores = rng.sample(range(40, 100), n)
    return [[name, rng.choice(CITIES), score] for name, score in zip(names, scores)]


def _stock(rng: random.Random, n: int) -> Rows:
    return [[p, rng.randint(2, 60)] for p in rng.sample(PRODUCTS, n)]


# -- templates -----------------------------------------------------------------------------------------------
@template("calc-column-total", app="calc")
def column_total(rng: random.Random) -> Variant:
    """Add a total row under a column of amounts in a CSV file."""
    items = [[p.title(), rng.randint(5, 250)] for p in rng.sample(PRODUCTS, rng.randint(5, 9))]
    header = ["Item", rng.choice(["Amount", "Cost", "Price"])]
    total_row = len(items) + 3  # one empty row between the items and the total
    total = sum(r[1] for r in items)
    path = f"{rng.choice(WORDS)}-expenses.csv"
    cells = {f"A{total_row}": "Total", f"B{total_row}": total}

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _ready(ctx)
        yield from _goto(ctx, f"A{total_row}")
        yield type_text(f"Total\t=SUM(B2:B{len(items) + 1})\n", "keys")
        yield from _save(ctx, path, _cells_are(cells))

    return Variant(
        instruction=f"In the spreadsheet {path} (open in LibreOffice Calc), put the total of the {header[1]} "
                    f"column in cell B{total_row}, with the word \"Total\" in A{total_row}, and save the file, "
                    "keeping it a CSV file.",
        files={path: _csv([header, *items])}, apps=[calc(path)], setup=OFFICE_SETUP,
        checker={"type": "weighted", "parts": [
            {"name": "the total", "weight": 2, "check": _spreadsheet(
                path, cells={f"B{total_row}": total}, columns=_expect([header, *items]))},
            {"name": "the label", "weight": 1, "check": _spreadsheet(path, cells={f"A{total_row}": "Total"})},
        ]},
        oracle=oracle, max_steps=30)


_STATS = {"average": ("Average", "AVERAGE"), "lowest": ("Lowest", "MIN"), "highest": ("Highest", "MAX"),
          "sum": ("Sum", "SUM")}
_WHAT = {"average": "the average score", "lowest": "the lowest score", "highest": "the highest score",
         "sum": "the sum of the scores"}


@template("calc-statistics", app="calc")
def statistics(rng: random.Random) -> Variant:
    """Two statistics of a column of scores, each in a given cell with a label beside it."""
    people = _people(rng, rng.randint(6, 10))
    rows = [["Name", "City", "Score"], *people]
    scores = [p[2] for p in people]
    values = {"average": sum(scores) / len(scores), "lowest": min(scores), "highest": max(scores),
              "sum": sum(scores)}
    chosen = rng.sample(sorted(_STATS), 2)
    path = f"{rng.choice(WORDS)}-scores.ods"
    last = len(people) + 1
    parts, typed = [], []
    for index, stat in enumerate(chosen):
        label, function = _STATS[stat]
        row = 2 + index
        typed.append(f"{label}\t={function}(C2:C{last})\n")
        parts.append({"name": _WHAT[stat], "weight": 1, "check": _spreadsheet(
            path, format="ods", cells={f"E{row}": label, f"F{row}": values[stat]}, tolerance=0.01)})
    wanted = {f"F{2 + i}": values[s] for i, s in enumerate(chosen)}

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _ready(ctx)
        yield from _goto(ctx, "E2")
        yield type_text("".join(typed), "keys")
        yield from _save(ctx, path, _cells_are(wanted))

    first, second = (f"\"{_STATS[s][0]}\" in E{2 + i} and {_WHAT[s]} in F{2 + i}" for i, s in enumerate(chosen))
    return Variant(
        instruction=f"In the spreadsheet {path}, write {first}, and {second} (over the Score column, every "
                    "person). Save the file in its own format (ODS).",
        files={path: ods({"Scores": rows})}, apps=[calc(path)], setup=OFFICE_SETUP,
        checker={"type": "weighted", "parts": parts}, oracle=oracle, max_steps=30)


@template("calc-sort-rows", app="calc")
def sort_rows(rng: random.Random) -> Variant:
    """Sort a table's rows by one of its columns (the header stays on top)."""
    header = ["Name", "City", "Score"]
    people = _people(rng, rng.randint(6, 10))
    by = rng.choice(["name-ascending", "score-descending", "score-ascending"])
    if by == "name-ascending":
        ordered = sorted(people, key=lambda r: r[0])
        how = "by Name, from A to Z"
    else:
        ordered = sorted(people, key=lambda r: r[2], reverse=by == "score-descending")
        how = "by Score, " + ("highest first" if by == "score-descending" else "lowest first")
    while people == ordered:
        rng.shuffle(people)
    path = f"{rng.choice(WORDS)}-results.csv"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _ready(ctx)
        yield from _goto(ctx, "A2")
        yield _type_rows(ordered)
        yield from _save(ctx, path, _cells_are({f"A{i + 2}": r[0] for i, r in enumerate(ordered)}
                                               | {f"C{i + 2}": r[2] for i, r in enumerate(ordered)}))

    return Variant(
        instruction=f"Sort the rows of {path} (open in LibreOffice Calc) {how}, keeping each row's cells "
                    "together and the header row on top, then save it as CSV.",
        files={path: _csv([header, *people])}, apps=[calc(path)], setup=OFFICE_SETUP,
        checker=_spreadsheet(path, columns=_expect([header, *ordered])), oracle=oracle, max_steps=30)


@template("calc-fill-formula", app="calc")
def fill_formula(rng: random.Random) -> Variant:
    """Fill a column with a formula (quantity times unit price), down every row of an order."""
    lines = [[p.title(), rng.randint(1, 12), rng.randint(2, 40)] for p in rng.sample(PRODUCTS, rng.randint(5, 9))]
    title = rng.choice(["Total", "Line total", "Amount"])
    rows = [["Product", "Quantity", "Unit price", title], *lines]
    path = f"order-{rng.randint(100, 999)}.ods"
    last = len(lines) + 1
    totals = {f"D{i + 2}": q * p for i, (_, q, p) in enumerate(lines)}

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _ready(ctx)
        yield from _goto(ctx, "D2")
        yield type_text("=B2*C2\n", "keys")
        yield key("Up")
        yield key("shift+Down", last - 2)
        yield key("ctrl+d")
        yield from _save(ctx, path, _cells_are(totals))

    return Variant(
        instruction=f"In {path}, fill the \"{title}\" column (D) with a formula that multiplies each row's "
                    "Quantity by its Unit price, for every product row, and save the file as it is (ODS).",
        files={path: ods({"Order": rows})}, apps=[calc(path)], setup=OFFICE_SETUP,
        checker={"type": "weighted", "parts": [
            {"name": "the totals", "weight": 2, "check": _spreadsheet(path, format="ods", cells=totals)},
            {"name": "as formulas", "weight": 1, "check": _spreadsheet(
                path, format="ods", formulas={f"D{r}": f"B{r}" for r in range(2, last + 1)})},
        ]},
        oracle=oracle, max_steps=30)


@template("calc-new-column", app="calc")
def new_column(rng: random.Random) -> Variant:
    """A new column computed from two others (a balance, or a sum), with its header."""
    months = list(MONTHS[:rng.randint(5, 9)])
    first, second, name, sign = rng.choice([("Income", "Expenses", "Balance", -1), ("Online", "In store", "Total", 1),
                                            ("Budget", "Spent", "Left", -1)])
    data = [[m, rng.randint(200, 900), rng.randint(50, 400)] for m in months]
    column = [a + sign * b for _, a, b in data]
    path = f"{rng.choice(WORDS)}-{rng.choice(['budget', 'sales', 'money'])}.csv"
    what = f"{first} minus {second}" if sign < 0 else f"{first} plus {second}"
    wanted = {f"D{i + 2}": v for i, v in enumerate(column)}

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _ready(ctx)
        yield from _goto(ctx, "D1")
        yield type_text(f"{name}\n=B2{'-' if sign < 0 else '+'}C2\n", "keys")
        yield key("Up")
        yield key("shift+Down", len(data) - 1)
        yield key("ctrl+d")
        yield from _save(ctx, path, _cells_are(wanted))

    return Variant(
        instruction=f"In {path} (open in LibreOffice Calc), add a column D titled \"{name}\" that holds, for "
                    f"each month, {what}. Save the file as CSV.",
        files={path: _csv([["Month", first, second], *data])}, apps=[calc(path)], setup=OFFICE_SETUP,
        checker={"type": "weighted", "parts": [
            {"name": "the values", "weight": 2, "check": _spreadsheet(
                path, columns=[{"column": "D", "from_row": 2, "values": column}])},
            {"name": "the header", "weight": 1, "check": _spreadsheet(path, cells={"D1": name})},
        ]},
        oracle=oracle, max_steps=30)


@template("calc-fix-value", app="calc")
def fix_value(rng: random.Random) -> Variant:
    """Correct one wrong number in a stock list, leaving the rest as it is."""
    stock = _stock(rng, rng.randint(6, 10))
    index = rng.randrange(len(stock))
    right = stock[index][1]
    while right == stock[index][1]:
        right = rng.randint(2, 60)
    fixed = [list(r) for r in stock]
    fixed[index][1] = right
    path = f"stock-{rng.choice(CITIES).lower()}.csv"
    ref = f"B{index + 2}"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _ready(ctx)
        yield from _goto(ctx, ref)
        yield type_text(f"{right}\n", "keys")
        yield from _save(ctx, path, _cells_are({ref: right}))

    return Variant(
        instruction=f"The stock count of the {stock[index][0]} in {path} is wrong: it should be {right}. Correct "
                    "it in LibreOffice Calc and save the file as CSV.",
        files={path: _csv([["Product", "In stock"], *stock])}, apps=[calc(path)], setup=OFFICE_SETUP,
        checker=_spreadsheet(path, columns=_expect([["Product", "In stock"], *fixed])), oracle=oracle,
        max_steps=25)


@template("calc-sheets", app="calc")
def sheets(rng: random.Random) -> Variant:
    """Rename a workbook's sheet and add a second, named one after it."""
    old = rng.choice(["Sheet1", "Data", "Imported"])
    new = f"{rng.choice(MONTHS)} {rng.choice(['sales', 'orders', 'visits', 'costs'])}"
    extra = rng.choice(["Notes", "Summary", "Charts", "Archive", "Draft"])
    rows = [["Product", "Count"], *_stock(rng, 5)]
    path = f"{rng.choice(WORDS)}-book.ods"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _ready(ctx)
        yield from _menu(ctx, "alt+s", "Rename Sheet...")
        yield from _dialog(ctx, "Rename Sheet")
        yield key("ctrl+a")
        yield type_text(new, "keys")
        yield key("Return")
        yield from until(lambda: _has_tab(ctx, new), f"the sheet tab {new}")
        yield from _menu(ctx, "alt+s", "Insert Sheet at End...")
        yield from _dialog(ctx, "Append Sheet")
        yield key("ctrl+a")
        yield type_text(extra, "keys")
        yield key("Return")
        yield from until(lambda: _has_tab(ctx, extra), f"the sheet tab {extra}")
        yield from _save(ctx, path, _book_holds(lambda book: [s.name for s in book.sheets] == [new, extra]))

    return Variant(
        instruction=f"In the workbook {path}, rename the sheet \"{old}\" to \"{new}\", then add a new empty sheet "
                    f"named \"{extra}\" after it. Save the workbook (ODS).",
        files={path: ods({old: rows})}, apps=[calc(path)], setup=OFFICE_SETUP,
        checker={"type": "weighted", "parts": [
            {"name": "renamed", "weight": 1, "check": _spreadsheet(
                path, sheet=new, columns=_expect(rows))},
            {"name": "the new sheet", "weight": 1, "check": _spreadsheet(path, sheets=[new, extra])},
        ]},
        oracle=oracle, max_steps=40)


def _menu(ctx: Any, keys: str, item: str) -> Iterator[Any]:
    """Open a menu by its key (the menu bar's boxes are doubled, a GTK one and a VCL one) and click an item."""
    yield key(keys)
    yield from click_on(ctx, "menu item", item, app="calc")


def _dialog(ctx: Any, title: str) -> Iterator[Any]:
    def shown() -> bool:
        return any(n["role"] in ("dialog", "frame", "alert") and title in n["name"] for n in tree(ctx, app="calc"))

    yield from until(shown, f"the {title} dialog")
    yield wait(300)


def _has_tab(ctx: Any, name: str) -> bool:
    return any(n["name"] == name for n in tree(ctx, app="calc"))


@template("calc-bold-header", app="calc")
def bold_header(rng: random.Random) -> Variant:
    """Make the header row bold (and, in some variants, the totals row at the bottom too)."""
    columns = rng.sample(["Region", "Q1", "Q2", "Q3", "Q4", "Target"], rng.randint(3, 5))
    columns.sort(key=["Region", "Q1", "Q2", "Q3", "Q4", "Target"].index)
    regions = rng.sample(CITIES, rng.randint(4, 7))
    data = [[c] + [rng.randint(10, 99) for _ in columns[1:]] for c in regions]
    with_total = rng.random() < 0.5
    rows = [columns, *data]
    if with_total:
        rows.append(["Total"] + [sum(r[i] for r in data) for i in range(1, len(columns))])
    path = f"{rng.choice(WORDS)}-regions.ods"
    width = len(columns)
    last_col = _column(width - 1)
    bold = [f"{_column(c)}1" for c in range(width)]
    if with_total:
        bold += [f"{_column(c)}{len(rows)}" for c in range(width)]

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _ready(ctx)
        yield from _goto(ctx, "A1")
        yield key("shift+Right", width - 1)
        yield key("ctrl+b")
        if with_total:
            yield from _goto(ctx, f"A{len(rows)}")
            yield key("shift+Right", width - 1)
            yield key("ctrl+b")
        yield from _save(ctx, path, _book_holds(lambda book: all(book.sheet(None).cell(r).bold for r in bold)))

    also = f" and the Total row at the bottom (A{len(rows)}:{last_col}{len(rows)})" if with_total else ""
    return Variant(
        instruction=f"In {path}, make the header row (A1:{last_col}1){also} bold, leaving the contents as "
                    "they are, and save the file (ODS).",
        files={path: ods({"Regions": rows})}, apps=[calc(path)], setup=OFFICE_SETUP,
        checker=_spreadsheet(path, format="ods", bold=bold, columns=_expect(rows)), oracle=oracle, max_steps=30)


@template("calc-save-as", app="calc")
def save_as(rng: random.Random) -> Variant:
    """Save a CSV file as a workbook of another format, under a given name."""
    rows = [["Product", "In stock"], *_stock(rng, rng.randint(4, 7))]
    source = f"{rng.choice(WORDS)}-export.csv"
    kind = rng.choice(["ods", "xlsx"])
    target = f"{rng.choice(CITIES).lower()}-stock-{rng.randint(10, 99)}.{kind}"
    label = {"ods": "an OpenDocument spreadsheet (.ods)", "xlsx": "an Excel workbook (.xlsx)"}[kind]

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _ready(ctx)
        yield key("ctrl+shift+s")
        yield from find(ctx, "file chooser", "Save", app="calc")
        yield key("ctrl+a")
        yield type_text(target, "keys")
        yield wait(600)  # the name field's completion looks at the folder: a Return meanwhile is taken by it
        yield key("Return")
        yield from saved(ctx, target, _book_holds(lambda book: book.format == kind), timeout=30)

    return Variant(
        instruction=f"Save the open spreadsheet {source} as {label} named {target} in your home folder.",
        files={source: _csv(rows)}, apps=[calc(source)], setup=OFFICE_SETUP,
        checker=_spreadsheet(target, format=kind, columns=_expect(rows)), oracle=oracle, max_steps=25)


@template("calc-delete-rows", app="calc")
def delete_rows(rng: random.Random) -> Variant:
    """Delete the rows that match a condition (a city, or a score under a limit), with no gaps left."""
    header = ["Name", "City", "Score"]
    people = _people(rng, rng.randint(8, 11))
    if rng.random() < 0.5:
        city = rng.choice([p[1] for p in people])
        gone = [p for p in people if p[1] == city]
        while len(gone) < 2:  # at least two rows to delete, not all next to each other by design
            people[rng.randrange(len(people))][1] = city
            gone = [p for p in people if p[1] == city]
        condition = f"whose City is {city}"
    else:
        limit = sorted(p[2] for p in people)[rng.randint(2, 4)]
        gone = [p for p in people if p[2] < limit]
        condition = f"whose Score is below {limit}"
    kept = [p for p in people if p not in gone]
    path = f"{rng.choice(WORDS)}-members.csv"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _ready(ctx)
        yield from _goto(ctx, "A2")
        yield key("shift+Right", 2)
        yield key("shift+Down", len(people) - 1)
        yield key("Delete")
        yield from _goto(ctx, "A2")
        yield _type_rows(kept)
        yield from _save(ctx, path, _book_holds(
            lambda book: book.sheet(None).cell(f"A{len(people) + 1}").value is None
            and book.sheet(None).cell(f"A{len(kept) + 1}").value == kept[-1][0]))

    return Variant(
        instruction=f"In {path} (open in LibreOffice Calc), delete every row {condition}, so that no empty rows "
                    "are left between the others, and save it as CSV.",
        files={path: _csv([header, *people])}, apps=[calc(path)], setup=OFFICE_SETUP,
        checker=_spreadsheet(path, columns=_expect([header, *kept])), oracle=oracle, max_steps=30)


@template("calc-enter-table", app="calc", long=True)
def enter_table(rng: random.Random) -> Variant:
    """Type a table of a dozen rows into a new workbook and save it under a given name (a long task)."""
    header = ["Customer", "Product", "Units"]
    rows = [[person(rng), rng.choice(PRODUCTS).title(), rng.randint(1, 30)] for _ in range(12)]
    name = f"{rng.choice(WORDS)}-log.ods"
    table = "\n".join("\t".join(str(v) for v in r) for r in [header, *rows])

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _ready(ctx)
        yield from _goto(ctx, "A1")
        for row in [header, *rows]:
            for value in row[:-1]:
                yield type_text(f"{value}\t", "keys")
            yield type_text(f"{row[-1]}\n", "keys")
        yield key("ctrl+shift+s")
        yield from find(ctx, "file chooser", "Save", app="calc")
        yield key("ctrl+a")
        yield type_text(name, "keys")
        yield wait(600)
        yield key("Return")
        yield from saved(ctx, name, _book_holds(lambda book: book.format == "ods"), timeout=30)

    return Variant(
        instruction=f"In the new LibreOffice Calc spreadsheet, enter this table from cell A1 (one value per "
                    f"cell, columns separated by tabs below), then save it in your home folder as {name} "
                    f"(ODS):\n{table}",
        apps=[calc()], setup=OFFICE_SETUP,
        checker={"type": "weighted", "parts": [
            {"name": "the file", "weight": 1, "check": _spreadsheet(name, format="ods", cells={"A1": "Customer"})},
            {"name": "the rows", "weight": 3, "check": _spreadsheet(name, columns=_expect([header, *rows]))},
        ]},
        oracle=oracle, max_steps=80, time_limit=420)

