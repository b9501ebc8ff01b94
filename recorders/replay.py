"""Replay: drive a recorded episode's actions through the executor agents use, into a fresh session reset
to the recorded start, keeping the recorded timing, and report how each step's screen matched the recording
and how late each step started.

The timing is the recorded timeline: each step starts the recorded time after the one before it (a step that
starts late moves the rest of the timeline with it, so a late press is still held as long), and a pause ends
when the timeline says, not its length after a late start.
"""

from __future__ import annotations

import io
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hci_envs.errors import ConfigError, HciEnvsError
from hci_envs.plugins import load_env_class

from .store import Episode, load_episode


#: How long a replayed step's screen may take to come to the recorded one (unless the next step is due sooner),
#: and the last screen after the last step. The end state is waited for longer, and through a pause in the
#: drawing as long: nothing comes after it to bound it, and it is the screen a replay is judged by.
STEP_WAIT = 2.0
FINAL_WAIT = 6.0
#: How long an action may take to change the screen at all, and how long the screen may rest between two
#: stages of an app's drawing, before the screen is taken as what the action left.
EFFECT_WAIT = 1.0
PATIENCE = 1.0


@dataclass
class StepReport:
    index: int
    type: str
    scheduled_s: float
    lateness_ms: float
    match: float | None = None
    error: str | None = None


@dataclass
class ReplayReport:
    episode: str
    steps: list[StepReport] = field(default_factory=list)
    final_match: float | None = None
    video: str | None = None  # the recorded episode's video, to watch beside the report

    def summary(self) -> dict[str, Any]:
        lateness = sorted(s.lateness_ms for s in self.steps)
        matches = [s.match for s in self.steps if s.match is not None]

        def pct(q: float) -> float | None:
            return round(lateness[min(len(lateness) - 1, round(q * (len(lateness) - 1)))], 2) if lateness else None

        return {
            "steps": len(self.steps),
            "errors": sum(1 for s in self.steps if s.error),
            "lateness_p50_ms": pct(0.5),
            "lateness_p99_ms": pct(0.99),
            "mean_match": round(sum(matches) / len(matches), 4) if matches else None,
            "min_match": round(min(matches), 4) if matches else None,
            "final_match": self.final_match,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"episode": self.episode, "video": self.video, "summary": self.summary(),
                "steps": [asdict(s) for s in self.steps]}


def screen_match(image: Any, recorded: Path, mask: list[tuple[int, int, int, int]] = ()) -> float:
    """The share of pixels identical between a screen and a recorded frame, outside the masked boxes."""
    from PIL import Image, ImageChops

    reference = Image.open(recorded).convert("RGB")
    current = Image.open(io.BytesIO(image.data)).convert("RGB") if hasattr(image, "data") else image.convert("RGB")
    if reference.size != current.size:
        return 0.0
    diff = ImageChops.difference(current, reference).convert("L").point(lambda v: 255 if v else 0)
    for x, y, w, h in mask:
        diff.paste(0, (x, y, x + w, y + h))
    return round(1 - diff.histogram()[255] / (reference.width * reference.height), 6)


def converged_match(desktop: Any, recorded: Path, mask: Any, *, since: float, quiet: float,
                    budget: float, patience: float = PATIENCE) -> float:
    """How closely the screen comes to a recorded frame once the replayed action has shown its effect.

    The app may answer later than it did when the episode was recorded (a busy machine): a screen taken as
    soon as it is quiet can be from before the action's effect (a save whose title changes a moment after the
    keys were handled) or between two stages of its drawing. So the screen is compared when it has changed
    after ``since`` (the action's start) and settled, and again after each later change, until it matches
    exactly, nothing more changes for ``patience`` seconds, or ``budget`` seconds have passed. The best match is
    the answer: the replay reached that screen."""
    events = desktop.events
    deadline = time.monotonic() + budget
    events.wait_settled(min(quiet, budget), budget, since=since, effect=min(EFFECT_WAIT, budget))
    best = 0.0
    while True:
        seen = events.damage_generation()
        best = max(best, screen_match(desktop.screen.capture(fmt="png"), recorded, mask))
        left = deadline - time.monotonic()
        if best == 1.0 or left <= 0 or seen is None or not events.wait_for_damage(seen, min(patience, left)):
            return best
        events.wait_settled(min(quiet, left), max(0.0, deadline - time.monotonic()))


