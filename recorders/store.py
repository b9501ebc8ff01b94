"""The episode folder: what a recording leaves on disk, written append-only and read back with checks.

    EPISODE/
      meta.json          schema version, environment, task, screen size, image digest, clock origin, start state,
                         final_frame (the settled screen at the stop: the end state)
      raw/input.jsonl    every input message as it arrived: {"i", "t", "source", "msg", ...fields}; the
                         agent's hand-overs too ({"source": "control", "msg": "handover", "event", ...}),
                         and meta.json's "handovers" lists them (see segments.py)
      actions.jsonl      canonical actions: {"index", "action", "t_start", "t_end", "raw": [i0, i1],
                         "frame_before", "frame_after", "source", "pre_move"?, "frame_shared_with"?,
                         "result"? (an agent action: the text its tool answered)}
      frames/            PNG screens, NNNNNN.png, each captured once the screen was stable
      video.mp4          optional: the step video, and continuous.mp4 the continuous capture (see video.py)

``frame_shared_with`` (on a step whose frames are the same pair as the step before it) is the index of the
first step with that pair: at a dense pace several actions happen between two stable screens, and the
screen after each of them alone was never captured.

Times are seconds since the clock origin (a monotonic clock; meta.json also records the wall time it
corresponds to). Every line is flushed as it is written, so a recorder killed mid-episode leaves files that
read back up to its last event.

Besides :func:`load_episode` (the whole episode, checked), the server's collection page reads episodes as they
are written, without checks that would fail on a half-written one (:func:`summarize_episode`,
:func:`find_video`, :func:`read_actions`), and deletes them (:func:`delete_episode`); it reaches these through
the ``hci_envs.recorders`` entry points.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hci_envs.actions import parse_action
from hci_envs.errors import ConfigError, EpisodeFormatError, EpisodeNotFoundError, HciEnvsError

if TYPE_CHECKING:
    from .reducer import ReducedAction

SCHEMA_VERSION = 1
#: The video files an episode may name in meta.json, and their media types.
VIDEO_TYPES = {".mp4": "video/mp4", ".webm": "video/webm"}
#: Most bytes of actions.jsonl one :func:`read_actions` returns (the caller asks again for the rest).
MAX_ACTIONS_BYTES = 256 * 1024


class JsonlWriter:
    """Appends one JSON object per line and flushes each, under a lock.

    ``exclusive`` holds an flock on the file while it is open: the kernel drops it when the process dies,
    however it dies, which is how a recorder tells an episode still being written from one a killed
    server left open (see recovery.py)."""

    def __init__(self, path: Path, *, exclusive: bool = False, count: int = 0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")
        if exclusive:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._lock = threading.Lock()
        self.count = count

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
            self.count += 1

    def close(self) -> None:
        with self._lock:
            self._file.close()


def is_being_written(path: Path) -> bool:
    """Whether a live process holds ``path`` open through an exclusive :class:`JsonlWriter`."""
    try:
        with open(path, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except FileNotFoundError:
        return False
    return False


def cut_torn_tail(path: Path) -> None:
    """Cut a last line left unfinished by a killed writer, so that appending starts on a line of its own."""
    if not path.exists():
        return
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with open(path, "r+b") as f:
            f.truncate(end)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def frame_pair(frames: list[tuple[str, float]], t_start: float, t_end: float,
               until: float | None = None) -> tuple[str | None, str | None]:
    """The last frame captured at or before an action started, and the screen its effect left: the last frame
    captured after it ended and no later than ``until`` (when the next input came, or the app had long enough
    to draw), or else the first captured after it ended."""
    before = first_after = last_after = None
    for name, t in frames:
        if t <= t_start:
            before = name
        elif t > t_end:
            first_after = first_after or name
            if until is not None and t <= until:
                last_after = name
    return before, last_after or first_after


class StepWriter:
    """Numbers the steps of actions.jsonl and marks the ones whose frames another step already owns."""

    def __init__(self, writer: JsonlWriter, index: int = 0, last: dict[str, Any] | None = None) -> None:
        self.writer = writer
        self.index = index
        self._pair: tuple[Any, Any] | None = None
        self._owner = 0
        if last is not None:
            self._pair = (last.get("frame_before"), last.get("frame_after"))
            self._owner = last.get("frame_shared_with", last.get("index", 0))

    def write(self, action: ReducedAction, source: str, before: str | None, after: str | None) -> None:
        record = {"index": self.index, **action.to_dict(), "frame_before": before, "frame_after": after,
                  "source": source}
        if before is not None and (before, after) == self._pair:
            record["frame_shared_with"] = self._owner
        else:
            self._pair, self._owner = (before, after), self.index
        self.index += 1
        self.writer.write(record)


@dataclass
class Episode:
    """An episode read from disk."""

    path: Path
    meta: dict[str, Any]
    raw: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)

    def frame(self, name: str | None) -> Path | None:
        return None if name is None else self.path / "frames" / name

    @property
    def screen(self) -> tuple[int, int]:
        return int(self.meta["screen"]["width"]), int(self.meta["screen"]["height"])


def _read_jsonl(path: Path, allow_torn_tail: bool) -> list[dict[str, Any]]:
    if not path.exists():
        raise EpisodeFormatError(f"{path}: missing", file=str(path))
    records = []
    lines = path.read_text(encoding="utf-8", errors="strict").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except ValueError as exc:
            if allow_torn_tail and number == len(lines):
                break  # the last line was being written when the recorder died
            raise EpisodeFormatError(f"{path}:{number}: not valid JSON ({exc})", file=str(path),
                                     line=number) from None
        if not isinstance(record, dict):
            raise EpisodeFormatError(f"{path}:{number}: expected a JSON object", file=str(path), line=number)
        records.append(record)
    return records


def load_episode(path: str | Path, *, allow_torn_tail: bool = True) -> Episode:
    """Read and check an episode folder. Raises :class:`EpisodeFormatError` naming the file and line.

    ``allow_torn_tail`` accepts a last line cut off mid-write (what a killed recorder can leave).
    """
    root = Path(path)
    if not root.is_dir():
        raise EpisodeFormatError(f"{root}: not an episode folder", file=str(root))
    meta_path = root / "meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EpisodeFormatError(f"{meta_path}: missing", file=str(meta_path)) from None
    except ValueError as exc:
        raise EpisodeFormatError(f"{meta_path}: not valid JSON ({exc})", file=str(meta_path)) from None
    for key in ("schema_version", "screen", "clock_origin"):
        if key not in meta:
            raise EpisodeFormatError(f"{meta_path}: no '{key}'", file=str(meta_path), field=key)
    if meta["schema_version"] != SCHEMA_VERSION:
        raise EpisodeFormatError(
            f"{meta_path}: schema version {meta['schema_version']} is not {SCHEMA_VERSION}", file=str(meta_path)
        )
    raw_path = root / "raw" / "input.jsonl"
    raw = _read_jsonl(raw_path, allow_torn_tail)
    for number, record in enumerate(raw, start=1):
        for key in ("i", "t", "msg"):
            if key not in record:
                raise EpisodeFormatError(f"{raw_path}:{number}: no '{key}'", file=str(raw_path), line=number)
    actions_path = root / "actions.jsonl"
    actions = _read_jsonl(actions_path, allow_torn_tail)
    screen = (int(meta["screen"]["width"]), int(meta["screen"]["height"]))
    for number, record in enumerate(actions, start=1):
        where = f"{actions_path}:{number}"
        for key in ("index", "action", "t_start", "t_end"):
            if key not in record:
                raise EpisodeFormatError(f"{where}: no '{key}'", file=str(actions_path), line=number, field=key)
        try:
            parse_action(record["action"], screen=screen)
        except HciEnvsError as exc:
            raise EpisodeFormatError(f"{where}: invalid action: {exc.message}", file=str(actions_path),
                                     line=number) from None
        for key in ("frame_before", "frame_after"):
            name = record.get(key)
            if name is not None and not (root / "frames" / name).exists():
                raise EpisodeFormatError(f"{where}: {key} {name!r} is not in frames/", file=str(actions_path),
                                         line=number, field=key)
    final = meta.get("final_frame")
    if final is not None:
        if not isinstance(final, str) or "/" in final or not (root / "frames" / final).is_file():
            raise EpisodeFormatError(f"{meta_path}: final_frame {final!r} is not in frames/", file=str(meta_path),
                                     field="final_frame")
        end_at_stop(actions, final)
    return Episode(root, meta, raw, actions)


def end_at_stop(actions: list[dict[str, Any]], final: str) -> None:
    """The last action's after-frame is the screen when the recording stopped: no input came after it. The
    recorder wrote it sooner (AFTER_WINDOW seconds after the action, so that the collection page lists it
    live), and an app that drew its answer later (a busy machine) is only on the final frame. The steps that
    share the last one's frames share the final frame too."""
    if not actions:
        return
    last = actions[-1]
    pair = (last.get("frame_before"), last.get("frame_after"))
    for record in reversed(actions):
        if (record.get("frame_before"), record.get("frame_after")) != pair:
            break
        record["frame_after"] = final


