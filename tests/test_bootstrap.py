"""The suite's run (hci_envs/ops/bootstrap.py): CI runs every tier of tests/conftest.py, each once."""

from __future__ import annotations

import pytest
from conftest import TIERS


@pytest.mark.fake
def test_the_lanes_run_every_tier_once_and_wait_only_for_tiers_they_run():
    from hci_envs.ops.bootstrap import AFTER, LANES

    run = [tier for lane in LANES for tier in lane]
    assert sorted(run) == sorted(TIERS), "a tier missing from the lanes would never run in CI"
    assert set(AFTER) <= set(run) and set(AFTER.values()) <= set(run)
    assert not set(AFTER.values()) & set(AFTER), "a tier waited for waits for none: no chain, no cycle"
    for tier, first in AFTER.items():  # a tier waited for in the same lane must come before it there
        for lane in LANES:
            if tier in lane and first in lane:
                assert lane.index(first) < lane.index(tier), (tier, first)
