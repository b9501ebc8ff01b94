"""File manager tasks (pcmanfm, GTK 2): rename, create, copy, move and trash the home's files and folders.

The checkers read the home: which files are where, with their contents unchanged, and the Trash
(``~/.local/share/Trash/files``, where pcmanfm's Delete key moves files without asking). Each home holds a
few other files besides the task's, so that a careless selection shows.

pcmanfm's folder view exposes each file as an ``icon`` element whose text is the file's name; the oracles
select icons with clicks (ctrl+click for more), then use its keys: F2 renames, ctrl+shift+n makes a folder,
ctrl+x / ctrl+c and ctrl+v move and copy, Delete trashes.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from . import Variant, template
from .apps import files
from ...errors import ActionTimeoutError
from .common import WORDS, centre, click, find, home, key, tree, type_text, until, wait

APP = "files"
TRASH = ".local/share/Trash/files"

_KINDS = {
    "txt": lambda rng: f"{' '.join(rng.sample(WORDS, 6))}\n",
    "csv": lambda rng: "item,count\n" + "".join(f"{w},{rng.randint(1, 99)}\n" for w in rng.sample(WORDS, 3)),
    "md": lambda rng: f"# {rng.choice(WORDS).title()}\n\n{' '.join(rng.sample(WORDS, 5))}\n",
    "log": lambda rng: "".join(f"12:{rng.randint(10, 59)} {rng.choice(WORDS)} ok\n" for _ in range(3)),
    "png": lambda rng: f"PNG image {rng.random()}\n",  # only the name matters to the file manager
    "jpg": lambda rng: f"JPEG image {rng.random()}\n",
    "pdf": lambda rng: f"%PDF-1.4 {rng.random()}\n",
}


def _content(rng: random.Random, name: str) -> str:
    return _KINDS.get(name.rsplit(".", 1)[-1], _KINDS["txt"])(rng)


def _names(rng: random.Random, n: int, extensions: tuple[str, ...] = ("txt", "csv", "md", "pdf"),
           avoid: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """``n`` distinct file names, none of them in ``avoid`` (nor sharing a stem with them)."""
    stems = {name.split(".")[0] for name in avoid}
    chosen: list[str] = []
    while len(chosen) < n:
        stem = f"{rng.choice(WORDS)}-{rng.choice(WORDS)}"
        if stem not in stems and stem.split("-")[0] != stem.split("-")[1]:
            stems.add(stem)
            chosen.append(f"{stem}.{rng.choice(extensions)}")
    return chosen


def _home(rng: random.Random, names: list[str]) -> dict[str, str]:
    return {name: _content(rng, name) for name in names}


def _has(path: str, content: str) -> dict[str, Any]:
    return {"type": "file", "path": path, "equals": content}


def _gone(path: str) -> dict[str, Any]:
    # `file` checks look for regular files only: a folder is gone when `test -e` fails
    return {"type": "command", "run": f"test -e '{path}'", "exit_code": 1}


def _all(*checks: dict[str, Any]) -> dict[str, Any]:
    return checks[0] if len(checks) == 1 else {"type": "all", "checks": list(checks)}


# -- the oracles' moves --------------------------------------------------------------------------------------
def _icon(ctx: Any, name: str) -> Iterator[Any]:
    """Wait until the folder view shows ``name``'s icon, and return its node."""

    def look() -> dict[str, Any] | None:
        for node in tree(ctx, app=APP):
            box = node.get("box")
            if node["role"] == "icon" and node.get("text") == name and box and box[2] > 0 and box[3] > 0:
                return node
        return None

    return (yield from until(look, f"the icon of {name}", 20))


def _select(ctx: Any, names: list[str]) -> Iterator[Any]:
    """Click the first icon, ctrl+click the others, and wait until all of them are selected, as the icons show
    and as pcmanfm's status bar says. The status bar is the one to trust: pcmanfm acts on a copy of the
    selection that it refreshes at most every 200 ms (and at idle priority), so a key pressed soon after a
    ctrl+click can act on the selection before it (Delete trashed one file of two, on a loaded machine); the
    status bar is written from that copy each time it is refreshed."""
    for index, name in enumerate(names):
        node = yield from _icon(ctx, name)
        x, y = centre(node)
        yield {"type": "click", "x": x, "y": y, "modifiers": ["ctrl"] if index else []}
    said = f'"{names[0]}"' if len(names) == 1 else f"{len(names)} items selected"

    def selected() -> bool:
        nodes = tree(ctx, app=APP)
        marked = {n.get("text") for n in nodes if n["role"] == "icon" and "selected" in n.get("states", ())}
        status = " ".join(n.get("text") or "" for n in nodes if n["role"] == "status bar")
        return marked == set(names) and status.startswith(said)

    yield from until(selected, f"{', '.join(names)} selected, and the status bar saying {said}", 10, every_ms=400)


