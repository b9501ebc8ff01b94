"""The agent-loop examples run as shipped: examples/claude_computer_use.py on the official ``anthropic`` SDK's tool
runner and examples/openai_computer_use.py on the official ``openai`` SDK's Responses API drive real hci-envs
sessions through a task, against local stand-ins of the two model services (tests/model_stand_ins.py, the only
fake here: they replay scripted model turns and record every request the SDK sent).

Each scripted episode has several actions in a turn, one failing in the middle of it, a drag, a key chord and
Unicode text (and a zoom for Claude). Every request the SDK sent is checked: the tool's declaration as it is
exactly, each answer matched to its call's id, the screenshots there at the size the model was told, and the
answers of what did not run after the failure. The fake desktop's tests check the loops and the wire fast; on
mousepad the effects are checked where they land: the typed text in the saved file, the drag's selection
replaced by it, a click on the bare desktop reported as missing (its step's ``landed``).
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from anthropic.lib.tools._toolsets._runnable import HALT_TEXT
from conftest import need_programs
from helpers import ServerProcess
from model_stand_ins import MessagesStandIn, ResponsesStandIn
from PIL import Image

from hci_envs import HciEnvClient
from hci_envs.adapters.anthropic_toolset import fit_scale, from_member, toolset_param
from hci_envs.adapters.openai_computer import computer_tool

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))  # the examples import agent_cli from beside them, as when they are run

import claude_computer_use  # noqa: E402
import openai_computer_use  # noqa: E402

#: A task the fake desktop can pass: its checker reads the pixel a click on the target paints red. The screen is
#: larger than Claude's image budget, so Claude works in scaled screenshots and its clicks are mapped back.
TARGET = {"id": "click-target", "instruction": "Click the centre of the screen.",
          "start_state": {"width": 1920, "height": 1200, "apps": [{"command": ["app"]}]},
          "checker": {"type": "pixel", "x": 960, "y": 600, "color": [255, 0, 0]}, "max_steps": 30}
#: Claude's screenshots of that screen: 1920 x 1200 at the largest scale within 1568 pixels and 1.15 megapixels.
SCALE = fit_scale(1920, 1200)
MODEL_SCREEN = (1356, 848)
TYPED = "DONE: héllo wörld ✓ 你好"
#: The suite's editor world (edit-replace's) with a Unicode answer; mousepad shows notes.txt's first line at y 203.
EDITOR = {"id": "edit-unicode", "instruction": "In the text editor, replace the first line of notes.txt with "
          f"'{TYPED}' and save it.",
          "start_state": {"apps": [{"command": "mousepad {home}/notes.txt", "name": "editor"}]},
          "home_files": {"notes.txt": "TODO: write report\nTODO: call Alice\n"},
          "checker": {"type": "file", "path": "notes.txt", "equals": f"{TYPED}\nTODO: call Alice\n"},
          "max_steps": 30}
BARE_DESKTOP = (100, 700)  # below and left of mousepad's window, which openbox centres on the 1280 x 800 screen
LINE_ONE = ((323, 203), (800, 203))  # from the start of the first line to past its end
SAFETY_CHECK = {"id": "sc_1", "code": "malicious_instructions", "message": "The screen asks to send files away."}


class RecordingClient(HciEnvClient):
    """The session as the loops use it, keeping each step's actions and observation: what ran, and where it
    landed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps: list[tuple[Any, Any]] = []

    def step(self, action: Any) -> Any:
        result = super().step(action)
        self.steps.append((action, result.observation))
        return result

    def ran(self) -> list[list[str]]:
        """The action types of each step, in order."""
        return [[a["type"] for a in (action if isinstance(action, list) else [action])] for action, _ in self.steps]


def image_size(data: str) -> tuple[int, int]:
    return Image.open(io.BytesIO(base64.b64decode(data))).size


# -- Claude: the script and what each call must be answered with ------------------------------------------------
class ImageOf:
    """An expected answer: one image, of this size."""

    def __init__(self, width: int, height: int) -> None:
        self.size = (width, height)


