"""Terminal tasks (xterm running bash in the home): count, search, archive, rename, extract, script.

xterm exposes no accessibility tree, so the oracles type shell commands and then wait until the files the
commands write are there (``saved``). The checkers read the home's files, or run a command as the agent
(``bash`` in the home) where a file's presence, mode or an archive's listing is the answer.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Iterator
from typing import Any

from . import Variant, template
from .apps import terminal
from .common import CITIES, WORDS, person, saved, type_text, wait, words

LEVELS = ("INFO", "WARN", "ERROR", "DEBUG")


def shell(command: str) -> list[Any]:
    """Type one command line and run it (bash reads what was typed before its prompt was drawn, too)."""
    return [type_text(command + "\n", "keys"), wait(300)]


def start() -> Any:
    return wait(1000)  # the terminal's window and bash's prompt


def lines_check(path: str, lines: list[str], *, unordered: bool = False, basename: bool = False) -> dict[str, Any]:
    """The file holds these lines (trailing blanks, CR and empty lines aside; any order if ``unordered``)."""
    run = f"sed -e 's/\\r$//' -e 's/[[:space:]]*$//' -e '/^$/d' {shlex.quote(path)}"
    if basename:
        run += " | sed 's#^.*/##'"
    if unordered:
        run += " | LC_ALL=C sort"
        lines = sorted(lines)
    return {"type": "command", "run": run, "stdout_equals": "".join(f"{line}\n" for line in lines)}


def number_check(path: str, number: int) -> dict[str, Any]:
    return {"type": "file", "path": path, "matches": rf"\A\s*{number}\s*\Z"}


def _log(rng: random.Random, n: int) -> tuple[list[str], list[str]]:
    users = words(rng, 5)
    levels = [rng.choice(LEVELS) for _ in range(n)]
    lines = [f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:"
             f"{rng.randint(0, 59):02d} {level} {rng.choice(users)} "
             f"{rng.choice(['logged in', 'saved a file', 'timed out', 'sent mail'])}" for level in levels]
    return lines, users


@template("term-count-matches", app="terminal")
def count_matches(rng: random.Random) -> Variant:
    """Count the log lines of one level and write the number into a file."""
    lines, _users = _log(rng, rng.randint(25, 60))
    level = rng.choice(("WARN", "ERROR"))
    count = sum(f" {level} " in line for line in lines)
    out = f"{level.lower()}-count.txt"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield start()
        yield shell(f"grep -c ' {level} ' server.log > {out}")
        yield from saved(ctx, out, lambda data: data.strip() == str(count).encode())

    return Variant(
        instruction=f"Using the terminal, count how many lines of server.log have the level {level} and write "
                    f"just that number into a new file {out} in your home folder.",
        files={"server.log": "\n".join(lines) + "\n"}, apps=[terminal()],
        checker=number_check(out, count), oracle=oracle, max_steps=20)


@template("term-find-files", app="terminal")
def find_files(rng: random.Random) -> Variant:
    """List the files of a folder that mention a word."""
    city = rng.choice(CITIES)
    names = words(rng, rng.randint(7, 10))
    hits = rng.sample(names, rng.randint(2, 4))
    files = {}
    for name in names:
        body = [" ".join(rng.sample(WORDS, 5)) for _ in range(rng.randint(3, 6))]
        if name in hits:
            body.insert(rng.randrange(len(body) + 1), f"trip to {city} in {rng.choice(['May', 'July', 'June'])}")
        files[f"notes/{name}.txt"] = "\n".join(body) + "\n"
    found = [f"{name}.txt" for name in hits]

    def oracle(ctx: Any) -> Iterator[Any]:
        yield start()
        yield shell(f"cd notes && grep -l {city} *.txt > ../found.txt; cd")
        yield from saved(ctx, "found.txt", lambda data: data.count(b"\n") == len(found))

    return Variant(
        instruction=f"The folder notes in your home holds text files. Using the terminal, find the files that "
                    f"mention {city} and write their file names (like name.txt), one per line, into found.txt in "
                    "your home folder.",
        files=files, apps=[terminal()],
        checker=lines_check("found.txt", found, unordered=True, basename=True), oracle=oracle, max_steps=20)


@template("term-archive-folder", app="terminal")
def archive_folder(rng: random.Random) -> Variant:
    """Pack a folder into a .tar.gz archive."""
    folder = f"{rng.choice(WORDS)}-project"
    archive = f"{folder.split('-')[0]}-backup-{rng.randint(1, 12):02d}.tar.gz"
    inner = words(rng, rng.randint(3, 5))
    files = {f"{folder}/{name}.txt": f"{name} {rng.randint(100, 999)}\n" for name in inner[:-1]}
    files[f"{folder}/data/{inner[-1]}.csv"] = f"id,value\n1,{rng.randint(10, 99)}\n"
    # every file in the archive under the folder's name (a leading ./ allowed), with its content
    listed = " && ".join(f"tar -tzf {archive} | sed 's#^\\./##' | grep -qx '{path}'" for path in files)
    contents = " && ".join(f"tar -xzOf {archive} --wildcards '{path}' './{path}' 2>/dev/null | cmp -s - {path}"
                           for path in files)

    def oracle(ctx: Any) -> Iterator[Any]:
        yield start()
        yield shell(f"tar -czf {archive} {folder}")
        yield from saved(ctx, archive, lambda data: len(data) > 100)
        yield wait(500)

    return Variant(
        instruction=f"Using the terminal, pack the folder {folder} (with everything in it) into a gzip-compressed "
                    f"tar archive named {archive} in your home folder. Keep the folder itself.",
        files=files, apps=[terminal()],
        checker={"type": "weighted", "parts": [
            {"name": "every file listed", "weight": 1, "check": {"type": "command", "run": listed}},
            {"name": "contents intact", "weight": 1, "check": {"type": "command", "run": contents}},
        ]},
        oracle=oracle, max_steps=20)


@template("term-chmod-run", app="terminal")
def chmod_run(rng: random.Random) -> Variant:
    """Make a script executable, run it and keep its output."""
    script = f"{rng.choice(['make', 'build', 'print'])}-{rng.choice(WORDS)}.sh"
    items = {p: rng.randint(2, 40) for p in rng.sample(("stapler", "notebook", "lamp", "kettle", "mug", "charger"), 3)}
    city = rng.choice(CITIES)
    body = (f"#!/bin/sh\necho 'Stock report for {city}'\n"
            + "".join(f"echo '{name}: {n}'\n" for name, n in items.items())
            + f"echo \"total: $(( {' + '.join(map(str, items.values()))} ))\"\n")
    output = f"Stock report for {city}\n" + "".join(f"{name}: {n}\n" for name, n in items.items()) + \
        f"total: {sum(items.values())}\n"
    out = "report.txt"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield start()
        yield shell(f"chmod +x {script} && ./{script} > {out}")
        yield from saved(ctx, out, lambda data: data.decode() == output)

    return Variant(
        instruction=f"The script {script} in your home folder cannot be run yet. Using the terminal, make it "
                    f"executable, run it, and save what it prints into {out}.",
        files={script: body}, apps=[terminal()],
        checker={"type": "weighted", "parts": [
            {"name": "script executable", "weight": 1, "check": {"type": "command", "run": f"test -x {script}"}},
            {"name": "its output saved", "weight": 2, "check": {"type": "file", "path": out, "equals": output}},
        ]},
        oracle=oracle, max_steps=20)


@template("term-rename-pattern", app="terminal")
def rename_pattern(rng: random.Random) -> Variant:
    """Rename a folder's files by a pattern (a new prefix, the numbers kept)."""
    city = rng.choice(CITIES).lower()
    numbers = sorted(rng.sample(range(1000, 9999), rng.randint(4, 7)))
    files = {f"photos/IMG_{n}.jpg": f"picture {n}\n" for n in numbers}
    files["photos/album.txt"] = f"Holiday in {city.title()}\n"
    # every new name holds its old content, and no old name is left
    renamed = " && ".join(f"grep -qx 'picture {n}' photos/{city}-{n}.jpg" for n in numbers)
    gone = "test -z \"$(ls photos | grep '^IMG_')\" && test -f photos/album.txt"

    def oracle(ctx: Any) -> Iterator[Any]:
        yield start()
        yield shell(f"cd photos && for f in IMG_*.jpg; do mv \"$f\" \"{city}-${{f#IMG_}}\"; done; cd")
        yield from saved(ctx, f"photos/{city}-{numbers[-1]}.jpg")
        yield wait(500)

    return Variant(
        instruction=f"The folder photos holds pictures named like IMG_{numbers[0]}.jpg. Using the terminal, rename "
                    f"each of them to {city}-NUMBER.jpg, keeping its number (IMG_{numbers[0]}.jpg becomes "
                    f"{city}-{numbers[0]}.jpg). Leave album.txt as it is.",
        files=files, apps=[terminal()],
        checker={"type": "weighted", "parts": [
            {"name": "new names", "weight": 2, "check": {"type": "command", "run": renamed}},
            {"name": "no old names left", "weight": 1, "check": {"type": "command", "run": gone}},
        ]},
        oracle=oracle, max_steps=25)


