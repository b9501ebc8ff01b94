"""Forking a running desktop (hci_envs.fork): what a fork costs, beside what it replaces, in one run.

An environment on a forkable desktop (WorkstationEnv, ``desktop="forkable"``) runs xterm, mousepad with typed
unsaved text, an endless animation and, with ``--apps ...,chromium``, chromium. It is forked to 1, 4 and 16
copies (``--copies``), each an environment with its own agent account and home. Reported, each beside its
baseline from the same run:

  * the fork of N copies, against N fresh sessions started at once (an environment made and reset, up to its
    apps' windows: what a copy would otherwise cost), and against a reset of one session to its start state;
  * the source's pause (its X connections closed until they are open again, CRIU's dump within it) and how long
    its processes were frozen, against a screenshot of it (the floor of looking at it);
  * memory per copy (PSS of its processes) against the source's;
  * that every copy shows the source's screen at the fork (pixels differing outside the animation), runs as
    ids of its own, holds the source's home, and that its shell and Python interpreter hold the source's state;
  * with ``--ksm SECONDS``: the desktops and their copies opened to KSM (the server's setting,
    HCI_ENVS_FORK_SHARE_MEMORY=1; hci_envs.fork.sharing), ksmd on and sped up for the run (its settings put
    back), the copies' memory after that long, and ksmd's CPU.

    .venv/bin/python bench/bench_fork.py [--apps xterm,mousepad,animation] [--copies 1,4,16] [--ksm 10]

Needs root, agent accounts (``python3 -m hci_envs install``) and CRIU 4.2+ (``python3 -m hci_envs install
--fork``). docs/fork.md has the figures of earlier runs and what was found on the way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import ROOT, Report, measure, pss_kib

from hci_envs.fork.sharing import KSM, SETTING
from hci_envs.tasks.suite.apps import CHROMIUM, seed_files

SIZE = (1280, 800)
ANIMATE = ROOT / "tests" / "apps" / "animate.py"
APPS = {
    "xterm": {"command": ["xterm", "-geometry", "70x12+0+600"]},
    "mousepad": {"command": ["mousepad"]},
    "animation": {"command": ["python3", "-c", ANIMATE.read_text(), "240", "120", "16", "1040", "0"],
                  "name": "animation"},
    # as the task suite starts it (its profile too: no sign-in prompt that folds itself away on a timer)
    "chromium": {"command": [*(a for a in CHROMIUM if not a.startswith("--window-")), "--window-position=640,200",
                             "--window-size=640,600", "data:text/html,<h1>a page</h1><input autofocus>"],
                 "timeout": 60},
}


def screen(env) -> "object":
    import numpy as np

    frame = env.desktop.screen.grab(0, 0, *SIZE)
    return np.frombuffer(frame.data, np.uint8).reshape(SIZE[1], SIZE[0], -1)[:, :, :3]


def animation_box(env) -> tuple[int, int, int, int] | None:
    """Where the animation's window is (left out of the screen comparison: it moves on after the fork)."""
    for window in env.desktop.windows():
        if env.desktop.input.window_title(window) == "hci-envs animation":
            x, y, w, h = env.desktop.input.window_box(window)
            return x, y, x + w, y + h
    return None


def differing(a, b, box) -> int:
    differs = (a != b).any(axis=2)
    if box is not None:
        left, top, right, bottom = box
        differs[max(top, 0):bottom, max(left, 0):right] = False
    return int(differs.sum())


def pss_mib(env) -> float:
    return sum(pss_kib(pid) for pid in env.desktop.processes_inside().values()) / 1024


def uids(env) -> set[int]:
    return {os.stat(f"/proc/{pid}").st_uid for pid in env.desktop.processes_inside().values()
            if os.path.exists(f"/proc/{pid}")}


def carried(env) -> bool:
    """Whether a copy's persistent shell and Python interpreter hold what the source's held at the fork."""
    python = env.call_tool("python", {"code": "print(kept)"}).data
    shell = env.call_tool("bash", {"command": "echo $KEPT $PWD", "persistent": True}).data
    return python["stdout"] == "42\n" and not python["restarted"] and shell["stdout"] == "1 /tmp\n"


