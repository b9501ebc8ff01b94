"""What observations that show the action cost: a step typing one character, with settle on (the default)
and off, per app, and how many of the observations showed the screen before the keystroke.

    .venv/bin/python bench/bench_settle.py [STEPS]

The baseline of each row is the same step with settle off, in the same run; the ratio is on/off. The stale
count is the quality the cost buys (settle off observes the screen before the action in some steps).
Apps: xterm, mousepad (caret blinking, as by default), and an animation that never stops.
"""

from __future__ import annotations

import sys
import time

from common import ROOT, Report, percentile

from hci_envs.traits import DesktopEnv

ANIMATION = [sys.executable, str(ROOT / "tests" / "apps" / "animate.py"), "600", "400"]
APPS = {
    "xterm": [{"command": ["xterm", "-e", "sh", "-c", "cat > /dev/null"]}],
    "mousepad": [{"command": ["mousepad", "note.txt"], "timeout": 60}],
    "animation+mousepad": [{"command": ANIMATION}, {"command": ["mousepad", "note.txt"], "timeout": 60}],
}


def run(apps: list[dict], settle: bool, steps: int) -> tuple[list[float], int]:
    env = DesktopEnv(start_state={"apps": apps}, observation={"format": "png", "settle": settle})
    try:
        previous = env.reset().screenshot.data
        samples, stale = [], 0
        for i in range(steps):
            start = time.perf_counter()
            obs = env.step({"type": "type_text", "text": "abcdefghij"[i % 10]})
            samples.append((time.perf_counter() - start) * 1000)
            stale += obs.screenshot.data == previous
            previous = obs.screenshot.data
        return samples, stale
    finally:
        env.close()


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    report = Report("settle")
    for name, apps in APPS.items():
        off, stale_off = run(apps, False, steps)
        on, stale_on = run(apps, True, steps)
        report.add(f"{name}: step, settle off", off, stale=stale_off)
        report.add(f"{name}: step, settle on", on, stale=stale_on)
        report.value(f"{name}: settle on / off (p50)", f"{percentile(on, 50) / percentile(off, 50):.2f}x")
        report.value(f"{name}: stale observations off -> on", f"{stale_off}/{steps} -> {stale_on}/{steps}")
    report.save()


if __name__ == "__main__":
    main()
