"""OpenEnv's own client and validator, from PyPI in their own environment, against our server."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import need
from helpers import HERE, ServerProcess

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
