"""Control-plane benchmark (issue: environment control plane).

  * reset of the default desktop with one app (HTTP /reset), and a new session from nothing (WebSocket
    connect through the first observation, and POST /sessions);
  * a WebSocket step: click + JPEG screenshot observation at 1280x800;
  * how many idle sessions start and stay healthy on this machine, and the memory each desktop takes.

    .venv/bin/python bench/bench_sessions.py [--quick] [--sessions N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx
from common import Report, measure, pss_kib
from websockets.sync.client import connect

from helpers import ANIMATE, ServerProcess, descendants


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def ws_session(base_url: str) -> float:
    start = time.perf_counter()
    with connect(base_url.replace("http://", "ws://") + "/ws", max_size=2**26) as ws:
        ws.send(json.dumps({"type": "reset", "data": {}}))
        reply = json.loads(ws.recv(timeout=60))
        assert reply["type"] == "observation", reply
        elapsed = (time.perf_counter() - start) * 1000
        ws.send(json.dumps({"type": "close"}))
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sessions", type=int, default=40, help="idle sessions to try to start")
    args = parser.parse_args()
    n = 15 if args.quick else 60
    report = Report("sessions")

    print("reset and session start (one app: xterm)")
    with ServerProcess("--app", "xterm", "--max-sessions", "4", "--observation-format", "jpeg") as server:
        with httpx.Client(base_url=server.base_url, timeout=60) as http:
            http.post("/reset", json={}).raise_for_status()
            resets = []
            for _ in range(n):
                # use the desktop, so the reset must really restore it (an untouched one is reused)
                http.post("/step", json={"action": {"type": "click", "x": 640, "y": 400}}).raise_for_status()
                start = time.perf_counter()
                http.post("/reset", json={}).raise_for_status()
                resets.append((time.perf_counter() - start) * 1000)
            report.add("HTTP /reset after a step, default desktop + xterm", resets)
            samples = []
            for _ in range(n // 2):
                start = time.perf_counter()
                sid = http.post("/sessions").raise_for_status().json()["session_id"]
                samples.append((time.perf_counter() - start) * 1000)
                http.delete(f"/sessions/{sid}").raise_for_status()
            report.add("POST /sessions: new desktop + xterm from nothing", samples)
        report.add("WS connect -> first reset observation (new session)",
                   [ws_session(server.base_url) for _ in range(n // 2)])
        with connect(server.base_url.replace("http://", "ws://") + "/ws", max_size=2**26) as ws:
            ws.send(json.dumps({"type": "reset", "data": {}}))
            ws.recv(timeout=60)
            flip = [0]

            def step() -> None:
                flip[0] ^= 1
                ws.send(json.dumps({"type": "step", "data": {"type": "click", "x": 900 + flip[0], "y": 700}}))
                reply = json.loads(ws.recv(timeout=60))
                assert reply["data"]["observation"]["screenshot"]["mime_type"] == "image/jpeg"

            report.add("WS step: click + JPEG q75 observation (static screen)", measure(step, n * 3))

    print("WebSocket step on a screen that changes every frame")
    with ServerProcess("--app", f"'{sys.executable}' '{ANIMATE}' 1280 800", "--observation-format", "jpeg") as server:
        with connect(server.base_url.replace("http://", "ws://") + "/ws", max_size=2**26) as ws:
            ws.send(json.dumps({"type": "reset", "data": {}}))
            ws.recv(timeout=60)

            def step_anim() -> None:
                ws.send(json.dumps({"type": "step", "data": {"type": "click", "x": 10, "y": 10}}))
                json.loads(ws.recv(timeout=60))

            report.add("WS step: click + JPEG q75 observation (animating screen)", measure(step_anim, n * 3))

    print(f"idle sessions: start up to {args.sessions}, idle a while, check each is healthy")
    with ServerProcess("--app", "xterm", "--max-sessions", str(args.sessions + 1), "--idle-timeout", "3600") as server:
        with httpx.Client(base_url=server.base_url, timeout=120) as http:
            baseline_pss = sum(pss_kib(p) for p in [server.proc.pid, *descendants(server.proc.pid)])
            sessions, failures = [], []
            for i in range(args.sessions):
                response = http.post("/sessions")
                if response.status_code != 200:
                    failures.append(response.text)
                    break
                sessions.append(response.json()["session_id"])
            report.value("sessions started", f"{len(sessions)} of {args.sessions}")
            time.sleep(10 if args.quick else 30)
            healthy = 0
            for sid in sessions:
                r = http.post(f"/sessions/{sid}/step", json={"action": {"type": "screen_size"}})
                if r.status_code == 409:  # step before reset: reset first, then observe
                    http.post(f"/sessions/{sid}/reset", json={}).raise_for_status()
                    r = http.post(f"/sessions/{sid}/step", json={"action": {"type": "screen_size"}})
                if r.status_code == 200 and not r.json()["done"]:
                    healthy += 1
            report.value("sessions healthy after idling", f"{healthy} of {len(sessions)}")
            pids = descendants(server.proc.pid)
            desktop_pss = sum(pss_kib(p) for p in pids if any(k in cmdline(p) for k in ("Xvfb", "openbox", "xterm")))
            total_pss = sum(pss_kib(p) for p in [server.proc.pid, *pids])
            per_desktop = desktop_pss / max(1, len(sessions) + 1) / 1024
            per_session = (total_pss - baseline_pss) / max(1, len(sessions)) / 1024
            report.value("memory per desktop (PSS of Xvfb+openbox+xterm)", f"{per_desktop:.1f} MiB")
            report.value("memory per session incl. server-side state", f"{per_session:.1f} MiB")
            if failures:
                report.value("first failure", failures[0][:300])
    report.save()


if __name__ == "__main__":
    main()
