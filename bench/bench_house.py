"""The thin path: what the server adds on top of the in-process floor, on one animating screen (a new frame
every 2 ms, so no screenshot finds the previous one unchanged and no cache helps).

  * MCP (streamable HTTP): ``screen_size`` (the bare round trip) and ``screenshot`` JPEG q75; floor: grab +
    JPEG in this process;
  * a WebSocket step (OpenEnv's protocol, :class:`HciEnvClient`): ``click`` with a JPEG q75 observation;
    floor: an XTEST click + grab + JPEG in this process. The server runs with ``--no-settle`` here, as the
    floor does not wait for the click's effect either (settle's own cost is bench_settle.py's subject);
  * for reference, the same MCP round trip against the fake desktop (``--desktop fake``), which has no X work
    at all: what the protocol stack alone costs.

Two ways of measuring, printed side by side:

  * **as before**: the floor on a desktop of its own, measured first, then the server (the official ``mcp``
    client through the tests' synchronous wrapper). The two phases run at different moments on a shared
    machine, so load that comes or goes between them lands in the ratio;
  * **interleaved** (the ratios to read): the floor grabs the server's own screen (same X server, same
    animation, same picture), and the rows take turns call by call (one call of each, in rotating order, n
    times over), so every row sees the same moments of the machine's load; a ratio is p50 over the floor's
    p50. MCP is measured with three clients against the same server: the official client as an async agent
    uses it (calls awaited on its own event loop), the same client through the tests' synchronous wrapper
    (a thread hop there and back per call), and a bare JSON-RPC POST (http.client, the 2026-07-28
    protocol's headers and envelope), so the server's share is visible apart from the client's.

    .venv/bin/python bench/bench_house.py [--quick]

Target (issue "The house"): at most 1.5x the floor for the MCP screenshot and the WebSocket step. The official
client's own part of a call (its round trip beyond a bare POST's, measured in the same turns) is printed too,
and the official client's screenshot beside the floor plus that part: what no server can take off.
"""

from __future__ import annotations

import argparse
import http.client
import inspect
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import Report, measure

from helpers import McpClient, ServerProcess, descendants

ANIMATE = Path(__file__).resolve().parent.parent / "tests" / "apps" / "animate.py"
SHOT = {"format": "jpeg", "quality": 75}
MODERN = "2026-07-28"


