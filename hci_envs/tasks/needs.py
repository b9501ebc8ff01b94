"""What a task's checker needs in order to run, checked before a run starts: a checker that cannot run must stop
the server or the World with the fix named, never score 0 (an RL run would train on those zeros).

A document or spreadsheet check reads ODF, DOCX or XLSX (told by the file's content at scoring time), so it
needs every reader its format allows: the ``tasks`` extra. A command check needs the program it starts.
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from ..errors import MissingDependencyError
from ..sandbox.accounts import AGENT_PATH  # a command check runs as the agent, on its PATH
from .checkers import CommandCheck, DocumentCheck, SpreadsheetCheck, leaves

#: The Python modules each format's reader imports (hci_envs.tasks.documents), by check type and format.
READERS = {
    "document": {"odt": ("odf",), "docx": ("docx",), "text": (), None: ("odf", "docx")},
    "spreadsheet": {"ods": ("odf",), "xlsx": ("openpyxl",), "csv": (), None: ("odf", "openpyxl")},
}
#: The extra that installs each of those modules.
EXTRA = {"odf": "tasks", "docx": "tasks", "openpyxl": "tasks"}


class Need(NamedTuple):
    kind: str  # "module" or "program"
    name: str

    def fix(self) -> str:
        if self.kind == "module":
            return f"the Python package '{self.name}' (pip install 'hci-envs[{EXTRA.get(self.name, 'tasks')}]')"
        return f"the program '{self.name}' (install it on this machine, or in the image)"


def needs(check: Any) -> Iterator[Need]:
    """What ``check`` and the checks inside it need."""
    for leaf in leaves(check):
        if isinstance(leaf, DocumentCheck | SpreadsheetCheck):
            for module in READERS[leaf.type][leaf.format]:
                yield Need("module", module)
        elif isinstance(leaf, CommandCheck):
            program = first_program(leaf.run)
            if program is not None:
                yield Need("program", program)


def first_program(command: str) -> str | None:
    """The program a shell command line starts first, when that can be told without running it (not after a
    variable assignment, a redirection or shell syntax)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or any(c in words[0] for c in "=$`(){}<>|;&*?[") or words[0] in SHELL_WORDS:
        return None
    return words[0]


#: Shell keywords and builtins a command line may start with: bash has them, nothing to install.
SHELL_WORDS = frozenset({"if", "for", "while", "until", "case", "!", "test", "[", "[[", "echo", "printf", "cd",
                         "true", "false", "exit", "export", "read", "set", "source", ".", "eval", "exec", "time",
                         "command", "type", "builtin", "let", "declare", "local", "shopt", "pwd", "wait", "kill"})


def missing(check: Any) -> list[Need]:
    """What ``check`` needs that this machine lacks."""
    import importlib.util

    lacking = []
    for need in dict.fromkeys(needs(check)):
        if need.kind == "module":
            found = importlib.util.find_spec(need.name) is not None
        else:
            found = shutil.which(need.name, path=AGENT_PATH) is not None
        if not found:
            lacking.append(need)
    return lacking


def require_checkers(tasks: Iterable[Any], where: str) -> None:
    """Raise :class:`MissingDependencyError` naming what to install when a checker of ``tasks`` cannot run here."""
    by_need: dict[Need, list[str]] = {}
    for task in tasks:
        for need in missing(task.checker):
            by_need.setdefault(need, []).append(task.id)
    if not by_need:
        return
    parts = []
    for need, ids in by_need.items():
        shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        parts.append(f"{need.fix()}, for {len(ids)} task{'s' if len(ids) > 1 else ''} ({shown})")
    first = next(iter(by_need))
    raise MissingDependencyError(f"{where}: checkers that cannot run on this machine would score 0; install "
                                 + "; ".join(parts), module=first.name if first.kind == "module" else None,
                                 program=first.name if first.kind == "program" else None)