def still_screen(env, box, timeout: float = 10.0):
    """The screen once two grabs 0.3 s apart agree outside the animation (an app still drawing would otherwise
    differ between this grab and the fork)."""
    last = screen(env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = screen(env)
        if differing(last, now, box) == 0:
            return now
        last = now
    return last


def fresh(make, count: int) -> tuple[float, list]:
    """``count`` sessions made and reset at once; the milliseconds until all are up."""
    started = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        envs = list(pool.map(lambda _: make(), range(count)))
        list(pool.map(lambda env: env.reset(), envs))
    return (time.perf_counter() - started) * 1000, envs


def ksmd_cpu() -> float:
    pid = subprocess.run(["pgrep", "-x", "ksmd"], capture_output=True, text=True).stdout.split()[0]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--apps", default="xterm,mousepad,animation")
    parser.add_argument("--copies", default="1,4,16")
    parser.add_argument("--ksm", type=float, default=0, metavar="SECONDS",
                        help="restore the copies mergeable by KSM and report their memory after SECONDS")
    args = parser.parse_args()
    apps = args.apps.split(",")
    from hci_envs.fork import fork_unavailable
    from hci_envs.traits import WorkstationEnv

    why = fork_unavailable()
    if why:
        sys.exit(f"bench_fork: {why}")
    # a home whose GTK cursor does not blink: a blink between two screenshots is not a difference of state
    template = Path(tempfile.mkdtemp(prefix="hci-envs-bench-fork-"))
    (template / ".config" / "gtk-3.0").mkdir(parents=True)
    (template / ".config" / "gtk-3.0" / "settings.ini").write_text("[Settings]\ngtk-cursor-blink=false\n")
    for name, text in seed_files(["browser"] if "chromium" in apps else []).items():
        (template / name).parent.mkdir(parents=True, exist_ok=True)
        (template / name).write_text(text)
    state = {"width": SIZE[0], "height": SIZE[1], "apps": [APPS[a] for a in apps], "home_template": str(template)}

    def make():
        return WorkstationEnv(start_state=state, desktop="forkable")

    ksm_settings = {"run": "1", "pages_to_scan": "5000", "sleep_millisecs": "10"}
    ksm_was = {name: (KSM / name).read_text().strip() for name in ksm_settings}
    if args.ksm:
        os.environ[SETTING] = "1"  # the server's setting: the desktops and their copies opened to KSM
        for name, value in ksm_settings.items():
            (KSM / name).write_text(value)
    report = Report("fork")
    source = make()
    try:
        source.reset()
        if "mousepad" in apps:
            source.call_tool("click", {"x": 300, "y": 200})
            source.call_tool("type_text", {"text": "unsaved text, typed before the fork"})
        source.call_tool("bash", {"command": "head -c 4M /dev/urandom > in-the-home.bin"})
        # what the agent's tools keep between calls, which each fork carries: the shell's and Python's state
        source.call_tool("bash", {"command": "cd /tmp; KEPT=1", "persistent": True})
        source.call_tool("python", {"code": "kept = 41 + 1"})
        time.sleep(2)  # the apps' first paint and font caches done before anything is timed
        report.add("screenshot of the source (floor)", measure(lambda: source.desktop.screen.grab(0, 0, *SIZE), 5))
        other = make()
        try:
            other.reset()
            resets = []
            for _ in range(3):  # each after the agent touched the desktop, which a reset must then undo
                other.call_tool("type_text", {"text": "touched"})
                started = time.perf_counter()
                other.reset()
                resets.append((time.perf_counter() - started) * 1000)
            report.add("reset of one session to its start state (baseline)", resets)
        finally:
            other.close()
        for count in (int(c) for c in args.copies.split(",")):
            box = animation_box(source)
            before = still_screen(source, box)
            started = time.perf_counter()
            copies = source.fork(count)
            forked = (time.perf_counter() - started) * 1000
            try:
                cost = source.desktop.last_dump
                checks = {
                    "pixels_differing_max": max(differing(before, screen(c), box) for c in copies),
                    "copies_sharing_ids_with_another": sum(
                        1 for c in copies if any(uids(c) & uids(o) for o in [source, *copies] if o is not c)),
                    "copies_without_the_home": sum(
                        1 for c in copies if not (Path(c.home) / "in-the-home.bin").stat().st_size == 4 << 20),
                    "copies_whose_tools_lost_their_state": sum(1 for c in copies if not carried(c)),
                    "pss_mib_per_copy": round(sum(pss_mib(c) for c in copies) / count, 1),
                    "pss_mib_source": round(pss_mib(source), 1),
                    "source_pause_ms": round(cost["pause_seconds"] * 1000),
                    "source_frozen_ms": round(cost["frozen_seconds"] * 1000),
                    "dump_ms": round(cost["dump_seconds"] * 1000),
                    "image_mib": round(cost["image_bytes"] / 2**20, 1),
                }
                if args.ksm:
                    cpu = ksmd_cpu()
                    time.sleep(args.ksm)
                    checks[f"pss_mib_per_copy_after_{args.ksm:g}s_of_ksm"] = \
                        round(sum(pss_mib(c) for c in copies) / count, 1)
                    checks["ksmd_cpu_s"] = round(ksmd_cpu() - cpu, 2)
            finally:
                for copy in copies:
                    copy.close()
            fresh_ms, envs = fresh(make, count)
            for env in envs:
                env.close()
            report.add(f"fork to {count}", [forked], fresh_sessions_ms=round(fresh_ms),
                       ratio_to_fresh=round(forked / fresh_ms, 2), **checks)
            for name, value in {"fresh_sessions_ms": round(fresh_ms), "ratio_to_fresh": round(forked / fresh_ms, 2),
                                **checks}.items():
                print(f"      {name}: {value}", flush=True)
        report.notes.update(apps=apps, command=" ".join(sys.argv), load=os.getloadavg())
    finally:
        source.close()
        shutil.rmtree(template, ignore_errors=True)
        for name, value in ksm_was.items():
            (KSM / name).write_text(value)
    report.save()


if __name__ == "__main__":
    main()
