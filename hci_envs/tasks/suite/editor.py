"""Text editor tasks (mousepad, GTK): edit a file of the home and save it."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from . import Variant, template
from .apps import editor
from .common import WORDS, find, key, person, saved, type_text, wait, words


def _lines(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.sample(WORDS, rng.randint(3, 6))) for _ in range(n)]


def _edit(ctx: Any, path: str, new_text: str) -> Iterator[Any]:
    """Select everything, type the new text, save, and wait until the file holds it."""
    yield wait(600)  # the editor's window and its text view
    yield key(["ctrl+a", "Delete"])  # (a paste over a selection: GTK drops the selection as PRIMARY changes hands)
    yield type_text(new_text, "paste")
    yield key("ctrl+s")
    yield from saved(ctx, path, lambda data: data.decode("utf-8", "replace") == new_text)


@template("editor-append-line", app="editor")
def append_line(rng: random.Random) -> Variant:
    """Add a given line at the end of a file and save it."""
    lines = _lines(rng, rng.randint(3, 7))
    extra = f"{person(rng)} signed on {rng.randint(1, 28)} {rng.choice(['March', 'June', 'October'])}"
    original = "\n".join(lines) + "\n"
    wanted = original + extra + "\n"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield wait(600)
        yield key("ctrl+End")
        yield type_text(extra + "\n", "keys")
        yield key("ctrl+s")
        yield from saved(ctx, "notes.txt", lambda data: data.decode("utf-8", "replace") == wanted)

    return Variant(
        instruction=f"In the text editor, add the line \"{extra}\" at the end of notes.txt (after the last line) "
                    "and save the file.",
        files={"notes.txt": original}, apps=[editor("notes.txt")],
        checker={"type": "file", "path": "notes.txt", "equals": wanted}, oracle=oracle, max_steps=20)


@template("editor-replace-word", app="editor")
def replace_word(rng: random.Random) -> Variant:
    """Replace every occurrence of one word by another, then save."""
    old, new = words(rng, 2)
    lines = [line for line in _lines(rng, 6) if old not in line.split()]
    for index in rng.sample(range(len(lines)), 3):
        parts = lines[index].split()
        parts.insert(rng.randrange(len(parts) + 1), old)
        lines[index] = " ".join(parts)
    original = "\n".join(lines) + "\n"
    wanted = "\n".join(" ".join(new if w == old else w for w in line.split()) for line in lines) + "\n"
    return Variant(
        instruction=f"In the text editor, replace every occurrence of the word \"{old}\" in notes.txt with "
                    f"\"{new}\" and save the file.",
        files={"notes.txt": original}, apps=[editor("notes.txt")],
        checker={"type": "weighted", "parts": [
            {"name": f"no {old} left", "weight": 1,
             "check": {"type": "file", "path": "notes.txt", "matches": rf"\A(?![\s\S]*\b{old}\b)[\s\S]*\b{new}\b"}},
            {"name": "the rest unchanged", "weight": 2, "check": {"type": "file", "path": "notes.txt",
                                                                  "equals": wanted}},
        ]},
        oracle=lambda ctx: _edit(ctx, "notes.txt", wanted), max_steps=30)


@template("editor-delete-lines", app="editor")
def delete_lines(rng: random.Random) -> Variant:
    """Delete the lines that mention a word."""
    target = rng.choice(WORDS)
    lines = [line for line in _lines(rng, 8) if target not in line.split()]
    marked = rng.sample(range(len(lines)), 3)
    for index in marked:
        lines[index] = f"{lines[index]} {target}"
    original = "\n".join(lines) + "\n"
    wanted = "\n".join(line for i, line in enumerate(lines) if i not in marked) + "\n"
    return Variant(
        instruction=f"In notes.txt, delete every line that contains the word \"{target}\" (keep the other lines "
                    "as they are) and save the file.",
        files={"notes.txt": original}, apps=[editor("notes.txt")],
        checker={"type": "file", "path": "notes.txt", "equals": wanted},
        oracle=lambda ctx: _edit(ctx, "notes.txt", wanted), max_steps=30)


@template("editor-sort-lines", app="editor")
def sort_lines(rng: random.Random) -> Variant:
    """Sort a shopping list alphabetically."""
    items = rng.sample(WORDS, rng.randint(5, 8))
    original = "\n".join(items) + "\n"
    wanted = "\n".join(sorted(items)) + "\n"
    return Variant(
        instruction="Sort the lines of list.txt in alphabetical order (one word per line, as now) and save it.",
        files={"list.txt": original}, apps=[editor("list.txt")],
        checker={"type": "file", "path": "list.txt", "equals": wanted},
        oracle=lambda ctx: _edit(ctx, "list.txt", wanted), max_steps=30)


@template("editor-new-file", app="editor")
def new_file(rng: random.Random) -> Variant:
    """Write a note into a new file, saved under a given name (the save dialog)."""
    name = f"{rng.choice(WORDS)}-{rng.randint(10, 99)}.txt"
    text = f"Meeting with {person(rng)} at {rng.randint(8, 17)}:00\n"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield wait(600)
        yield type_text(text, "keys")
        yield key("ctrl+s")
        yield from find(ctx, "push button", "Save")  # the GTK save dialog, in the home, its name field focused
        yield key("ctrl+a")
        yield type_text(name, "keys")
        yield wait(600)  # the name field's completion looks at the folder: a Return meanwhile is taken by it
        yield key("Return")
        yield from saved(ctx, name, lambda data: data.decode("utf-8", "replace") == text)

    return Variant(
        instruction=f"In the text editor, write the line \"{text.strip()}\" and save it as {name} in your home "
                    "folder.",
        apps=[editor()], checker={"type": "file", "path": name, "equals": text}, oracle=oracle, max_steps=25)
