"""A soak: one server with spare desktops, two sessions whose agents work and are reset every few seconds, for
many minutes. What must stay flat: the server's memory (PSS of the server and its children; the server's own
pages, USS, which other processes do not move), its processes (its own tree, and processes of its sessions'
accounts outside it), its mounts, its open files and the folders in its temporary directory; and every agent
account comes back at the end (no process of the accounts it used left once the sessions are closed). The
server has a temporary directory of its own, and only its own processes and accounts are counted, so that the
figures hold with other work (another suite) running beside it.

Each sample is reported beside the first one taken after the warm-up (the ratio last / first), and the whole
curve is saved in bench/results/soak.json. With --beside-default-heaps a second server runs the same episodes
in turns with the first, with glibc's default heaps (the server caps them at one, see
hci_envs/desktop/allocator.py): the baseline of the memory slope (KiB a reset) and of the step's time.

    .venv/bin/python bench/bench_soak.py [--minutes 30] [--every 3] [--beside-default-heaps]
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
from typing import Any

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


class Arm:
    """One server of the soak, its two sessions and its curve."""

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.tmp = Path(tempfile.mkdtemp(prefix=f"soak-{name}-"))
        self.tmp.chmod(0o1777)  # as /tmp: the agent accounts reach their homes in it
        self.server = ServerProcess("--env", "workstation", "--app", "xterm", "--agent-tokens", "--max-sessions",
                                    "3", "--spare", "--no-vnc",
                                    env={"HCI_ENVS_CONTROL_TOKEN": CONTROL, "TMPDIR": str(self.tmp), **env})
        self.control: Any = None
        self.sessions: list[tuple[str, McpClient]] = []
        self.curve: list[dict[str, float]] = []
        self.resets = 0
        self.step_ms: list[float] = []
        # the agent account each session runs as now (a reset may swap in a spare's): accounts go back to the
        # machine's pool, and another server beside this one may run as one this server used before
        self.uids: dict[str, int] = {}

    def start(self) -> None:
        import httpx

        self.server.start(timeout=90)
        self.control = httpx.Client(base_url=self.server.base_url, timeout=300,
                                    headers={"authorization": f"Bearer {CONTROL}"})
        for _ in range(2):
            info = self.control.post("/sessions", json={}).json()
            client = McpClient(info["mcp_tools_url"], info["agent_token"]).__enter__()
            self.sessions.append((info["session_id"], client))

    def episode(self) -> None:
        for sid, mcp in self.sessions:
            began = time.perf_counter()
            self.uids[sid] = int(mcp.call("bash", {"command": EPISODE}).structured_content["stdout"].split()[-1])
            mcp.call("click", {"x": 300, "y": 300})
            mcp.call("screenshot", {})
            self.step_ms.append((time.perf_counter() - began) * 1000 / 3)
            assert self.control.post(f"/sessions/{sid}/reset", json={}).status_code == 200
            self.resets += 1

    def sample(self, minute: float) -> dict[str, float]:
        point = {"minute": minute, "resets": self.resets,
                 **sample(self.server.proc.pid, set(self.uids.values()), self.tmp)}
        self.curve.append(point)
        print(f"  {self.name}: {point}", flush=True)
        return point

    def close(self) -> dict[str, float]:
        for _sid, mcp in self.sessions:
            mcp.__exit__(None, None, None)
        for sid, _mcp in self.sessions:
            self.control.delete(f"/sessions/{sid}")
        time.sleep(3)
        return sample(self.server.proc.pid, set(self.uids.values()), self.tmp)

    def stop(self) -> dict[str, float]:
        if self.control is not None:
            self.control.close()
        self.server.stop()
        time.sleep(3)
        after = sample(os.getpid(), set(self.uids.values()), self.tmp)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return after


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--every", type=float, default=3.0, help="seconds between a session's resets")
    parser.add_argument("--beside-default-heaps", action="store_true",
                        help="run a second server beside it, with glibc's default heaps (MALLOC_ARENA_MAX of "
                             "8 a core, where the server caps them at one): the baseline of the memory slope")
    args = parser.parse_args()

    # stopped with SIGTERM (kill, a CI's timeout), the server and its folder go too: the finally clauses run
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    report = Report("soak")
    arms = [Arm("shipped", {})]
    if args.beside_default_heaps:
        arms.append(Arm("default-heaps", {"MALLOC_ARENA_MAX": str(8 * (os.cpu_count() or 1))}))
    left: dict[str, dict[str, float]] = {}
    after_stop: dict[str, dict[str, float]] = {}
    try:
        for arm in arms:
            arm.start()
        started = time.monotonic()
        next_sample = started + 60  # the first sample after a minute's warm-up
        while time.monotonic() - started < args.minutes * 60:
            for arm in arms:  # in turns, so that both see the same machine
                arm.episode()
            time.sleep(args.every)
            if time.monotonic() >= next_sample:
                for arm in arms:
                    arm.sample(round((time.monotonic() - started) / 60, 1))
                next_sample += 60
        for arm in arms:
            left[arm.name] = arm.close()
    finally:
        for arm in arms:
            after_stop[arm.name] = arm.stop()
    for arm in arms:
        first, last = arm.curve[0], arm.curve[-1]
        for key in ("server_tree_pss_mib", "server_pss_mib", "server_uss_mib", "processes", "server_fds", "mounts",
                    "tmp_entries"):
            ratio = last[key] / first[key] if first[key] else float("nan")
            report.value(f"{arm.name}: {key}: last / first", f"{last[key]} / {first[key]} = {ratio:.2f}x")
        resets = last["resets"] - first["resets"]
        slope = (last["server_uss_mib"] - first["server_uss_mib"]) * 1024 / resets if resets else float("nan")
        report.value(f"{arm.name}: server USS growth after the warm-up, KiB a reset", f"{slope:.1f} over {resets}")
        # the heaps climb to their high-water marks first: whether they stay there shows in the second half
        half = arm.curve[len(arm.curve) // 2]
        resets = last["resets"] - half["resets"]
        slope = (last["server_uss_mib"] - half["server_uss_mib"]) * 1024 / resets if resets else float("nan")
        report.value(f"{arm.name}: server USS growth in the second half, KiB a reset", f"{slope:.1f} over {resets}")
        report.add(f"{arm.name}: a tool call (bash, click, screenshot: their mean)", arm.step_ms)
        report.value(f"{arm.name}: resets", arm.resets)
        report.value(f"{arm.name}: agent processes (of the accounts it used) once the sessions were closed",
                     left.get(arm.name, {}).get("agent_processes_outside"))
        report.value(f"{arm.name}: agent processes (of the accounts it used) once the server stopped",
                     after_stop[arm.name]["agent_processes_outside"])
        report.notes[f"{arm.name}: curve"] = arm.curve
    if len(arms) > 1:
        report.ratio("a tool call: default heaps / shipped (p50)", f"{arms[1].name}: a tool call (bash, click, "
                     "screenshot: their mean)", f"{arms[0].name}: a tool call (bash, click, screenshot: their mean)")
    report.save()


if __name__ == "__main__":
    main()
