"""OpenAI's released computer tool (hci_envs.adapters.openai_computer): every action the SDK declares translates,
a computer_call's batch runs as one step on the fake desktop and stops at the first failure, and what goes back
(the computer_call_output, the message saying a failure) is checked against the SDK's own types."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
from typing import Any, get_args

import pytest
from openai.types.responses import ResponseComputerToolCall
from openai.types.responses.computer_action import ComputerAction
from openai.types.responses.computer_tool_param import ComputerToolParam
from PIL import Image

from hci_envs import HciEnvClient
from hci_envs.adapters import UnsupportedActionError
from hci_envs.adapters.openai import from_openai, to_openai
from hci_envs.adapters.openai_computer import (
    SafetyChecksPending,
    check_with_sdk,
    computer_tool,
    from_computer_action,
    from_computer_call,
    pending_safety_checks,
    run_computer_call,
)
from hci_envs.errors import ConfigError, EnvironmentStateError, InvalidActionError, MissingDependencyError
from hci_envs.traits import DesktopEnv

pytestmark = pytest.mark.fake

SIZE = (640, 400)

#: One example of every action the released tool has, with what it becomes.
RELEASED = {
    "click": ({"type": "click", "button": "right", "x": 10, "y": 20, "keys": ["SHIFT"]},
              [{"type": "click", "x": 10, "y": 20, "button": "right", "modifiers": ["shift"]}]),
    "double_click": ({"type": "double_click", "x": 30, "y": 40, "keys": ["CTRL"]},
                     [{"type": "click", "x": 30, "y": 40, "count": 2, "modifiers": ["ctrl"]}]),
    "drag": ({"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 50, "y": 60}, {"x": 70, "y": 80}], "keys": ["ALT"]},
             [{"type": "drag", "path": [[1, 2], [50, 60], [70, 80]], "modifiers": ["alt"]}]),
    "keypress": ({"type": "keypress", "keys": ["CTRL", "ENTER"]}, [{"type": "key", "keys": "ctrl+enter"}]),
    "move": ({"type": "move", "x": 5, "y": 6, "keys": ["SHIFT", "CTRL"]},
             [{"type": "key_down", "key": "shift"}, {"type": "key_down", "key": "ctrl"},
              {"type": "mouse_move", "x": 5, "y": 6},
              {"type": "key_up", "key": "ctrl"}, {"type": "key_up", "key": "shift"}]),
    "screenshot": ({"type": "screenshot"}, [{"type": "screenshot"}]),
    # scroll distances are pixels, 100 to a wheel click (the preview's convention); y grows downwards
    "scroll": ({"type": "scroll", "x": 100, "y": 120, "scroll_x": -200, "scroll_y": 300, "keys": ["CTRL"]},
               [{"type": "scroll", "x": 100, "y": 120, "dx": -2, "dy": 3, "modifiers": ["ctrl"]}]),
    "type": ({"type": "type", "text": "héllo ✓ 你好"}, [{"type": "type_text", "text": "héllo ✓ 你好"}]),
    "wait": ({"type": "wait"}, [{"type": "wait", "ms": 1000}]),  # the released wait says no duration
}

CHECKS = [{"id": "cu_sc_1", "code": "malicious_instructions",
           "message": "The page asks the agent to send the user's files elsewhere."}]


def sdk_types() -> set[str]:
    """The action types of the installed SDK's ComputerAction union."""
    union = get_args(ComputerAction)[0]
    return {get_args(cls.model_fields["type"].annotation)[0] for cls in get_args(union)}


def call(*actions: dict[str, Any], checks: list[dict[str, Any]] = (), call_id: str = "call_1") -> dict[str, Any]:
    """A computer_call as the API sends it, checked against the SDK's model."""
    item = {"type": "computer_call", "id": "cu_1", "call_id": call_id, "status": "completed",
            "pending_safety_checks": list(checks), "actions": list(actions)}
    ResponseComputerToolCall.model_validate(item)
    return item


def counted(env: Any) -> tuple[Any, list[Any]]:
    """``env.step`` that keeps what it was given: how many steps a call took."""
    calls: list[Any] = []

    def step(action: Any) -> Any:
        calls.append(action)
        return env.step(action)

    return step, calls


def image_of(output: dict[str, Any], mime: str) -> Image.Image:
    header, data = output["output"]["image_url"].split(",", 1)
    assert header == f"data:{mime};base64"
    return Image.open(io.BytesIO(base64.b64decode(data)))


