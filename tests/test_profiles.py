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


DEBUG_ENV = '''from hci_envs import Environment, tool
from hci_envs.traits import HumanComputerInterfaceable


class DebugEnv(HumanComputerInterfaceable, Environment):
    @tool(simulation_only=True, read_only=True)
    def peek_answer(self) -> str:
        """What the checker wants (scoring: simulation only)."""
        return "the answer"
'''


def test_simulation_only_tools_are_absent_in_production_on_every_surface(tmp_path):
    """OpenEnv's tool modes: a tool that reveals scoring is listed and runs in simulation; in production no MCP
    profile, CodeAct namespace, list_tools or /metadata has it, and calling it is TOOL_NOT_FOUND."""
    env_file = tmp_path / "debug_env.py"
    env_file.write_text(DEBUG_ENV)
    spec = f"{env_file}:DebugEnv"
    with AppServer("--env", spec, "--desktop", "fake") as server:
        with server.http() as http:
            assert "peek_answer" in http.get("/metadata").json()["tools"]
        with server.mcp("/mcp") as mcp:
            assert "peek_answer" in {t.name for t in mcp.list_tools()}
            assert "the answer" in str(mcp.call("peek_answer", {}).content)
    with AppServer("--env", spec, "--desktop", "fake", "--mode", "production") as server:
        with server.http() as http:
            listed = http.get("/metadata").json()["tools"]
            assert "peek_answer" not in listed and "click" in listed
        for path in ("/mcp", "/mcp/code"):
            with server.mcp(path) as mcp:
                assert "peek_answer" not in {t.name for t in mcp.list_tools()}
                refused = mcp.call("peek_answer", {})
                assert refused.is_error, refused

    from hci_envs import plugins
    from hci_envs.errors import UnknownToolError

    cls = plugins.load_env_class(spec)
    with cls(desktop="fake", mode="production") as env:
        env.reset()
        assert "peek_answer" not in env.tools() and "peek_answer" not in env.code_tools()
        listed = env.step({"type": "list_tools"})
        assert "click" in str(listed.model_dump()) and "peek_answer" not in str(listed.model_dump())
        with pytest.raises(UnknownToolError):
            env.call_tool("peek_answer", {})
        ran = env.step({"code": "print(peek_answer())"})
        assert "peek_answer" in (ran.text or "") and "not defined" in (ran.text or ""), ran.text
    with cls(desktop="fake") as env:
        env.reset()
        assert env.call_tool("peek_answer", {}).text == "the answer"
