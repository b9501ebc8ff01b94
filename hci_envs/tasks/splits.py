"""The server's tasks as OpenEnv's task API shows them: named splits, each an indexed list of tasks.

A trainer lists the splits, counts and reads a split's tasks, and resets a session into one by position
(``reset(split="train", index=12)``), as it does with any OpenEnv environment. Every catalog has:

* ``all``: the catalog's tasks in its order (``serve --tasks``: the built-in suite, a task file or folder, the
  real-application suite at its fixed seeds, OSWorld's tasks);
* ``app:NAME``: the catalog's tasks of one application (or OSWorld domain), where tasks name theirs.

The real-application suite (``serve --tasks apps``) has two more, made from its templates at any seed:
``test``, its fixed seeds (the catalog: what reports compare), and ``train``, every template at each seed from
:data:`TRAIN_SEEDS` on (a task is made when it is asked for; a listing shows the first ones). The two never
share a seed.

What a split shows of a task is what the agent may read (its id, instruction, application, template and
seed, and its limits), never its checker: the answers stay on the server.
"""

from __future__ import annotations

import reprlib

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, TaskNotFoundError

#: The real-application suite's training seeds: templates x these, made on demand.
TRAIN_SEEDS = range(1000, 1_000_000_000)
#: The most tasks a listing of a split returns (``num_tasks`` still counts them all, as OpenEnv allows).
LISTING_LIMIT = 1000


@dataclass(frozen=True)
class Split:
    name: str
    type: str  # OpenEnv's split types: train, validation, test
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "num_tasks": self.size}


def public(task: Any, split: str, index: int) -> dict[str, Any]:
    """What a split shows of ``task``: never its checker or home files."""
    view = {"id": task.id, "split": split, "index": index, "instruction": task.instruction, "app": task.app,
            "template": task.template, "seed": task.seed, "max_steps": task.max_steps,
            "time_limit": task.time_limit, "tags": list(task.tags)}
    return {key: value for key, value in view.items() if value is not None}


class TaskSplits:
    """The splits of one catalog: ``tasks`` (the catalog's TaskSpecs, in order), ``resolve`` (the catalog's: a
    TaskSpec of an id) and, for the real-application suite, its ``templates`` (ids, in order) to make training
    tasks from."""

    def __init__(self, tasks: Sequence[Any], resolve: Callable[[str], Any],
                 templates: Sequence[str] | None = None) -> None:
        self._tasks = list(tasks)
        self._resolve = resolve
        self._templates = list(templates or ())
        self._by_split: dict[str, list[Any]] = {"all": self._tasks}
        for task in self._tasks:
            if task.app:
                self._by_split.setdefault(f"app:{task.app}", []).append(task)
        if self._templates:
            self._by_split["test"] = self._tasks

    def splits(self) -> list[Split]:
        found = [Split(name, "test" if name == "test" else "validation", len(tasks))
                 for name, tasks in self._by_split.items()]
        if self._templates:  # the suite's own pair first
            found = [Split("train", "train", self.count("train")), found[-1], *found[:-1]]
        return found

    def count(self, split: str) -> int:
        if split == "train" and self._templates:
            return len(self._templates) * len(TRAIN_SEEDS)
        return len(self._listed(split))

    def task_id(self, split: str, index: Any) -> str:
        """The id of the task at ``index`` of ``split`` (what a reset resolves)."""
        return self._id_at(split, self._index(split, index))

    def task(self, split: str, index: Any) -> dict[str, Any]:
        """The task at ``index`` of ``split``, as a split shows it."""
        index = self._index(split, index)
        if split == "train" and self._templates:
            return public(self._resolve(self._id_at(split, index)), split, index)
        return public(self._listed(split)[index], split, index)

    def tasks(self, split: str, start: Any = None, stop: Any = None) -> list[dict[str, Any]]:
        """Tasks ``[start, stop)`` of ``split`` (slice bounds: negative from the end, clipped), at most
        :data:`LISTING_LIMIT` of them."""
        first, last, _ = slice(_bound(start, "start"), _bound(stop, "stop")).indices(self.count(split))
        last = min(last, first + LISTING_LIMIT)
        return [self.task(split, n) for n in range(first, max(first, last))]

    # -- helpers ----------------------------------------------------------------------------------------
    def _id_at(self, split: str, index: int) -> str:
        if split == "train" and self._templates:
            template = self._templates[index % len(self._templates)]
            return f"{template}.{TRAIN_SEEDS[index // len(self._templates)]}"
        return self._listed(split)[index].id

    def _listed(self, split: str) -> list[Any]:
        if not isinstance(split, str) or split not in self._by_split:
            names = ", ".join(s.name for s in self.splits())
            shown = reprlib.repr(split)  # a name is the caller's input: echo a bounded part of it
            raise TaskNotFoundError(f"no split named {shown}; the splits are {names}", split=shown)
        return self._by_split[split]

    def _index(self, split: str, index: Any) -> int:
        if isinstance(index, bool) or not isinstance(index, int):
            raise ConfigError(f"index must be an integer, not {index!r}", field="index")
        size = self.count(split)
        if not 0 <= index < size:
            raise ConfigError(f"index {index} is out of range: split {split!r} has {size} tasks", field="index")
        return index


def _bound(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer or null, not {value!r}", field=name)
    return value
