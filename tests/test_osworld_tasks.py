"""OSWorld's task files in our stack (hci_envs.tasks.osworld): loaded as task specs whose set-up is the task's
config and whose checker is its own evaluator, run by OSWorld's harness against the session's guest API; served
by ``serve --tasks osworld:PATH``: a reset runs the set-up, ``/score`` gives OSWorld's reward."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest
from conftest import need, need_programs
from helpers import McpClient, ServerProcess, free_port

HERE = Path(__file__).resolve().parent
TASKS = HERE / "osworld_tasks"


@pytest.mark.fake
def test_osworld_task_files_load_as_task_specs(tmp_path):
    from hci_envs.errors import TaskFormatError
    from hci_envs.tasks.osworld import HOME_VIEW, load

    specs = {t.id: t for t in load(TASKS)}
    on_disk = {p.stem for p in (TASKS / "examples").rglob("*.json")}
    assert set(specs) == on_disk and {"answer-in-a-file", "shout-the-notes"} <= on_disk
    task = specs["answer-in-a-file"]
    original = json.loads((TASKS / "examples" / "os" / "answer-in-a-file.json").read_text())
    assert task.instruction == original["instruction"] and task.checker.task == original
    assert task.start_state.home_view == HOME_VIEW and task.tags == ["osworld", "os"]
    assert task.setup == [{"osworld": {"config": original["config"]}}]
    assert any(path.endswith("registrymodifications.xcu") for path in task.home_files)

    (tmp_path / "bad.json").write_text(json.dumps({"id": "x", "instruction": "no evaluator"}))
    with pytest.raises(TaskFormatError, match="not an OSWorld task"):
        load(tmp_path)

    # a server's guest API, where there is one, is the one the harness is sent to: none is started beside it
    from hci_envs.env.assembly import EnvironmentHooks
    from hci_envs.tasks.osworld import guest_url

    class Env:
        hooks = EnvironmentHooks(osworld_guest_url="http://127.0.0.1:5000")
        tasks = None  # no environment of its own to start a guest API over

    assert guest_url(Env()) == "http://127.0.0.1:5000"


@pytest.mark.osworld
def test_serve_runs_osworld_tasks_with_osworlds_reward(x11, tmp_path):
    need_programs("xterm")
    need(os.geteuid() == 0, "root: OSWorld's tasks see the home at /home/user")
    python = os.environ.get("HCI_ENVS_OSWORLD_PYTHON") or str(HERE.parent / ".venv-osworld" / "bin" / "python")
    need(Path(python).exists(), f"OSWorld's environment ({python})")
    folder = tmp_path / "tasks" / "examples" / "os"
    folder.mkdir(parents=True)
    shutil.copy(TASKS / "examples" / "os" / "answer-in-a-file.json", folder)
    # an infeasible task, as OSWorld writes them: the agent's answer is to say FAIL
    (folder / "no-such-thing.json").write_text(json.dumps({
        "id": "no-such-thing", "instruction": "Make the terminal print in colour on paper.", "config": [],
        "evaluator": {"func": "infeasible"}}))
    port = free_port()
    server = ServerProcess("--osworld-port", str(port), "--tasks", f"osworld:{tmp_path / 'tasks'}",
                           "--size", "1280x800", "--home-view", "/home/user",
                           env={"HCI_ENVS_OSWORLD_PYTHON": python, "HCI_ENVS_OSWORLD_CACHE": str(tmp_path / "cache")})
    server.start(60)
    try:
        with server.http() as http:
            reset = http.post("/reset", json={"task": "answer-in-a-file"}, timeout=300)
            assert reset.status_code == 200, reset.text
            assert "forty-two" in reset.json()["observation"]["text"]  # the task's instruction
            nothing = http.post("/score", timeout=300).json()
            assert nothing["score"] == 0.0 and not nothing["success"], nothing

            assert http.post("/reset", json={"task": "answer-in-a-file"}, timeout=300).status_code == 200
            with McpClient(f"{server.base_url}/mcp/osworld") as mcp:  # an OSWorld agent over MCP
                mcp.ok("pyautogui", {"code": "pyautogui.typewrite('echo forty-two > ~/Desktop/answer.txt\\n')"})
            solved = http.post("/score", timeout=300).json()
            assert solved["score"] == 1.0 and solved["success"], solved
            assert "check_include_exclude" in " ".join(solved["details"])

            # FAIL is the answer to an infeasible task, and no answer to a feasible one (OSWorld's evaluator)
            with McpClient(f"{server.base_url}/mcp/osworld") as mcp:
                mcp.ok("pyautogui", {"code": "FAIL"})
            assert http.post("/score", timeout=300).json()["score"] == 0.0
            for codes, score in ((["FAIL"], 1.0), ([], 0.0), (["FAIL", "pyautogui.moveTo(5, 5)"], 0.0)):
                assert http.post("/reset", json={"task": "no-such-thing"}, timeout=300).status_code == 200
                with McpClient(f"{server.base_url}/mcp/osworld") as mcp:
                    for code in codes:
                        mcp.ok("pyautogui", {"code": code})
                assert http.post("/score", timeout=300).json()["score"] == score, codes
            assert http.post("/reset", json={"task": "no-such-thing"}, timeout=300).status_code == 200
            with McpClient(f"{server.base_url}/mcp/osworld") as mcp:
                mcp.ok("computer_13", {"action": {"action_type": "FAIL"}})
            assert http.post("/score", timeout=300).json()["score"] == 1.0

            # a session beside the default one (a trainer's, a pool's) runs OSWorld's tasks on a guest API of its
            # own port, which answers only the server's owner and goes away with the session
            made = http.post("/sessions", json={}).json()
            sid = made["session_id"]
            guest = made["osworld_guest_url"]
            assert guest.startswith("http://127.0.0.1:") and not guest.endswith(f":{port}")
            assert httpx.get(f"{guest}/platform", timeout=30).text == "Linux"
            reset = http.post(f"/sessions/{sid}/reset", json={"task": "answer-in-a-file"}, timeout=300)
            assert reset.status_code == 200, reset.text
            with McpClient(made["mcp_profiles"]["osworld"], token=made.get("agent_token")) as mcp:
                mcp.ok("pyautogui", {"code": "pyautogui.typewrite('echo forty-two > ~/Desktop/answer.txt\\n')"})
            assert http.post(f"/sessions/{sid}/score", timeout=300).json()["score"] == 1.0
            assert http.post("/reset", json={"task": "answer-in-a-file"}, timeout=300).status_code == 200
            assert http.post("/score", timeout=300).json()["score"] == 0.0  # the default session's own desktop
            assert http.delete(f"/sessions/{sid}").status_code == 200
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"{guest}/platform", timeout=10)
    finally:
        server.stop()


def _one_task_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "tasks" / "examples" / "os"
    folder.mkdir(parents=True)
    shutil.copy(TASKS / "examples" / "os" / "answer-in-a-file.json", folder)
    return tmp_path / "tasks"


def _harness_python() -> str:
    python = os.environ.get("HCI_ENVS_OSWORLD_PYTHON") or str(HERE.parent / ".venv-osworld" / "bin" / "python")
    need(Path(python).exists(), f"OSWorld's environment ({python})")
    return python


@pytest.mark.osworld
def test_world_runs_osworld_tasks_in_process_on_a_guest_api_of_its_own(x11, tmp_path, monkeypatch):
    """No server: World's environment gets OSWorld's guest API on a loopback port of its own at its first OSWorld
    task, OSWorld's evaluator scores what the agent did with our own actions, and the API goes with the world."""
    need_programs("xterm")
    need(os.geteuid() == 0, "root: OSWorld's tasks see the home at /home/user")
    monkeypatch.setenv("HCI_ENVS_OSWORLD_PYTHON", _harness_python())
    monkeypatch.setenv("HCI_ENVS_OSWORLD_CACHE", str(tmp_path / "cache"))
    from hci_envs.tasks import World
    from hci_envs.tasks.osworld import load

    def solver(obs, context):
        if context.step == 0:
            return {"type": "type_text", "text": "echo forty-two > ~/Desktop/answer.txt\n"}
        return None

    with World(load(_one_task_folder(tmp_path), width=1280, height=800), env_name="desktop") as world:
        nothing = world.run(lambda obs, context: None, progress=False).results[0]
        assert nothing.error is None and nothing.score == 0.0, nothing
        solved = world.run(solver, progress=False).results[0]
        assert solved.error is None and solved.score == 1.0 and solved.success, solved
        assert "check_include_exclude" in " ".join(solved.details)
        guest = world.env.session_info["osworld_guest_url"]
        assert httpx.get(f"{guest}/platform", timeout=30).text == "Linux"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{guest}/platform", timeout=10)