FAILED = "failed"  # an answer that is the call's error
#: A click on the bare desktop: acknowledged, and the model told it did not change the screen where it acted
MISSED = ("Clicked.", ("Nothing changed on the screen.", "The screen changed, but not where this acted."))
NOT_RUN = HALT_TEXT["computer"]  # the SDK runner's answer to a call after a failure: the API's own words


def use(name: str, answer: Any, **input_: Any) -> tuple[dict[str, Any], Any]:
    return {"type": "tool_use", "name": name, "input": input_, "toolset_name": "computer"}, answer


def said(text: str) -> tuple[dict[str, Any], None]:
    return {"type": "text", "text": text}, None


def claude_script(*turns: list[tuple[dict[str, Any], Any]]) -> tuple[list[list[dict[str, Any]]], list[list[Any]]]:
    """The stand-in's turns, and each turn's expected answers, one per tool call."""
    return ([[block for block, _ in turn] for turn in turns],
            [[answer for block, answer in turn if block["type"] == "tool_use"] for turn in turns])


def check_claude_requests(api: MessagesStandIn, answers: list[list[Any]], instruction: str) -> None:
    """Every request the SDK's runner sent: the toolset declared as one bare entry on the thread's first turn,
    then each turn continuing the last reply with exactly one tool_result per tool_use, by id and in order."""
    assert [e.status for e in api.exchanges] == [200] * len(answers) and not api.turns, \
        [(e.status, e.reply) for e in api.exchanges]
    first = api.exchanges[0].body
    assert first["tools"] == [toolset_param()] == [{"type": "computer_toolset_20260801"}]
    assert first["thread"] == {"type": "create"} and first["model"] == "claude-test"
    assert first["messages"] == [{"role": "user", "content": instruction}]
    for previous, exchange, expected in zip(api.exchanges, api.exchanges[1:], answers, strict=False):
        body = exchange.body
        assert body["thread"] == {"type": "continue", "previous_message_id": previous.reply["id"]}
        assert "tools" not in body  # a thread keeps the tools it was created with
        calls = [b for b in previous.reply["content"] if b["type"] == "tool_use"]
        [message] = body["messages"]
        assert message["role"] == "user"
        results = message["content"]
        assert [(r["type"], r["tool_use_id"], r["toolset_name"]) for r in results] == [
            ("tool_result", c["id"], "computer") for c in calls]
        for call, result, answer in zip(calls, results, expected, strict=True):
            what = (call["name"], call["input"], result)
            if isinstance(answer, ImageOf):
                [block] = result["content"]
                assert block["type"] == "image" and block["source"]["media_type"] == "image/png", what
                assert image_size(block["source"]["data"]) == answer.size, what
                assert "is_error" not in result
            elif answer is FAILED:
                assert result["is_error"] and "off screen" in result["content"][0]["text"], what
            elif answer == NOT_RUN:
                assert result["is_error"] and result["content"] == NOT_RUN, what
            elif answer is MISSED:
                acknowledged, note = result["content"]
                assert acknowledged["text"] == MISSED[0] and note["text"] in MISSED[1] and "is_error" not in result, what
            else:
                assert result["content"] == [{"type": "text", "text": answer}] and "is_error" not in result, what


