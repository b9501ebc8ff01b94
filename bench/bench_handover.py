"""People in the loop: what the hand-over's gate costs a normal agent step, and how soon the collection page
shows the agent's request. Each figure beside its baseline from the same run:

  * an agent step (MCP ``mouse_move`` and ``click`` on a real Xvfb desktop, ``type_text`` of 8 characters)
    with the gate as shipped, against the same step with the gate's calls made free (the environment's
    hand-over answering "not paused" without looking), interleaved in rounds so that the machine's drift
    falls on both alike; the added latency is the difference of the medians;
  * from ``ask_human`` returning to the agent until the collection page (Debian's chromium, through
    Playwright) shows the request, against the page's own poll period (its floor: the page asks every
    400 ms, so half of that on average), and the same for a recording started from the control plane.

    .venv/bin/python bench/bench_handover.py [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

from common import Report

from helpers import McpClient, ServerProcess


def gate_cost(report: Report, rounds: int, per_round: int) -> None:
    from hci_envs.traits import AssistedDesktopEnv

    with AssistedDesktopEnv(start_state={"width": 1280, "height": 800}) as env:
        env.reset()
        handover = env.handover
        shipped = (handover.agent_blocked, handover.take_report)
        free = (lambda: None, lambda: None)
        steps = {"mouse_move": {"x": 300, "y": 300}, "click": {"x": 5, "y": 795}, "type_text": {"text": "abcdefgh"}}
        samples: dict[tuple[str, str], list[float]] = {(s, k): [] for s in steps for k in ("gate", "no gate")}
        for _ in range(rounds):
            for kind, (blocked, report_fn) in (("gate", shipped), ("no gate", free)):
                handover.agent_blocked, handover.take_report = blocked, report_fn
                for name, arguments in steps.items():
                    for _ in range(per_round):
                        start = time.perf_counter()
                        env.call_tool(name, arguments)
                        samples[(name, kind)].append((time.perf_counter() - start) * 1000)
        handover.agent_blocked, handover.take_report = shipped
        for name in steps:
            with_gate = report.add(f"{name} with the hand-over gate", samples[(name, "gate")])
            without = report.add(f"{name} with the gate made free", samples[(name, "no gate")])
            report.value(f"{name}: added by the gate (p50 difference)",
                         f"{with_gate['p50_ms'] - without['p50_ms']:+.3f} ms "
                         f"({with_gate['p50_ms'] / without['p50_ms']:.3f}x)")


def page_delay(report: Report, trials: int) -> None:
    from playwright.sync_api import sync_playwright

    episodes = tempfile.mkdtemp(prefix="bench-handover-")
    with ServerProcess("--env", "assisted-desktop", "--no-spare", "--episodes-dir", episodes) as server, \
            server.http() as http, sync_playwright() as pw:
        http.post("/reset", json={}).raise_for_status()
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(http.get("/state").json()["collect_url"])
        page.wait_for_selector("#human[data-status='none']", timeout=30000)
        asked, recorded = [], []
        with McpClient(f"{server.base_url}/mcp") as mcp:
            for n in range(trials):
                time.sleep(0.137 * (n % 3))  # not in step with the page's polls
                mcp.ok("ask_human", {"reason": f"help {n}"})
                start = time.perf_counter()
                page.wait_for_selector("#human[data-status='requested']", timeout=10000)
                asked.append((time.perf_counter() - start) * 1000)
                http.post("/human", json={"command": "accept"}).raise_for_status()
                http.post("/human", json={"command": "hand_back"}).raise_for_status()
                mcp.ok("cursor_position", {})  # the agent reads the report
                page.wait_for_selector("#human[data-status='handed_back']", timeout=10000)
                time.sleep(0.137 * (n % 3))
                http.post("/recording", json={"command": "start"}).raise_for_status()
                start = time.perf_counter()
                page.wait_for_selector("#rec-state[data-state='recording']", timeout=10000)
                recorded.append((time.perf_counter() - start) * 1000)
                http.post("/recording", json={"command": "stop"}).raise_for_status()
                page.wait_for_selector("#rec-state[data-state='stopped']", timeout=30000)
        browser.close()
    shutil.rmtree(episodes, ignore_errors=True)
    report.add("request to the page showing it", asked)
    report.add("recording started to the page showing it (same path)", recorded)
    report.value("the page's poll period", "400 ms (mean wait for the next poll: 200 ms)")
    report.value("request shown / poll period", f"{statistics.median(asked) / 400:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    report = Report("handover")
    gate_cost(report, rounds=4 if args.quick else 10, per_round=10 if args.quick else 30)
    page_delay(report, trials=5 if args.quick else 20)
    report.save()


if __name__ == "__main__":
    main()