@template("term-csv-column", app="terminal")
def csv_column(rng: random.Random) -> Variant:
    """Extract one column of a CSV file (without its header) into a file."""
    header = ["name", "city", "email", "age"]
    rows = []
    for _ in range(rng.randint(5, 9)):
        name = person(rng)
        first, last = name.split(" ", 1)
        rows.append([name, rng.choice(CITIES), f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@example.org",
                     str(rng.randint(18, 80))])
    column = rng.choice([1, 2, 3])
    values = [row[column] for row in rows]
    out = {"city": "cities.txt", "email": "emails.txt", "age": "ages.txt"}[header[column]]

    def oracle(ctx: Any) -> Iterator[Any]:
        yield start()
        yield shell(f"tail -n +2 people.csv | cut -d, -f{column + 1} > {out}")
        yield from saved(ctx, out, lambda data: data.count(b"\n") == len(values))

    return Variant(
        instruction=f"people.csv has the columns {', '.join(header)}. Using the terminal, write the {header[column]} "
                    f"column's values (without the header), one per line in the file's order, into {out}.",
        files={"people.csv": ",".join(header) + "\n" + "".join(",".join(row) + "\n" for row in rows)},
        apps=[terminal()], checker=lines_check(out, values), oracle=oracle, max_steps=20)