def click(x: int, y: int) -> dict[str, Any]:
    return {"type": "click", "button": "left", "x": x, "y": y}


@pytest.fixture
def env():
    with DesktopEnv(desktop="fake", start_state={"width": SIZE[0], "height": SIZE[1]}) as desk:
        desk.reset()
        yield desk


def test_the_tool_is_declared_as_the_sdk_declares_it():
    assert computer_tool() == {"type": "computer"}
    assert set(computer_tool()) == set(ComputerToolParam.__annotations__)
    check_with_sdk(computer_tool())


def test_every_released_action_translates():
    assert set(RELEASED) == sdk_types()  # an action type the SDK gains fails here until it is translated
    for payload, expected in RELEASED.values():
        assert from_computer_action(payload) == expected, payload
    assert from_computer_call(call(*(p for p, _ in RELEASED.values()))) == \
        [a for _, expected in RELEASED.values() for a in expected]


def test_the_models_pixels_and_scroll_units_map_to_the_screen():
    assert from_computer_action({"type": "scroll", "x": 50, "y": 60, "scroll_x": 0, "scroll_y": 150}, scale=0.5) == \
        [{"type": "scroll", "x": 50, "y": 60, "dx": 0, "dy": 3, "scale": 0.5}]  # 150 of its pixels: 300 of ours
    assert from_computer_action({"type": "scroll", "x": 1, "y": 1, "scroll_x": 0, "scroll_y": -40}) == \
        [{"type": "scroll", "x": 1, "y": 1, "dx": 0, "dy": -1}]  # less than a click is one click up
    assert from_computer_action({"type": "scroll", "x": 1, "y": 1, "scroll_x": 0, "scroll_y": 90},
                                pixels_per_click=30) == [{"type": "scroll", "x": 1, "y": 1, "dx": 0, "dy": 3}]
    assert from_computer_action({**RELEASED["drag"][0], "keys": None}, scale=0.5) == \
        [{"type": "drag", "path": [[1, 2], [50, 60], [70, 80]], "scale": 0.5}]
    assert from_computer_action({"type": "click", "button": "wheel", "x": 3, "y": 4}) == \
        [{"type": "click", "x": 3, "y": 4, "button": "middle"}]


@pytest.mark.parametrize("payload,message", [
    ({"type": "click", "button": "back", "x": 1, "y": 2}, "'back' button"),
    ({"type": "click", "button": "forward", "x": 1, "y": 2}, "'forward' button"),
    ({"type": "click", "button": "left", "x": 1, "y": 2, "keys": "SHIFT"}, "keys is a list"),
    ({"type": "keypress", "keys": ["NOSUCHKEY"]}, "unknown key name .nosuchkey."),
    ({"type": "click", "button": "left", "x": 1, "y": 2, "keys": ["NOSUCHKEY"]}, "click.modifiers.0: unknown key"),
])
def test_what_has_no_translation_is_refused_by_name(payload, message):
    with pytest.raises(InvalidActionError, match=message):
        from_computer_action(payload)