def new_episode_dir(root: Path, name: str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    base = name or time.strftime("%Y%m%d-%H%M%S")
    path = root / base
    n = 1
    while path.exists():
        n += 1
        path = root / f"{base}-{n}"
    # private to the server's user: an episode holds what people typed, and agents share the machine
    path.mkdir(mode=0o700)
    (path / "raw").mkdir()
    (path / "frames").mkdir()
    return path


# -- episodes as they are written: read without checks, and deleted -------------------------------------------
def read_meta(path: Path) -> dict[str, Any] | None:
    """The episode's meta.json, or None if it cannot be read (deleted, or not written yet)."""
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def video_file(path: Path, meta: dict[str, Any] | None) -> Path | None:
    """The episode's video, as meta.json names it (``"video": {"file": NAME}``, a path inside the folder), if
    it is a regular file of a known type inside the episode folder."""
    video = (meta or {}).get("video")
    name = video.get("file") if isinstance(video, dict) else None
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name or "\0" in name:
        return None
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts) or Path(name).suffix.lower() not in VIDEO_TYPES:
        return None
    target = path.joinpath(*parts)
    try:
        if target.is_symlink() or not target.is_file():
            return None
        target.resolve().relative_to(path.resolve())
    except (OSError, ValueError):
        return None
    return target


