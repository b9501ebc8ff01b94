"""The real-application suite: task templates over real apps, each drawn with seeded parameters.

A template is a function of a random generator that returns a :class:`Variant`: the instruction, the files of
the home, the apps of the start state, the checker, and a scripted oracle that solves it. The same template
and seed always give the same task, so ``suite(seeds=range(5))`` is a fixed list of tasks that anyone can
run again; the task ids are ``TEMPLATE.SEED`` (``calc-column-total.3``).

    from hci_envs.tasks import World, suite
    from hci_envs.tasks.agents import OracleAgent
    with World(suite(seeds=range(5))) as world:    # TaskSpecs: for World, or serve --tasks
        world.run(OracleAgent())                   # every oracle scores 1.0 (the suite's own test)

The templates hold no secret beyond what the task shows its agent: every answer a checker looks for follows
from the instruction and the files the agent is given.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError, TaskNotFoundError
from ..spec import TaskSpec, parse_task

#: The modules that define templates, one per app family (imported on first use).
MODULES = ("editor", "browser", "writer", "calc", "files", "calculator", "terminal", "multi")

Oracle = Callable[[Any], Iterator[Any]]


@dataclass
class Variant:
    """One drawn task. ``files`` are the home's files (text or bytes); ``apps`` the start state's apps."""

    instruction: str
    checker: dict[str, Any]
    oracle: Oracle
    apps: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, str | bytes] = field(default_factory=dict)
    max_steps: int = 50
    time_limit: float = 300.0
    params: dict[str, Any] = field(default_factory=dict)
    setup: list[dict[str, Any]] = field(default_factory=list)
    width: int = 1280
    height: int = 800


@dataclass(frozen=True)
class Template:
    id: str
    app: str                      # the app the report files it under
    apps: tuple[str, ...]         # every app it uses (several: a multi-app task)
    build: Callable[[random.Random], Variant]
    long: bool = False            # an oracle of 20 steps or more
    description: str = ""

    def variant(self, seed: int) -> Variant:
        return self.build(random.Random(f"{self.id}/{seed}"))

    def task(self, seed: int) -> TaskSpec:
        from .apps import seed_files

        v = self.variant(seed)
        files = {**seed_files([app["name"] for app in v.apps]), **v.files}
        data: dict[str, Any] = {
            "id": f"{self.id}.{seed}",
            "instruction": v.instruction,
            "start_state": {"width": v.width, "height": v.height, "apps": v.apps},
            "home_files": {path: _file(content) for path, content in files.items()},
            "setup": v.setup,
            "checker": v.checker,
            "max_steps": v.max_steps,
            "time_limit": v.time_limit,
            "tags": [self.app, *(a for a in self.apps if a != self.app), *(["long"] if self.long else [])],
            "template": self.id,
            "seed": seed,
            "app": self.app,
        }
        return parse_task(data, where=f"template {self.id} seed {seed}")


def _file(content: str | bytes) -> Any:
    if isinstance(content, bytes):
        import base64

        return {"base64": base64.b64encode(content).decode("ascii")}
    return content


TEMPLATES: dict[str, Template] = {}


def template(template_id: str, *, app: str, apps: tuple[str, ...] = (), long: bool = False) -> Callable[
        [Callable[[random.Random], Variant]], Callable[[random.Random], Variant]]:
    """Register a template: ``@template("calc-column-total", app="calc")`` over ``def build(rng) -> Variant``."""

    def register(build: Callable[[random.Random], Variant]) -> Callable[[random.Random], Variant]:
        if template_id in TEMPLATES:
            raise ConfigError(f"two templates are named {template_id!r}")
        TEMPLATES[template_id] = Template(template_id, app, tuple(apps) or (app,), build, long,
                                          (build.__doc__ or "").strip())
        return build

    return register


def templates() -> dict[str, Template]:
    """Every template, by id (the modules are imported on first use)."""
    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return TEMPLATES


def suite(seeds: range | list[int] = range(5), *, apps: tuple[str, ...] | None = None,
          ids: tuple[str, ...] | None = None) -> list[TaskSpec]:
    """The tasks of every template (or of ``apps`` / ``ids``) for each seed, template by template."""
    chosen = [t for t in templates().values() if (apps is None or t.app in apps) and (ids is None or t.id in ids)]
    return [t.task(seed) for t in chosen for seed in seeds]


def template_task(task_id: str) -> TaskSpec | None:
    """The task ``TEMPLATE.SEED`` names (any seed), or None if no template has that name."""
    name, _, seed = task_id.rpartition(".")
    found = templates().get(name)
    if found is None or not seed.isdigit() or len(seed) > 9:
        return None
    return found.task(int(seed))


def oracle_script(task: TaskSpec) -> Oracle:
    """The scripted solution of a template task (``OracleAgent`` plays it)."""
    found = templates().get(task.template or "")
    if found is None or task.seed is None:
        raise TaskNotFoundError(f"task {task.id!r} comes from no template of the suite", task=task.id)
    return found.variant(task.seed).oracle
