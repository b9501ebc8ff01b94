"""Environments composed from traits; tool calling and CodeAct over the same registry; discovery."""

from __future__ import annotations

import time

import pytest
from helpers import AppServer, McpClient, Probe, ServerProcess, text_of

from hci_envs import Environment, ToolOutput, Trait, tool
from hci_envs.errors import InvalidActionError
from hci_envs.tools import DuplicateToolError
from hci_envs.traits import BashAccess, WorkstationEnv

CUSTOM = "tests/envs/custom_env.py:CustomEnv"


@pytest.mark.x11
def test_custom_environment_is_served_and_driven_over_mcp(x11):
    with ServerProcess("--env", CUSTOM) as server:
        with McpClient(f"{server.base_url}/mcp") as mcp:
            names = {t.name for t in mcp.list_tools()}
            assert {"click", "bash", "python", "write_note", "find_tools", "browse_tools"} <= names
            assert "execute_code" not in names and not {"reset", "state", "snapshot"} & names
            assert mcp.ok("screen_size").structured_content == {"width": 1024, "height": 768}
            assert mcp.ok("bash", {"command": "echo $((6*7))"}).structured_content["stdout"] == "42\n"
            mcp.ok("python", {"code": "x = 'kept'"})
            assert mcp.ok("python", {"code": "print(x)"}).structured_content["stdout"] == "kept\n"
            assert mcp.ok("write_note", {"text": "first"}).structured_content == {"lines": 1}
            assert mcp.ok("bash", {"command": "cat notes.txt"}).structured_content["stdout"] == "first\n"
            found = mcp.ok("find_tools", {"query": "shell command", "detail": "names"}).structured_content
            assert found["tools"][0] == "bash"
        with McpClient(f"{server.base_url}/mcp/code") as code:
            assert {t.name for t in code.list_tools()} == {"execute_code", "find_tools", "browse_tools"}
            result = code.ok("execute_code", {"code": "write_note(text='from code')\nprint(bash(command='wc -l < notes.txt')['stdout'].strip())"})
            assert text_of(result).strip().startswith("2")


@pytest.mark.x11
def test_codeact_and_tool_calls_reach_the_same_state(x11, tmp_path):
    probe = Probe(tmp_path)
    with WorkstationEnv(start_state={"apps": [probe.app()]}) as env:
        env.reset()
        probe.wait_for(lambda s: s.get("ready"))
        x, y = probe.center("button")
        code = (
            "for _ in range(5):\n"
            f"    click(x={x}, y={y})\n"
            "out = bash(command='seq 1 100000', max_output=4_000_000)\n"
            "lines = out['stdout'].splitlines()\n"
            "print(len(lines))\n"
            "print([l for l in lines if l.startswith('4242')])\n"
        )
        obs = env.step({"code": code})
        assert obs.error is None, obs.text
        assert obs.text.splitlines() == ["100000", "['4242', '42420', '42421', '42422', '42423', '42424', "
                                         "'42425', '42426', '42427', '42428', '42429']"]
        assert obs.data["tool_calls"] == 6
        assert len(obs.text) < 200, "the 100,000 lines must not come back, only the filtered ones"
        coded = probe.wait_for(lambda s: s["clicks"] == 5, what="five clicks from the code")
        env.reset()
        probe.wait_for(lambda s: s.get("ready") and s["clicks"] == 0)
        for _ in range(5):
            env.step({"tool": "click", "arguments": {"x": x, "y": y}})
        called = probe.wait_for(lambda s: s["clicks"] == 5, what="five clicks from tool calls")
        assert {k: called[k] for k in ("clicks", "entry", "text_selection")} == \
            {k: coded[k] for k in ("clicks", "entry", "text_selection")}
        shot = env.step({"code": "s = screenshot(format='png')\nprint(s['width'], s['height'])"})
        assert shot.text.strip() == "1280 800" and len(shot.images) == 1


@pytest.mark.fake
@pytest.mark.parametrize(
    "code,message",
    [
        ("import os", "import statements are not allowed"),
        ("from os import path", "import statements are not allowed"),
        ("m = __import__('os')", "'__import__' is not available"),
        ("print(().__class__)", "attribute '__class__' is not available"),
        ("getattr(print, '__self__')", "access to '__self__' is not allowed"),
        ("reset()", "NameError: name 'reset' is not defined"),
        ("state", "NameError: name 'state' is not defined"),
        ("snapshot('x')", "NameError: name 'snapshot' is not defined"),
        ("execute_code(code='1')", "NameError: name 'execute_code' is not defined"),
        ("while True:\n    n = 1", "timed out after 1s"),
        ("while True:\n    print('spam' * 100)", "timed out after 1s"),
        ("x = ", "syntax error"),
        ("raise SystemExit(3)", "SystemExit"),
        ("click(x=99999, y=1)", "is off screen; the screen is"),  # as the click tool says it
    ],
)
def test_bad_code_gets_a_clear_error_and_the_session_carries_on(workstation, code, message):
    env = workstation
    try:
        obs = env.step({"code": code, "timeout": 1})
    except InvalidActionError as exc:
        assert message in str(exc)
    else:
        assert obs.error is not None and message in obs.text, obs.text
        if "spam" in code:
            assert "over the output limit" in obs.text and len(obs.text) < 70_000
    assert env.step({"code": "print('alive')"}).text.strip() == "alive"


