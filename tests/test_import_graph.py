"""The house's floors, as the imports say: every import of the package (function-level and type-only ones too)
goes down a floor or stays on its own, none goes round a circle, and the old module paths still import.

Floors, lowest first (README "The map of the repository"):
ground (errors, protocol, deadline, plugins, actions) < sandbox < desktop, fork < tools, vnc, adapters < tasks <
env < server < providers, ops < the faces (client, trl, cluster) < traits, recorders (the repository's own
top-level folders, which only the entry points reach).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fake

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"hci_envs": ROOT / "hci_envs", "hci_envs.traits": ROOT / "traits", "hci_envs.recorders": ROOT / "recorders"}

FLOORS: list[tuple[str, ...]] = [
    ("hci_envs", "hci_envs.errors", "hci_envs.protocol", "hci_envs.deadline", "hci_envs.plugins", "hci_envs.actions"),
    ("hci_envs.sandbox",),
    ("hci_envs.desktop", "hci_envs.fork"),
    ("hci_envs.tools", "hci_envs.vnc", "hci_envs.adapters"),
    ("hci_envs.tasks",),
    ("hci_envs.env",),
    ("hci_envs.server",),
    ("hci_envs.providers", "hci_envs.ops"),
    ("hci_envs.client", "hci_envs.trl", "hci_envs.cluster", "hci_envs.osworld", "hci_envs.__main__"),
    ("hci_envs.traits", "hci_envs.recorders"),
]
#: What may stand at the root of hci_envs/: the ground and the faces.
ROOT_MODULES = {"__init__", "__main__", "errors", "protocol", "deadline", "plugins", "client", "trl"}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            if ".build" in path.parts:
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, anywhere in its source (ground: the version number
    ``from hci_envs import __version__`` is the root package's only import target)."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[:len(base) - node.level + 1] if node.level else []
                module = ".".join([*base, node.module] if node.module else base) if node.level else node.module
                # ``from package import name``: the submodule if ``name`` is one, else the package
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module or ""
                           for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    deps.add(target)
        graph[name] = deps
    return graph


def floor(module: str) -> int:
    best, level = -1, None
    for index, names in enumerate(FLOORS):
        for prefix in names:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), index
    assert level is not None, f"{module} stands on no floor: add its folder to FLOORS"
    return level


def test_no_import_runs_up_a_floor():
    graph = import_graph()
    upward = [f"{m} (floor {floor(m)}) -> {d} (floor {floor(d)})"
              for m, deps in sorted(graph.items()) for d in sorted(deps) if floor(d) > floor(m)]
    assert not upward, "\n".join(upward)


def test_no_module_imports_itself_round_a_circle():
    graph = import_graph()
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, path: list[str]) -> bool:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycle.extend([*path[path.index(dep):], dep] if dep in path else [node, dep])
                return True
            if dep not in state and visit(dep, [*path, dep]):
                return True
        state[node] = 2
        return False

    for node in sorted(graph):
        if node not in state and visit(node, [node]):
            break
    assert not cycle, " -> ".join(cycle)


def test_no_folder_imports_another_round_a_circle():
    """Folders too: a folder that imports another is never imported back by it (on one floor either)."""
    graph = import_graph()

    def folder(module: str) -> str:
        return ".".join(module.split(".")[:2])

    arrows = {(folder(m), folder(d)) for m, deps in graph.items() for d in deps if folder(m) != folder(d)}
    both = sorted((a, b) for a, b in arrows if (b, a) in arrows and a < b)
    assert not both, both


def test_the_root_holds_only_the_ground_and_the_faces():
    stray = sorted(p.stem for p in (ROOT / "hci_envs").glob("*.py") if p.stem not in ROOT_MODULES)
    assert not stray, f"modules at the root of hci_envs/ that belong in a room: {stray}"


def test_module_names_are_not_doubled():
    """One name per module concept: two modules of one name (two checks.py, two cli.py) say nothing of which is
    which. Package markers and the folders' own names are not counted."""
    seen: dict[str, list[str]] = {}
    for name in modules():
        leaf = name.rsplit(".", 1)[-1]
        if modules()[name].name != "__init__.py":
            seen.setdefault(leaf, []).append(name)
    doubled = {leaf: names for leaf, names in seen.items() if len(names) > 1}
    assert not doubled, doubled


@pytest.mark.parametrize("old, new", sorted(__import__("hci_envs").MOVED.items()))
def test_an_old_module_path_imports_the_new_module_and_warns(old, new):
    script = ("import importlib, warnings\n"
              "warnings.simplefilter('error', DeprecationWarning)\n"
              f"new = importlib.import_module({new!r})\n"
              "try:\n"
              f"    importlib.import_module({old!r})\n"
              "except DeprecationWarning as w:\n"
              "    print('warned:', w)\n"
              "warnings.simplefilter('ignore', DeprecationWarning)\n"
              f"print(importlib.import_module({old!r}) is new)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.splitlines() == [f"warned: {old} moved to {new}; the old path goes in the release after 0.2",
                                       "True"], out.stdout + out.stderr