# -- OpenAI: the script and what each call's output must be --------------------------------------------------
def computer_call(*actions: dict[str, Any], checks: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {"type": "computer_call", "actions": list(actions), "pending_safety_checks": list(checks)}


def message(text: str) -> dict[str, Any]:
    return {"type": "message", "content": [text]}


def click(x: int, y: int) -> dict[str, Any]:
    return {"type": "click", "button": "left", "x": x, "y": y}


def check_openai_requests(api: ResponsesStandIn, instruction: str, screen: tuple[int, int],
                          failures: dict[int, str]) -> None:
    """Every request the SDK sent: the bare computer tool each time; the instruction, then each turn continuing
    the last response by id with one computer_call_output per computer_call, by call_id, holding the screen after
    its batch and acknowledging its safety checks; ``failures``: for a request (by index), the message that must
    follow the output (which is then ``incomplete``)."""
    assert all(e.status == 200 for e in api.exchanges) and not api.turns, [(e.status, e.reply) for e in api.exchanges]
    for exchange in api.exchanges:
        assert exchange.body["tools"] == [computer_tool()] == [{"type": "computer"}]
        assert exchange.body["model"] == "gpt-test"
    assert api.exchanges[0].body["input"] == instruction and "previous_response_id" not in api.exchanges[0].body
    for index, (previous, exchange) in enumerate(zip(api.exchanges, api.exchanges[1:], strict=False), start=1):
        body = exchange.body
        assert body["previous_response_id"] == previous.reply["id"]
        calls = [item for item in previous.reply["output"] if item["type"] == "computer_call"]
        outputs = [item for item in body["input"] if item["type"] == "computer_call_output"]
        assert [o["call_id"] for o in outputs] == [c["call_id"] for c in calls]
        for call, output in zip(calls, outputs, strict=True):
            assert output["acknowledged_safety_checks"] == call["pending_safety_checks"]
            assert output["output"]["type"] == "computer_screenshot"
            header, data = output["output"]["image_url"].split(",", 1)
            assert header == "data:image/png;base64" and image_size(data) == screen
            assert output.get("status") == ("incomplete" if index in failures else None)
        notes = [item for item in body["input"] if item["type"] == "message"]
        if index in failures:
            [note] = notes
            assert note["role"] == "user" and note["content"][0]["type"] == "input_text"
            assert failures[index] in note["content"][0]["text"], note
        else:
            assert notes == []


# -- the fake desktop: the loops and the wire ---------------------------------------------------------------------
@pytest.mark.fake
def test_claude_loop_runs_a_task_through_the_sdks_tool_runner(fake_server):
    x, y = round(960 * SCALE), round(600 * SCALE)  # the target, in the pixels of Claude's screenshots
    zoom = [600, 400, 760, 450]
    region = from_member("zoom", {"region": zoom}, scale=SCALE)[0]["region"]  # at the screen's full resolution
    turns, answers = claude_script(
        [said("I'll look at the screen first."), use("screenshot", ImageOf(*MODEL_SCREEN))],
        [use("left_click", "Clicked.", coordinate=[x, y]),
         use("zoom", ImageOf(region["width"], region["height"]), region=zoom),
         use("left_click_drag", "Dragged.", start_coordinate=[10, 700], coordinate=[300, 700], text="shift"),
         use("key", "Pressed ctrl+shift+t.", text="ctrl+shift+t"),
         use("type", "Typed.", text=TYPED),
         use("left_click", FAILED, coordinate=[MODEL_SCREEN[0] + 40, 10]),  # off the screenshot: refused
         use("key", NOT_RUN, text="ctrl+s"),
         use("screenshot", NOT_RUN)],
        [said("Done.")])
    with MessagesStandIn(turns) as api, RecordingClient(fake_server.base_url) as env:
        client = anthropic.Anthropic(api_key="sk-ant-test", base_url=api.base_url)
        outcome = claude_computer_use.run_task(client, env, TARGET, model="claude-test", say=print)
    assert outcome.score["score"] == 1.0 and outcome.turns == 3 and outcome.stopped is None, outcome
    check_claude_requests(api, answers, TARGET["instruction"])
    # one step per call, up to the one that failed; nothing of what the runner answered "not executed" ran
    assert env.ran() == [["screenshot"], ["click"], ["screenshot"], ["drag"], ["key"], ["type_text"], ["click"]]
    (drag, _), (chord, _), (typed, _) = env.steps[3:6]
    assert drag[0]["modifiers"] == ["shift"] and chord[0]["keys"] == "ctrl+shift+t"
    assert typed[0]["text"] == TYPED
    assert env.steps[6][1].outcomes[0]["status"] == "error"


@pytest.mark.fake
def test_openai_loop_runs_a_task_with_batches_and_acknowledged_checks(fake_server):
    turns = [
        [message("I'll look at the screen first."), computer_call({"type": "screenshot"})],
        [computer_call(click(960, 600), {"type": "drag", "path": [{"x": 10, "y": 700}, {"x": 300, "y": 700}]},
                       {"type": "keypress", "keys": ["CTRL", "SHIFT", "T"]}, {"type": "type", "text": TYPED},
                       click(3000, 10), {"type": "keypress", "keys": ["CTRL", "S"]}, {"type": "screenshot"},
                       checks=(SAFETY_CHECK,))],
        [message("Done.")]]
    with ResponsesStandIn(turns) as api, RecordingClient(fake_server.base_url) as env:
        client = openai.OpenAI(api_key="sk-test", base_url=f"{api.base_url}/v1")
        outcome = openai_computer_use.run_task(client, env, TARGET, model="gpt-test", acknowledge=True, say=print)
    assert outcome.score["score"] == 1.0 and outcome.turns == 3 and outcome.stopped is None, outcome
    check_openai_requests(api, TARGET["instruction"], (1920, 1200),
                          {2: "Action 5 of 7 (click) of computer_call call_0002 failed: VALIDATION_ERROR"})
    assert "off screen" in api.exchanges[2].body["input"][1]["content"][0]["text"]
    assert "actions 6-7 did not run" in api.exchanges[2].body["input"][1]["content"][0]["text"]
    # each call's batch is one step (its screenshots are the observation's); the batch stops at the failure
    assert env.ran() == [["screenshot"], ["click", "drag", "key", "type_text", "click", "key"]]
    batch, observation = env.steps[1]
    assert [o["status"] for o in observation.outcomes] == ["ok"] * 4 + ["error", "not_run"]
    assert batch[2]["keys"] == "ctrl+shift+T" and batch[3]["text"] == TYPED  # the chord, as the adapter names it


@pytest.mark.fake
def test_openai_loop_runs_nothing_of_a_call_whose_safety_checks_are_not_acknowledged(fake_server):
    turns = [[computer_call({"type": "screenshot"})], [computer_call(click(960, 600), checks=(SAFETY_CHECK,))]]
    lines: list[str] = []
    with ResponsesStandIn(turns) as api, RecordingClient(fake_server.base_url) as env:
        client = openai.OpenAI(api_key="sk-test", base_url=f"{api.base_url}/v1")
        outcome = openai_computer_use.run_task(client, env, TARGET, model="gpt-test", say=lines.append)
    assert outcome.score["score"] == 0.0 and "safety checks not acknowledged" in outcome.stopped, outcome
    assert f"safety check malicious_instructions: {SAFETY_CHECK['message']}" in lines and "  not acknowledged" in lines
    assert env.ran() == [["screenshot"]] and len(api.exchanges) == 2  # the click never ran, nothing was answered


@pytest.mark.fake
@pytest.mark.parametrize("sdk", ["claude", "openai"])
def test_the_step_limit_ends_a_loop_whose_model_would_go_on(fake_server, sdk):
    with RecordingClient(fake_server.base_url) as env:
        if sdk == "claude":
            with MessagesStandIn([[use("left_click", None, coordinate=[5, 5])[0]]] * 3) as api:
                client = anthropic.Anthropic(api_key="sk-ant-test", base_url=api.base_url)
                outcome = claude_computer_use.run_task(client, env, TARGET, model="m", max_steps=2, say=print)
        else:
            with ResponsesStandIn([[computer_call(click(5, 5))]] * 3) as api:
                client = openai.OpenAI(api_key="sk-test", base_url=f"{api.base_url}/v1")
                outcome = openai_computer_use.run_task(client, env, TARGET, model="m", max_steps=2, say=print)
    assert "step limit" in outcome.stopped and outcome.turns == 2, outcome
    assert len(api.exchanges) == 2 and len(api.turns) == 1  # two requests, as many as allowed
    assert env.ran() == [["click"], ["click"]]


# -- the command line, as a user runs it --------------------------------------------------------------------------
def run_example(name: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                          timeout=180, env={**os.environ, **env})


@pytest.fixture
def target_suite(tmp_path: Path) -> Path:
    """A task file holding TARGET, private to the server's user as task files must be."""
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(TARGET) + "\n")
    path.chmod(0o600)
    return path


