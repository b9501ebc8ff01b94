"""OpenEnv's own client and validator, from PyPI in their own environment, against our server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import need
from helpers import HERE, ServerProcess

pytestmark = [pytest.mark.fake, pytest.mark.slow]  # OpenEnv's client starts in another environment each time

ROOT = HERE.parent
PEER = HERE / "openenv_peer"


def openenv_python() -> str:
    path = os.environ.get("HCI_ENVS_OPENENV_PYTHON") or str(ROOT / ".venv-openenv" / "bin" / "python")
    need(Path(path).exists(), f"OpenEnv's environment ({path}); `python3 -m hci_envs install --test` makes it")
    return path


def run_peer(script: str, *args: str, timeout: float = 180) -> dict | list:
    out = subprocess.run([openenv_python(), str(PEER / script), *args], capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"{script} failed:\n{out.stdout}\n{out.stderr}"
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def server():
    with ServerProcess("--app", "xterm", "--max-sessions", "6", "--desktop", "fake") as server:
        yield server


def test_generic_env_client_reset_step_state(server):
    seen = run_peer("generic_client.py", server.base_url)
    assert seen["reset"] == {"done": False, "width": 1280, "height": 800, "png": True}
    assert seen["click"]["text"] == "clicked left at (640, 400)"
    assert {"screenshot", "click", "type_text", "key"} <= set(seen["tools"])
    assert not {"reset", "state", "snapshot", "step"} & set(seen["tools"])
    image = seen["call_tool_image"]
    assert image["mime"] == "image/jpeg" and image["jpeg"] and image["bytes"] > 1000
    assert image["structured"]["width"] == 1280
    assert seen["unknown_tool_error"]["error_type"] == "tool_not_found"
    assert seen["state"]["step_count"] == 4 and seen["state"]["episode_id"]
    assert seen["state"]["mcp_url"].startswith(server.base_url + "/sessions/")
    assert "off screen" in seen["bad_action"] and "VALIDATION_ERROR" in seen["bad_action"]


def test_openenv_validate_url_passes(server):
    python = openenv_python()
    cli = str(Path(python).parent / "openenv")
    out = subprocess.run([cli, "validate", "--url", server.base_url, "--json"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, f"openenv validate failed:\n{out.stdout}\n{out.stderr}"
    report = json.loads(out.stdout[out.stdout.index("{"):])
    assert report["passed"] is True and report["mode"] == "simulation"


def test_concurrent_openenv_sessions(server):
    results = run_peer("many_sessions.py", server.base_url, "4")
    assert len({r["session"] for r in results}) == 4
    assert sorted((r["cursor"]["x"], r["cursor"]["y"]) for r in results) == [(10 + i, 20 + i) for i in range(4)]


def test_production_mode_validates_without_reset():
    with ServerProcess("--mode", "production", "--desktop", "fake") as server:
        python = openenv_python()
        cli = str(Path(python).parent / "openenv")
        out = subprocess.run([cli, "validate", "--url", server.base_url, "--json"], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        report = json.loads(out.stdout[out.stdout.index("{"):])
        assert report["mode"] == "production"
        with server.http() as http:
            assert http.post("/reset", json={}).status_code in (404, 405)
            assert http.post("/snapshot", json={"name": "x"}).status_code == 403


@pytest.mark.parametrize("tokens", [False, True])
def test_openenv_mcp_tool_client_works_unchanged(tokens):
    """OpenEnv's MCPToolClient: its HTTP MCP session (openenv/session/create and close), tools on that session,
    reset/step over the WebSocket attached to it, and its MCP WebSocket."""
    args = ["--desktop", "fake", "--max-sessions", "4"]
    env = {"HCI_ENVS_CONTROL_TOKEN": "ctl-secret"} if tokens else None
    with ServerProcess(*args, env=env) as server:
        seen = run_peer("mcp_tool_client.py", server.base_url, *(["ctl-secret"] if tokens else []))
        assert seen["session"] and {"screenshot", "click", "type_text"} <= set(seen["tools"])
        assert seen["screen_size"] == {"width": 1280, "height": 800}
        assert seen["cursor"] == {"x": 11, "y": 22}
        refused = seen["unknown_argument"]["error"]  # refused, not dropped
        assert refused["code"] == "VALIDATION_ERROR" and refused["field"] == "clicks"
        assert seen["reset_done"] is False and seen["state_episode"]
        assert seen["ws_tools"] == len(seen["tools"]) and seen["ws_screen_size"]["width"] == 1280
        assert seen["ws_bad"] == -32700
        with server.http(headers={"authorization": "Bearer ctl-secret"} if tokens else {}) as http:
            kinds = [s["kind"] for s in http.get("/sessions").json()]
        assert kinds == ["default"], kinds  # the client closed its session, the MCP WebSocket its own
        if tokens:  # without the control token, no session is made
            import httpx

            rpc = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
            assert httpx.post(f"{server.base_url}/mcp", json=rpc).status_code == 401


def test_openenv_clients_take_the_control_token_in_the_base_urls_path():
    """What OpenEnv's from_docker_image gets from our Docker provider: a base URL whose path is the control
    token. Its clients, which send no header, work through it; without the token, or with a wrong one,
    nothing is served; the server's access log never shows it."""
    import secrets

    import httpx

    control = secrets.token_urlsafe(24)
    tokens = {"HCI_ENVS_CONTROL_TOKEN": control, "HCI_ENVS_AGENT_TOKEN": secrets.token_urlsafe(24)}
    with ServerProcess("--desktop", "fake", "--max-sessions", "4", "--log-level", "debug", env=tokens) as server:
        url = f"{server.base_url}/t/{control}"
        seen = run_peer("generic_client.py", url)
        assert seen["reset"]["width"] == 1280 and seen["click"]["text"] == "clicked left at (640, 400)"
        seen = run_peer("mcp_tool_client.py", url)  # its HTTP MCP session, its /ws?session_id=, its MCP WebSocket
        assert seen["session"] and seen["screen_size"] == {"width": 1280, "height": 800}
        assert seen["reset_done"] is False and seen["ws_screen_size"]["width"] == 1280
        ws_base = server.base_url.replace("http://", "ws://")
        near_miss = control[:-1] + ("y" if control.endswith("x") else "x")  # one character off, never the token
        for prefix in ("", "/t/" + near_miss, "/t/"):
            assert httpx.post(f"{server.base_url}{prefix}/reset", json={}).status_code == 401, prefix
            assert httpx.get(f"{server.base_url}{prefix}/state").status_code == 401, prefix
            rpc = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
            assert httpx.post(f"{server.base_url}{prefix}/mcp", json=rpc).status_code == 401, prefix
            assert ws_refused(f"{ws_base}{prefix}/ws"), prefix
        # the header still works, and the prefix wins over a wrong header
        assert httpx.get(f"{server.base_url}/state", headers={"authorization": f"Bearer {control}"}).status_code == 200
        assert httpx.get(f"{url}/state", headers={"authorization": "Bearer wrong"}).status_code == 200
        log = "".join(server.output)
        assert '"GET /t/redacted/state' in log and '"GET /state' in log, log[-3000:]
        assert "GET /t/redacted/ws" in log and "Logging error" not in log  # the handshake's debug line too
    assert control not in "".join(server.output)


