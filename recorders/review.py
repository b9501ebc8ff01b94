"""Review before submit: a demonstrator trims their episode, says whether it succeeded, and submits it.

An episode recorded for review (``POST /recording {"review": true}``; the collection page records so) is
``pending`` in meta.json's ``review`` until it is submitted. :func:`submit_episode` keeps the steps from
``first`` to ``last`` and nothing else: the other steps, their raw input, the frames and accessibility trees
only they used, and the videos (the step video is encoded again from what is kept; a continuous capture
covers the whole recording, so it goes) are deleted from the folder, not hidden. Then ``review`` says
``submitted``, with the verdict, the comment and what was kept. The dataset exports leave pending episodes
out (:func:`split_reviewed`): what a demonstrator did not submit never reaches a dataset.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hci_envs.errors import ConfigError, EnvironmentStateError

from .store import VIDEO_TYPES, load_episode, read_meta, write_json_atomic

log = logging.getLogger(__name__)

#: Characters of a reviewer's comment.
MAX_COMMENT = 4000


def is_pending(path: Path) -> bool:
    """Whether the episode at ``path`` waits for its demonstrator's review."""
    review = (read_meta(path) or {}).get("review")
    return isinstance(review, dict) and review.get("state") == "pending"


def split_reviewed(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """``paths`` as (those a dataset may hold, those pending review)."""
    pending = [p for p in paths if is_pending(p)]
    return [p for p in paths if p not in pending], pending


def submit_episode(path: str | Path, *, first: int, last: int, success: bool, comment: str = "") -> dict[str, Any]:
    """Keep steps ``first`` to ``last`` (indexes, both kept) of the pending episode at ``path``, delete the rest,
    note the verdict and submit it. Returns meta.json's new ``review``."""
    path = Path(path)
    with _reviewing(path):
        return _submit(path, first, last, success, comment)


@contextlib.contextmanager
def _reviewing(path: Path) -> Iterator[None]:
    """One review of an episode at a time (two submits at once would trim each other's files)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise EnvironmentStateError(f"episode {path.name!r} is being submitted already") from None
        yield
    finally:
        os.close(fd)


def _submit(path: Path, first: int, last: int, success: bool, comment: str) -> dict[str, Any]:
    episode = load_episode(path)  # a damaged episode is refused before anything is touched
    review = episode.meta.get("review")
    if not isinstance(review, dict) or review.get("state") != "pending":
        state = review.get("state") if isinstance(review, dict) else "not recorded for review"
        raise EnvironmentStateError(f"episode {path.name!r} is not waiting for review ({state})")
    if episode.meta.get("state") != "stopped":
        raise EnvironmentStateError(f"episode {path.name!r} is still being recorded: stop it first")
    if not isinstance(success, bool):
        raise ConfigError("success must be true or false", field="success")
    if not isinstance(comment, str) or len(comment) > MAX_COMMENT:
        raise ConfigError(f"comment must be text of at most {MAX_COMMENT} characters", field="comment")
    steps = _read_lines(path / "actions.jsonl")  # as written (load_episode moves the last one's after-frame)
    count = len(steps)
    if count == 0:
        raise ConfigError("the episode has no steps to submit; discard it instead", field="first")
    for name, value in (("first", first), ("last", last)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < count:
            raise ConfigError(f"{name} must be a step index from 0 to {count - 1}, not {value!r}", field=name)
    if first > last:
        raise ConfigError(f"first ({first}) is after last ({last})", field="first")
    if (first, last) != (0, count - 1):
        _trim(path, episode.meta, steps, first, last)
    meta = read_meta(path) or {}
    meta["review"] = {"state": "submitted", "success": success, "comment": comment.strip(),
                      "kept_steps": [first, last], "of_steps": count,
                      "submitted": datetime.now(timezone.utc).isoformat()}
    write_json_atomic(path / "meta.json", meta)
    return meta["review"]


def _trim(path: Path, meta: dict[str, Any], steps: list[dict[str, Any]], first: int, last: int) -> None:
    kept = [dict(s) for s in steps[first:last + 1]]
    owners: dict[int, int] = {}  # an old owner's index -> the kept step that owns its frames now
    for n, step in enumerate(kept):
        step["index"] = n
        owner = step.pop("frame_shared_with", None)
        if owner is None:
            continue
        if owner >= first:
            step["frame_shared_with"] = owner - first
        elif owner in owners:  # its owner is gone: the first kept step that shared it owns the frames now
            step["frame_shared_with"] = owners[owner]
        else:
            owners[owner] = n
    # the raw input of the kept steps, and what came between them (moves, unreduced keys): nothing before the
    # first kept step's input, nothing after the last one's
    spans = [s["raw"] for s in kept if s.get("raw")]
    low = min((a for a, _ in spans), default=None)
    high = max((b for _, b in spans), default=None)
    t_low, t_high = kept[0]["t_start"], kept[-1]["t_end"]
    raw = [r for r in _read_lines(path / "raw" / "input.jsonl")
           if (low is not None and low <= r["i"] <= high) or (low is None and t_low <= r["t"] <= t_high)]
    frames = {s.get(k) for s in kept for k in ("frame_before", "frame_after")} - {None}
    final = kept[-1].get("frame_after")
    _write_lines(path / "raw" / "input.jsonl", raw)
    _write_lines(path / "actions.jsonl", kept)
    for folder, suffix in (("frames", ".png"), ("a11y", ".json")):
        for file in (path / folder).glob(f"*{suffix}") if (path / folder).is_dir() else ():
            if file.name.replace(suffix, ".png") not in frames:
                file.unlink()
    for file in path.iterdir():  # every video: the step video is made again below, the continuous one goes
        if file.suffix.lower() in VIDEO_TYPES and file.is_file():
            file.unlink()
    meta = dict(meta)
    meta.pop("video", None)
    meta.pop("video_error", None)
    meta["final_frame"] = final
    meta["counts"] = {**(meta.get("counts") or {}), "raw": len(raw), "actions": len(kept), "frames": len(frames)}
    meta["handovers"] = [h for h in meta.get("handovers") or []
                         if h.get("ended_at", float("inf")) >= t_low and h["requested_at"] <= t_high]
    # a proposal belongs to the steps it was decided for: those kept (what was left out goes, proposals too)
    meta["proposals"] = [p for p in meta.get("proposals") or []
                         if p.get("decided_at", p["proposed_at"]) >= t_low and p["proposed_at"] <= t_high]
    write_json_atomic(path / "meta.json", meta)
    _encode_again(path)


def _encode_again(path: Path) -> None:
    from .video import note_video_error, video_available, write_video

    if not video_available():
        return
    try:
        write_video(path)
    except Exception as exc:  # noqa: BLE001 - the episode is submitted without it, and says why
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        log.warning("no video for the trimmed episode %s: %s", path, message)
        note_video_error(path, message)


def _read_lines(file: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write_lines(file: Path, records: list[dict[str, Any]]) -> None:
    tmp = file.with_name(file.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records),
                   encoding="utf-8")
    os.replace(tmp, file)
