"""Finishing episodes a killed server left open.

A recorder writes every raw message as it arrives, but an action is written only once it is complete and the
screen after it was captured; SIGKILL loses the actions still open and leaves meta.json as it was at the
start ("recording", counts 0). The raw stream is all that is needed to redo the rest: the reducer is
deterministic, so reducing the surviving human messages again gives the actions the live recorder had
written, and the ones it had not. The first are skipped, the others appended.

An episode is open while its recorder holds an flock on raw/input.jsonl; the kernel drops it when the process
dies, so an episode whose lock can be taken has no recorder left, and one still being written (by this
process or another) is never touched.

Limits: frames get their times from their files' modification times (frame times live only in the recorder's
memory), and a pause that fell inside an action is not in the raw stream, so input on both sides of it may
reduce into one action.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hci_envs.vnc.rfb import ClientMessage

from .reducer import ReducedAction, Thresholds, Unreduced, reduce_events
from .store import JsonlWriter, StepWriter, _read_jsonl, cut_torn_tail, frame_pair, is_being_written, write_json_atomic

log = logging.getLogger(__name__)

OPEN_STATES = ("new", "recording", "paused")


def recover_episodes(root: Path) -> list[Path]:
    """Finish every episode under ``root`` that a dead recorder left open; returns the ones finished."""
    return finish_open(sorted(root.iterdir()) if root.is_dir() else [])


def finish_open(paths: list[Path]) -> list[Path]:
    """Finish those of ``paths`` that a dead recorder left open. One that cannot be finished is logged and
    left as it is: a bad folder must not keep a recording from starting or the other episodes from export."""
    recovered = []
    for path in paths:
        try:
            if recover_episode(path):
                recovered.append(path)
        except Exception as exc:  # whatever a damaged folder makes the reading fail with
            log.warning("cannot finish the open episode %s: %s", path, exc)
    return recovered


def _is_open(path: Path) -> dict[str, Any] | None:
    import json

    meta_path = path / "meta.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if not isinstance(meta, dict) or meta.get("state") not in OPEN_STATES:
        return None
    if is_being_written(path / "raw" / "input.jsonl"):
        return None
    return meta


def _frames(path: Path, meta: dict[str, Any]) -> list[tuple[str, float]]:
    """Frame files with their times on the recording's clock, from their modification times."""
    folder = path / "frames"
    for tmp in folder.glob("*.tmp"):  # a frame being written when the server died
        tmp.unlink()
    wall = datetime.fromisoformat(meta["clock_origin"]["wall"]).timestamp()
    return [(f.name, f.stat().st_mtime - wall) for f in sorted(folder.glob("*.png"))]


def recover_episode(path: Path) -> bool:
    """Finish one episode if a dead recorder left it open (see the module's doc). Returns whether it did."""
    meta = _is_open(path)
    if meta is None:
        return False
    raw_path, actions_path = path / "raw" / "input.jsonl", path / "actions.jsonl"
    for file in (raw_path, actions_path):
        cut_torn_tail(file)
    raw = _read_jsonl(raw_path, allow_torn_tail=False)
    written = _read_jsonl(actions_path, allow_torn_tail=False) if actions_path.exists() else []
    human_done = max((r["raw"][1] for r in written if r.get("source") == "human" and r.get("raw")), default=-1)
    agent_done = max((r["raw"][1] for r in written if r.get("source") == "agent" and r.get("raw")), default=-1)

    screen = (int(meta["screen"]["width"]), int(meta["screen"]["height"]))
    unreduced: list[Unreduced] = []
    human = [ClientMessage.from_dict(r) for r in raw if r.get("source", "human") == "human" and r["msg"] != "action"]
    new: list[tuple[ReducedAction, str]] = [
        (a, "human") for a in reduce_events(human, Thresholds.from_dict(meta.get("thresholds")), screen=screen,
                                            unreduced=unreduced)
        if a.raw[1] > human_done
    ]
    new += [(ReducedAction(r["action"], r["t"], r["t"], (r["i"], r["i"])), "agent")
            for r in raw if r["msg"] == "action" and r["i"] > agent_done]
    new.sort(key=lambda item: item[0].t_end)

    frames = _frames(path, meta)
    writer = JsonlWriter(actions_path, count=len(written))
    steps = StepWriter(writer, index=len(written), last=written[-1] if written else None)
    try:
        for action, source in new:
            before, after = frame_pair(frames, action.t_start, action.t_end)
            steps.write(action, source, before, after if after is not None else (frames[-1][0] if frames else None))
    finally:
        writer.close()
    now = datetime.now(timezone.utc).isoformat()
    meta.update(
        state="stopped", ended=now, end_reason="the recorder was killed; finished from the raw input",
        recovered={"at": now, "actions_added": len(new)},
        counts={"raw": len(raw), "actions": writer.count, "frames": len(frames), "unreduced": len(unreduced)},
        unreduced=[u.to_dict() for u in unreduced],
    )
    write_json_atomic(path / "meta.json", meta)
    log.warning("finished the episode %s that a killed recorder left open (%d actions added)", path, len(new))
    return True
