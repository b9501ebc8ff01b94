"""Reset benchmark (issue: warm pools): reset p50 per app, with a spare desktop against the warm reset.

For each app (xterm, mousepad, chromium, an animation that never settles) one environment with a spare and
one without are reset alternately after the same touch (a click), so both see the same machine. Between
resets the benchmark waits until the spare is ready, as an episode that lasts at least that long would; the
time the spare takes to be ready after a swap is reported too (the shortest episode a spare keeps up with).
Memory is the proportional set size of every process of the session's desktops (X server, window manager,
apps), with and without the spare.

    .venv/bin/python bench/bench_reset.py [--resets N] [--apps xterm,mousepad,chromium,animation] [--baseline DIR]

With ``--baseline DIR``, the warm reset of another version of hci-envs is measured too, app by app right after
this one's, on the same machine: DIR holds that version's files (``mkdir DIR && git archive REV hci_envs traits
recorders | tar -x -C DIR``; then remove DIR/hci_envs/tasks/builtin.jsonl, which holds task answers).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import Report, percentile, pss_kib

from helpers import ANIMATE
from hci_envs.traits.envs import DesktopEnv

APPS = {
    "xterm": ["xterm"],
    "mousepad": ["mousepad"],
    "chromium": ["chromium", "--no-first-run", "--no-sandbox", "--disable-gpu", "--password-store=basic",
                 "about:blank"],
    "animation": [sys.executable, str(ANIMATE)],
}


def desktop_pids(desktop, account) -> set[int]:
    pids = set(desktop.processes.pids())
    if account is not None:
        pids.update(account.live_pids())
    return pids


def session_memory_mib(env) -> float:
    pids = desktop_pids(env.desktop, env.account)
    ready = env.spare._ready if env.spare is not None else None  # the spare's parts, when prepared
    if ready is not None:
        pids |= desktop_pids(ready.desktop, ready.account)
    return sum(pss_kib(p) for p in pids) / 1024


def wait_spare(env, timeout: float = 60.0) -> float:
    start = time.perf_counter()
    while env.state.spare["state"] != "ready":
        if time.perf_counter() - start > timeout:
            raise RuntimeError(f"the spare was not ready within {timeout}s: {env.state.spare}")
        time.sleep(0.01)
    return (time.perf_counter() - start) * 1000


# The old version's warm reset, in a process of its own with that version first on the path.
_BASELINE = """
import json, sys, time
from hci_envs.traits.envs import DesktopEnv
env = DesktopEnv(start_state={"apps": [{"command": json.loads(sys.argv[1])}]})
env.reset()
samples = []
for _ in range(int(sys.argv[2])):
    env.step({"type": "click", "x": 640, "y": 400})
    start = time.perf_counter()
    env.reset()
    samples.append((time.perf_counter() - start) * 1000)
env.close()
print(json.dumps(samples))
"""


def baseline_resets(tree: Path, command: list[str], resets: int) -> list[float]:
    # the old tree installs traits and recorders inside hci_envs only in its wheel: link them where it finds them
    for name in ("traits", "recorders"):
        link = tree / "hci_envs" / name
        if not link.exists() and (tree / name).is_dir():
            link.symlink_to(tree / name)
    out = subprocess.run([sys.executable, "-c", _BASELINE, json.dumps(command), str(resets)], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tree)}, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"the baseline failed: {out.stderr[-1500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--resets", type=int, default=12)
    parser.add_argument("--apps", default=",".join(APPS))
    parser.add_argument("--baseline", type=Path, help="the files of another version, to measure its warm reset")
    args = parser.parse_args()
    report = Report("reset")
    print(f"command: .venv/bin/python bench/bench_reset.py --resets {args.resets} --apps {args.apps}"
          + (f" --baseline {args.baseline}" if args.baseline else ""))
    for name in args.apps.split(","):
        state = {"apps": [{"command": APPS[name]}]}
        spare_env = DesktopEnv(start_state=state, spare=True)
        warm_env = DesktopEnv(start_state=state, spare=False)
        try:
            spare_env.reset()
            warm_env.reset()
            wait_spare(spare_env)
            with_spare, warm, ready_after = [], [], []
            for _ in range(args.resets):
                for env, samples in ((spare_env, with_spare), (warm_env, warm)):
                    env.step({"type": "click", "x": 640, "y": 400})
                    start = time.perf_counter()
                    env.reset()
                    samples.append((time.perf_counter() - start) * 1000)
                    if env is spare_env:
                        ready_after.append(wait_spare(spare_env))
            memory_spare, memory_warm = session_memory_mib(spare_env), session_memory_mib(warm_env)
        finally:
            spare_env.close()
            warm_env.close()
        report.add(f"{name}: reset with a spare", with_spare)
        report.add(f"{name}: warm reset (no spare)", warm)
        report.add(f"{name}: spare ready again after a swap", ready_after)
        ratio = percentile(with_spare, 50) / percentile(warm, 50)
        report.value(f"{name}: reset p50 ratio spare/warm", round(ratio, 3))
        report.value(f"{name}: memory per session MiB (spare / no spare)",
                     f"{memory_spare:.0f} / {memory_warm:.0f}")
        print(f"  {name}: p50 spare/warm {ratio:.3f}; memory per session {memory_spare:.0f} MiB with the spare, "
              f"{memory_warm:.0f} MiB without", flush=True)
        if args.baseline is not None:
            old = baseline_resets(args.baseline, APPS[name], args.resets)
            report.add(f"{name}: the baseline's warm reset", old)
            report.value(f"{name}: reset p50 with a spare / the baseline's warm reset",
                         round(percentile(with_spare, 50) / percentile(old, 50), 3))
    report.save()


if __name__ == "__main__":
    main()
