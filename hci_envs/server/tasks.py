"""Tasks on the control plane: reset a session into a task, and score it.

A trainer names a task of the server's suite by id (``serve --tasks``, the built-in suite by default) or
passes a whole task spec; the task's world (start state, home files, setup steps) is built on the server and
its checker runs there, where the answers are: agent accounts cannot read them, and the score goes back on
the control plane only (``POST /score``, ``POST /sessions/{id}/score``), never to the agent.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from ..errors import ConfigError, EnvironmentStateError, TaskNotFoundError
from ..protocol import Observation


#: ``serve --tasks apps``: the real-application suite (hci_envs.tasks.suite), every template at these seeds;
#: a reset may name any other seed too (``calc-column-total.1234``).
APPS_SUITE = "apps"
APPS_SUITE_SEEDS = range(5)


class TaskSuite:
    """The server's tasks, read on first use (the file is private to the server's user)."""

    def __init__(self, source: str | Path | None) -> None:
        self.source = source
        self._tasks: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def tasks(self) -> dict[str, Any]:
        with self._lock:
            if self._tasks is None:
                from ..tasks import BUILTIN, load_tasks

                if str(self.source) == APPS_SUITE:
                    from ..tasks.suite import suite

                    self._tasks = {t.id: t for t in suite(seeds=APPS_SUITE_SEEDS)}
                else:
                    self._tasks = {t.id: t for t in load_tasks(self.source or BUILTIN)}
            return self._tasks

    def resolve(self, ref: Any) -> Any:
        """A TaskSpec from an id of this suite, a task spec object, or the JSON text of one."""
        from ..tasks import parse_task

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
            from ..tasks.suite import template_task

            task = template_task(ref)
        if task is None:
            known = ", ".join(sorted(self.tasks())[:20])
            raise TaskNotFoundError(f"no task {ref!r} in the server's suite (it has: {known})", task=ref)
        return task


class SessionTask:
    """The task a session was last reset into, with the World that built it (one per session)."""

    def __init__(self, env: Any) -> None:
        from ..tasks import World

        self.task: Any = None
        #: The start state the session had before its first task: a reset without a task goes back to it.
        self.own_start_state = env.declared_state
        self._env = env
        self._world_class = World
        self._world: Any = None

    def reset(self, task: Any, seed: int | None = None) -> Observation:
        if self._world is None:
            self._world = self._world_class([task], env=self._env)
        self.task = None
        obs = self._world.reset(task)
        self.task = task
        obs.text = task.instruction
        obs.metadata = {**(obs.metadata or {}), "task": {"id": task.id, "instruction": task.instruction}}
        return obs

    def score(self) -> dict[str, Any]:
        if self.task is None:
            raise EnvironmentStateError("this session has no task: reset it with one (reset(task=ID))")
        result = self._world.score(self.task)
        return {"task": self.task.id, "score": result.value, "success": result.passed, "details": result.details}

    def close(self) -> None:
        if self._world is not None:
            self._world.close()
