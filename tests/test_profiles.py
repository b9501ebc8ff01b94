"""The MCP endpoint's tool profiles (hci_envs.server.profiles): /metadata, every session's state and serve's
start-up lines list them; each profile's path serves exactly its tools, for the default session and for any
other; an environment without a screen has no Anthropic profile."""

from __future__ import annotations

import pytest
from anthropic.types import COMPUTER_MEMBER_NAME_VALUES
from helpers import AppServer, ServerProcess

pytestmark = pytest.mark.fake


def test_metadata_and_state_list_every_profile_and_each_path_serves_its_tools():
    with AppServer("--env", "workstation", "--desktop", "fake") as server:
        with server.http() as http:
            profiles = http.get("/metadata").json()["mcp_profiles"]
            base = server.base_url
            assert profiles == {"tools": f"{base}/mcp", "code": f"{base}/mcp/code",
                                "anthropic": f"{base}/mcp/anthropic", "osworld": f"{base}/mcp/osworld"}
            assert http.get("/state").json()["mcp_profiles"] == profiles
            sid = http.post("/sessions").json()["session_id"]
            other = http.get(f"/sessions/{sid}/state").json()["mcp_profiles"]
            assert other["anthropic"] == f"{base}/sessions/{sid}/mcp/anthropic"
            assert http.post("/mcp/nope", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).status_code == 404
        with server.mcp("/mcp/anthropic") as mcp:
            assert sorted(t.name for t in mcp.list_tools()) == sorted(COMPUTER_MEMBER_NAME_VALUES)
            clicked = mcp.call("left_click", {"coordinate": [10, 20]})
            assert not clicked.is_error and clicked.structured_content["landed"]["screen"] == "at_action"
        with server.mcp(f"/sessions/{sid}/mcp/anthropic") as mcp:
            assert "zoom" in {t.name for t in mcp.list_tools()}
        with server.mcp("/mcp") as mcp:  # the canonical tools are where they were
            assert "left_click" not in {t.name for t in mcp.list_tools()}


def test_an_environment_without_a_screen_has_no_anthropic_or_osworld_profile(tmp_path):
    env_file = tmp_path / "shell_env.py"
    env_file.write_text("from hci_envs import Environment\nfrom hci_envs.traits import BashAccess\n\n\n"
                        "class ShellEnv(BashAccess, Environment):\n    pass\n")
    with AppServer("--env", f"{env_file}:ShellEnv", "--desktop", "fake") as server, server.http() as http:
        assert set(http.get("/metadata").json()["mcp_profiles"]) == {"tools", "code"}


def test_serve_prints_every_profile():
    with ServerProcess("--env", "workstation", "--desktop", "fake") as server:
        printed = "".join(server.output)
    assert f"MCP (Anthropic toolset): {server.base_url}/mcp/anthropic" in " ".join(printed.split())
    assert f"{server.base_url}/mcp/code" in printed
    assert f"MCP (OSWorld actions): {server.base_url}/mcp/osworld" in " ".join(printed.split())
