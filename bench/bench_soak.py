"""A soak: one server with spare desktops, two sessions whose agents work and are reset every few seconds, for
many minutes. What must stay flat: the server's memory (PSS of the server and its children; the server's own
pages, USS, which other processes do not move), its processes (its own tree, and processes of its sessions'
accounts outside it), its mounts, its open files and the folders in its temporary directory; and every agent
account comes back at the end (no process of the accounts it used left once the sessions are closed). The
server has a temporary directory of its own, and only its own processes and accounts are counted, so that the
figures hold with other work (another suite) running beside it.

Each sample is reported beside the first one taken after the warm-up (the ratio last / first), and the whole
curve is saved in bench/results/soak.json.

    .venv/bin/python bench/bench_soak.py [--minutes 30] [--every 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from common import Report, pss_kib, uss_kib

from helpers import McpClient, ServerProcess

CONTROL = "bench-soak-control-token-0123456789ab"
#: What an agent does in each episode: a program left running, a file in its home and in /tmp, a click.
EPISODE = "(sleep 600 &) ; echo x > ~/note.txt; echo y > /tmp/soak-$(id -u)-$RANDOM; id -u"


def tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def sample(server_pid: int, uids: set[int], tmp: Path) -> dict[str, float]:
    processes = tree(server_pid) if server_pid != os.getpid() else []
    agent = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid in uids and int(entry) not in processes:
                    agent += 1
            except OSError:
                pass
    try:
        fds = len(os.listdir(f"/proc/{server_pid}/fd"))
    except OSError:
        fds = -1
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return {
        "server_tree_pss_mib": round(sum(pss_kib(p) for p in processes) / 1024, 1),
        "server_pss_mib": round(pss_kib(server_pid) / 1024, 1),
        # its own pages only: PSS moves when processes beside it (another suite) share its libraries or stop
        "server_uss_mib": round(uss_kib(server_pid) / 1024, 1),
        "processes": len(processes) + agent, "agent_processes_outside": agent, "server_fds": fds,
        "mounts": sum(1 for point in mounts if point.startswith(f"{tmp}/")),
        "tmp_entries": len(os.listdir(tmp)),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--every", type=float, default=3.0, help="seconds between a session's resets")
    args = parser.parse_args()
    import httpx

    # stopped with SIGTERM (kill, a CI's timeout), the server and its folder go too: the finally clauses run
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    report = Report("soak")
    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    tmp.chmod(0o1777)  # as /tmp: the agent accounts reach their homes in it
    server = ServerProcess("--env", "workstation", "--app", "xterm", "--agent-tokens", "--max-sessions", "3",
                           "--spare", "--no-vnc", env={"HCI_ENVS_CONTROL_TOKEN": CONTROL, "TMPDIR": str(tmp)})
    server.start(timeout=90)
    control = httpx.Client(base_url=server.base_url, headers={"authorization": f"Bearer {CONTROL}"}, timeout=300)
    curve: list[dict[str, float]] = []
    resets = 0
    # the agent account each session runs as now (a reset may swap in a spare's): accounts go back to the machine's
    # pool, and another server beside this one may run as one this server used before
    uids: dict[str, int] = {}
    try:
        sessions = []
        for _ in range(2):
            info = control.post("/sessions", json={}).json()
            sessions.append((info["session_id"], McpClient(info["mcp_tools_url"], info["agent_token"]).__enter__()))
        started = time.monotonic()
        next_sample = started + 60  # the first sample after a minute's warm-up
        while time.monotonic() - started < args.minutes * 60:
            for sid, mcp in sessions:
                uids[sid] = int(mcp.call("bash", {"command": EPISODE}).structured_content["stdout"].split()[-1])
                mcp.call("click", {"x": 300, "y": 300})
                assert control.post(f"/sessions/{sid}/reset", json={}).status_code == 200
                resets += 1
            time.sleep(args.every)
            if time.monotonic() >= next_sample:
                point = {"minute": round((time.monotonic() - started) / 60, 1), "resets": resets,
                         **sample(server.proc.pid, set(uids.values()), tmp)}
                curve.append(point)
                print(f"  {point}", flush=True)
                next_sample += 60
        for _sid, mcp in sessions:
            mcp.__exit__(None, None, None)
        for sid, _mcp in sessions:
            control.delete(f"/sessions/{sid}")
        time.sleep(3)
        left = sample(server.proc.pid, set(uids.values()), tmp)
    finally:
        control.close()
        server.stop()
    time.sleep(3)
    after_stop = sample(os.getpid(), set(uids.values()), tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    first, last = curve[0], curve[-1]
    for key in ("server_tree_pss_mib", "server_pss_mib", "server_uss_mib", "processes", "server_fds", "mounts",
                "tmp_entries"):
        ratio = last[key] / first[key] if first[key] else float("nan")
        report.value(f"{key}: last / first", f"{last[key]} / {first[key]} = {ratio:.2f}x")
    report.value("resets", resets)
    report.value("agent processes (of the accounts it used) once the sessions were closed",
                 left["agent_processes_outside"])
    report.value("agent processes (of the accounts it used) once the server stopped",
                 after_stop["agent_processes_outside"])
    report.notes["curve"] = curve
    report.save()


if __name__ == "__main__":
    main()