def _track_held(held: set[str], action: dict[str, Any]) -> None:
    """What a replayed action leaves held: a button after mouse_down until mouse_up, keys after key_down."""
    kind = action["type"]
    if kind in ("mouse_down", "mouse_up"):
        name = f"button:{action.get('button', 'left')}"
        (held.add if kind == "mouse_down" else held.discard)(name)
    elif kind in ("key_down", "key_up"):
        name = f"key:{action.get('key')}"
        (held.add if kind == "key_down" else held.discard)(name)


def episode_video(episode: Episode) -> str | None:
    """The path of the episode's video (meta.json's ``video.file``), if it is there."""
    video = episode.meta.get("video")
    name = video.get("file") if isinstance(video, dict) else None
    if not isinstance(name, str) or "/" in name or not (episode.path / name).is_file():
        return None
    return str(episode.path / name)


def replay_episode(
    episode: str | Path | Episode,
    *,
    env: Any = None,
    start_state: dict[str, Any] | None = None,
    speed: float = 1.0,
    timing: bool = True,
    compare: bool = True,
    mask: list[tuple[int, int, int, int]] = (),
    settle_quiet: float = 0.1,
    reset: bool = True,
) -> ReplayReport:
    """Replay an episode. Without ``env`` a fresh environment of the recorded class is made (and closed)
    with the recorded start state (or ``start_state``). ``reset=False``: the caller has already brought
    ``env`` to the episode's start (a task's world with its setup steps, say), and it is not reset again."""
    ep = episode if isinstance(episode, Episode) else load_episode(episode)
    if speed <= 0:
        raise ConfigError("speed must be positive")
    own_env = env is None
    if env is None:
        cls = load_env_class(ep.meta["env"])
        env = cls(start_state=start_state or ep.meta.get("start_state"))
    report = ReplayReport(str(ep.path), video=episode_video(ep))
    try:
        if reset or own_env:
            env.reset()
        executor = env.executor
        actions = ep.actions
        t_first = actions[0]["t_start"] if actions else 0.0
        start = time.monotonic()
        held: set[str] = set()  # buttons and keys the replay holds down (mouse_down, key_down) until their release
        for n, record in enumerate(actions):
            scheduled = (record["t_start"] - t_first) / speed
            for x, y in record.get("pre_move") or []:
                executor.run({"type": "mouse_move", "x": x, "y": y})
            if timing:
                delay = scheduled - (time.monotonic() - start)
                if delay > 0:
                    time.sleep(delay)
            lateness = ((time.monotonic() - start) - scheduled) * 1000 if timing else 0.0
            if lateness > 0:
                # the rest of the timeline moves with a late step: the time between two steps is what was
                # recorded (a held press as long), however late one of them started
                start += lateness / 1000
            step = StepReport(record["index"], record["action"]["type"], round(scheduled, 4), round(lateness, 2))
            ran_at = time.monotonic()
            action = record["action"]
            try:
                if timing and action["type"] == "wait":
                    # a pause is part of the timeline: it ends when the recording says, not its length after a
                    # late start (a hold of 800 ms would grow by every millisecond the step began late)
                    time.sleep(max(0.0, scheduled + action.get("ms", 0) / 1000 / speed - (time.monotonic() - start)))
                else:
                    executor.run(action)
            except HciEnvsError as exc:
                step.error = exc.message
            _track_held(held, action)
            # a frame the next step shares shows the screen after both: compare it after the last of them
            shared_on = n + 1 < len(actions) and actions[n + 1].get("frame_shared_with") is not None
            # nor inside a held press or key: comparing takes time the hold must not (its release is due on time)
            if compare and record.get("frame_after") and not shared_on and not (held and timing):
                budget, patience = STEP_WAIT, PATIENCE
                if n + 1 < len(actions):
                    next_at = (actions[n + 1]["t_start"] - t_first) / speed
                    if timing:
                        budget = min(STEP_WAIT, max(0.0, next_at - (time.monotonic() - start)))
                else:  # its after-frame is the end state (see store.end_at_stop)
                    budget = patience = FINAL_WAIT
                step.match = converged_match(env.desktop, ep.frame(record["frame_after"]), mask, since=ran_at,
                                             quiet=settle_quiet, budget=budget, patience=patience)
            report.steps.append(step)
        if report.steps:
            # the last step was compared with the end state, as long as the final screen is waited for
            report.final_match = report.steps[-1].match
    finally:
        if own_env:
            env.close()
    return report
