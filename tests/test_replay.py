"""Replay's screen comparisons on a real display: an app that answers later than it did when the episode was
recorded, and in stages, is compared once it has drawn the action's effect, not as soon as the screen is quiet."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.x11

SLOW_SAVE = [sys.executable, str(Path(__file__).resolve().parent / "apps" / "slow_save.py")]


def test_a_slow_app_is_compared_once_it_has_drawn_the_actions_effect(x11, tmp_path):
    from hci_envs.traits import DesktopEnv
    from recorders.replay import converged_match, screen_match

    env = DesktopEnv(start_state={"apps": [{"command": SLOW_SAVE}]})
    try:
        env.reset()
        desktop = env.desktop
        unsaved = desktop.screen.capture(fmt="png")
        env.executor.run({"type": "key", "keys": "s"})
        time.sleep(2.0)  # both stages drawn: the screen the recording holds
        recorded = tmp_path / "recorded.png"
        recorded.write_bytes(desktop.screen.capture(fmt="png").data)
        assert screen_match(unsaved, recorded, ()) < 0.999  # the save shows

        env.executor.run({"type": "key", "keys": "r"})
        assert desktop.events.wait_settled(0.3, 5.0)
        since = time.monotonic()
        env.executor.run({"type": "key", "keys": "s"})
        assert converged_match(desktop, recorded, (), since=since, quiet=0.1, budget=3.0) == 1.0

        # a replay that never gets there says how far it got, within the budget
        env.executor.run({"type": "key", "keys": "r"})
        assert desktop.events.wait_settled(0.3, 5.0)
        since = time.monotonic()
        env.executor.run({"type": "key", "keys": "x"})  # nothing happens
        started = time.monotonic()
        assert converged_match(desktop, recorded, (), since=since, quiet=0.1, budget=2.0) < 0.999
        assert time.monotonic() - started < 4.0
    finally:
        env.close()
