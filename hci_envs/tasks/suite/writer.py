"""Word processor tasks (LibreOffice Writer): format, edit, fill in and save documents of the home.

The given documents are small ODT (and one DOCX) files written here (paragraphs of one line each, so that a line is a
paragraph); the checkers read the saved file as :mod:`..documents` does (text, paragraph styles, alignment,
bold/italic/underline stretches, font sizes, list items, tables). The oracles go by the keyboard, which is
the reliable way in LibreOffice: shortcuts, the Find toolbar to select a phrase, the Find & Replace dialog,
the toolbar's font size box, and ctrl+s, then wait until the file on disk holds the change.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

from . import Variant, template
from .apps import OFFICE_SETUP, writer
from .common import (CITIES, FIRST_NAMES, LAST_NAMES, MONTHS, PRODUCTS, WORDS, centre, click, click_into, current, find,
                     key, person, saved, tree, type_text, until, wait)
from .office_files import docx, odt

DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
# Sentences short enough to stay on one line (a paragraph is a line: Down goes paragraph by paragraph).
SENTENCES = (
    "The {a} team meets on {day} to review the {b} budget.",
    "Please send the {a} report to {person} before {day}.",
    "Our office in {city} will close early on {day}.",
    "{person} will present the new {a} plan.",
    "The {a} project is ahead of schedule.",
    "Spare {product}s are kept in the {b} room.",
    "Visitors from {city} arrive on {day} morning.",
    "The {a} survey closes at the end of the month.",
    "{person} asked for a second {product} for the {b} desk.",
    "Lunch on {day} is in the {a} hall.",
)


def _sentences(rng: random.Random, n: int, avoid: tuple[str, ...] = ()) -> list[str]:
    """``n`` different sentences that mention none of ``avoid``."""
    out: list[str] = []
    while len(out) < n:
        a, b = rng.sample([w for w in WORDS if w not in avoid], 2)
        line = rng.choice(SENTENCES).format(a=a, b=b, day=rng.choice(DAYS), city=rng.choice(CITIES),
                                            person=person(rng), product=rng.choice(PRODUCTS))
        if line not in out and not any(word in line.split() for word in avoid):
            out.append(line)
    return out


# -- the oracles' moves ----------------------------------------------------------------------------------------
def document(data: bytes) -> Any:
    from ..documents import read_text_document

    try:
        return read_text_document(data)
    except Exception:  # noqa: BLE001 - a file still being written
        return None


def opened(ctx: Any, name: str) -> Iterator[Any]:
    """Wait until Writer shows the document (its window's title), then put the cursor at its start."""
    yield from find(ctx, "frame", app="writer", contains=name, timeout=90)
    yield wait(500)
    yield key("ctrl+Home")


def save(ctx: Any, path: str, done: Callable[[Any], bool]) -> Iterator[Any]:
    """ctrl+s, and wait until the file on disk, read as the checker reads it, shows the change."""
    yield key("ctrl+s")
    yield from saved(ctx, path, lambda data: (doc := document(data)) is not None and bool(done(doc)), timeout=30)


def paragraphs(ctx: Any, state: str) -> list[str]:
    """The text of each paragraph the accessibility tree shows in ``state`` ("selected", "focused")."""
    return [n.get("text") or "" for n in tree(ctx, app="writer")
            if n["role"] == "paragraph" and state in n.get("states", ())]


def bullet_here(ctx: Any, on: bool) -> Iterator[Any]:
    """Wait until the paragraph with the cursor is (or is not) a bulleted one: Writer shows its bullet at the start
    of its text. The bullet keys are a command Writer posts to itself, while typing is handled at once, so text
    typed right after them could land before the bullet does, and the bullet on a later paragraph."""
    def here() -> bool:
        focused = paragraphs(ctx, "focused")
        return len(focused) == 1 and focused[0].startswith("\u2022") == on
    yield from until(here, f"the paragraph with the cursor {'with' if on else 'without'} its bullet", timeout=20)


def select_line(ctx: Any, n: int, text: str) -> Iterator[Any]:
    """Select the ``n``-th paragraph (from 0) of one-line paragraphs, whose text is ``text``, and wait until
    Writer shows that selection: what follows acts on whatever is selected when Writer handles it."""
    yield [key("ctrl+Home"), *([key("Down", n)] if n else []), key("Home"), key("shift+End")]
    yield from until(lambda: paragraphs(ctx, "selected") == [text], f"the line {text!r} to be selected", timeout=20)


def select_phrase(ctx: Any, phrase: str) -> Iterator[Any]:
    """Select the first occurrence of ``phrase`` with the Find toolbar (Escape leaves it selected)."""
    yield key("ctrl+f")
    yield wait(800)
    yield key("ctrl+a")
    yield type_text(phrase, "keys")
    yield key("Return")
    yield wait(500)
    yield key("Escape")
    yield wait(300)


def texts(doc: Any) -> list[str]:
    return [p.text for p in doc.paragraphs if p.text]


def unchanged(path: str, lines: list[str]) -> dict[str, Any]:
    """The check that every one of ``lines`` is still a paragraph of its own."""
    return {"type": "document", "path": path, "paragraphs": [{"text": t} for t in lines]}


# -- the templates ---------------------------------------------------------------------------------------------
@template("writer-bold-title", app="writer")
def bold_title(rng: random.Random) -> Variant:
    """Make a document's title line bold, and nothing else."""
    name = f"{rng.choice(WORDS)}-notes.odt"
    title = f"{rng.choice(['Minutes of the', 'Notes on the', 'Plans for the'])} {rng.choice(WORDS)} meeting"
    body = _sentences(rng, rng.randint(3, 5))

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from opened(ctx, name)
        yield from select_line(ctx, 0, title)
        yield key("ctrl+b")
        yield from save(ctx, name, lambda doc: doc.paragraphs[0].bold)

    return Variant(
        instruction=f"In the document {name}, open in LibreOffice Writer, make the title \"{title}\" (its first "
                    "line) bold. Leave the rest of the text as it is, and save the document.",
        files={name: odt([title, *body])}, apps=[writer(name)], setup=OFFICE_SETUP,
        checker={"type": "gate",
                 "gate": {"type": "document", "path": name, "paragraphs": [{"text": title, "bold": True}]},
                 "then": {"type": "weighted", "parts": [
                     {"name": "the title is bold", "weight": 2, "check": {
                         "type": "document", "path": name, "paragraphs": [{"text": title, "bold": True}]}},
                     {"name": "the rest is unchanged and not bold", "weight": 1, "check": {
                         "type": "document", "path": name,
                         "paragraphs": [{"text": t, "bold": False, "bold_spans": []} for t in body]}}]}},
        oracle=oracle, max_steps=30)


@template("writer-align-letter", app="writer")
def align_letter(rng: random.Random) -> Variant:
    """Centre a letter's heading and right-align its date line."""
    name = f"letter-{rng.choice(WORDS)}.odt"
    heading = f"{rng.choice(['Invitation', 'Notice', 'Announcement', 'Reminder'])}: {rng.choice(WORDS)} day"
    date = f"{rng.choice(CITIES)}, {rng.randint(1, 28)} {rng.choice(MONTHS)} 2025"
    body = _sentences(rng, rng.randint(2, 4))
    sender = person(rng)
    lines = [heading, date, *body, sender]

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from opened(ctx, name)
        yield key("ctrl+e")
        yield key("Down")
        yield key("ctrl+r")
        yield from save(ctx, name, lambda doc: doc.paragraphs[0].align == "center"
                        and doc.paragraphs[1].align == "right")

    return Variant(
        instruction=f"In the letter {name}, open in LibreOffice Writer, centre the heading \"{heading}\" and "
                    f"align the date line \"{date}\" to the right. Leave the other lines as they are and save the "
                    "document.",
        files={name: odt(lines)}, apps=[writer(name)], setup=OFFICE_SETUP,
        checker={"type": "weighted", "parts": [
            {"name": "heading centred", "weight": 1, "check": {
                "type": "document", "path": name, "paragraphs": [{"text": heading, "align": "center"}]}},
            {"name": "date right-aligned", "weight": 1, "check": {
                "type": "document", "path": name, "paragraphs": [{"text": date, "align": "right"}]}},
            {"name": "the rest stays left", "weight": 1, "check": {"type": "gate", "gate": {
                "type": "document", "path": name, "paragraphs": [{"text": heading, "align": "center"}]},
                "then": {"type": "document", "path": name,
                         "paragraphs": [{"text": t, "align": "left"} for t in [*body, sender]]}}},
        ]},
        oracle=oracle, max_steps=30)


@template("writer-heading-styles", app="writer")
def heading_styles(rng: random.Random) -> Variant:
    """Give a report's title the Heading 1 style and its section names Heading 2."""
    name = f"report-{rng.choice(WORDS)}.odt"
    title = f"{rng.choice(WORDS).title()} {rng.choice(['report', 'review', 'summary'])} {rng.randint(2019, 2025)}"
    sections = rng.sample(["Background", "Findings", "Costs", "Next steps", "Risks", "Schedule", "Staff"], 2)
    first, second = _sentences(rng, 2), _sentences(rng, 2)
    lines = [title, sections[0], *first, sections[1], *second]
    where = {title: 0, sections[0]: 1, sections[1]: 2 + len(first)}

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from opened(ctx, name)
        yield key("ctrl+1")
        for section in sections:
            yield key("ctrl+Home")
            yield key("Down", where[section])
            yield key("ctrl+2")
        yield from save(ctx, name, lambda doc: [p.heading for p in doc.paragraphs][:3] == [1, 2, None])

    def heading(text: str, level: int) -> dict[str, Any]:
        return {"type": "document", "path": name, "paragraphs": [{"text": text, "style": f"Heading {level}"}]}

    return Variant(
        instruction=f"In {name}, open in LibreOffice Writer, give the title \"{title}\" the paragraph style "
                    f"\"Heading 1\", and the section names \"{sections[0]}\" and \"{sections[1]}\" the style "
                    "\"Heading 2\". Then save the document.",
        files={name: odt(lines)}, apps=[writer(name)], setup=OFFICE_SETUP,
        checker={"type": "weighted", "parts": [
            {"name": "title Heading 1", "weight": 2, "check": heading(title, 1)},
            {"name": f"{sections[0]} Heading 2", "weight": 1, "check": heading(sections[0], 2)},
            {"name": f"{sections[1]} Heading 2", "weight": 1, "check": heading(sections[1], 2)},
        ]},
        oracle=oracle, max_steps=25)


@template("writer-format-phrase", app="writer")
def format_phrase(rng: random.Random) -> Variant:
    """Make a given phrase italic, bold or underlined, and only that phrase."""
    name = f"{rng.choice(WORDS)}-memo.odt"
    kind, shortcut = rng.choice([("italic", "ctrl+i"), ("bold", "ctrl+b"), ("underline", "ctrl+u")])
    w = rng.choice(WORDS)
    who = person(rng)
    day = f"{rng.choice(DAYS)} {rng.randint(1, 28)} {rng.choice(MONTHS)}"
    sentence, phrase = rng.choice([
        (f"Please reply before {day}.", day),
        (f"The {w} room is closed for repairs.", "closed for repairs"),
        (f"All staff must attend the {w} briefing.", "must attend"),
        (f"The {w} report was written by {who}.", who),
        (f"Do not leave your {rng.choice(PRODUCTS)} in the {w} hall.", "Do not leave"),
        (f"The {w} budget must not exceed {rng.randint(2, 90)} thousand euros.", "must not exceed"),
    ])
    lines = _sentences(rng, 3, avoid=tuple(phrase.split()))
    target = rng.randrange(len(lines) + 1)
    lines.insert(target, sentence)
    done = "underlined" if kind == "underline" else kind

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from opened(ctx, name)
        yield from select_phrase(ctx, phrase)
        yield key(shortcut)
        yield from save(ctx, name, lambda doc: getattr(doc.paragraphs[target], f"{kind}_spans") == [phrase])

    spans = f"{kind}_spans"
    return Variant(
        instruction=f"In {name}, open in LibreOffice Writer, make the words \"{phrase}\" {done} (only those words, "
                    "not the whole sentence) and save the document.",
        files={name: odt(lines)}, apps=[writer(name)], setup=OFFICE_SETUP,
        checker={"type": "gate",
                 "gate": {"type": "document", "path": name, "paragraphs": [{"text": lines[target], spans: [phrase]}]},
                 "then": {"type": "document", "path": name,
                          "paragraphs": [{"text": t, spans: []} for i, t in enumerate(lines) if i != target]}},
        oracle=oracle, max_steps=30)


def labelled(ctx: Any, label: str, timeout: float = 30.0) -> Iterator[Any]:
    """The text field a dialog's label names (LibreOffice's fields have no names of their own): the editable
    text on the label's row, to its right."""

    def look() -> dict[str, Any] | None:
        nodes = tree(ctx, app="writer")
        for node in nodes:
            if node["role"] == "label" and node["name"] == label and node.get("box"):
                lx, ly, lw, lh = node["box"]
                for field_ in nodes:
                    box = field_.get("box")
                    if field_["role"] == "text" and box and box[0] >= lx + lw - 2 and box[1] <= ly + lh // 2 <= \
                            box[1] + box[3]:
                        return field_
        return None

    return (yield from until(look, f"the field {label}", timeout))


def _replace_dialog(ctx: Any, pairs: list[tuple[str, str]]) -> Iterator[Any]:
    """Replace every ``old`` by ``new`` with the Find & Replace dialog's Replace All, pair by pair."""
    yield key("ctrl+h")
    for old, new in pairs:
        for label, text in (("Find:", old), ("Replace:", new)):
            box = yield from labelled(ctx, label)
            yield from click_into(ctx, box, app="writer")
            yield key("ctrl+a")
            yield type_text(text, "keys")
        yield wait(300)
        button = yield from find(ctx, "push button", "Replace All", app="writer")
        yield click(*centre(button))
        yield wait(800)
    close = yield from find(ctx, "push button", "Close", app="writer")
    yield click(*centre(close))
    yield wait(500)


@template("writer-replace-word", app="writer")
def replace_word(rng: random.Random) -> Variant:
    """Replace a word throughout a document (a renamed project)."""
    name = f"{rng.choice(WORDS)}-plan.odt"
    old, new = rng.sample(WORDS, 2)
    lines = _sentences(rng, 5, avoid=(old, new))
    for index in rng.sample(range(len(lines)), 3):
        lines[index] = lines[index].rstrip(".") + f", says the {old} group."
    title = f"The {old} project"
    lines.insert(0, title)
    wanted = [t.replace(old, new) for t in lines]

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from opened(ctx, name)
        yield from _replace_dialog(ctx, [(old, new)])
        yield from save(ctx, name, lambda doc: texts(doc) == wanted)

    return Variant(
        instruction=f"The project \"{old}\" has been renamed \"{new}\". In {name}, open in LibreOffice Writer, "
                    f"replace every occurrence of the word \"{old}\" with \"{new}\" and save the document.",
        files={name: odt(lines)}, apps=[writer(name)], setup=OFFICE_SETUP,
        checker={"type": "weighted", "parts": [
            {"name": f"no {old} left", "weight": 1, "check": {
                "type": "document", "path": name, "not_contains": [old], "contains": [new]}},
            {"name": "every line as it should read", "weight": 2, "check": unchanged(name, wanted)},
        ]},
        oracle=oracle, max_steps=30)


@template("writer-fill-letter", app="writer")
def fill_letter(rng: random.Random) -> Variant:
    """Fill a form letter's placeholders with a recipient's name, a date and a city."""
    name = f"letter-{rng.choice(WORDS)}.odt"
    values = {"[NAME]": person(rng), "[DATE]": f"{rng.randint(1, 28)} {rng.choice(MONTHS)} 2025",
              "[CITY]": rng.choice(CITIES)}
    event = rng.choice(WORDS)
    lines = ["[CITY], [DATE]", "Dear [NAME],",
             f"Thank you for joining the {event} workshop in [CITY].",
             "Your certificate is enclosed; it is valid from [DATE].",
             "Kind regards,", person(rng)]

    def fill(text: str) -> str:
        for placeholder, value in values.items():
            text = text.replace(placeholder, value)
        return text

    wanted = [fill(t) for t in lines]

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from opened(ctx, name)
        yield from _replace_dialog(ctx, list(values.items()))
        yield from save(ctx, name, lambda doc: texts(doc) == wanted)

    return Variant(
        instruction=f"Fill in the form letter {name} (open in LibreOffice Writer): replace every [NAME] with "
                    f"\"{values['[NAME]']}\", every [DATE] with \"{values['[DATE]']}\" and every [CITY] with "
                    f"\"{values['[CITY]']}\" (the brackets go too). Then save the document.",
        files={name: odt(lines)}, apps=[writer(name)], setup=OFFICE_SETUP,
        checker={"type": "weighted", "parts": [
            {"name": f"{placeholder} filled in", "weight": 1, "check": {
                "type": "document", "path": name, "not_contains": [placeholder],
                "paragraphs": [{"text": t} for t in wanted if placeholder in lines[wanted.index(t)]]}}
            for placeholder in values]},
        oracle=oracle, max_steps=70)


@template("writer-delete-paragraph", app="writer")
def delete_paragraph(rng: random.Random) -> Variant:
    """Delete the paragraph that mentions a given city."""
    name = f"{rng.choice(WORDS)}-news.odt"
    city = rng.choice(CITIES)
    lines = [f"Office news, {rng.choice(MONTHS)}", *[t for t in _sentences(rng, 5) if city not in t][:4]]
    target = rng.randint(1, len(lines) - 1)  # between two paragraphs: the oracle's shift+Down takes it whole
    doomed = f"The branch in {city} moves to a new building in {rng.choice(MONTHS)}."
    lines.insert(target, doomed)
    kept = [t for t in lines if t != doomed]

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from opened(ctx, name)
        yield key("Down", target)
        yield key("Home")
        yield key("shift+Down")
        yield key("Delete")
        yield from save(ctx, name, lambda doc: texts(doc) == kept)

    return Variant(
        instruction=f"In {name}, open in LibreOffice Writer, delete the whole paragraph about the {city} branch "
                    "(leave no empty line in its place) and save the document.",
        files={name: odt(lines)}, apps=[writer(name)], setup=OFFICE_SETUP,
        checker={"type": "gate",
                 "gate": {"type": "document", "path": name, "not_contains": [city]},
                 "then": {"type": "weighted", "parts": [
                     {"name": "paragraph gone", "weight": 2, "check": {
                         "type": "document", "path": name, "not_contains": [city]}},
                     {"name": "the others kept, no empty line", "weight": 1, "check": {
                         "type": "document", "path": name,
                         "matches": "\\A" + "\\n".join(_re(t) for t in kept) + "\\Z"}}]}},
        oracle=oracle, max_steps=30)


def _re(text: str) -> str:
    import re

    return re.escape(text)


@template("writer-bullet-list", app="writer")
def bullet_list(rng: random.Random) -> Variant:
    """Turn the lines of an agenda into a bulleted list."""
    name = f"agenda-{rng.choice(WORDS)}.odt"
    intro = f"Agenda for the {rng.choice(WORDS)} meeting on {rng.choice(DAYS)}:"
    items = [f"{w.title()} {rng.choice(['update', 'budget', 'plan', 'review', 'questions'])}"
             for w in rng.sample(WORDS, rng.randint(3, 5))]
    outro = f"Please bring your {rng.choice(PRODUCTS)}."
    lines = [intro, *items, outro]

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from opened(ctx, name)
        yield key("Down")
        yield key("shift+Down", len(items) - 1)
        yield key("shift+End")
        yield key("shift+F12")
        yield from save(ctx, name, lambda doc: [p.list_item for p in doc.paragraphs].count(True) == len(items))

    return Variant(
        instruction=f"In {name}, open in LibreOffice Writer, make the {len(items)} agenda items (\"{items[0]}\" to "
                    f"\"{items[-1]}\") a bulleted list, one item per bullet; the first and last lines stay normal "
                    "paragraphs. Save the document.",
        files={name: odt(lines)}, apps=[writer(name)], setup=OFFICE_SETUP,
        checker={"type": "gate",
                 "gate": {"type": "document", "path": name, "paragraphs": [{"text": items[0], "list_item": True}]},
                 "then": {"type": "weighted", "parts": [
                     {"name": "items in a list", "weight": 2, "check": {
                         "type": "document", "path": name,
                         "paragraphs": [{"text": t, "list_item": True} for t in items]}},
                     {"name": "first and last lines not", "weight": 1, "check": {
                         "type": "document", "path": name,
                         "paragraphs": [{"text": t, "list_item": False} for t in (intro, outro)]}}]}},
        oracle=oracle, max_steps=30)


@template("writer-font-size", app="writer")
def font_size(rng: random.Random) -> Variant:
    """Set one paragraph's font size."""
    name = f"{rng.choice(WORDS)}-flyer.odt"
    size = rng.choice([14, 16, 18, 20, 24, 28])
    lines = _sentences(rng, 4)
    target = rng.randrange(len(lines))

    def oracle(ctx: Any) -> Iterator[Any]:
        def size_box() -> dict[str, Any] | None:
            return next((n for n in tree(ctx, app="writer") if n["role"] == "text"
                         and (n.get("text") or "").endswith(" pt")), None)

        def shows(text: str, focused: bool) -> Callable[[], bool]:
            def look() -> bool:
                now = current(ctx, box, app="writer")
                return now is not None and now.get("text") == text and ("focused" in now["states"]) == focused
            return look

        yield from opened(ctx, name)
        yield from select_line(ctx, target, lines[target])
        box = yield from until(size_box, "the font size box")
        yield from click_into(ctx, box, app="writer")
        yield key("ctrl+a")
        yield type_text(str(size), "keys")
        yield from until(shows(str(size), focused=True), f"{size} to be typed into the font size box")
        yield key("Return")
        # Return applies the size and gives the document the focus back, and the box shows the size applied
        yield from until(shows(f"{size} pt", focused=False), f"the font size {size} pt to be applied")
        yield from save(ctx, name, lambda doc: doc.paragraphs[target].font_size == size)

    return Variant(
        instruction=f"In {name}, open in LibreOffice Writer, set the font size of the sentence \"{lines[target]}\" "
                    f"to {size} pt (the other lines stay 12 pt) and save the document.",
        files={name: odt(lines)}, apps=[writer(name)], setup=OFFICE_SETUP,
        checker={"type": "gate",
                 "gate": {"type": "document", "path": name,
                          "paragraphs": [{"text": lines[target], "font_size": size}]},
                 "then": {"type": "weighted", "parts": [
                     {"name": f"{size} pt", "weight": 2, "check": {
                         "type": "document", "path": name,
                         "paragraphs": [{"text": lines[target], "font_size": size}]}},
                     {"name": "the others 12 pt", "weight": 1, "check": {
                         "type": "document", "path": name,
                         "paragraphs": [{"text": t, "font_size": 12} for i, t in enumerate(lines) if i != target]}}]}},
        oracle=oracle, max_steps=30)


@template("writer-insert-table", app="writer")
def insert_table(rng: random.Random) -> Variant:
    """Add a two-column table of items and quantities at the end of an order letter."""
    name = f"order-{rng.choice(WORDS)}.odt"
    products = rng.sample(PRODUCTS, rng.randint(2, 4))
    rows = [["Item", "Quantity"], *[[p, str(rng.randint(2, 40))] for p in products]]
    lines = [f"Order for the {rng.choice(CITIES)} office", f"Please deliver the following by {rng.choice(DAYS)}:"]
    listing = "; ".join(f"{p}: {q}" for p, q in rows[1:])

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from opened(ctx, name)
        yield key("ctrl+End")
        yield key("Return")
        yield key("ctrl+F12")
        ok = yield from find(ctx, "push button", "Insert", app="writer", timeout=30)
        yield wait(500)
        yield click(*centre(ok))
        yield wait(1000)
        cells = [c for row in rows for c in row]
        for index, cell in enumerate(cells):
            yield type_text(cell, "keys")
            if index < len(cells) - 1:
                yield key("Tab")  # the last cell's Tab adds a row
        yield from save(ctx, name, lambda doc: bool(doc.tables) and doc.tables[0] == rows)

    return Variant(
        instruction=f"At the end of {name} (open in LibreOffice Writer), insert a table with two columns: a header "
                    f"row \"Item\" | \"Quantity\", then one row per item, in this order: {listing}. Save the "
                    "document.",
        files={name: odt(lines)}, apps=[writer(name)], setup=OFFICE_SETUP,
        checker={"type": "weighted", "parts": [
            {"name": "a table of the right size", "weight": 1, "check": {
                "type": "document", "path": name, "tables": [{"rows": len(rows), "columns": 2}]}},
            {"name": "its cells", "weight": 2, "check": {
                "type": "document", "path": name, "tables": [{"rows": len(rows), "columns": 2, "cells": rows}]}},
        ]},
        oracle=oracle, max_steps=60)


@template("writer-count-answer", app="writer")
def count_answer(rng: random.Random) -> Variant:
    """Count the orders from one city in a list and write the count at the end of the document."""
    name = f"orders-{rng.choice(WORDS)}.odt"
    cities = rng.sample(CITIES, 3)
    city = cities[0]
    orders = [f"Order {100 + i}: {rng.randint(1, 9)} {rng.choice(PRODUCTS)}s for {rng.choice(cities)}"
              for i in range(rng.randint(6, 9))]
    count = sum(o.endswith(f"for {city}") for o in orders)
    answer = f"Orders for {city}: {count}"
    lines = ["Orders this week", *orders]

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from opened(ctx, name)
        yield key("ctrl+End")
        yield key("Return")
        yield type_text(answer, "keys")
        yield from save(ctx, name, lambda doc: texts(doc)[-1:] == [answer])

    return Variant(
        instruction=f"The document {name} (open in LibreOffice Writer) lists this week's orders. Count the orders "
                    f"for {city}, and add a last line that reads \"Orders for {city}: N\" with N the count. "
                    "Save the document.",
        files={name: odt(lines)}, apps=[writer(name)], setup=OFFICE_SETUP,
        checker={"type": "gate",
                 "gate": {"type": "document", "path": name, "contains": [f"Orders for {city}:"]},
                 "then": {"type": "weighted", "parts": [
                     {"name": "the count", "weight": 2, "check": {
                         "type": "document", "path": name, "paragraphs": [{"text": answer}]}},
                     {"name": "the orders kept", "weight": 1, "check": unchanged(name, lines)}]}},
        oracle=oracle, max_steps=30)


@template("writer-save-as", app="writer")
def save_as(rng: random.Random) -> Variant:
    """Write a short note in a new document and save it under a given name, as ODT or Word."""
    fmt = rng.choice(["odt", "docx"])
    name = f"{rng.choice(WORDS)}-{rng.randint(10, 99)}.{fmt}"
    lines = [f"Note for {person(rng)}", _sentences(rng, 1)[0]]
    kind = "an OpenDocument text (.odt)" if fmt == "odt" else "a Word document (.docx)"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from find(ctx, "frame", app="writer", contains="Untitled", timeout=90)
        yield wait(500)
        yield type_text("\n".join(lines), "keys")
        yield key("ctrl+shift+s")
        yield from find(ctx, "push button", "Save", app="writer", timeout=30)
        yield wait(500)
        if fmt == "docx":
            yield from _choose_docx(ctx)
        yield key("ctrl+a")
        yield type_text(name, "keys")
        yield wait(600)
        yield key("Return")
        yield from saved(ctx, name, lambda data: (doc := document(data)) is not None and doc.format == fmt
                         and texts(doc) == lines, timeout=30)

    return Variant(
        instruction=f"In LibreOffice Writer, write a document of two lines: \"{lines[0]}\" and \"{lines[1]}\". Save "
                    f"it in your home folder as {name}, {kind}.",
        apps=[writer()], setup=OFFICE_SETUP,
        checker={"type": "gate",
                 "gate": {"type": "document", "path": name, "format": fmt},
                 "then": {"type": "weighted", "parts": [
                     {"name": f"a {fmt} file", "weight": 1, "check": {"type": "document", "path": name, "format": fmt}},
                     {"name": "its two lines", "weight": 2, "check": unchanged(name, lines)}]}},
        oracle=oracle, max_steps=30)


def _choose_docx(ctx: Any) -> Iterator[Any]:
    """Pick the Word format in the save dialog's file type list (a long popup: the keyboard walks down it)."""
    box = yield from find(ctx, "combo box", app="writer", contains="ODF Text Document")
    yield click(*centre(box))
    yield from find(ctx, "menu item", app="writer", contains="Word 2007")
    items = [n for n in tree(ctx, app="writer") if n["role"] == "menu item"]
    now = next(i for i, n in enumerate(items) if "selected" in n.get("states", ()))
    word = next(i for i, n in enumerate(items) if "Word 2007" in n["name"])
    yield key("Down", word - now)
    yield key("Return")
    yield from find(ctx, "combo box", app="writer", contains="Word 2007")
    yield wait(300)


@template("writer-docx-title", app="writer")
def docx_title(rng: random.Random) -> Variant:
    """Make a Word document's title bold and centred, and keep it a Word document."""
    name = f"{rng.choice(WORDS)}-{rng.choice(['brief', 'summary', 'handout'])}.docx"
    title = f"{rng.choice(WORDS).title()} {rng.choice(['handbook', 'guidelines', 'overview'])}"
    body = _sentences(rng, rng.randint(2, 4))

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from opened(ctx, name)
        yield from select_line(ctx, 0, title)
        yield key("ctrl+b")
        yield key("ctrl+e")
        yield from save(ctx, name, lambda doc: doc.format == "docx" and doc.paragraphs[0].bold
                        and doc.paragraphs[0].align == "center")

    def title_is(**formatting: Any) -> dict[str, Any]:
        return {"type": "document", "path": name, "format": "docx", "paragraphs": [{"text": title, **formatting}]}

    return Variant(
        instruction=f"{name} is a Word document, open in LibreOffice Writer. Make its title \"{title}\" bold and "
                    "centred, and save it, keeping the Word format (.docx).",
        files={name: docx([title, *body])}, apps=[writer(name)], setup=OFFICE_SETUP,
        checker={"type": "weighted", "parts": [
            {"name": "title bold", "weight": 1, "check": title_is(bold=True)},
            {"name": "title centred", "weight": 1, "check": title_is(align="center")},
            {"name": "body unchanged", "weight": 1, "check": {"type": "gate", "gate": title_is(bold=True), "then": {
                "type": "document", "path": name,
                "paragraphs": [{"text": t, "bold": False, "align": "left"} for t in body]}}},
        ]},
        oracle=oracle, max_steps=30)


@template("writer-meeting-minutes", app="writer", long=True)
def meeting_minutes(rng: random.Random) -> Variant:
    """Write meeting minutes from scratch: a Heading 1 title, a bulleted list of attendees and a table of
    actions, saved under a given name."""
    name = f"minutes-{rng.choice(WORDS)}.odt"
    title = f"{rng.choice(WORDS).title()} meeting, {rng.randint(1, 28)} {rng.choice(MONTHS)}"
    people = [f"{first} {last}" for first, last in zip(rng.sample(FIRST_NAMES, 3), rng.sample(LAST_NAMES, 3))]
    actions = [["Action", "Owner"], *[[f"{verb} the {w} {thing}", rng.choice(people).split()[0]] for verb, w, thing in
                                       zip(rng.sample(["Update", "Send", "Check", "Print", "Order"], 2),
                                           rng.sample(WORDS, 2), rng.sample(["plan", "list", "report", "budget"], 2))]]

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from find(ctx, "frame", app="writer", contains="Untitled", timeout=90)
        yield wait(500)
        yield key("ctrl+1")
        yield type_text(title, "keys")
        yield key("Return")
        yield type_text("Attendees:", "keys")
        yield key("Return")
        yield key("shift+F12")
        yield from bullet_here(ctx, True)
        for who in people:
            yield type_text(who, "keys")
            yield key("Return")
        yield key("shift+F12")  # the empty paragraph after the last name leaves the list
        yield from bullet_here(ctx, False)
        yield type_text("Actions:", "keys")
        yield key("Return")
        yield key("ctrl+F12")
        ok = yield from find(ctx, "push button", "Insert", app="writer", timeout=30)
        yield wait(500)
        yield click(*centre(ok))
        yield wait(1000)
        cells = [c for row in actions for c in row]
        for index, cell in enumerate(cells):
            yield type_text(cell, "keys")
            if index < len(cells) - 1:
                yield key("Tab")
        yield key("ctrl+shift+s")
        yield from find(ctx, "push button", "Save", app="writer", timeout=30)
        yield wait(500)
        yield key("ctrl+a")
        yield type_text(name, "keys")
        yield wait(600)
        yield key("Return")
        yield from saved(ctx, name, lambda data: (doc := document(data)) is not None and doc.format == "odt"
                         and doc.tables == [actions], timeout=30)

    people_text = ", ".join(people)
    table_text = "; ".join(f"\"{a}\" (owner {o})" for a, o in actions[1:])
    return Variant(
        instruction=f"In LibreOffice Writer, write the minutes of a meeting in a new document: the title \"{title}\" "
                    f"in the style Heading 1; a line \"Attendees:\" followed by a bulleted list of {people_text} "
                    "(one name per bullet, in this order); a line \"Actions:\" followed by a table of two columns "
                    f"with the header row \"Action\" | \"Owner\" and one row per action: {table_text}. Save it in "
                    f"your home folder as {name} (OpenDocument text).",
        apps=[writer()], setup=OFFICE_SETUP,
        checker={"type": "gate",
                 "gate": {"type": "document", "path": name, "format": "odt"},
                 "then": {"type": "weighted", "parts": [
                     {"name": "the title, Heading 1", "weight": 1, "check": {
                         "type": "document", "path": name,
                         "paragraphs": [{"text": title, "style": "Heading 1"}]}},
                     {"name": "the attendees, bulleted", "weight": 1, "check": {
                         "type": "document", "path": name,
                         "paragraphs": [{"text": "Attendees:", "list_item": False},
                                        *({"text": who, "list_item": True} for who in people)]}},
                     {"name": "the actions table", "weight": 1, "check": {
                         "type": "document", "path": name, "contains": ["Actions:"],
                         "tables": [{"rows": len(actions), "columns": 2, "cells": actions}]}}]}},
        oracle=oracle, max_steps=60, time_limit=400)