def _exists(ctx: Any, *paths: str, present: bool = True, timeout: float = 20) -> Iterator[Any]:
    yield from until(lambda: all((home(ctx) / p).exists() == present for p in paths),
                     f"{', '.join(paths)} {'to appear' if present else 'to go'}", timeout, every_ms=400)


def _name_dialog(ctx: Any, title: str, name: str) -> Iterator[Any]:
    """In a dialog that asks for a name (its entry focused), replace the name and confirm."""
    yield from find(ctx, "dialog", contains=title, app=APP)
    yield wait(300)
    yield key("ctrl+a")
    yield type_text(name, "keys")
    yield wait(300)
    yield key("Return")


def _open_folder(ctx: Any, folder: str) -> Iterator[Any]:
    """Go to a folder of the home by the location bar (a new folder's icon can be missing from the tree), wait
    until the view shows it, and give the view the keyboard (a click on its empty part)."""
    where = str(home(ctx) / folder).rstrip("/")
    yield key("ctrl+l")
    yield wait(300)
    yield type_text(where, "keys")
    yield wait(500)  # the entry's completion catches up, else Return would take its suggestion
    yield key("Return")

    def inside() -> bool:
        return any(n["role"] == "text" and n.get("text") == where for n in tree(ctx, app=APP))

    yield from until(inside, f"the view of {folder or 'the home'}", every_ms=400)
    yield wait(500)
    yield click(1200, 740)
    yield wait(300)


def _paste_into(ctx: Any, names: list[str], folder: str, cut: bool) -> Iterator[Any]:
    """Cut (or copy) files of the home and paste them into a folder; again for any that did not arrive."""
    for attempt in range(3):
        left = [n for n in names if not (home(ctx) / folder / n).exists()]
        if not left:
            return
        if attempt:
            yield from _open_folder(ctx, "")
        yield from _select(ctx, left)
        yield key("ctrl+x" if cut else "ctrl+c")
        yield wait(300)
        yield from _open_folder(ctx, folder)
        yield key("ctrl+v")
        try:
            yield from _exists(ctx, *(f"{folder}/{n}" for n in left), timeout=8)
        except ActionTimeoutError:
            if attempt == 2:
                raise


def _rename(ctx: Any, old: str, new: str) -> Iterator[Any]:
    yield from _select(ctx, [old])
    yield key("F2")
    yield from _name_dialog(ctx, "Rename File", new)
    yield from _exists(ctx, new)


def _copied(copy: str, source: str, given: dict[str, str]) -> dict[str, Any]:
    """Nothing before the copy exists; then its contents (2) and the original left alone (1)."""
    return {"type": "gate", "gate": {"type": "file", "path": copy}, "then": {"type": "weighted", "parts": [
        {"name": "the copy's contents", "weight": 2, "check": _has(copy, given[source])},
        {"name": "the original kept", "weight": 1, "check": _has(source, given[source])},
    ]}}


# -- the templates -------------------------------------------------------------------------------------------
@template("files-rename", app="files")
def rename(rng: random.Random) -> Variant:
    """Rename a file (its contents unchanged)."""
    names = _names(rng, 4)
    old = names[0]
    new = f"{rng.choice(['final', 'approved', 'shared', 'clean', 'signed', 'reviewed', 'sent'])}-{rng.choice(WORDS)}" \
          f".{old.rsplit('.', 1)[1]}"
    given = _home(rng, names)

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _rename(ctx, old, new)

    return Variant(
        instruction=f"In the file manager, rename the file {old} in your home folder to {new}.",
        files=given, apps=[files()], oracle=oracle, max_steps=20,
        checker={"type": "weighted", "parts": [
            {"name": "the new name, same contents", "weight": 2, "check": _has(new, given[old])},
            {"name": "the old name gone", "weight": 1, "check": _gone(old)},
        ]})