@template("term-make-tree", app="terminal")
def make_tree(rng: random.Random) -> Variant:
    """Create a project's folders and a README."""
    project = f"{rng.choice(WORDS)}-{rng.choice(['app', 'site', 'tool', 'lib'])}"
    folders = rng.sample(["src", "docs", "tests", "assets", "scripts", "config"], 3)
    nested = f"{folders[0]}/{rng.choice(['utils', 'core', 'models'])}"
    title = f"# {project}"
    parts = [{"name": f"folder {f}", "weight": 1, "check": {"type": "command", "run": f"test -d {project}/{f}"}}
             for f in [*folders, nested]]
    parts.append({"name": "README", "weight": 1,
                  "check": {"type": "file", "path": f"{project}/README.md", "matches": rf"\A{title}\s*\Z"}})

    def oracle(ctx: Any) -> Iterator[Any]:
        yield start()
        yield shell(f"mkdir -p {project}/{nested} {' '.join(f'{project}/{f}' for f in folders[1:])}")
        yield shell(f"echo '{title}' > {project}/README.md")
        yield from saved(ctx, f"{project}/README.md")
        yield wait(300)

    return Variant(
        instruction=f"Using the terminal, create a folder {project} in your home with the subfolders "
                    f"{', '.join(folders)}, a folder {nested.split('/')[1]} inside {folders[0]}, and a file "
                    f"README.md in {project} whose only line is: {title}",
        apps=[terminal()], checker={"type": "weighted", "parts": parts}, oracle=oracle, max_steps=25)


@template("term-write-script", app="terminal")
def write_script(rng: random.Random) -> Variant:
    """Write a small executable shell script that prints given lines."""
    script = f"{rng.choice(['greet', 'hello', 'banner', 'motd'])}-{rng.choice(WORDS)}.sh"
    lines = [f"Welcome, {person(rng)}", f"Next stop: {rng.choice(CITIES)} at {rng.randint(6, 22)}:00"]
    wanted = "".join(line + "\n" for line in lines)

    def oracle(ctx: Any) -> Iterator[Any]:
        yield start()
        yield shell(f"printf '%s\\n' '#!/bin/sh' \"echo '{lines[0]}'\" \"echo '{lines[1]}'\" > {script}")
        yield shell(f"chmod +x {script}")
        yield from saved(ctx, script, lambda data: data.count(b"\n") == 3)
        yield wait(500)

    return Variant(
        instruction=f"Using the terminal, write a shell script {script} in your home folder that prints exactly "
                    f"these two lines, and make it executable:\n{lines[0]}\n{lines[1]}",
        apps=[terminal()],
        checker={"type": "weighted", "parts": [
            {"name": "executable", "weight": 1, "check": {"type": "command", "run": f"test -x {script}"}},
            {"name": "prints the lines", "weight": 2,
             "check": {"type": "command", "run": f"bash {script}", "stdout_equals": wanted}},
        ]},
        oracle=oracle, max_steps=20)
