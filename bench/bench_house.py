"""The thin path: what the server adds on top of the in-process floor, measured in one run on one animating
screen (a new frame every 2 ms, so no screenshot finds the previous one unchanged and no cache helps).

  * MCP (the official ``mcp`` client, streamable HTTP): ``screen_size`` (the bare round trip) and
    ``screenshot`` JPEG q75; floor: grab + JPEG in this process;
  * a WebSocket step (OpenEnv's protocol, :class:`HciEnvClient`): ``click`` with a JPEG q75 observation;
    floor: an XTEST click + grab + JPEG in this process. The server runs with ``--no-settle`` here, as the
    floor does not wait for the click's effect either (settle's own cost is bench_settle.py's subject);
  * for reference, the same MCP round trip against the fake desktop (``--desktop fake``), which has no X work
    at all: what the protocol stack alone costs.

    .venv/bin/python bench/bench_house.py [--quick]

Target (issue "The house"): at most 1.5x the floor for the MCP screenshot and the WebSocket step.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import Report, measure

from helpers import McpClient, ServerProcess

ANIMATE = Path(__file__).resolve().parent.parent / "tests" / "apps" / "animate.py"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    n = 40 if args.quick else 200
    report = Report("house")
    # a frame every 2 ms: faster than any call here, so a screenshot never finds the last one unchanged
    app = f"'{sys.executable}' '{ANIMATE}' 1280 800 2"

    print("floor: in this process, on an animating screen")
    from hci_envs import AppState, StartState
    from hci_envs.desktop import Desktop

    with Desktop(StartState(apps=[AppState(command=[sys.executable, str(ANIMATE), "1280", "800", "2"])])) as desktop:
        report.add("floor: grab + jpeg q75", measure(lambda: desktop.screen.capture(fmt="jpeg", quality=75), n))
        report.add("floor: xtest click + grab + jpeg q75", measure(
            lambda: (desktop.input.click(1, 1, (100, 100)), desktop.screen.capture(fmt="jpeg", quality=75)), n))

    print("ours: hci-envs serve, the same animating app")
    with ServerProcess("--app", app, "--no-vnc", "--observation-format", "jpeg", "--no-settle") as server:
        with McpClient(f"{server.base_url}/mcp") as mcp:
            report.add("mcp screen_size (round trip)", measure(lambda: mcp.ok("screen_size"), n))
            report.add("mcp screenshot jpeg q75", measure(
                lambda: mcp.ok("screenshot", {"format": "jpeg", "quality": 75}), n))
        from hci_envs import HciEnvClient

        with HciEnvClient(server.base_url) as env:
            env.reset()
            report.add("ws step: click + jpeg observation", measure(
                lambda: env.step({"type": "click", "x": 100, "y": 100}), n))

    print("reference: the protocol stack alone (fake desktop)")
    with ServerProcess("--desktop", "fake") as server, McpClient(f"{server.base_url}/mcp") as mcp:
        report.add("mcp screen_size, fake desktop", measure(lambda: mcp.ok("screen_size"), n))

    # What the screenshot adds to a bare MCP round trip, against the floor: the transport's fixed cost (the
    # SDK's server and client, HTTP) is the round trip; this ratio is the screenshot path itself.
    added = report.rows["mcp screenshot jpeg q75"]["p50_ms"] - report.rows["mcp screen_size (round trip)"]["p50_ms"]
    report.value("mcp screenshot minus round trip / floor",
                 f"{added / report.rows['floor: grab + jpeg q75']['p50_ms']:.2f}x")

    print("ratios (ours p50 / floor p50; target at most 1.5x)")
    for key, ours, floor in (
        ("mcp screenshot / floor", "mcp screenshot jpeg q75", "floor: grab + jpeg q75"),
        ("ws step / floor", "ws step: click + jpeg observation", "floor: xtest click + grab + jpeg q75"),
    ):
        ratio = report.rows[ours]["p50_ms"] / report.rows[floor]["p50_ms"]
        report.value(key, f"{ratio:.2f}x")
    report.save()


if __name__ == "__main__":
    main()
