"""Per-session limits the kernel enforces (hci_envs.sandbox.limits): an agent's fork bomb and memory hog stop at
its own session's limits, with the reason in its next observation, while another session carries on; nothing of
them is left after a reset."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import need
from helpers import McpClient, ServerProcess

from hci_envs.errors import ConfigError
from hci_envs.sandbox.limits import GROUP, Limits, parse_size

CONTROL = "limits-control-token-0123456789abcdef"


@pytest.mark.fake
@pytest.mark.parametrize("given,size", [("2G", 2 * 1024**3), ("512M", 512 * 1024**2), ("1.5GiB", 1536 * 1024**2),
                                        (1 << 30, 1 << 30), (None, None)])
def test_sizes_read_as_people_write_them(given, size):
    assert parse_size(given) == size


@pytest.mark.fake
@pytest.mark.parametrize("options,message", [
    ({"memory": "lots"}, "like 512M"), ({"memory": "1M"}, "at least 64M"), ({"processes": 3}, "at least 16"),
    ({"processes": True}, "at least 16"), ({"cpu_weight": 0}, "1 to 10000"), ({"disk": "1M"}, "at least 16M"),
    ({"swap": "1G"}, "unknown limits: swap"),
])
def test_bad_limits_are_refused_naming_the_field(options, message):
    with pytest.raises(ConfigError, match=message) as refused:
        Limits.from_options(options)
    assert refused.value.details["field"] == "limits"


@pytest.mark.fake
def test_the_defaults_leave_the_machine_room_and_every_session_a_fair_part():
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limits = Limits.default()
    assert limits.processes == 1024 and limits.memory is not None
    assert 2 * 1024**3 <= limits.memory <= total * 3 // 4 or limits.memory == total * 3 // 4


def _agent(server: ServerProcess) -> tuple[McpClient, dict]:
    import httpx

    info = httpx.post(f"{server.base_url}/sessions", headers={"authorization": f"Bearer {CONTROL}"},
                      timeout=120).json()
    client = McpClient(info["mcp_tools_url"], info["agent_token"]).__enter__()
    return client, info


def _bash(client: McpClient, command: str, timeout: float = 30) -> dict:
    return client.call("bash", {"command": command, "timeout": timeout}).structured_content


@pytest.mark.x11
def test_a_fork_bomb_and_a_memory_hog_stop_at_their_sessions_limits_and_the_other_session_carries_on():
    need(os.geteuid() == 0, "root: the limits are control groups a root server makes")
    import httpx

    with ServerProcess("--env", "workstation", "--agent-tokens", "--max-sessions", "3", "--limit-processes", "64",
                       "--limit-memory", "256M", env={"HCI_ENVS_CONTROL_TOKEN": CONTROL}) as server:
        control = {"authorization": f"Bearer {CONTROL}"}
        limits = httpx.get(f"{server.base_url}/metadata", headers=control).json()["limits"]
        assert limits["processes"] == 64 and limits["memory"] == 256 * 1024**2, limits
        assert limits["enforced_by"].startswith("cgroup"), limits
        (a, a_info), (b, _b_info) = _agent(server), _agent(server)
        try:
            # the memory hog: the kernel stops it at its session's 256 MiB, and the agent is told why
            hog = _bash(a, "python3 -c \"x = b'a' * (600 * 1024 * 1024); print('survived')\"; echo exit=$?")
            assert "survived" not in hog["stdout"] and "exit=137" in hog["stdout"], hog
            assert "memory limit (256 MiB) was reached" in hog.get("limit", ""), hog  # with the command's result
            # the fork bomb: at most 64 processes and threads, the rest refused; told too
            uid = int(_bash(a, "id -u")["stdout"])
            bomb = _bash(a, "bomb() { bomb | bomb & }; bomb; sleep 3", timeout=20)
            assert "may run 64 at once" in bomb.get("limit", ""), bomb
            # the session's group, as the kernel holds it (cgroup v1, as on this machine kind)
            groups = list(Path(f"/sys/fs/cgroup/pids/{GROUP}").glob(f"uid-{uid}-{server.proc.pid}-*"))
            assert groups and all((g / "pids.max").read_text().strip() == "64" for g in groups), groups
            assert all(int((g / "pids.current").read_text()) <= 64 for g in groups)
            # meanwhile the other session works as ever
            started = time.monotonic()
            assert _bash(b, "echo fine; python3 -c 'print(2 + 2)'")["stdout"].split() == ["fine", "4"]
            assert time.monotonic() - started < 60
            # a reset of the offender ends everything of it
            sid = a_info["session_id"]
            assert httpx.post(f"{server.base_url}/sessions/{sid}/reset", json={}, headers=control,
                              timeout=120).status_code == 200
            # (the killed bomb's zombies may show a moment longer, until init reaps them: they run nothing, and
            # the next episode is in groups of its own, so they take none of its room)
            left = _bash(a, "ps -e -o stat= | grep -vc '^Z'")
            assert left["stdout"].strip().isdigit() and int(left["stdout"]) < 10, left
        finally:
            a.__exit__(None, None, None)
            b.__exit__(None, None, None)


@pytest.mark.x11
def test_a_disk_filler_stops_at_its_sessions_room_and_the_other_session_carries_on():
    """The agent's home and its runtime folder (TMPDIR) each hold the session's disk limit, and no file it writes
    anywhere grows past it (the machine's /tmp included); it is told once; the other session carries on, and a
    reset gives the room back."""
    need(os.geteuid() == 0, "root: the room is tmpfs mounts a root server makes")
    import httpx

    with ServerProcess("--env", "workstation", "--agent-tokens", "--max-sessions", "3", "--limit-disk", "64M",
                       env={"HCI_ENVS_CONTROL_TOKEN": CONTROL}) as server:
        control = {"authorization": f"Bearer {CONTROL}"}
        limits = httpx.get(f"{server.base_url}/metadata", headers=control).json()["limits"]
        assert limits["disk"] == 64 * 1024**2 and limits["disk_enforced_by"].startswith("tmpfs"), limits
        # and what bounds the machine's shared /tmp: on a disk each file, not all together; on a tmpfs, memory
        kind = subprocess.run(["stat", "-f", "-c", "%T", "/tmp"], capture_output=True, text=True).stdout.strip()
        said = "/tmp is a tmpfs" if kind == "tmpfs" else f"/tmp is on {'ext4' if kind == 'ext2/ext3' else kind}"
        assert said in limits["disk_enforced_by"], (kind, limits)
        (a, a_info), (b, _b_info) = _agent(server), _agent(server)
        try:
            free = os.statvfs("/tmp").f_bavail * os.statvfs("/tmp").f_frsize
            home = _bash(a, "echo $HOME")["stdout"].strip()
            for place, room in (("~", "home"), ("$TMPDIR", "runtime folder")):
                filled = _bash(a, f"dd if=/dev/zero of={place}/fill bs=1M count=200 2>&1; ls -l {place}/fill",
                               timeout=60)
                said = filled["stdout"] + filled["stderr"]  # whichever of the two bounds came first
                assert "No space left on device" in said or "File size limit exceeded" in said, (place, filled)
                size = int(filled["stdout"].split("\n")[-2].split()[4])
                assert 32 * 1024**2 < size <= 64 * 1024**2, (place, filled)
                assert f"session's {room}" in filled.get("limit", "") and "is full" in filled["limit"], filled
            assert "is full" not in _bash(a, "true").get("limit", "")  # said once, not with every result
            # a file in the machine's shared /tmp stops at the limit too (the writer is stopped, and says why)
            big = _bash(a, "dd if=/dev/zero of=/tmp/hci-envs-fill-$(id -u) bs=1M count=200 2>&1; "
                           "ls -l /tmp/hci-envs-fill-$(id -u)", timeout=60)
            assert "File size limit exceeded" in big["stdout"] + big["stderr"], big
            assert int(big["stdout"].split("\n")[-2].split()[4]) <= 64 * 1024**2, big
            # the machine's disk did not take the filled rooms
            assert free - os.statvfs("/tmp").f_bavail * os.statvfs("/tmp").f_frsize < 100 * 1024**2
            # meanwhile the other session writes as ever, into its own room
            assert _bash(b, "dd if=/dev/zero of=~/f bs=1M count=10 2>&1 | tail -1; ls ~")["stdout"].split()[-1] == "f"
            sid = a_info["session_id"]
            assert httpx.post(f"{server.base_url}/sessions/{sid}/reset", json={}, headers=control,
                              timeout=120).status_code == 200
            after = _bash(a, "ls ~/fill $TMPDIR/fill /tmp/hci-envs-fill-* 2>&1 | grep -c 'No such'; "
                             "dd if=/dev/zero of=~/again bs=1M count=8 2>&1 | tail -1")
            assert after["stdout"].split()[0] == "3" and "copied" in after["stdout"], after
        finally:
            a.__exit__(None, None, None)
            b.__exit__(None, None, None)
    # nothing of the sessions' rooms is left mounted, nor their folders
    assert home not in Path("/proc/self/mountinfo").read_text() and not Path(home).exists(), home


@pytest.mark.fake
def test_serve_takes_limits_or_none_and_refuses_both():
    from helpers import serve_config

    config = serve_config("--limit-memory", "1G", "--limit-processes", "200", port=1)
    # the disk follows the memory asked for: half of it
    assert config.env_kwargs["limits"] == Limits(processes=200, memory=1024**3, disk=512 * 1024**2)
    assert not serve_config("--no-limits", port=1).env_kwargs["limits"].any
    with pytest.raises(ConfigError, match="contradict"):
        serve_config("--no-limits", "--limit-memory", "1G", port=1)
    assert "limits" not in serve_config(port=1).env_kwargs  # the machine's defaults, made by each environment


@pytest.mark.x11
def test_a_task_asks_for_limits_of_its_own_and_a_plain_reset_has_the_servers_again(x11):
    """A task's start state asks for its episodes' limits over the server's (fewer processes, a smaller room
    here): the kernel holds them, state() says them, and the next plain episode has the server's again."""
    need(os.geteuid() == 0, "root: the limits are control groups and tmpfs mounts a root server makes")
    from hci_envs.traits import WorkstationEnv

    task = {"id": "small", "instruction": "x", "start_state": {"limits": {"processes": 32, "disk": "24M"}},
            "checker": {"type": "file", "path": "notes.txt", "contains": "done"}}

    def rooms(env) -> list[int]:
        out = env.call_tool("bash", {"command": "df -B1 --output=size ~ $TMPDIR | tail -2"}).data["stdout"]
        return [int(n) for n in out.split()]

    with WorkstationEnv(limits={"processes": 200, "disk": "64M"}) as env:
        env.reset(task=task)
        state = env.state.limits
        assert (state["processes"], state["disk"]) == (32, 24 * 1024**2), state
        assert rooms(env) == [24 * 1024**2] * 2
        bomb = env.call_tool("bash", {"command": "for i in $(seq 60); do sleep 5 & done; wait", "timeout": 20})
        assert "may run 32 at once" in bomb.data.get("limit", ""), bomb.data
        env.reset()
        state = env.state.limits
        assert (state["processes"], state["disk"]) == (200, 64 * 1024**2), state
        assert rooms(env) == [64 * 1024**2] * 2
        many = env.call_tool("bash", {"command": "for i in $(seq 60); do sleep 1 & done; wait; echo all",
                                      "timeout": 20})
        assert many.data["stdout"].strip() == "all" and "limit" not in many.data, many.data
        # what the agent leaves in its runtime folder does not reach the next episode, nor take its room: a task
        # with a room smaller than it comes next
        env.call_tool("bash", {"command": "dd if=/dev/zero of=$XDG_RUNTIME_DIR/left bs=1M count=40"})
        env.reset(task=task)
        assert rooms(env) == [24 * 1024**2] * 2
        assert env.call_tool("bash", {"command": "ls $XDG_RUNTIME_DIR"}).data["stdout"].split() == \
            ["Xauthority", "tmp"]
        # a task that lifts the disk limit: the home is a folder of the machine's disk again; then bounded again
        lifted = {**task, "id": "roomy", "start_state": {"limits": {"disk": None}}}
        env.reset(task=lifted)
        assert env.state.limits["disk"] is None
        kind = env.call_tool("bash", {"command": "stat -f -c %T ~"}).data["stdout"].strip()
        assert kind != "tmpfs", kind
        env.reset()
        assert rooms(env) == [64 * 1024**2] * 2 and env.state.limits["disk"] == 64 * 1024**2


