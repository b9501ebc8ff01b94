"""Typing past the spare keys as keys: 310 characters, 300 of them on no key (so typing pauses once to reuse
the spare keys), in xterm, mousepad, the Tk probe and chromium, on this tree and on an older commit.

    .venv/bin/python bench/bench_typing.py [--old REV] [--runs N]

Per app and code: the step's time, the number of pauses, how long each pause waited for the app (the old
code: a settle of the screen; this one: the app's answer to _NET_WM_PING or to an exposed corner), and how
many characters the app got wrong, first as it comes (``--runs`` times) and then with the app stopped
(SIGSTOP) for 2.5 s from the moment typing starts. ``--old`` is the commit to compare with (by default where
this branch left main); its tree is unpacked into a temporary folder, without the task answers, and deleted
at the end. Each measurement runs in a fresh desktop in a child process that imports the code under test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import ROOT, Report
from helpers import MANY_CHARACTERS as MANY
from helpers import typing_desktop, wait_until

APPS = ("xterm", "mousepad", "tk", "chromium")
STALL = 2.5


# -- the child: one desktop, one text --------------------------------------------------------------------------
def child(app: str, stall: float) -> dict:
    waits: list[float] = []
    map_checks: list[float] = []
    with typing_desktop(app) as (env, got):
        time.sleep(0.5)
        _time_the_pauses(env, waits, map_checks)
        pid = env.desktop.apps()[-1][1].pid
        if stall:
            os.kill(pid, signal.SIGSTOP)
            threading.Timer(stall, os.kill, (pid, signal.SIGCONT)).start()
        start = time.perf_counter()
        obs = env.step({"type": "type_text", "text": MANY + ("\n" if app == "xterm" else ""), "mode": "keys"})
        took = time.perf_counter() - start
        time.sleep(max(0.0, stall - took) + 0.5)
        wait_until(lambda: got() == MANY, 10)
        text = got()
        wrong = sum(a != b for a, b in zip(MANY, text)) + abs(len(MANY) - len(text))
        first = next((i for i, (a, b) in enumerate(zip(MANY, text)) if a != b), min(len(MANY), len(text)))
        return {"ms": took * 1000, "pauses": (obs.data or {}).get("pauses"), "waits_ms": [w * 1000 for w in waits],
                "map_checks_ms": [w * 1000 for w in map_checks],
                "wrong": wrong, "error": (obs.error or {}).get("code"),
                "first_wrong": None if not wrong else [first, MANY[first:first + 3], text[first:first + 3]]}


def _time_the_pauses(env, waits: list[float], map_checks: list[float]) -> None:
    """Time every pause of typing, whichever code: this one asks the app (Input._acknowledge; and, after each
    remap, asks an app with several X connections whether all have read the new map: ``map_checks``), the
    older one waited for the screen to settle (wait_settled with a 1 s effect wait, from the executor)."""
    inp, events = env.desktop.input, env.desktop.events
    if hasattr(inp, "_acknowledge"):
        ask = inp._acknowledge

        def timed_ask(new_map=False):
            start = time.perf_counter()
            try:
                return ask(new_map=new_map)
            finally:
                (map_checks if new_map else waits).append(time.perf_counter() - start)

        inp._acknowledge = timed_ask
    else:
        settle = events.wait_settled

        def timed_settle(*args, **kwargs):
            start = time.perf_counter()
            try:
                return settle(*args, **kwargs)
            finally:
                if kwargs.get("effect") == 1.0:  # the pause in type_text, not a step's settle
                    waits.append(time.perf_counter() - start)

        events.wait_settled = timed_settle


# -- the parent: both trees, every app -----------------------------------------------------------------------
def unpack(rev: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="hci-envs-old-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    (folder / "hci_envs" / "tasks" / "builtin.jsonl").unlink(missing_ok=True)  # the task answers stay private
    return folder


def measure(tree: Path, app: str, stall: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--child", app, str(stall)], env=env, capture_output=True,
                         text=True, timeout=300)
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"{app} on {tree} failed:\n{out.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", default=None, help="the commit to compare with (default: merge-base with main)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--child", nargs=2, metavar=("APP", "STALL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], float(args.child[1]))), flush=True)
        return
    rev = args.old or subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], check=True,
                                     capture_output=True, text=True).stdout.strip()
    old = unpack(rev)
    report = Report("typing")
    report.value("old code", subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s", rev],
                                            capture_output=True, text=True).stdout.strip()[:80])
    report.value("text", f"{len(MANY)} characters, {len(set(MANY))} distinct; stall {STALL}s")
    try:
        for app in APPS:
            for name, tree in (("old", old), ("new", ROOT)):
                runs = [measure(tree, app, 0.0) for _ in range(args.runs)]
                stalled = measure(tree, app, STALL)
                waits = [round(w, 1) for r in runs for w in r["waits_ms"]]
                checks = [round(w, 1) for r in runs for w in r.get("map_checks_ms", [])]
                report.add(f"{app} {name}: type 310 as keys", [r["ms"] for r in runs],
                           pauses=[r["pauses"] for r in runs], wait_per_pause_ms=waits, map_checks_ms=checks,
                           wrong=[r["wrong"] for r in runs], first_wrong=[r["first_wrong"] for r in runs],
                           errors=[r["error"] for r in runs])
                stalled_checks = [round(w, 1) for w in stalled.get("map_checks_ms", [])]
                report.add(f"{app} {name}: type 310 as keys, app stopped {STALL}s", [stalled["ms"]],
                           pauses=stalled["pauses"], wait_per_pause_ms=[round(w, 1) for w in stalled["waits_ms"]],
                           map_checks_ms=stalled_checks, wrong=stalled["wrong"], first_wrong=stalled["first_wrong"],
                           error=stalled["error"])
                print(f"    as it comes: pauses {[r['pauses'] for r in runs]}, wait per pause {waits} ms, "
                      f"new-map checks {checks} ms, wrong {[r['wrong'] for r in runs]}", flush=True)
                print(f"    stopped {STALL}s: pauses {stalled['pauses']}, wait per pause "
                      f"{[round(w, 1) for w in stalled['waits_ms']]} ms, new-map checks {stalled_checks} ms, "
                      f"wrong {stalled['wrong']} {stalled['first_wrong'] or ''}, error {stalled['error']}", flush=True)
    finally:
        shutil.rmtree(old, ignore_errors=True)
    report.save()


if __name__ == "__main__":
    main()
