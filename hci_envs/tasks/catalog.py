"""The server's catalog of tasks: what a trainer names when it resets a session into a task.

A trainer names a task of the server's suite by id (``serve --tasks``, the built-in suite by default) or
passes a whole task spec; :class:`TaskSuite` resolves either into a TaskSpec, and the session's environment
builds the task's world (its :class:`~hci_envs.tasks.manager.TaskManager`). The checker runs on the server,
where the answers are: agent accounts cannot read them, and the score goes back on the control plane only
(``POST /score``, ``POST /sessions/{id}/score``), never to the agent.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from ..errors import ConfigError, TaskNotFoundError


#: ``serve --tasks apps``: the real-application suite (hci_envs.tasks.suite), every template at these seeds;
#: a reset may name any other seed too (``calc-column-total.1234``).
APPS_SUITE = "apps"
APPS_SUITE_SEEDS = range(5)
#: ``serve --tasks osworld:PATH``: OSWorld's task files (hci_envs.tasks.osworld).
OSWORLD_PREFIX = "osworld:"


class TaskSuite:
    """The server's tasks, read on first use (the file is private to the server's user)."""

    def __init__(self, source: str | Path | None) -> None:
        self.source = source
        self._tasks: dict[str, Any] | None = None
        self._splits: Any = None
        self._lock = threading.Lock()

    def tasks(self) -> dict[str, Any]:
        with self._lock:
            if self._tasks is None:
                from . import BUILTIN, load_tasks

                if str(self.source) == APPS_SUITE:
                    from .suite import suite

                    self._tasks = {t.id: t for t in suite(seeds=APPS_SUITE_SEEDS)}
                elif str(self.source).startswith(OSWORLD_PREFIX):
                    from .osworld import load

                    self._tasks = {t.id: t for t in load(str(self.source)[len(OSWORLD_PREFIX):])}
                else:
                    self._tasks = {t.id: t for t in load_tasks(self.source or BUILTIN)}
            return self._tasks

    def answer_paths(self) -> list[Path]:
        """Where these tasks' answers are (:mod:`hci_envs.tasks.privacy`)."""
        from .privacy import answer_paths

        source = str(self.source) if self.source is not None else None
        if source is None:
            return answer_paths(builtin=True)
        if source == APPS_SUITE:
            return answer_paths()
        return answer_paths([Path(source.removeprefix(OSWORLD_PREFIX))])

    def require_checkers(self) -> None:
        """Refuse, naming what to install, when a checker of these tasks cannot run on this machine (it would
        score every episode 0): :mod:`hci_envs.tasks.needs`."""
        from .needs import require_checkers

        require_checkers(self.tasks().values(), f"the tasks {self.source or 'built in'}")

    def splits(self) -> Any:
        """The catalog as OpenEnv's task API shows it (:mod:`hci_envs.tasks.splits`)."""
        from .splits import TaskSplits

        with self._lock:
            made = self._splits
        if made is None:
            templates = None
            if str(self.source) == APPS_SUITE:
                from .suite import templates as suite_templates

                templates = list(suite_templates())
            made = TaskSplits(list(self.tasks().values()), self.resolve, templates)
            with self._lock:
                self._splits = made
        return made

    def from_split(self, split: Any, index: Any) -> Any:
        """The TaskSpec at ``index`` of ``split`` (a reset's ``split`` and ``index``)."""
        return self.resolve(self.splits().task_id(split, index))

    def resolve(self, ref: Any) -> Any:
        """A TaskSpec from an id of this suite, a task spec object, or the JSON text of one."""
        from . import parse_task

        if isinstance(ref, str) and ref.lstrip().startswith("{"):
            try:
                ref = json.loads(ref)
            except ValueError as exc:
                raise ConfigError(f"task: not valid JSON ({exc})", field="task") from None
        if isinstance(ref, dict):
            return parse_task(ref, where="task")
        if not isinstance(ref, str) or not ref:
            raise ConfigError("task must be a task id or a task spec object", field="task")
        task = self.tasks().get(ref)
        if task is None and str(self.source) == APPS_SUITE:
            from .suite import template_task

            task = template_task(ref)
        if task is None:
            known = ", ".join(sorted(self.tasks())[:20])
            raise TaskNotFoundError(f"no task {ref!r} in the server's suite (it has: {known})", task=ref)
        return task
