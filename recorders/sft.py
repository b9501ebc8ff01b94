"""Episodes as a chat dataset for supervised fine-tuning: ``hci-envs export --format sft``.

One row per episode (human or agent), in the conversational format TRL's ``SFTTrainer`` reads:

``messages``
    the user's instruction with the first screen, then for every action an assistant message with one tool
    call (the action, named as its tool, its fields as arguments) and a tool message with the screen after it
``images``
    the screens, in the order of the ``{"type": "image"}`` blocks in ``messages`` (with ``images="none"``
    there are no screens, no such column, and every content is plain text, for text-only models)
``tools``
    the desktop's tools as JSON text (TRL parses it and hands it to the chat template): exactly the schemas
    TRL builds for :class:`hci_envs.trl.TrlDesktopEnv`, so that a model fine-tuned on this data sees the prompt
    it will see in GRPO with that environment (needs ``hci-envs[trl]``)
``episode``
    the episode's folder name

``tools`` (action names) offers only those tools, as ``TrlDesktopEnv.configure(tools=...)`` does; an episode
that uses another action is refused.

A screen that several dense actions share (one frame for a burst) is shown once. The instruction is the
``instruction`` argument, else the task's instruction when the episode's task names a task of ``tasks`` (a
task file or folder; the built-in suite by default), else the episode's task text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from hci_envs.errors import ConfigError, EpisodeFormatError, HciEnvsError, require

from .export import OnError, _fail, reviewed_episodes
from .segments import check_segments, select_steps
from .store import Episode, load_episode

Images = Literal["all", "none"]
DEFAULT_INSTRUCTION = "Use the computer's screen, keyboard and mouse to complete the task shown."


def tool_schemas(tools: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """The schemas TRL shows for TrlDesktopEnv (configured with ``tools``, action names, when given)."""
    from hci_envs.trl import TrlDesktopEnv, tool_schemas as trl_tool_schemas

    return trl_tool_schemas(TrlDesktopEnv.configure(tools=tools) if tools else TrlDesktopEnv)


def _instructions(tasks: str | Path | None) -> dict[str, str]:
    from hci_envs.tasks import BUILTIN, load_tasks

    try:
        return {t.id: t.instruction for t in load_tasks(tasks or BUILTIN)}
    except (OSError, ValueError) as exc:  # e.g. the built-in file is private to the server's user
        if tasks is not None:
            raise ConfigError(f"cannot read the tasks {tasks}: {exc}", field="tasks") from None
        return {}


def conversation(episode: Episode, *, instruction: str, images: Images = "all",
                 segments: tuple[str, ...] | None = None) -> tuple[list[dict], list[Path]]:
    """The episode as chat messages, and the frame files its image blocks show, in order; with ``segments``,
    of those steps only (see segments.py)."""
    shown: list[Path] = []
    last_frame: str | None = None

    def content(text: str, frame: str | None) -> Any:
        nonlocal last_frame
        if images == "none":
            return text
        blocks = [{"type": "text", "text": text}] if text else []
        if frame is not None and frame != last_frame:
            blocks.append({"type": "image"})
            shown.append(episode.frame(frame))
            last_frame = frame
        return blocks

    steps = [step for step, _ in select_steps(episode, segments)]
    first = steps[0].get("frame_before") if steps else None
    messages: list[dict[str, Any]] = [{"role": "user", "content": content(instruction, first)}]
    for record in steps:
        action = dict(record["action"])
        tool = action.pop("type")
        messages.append({"role": "assistant", "content": content("", None),
                         "tool_calls": [{"type": "function", "function": {"name": tool, "arguments": action}}]})
        # an agent's action has the text its tool answered, which is what a model reads back; a person's has none
        answer = record.get("result") or f"{tool}: done"
        messages.append({"role": "tool", "name": tool, "content": content(answer, record.get("frame_after"))})
    return messages, shown


def sft_rows(paths: list[Path], *, images: Images = "all", instruction: str | None = None,
             tasks: str | Path | None = None, tools: tuple[str, ...] | None = None,
             on_error: OnError | None = None, segments: tuple[str, ...] | None = None) -> Iterator[dict[str, Any]]:
    offered = tool_schemas(tools)
    names = {schema["function"]["name"] for schema in offered}
    schemas = json.dumps(offered, ensure_ascii=False)
    known = {} if instruction else _instructions(tasks)
    for path in paths:
        try:
            episode = load_episode(path)
            chosen = [step for step, _ in select_steps(episode, segments)]
            if not chosen:
                continue  # nothing of these segments in this episode
            missing = sorted({a["action"]["type"] for a in chosen} - names)
            if missing:
                raise ConfigError(f"{path.name} uses actions that are not among the tools offered: "
                                  f"{', '.join(missing)}", field="tools")
            task = episode.meta.get("task")
            text = instruction or known.get(task or "") or task or DEFAULT_INSTRUCTION
            messages, frames = conversation(episode, instruction=text, images=images, segments=segments)
            row = {"episode": path.name, "messages": messages, "tools": schemas}
            if images != "none":
                row["images"] = [{"bytes": f.read_bytes(), "path": f.name} for f in frames]
        except (HciEnvsError, OSError) as exc:
            _fail(on_error, str(path), exc)
            continue
        yield row


def features(datasets: Any, images: Images) -> Any:
    # Json messages keep each message's own keys and types (struct columns would give every message every
    # key, as None, which chat templates then render); TRL reads them as they are.
    columns = {"episode": datasets.Value("string"), "messages": datasets.List(datasets.Json()),
               "tools": datasets.Value("string")}
    if images != "none":
        columns["images"] = datasets.List(datasets.Image())
    return datasets.Features(columns)


def sft_dataset(paths: list[Path], *, images: Images = "all", instruction: str | None = None,
                tasks: str | Path | None = None, tools: tuple[str, ...] | None = None,
                on_error: OnError | None = None, segments: tuple[str, ...] | None = None,
                on_note: Callable[[str], None] | None = None) -> Any:
    """The episodes as a ``datasets.Dataset`` (see the module's docstring). A bad episode raises, or with
    ``on_error`` is reported there and left out."""
    datasets = require("datasets", "export", "exporting episodes")
    if not hasattr(datasets, "Json"):
        raise ConfigError(f"the sft format needs datasets>=4.7 (its Json feature); this is {datasets.__version__}")
    if images not in ("all", "none"):
        raise ConfigError(f"images must be 'all' or 'none', not {images!r}", field="images")
    segments = check_segments(segments)
    paths = reviewed_episodes(paths, on_note)  # what a demonstrator has not submitted stays out
    rows = list(sft_rows(paths, images=images, instruction=instruction, tasks=tasks, tools=tools, on_error=on_error,
                         segments=segments))
    if not rows:
        raise EpisodeFormatError("none of the episodes could be exported")
    return datasets.Dataset.from_list(rows, features=features(datasets, images))
