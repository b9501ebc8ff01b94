"""A/B of the MCP path between source trees, in one run: old and new servers measured side by side, so that
the machine's load (shared, drifting 2-3x) falls on both alike.

    git worktree add /tmp/old HEAD~1        # or: mkdir /tmp/old && git archive HEAD~1 | tar -x -C /tmp/old
    .venv/bin/python bench/bench_mcp_ab.py old=/tmp/old new=. [--calls 300] [--inproc]

Each TREE is a checkout of this repository, imported ahead of the installed package (links to its ``traits``,
``recorders`` and ``images`` folders are added inside its ``hci_envs``, as the wheel installs them); ``.``, this
checkout, is the installed package itself.

  * by default, over the wire: every tree's ``hci-envs serve`` runs at once on an animating screen, and the
    rows (``screen_size`` and ``screenshot`` JPEG q75, with the official client on its own event loop and as
    a bare JSON-RPC POST; the floor, grab + JPEG of the first server's screen in this process) take turns call
    by call. Printed: p50 and p95 per row, and the server process's CPU per call;
  * ``--inproc``: each tree's ASGI app driven in a process of its own without sockets (fake desktop), trees
    alternating, repeated: the CPU of one MCP ``tools/call`` through our layers and the SDK, with the least
    noise (no network, no scheduling of other processes inside the timing).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench_house import SHOT, RawMcp, interleaved, server_display
from common import ROOT, percentile

from helpers import McpClient, ServerProcess

ANIMATE = Path(__file__).resolve().parent.parent / "tests" / "apps" / "animate.py"
TICK = os.sysconf("SC_CLK_TCK")
MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientCapabilities": {}}


def import_path(tree: Path) -> str:
    """PYTHONPATH for ``tree``'s package, laid out as the wheel installs it (links added to the tree); empty
    for this checkout, which the virtual environment installs already."""
    if tree.resolve() == ROOT.resolve():
        return ""
    for name, target in (("traits", "traits"), ("recorders", "recorders"), ("image_contexts", "images")):
        link = tree / "hci_envs" / name
        if not link.exists():
            link.symlink_to(Path("..") / target)
    return str(tree.resolve())


def cpu_ms(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICK


def over_the_wire(trees: dict[str, Path], calls: int) -> None:
    servers: dict[str, ServerProcess] = {}
    clients: dict[str, McpClient] = {}
    app = f"'{sys.executable}' '{ANIMATE}' 1280 800 2"
    try:
        for name, tree in trees.items():
            # the server's working directory must not be a checkout: `python -m` would import from it
            servers[name] = ServerProcess("--app", app, "--no-vnc", "--no-settle",
                                          env={"PYTHONPATH": import_path(tree)}).start(60)
            clients[name] = McpClient(f"{servers[name].base_url}/mcp").__enter__()
        first = next(iter(trees))
        display, authority = server_display(servers[first])
        os.environ["XAUTHORITY"] = authority
        from hci_envs.desktop.screen import Screen

        screen = Screen(display)
        host = clients[first]
        cpu: dict[str, float] = {}
        rows: dict[str, Any] = {"floor: grab + jpeg q75": lambda: screen.capture(fmt="jpeg", quality=75)}

        def timed_cpu(row: str, server: ServerProcess, call: Any) -> Any:
            """The call, with the server's CPU during it added to the row (clock ticks: exact on average)."""
            async def run() -> None:
                before = cpu_ms(server.proc.pid)  # type: ignore[union-attr]
                result = call()
                if inspect.isawaitable(result):
                    await result
                cpu[row] = cpu.get(row, 0.0) + cpu_ms(server.proc.pid) - before  # type: ignore[union-attr]
            return run()

        for name in trees:
            server, client, raw = servers[name], clients[name], RawMcp(servers[name].port)

            def official(tool: str, arguments: dict[str, Any], client: McpClient = client) -> Any:
                # the first tree's client runs the turns on its loop: await it there; others hop to theirs
                return client.client.call_tool(tool, arguments) if client is host else client.ok(tool, arguments)

            for row, call in (
                (f"{name}: screen_size, official client", lambda o=official: o("screen_size", {})),
                (f"{name}: screenshot, official client", lambda o=official: o("screenshot", SHOT)),
                (f"{name}: screen_size, raw JSON-RPC", lambda r=raw: r.ok("screen_size")),
                (f"{name}: screenshot, raw JSON-RPC", lambda r=raw: r.ok("screenshot", SHOT)),
            ):
                rows[row] = lambda row=row, call=call, server=server: timed_cpu(row, server, call)
        samples = host.run(interleaved(rows, calls))
    finally:
        for client in clients.values():
            client.__exit__(None, None, None)
        for server in servers.values():
            server.stop()
    floor = percentile(samples["floor: grab + jpeg q75"], 50)
    print(f"{'row':44} {'p50 ms':>8} {'p95 ms':>8} {'/floor':>7} {'server cpu ms/call':>19}")
    for row, values in samples.items():
        p50 = percentile(values, 50)
        server_cpu = f"{cpu[row] / len(values):19.3f}" if row in cpu else ""
        print(f"{row:44} {p50:8.2f} {percentile(values, 95):8.2f} {p50 / floor:6.2f}x {server_cpu}")


