"""What batches and the landing signal cost.

    .venv/bin/python bench/bench_batch.py [ROUNDS]

1. Ten actions as one batch (a step with a list) against the same ten actions as ten steps, through the client
   and the real server, on one mousepad desktop, the two interleaved round by round in the same run. Each step
   settles and observes once, so the batch pays for one observation where the singles pay for ten.
2. The landing signal: the same input action (a settled click in mousepad's text) with the landing and without
   it, interleaved call by call in process. Without it = the executor with the focus look-ups and the change
   scan taken out (patched in this benchmark only), the physical floor of a settled click here.
"""

from __future__ import annotations

import sys
import time

from common import Report, percentile

from hci_envs import HciEnvClient
from hci_envs.traits import DesktopEnv

MOUSEPAD = [{"command": ["mousepad", "note.txt"], "timeout": 60}]


def ten_actions(i: int) -> list[dict]:
    return [{"type": "click", "x": 200 + 20 * k, "y": 200 + (i % 5) * 10} for k in range(5)] + \
           [{"type": "type_text", "text": "ab"}, {"type": "key", "keys": "BackSpace"}, {"type": "key", "keys": "BackSpace"},
            {"type": "mouse_move", "x": 400, "y": 300}, {"type": "screenshot", "max_side": 640}]


def batches(rounds: int, report: Report) -> None:
    with HciEnvClient.from_local(apps=["mousepad note.txt"]) as env:
        env.reset()
        batch, single = [], []
        for i in range(rounds):
            actions = ten_actions(i)
            start = time.perf_counter()
            env.step(actions)
            batch.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            for action in actions:
                env.step(action)
            single.append((time.perf_counter() - start) * 1000)
        report.add("ten actions: one batch step (ms)", batch)
        report.add("ten actions: ten steps (ms)", single)
        report.value("ten steps / one batch (p50)", f"{percentile(single, 50) / percentile(batch, 50):.2f}x")


def landing(rounds: int, report: Report) -> None:
    env = DesktopEnv(start_state={"apps": MOUSEPAD})
    try:
        env.reset()
        executor = env.executor
        land, focused = executor.land, env.desktop.input.focused_window
        with_it, without = [], []
        for i in range(rounds * 5):
            click = {"type": "click", "x": 200 + (i % 7) * 15, "y": 220}
            start = time.perf_counter()
            executor.run(click, settle=True)
            with_it.append((time.perf_counter() - start) * 1000)
            executor.land, env.desktop.input.focused_window = (lambda result, until=None: None), (lambda: 1)
            try:
                start = time.perf_counter()
                executor.run(click, settle=True)
                without.append((time.perf_counter() - start) * 1000)
            finally:
                executor.land, env.desktop.input.focused_window = land, focused
        report.add("settled click with landing (ms)", with_it)
        report.add("settled click without landing (ms)", without)
        extra = percentile(with_it, 50) - percentile(without, 50)
        report.value("landing: extra per action (p50, ms)", f"{extra:.2f}")
        report.value("landing: with / without (p50)", f"{percentile(with_it, 50) / percentile(without, 50):.3f}x")
    finally:
        env.close()


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    report = Report("batch")
    batches(rounds, report)
    landing(rounds, report)
    report.save()


if __name__ == "__main__":
    main()
