"""The task spec: what to do, the world to do it in, and how to score the result. Declarative JSON or YAML.

    {"id": "form-basic", "instruction": "Fill in ... and press Submit.",
     "start_state": {"apps": [{"command": "{python} -m hci_envs.tasks.apps.form {home}/.form.json"}]},
     "home_files": {"notes.txt": "..."},                     # written into the home before the apps start
     "setup": [{"type": "wait", "ms": 100}],                 # actions run after the reset, before the agent
     "checker": {"type": "json", "path": ".form.json", "pointer": "/submitted/name", "equals": "Ada"},
     "max_steps": 30, "time_limit": 120}

A task that needs more room than the server's limits give (or should have less) asks in its start state:
``"start_state": {"limits": {"memory": "3G", "processes": 2048, "disk": "1G"}}`` (hci_envs.protocol.LimitsRequest).

In commands, ``{python}`` is the Python running hci-envs (the agent's account runs it: the set-up command
builds ``.venv`` on the system's Python, and the images do too) and ``{home}`` the session's home directory.
Checkers (:mod:`.checks`): ``file`` (exists, equals, contains, matches), ``json`` (a value in a JSON file),
``command`` (a shell command's exit code and output, run in the session), ``pixel`` (a screen colour),
``document`` (ODT/DOCX text and formatting), ``spreadsheet`` (ODS/XLSX/CSV cells and formulas), ``browser``
(chromium's bookmarks, history and downloads), ``accessibility`` (a widget's value or state), ``osworld`` (an
OSWorld task's own evaluator: :mod:`.osworld`, whose set-up steps are ``{"osworld": {"config": [...]}}``), and ``all`` /
``any`` / ``mean`` / ``weighted`` (named parts, partial credit) / ``gate`` of others. A task scores 1.0 when
its checker passes fully. A home file is text, or ``{"base64": ...}`` for bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..actions.models import format_validation_error, parse_action
from ..errors import InvalidActionError, TaskFormatError
from ..protocol import StartState
from .checkers import BinaryFile, Check, HomePath


class TaskSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
    instruction: str = Field(min_length=1)
    start_state: StartState = StartState()
    home_files: dict[HomePath, str | BinaryFile] = {}
    setup: list[dict[str, Any]] = []
    checker: Check
    max_steps: int = Field(50, ge=1, le=100_000)
    time_limit: float = Field(300.0, gt=0, le=86_400)
    tags: list[str] = []
    # where a task of the real-application suite comes from (hci_envs.tasks.suite): reports group by them
    template: str | None = None
    seed: int | None = None
    app: str | None = None

    @field_validator("home_files")
    @classmethod
    def _no_file_is_a_folder(cls, files: dict[str, Any]) -> dict[str, Any]:
        folders = {str(parent) for path in files for parent in Path(path).parents}
        for path in files:
            if str(Path(path)) in folders:
                raise ValueError(f"{path!r} is a file, and a folder of other home files")
        return files

    @field_validator("setup")
    @classmethod
    def _actions(cls, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for n, item in enumerate(items):
            try:
                if "osworld" in item:  # an OSWorld task's config, run by its harness (hci_envs.tasks.osworld)
                    if set(item) != {"osworld"} or not isinstance(item["osworld"].get("config"), list):
                        raise ValueError("an OSWorld set-up step is {\"osworld\": {\"config\": [...]}}")
                elif "tool" in item:
                    if not isinstance(item.get("tool"), str) or not isinstance(item.get("arguments", {}), dict):
                        raise ValueError("a tool call is {\"tool\": NAME, \"arguments\": {...}}")
                else:
                    parse_action(item)
            except (InvalidActionError, ValueError) as exc:
                raise ValueError(f"setup[{n}]: {getattr(exc, 'message', exc)}") from None
        return items


def _osworld_steps_have_their_task(task: TaskSpec) -> TaskSpec:
    """An OSWorld set-up step runs with the task its check holds (OSWorld's harness needs the whole task)."""
    if any("osworld" in item for item in task.setup) and getattr(task.checker, "type", None) != "osworld":
        raise ValueError("a task with an OSWorld set-up step needs an osworld checker (hci_envs.tasks.osworld)")
    return task


def parse_task(data: Any, *, where: str = "task") -> TaskSpec:
    try:
        return _osworld_steps_have_their_task(TaskSpec.model_validate(data))
    except ValidationError as exc:
        raise TaskFormatError(f"{where}: {format_validation_error(exc)}") from None
    except ValueError as exc:
        raise TaskFormatError(f"{where}: {exc}") from None


def load_tasks(source: str | Path) -> list[TaskSpec]:
    """Tasks from a .json file (one task or a list), a .jsonl file, a .yaml file, a folder of such files,
    or a Hugging Face dataset saved with ``save_to_disk`` (one task per row: a "task" column of JSON text,
    or columns named as the spec's fields)."""
    path = Path(source)
    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "state.json").exists():
            return _from_dataset(path)
        tasks = []
        for child in sorted(path.iterdir()):
            if child.suffix in (".json", ".jsonl", ".yaml", ".yml"):
                tasks += load_tasks(child)
        return _unique(tasks, str(path))
    if not path.exists():
        raise TaskFormatError(f"{path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TaskFormatError(f"{path}: cannot be read ({exc.strerror or exc}); the task files are readable by "
                              "the server's user only") from None
    except UnicodeDecodeError as exc:
        raise TaskFormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if path.suffix == ".jsonl":
        tasks = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError as exc:
                raise TaskFormatError(f"{path}:{number}: not valid JSON ({exc})") from None
            tasks.append(parse_task(data, where=f"{path}:{number}"))
        return _unique(tasks, str(path))
    if path.suffix in (".yaml", ".yml"):
        from ..errors import require

        yaml = require("yaml", "tasks", "reading YAML task files")
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise TaskFormatError(f"{path}: not valid YAML ({exc})") from None
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise TaskFormatError(f"{path}: not valid JSON ({exc})") from None
    items = data if isinstance(data, list) else [data]
    return _unique([parse_task(item, where=f"{path}[{i}]" if isinstance(data, list) else str(path))
                    for i, item in enumerate(items)], str(path))


def _from_dataset(path: Path) -> list[TaskSpec]:
    from ..errors import require

    datasets = require("datasets", "export", "reading tasks from a datasets folder")
    dataset = datasets.load_from_disk(str(path))
    tasks = []
    for i, row in enumerate(dataset):
        data = json.loads(row["task"]) if "task" in row else {k: v for k, v in row.items() if v is not None}
        tasks.append(parse_task(data, where=f"{path} row {i}"))
    return _unique(tasks, str(path))


def _unique(tasks: list[TaskSpec], where: str) -> list[TaskSpec]:
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise TaskFormatError(f"{where}: two tasks have the id {task.id!r}")
        seen.add(task.id)
    return tasks
