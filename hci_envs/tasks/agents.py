"""Agents for the built-in suite: a scripted oracle per task, a random agent and a do-nothing agent.

An agent is a callable ``agent(observation, context)`` returning an action, a list of actions, or None
when it is done. The oracle is privileged: it reads the task apps' state files (``context.read_json``) to
find widgets, which a learning agent would have to see on the screen.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from ..errors import ConfigError
from .oracles import ORACLES


class OracleAgent:
    """Solves every built-in task and every task of the real-application suite with a script; one batch of
    actions per step. Thread-safe for a run in several sessions (each task has its own plan)."""

    def __init__(self) -> None:
        self._plans: dict[str, Iterator[Any]] = {}

    def __call__(self, observation: Any, context: Any) -> Any:
        task = context.task.id
        if context.step == 0 or task not in self._plans:
            script = ORACLES.get(task)
            if script is None and context.task.template is not None:
                from .suite import oracle_script

                script = oracle_script(context.task)
            if script is None:
                raise ConfigError(f"no oracle for task {task!r}", task=task)
            self._plans[task] = script(context)
        return next(self._plans[task], None)


class NoopAgent:
    """Does nothing: every task must score 0 with it."""

    def __call__(self, observation: Any, context: Any) -> Any:
        return None


class RandomAgent:
    """Random clicks, keys and typing, ``steps`` of them per task. Each task draws from a generator of its own,
    seeded by ``seed`` and the task's id, so a run is the same however many sessions share it."""

    KEYS = ["enter", "tab", "up", "down", "left", "right", "BackSpace", "ctrl+a", "ctrl+s", "esc"]

    def __init__(self, seed: int = 0, steps: int = 20) -> None:
        self.seed = seed
        self.steps = steps
        self._rngs: dict[str, random.Random] = {}

    def __call__(self, observation: Any, context: Any) -> Any:
        if context.step >= self.steps:
            return None
        if context.step == 0 or context.task.id not in self._rngs:
            self._rngs[context.task.id] = random.Random(f"{self.seed}/{context.task.id}")
        rng = self._rngs[context.task.id]
        width, height = context.env.declared_state.width, context.env.declared_state.height
        kind = rng.choice(["click", "click", "key", "type"])
        if kind == "click":
            return {"type": "click", "x": rng.randrange(width), "y": rng.randrange(height)}
        if kind == "key":
            return {"type": "key", "keys": rng.choice(self.KEYS)}
        text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz 0123456789") for _ in range(rng.randint(1, 8)))
        return {"type": "type_text", "text": text}