def find_video(path: Path) -> tuple[Path, str] | None:
    """The episode's video (see :func:`video_file`) and its media type."""
    video = video_file(path, read_meta(path))
    return (video, VIDEO_TYPES[video.suffix.lower()]) if video is not None else None


def summarize_episode(path: Path) -> dict[str, Any] | None:
    """What meta.json says of the episode at ``path`` (task, state, times, counts, screen, video), or None if it
    cannot be read."""
    meta = read_meta(path)
    if meta is None:
        return None
    counts = meta.get("counts") or {}
    video = video_file(path, meta)
    return {
        "name": path.name,
        "task": meta.get("task"),
        "state": meta.get("state"),
        "started": (meta.get("clock_origin") or {}).get("wall"),
        "ended": meta.get("ended"),
        "actions": counts.get("actions"),
        "frames": counts.get("frames"),
        "screen": meta.get("screen"),
        "video": {"file": video.name, "type": VIDEO_TYPES[video.suffix.lower()]} if video else None,
        "review": meta.get("review"),
    }


def read_actions(path: Path, cursor: int) -> tuple[list[dict[str, Any]], int]:
    """Complete lines of the episode's actions.jsonl from byte ``cursor`` on (at most MAX_ACTIONS_BYTES), and
    the next cursor."""
    try:
        with open(path / "actions.jsonl", "rb") as f:
            if cursor > 0:
                f.seek(cursor - 1)
                if f.read(1) != b"\n":
                    raise ConfigError("cursor: not the start of a line of this episode's actions", field="cursor")
            data = f.read(MAX_ACTIONS_BYTES)
    except FileNotFoundError:
        return [], 0
    end = data.rfind(b"\n") + 1
    actions = []
    for line in data[:end].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            actions.append(record)
    return actions, cursor + end


def delete_episode(root: Path, path: Path) -> None:
    """Delete the episode folder ``path``, which must be a folder of the episodes folder ``root``."""
    if path.is_symlink() or path.parent.resolve() != root.resolve():
        raise EpisodeNotFoundError(f"{path.name!r} is not in the server's episodes folder", name=path.name)
    if path.exists():
        shutil.rmtree(path, ignore_errors=False)
