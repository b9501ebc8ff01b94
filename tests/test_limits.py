"""Per-session limits the kernel enforces (hci_envs.sandbox.limits): an agent's fork bomb and memory hog stop at
its own session's limits, with the reason in its next observation, while another session carries on; nothing of
them is left after a reset."""

from __future__ import annotations

import os
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
    ({"processes": True}, "at least 16"), ({"cpu_weight": 0}, "1 to 10000"), ({"disk": "1G"}, "unknown limits: disk"),
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


@pytest.mark.fake
def test_serve_takes_limits_or_none_and_refuses_both():
    from helpers import serve_config

    config = serve_config("--limit-memory", "1G", "--limit-processes", "200", port=1)
    assert config.env_kwargs["limits"] == Limits(processes=200, memory=1024**3)
    assert not serve_config("--no-limits", port=1).env_kwargs["limits"].any
    with pytest.raises(ConfigError, match="contradict"):
        serve_config("--no-limits", "--limit-memory", "1G", port=1)
    assert "limits" not in serve_config(port=1).env_kwargs  # the machine's defaults, made by each environment
