"""Who acted at each step of an episode, and in which part of a hand-over: corrections as data.

An episode in which the agent asked for a person (meta.json's ``handovers``, written by the recorder) has
parts; each step gets one ``segment``:

  * ``agent``:      the agent's own steps, outside any hand-over's reach;
  * ``attempt``:    the agent's steps before it asked, since the episode's start or the previous hand-over's
                    end: the attempt that the person's correction answers;
  * ``correction``: a person's steps while they held the desktop the agent handed over;
  * ``human``:      a person's steps outside a hand-over (a demonstration, a takeover).

:func:`preference_pairs` pairs, for each hand-over that a person took, the agent's last action before it asked
(rejected) with the person's first action (chosen), each with the screen it was taken on; and for each of the
agent's actions a person edited or overrode before it ran (propose and accept: meta.json's ``proposals``), the
proposed action (rejected) with the edit or the person's first action instead (chosen), on the same screen.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .store import Episode

SEGMENTS = ("agent", "attempt", "correction", "human")


def step_segments(episode: Episode) -> list[str]:
    """The segment of each step of ``episode`` (in the order of its actions)."""
    handovers = episode.meta.get("handovers") or []
    out = []
    for step in episode.actions:
        out.append(_segment(step, handovers))
    return out


def _segment(step: dict[str, Any], handovers: list[dict[str, Any]]) -> str:
    source = step.get("source", "human")
    t = step["t_start"]
    previous_end = 0.0
    for handover in handovers:
        if source == "human":
            start = handover.get("accepted_at")
            end = handover.get("ended_at", float("inf"))
            if start is not None and start <= t <= end:
                return "correction"
        elif previous_end <= t < handover["requested_at"]:
            return "attempt"
        previous_end = handover.get("ended_at", float("inf"))
    return "human" if source == "human" else "agent"


def select_steps(episode: Episode, segments: Iterable[str] | None) -> list[tuple[dict[str, Any], str]]:
    """The steps of ``episode`` in ``segments`` (all without), each with its segment."""
    wanted = None if segments is None else set(segments)
    return [(step, seg) for step, seg in zip(episode.actions, step_segments(episode), strict=True)
            if wanted is None or seg in wanted]


def check_segments(segments: Iterable[str] | None) -> tuple[str, ...] | None:
    """``segments`` as a tuple of known names (None stays None); a ConfigError names an unknown one."""
    from hci_envs.errors import ConfigError

    if segments is None:
        return None
    chosen = tuple(segments)
    unknown = [s for s in chosen if s not in SEGMENTS]
    if unknown or not chosen:
        raise ConfigError(f"segments are {', '.join(SEGMENTS)}; not {', '.join(unknown) or 'none'}",
                          field="segments")
    return chosen


def preference_pairs(episode: Episode) -> list[dict[str, Any]]:
    """For each hand-over a person took and acted in: the agent's last action before asking (``rejected``) and
    the person's first action (``chosen``), with their steps' before-frames (``rejected_frame`` is the screen
    the agent acted on, ``chosen_frame`` the one the person did: they differ by what the agent's action
    changed), the reason and the note."""
    handovers = episode.meta.get("handovers") or []
    steps = list(zip(episode.actions, step_segments(episode), strict=True))
    pairs = []
    for n, handover in enumerate(handovers):
        accepted, ended = handover.get("accepted_at"), handover.get("ended_at", float("inf"))
        if accepted is None:
            continue
        before = [s for s, seg in steps if seg == "attempt" and s["t_start"] < handover["requested_at"]
                  and s.get("source") == "agent"]
        during = [s for s, seg in steps if seg == "correction" and accepted <= s["t_start"] <= ended]
        if not before or not during:
            continue
        rejected, chosen = before[-1], during[0]
        pairs.append({"episode": episode.path.name, "handover": n, "reason": handover.get("reason"),
                      "note": handover.get("note"), "rejected": rejected["action"], "chosen": chosen["action"],
                      "rejected_step": rejected["index"], "chosen_step": chosen["index"],
                      "rejected_frame": rejected.get("frame_before"), "chosen_frame": chosen.get("frame_before")})
    return pairs + _proposal_pairs(episode)


def _proposal_pairs(episode: Episode) -> list[dict[str, Any]]:
    """Propose and accept's pairs: the proposal against what ran instead, both on the screen it was proposed on
    (the chosen step's before-frame: nothing ran between the proposal and it)."""
    pairs = []
    for proposal in episode.meta.get("proposals") or []:
        proposed, decided = proposal["proposed_at"], proposal.get("decided_at", float("inf"))
        if proposal["decision"] == "edit":  # the agent's step that ran right after the decision: the edit
            chosen = next((s for s in episode.actions if s.get("source") == "agent" and s["t_start"] >= proposed
                           and s["action"].get("type") == (proposal.get("edited") or {}).get("type")), None)
        elif proposal["decision"] == "override":  # the person's first step while they overrode it
            chosen = next((s for s in episode.actions if s.get("source") == "human"
                           and proposed <= s["t_start"] <= decided), None)
        else:
            continue
        if chosen is None:
            continue
        pairs.append({"episode": episode.path.name, "proposal": proposal["id"], "reason": None, "note": None,
                      "rejected": proposal["action"], "chosen": chosen["action"], "rejected_step": None,
                      "chosen_step": chosen["index"], "rejected_frame": chosen.get("frame_before"),
                      "chosen_frame": chosen.get("frame_before"), "decision": proposal["decision"]})
    return pairs