@pytest.mark.fake
@pytest.mark.slow  # a Python process per run, which starts a server of its own
def test_the_claude_example_runs_from_the_command_line(target_suite):
    turns, _ = claude_script([use("left_click", "Clicked.", coordinate=[678, 424])], [said("Done.")])
    with MessagesStandIn(turns) as api:
        out = run_example("claude_computer_use.py", "--model", "claude-test", "--task", "click-target", "--tasks",
                          str(target_suite), env={"ANTHROPIC_BASE_URL": api.base_url, "ANTHROPIC_API_KEY": "sk-ant-x",
                                                  "HCI_ENVS_DESKTOP": "fake"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "reward: 1.0 (task click-target, success; pass: pixel (960, 600) is (255, 0, 0)) after 2 model turns" \
        in out.stdout and "claude: Done." in out.stdout, out.stdout
    assert [e.headers["authorization"] for e in api.exchanges] == ["Bearer sk-ant-x"] * 2  # the SDK read the key


@pytest.mark.fake
@pytest.mark.slow  # a Python process per run, which starts a server of its own
def test_the_openai_example_acknowledges_safety_checks_only_with_the_flag(target_suite):
    turns = [[computer_call(click(960, 600), checks=(SAFETY_CHECK,))], [message("Done.")]]
    for flag, code, reward in [((), 1, "0.0"), (("--acknowledge-safety-checks",), 0, "1.0")]:
        with ResponsesStandIn(turns) as api:
            out = run_example("openai_computer_use.py", "--model", "gpt-test", "--task", "click-target", "--tasks",
                              str(target_suite), *flag, env={"OPENAI_BASE_URL": f"{api.base_url}/v1",
                                                             "OPENAI_API_KEY": "sk-x", "HCI_ENVS_DESKTOP": "fake"})
        assert out.returncode == code, out.stdout + out.stderr
        assert f"safety check malicious_instructions: {SAFETY_CHECK['message']}" in out.stdout, out.stdout
        assert f"reward: {reward} (task click-target" in out.stdout, out.stdout
        assert len(api.exchanges) == 2 - len(api.turns) and all(e.headers["authorization"] == "Bearer sk-x"
                                                                for e in api.exchanges)
        if not flag:
            assert "stopped: computer_call call_0001: safety checks not acknowledged" in out.stdout, out.stdout
    check_openai_requests(api, TARGET["instruction"], (1920, 1200), {})  # the run with the flag


@pytest.mark.fake
@pytest.mark.parametrize("example,variables,missing", [
    (claude_computer_use, ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE", "ANTHROPIC_CONFIG_DIR",
                           "ANTHROPIC_IDENTITY_TOKEN", "ANTHROPIC_IDENTITY_TOKEN_FILE", "ANTHROPIC_MODEL"),
     "no Anthropic credentials"),
    (openai_computer_use, ("OPENAI_API_KEY", "OPENAI_ADMIN_KEY", "OPENAI_MODEL"), "Missing credentials"),
], ids=["claude", "openai"])
def test_the_examples_say_what_is_missing_before_starting_anything(example, variables, missing, monkeypatch,
                                                                   capsys, tmp_path):
    for name in variables:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # and no profile on disk (~/.config/anthropic) to find them in
    with pytest.raises(SystemExit) as exited:
        example.main([])
    assert exited.value.code == 2 and "name the model: --model MODEL, or set" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        example.main(["--model", "m"])
    assert exited.value.code == 2 and missing in capsys.readouterr().err


@pytest.mark.fake
@pytest.mark.parametrize("example", ["claude_computer_use.py", "openai_computer_use.py"])
def test_the_readme_shows_the_first_ten_lines_of_each_loop(example):
    lines = (EXAMPLES / example).read_text(encoding="utf-8").splitlines()
    start = lines.index(next(line for line in lines if line.startswith("def run_task(")))
    readme = (EXAMPLES.parent / "README.md").read_text(encoding="utf-8")
    assert "```python\n" + "\n".join(lines[start:start + 10]) + "\n```" in readme


# -- mousepad: the effects where they land ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def editor_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``hci-envs serve`` on real desktops with EDITOR in its suite (each test's session resets into it)."""
    need_programs("Xvfb", "openbox", "mousepad")
    path = tmp_path_factory.mktemp("suite") / "tasks.jsonl"
    path.write_text(json.dumps(EDITOR) + "\n")
    path.chmod(0o600)
    with ServerProcess("--env", "workstation", "--tasks", str(path), "--no-vnc") as server:
        yield server


def check_editor_episode(env: RecordingClient, outcome: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The text typed arrived and replaced what the drag selected, and was saved; the click on the bare desktop
    is reported as missing (the screen did not change where it clicked), the drag as landing where it acted.
    Returns their ``landed``."""
    assert outcome.score["score"] == 1.0 and outcome.stopped is None, outcome
    saved = env.step({"tool": "bash", "arguments": {"command": "cat notes.txt"}}).observation.data["stdout"]
    assert saved == f"{TYPED}\nTODO: call Alice\n"
    landed = [(a["type"], o["data"]["landed"]) for action, obs in env.steps if isinstance(action, list)
              for a, o in zip(action, obs.outcomes or [], strict=False) if (o.get("data") or {}).get("landed")]
    (missed, where), (drag, selected) = landed[:2]  # the click on the bare desktop, then the drag on line one
    assert (missed, drag) == ("click", "drag"), landed
    assert where["screen"] in ("elsewhere", "nothing") and selected["screen"] == "at_action", landed
    return where, selected


@pytest.mark.apps
def test_claude_loop_edits_a_file_in_mousepad(editor_server):
    (start, end), (x, y) = LINE_ONE, BARE_DESKTOP
    turns, answers = claude_script(
        [use("screenshot", ImageOf(1280, 800))],  # 1280 x 800 fits Claude's budget: no scaling
        [use("left_click", MISSED, coordinate=[x, y]),
         use("zoom", ImageOf(320, 50), region=[320, 190, 640, 240]),
         use("left_click_drag", "Dragged.", start_coordinate=list(start), coordinate=list(end)),
         use("type", "Typed.", text=TYPED),
         use("left_click", FAILED, coordinate=[2000, 10]),
         use("key", NOT_RUN, text="ctrl+s")],
        [use("key", "Pressed ctrl+s.", text="ctrl+s"), use("screenshot", ImageOf(1280, 800))],
        [said("The first line is replaced and the file saved.")])
    with MessagesStandIn(turns) as api, RecordingClient(editor_server.base_url) as env:
        client = anthropic.Anthropic(api_key="sk-ant-test", base_url=api.base_url)
        outcome = claude_computer_use.run_task(client, env, "edit-unicode", model="claude-test", say=print)
        check_claude_requests(api, answers, EDITOR["instruction"])
        assert env.ran() == [["screenshot"], ["click"], ["screenshot"], ["drag"], ["type_text"], ["click"], ["key"],
                             ["screenshot"]]
        missed, selected = check_editor_episode(env, outcome)
    # a step of its own: the focus left mousepad with the click on the desktop, and came back with the drag
    assert missed["focused"] is False and selected["focused"] is True, (missed, selected)


@pytest.mark.apps
def test_openai_loop_edits_a_file_in_mousepad(editor_server):
    (start, end), (x, y) = LINE_ONE, BARE_DESKTOP
    drag = {"type": "drag", "path": [{"x": start[0], "y": start[1]}, {"x": end[0], "y": end[1]}]}
    turns = [
        [computer_call({"type": "screenshot"})],
        [computer_call(click(x, y), drag, {"type": "type", "text": TYPED}, click(2000, 10),
                       {"type": "keypress", "keys": ["CTRL", "S"]})],
        [computer_call({"type": "keypress", "keys": ["CTRL", "S"]})],
        [message("The first line is replaced and the file saved.")]]
    with ResponsesStandIn(turns) as api, RecordingClient(editor_server.base_url) as env:
        client = openai.OpenAI(api_key="sk-test", base_url=f"{api.base_url}/v1")
        outcome = openai_computer_use.run_task(client, env, "edit-unicode", model="gpt-test", say=print)
        check_openai_requests(api, EDITOR["instruction"], (1280, 800),
                              {2: "Action 4 of 5 (click) of computer_call call_0002 failed"})
        assert env.ran() == [["screenshot"], ["click", "drag", "type_text", "click", "key"], ["key"]]
        assert [o["status"] for o in env.steps[1][1].outcomes] == ["ok", "ok", "ok", "error", "not_run"]
        check_editor_episode(env, outcome)