@template("files-rename-folder", app="files")
def rename_folder(rng: random.Random) -> Variant:
    """Rename a folder (what it holds moves with it)."""
    old, new = (f"{w}-{rng.randint(2019, 2025)}" for w in rng.sample(WORDS, 2))
    inside = _names(rng, 2)
    given = {**_home(rng, _names(rng, 3, avoid=set(inside))), **{f"{old}/{n}": _content(rng, n) for n in inside}}

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _rename(ctx, old, new)

    return Variant(
        instruction=f"In the file manager, rename the folder {old} in your home folder to {new}.",
        files=given, apps=[files()], oracle=oracle, max_steps=20,
        checker={"type": "weighted", "parts": [
            {"name": "the folder's files under the new name", "weight": 2,
             "check": _all(*(_has(f"{new}/{n}", given[f"{old}/{n}"]) for n in inside))},
            {"name": "the old name gone", "weight": 1, "check": _gone(old)},
        ]})


@template("files-new-folder-move", app="files")
def new_folder_move(rng: random.Random) -> Variant:
    """Make a folder and move some of the files into it."""
    names = _names(rng, rng.randint(5, 6))
    moved = sorted(rng.sample(names, rng.randint(2, 3)))
    folder = rng.choice(["Archive", "Taxes", "Trip", "Project", "Receipts", "Drafts"]) + f" {rng.randint(2019, 2025)}"
    given = _home(rng, names)

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _icon(ctx, names[0])
        yield key("ctrl+shift+n")
        yield from _name_dialog(ctx, "New Folder", folder)
        yield from _exists(ctx, folder)
        yield from _paste_into(ctx, moved, folder, cut=True)

    listed = ", ".join(moved[:-1]) + f" and {moved[-1]}"
    return Variant(
        instruction=f"In the file manager, create a folder named \"{folder}\" in your home folder and move the "
                    f"files {listed} into it.",
        files=given, apps=[files()], oracle=oracle, max_steps=120,
        checker={"type": "gate", "gate": {"type": "command", "run": f"test -d '{folder}'"},
                 "then": {"type": "weighted", "parts": [
                     *({"name": f"{n} in the folder", "weight": 1, "check": _has(f"{folder}/{n}", given[n])}
                       for n in moved),
                     {"name": "moved, not copied", "weight": 1, "check": _all(*(_gone(n) for n in moved))},
                     {"name": "the other files stay", "weight": 1,
                      "check": _all(*(_has(n, given[n]) for n in names if n not in moved))},
                 ]}})


@template("files-trash-matching", app="files")
def trash_matching(rng: random.Random) -> Variant:
    """Move to the Trash every file of one kind (by extension), keeping the rest."""
    kind = rng.choice(["log", "png", "csv"])
    doomed = _names(rng, rng.randint(2, 3), (kind,))
    kept = _names(rng, 4, tuple(e for e in ("txt", "md", "pdf", "jpg") if e != kind), avoid=set(doomed))
    given = _home(rng, doomed + kept)

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _select(ctx, doomed)
        yield key("Delete")
        yield from _exists(ctx, *doomed, present=False)

    return Variant(
        instruction=f"In the file manager, move every .{kind} file in your home folder to the Trash. Keep all the "
                    "other files.",
        files=given, apps=[files()], oracle=oracle, max_steps=20,
        checker={"type": "gate", "gate": _all(*(_gone(n) for n in doomed)), "then": {"type": "weighted", "parts": [
            {"name": "in the Trash", "weight": 1, "check": _all(*(_has(f"{TRASH}/{n}", given[n]) for n in doomed))},
            {"name": "the other files kept", "weight": 1, "check": _all(*(_has(n, given[n]) for n in kept))},
        ]}})


@template("files-copy-into-folder", app="files")
def copy_into_folder(rng: random.Random) -> Variant:
    """Copy a file into a folder, keeping the original where it is."""
    names = _names(rng, 4)
    source = names[0]
    folder = rng.choice(["Backup", "Shared", "USB stick", "Outbox", "For review"])
    given = {**_home(rng, names), f"{folder}/README.txt": f"Files for {rng.choice(WORDS)}.\n"}

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _paste_into(ctx, [source], folder, cut=False)

    return Variant(
        instruction=f"In the file manager, copy the file {source} into the folder \"{folder}\" (keep the original "
                    "in your home folder too).",
        files=given, apps=[files()], oracle=oracle, max_steps=35,
        checker=_copied(f"{folder}/{source}", source, given))


