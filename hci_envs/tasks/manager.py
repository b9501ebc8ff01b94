"""The task part of an environment: reset into a task, set it up, score it, and leave it.

An environment holds one :class:`TaskManager` (handed to it by :func:`hci_envs.env.assembly.assemble`); the
environment's ``reset(task=...)`` and ``score()`` ask it, and so do the server's control plane and
:class:`~hci_envs.tasks.World`. A task's world is its start state with its home files as the home template,
then its setup steps, run as the control plane (not counted as the agent's steps). The caller's seed and
episode id are the episode's, whatever the task: a task is what the episode is about, not its name.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from ..errors import EnvironmentStateError
from ..protocol import Observation
from ..sandbox.watchdog import remove_temporary_dir, temporary_dir

log = logging.getLogger(__name__)


class TaskManager:
    """The task an environment was last reset into, and what it takes to build and score that task's world."""

    def __init__(self) -> None:
        #: The task of the running episode, or None.
        self.task: Any = None
        #: The environment's start state before its first task: a reset without a task goes back to it.
        self.own_start_state: Any = None
        self._templates: Path | None = None
        self._lock = threading.Lock()
        #: What a task started for the environment's life (OSWorld's guest API over it), stopped with it.
        self.on_close: list[Any] = []

    # -- the world of a task ---------------------------------------------------------------------------
    def start_state(self, task: Any) -> dict[str, Any]:
        """The task's start state with its home files as the home template and the placeholders filled."""
        state = task.start_state.model_dump()
        if task.home_files:
            state["home_template"] = str(self._home_template(task))
        # {home} stays as it is: the desktop fills it in at launch with the home of the account that runs the
        # app (a spare desktop has a home of its own)
        fill = {"{python}": sys.executable}

        def filled(text: str) -> str:
            for key, value in fill.items():
                text = text.replace(key, value)
            return text

        for app in state["apps"]:
            command = app["command"]
            app["command"] = filled(command) if isinstance(command, str) else [filled(part) for part in command]
        return state

    def _home_template(self, task: Any) -> Path:
        # One folder per content, never rewritten: a spare desktop may be copying it in the background while
        # the next reset asks for it, and equal content keeps the start state (the spare's key) equal.
        files = {path: content if isinstance(content, str) else content.model_dump()
                 for path, content in task.home_files.items()}
        digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
        with self._lock:
            if self._templates is None:
                self._templates = temporary_dir("hci-envs-tasks-")
            templates = self._templates
        template = templates / f"{task.id}-{digest}"
        if not template.exists():
            partial = Path(tempfile.mkdtemp(dir=templates, prefix=".partial-"))
            for relative, content in task.home_files.items():
                target = partial / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, str):
                    target.write_text(content, encoding="utf-8")
                else:
                    target.write_bytes(base64.b64decode(content.base64))
            try:
                os.replace(partial, template)
            except OSError:  # another thread made the same template first: theirs is as good
                shutil.rmtree(partial, ignore_errors=True)
        return template

    # -- the episode -----------------------------------------------------------------------------------
    def enter(self, task: Any, declared_state: Any) -> dict[str, Any]:
        """A reset into ``task`` begins: the start state to reset to. Remembers the environment's own start
        state the first time, so that a reset without a task goes back to it."""
        if self.own_start_state is None:
            self.own_start_state = declared_state
        self.task = None  # until the reset and the setup have succeeded
        return self.start_state(task)

    def set_up(self, env: Any, task: Any, reset_observation: Observation) -> Observation:
        """Run the task's setup steps on the freshly reset ``env`` (as the control plane); the first observation
        carries the task's instruction and ``metadata.task``."""
        for item in task.setup:
            if "osworld" in item:
                from .osworld import run_setup

                run_setup(env, task, item["osworld"]["config"])
                continue
            env.perform(item)
        obs = env.observe() if task.setup else reset_observation
        self.task = task
        obs.text = task.instruction
        obs.metadata = {**(obs.metadata or {}), "task": {"id": task.id, "instruction": task.instruction}}
        return obs

    def leave(self) -> Any:
        """A reset without a task: the start state to go back to when the last episode had a task, else None."""
        if self.task is None:
            return None
        self.task = None
        return self.own_start_state

    def score(self, env: Any, task: Any = None, *, settle: float = 0.3, catch_up: float = 10.0) -> Any:
        """Score ``task`` (default: the episode's) once the world has caught up with the agent (``env.catch_up``:
        the calls in flight done, the commands it typed into terminals finished, the screen settled for
        ``settle`` seconds), waiting at most ``catch_up`` seconds for the terminals; what was still busy then
        is noted in the score's details. Returns a :class:`~hci_envs.tasks.scoring.Score`."""
        from .scoring import score

        task = task if task is not None else self.task
        if task is None:
            raise EnvironmentStateError("this episode has no task: reset it with one (reset(task=...))")
        busy = env.catch_up(timeout=catch_up, quiet=settle)
        result = score(task.checker, env)
        if busy:
            result.details.append(f"scored after waiting {catch_up:g}s for the agent's side: {'; '.join(busy)}")
        return result

    def close(self) -> None:
        while self.on_close:
            try:
                self.on_close.pop()()
            except Exception:  # noqa: BLE001 - one service that fails to stop leaves the others to stop
                log.exception("stopping a task's service failed")
        if self._templates is not None:
            remove_temporary_dir(self._templates)
            self._templates = None