class RawMcp:
    """MCP's tools/call as one bare HTTP POST (keep-alive) of the 2026-07-28 protocol: no SDK on this side."""

    def __init__(self, port: int, path: str = "/mcp") -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port)
        self.path, self.id = path, 0
        self.meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
                     "io.modelcontextprotocol/clientCapabilities": {}}

    def ok(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        self.id += 1
        params = {"name": name, "arguments": arguments or {}, "_meta": self.meta}
        body = json.dumps({"jsonrpc": "2.0", "id": self.id, "method": "tools/call", "params": params})
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": name}
        try:
            self.conn.request("POST", self.path, body, headers)
            response = self.conn.getresponse()
        except (ConnectionError, http.client.RemoteDisconnected):  # the server closed an idle keep-alive
            self.conn.close()
            self.conn.request("POST", self.path, body, headers)
            response = self.conn.getresponse()
        reply = json.loads(response.read())
        if response.status != 200 or reply["result"].get("isError"):
            raise AssertionError(f"{name}: {response.status} {reply}")
        return reply["result"]


class Repeats:
    """Counts the images of a row that are the previous one's bytes: the animation drew nothing in between (a
    loaded machine starves it), so the server may have answered from its frame cache, which the floor never
    does. Many of them make a run's MCP and WebSocket rows look cheaper than they are."""

    def __init__(self) -> None:
        self.last: dict[str, Any] = {}
        self.count: dict[str, int] = {}

    def see(self, row: str, data: Any) -> None:
        if self.last.get(row) == data:
            self.count[row] = self.count.get(row, 0) + 1
        self.last[row] = data


def server_display(server: ServerProcess, timeout: float = 20.0) -> tuple[str, str]:
    """DISPLAY and XAUTHORITY of the server's one desktop, as its app was given them (waits while a closed
    session's desktop is still going away)."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for pid in descendants(server.proc.pid):  # type: ignore[union-attr]
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if len(argv) > 1 and argv[1].endswith(b"animate.py"):
                    env = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text().split("\0")
                               if "=" in item)
                    found.append((env["DISPLAY"], env["XAUTHORITY"]))
            except (OSError, KeyError):
                continue
        if len(found) == 1:
            return found[0]
        if time.monotonic() > deadline:
            raise RuntimeError(f"expected the server to run one animation, found {len(found)}")
        time.sleep(0.1)


async def interleaved(rows: dict[str, Callable[[], Any]], n: int, warmup: int = 3) -> dict[str, list[float]]:
    """Milliseconds of ``n`` calls of each row, the rows taking turns call by call in a rotating order (so
    that no row always follows the same one). A row returning an awaitable is awaited: this runs on the
    official client's event loop."""
    names = list(rows)
    out: dict[str, list[float]] = {name: [] for name in names}
    for i in range(warmup + n):
        for name in names[i % len(names):] + names[:i % len(names)]:
            start = time.perf_counter()
            result = rows[name]()
            if inspect.isawaitable(result):
                await result
            if i >= warmup:
                out[name].append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    n = 40 if args.quick else 200
    report = Report("house")
    # a frame every 2 ms: faster than any call here, so a screenshot never finds the last one unchanged
    app = f"'{sys.executable}' '{ANIMATE}' 1280 800 2"
    from hci_envs import AppState, HciEnvClient, StartState
    from hci_envs.desktop import Desktop

    print("as before: the floor on a desktop of its own, then the server")
    with Desktop(StartState(apps=[AppState(command=[sys.executable, str(ANIMATE), "1280", "800", "2"])])) as desktop:
        report.add("floor: grab + jpeg q75", measure(lambda: desktop.screen.capture(fmt="jpeg", quality=75), n))
        report.add("floor: xtest click + grab + jpeg q75", measure(
            lambda: (desktop.input.click(1, 1, (100, 100)), desktop.screen.capture(fmt="jpeg", quality=75)), n))

    with ServerProcess("--app", app, "--no-vnc", "--observation-format", "jpeg", "--no-settle") as server:
        with McpClient(f"{server.base_url}/mcp") as mcp:
            report.add("mcp screen_size (round trip)", measure(lambda: mcp.ok("screen_size"), n))
            report.add("mcp screenshot jpeg q75", measure(lambda: mcp.ok("screenshot", SHOT), n))
        with HciEnvClient(server.base_url) as env:  # a session (and desktop) of its own, as a WebSocket gets
            env.reset()
            report.add("ws step: click + jpeg observation", measure(
                lambda: env.step({"type": "click", "x": 100, "y": 100}), n))
        for key, ours, floor in (
            ("as before: mcp screenshot / floor", "mcp screenshot jpeg q75", "floor: grab + jpeg q75"),
            ("as before: ws step / floor", "ws step: click + jpeg observation", "floor: xtest click + grab + jpeg q75"),
        ):
            report.value(key, f"{report.rows[ours]['p50_ms'] / report.rows[floor]['p50_ms']:.2f}x")

        print("interleaved: the rows take turns call by call, the floor on the server's own screen")
        from hci_envs.desktop.screen import Screen
        from hci_envs.desktop.xinput import Input

        # one desktop for every row: the WebSocket attaches to the session MCP drives (a second desktop, with
        # a second animation, would load the machine for all of them)
        with McpClient(f"{server.base_url}/mcp") as mcp, HciEnvClient(server.base_url, session_id="default") as env:
            env.reset()
            display, authority = server_display(server)
            os.environ["XAUTHORITY"] = authority  # read by the X connections opened below
            screen, xinput = Screen(display), Input(display)
            raw = RawMcp(server.port)
            shot = lambda: screen.capture(fmt="jpeg", quality=75)  # noqa: E731

            repeats = Repeats()

            async def official(name: str, arguments: dict[str, Any], row: str = "") -> None:
                result = await mcp.client.call_tool(name, arguments)
                if result.is_error:
                    raise AssertionError(f"{name} failed")
                if row:
                    repeats.see(row, result.content[-1].data)

            # the sync wrapper's own loop thread: this one's loop is busy running the turns
            with McpClient(f"{server.base_url}/mcp") as wrapped:
                rows: dict[str, Callable[[], Any]] = {
                    "floor: grab + jpeg q75": lambda: repeats.see("floor: grab + jpeg q75", shot().data),
                    "floor: xtest click + grab + jpeg q75": lambda: repeats.see(
                        "floor: xtest click + grab + jpeg q75", (xinput.click(1, 1, (100, 100)), shot())[1].data),
                    "mcp screen_size, official client": lambda: official("screen_size", {}),
                    "mcp screenshot, official client": lambda: official(
                        "screenshot", SHOT, "mcp screenshot, official client"),
                    "mcp screenshot, official client, sync wrapper": lambda: repeats.see(
                        "mcp screenshot, official client, sync wrapper",
                        wrapped.ok("screenshot", SHOT).content[-1].data),
                    "mcp screen_size, raw JSON-RPC": lambda: raw.ok("screen_size"),
                    "mcp screenshot, raw JSON-RPC": lambda: repeats.see(
                        "mcp screenshot, raw JSON-RPC", raw.ok("screenshot", SHOT)["content"][-1]["data"]),
                    "ws step: click + jpeg observation": lambda: repeats.see(
                        "ws step: click + jpeg observation",
                        env.step({"type": "click", "x": 100, "y": 100}).observation.screenshot.data),
                }
                samples = mcp.run(interleaved(rows, n))
            for row in repeats.last:
                report.value(f"repeated frames: {row}", f"{repeats.count.get(row, 0)}/{n}")

    print("reference: the protocol stack alone (fake desktop)")
    with ServerProcess("--desktop", "fake") as server, McpClient(f"{server.base_url}/mcp") as mcp:
        report.add("mcp screen_size, fake desktop", measure(lambda: mcp.ok("screen_size"), n))
        report.add("mcp screen_size, fake desktop, official client", mcp.timed("screen_size", {}, n))
        raw_fake = RawMcp(server.port)
        report.add("mcp screen_size, fake desktop, raw JSON-RPC", measure(lambda: raw_fake.ok("screen_size"), n))

    print("interleaved rows")
    for name, values in samples.items():
        report.add(f"interleaved: {name}", values)

    def p50(name: str) -> float:
        return report.rows[f"interleaved: {name}"]["p50_ms"]

    print("ratios (ours p50 / floor p50, interleaved; target at most 1.5x)")
    shot_floor, click_floor = "floor: grab + jpeg q75", "floor: xtest click + grab + jpeg q75"
    for key, ours, floor in (
        ("mcp screenshot / floor (official client)", "mcp screenshot, official client", shot_floor),
        ("mcp screenshot / floor (official client, sync wrapper)", "mcp screenshot, official client, sync wrapper",
         shot_floor),
        ("mcp screenshot / floor (raw JSON-RPC)", "mcp screenshot, raw JSON-RPC", shot_floor),
        ("ws step / floor", "ws step: click + jpeg observation", click_floor),
    ):
        report.value(key, f"{p50(ours) / p50(floor):.2f}x")
    # What the screenshot adds to a bare round trip of the same client, against the floor: the transport's
    # fixed cost is the round trip; this is the screenshot path itself.
    for client in ("official client", "raw JSON-RPC"):
        added = p50(f"mcp screenshot, {client}") - p50(f"mcp screen_size, {client}")
        report.value(f"mcp screenshot minus round trip / floor ({client})", f"{added / p50(shot_floor):.2f}x")
    # The official client's own part of a call: its round trip beyond a bare POST's to the same server, in
    # the same turns. No server can take it off; it is what separates the two screenshot ratios above.
    own = p50("mcp screen_size, official client") - p50("mcp screen_size, raw JSON-RPC")
    report.value("official client's own cost (its round trip minus a bare POST's) / floor",
                 f"{own / p50(shot_floor):.2f}x")
    report.value("mcp screenshot (official client) / (floor + the official client's own cost)",
                 f"{p50('mcp screenshot, official client') / (p50(shot_floor) + own):.2f}x")
    report.save()


if __name__ == "__main__":
    main()
