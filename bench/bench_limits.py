"""What one hostile agent does to another session, with the default per-session limits: a fork bomb, a memory
hog, a disk filler and a CPU spinner, each run in session A while session B works, and how long a reset of A
takes to end each. Every figure is beside its baseline from the same run: B's step latency with A idle, and a
reset of A after an ordinary command.

  * B's ``bash`` (a command: one process) and ``screenshot`` p50 while A attacks, as a ratio to idle (target:
    within 2x, issue "Limits and leaks");
  * how long the attack takes to be stopped: the fork bomb's forks refused at the process limit, the hog
    stopped at the memory limit, the filler at the disk limit (time from the attack's start until the kernel
    refused, as the agent's command saw it);
  * reset of A after the attack, against a reset after ``true``.

    .venv/bin/python bench/bench_limits.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import time

from common import Report, measure

from helpers import McpClient, ServerProcess

CONTROL = "bench-limits-control-token-0123456789"
#: Memory written (not only reserved), 100 MiB at a time, until something stops it.
HOG = "python3 -c \"x = []\nwhile True:\n    x.append(b'a' * (100 * 1024**2))\""
#: Each attack, as A's bash command (started in the background: it goes on while B is measured), and what
#: shows it has been stopped (a line its own command prints).
ATTACKS = {
    "fork bomb": "bomb() { bomb | bomb & }; bomb",
    "memory hog": HOG,
    "disk filler": "dd if=/dev/zero of=~/fill bs=1M count=100000",
    "cpu spinner": "for i in 1 2 3 4; do (while :; do :; done) & done",
}
#: Run in the foreground, timed: how long until the kernel stops it (the command returns).
STOPPED = {
    "memory hog": HOG + "; true",
    "disk filler": "dd if=/dev/zero of=~/fill bs=1M count=100000 2>/dev/null; true",
    "fork bomb": "python3 -c \"import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
                 "            import time; time.sleep(60); os._exit(0)\n        n += 1\nexcept OSError:\n"
                 "    print(n)\"",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 10 if args.quick else 30
    report = Report("limits")
    import httpx

    server = ServerProcess("--env", "workstation", "--app", "xterm", "--agent-tokens", "--max-sessions", "3",
                           "--no-vnc", env={"HCI_ENVS_CONTROL_TOKEN": CONTROL})
    server.start(timeout=90)
    control = httpx.Client(base_url=server.base_url, headers={"authorization": f"Bearer {CONTROL}"}, timeout=300)
    try:
        report.value("limits", control.get("/metadata").json()["limits"])
        agents = []
        for _ in range(2):
            info = control.post("/sessions", json={}).json()
            agents.append((info, McpClient(info["mcp_tools_url"], info["agent_token"]).__enter__()))
        (a_info, a), (_b_info, b) = agents
        sid = a_info["session_id"]

        def b_steps(label: str) -> None:
            report.add(f"B bash [{label}]", measure(lambda: b.ok("bash", {"command": "true"}), n, warmup=1))
            report.add(f"B screenshot [{label}]", measure(lambda: b.ok("screenshot", {}), n, warmup=1))

        def reset_a() -> float:
            start = time.perf_counter()
            assert control.post(f"/sessions/{sid}/reset", json={}).status_code == 200
            return (time.perf_counter() - start) * 1000

        b_steps("A idle")
        baseline = []
        for _ in range(3):
            a.ok("bash", {"command": "true"})
            baseline.append(reset_a())
        report.add("reset of A after `true`", baseline)
        for name, command in ATTACKS.items():
            if name in STOPPED:
                start = time.perf_counter()
                a.call("bash", {"command": STOPPED[name], "timeout": 120})
                report.add(f"{name}: until the kernel stopped it", [(time.perf_counter() - start) * 1000])
            a.call("bash", {"command": f"({command}) >/dev/null 2>&1 &", "persistent": True, "timeout": 30})
            time.sleep(2)  # under way
            b_steps(f"A: {name}")
            report.add(f"reset of A after the {name}", [reset_a()])
            for kind in ("bash", "screenshot"):
                idle = report.rows[f"B {kind} [A idle]"]["p50_ms"]
                under = report.rows[f"B {kind} [A: {name}]"]["p50_ms"]
                report.value(f"B {kind} under the {name} / idle", f"{under / idle:.2f}x (target at most 2x)")
            ratio = report.rows[f"reset of A after the {name}"]["p50_ms"] / report.rows["reset of A after `true`"][
                "p50_ms"]
            report.value(f"reset after the {name} / after `true`", f"{ratio:.2f}x")
        report.value("cores", os.cpu_count())
        for _info, client in agents:
            client.__exit__(None, None, None)
    finally:
        control.close()
        server.stop()
    report.save()


if __name__ == "__main__":
    main()