@pytest.mark.fake
def test_a_start_state_asks_for_limits_in_the_servers_words_or_is_refused():
    from hci_envs.protocol import StartState
    from pydantic import ValidationError

    asked = StartState.model_validate({"limits": {"memory": "3G", "processes": None}}).limits
    assert Limits(processes=1024, memory=1024**3, disk=512 * 1024**2).over(asked) == \
        Limits(processes=None, memory=3 * 1024**3, disk=1536 * 1024**2)  # the disk follows the memory asked for
    # a disk limit someone set stays when a task asks for more memory; only the derived default follows it
    assert Limits(processes=1024, memory=8 * 1024**3, disk=64 * 1024**2).over(
        StartState.model_validate({"limits": {"memory": "3G"}}).limits).disk == 64 * 1024**2
    for bad in ({"memory": "3X"}, {"disk": "1M"}, {"processes": 2}, {"swap": "1G"}):
        with pytest.raises(ValidationError):
            StartState.model_validate({"limits": bad})


@pytest.mark.fake
def test_the_file_system_of_a_path_is_its_longest_mount():
    from hci_envs.sandbox.space import filesystem_type

    assert filesystem_type(Path("/proc/self/status")) == "proc"
    assert filesystem_type(Path("/dev/shm")) == "tmpfs"
    assert filesystem_type(Path("/sys/fs/cgroup")) in ("cgroup2", "tmpfs")
