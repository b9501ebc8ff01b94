"""What containment costs: the same server with agents as accounts of their own (``--isolation uid``, with the
default per-session limits), as such accounts without limits (``--no-limits``: the cost of the control groups)
and as the server's own user (``--isolation none``), measured side by side in one run, interleaved round by
round so that the machine's drift hits them alike. Every uid mode hides other accounts' processes (/proc
mounted again per agent program): that cost is in uid against none.

  * step latency over MCP: ``click`` (an input action), ``screenshot`` (JPEG 1280x800), ``bash`` (a command:
    one process started as the agent's account);
  * warm reset p50 (HTTP /reset of the default session: with uid isolation every process of the account is
    ended and the window manager restarted);
  * session start (POST /sessions through a healthy desktop, and closing it).

    .venv/bin/python bench/bench_containment.py [--quick]

Targets (issue "Containment"): step latency and reset p50 at most 1.1x, session start at most 1.3x.
"""

from __future__ import annotations

import argparse
import time

from common import Report, measure

from helpers import McpClient, ServerProcess

MODES = ("none", "uid", "uid-no-limits")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 6)
    n = 10 if args.quick else 25
    report = Report("containment")
    servers = {mode: ServerProcess("--env", "workstation", "--app", "xterm", "--isolation", mode.split("-")[0],
                                   "--no-vnc", *(["--no-limits"] if mode.endswith("no-limits") else []))
               for mode in MODES}
    samples: dict[str, list[float]] = {}
    try:
        for server in servers.values():
            server.start(timeout=60)
        clients = {}
        for mode, server in servers.items():
            with server.http() as http:
                state = http.get("/state").json()
            assert state["isolation"] == mode.split("-")[0], state
            clients[mode] = McpClient(state["mcp_tools_url"]).__enter__()
        for _round in range(rounds):
            for mode, server in servers.items():
                mcp = clients[mode]
                with server.http() as http:
                    def add(key: str, values: list[float]) -> None:
                        samples.setdefault(f"{key} [{mode}]", []).extend(values)

                    add("MCP click", measure(lambda: mcp.ok("click", {"x": 600, "y": 400}), n, warmup=2))
                    add("MCP screenshot jpeg", measure(
                        lambda: mcp.ok("screenshot", {"format": "jpeg", "quality": 80}), n, warmup=2))
                    add("MCP bash (one process)", measure(lambda: mcp.ok("bash", {"command": "true"}), n, warmup=2))
                    # a reset after an action (not of an untouched desktop, which is reused outright)
                    resets = []
                    for _ in range(max(3, n // 3)):
                        mcp.ok("click", {"x": 10, "y": 10})
                        start = time.perf_counter()
                        assert http.post("/reset", json={}).status_code == 200
                        resets.append((time.perf_counter() - start) * 1000)
                    add("warm reset (xterm)", resets)
                    starts = []
                    for _ in range(2):
                        start = time.perf_counter()
                        info = http.post("/sessions").json()
                        starts.append((time.perf_counter() - start) * 1000)
                        http.delete(f"/sessions/{info['session_id']}")
                    add("session start (POST /sessions)", starts)
        for mode in MODES:
            for key in [k for k in samples if k.endswith(f"[{mode}]")]:
                report.add(key, samples[key])
        targets = {"MCP click": 1.1, "MCP screenshot jpeg": 1.1, "MCP bash (one process)": 1.1,
                   "warm reset (xterm)": 1.1, "session start (POST /sessions)": 1.3}
        for key, target in targets.items():
            ratio = report.rows[f"{key} [uid]"]["p50_ms"] / report.rows[f"{key} [none]"]["p50_ms"]
            report.value(f"cost of containment: {key}", f"{ratio:.2f}x (target at most {target}x)")
            limits = report.rows[f"{key} [uid]"]["p50_ms"] / report.rows[f"{key} [uid-no-limits]"]["p50_ms"]
            report.value(f"cost of the limits: {key}", f"{limits:.2f}x (uid with limits / uid without)")
        for client in clients.values():
            client.__exit__(None, None, None)
    finally:
        for server in servers.values():
            server.stop()
    report.save()


if __name__ == "__main__":
    main()