@pytest.fixture(scope="module")
def workstation():
    env = WorkstationEnv(desktop="fake")
    env.reset()
    yield env
    env.close()


@pytest.mark.fake
def test_bash_and_python_faults_leave_the_session_usable(workstation):
    env = workstation
    endless = env.call_tool("bash", {"command": "yes spam", "max_output": 10_000, "timeout": 20})
    assert endless.is_error and "kept printing" in endless.text and len(endless.data["stdout"]) == 10_000
    slow = env.call_tool("bash", {"command": "sleep 60", "timeout": 1})
    assert slow.data["timed_out"]
    assert env.call_tool("bash", {"command": "echo ok"}).data["stdout"] == "ok\n"
    looping = env.call_tool("python", {"code": "while True:\n    pass", "timeout": 1})
    assert looping.data["timed_out"]
    assert env.call_tool("python", {"code": "print(1 + 1)"}).data["stdout"] == "2\n"


@pytest.mark.fake
def test_duplicate_tool_names_fail_at_class_definition():
    class Shell(Trait):
        @tool()
        def bash(self, command: str) -> ToolOutput:
            """Another bash."""
            return ToolOutput(text=command)

    with pytest.raises(DuplicateToolError, match="traits BashAccess and Shell both offer a tool named 'bash'"):
        type("Clash", (BashAccess, Shell, Environment), {})

    class Override(BashAccess):  # overriding a trait's own tool is allowed
        @tool()
        def bash(self, command: str) -> ToolOutput:
            """A stricter bash."""
            return ToolOutput(text="no")

    assert type("Fine", (Override, Environment), {}).tool_specs()["bash"].description == "A stricter bash."

    with pytest.raises(TypeError, match="reserved for the control plane"):
        class Sneaky(Trait):
            @tool()
            def reset(self) -> ToolOutput:
                """Let the model reset."""
                return ToolOutput()


@pytest.mark.fake
def test_discovery_from_the_registry(workstation):
    env = workstation
    names = env.call_tool("find_tools", {"query": "type text keyboard", "detail": "names"}).data["tools"]
    assert names[0] in ("type_text", "key") and "type_text" in names[:3]
    schemas = env.call_tool("find_tools", {"query": "drag", "detail": "schemas", "limit": 1}).data["tools"]
    assert schemas[0]["name"] == "drag" and "path" in schemas[0]["input_schema"]["properties"]
    root = env.call_tool("browse_tools", {}).data["entries"]
    assert {"HumanComputerInterfaceable/", "BashAccess/", "PythonAccess/", "Environment/"} == set(root)
    files = env.call_tool("browse_tools", {"path": "BashAccess"}).data["entries"]
    assert files == ["bash.py"]
    stub = env.call_tool("browse_tools", {"path": "HumanComputerInterfaceable/click.py"}).text
    assert stub.startswith("def click(*, x: int | None = None") and "double" in stub
    with pytest.raises(InvalidActionError, match="no folder"):
        env.call_tool("browse_tools", {"path": "Nope/x.py"})


@pytest.mark.fake
def test_session_mode_picks_the_advertised_interface():
    with AppServer("--env", "workstation", "--action-mode", "code", "--desktop", "fake") as server:
        with server.http() as http:
            state = http.get("/state").json()
            assert state["action_mode"] == "code" and state["mcp_url"].endswith("/mcp/code")
            other = http.post("/sessions", json={"mode": "tools"}).json()
            assert other["mcp_url"].endswith(f"/sessions/{other['session_id']}/mcp")
        with server.mcp(state["mcp_url"]) as mcp:
            out = mcp.ok("execute_code", {"code": "print(screen_size())"})
            assert "1280" in text_of(out)




@pytest.mark.fake
def test_a_worker_that_died_between_calls_is_announced_in_the_next_result(workstation):
    env = workstation
    started = env.call_tool("python", {"code": "import os, threading\nx = 41\n"
                                               "threading.Timer(0.3, lambda: os._exit(7)).start()"})
    assert not started.is_error and started.data["notice"] is None
    time.sleep(1.0)
    after = env.call_tool("python", {"code": "print(x)"})
    assert after.data["restarted"] and "exited with status 7" in after.data["notice"]
    assert after.text.startswith("[notice] the interpreter exited with status 7") and "NameError" in after.text
    assert env.call_tool("python", {"code": "print(1)"}).data["notice"] is None  # said once

    env.step({"code": "kept = 5"})
    env.call_tool("bash", {"command": "pkill -KILL -f -- '--codeact' || true"})
    time.sleep(0.5)
    coded = env.step({"code": "print(kept)"})
    assert "[notice] the interpreter was killed by signal 9" in coded.text and "NameError" in coded.text
    assert env.step({"code": "print(screen_size()['width'])"}).text.strip() == "1280"  # tools are back


@pytest.mark.fake
def test_a_quick_command_reports_its_own_exit_status(workstation):
    """A command's pipes close a moment before it exits: its status must be its own, never the SIGTERM of the
    clean-up that follows (which reported -15 for commands that succeeded)."""
    codes = [workstation.call_tool("bash", {"command": f"echo {n}; exit {n % 3}"}).data["exit_code"]
             for n in range(150)]
    assert codes == [n % 3 for n in range(150)]