def ws_refused(url: str) -> bool:
    """Whether a WebSocket to ``url`` is refused: at the handshake (403), or with an UNAUTHORIZED error frame
    and a close, never with an answer."""
    import websockets.sync.client as ws_client

    try:
        with ws_client.connect(url) as ws:
            ws.send(json.dumps({"type": "reset", "data": {}}))
            reply = ws.recv(timeout=10)
    except Exception:  # noqa: BLE001 - refused at the handshake, or closed before the reply was read
        return True
    return "UNAUTHORIZED" in reply


def test_openenv_task_api_lists_splits_and_resets_by_index(server):
    """OpenEnv's task API as its trainers call it: the splits, counts, tasks and ranges of the server's tasks
    (the built-in suite here), and resets into a task by its split and index over OpenEnv's WebSocket client."""
    from hci_envs.tasks import BUILTIN, load_tasks

    catalog = [t.id for t in load_tasks(BUILTIN)]
    seen = run_peer("task_api.py", server.base_url)
    assert {"name": "all", "type": "validation", "num_tasks": len(catalog)} in seen["splits"]
    assert seen["num_all"] == len(catalog) == len(seen["tasks"]) >= 3
    assert [t["id"] for t in seen["tasks"]] == catalog
    assert [t["index"] for t in seen["tasks"]] == list(range(len(catalog)))
    assert seen["task"]["id"] == catalog[1] and seen["task"]["instruction"]
    assert [t["id"] for t in seen["range"]] == catalog[1:3]
    assert not any("checker" in t or "home_files" in t for t in seen["tasks"])  # the answers stay on the server
    status, body = seen["out_of_range"]
    assert status == 400 and "out of range" in body["error"]["message"]
    assert seen["unknown_split"] == 404 and seen["unknown_env"] == 404
    assert seen["reset"] == [catalog[1], catalog[0]]
    assert "out of range" in seen["bad_reset"] and seen["after_bad_reset"] == catalog[2]


def test_our_clients_read_the_same_task_api(server):
    """HciEnvClient and AsyncHciEnvClient over the same routes: splits, counts, a task, listings and ranges, and a
    split that does not exist is a typed 404, as OpenEnv's clients see them."""
    import asyncio

    from hci_envs import AsyncHciEnvClient, HciEnvClient
    from hci_envs.errors import HciEnvsError
    from hci_envs.tasks import BUILTIN, load_tasks

    catalog = [t.id for t in load_tasks(BUILTIN)]
    client = HciEnvClient(server.base_url)
    assert {"name": "all", "type": "validation", "num_tasks": len(catalog)} in client.splits()
    assert client.num_tasks() == client.num_tasks("all") == len(catalog)
    assert client.task("all", 1)["id"] == catalog[1]
    assert [t["id"] for t in client.tasks()] == catalog
    assert [t["id"] for t in client.tasks("all", 1, 3)] == catalog[1:3]
    with pytest.raises(HciEnvsError, match="no-such-split"):
        client.num_tasks("no-such-split")

    async def read() -> tuple:
        other = AsyncHciEnvClient(server.base_url)
        return await other.splits(), await other.num_tasks(), (await other.task("all", 2))["id"], \
            [t["id"] for t in await other.tasks("all", 0, 2)]

    splits, count, task, first_two = asyncio.run(read())
    assert splits == client.splits() and count == len(catalog) and task == catalog[2] and first_two == catalog[:2]