INPROC = r'''
import asyncio, json, sys, time
import uvloop
from hci_envs.server.app import create_app
from hci_envs.server.config import ServerConfig
from hci_envs.traits.envs import DesktopEnv

calls, tool, arguments, meta = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])

async def main():
    app = create_app(ServerConfig(env_class=DesktopEnv, env_kwargs={"desktop": "fake", "spare": False}, vnc=False,
                                  isolation="none"))
    inbox, outbox = asyncio.Queue(), asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    lifespan = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, outbox.put))
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    headers = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
               (b"accept", b"application/json, text/event-stream"), (b"mcp-protocol-version", b"2026-07-28"),
               (b"mcp-method", b"tools/call"), (b"mcp-name", tool.encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/mcp", "raw_path": b"/mcp", "query_string": b"", "root_path": "", "headers": headers,
             "client": None, "server": ("127.0.0.1", 8000)}

    async def call(i):
        body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                           "params": {"name": tool, "arguments": arguments, "_meta": meta}}).encode()
        sent, status = [False], []

        async def receive():
            if not sent[0]:
                sent[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()

        async def send(message):
            if message["type"] == "http.response.start":
                status.append(message["status"])

        await app(dict(scope), receive, send)
        assert status == [200], status

    for i in range(100):
        await call(i)
    start = time.process_time()
    for i in range(calls):
        await call(i)
    print(json.dumps((time.process_time() - start) / calls * 1000))
    await inbox.put({"type": "lifespan.shutdown"})
    await lifespan

uvloop.run(main())
'''


def in_process(trees: dict[str, Path], calls: int, rounds: int) -> None:
    results: dict[tuple[str, str], list[float]] = {}
    cases = (("screen_size", {}), ("screenshot", SHOT))
    for r in range(rounds):
        for tool, arguments in cases:
            for name, tree in trees.items():
                out = subprocess.run(
                    [sys.executable, "-c", INPROC, str(calls), tool, json.dumps(arguments), json.dumps(MODERN_META)],
                    env={**os.environ, "PYTHONPATH": import_path(tree)}, cwd="/", capture_output=True, text=True,
                    check=True)
                results.setdefault((tool, name), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"  round {r + 1}/{rounds}", flush=True)
    print(f"{'tools/call (fake desktop, in process)':44} {'CPU ms/call, median':>20}   rounds")
    for (tool, name), values in results.items():
        print(f"{name + ': ' + tool:44} {statistics.median(values):20.3f}   "
              + " ".join(f"{v:.3f}" for v in values))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs="+", metavar="NAME=TREE", help="a name and a checkout of this repository")
    parser.add_argument("--calls", type=int, default=300, help="calls per row (per round with --inproc)")
    parser.add_argument("--inproc", action="store_true", help="each tree's app in process, CPU per call")
    parser.add_argument("--rounds", type=int, default=5, help="rounds with --inproc")
    args = parser.parse_args()
    trees = {}
    for spec in args.trees:
        name, _, path = spec.partition("=")
        trees[name] = Path(path or ".").resolve()
    os.chdir("/")  # so that no server or worker imports hci_envs from the working directory
    start = time.monotonic()
    if args.inproc:
        in_process(trees, args.calls, args.rounds)
    else:
        over_the_wire(trees, args.calls)
    print(f"  ({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()