@template("files-new-empty-file", app="files")
def new_empty_file(rng: random.Random) -> Variant:
    """Create an empty file with a given name inside a given folder (File > Create New > Empty File)."""
    folders = rng.sample(["Projects", "Notes", "Work", "Music", "Recipes"], 3)
    folder = folders[0]
    name = f"{rng.choice(['todo', 'ideas', 'shopping', 'contacts', 'plan'])}-{rng.choice(WORDS)}.txt"
    given = {**_home(rng, _names(rng, 2)), **{f"{f}/{n}": _content(rng, n) for f in folders for n in _names(rng, 1)}}

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _open_folder(ctx, folder)
        yield key("ctrl+alt+n")  # File > Create New... > Empty File
        yield from _name_dialog(ctx, "Creating", name)
        yield from _exists(ctx, f"{folder}/{name}")

    return Variant(
        instruction=f"In the file manager, create a new empty file named {name} inside the folder \"{folder}\" "
                    "of your home folder.",
        files=given, apps=[files()], oracle=oracle, max_steps=25,
        checker={"type": "file", "path": f"{folder}/{name}", "equals": ""})


@template("files-duplicate", app="files")
def duplicate(rng: random.Random) -> Variant:
    """Make a copy of a file beside it, under a new name (the original untouched)."""
    names = _names(rng, 4, ("txt", "csv", "md"))
    source = names[0]
    stem, extension = source.rsplit(".", 1)
    copy = f"{stem}-{rng.choice(['backup', 'old', 'copy', 'v2'])}.{extension}"
    given = _home(rng, names)

    def oracle(ctx: Any) -> Iterator[Any]:
        yield from _select(ctx, [source])
        yield key("ctrl+c")
        yield wait(300)
        yield key("ctrl+v")  # into the same folder: pcmanfm asks for another name
        yield from find(ctx, "dialog", "Confirm File Replacing", app=APP)
        yield wait(300)
        yield key("ctrl+a")
        yield type_text(copy, "keys")
        button = yield from until(lambda: next((n for n in tree(ctx, app=APP) if n["role"] == "push button"
                                                and n["name"] == "Rename" and "enabled" in n.get("states", ())),
                                               None), "the Rename button", 10)
        yield {"type": "click", "x": centre(button)[0], "y": centre(button)[1]}
        yield from _exists(ctx, copy)

    return Variant(
        instruction=f"In the file manager, make a copy of {source} in your home folder, named {copy}, next to the "
                    "original.",
        files=given, apps=[files()], oracle=oracle, max_steps=25,
        checker=_copied(copy, source, given))


@template("files-sort-by-type", app="files", long=True)
def sort_by_type(rng: random.Random) -> Variant:
    """Move files into three folders by their kind (pictures, documents, spreadsheets)."""
    groups = {"Pictures": ("png", "jpg"), "Documents": ("pdf", "md"), "Spreadsheets": ("csv",)}
    chosen = rng.sample(sorted(groups), 3)
    placed: dict[str, list[str]] = {}
    taken: set[str] = set()
    for folder in chosen:
        placed[folder] = _names(rng, 2, groups[folder], avoid=taken)
        taken |= set(placed[folder])
    others = _names(rng, 2, ("txt", "log"), avoid=taken)
    given = {**_home(rng, [n for names in placed.values() for n in names] + others),
             **{f"{folder}/.keep": "" for folder in chosen}}

    def oracle(ctx: Any) -> Iterator[Any]:
        for folder, names in placed.items():
            yield from _paste_into(ctx, names, folder, cut=True)
            yield from _open_folder(ctx, "")

    kinds = "; ".join(f"the {' and '.join('.' + e for e in groups[f])} files into \"{f}\"" for f in chosen)
    parts = [{"name": f"{n} in {folder}", "weight": 1,
              "check": _all(_has(f"{folder}/{n}", given[n]), _gone(n))} for folder, names in placed.items()
             for n in names]
    return Variant(
        instruction=f"Tidy up your home folder with the file manager: move {kinds}. Leave the other files where "
                    "they are.",
        files=given, apps=[files()], oracle=oracle, max_steps=200,
        checker={"type": "gate", "gate": {"type": "any", "checks": [
                     {"type": "file", "path": f"{folder}/{n}"} for folder, names in placed.items() for n in names]},
                 "then": {"type": "weighted", "parts": [
                     *parts, {"name": "the other files stay", "weight": 1,
                              "check": _all(*(_has(n, given[n]) for n in others))}]}})
