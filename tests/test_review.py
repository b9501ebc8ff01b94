"""Review before submit (recorders/review.py) on a synthetic episode: what a trim keeps and deletes, frames shared
by chains of steps across the cut, one submit at a time, and what a dataset export takes. The page's round trip
with a real recording is in test_collect_routes.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from PIL import Image

from hci_envs.errors import ConfigError, EnvironmentStateError
from hci_envs.recorders import load_episode
from hci_envs.recorders.review import submit_episode
from hci_envs.recorders.store import SCHEMA_VERSION

pytestmark = pytest.mark.fake


def _episode(root: Path, name: str = "ep", steps: int = 10) -> Path:
    """Steps 0..steps-1, one raw event each; steps 3 to 6 share the frames of step 2 (a dense burst)."""
    path = root / name
    (path / "raw").mkdir(parents=True)
    (path / "frames").mkdir()
    frames = []
    for n in range(steps + 1):
        frame = f"{n:06d}.png"
        Image.new("RGB", (64, 40), (n * 20 % 256, 0, 0)).save(path / "frames" / frame)
        frames.append(frame)
    actions, raw = [], []
    for n in range(steps):
        record = {"index": n, "action": {"type": "type_text", "text": f"s{n}"}, "t_start": n + 0.1,
                  "t_end": n + 0.2, "raw": [n, n], "frame_before": frames[n], "frame_after": frames[n + 1],
                  "source": "human"}
        if 3 <= n <= 6:
            record.update(frame_before=frames[2], frame_after=frames[3], frame_shared_with=2)
        actions.append(record)
        raw.append({"i": n, "t": n + 0.1, "source": "human", "msg": "KeyEvent", "down": True, "keysym": 97})
    (path / "actions.jsonl").write_text("".join(json.dumps(a) + "\n" for a in actions))
    (path / "raw" / "input.jsonl").write_text("".join(json.dumps(r) + "\n" for r in raw))
    meta = {"schema_version": SCHEMA_VERSION, "env": "hci_envs.traits.envs:DesktopEnv", "task": None,
            "screen": {"width": 64, "height": 40}, "state": "stopped", "final_frame": frames[-1],
            "clock_origin": {"monotonic": 0.0, "wall": "2026-11-28T00:00:00+00:00"},
            "review": {"state": "pending"}, "counts": {"raw": steps, "actions": steps, "frames": steps + 1},
            "proposals": [{"id": 1, "action": {"type": "type_text", "text": "early"}, "decision": "edit",
                           "proposed_at": 0.0, "decided_at": 0.05},
                          {"id": 2, "action": {"type": "type_text", "text": "kept"}, "decision": "accept",
                           "proposed_at": 5.0, "decided_at": 5.05}]}
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def test_a_trim_keeps_its_steps_only_and_moves_shared_frames_to_a_kept_owner(tmp_path):
    path = _episode(tmp_path)
    review = submit_episode(path, first=4, last=8, success=True, comment=" fine ")
    assert review["state"] == "submitted" and review["kept_steps"] == [4, 8] and review["of_steps"] == 10
    assert review["comment"] == "fine"
    episode = load_episode(path)
    assert [a["action"]["text"] for a in episode.actions] == ["s4", "s5", "s6", "s7", "s8"]
    assert [a["index"] for a in episode.actions] == [0, 1, 2, 3, 4]
    # steps 4, 5, 6 shared step 2's frames: step 4 (now 0) owns them, the others point at it
    assert [a.get("frame_shared_with") for a in episode.actions] == [None, 0, 0, None, None]
    assert [r["i"] for r in episode.raw] == [4, 5, 6, 7, 8]
    used = {a[k] for a in json.loads("[" + ",".join((path / "actions.jsonl").read_text().split()) + "]")
            for k in ("frame_before", "frame_after")}
    assert {f.name for f in (path / "frames").iterdir()} == used
    assert [p["id"] for p in episode.meta["proposals"]] == [2]  # a proposal of a deleted step goes too


def test_one_submit_at_a_time_and_never_twice(tmp_path):
    path = _episode(tmp_path)
    outcomes = []

    def submit(first: int) -> None:
        try:
            outcomes.append(submit_episode(path, first=first, last=8, success=False)["kept_steps"])
        except EnvironmentStateError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=submit, args=(n,)) for n in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kept = [o for o in outcomes if isinstance(o, list)]
    assert len(kept) == 1, outcomes
    assert all("being submitted already" in o or "not waiting for review (submitted)" in o
               for o in outcomes if isinstance(o, str)), outcomes
    assert len(load_episode(path).actions) == 8 - kept[0][0] + 1  # intact: one trim, whole


def test_bad_reviews_are_refused_before_anything_is_touched(tmp_path):
    path = _episode(tmp_path)
    before = (path / "actions.jsonl").read_text()
    for kwargs, message in (({"first": 5, "last": 4}, "is after last"), ({"first": 0, "last": 10}, "from 0 to 9"),
                            ({"first": True, "last": 4}, "from 0 to 9"), ({"first": 0, "last": 4, "success": "yes"},
                                                                          "true or false")):
        with pytest.raises(ConfigError, match=message):
            submit_episode(path, **{"success": True, **kwargs})
    assert (path / "actions.jsonl").read_text() == before