def test_a_call_runs_as_one_step_and_its_input_arrives_in_order(env):
    step, calls = counted(env)
    text = "héllo ✓ 你好"
    sdk_call = ResponseComputerToolCall.model_validate(call(  # as response.output hands it over
        click(10, 20), {"type": "type", "text": text}, {"type": "screenshot"},
        {"type": "keypress", "keys": ["CTRL", "A"]},
        {"type": "scroll", "x": 100, "y": 120, "scroll_x": 0, "scroll_y": 300},
        {"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 30, "y": 40}], "keys": ["SHIFT"]},
        {"type": "move", "x": 7, "y": 8, "keys": ["CTRL"]}, {"type": "double_click", "x": 9, "y": 9}))
    result = run_computer_call(sdk_call, step)
    assert len(calls) == 1 and isinstance(calls[0], list)  # one step, the batch's screenshot left to it
    assert all(a["type"] != "screenshot" for a in calls[0])
    assert [o["status"] for o in result.outcomes] == ["ok"] * 8
    assert env.desktop.typed == text
    assert env.desktop.log == [
        ("move", 10, 20), ("button", 1, True), ("button", 1, False), ("type", text),
        ("key", "ctrl", True), ("key", "A", True), ("key", "A", False), ("key", "ctrl", False),
        ("move", 100, 120), ("scroll", 0, 3),
        ("move", 1, 2), ("key", "shift", True), ("button", 1, True), ("move", 30, 40), ("button", 1, False),
        ("key", "shift", False),
        ("key", "ctrl", True), ("move", 7, 8), ("key", "ctrl", False),
        ("move", 9, 9), ("button", 1, True), ("button", 1, False), ("button", 1, True), ("button", 1, False)]
    assert result.note is None and result.items == [result.output]
    assert "status" not in result.output and result.output["call_id"] == "call_1"
    assert result.output["acknowledged_safety_checks"] == []
    check_with_sdk(result.output)


def test_a_call_of_screenshots_only_is_one_screenshot(env):
    step, calls = counted(env)
    result = run_computer_call(call({"type": "screenshot"}, {"type": "screenshot"}), step)
    assert calls == [[{"type": "screenshot"}]]  # what the model asked for, once
    assert [o["status"] for o in result.outcomes] == ["ok", "ok"] and env.desktop.log == []
    assert image_of(result.output, "image/png").size == SIZE


@pytest.mark.parametrize("observation,size,scale", [({}, SIZE, 1.0), ({"max_side": 320}, (320, 200), 0.5)])
def test_the_output_holds_the_screen_after_the_batch_at_its_declared_size(observation, size, scale):
    with DesktopEnv(desktop="fake", start_state={"width": SIZE[0], "height": SIZE[1]},
                    observation=observation) as env:
        first = env.reset().screenshot
        assert first.scale == scale
        result = run_computer_call(call(click(100, 50)), env.step, scale=first.scale)  # the model's pixels
        shot = result.observation.screenshot
        image = image_of(result.output, shot.mime_type)
        assert image.size == size == (shot.width, shot.height) and result.scale == scale
        assert env.desktop.log[0] == ("move", round(100 / scale), round(50 / scale))
        before = Image.open(io.BytesIO(first.bytes()))
        assert image.getpixel((100, 50)) != before.getpixel((100, 50))  # the click's mark: taken after it


@pytest.mark.parametrize("failing,code", [
    ("a person takes the desktop", "HUMAN_CONTROL"),
    ("off the screen", "VALIDATION_ERROR"),  # a batch checks coordinates as each action runs
])
def test_a_failing_action_mid_batch_is_reported_and_the_rest_not_run(env, failing, code):
    third = click(20, 20)
    if code == "HUMAN_CONTROL":
        env.hooks.input_blocked = lambda: "desktop under human control" if env.desktop.typed else None
    else:
        third = click(5000, 20)
    step, calls = counted(env)
    result = run_computer_call(call(click(10, 10), {"type": "type", "text": "ab"}, third,
                                    {"type": "keypress", "keys": ["ENTER"]}), step)
    assert len(calls) == 1
    assert [o["status"] for o in result.outcomes] == ["ok", "ok", "error", "not_run"]
    assert result.outcomes[2]["error"]["code"] == code
    assert env.desktop.log[-1] == ("type", "ab")  # nothing after the failure ran
    output, message = result.items
    assert output["status"] == "incomplete" and output["call_id"] == "call_1"
    text = message["content"][0]["text"]
    assert "Action 3 of 4 (click)" in text and code in text and "action 4 did not run" in text
    assert image_of(output, result.observation.screenshot.mime_type).size == SIZE
    check_with_sdk(output)
    check_with_sdk(message)


def test_keys_held_by_a_move_that_failed_are_let_up(env):
    armed = [True]

    def blocked() -> str | None:  # a person takes the desktop just after the move pressed its key
        if armed[0] and env.desktop.log and env.desktop.log[-1] == ("key", "shift", True):
            armed[0] = False
            return "desktop under human control"
        return None

    env.hooks.input_blocked = blocked
    result = run_computer_call(call({"type": "move", "x": 5, "y": 5, "keys": ["SHIFT"]}, click(9, 9)), env.step)
    assert [o["status"] for o in result.outcomes] == ["error", "not_run"]
    assert env.desktop.log == [("key", "shift", True), ("key", "shift", False)]


@pytest.mark.parametrize("button", ["back", "forward"])  # X has buttons 8 and 9; our actions name none
def test_an_action_without_translation_refuses_the_whole_call(env, button):
    step, calls = counted(env)
    result = run_computer_call(call({"type": "type", "text": "x"}, {"type": "click", "button": button, "x": 1, "y": 2},
                                    click(1, 1)), step)
    assert [o["status"] for o in result.outcomes] == ["not_run", "error", "not_run"]
    assert result.outcomes[1]["error"]["code"] == "UNSUPPORTED_ACTION"
    assert f"'{button}' button" in result.outcomes[1]["error"]["message"]
    assert env.desktop.log == [] and env.desktop.typed == ""  # as step refuses a list with a malformed item
    assert calls == [{"type": "screen_size"}]  # only the screen, for the output
    output, said = result.items
    assert output["status"] == "incomplete" and image_of(output, "image/png").size == SIZE
    text = said["content"][0]["text"]
    assert "Action 2 of 3 (click)" in text and "none of the call's actions ran" in text


def test_a_batch_a_server_refuses_whole_is_reported(env):
    def strict(action: Any) -> Any:  # a server that checks every item of a batch before running any
        if isinstance(action, list):
            raise InvalidActionError("click.x/y: (900, 10) is off screen", field="x/y")
        return env.step(action)

    result = run_computer_call(call({"type": "type", "text": "x"}, click(900, 10)), strict)
    assert [o["status"] for o in result.outcomes] == ["not_run", "not_run"] and env.desktop.log == []
    output, said = result.items
    assert output["status"] == "incomplete"
    assert said["content"][0]["text"] == ("The actions of computer_call call_1 were refused and none ran: "
                                          "VALIDATION_ERROR: click.x/y: (900, 10) is off screen")


def test_safety_checks_are_passed_through_only_when_acknowledged(env):
    pending = call(click(10, 10), checks=CHECKS)
    assert pending_safety_checks(pending) == CHECKS
    step, calls = counted(env)
    with pytest.raises(SafetyChecksPending) as refused:
        run_computer_call(pending, step)  # nobody asked: nothing runs
    assert refused.value.checks == CHECKS and refused.value.call_id == "call_1" and "send the user's files" in \
        str(refused.value)
    shown: list[Any] = []
    with pytest.raises(SafetyChecksPending):
        run_computer_call(pending, step, acknowledge=lambda checks: shown.append(checks) or False)
    assert shown == [CHECKS] and calls == [] and env.desktop.log == []
    result = run_computer_call(pending, step, acknowledge=lambda checks: True)
    assert result.output["acknowledged_safety_checks"] == CHECKS and env.desktop.log
    check_with_sdk(result.output)
    asked: list[Any] = []
    plain = run_computer_call(call(click(1, 1)), step, acknowledge=asked.append)
    assert asked == [] and plain.output["acknowledged_safety_checks"] == []  # nothing pending, nobody asked


def test_the_preview_form_is_unchanged(env):
    pinned = [
        ({"type": "click", "x": 1, "y": 2, "button": "wheel"}, [{"type": "click", "x": 1, "y": 2, "button": "middle"}]),
        ({"type": "double_click", "x": 3, "y": 4}, [{"type": "click", "x": 3, "y": 4, "count": 2}]),
        ({"type": "scroll", "x": 5, "y": 6, "scroll_x": 0, "scroll_y": -300},
         [{"type": "scroll", "x": 5, "y": 6, "dx": 0, "dy": -3}]),
        ({"type": "keypress", "keys": ["CTRL", "C"]}, [{"type": "key", "keys": "ctrl+C"}]),
        ({"type": "wait", "ms": 250}, [{"type": "wait", "ms": 250}]),
        ({"type": "move", "x": 7, "y": 8}, [{"type": "mouse_move", "x": 7, "y": 8}]),
        ({"type": "drag", "path": [{"x": 1, "y": 1}, {"x": 2, "y": 2}]}, [{"type": "drag", "path": [[1, 1], [2, 2]]}]),
        ({"type": "type", "text": "é"}, [{"type": "type_text", "text": "é"}]),
        ({"type": "screenshot"}, [{"type": "screenshot", "scale": 0.5}]),
    ]
    for payload, expected in pinned:
        assert from_openai(payload, scale=0.5 if payload["type"] == "screenshot" else None) == expected
    assert to_openai({"type": "wait", "ms": 250}) == {"type": "wait", "ms": 250}
    assert to_openai({"type": "click", "x": 1, "y": 2, "button": "middle"}) == \
        {"type": "click", "x": 1, "y": 2, "button": "wheel"}
    with pytest.raises(UnsupportedActionError):
        to_openai({"type": "click", "x": 1, "y": 2, "modifiers": ["shift"]})
    # a preview call (one ``action``) runs through the same driver
    preview = {**call(click(10, 10)), "actions": None, "action": click(11, 12)}
    ResponseComputerToolCall.model_validate(preview)
    result = run_computer_call(preview, env.step)
    assert [o["status"] for o in result.outcomes] == ["ok"] and env.desktop.log[0] == ("move", 11, 12)


@pytest.mark.parametrize("item,message", [
    ({"type": "computer_call", "call_id": "c", "status": "completed", "pending_safety_checks": []},
     "either actions or action"),
    ({"type": "computer_call", "call_id": "c", "status": "incomplete", "actions": [{"type": "wait"}]}, "not completed"),
    ({"type": "function_call", "call_id": "c"}, "not a computer_call"),
    ({"type": "computer_call", "status": "completed", "actions": [{"type": "wait"}]}, "without a call_id"),
])
def test_malformed_calls_are_refused_before_anything_runs(env, item, message):
    with pytest.raises(InvalidActionError, match=message):
        run_computer_call(item, env.step)
    assert env.episode.step_count == 0


def test_a_server_without_batch_outcomes_is_refused_not_guessed(env):
    def old(action: Any) -> Any:  # a server from before batches reported their outcomes
        return env.step(action).model_copy(update={"outcomes": None})

    with pytest.raises(EnvironmentStateError, match="predates batches"):
        run_computer_call(call(click(1, 1)), old)


def test_an_ended_episode_has_no_output_to_send(env):
    env.desktop.fail("Xvfb exited")
    result = run_computer_call(call(click(1, 1)), env.step)
    assert result.output is None and result.items == [] and result.note == "The episode ended: Xvfb exited."
    assert result.observation.truncated


def test_an_observation_without_screenshots_cannot_answer_the_tool():
    with DesktopEnv(desktop="fake", start_state={"width": 64, "height": 64}, observation={"format": None}) as env:
        env.reset()
        with pytest.raises(ConfigError, match="screenshot"):
            run_computer_call(call(click(1, 1)), env.step)


def test_check_with_sdk_refuses_what_the_sdk_does_not_declare(monkeypatch):
    good = {"type": "computer_call_output", "call_id": "c",
            "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AA=="}}
    assert check_with_sdk(good).output.image_url == "data:image/png;base64,AA=="
    with pytest.raises(InvalidActionError, match=r"output\.detail"):  # 3.51's computer_screenshot has no detail
        check_with_sdk({**good, "output": {**good["output"], "detail": "original"}})
    with pytest.raises(InvalidActionError, match="does not fit the SDK"):
        check_with_sdk({**good, "output": {"type": "input_image"}})
    monkeypatch.setitem(sys.modules, "openai.types.responses", None)
    with pytest.raises(MissingDependencyError, match=r"hci-envs\[openai\]"):
        check_with_sdk(good)


def test_the_adapter_needs_no_sdk():
    code = ("import sys; sys.modules['openai'] = None\n"
            "from hci_envs.adapters.openai_computer import computer_tool, from_computer_call\n"
            "print(from_computer_call({'type': 'computer_call', 'call_id': 'c', 'actions': [{'type': 'wait'}]}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "'ms': 1000" in done.stdout


def test_over_the_client(fake_server):
    with HciEnvClient(fake_server.base_url) as client:
        client.reset()
        step, calls = counted(client)
        result = run_computer_call(call(click(10, 10), {"type": "type", "text": "héllo ✓"}), step)
        assert len(calls) == 1 and [o["status"] for o in result.outcomes] == ["ok", "ok"]
        shot = result.observation.screenshot
        assert image_of(result.output, shot.mime_type).size == (shot.width, shot.height)
        check_with_sdk(result.output)
        failed = run_computer_call(call({"type": "type", "text": "x"}, click(30000, 10), click(1, 1)), step)
        assert [o["status"] for o in failed.outcomes] == ["ok", "error", "not_run"]
        assert failed.outcomes[1]["error"]["code"] == "VALIDATION_ERROR"  # the error crossed the wire
        assert failed.output["status"] == "incomplete"
