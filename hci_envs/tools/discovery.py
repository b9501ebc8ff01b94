"""Finding tools without reading all of them: ``find_tools`` (search) and ``browse_tools`` (a directory with a
folder per trait and a stub file per tool), both generated from the registry. Also the Python source of the
tool functions CodeAct code calls.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Literal

from ..errors import InvalidActionError
from .registry import ToolSpec, type_repr

Detail = Literal["names", "descriptions", "schemas"]
_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower().replace("_", " ")))


def find_tools(specs: dict[str, ToolSpec], query: str = "", detail: Detail = "descriptions",
               limit: int = 20) -> list[Any]:
    """Tools matching ``query`` (words of their names weigh more than words of their descriptions)."""
    wanted = _words(query)
    scored = []
    for order, spec in enumerate(specs.values()):
        if wanted:
            name_hits = len(wanted & _words(spec.name))
            text_hits = len(wanted & _words(spec.description))
            partial = sum(1 for w in wanted if w in spec.name.lower())
            score = 3 * name_hits + text_hits + partial
            if score == 0:
                continue
        else:
            score = 0
        scored.append((-score, order, spec))
    scored.sort(key=lambda item: (item[0], item[1]))
    chosen = [spec for _, _, spec in scored[:limit]]
    if detail == "names":
        return [spec.name for spec in chosen]
    if detail == "descriptions":
        return [{"name": s.name, "description": s.description.split("\n\n")[0], "trait": s.trait} for s in chosen]
    return [{"name": s.name, "description": s.description, "trait": s.trait, "input_schema": s.input_schema(),
             "read_only": s.read_only} for s in chosen]


def tool_directory(specs: dict[str, ToolSpec]) -> dict[str, dict[str, str]]:
    """{trait folder: {"tool.py": stub source}}."""
    tree: dict[str, dict[str, str]] = {}
    for spec in specs.values():
        tree.setdefault(spec.trait or "Environment", {})[f"{spec.name}.py"] = spec.stub()
    return tree


def browse_tools(specs: dict[str, ToolSpec], path: str = "") -> dict[str, Any]:
    """List the folders (traits), a folder's files (tools), or show one file (a tool's signature and docs)."""
    tree = tool_directory(specs)
    parts = [p for p in path.strip().strip("/").split("/") if p]
    if not parts:
        return {"path": "/", "entries": [f"{folder}/" for folder in tree]}
    folder = tree.get(parts[0])
    if folder is None:
        raise InvalidActionError(f"no folder {parts[0]!r}; folders: {', '.join(tree)}", field="path")
    if len(parts) == 1:
        return {"path": f"/{parts[0]}/", "entries": list(folder)}
    name = parts[1] if parts[1].endswith(".py") else parts[1] + ".py"
    if len(parts) > 2 or name not in folder:
        raise InvalidActionError(f"no file {'/'.join(parts)!r}; files: {', '.join(folder)}", field="path")
    return {"path": f"/{parts[0]}/{name}", "source": folder[name]}


def function_source(spec: ToolSpec) -> str:
    """Python source of a function that calls the tool from CodeAct code (annotations kept as strings, so
    that defining it needs no imports)."""
    params = []
    names = []
    for p in spec.parameters:
        text = f"{p.name}: {type_repr(p.annotation)!r}"
        if p.default is not inspect.Parameter.empty:
            text += f" = {p.default!r}"
        params.append(text)
        names.append(p.name)
    signature = f"*, {', '.join(params)}" if params else ""
    doc = spec.description.replace('"""', "'''")
    args = ", ".join(f"{n!r}: {n}" for n in names)
    return (
        f"def {spec.name}({signature}):\n"
        f'    """{doc}"""\n'
        f"    return _call_tool({spec.name!r}, {{{args}}})\n"
    )
