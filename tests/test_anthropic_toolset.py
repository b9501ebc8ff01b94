"""Anthropic's computer toolset (computer_toolset_20260801), checked against the SDK's own types: every member
translates with the SDK's input, a turn of member calls runs as one step and is answered call by call as the
Messages API takes it, and the MCP profile's tools are the members with the SDK's schemas."""

from __future__ import annotations

import base64
import io
import struct
import sys

import anthropic.types
import pytest
from anthropic.lib.tools._toolsets._computer_registry import COMPUTER_MEMBERS
from anthropic.lib.tools._toolsets._runnable import HALT_TEXT
from anthropic.types import COMPUTER_MEMBER_NAME_VALUES, ComputerToolset20260801Param, ToolUseBlock
from anthropic.types.beta import BetaToolUseBlock
from pydantic import TypeAdapter, ValidationError

from hci_envs.adapters import anthropic_toolset as toolset
from hci_envs.errors import ConfigError, InvalidActionError, MissingDependencyError
from hci_envs.tools.anthropic_profile import anthropic_toolset_specs

pytestmark = pytest.mark.fake

#: One input per member, as the model sends it, and its canonical actions at scale 0.5.
SAMPLES = {
    "key": ({"text": "ctrl+s", "repeat": 2}, [{"type": "key", "keys": "ctrl+s", "repeat": 2}]),
    "hold_key": ({"text": "shift", "duration": 1}, [{"type": "hold_key", "keys": "shift", "seconds": 1.0}]),
    "type": ({"text": "héllo ✓"}, [{"type": "type_text", "text": "héllo ✓"}]),
    "cursor_position": ({}, [{"type": "cursor_position", "scale": 0.5}]),
    "mouse_move": ({"coordinate": [10, 20]}, [{"type": "mouse_move", "x": 10, "y": 20, "scale": 0.5}]),
    "left_mouse_down": ({}, [{"type": "mouse_down", "button": "left"}]),
    "left_mouse_up": ({}, [{"type": "mouse_up", "button": "left"}]),
    "left_click": ({"coordinate": [10, 20], "text": "ctrl"},
                   [{"type": "click", "button": "left", "count": 1, "x": 10, "y": 20, "modifiers": ["ctrl"],
                     "scale": 0.5}]),
    "left_click_drag": ({"start_coordinate": [1, 2], "coordinate": [30, 40], "text": "shift"},
                        [{"type": "drag", "path": [[1, 2], [30, 40]], "modifiers": ["shift"], "scale": 0.5}]),
    "right_click": ({"coordinate": [10, 20]},
                    [{"type": "click", "button": "right", "count": 1, "x": 10, "y": 20, "scale": 0.5}]),
    "middle_click": ({}, [{"type": "click", "button": "middle", "count": 1, "scale": 0.5}]),
    "double_click": ({"coordinate": [5, 6]},
                     [{"type": "click", "button": "left", "count": 2, "x": 5, "y": 6, "scale": 0.5}]),
    "triple_click": ({"coordinate": [5, 6]},
                     [{"type": "click", "button": "left", "count": 3, "x": 5, "y": 6, "scale": 0.5}]),
    "scroll": ({"scroll_direction": "left", "scroll_amount": 3, "coordinate": [10, 20]},
               [{"type": "scroll", "dx": -3, "x": 10, "y": 20, "scale": 0.5}]),
    "wait": ({"duration": 2}, [{"type": "wait", "ms": 2000}]),
    "screenshot": ({}, [{"type": "screenshot", "scale": 0.5}]),
    "zoom": ({"region": [10, 20, 60, 45]},
             [{"type": "screenshot", "region": {"x": 20, "y": 40, "width": 100, "height": 50}}]),
}


def sdk_input(name: str) -> type:
    """The SDK's input model of a member: ComputerLeftClickDragInput for left_click_drag."""
    return getattr(anthropic.types, "Computer" + "".join(part.title() for part in name.split("_")) + "Input")


def one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def png_size(block: dict) -> tuple[int, int]:
    data = base64.b64decode(block["source"]["data"])
    assert block["source"]["media_type"] == "image/png" and data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def env():
    """A 320 x 240 fake desktop with a window, which has the keyboard focus."""
    from hci_envs.traits import DesktopEnv

    with DesktopEnv(desktop="fake", start_state={"width": 320, "height": 240, "apps": [{"command": ["app"]}]}) as env:
        env.reset()
        yield env


def use(id_: str, name: str, **input_) -> dict:
    return {"type": "tool_use", "id": id_, "name": name, "input": input_, "toolset_name": "computer"}


# -- the members -------------------------------------------------------------------------------------------------
def test_every_member_of_the_sdk_translates_its_input():
    assert list(toolset.MEMBERS) == list(COMPUTER_MEMBER_NAME_VALUES) == list(SAMPLES)
    for name, (payload, expected) in SAMPLES.items():
        sdk_input(name)(**payload)  # the SDK's model takes it as the model sends it
        assert toolset.from_member(name, payload, scale=0.5) == expected, name
        member = toolset.MEMBERS[name]
        assert member.description == one_line(sdk_input(name).__doc__), name
        assert member.acknowledgment == COMPUTER_MEMBERS[name].text, name  # what the SDK answers a pure action


def test_what_the_sdk_refuses_is_refused():
    refused = 0
    for name in COMPUTER_MEMBER_NAME_VALUES:
        model, (payload, _) = sdk_input(name), SAMPLES[name]
        for field_name in [f for f, info in model.model_fields.items() if info.is_required()]:
            short = {k: v for k, v in payload.items() if k != field_name}
            with pytest.raises(ValidationError):
                model(**short)
            with pytest.raises(InvalidActionError, match=f"{name}.{field_name}: Field required"):
                toolset.from_member(name, short)
            refused += 1
    assert refused == 11  # every required field of every member
    with pytest.raises(ValidationError):
        sdk_input("wait")(duration="soon")
    with pytest.raises(InvalidActionError, match="wait.duration"):
        toolset.from_member("wait", {"duration": "soon"})
    for name, payload, message in [("left_click", {"coordinate": [1]}, r"coordinate must be \[x, y\]"),
                                   ("zoom", {"region": [5, 5, 1, 9]}, "is empty"),
                                   ("key", {"text": "ctrl+nokey"}, "unknown key name"),
                                   ("key", {"text": "a", "repeat": 0}, "key.repeat"),
                                   ("teleport", {}, "has no member 'teleport'")]:
        with pytest.raises(InvalidActionError, match=message):
            toolset.from_member(name, payload)


def test_the_tools_entry_is_the_sdks_toolset_param():
    assert toolset.toolset_param() == {"type": "computer_toolset_20260801"}
    entry = toolset.toolset_param(configs={"zoom": {"enabled": False}}, cache_control={"type": "ephemeral"})
    assert TypeAdapter(ComputerToolset20260801Param).validate_python(entry) == entry
    assert set(entry) <= set(ComputerToolset20260801Param.__annotations__)
    with pytest.raises(ConfigError, match="teleport"):
        toolset.toolset_param(configs={"teleport": {"enabled": True}})


def test_the_scale_is_the_largest_that_fits_anthropics_documented_image_budget():
    from hci_envs.traits import DesktopEnv

    assert toolset.fit_scale(1280, 800) is None  # sent as it is
    for width, height in [(1920, 1080), (3840, 2160), (2000, 300)]:
        scale = toolset.fit_scale(width, height)
        side, pixels = max(width, height) * scale, width * height * scale * scale
        assert side <= 1568 and pixels <= 1_150_000 * 1.0001
        assert side == pytest.approx(1568) or pixels == pytest.approx(1_150_000)
    with DesktopEnv(desktop="fake", start_state={"width": 2000, "height": 300}) as wide:
        wide.reset()
        shot = anthropic_toolset_specs(width=2000, height=300)["screenshot"].call(wide, {})
        assert (shot.images[0].width, shot.images[0].height) == (1568, 235)
        scale = toolset.fit_scale(2000, 300)
        turn = toolset.run_turn([use("z", "zoom", region=[0, 0, 1568, 235]), use("y", "zoom", region=[0, 0, 784, 100])],
                                wide, scale=scale)
        # a zoom is at full resolution, but never larger than the model may be sent
        assert [png_size(r["content"][0]) for r in turn.results] == [(1568, 235), (1000, 128)]


# -- a turn ------------------------------------------------------------------------------------------------------
def test_a_turn_runs_as_one_step_and_each_call_gets_its_result(env):
    before = env.state.step_count
    calls = [ToolUseBlock(type="tool_use", id="toolu_1", name="left_click", input={"coordinate": [50, 40]},
                          toolset_name="computer"),
             use("toolu_2", "type", text="héllo ✓ 你好 🙂\n"),
             use("toolu_3", "key", text="ctrl+shift+t", repeat=2),
             use("toolu_4", "cursor_position"),
             use("toolu_5", "screenshot")]
    turn = toolset.run_turn(calls, env, scale=0.5)
    assert env.state.step_count == before + 1
    assert [r["tool_use_id"] for r in turn.results] == ["toolu_1", "toolu_2", "toolu_3", "toolu_4", "toolu_5"]
    assert all(r["type"] == "tool_result" and r["toolset_name"] == "computer" and "is_error" not in r
               for r in turn.results)
    assert turn.message == {"role": "user", "content": turn.results}
    assert [r["content"] for r in turn.results[:4]] == [
        [{"type": "text", "text": "Clicked."}], [{"type": "text", "text": "Typed."}],
        [{"type": "text", "text": "Pressed ctrl+shift+t."}], [{"type": "text", "text": "X=50,Y=40"}]]
    [image] = turn.results[4]["content"]
    assert png_size(image) == (160, 120)  # the screenshot at the model's scale
    log = env.desktop.log
    assert log[:3] == [("move", 100, 80), ("button", 1, True), ("button", 1, False)]
    assert env.desktop.typed == "héllo ✓ 你好 🙂\n"
    chord = [("key", "ctrl", True), ("key", "shift", True), ("key", "t", True), ("key", "t", False),
             ("key", "shift", False), ("key", "ctrl", False)]
    keys = [event for event in log if event[0] == "key"]
    assert keys == chord * 2


def test_a_turn_over_the_client_is_one_step_with_every_result(fake_server):
    from hci_envs import HciEnvClient

    with HciEnvClient(fake_server.base_url) as client:
        client.reset()  # the workstation on the fake desktop, 1280 x 800 by default
        calls = [use("a", "left_click", coordinate=[64, 40]), use("b", "zoom", region=[0, 0, 32, 16]),
                 use("c", "left_click", coordinate=[900, 1]), use("d", "screenshot")]
        turn = toolset.run_turn(calls, client, scale=0.5)
        assert client.state().step_count == 1
    assert turn.results[0]["content"] == [{"type": "text", "text": "Clicked."}]
    assert png_size(turn.results[1]["content"][0]) == (64, 32)
    assert turn.results[2]["is_error"] and "off screen" in turn.results[2]["content"]
    assert turn.results[3]["content"] == HALT_TEXT["computer"]


def test_a_failure_mid_turn_is_that_calls_error_and_the_rest_are_not_executed(env):
    before = env.state.step_count
    turn = toolset.run_turn([use("a", "type", text="first"), use("b", "left_click", coordinate=[170, 10]),
                             use("c", "type", text="never"), use("d", "screenshot")], env, scale=0.5)
    assert env.state.step_count == before + 1
    ok, failed, *skipped = turn.results
    assert "is_error" not in ok and env.desktop.typed == "first"
    assert failed["is_error"] and "off screen" in failed["content"] and failed["tool_use_id"] == "b"
    assert [(s["tool_use_id"], s["content"], s["is_error"], s["toolset_name"]) for s in skipped] == [
        ("c", HALT_TEXT["computer"], True, "computer"), ("d", HALT_TEXT["computer"], True, "computer")]
    assert not [event for event in env.desktop.log if event[0] == "button"]  # the click never happened


@pytest.mark.parametrize("bad,message", [
    (use("b", "key", text="ctrl+nokey"), "unknown key name"),
    (use("b", "mouse_move"), "mouse_move.coordinate: Field required"),
    (use("b", "teleport", to=[1, 2]), "no member 'teleport'"),
    ({**use("b", "navigate", url="x"), "toolset_name": "browser"}, "no member call of the 'computer' toolset"),
    ({**use("b", "screenshot"), "toolset_name": None}, "(toolset_name None) is no member call"),
])
def test_a_call_that_does_not_translate_fails_and_those_before_it_run(env, bad, message):
    turn = toolset.run_turn([use("a", "type", text="ran"), bad, use("c", "type", text="never")], env)
    assert [r.get("is_error", False) for r in turn.results] == [False, True, True]
    assert message in turn.results[1]["content"] and turn.results[2]["content"] == HALT_TEXT["computer"]
    assert turn.results[1].get("toolset_name") == bad["toolset_name"]  # echoed as it came, absent if it was
    assert env.desktop.typed == "ran"


def test_after_a_failure_a_call_that_would_not_translate_is_not_executed_either(env):
    turn = toolset.run_turn([use("a", "left_click", coordinate=[999, 1]), use("b", "key", text="ctrl+nokey")], env)
    assert "off screen" in turn.results[0]["content"] and turn.results[1]["content"] == HALT_TEXT["computer"]


def test_zoom_is_the_region_at_full_resolution(env):
    from PIL import Image

    env.step({"type": "click", "x": 40, "y": 60})  # a mark to find in the region
    turn = toolset.run_turn([use("z", "zoom", region=[10, 20, 60, 45])], env, scale=0.5)
    [image] = turn.results[0]["content"]
    assert png_size(image) == (100, 50)  # 50 x 25 pixels of the model's screenshot are 100 x 50 of the screen
    zoomed = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"]))).convert("RGB")
    full = env.step({"type": "screenshot"}).images[0].to_pil().convert("RGB")
    assert zoomed.tobytes() == full.crop((20, 40, 120, 90)).tobytes()
    assert any(low != high for low, high in zoomed.getextrema())  # the click's mark is in it


def test_a_dead_desktop_answers_every_call_with_the_reason(env):
    env.desktop.fail("Xvfb exited")
    turn = toolset.run_turn([use("a", "left_click"), use("b", "screenshot")], env)
    assert [(r["is_error"], r["content"]) for r in turn.results] == [
        (True, "The episode was truncated: Xvfb exited")] * 2
    assert turn.observation.truncated


# -- the SDK's toolset class and the MCP profile ----------------------------------------------------------------
def test_the_sdk_toolset_class_runs_members_on_the_session(env):
    computer = toolset.HciComputerToolset(env, scale=0.5, confirm=lambda context: True)
    assert computer.to_dict() == toolset.toolset_param()

    def call(name: str, **input_) -> dict:
        return computer.tool_result(BetaToolUseBlock(type="tool_use", id=f"id_{name}", name=name, input=input_,
                                                     toolset_name="computer"))

    assert call("left_click", coordinate=[20, 30]) == {
        "type": "tool_result", "tool_use_id": "id_left_click", "toolset_name": "computer",
        "content": [{"type": "text", "text": "Clicked."}]}
    assert env.desktop.log[0] == ("move", 40, 60)
    assert call("cursor_position")["content"] == [{"type": "text", "text": "X=20,Y=30"}]
    assert png_size(call("zoom", region=[0, 0, 30, 20])["content"][0]) == (60, 40)
    refused = call("type", text="x" * 100_001)
    assert refused["is_error"] and "type_text.text" in refused["content"][0]["text"]
    off = call("right_click", coordinate=[500, 5])
    assert off["is_error"] and "off screen" in off["content"][0]["text"]


def test_the_sdk_class_needs_the_anthropic_extra(monkeypatch):
    monkeypatch.delitem(vars(toolset), "HciComputerToolset", raising=False)
    monkeypatch.setitem(sys.modules, "anthropic.tools", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'hci-envs\[anthropic\]'"):
        toolset.HciComputerToolset  # noqa: B018
    assert toolset.from_member("wait", {"duration": 1}) == [{"type": "wait", "ms": 1000}]  # the rest works on


def test_the_mcp_profile_is_the_members_with_the_sdks_schemas(env):
    specs = anthropic_toolset_specs(scale=0.5)
    assert list(specs) == list(COMPUTER_MEMBER_NAME_VALUES)
    for name, spec in specs.items():
        theirs, ours = sdk_input(name).model_json_schema(), spec.input_schema()
        described = {key: {k: v for k, v in prop.items() if k != "description"}
                     for key, prop in ours["properties"].items()}
        assert described == theirs["properties"], name
        assert ours.get("required", []) == theirs.get("required", []), name
        assert spec.description == one_line(sdk_input(name).__doc__), name
        assert spec.read_only == (name in ("cursor_position", "screenshot", "zoom")), name
    clicked = specs["left_click"].call(env, {"coordinate": [20, 30], "text": "ctrl"})
    assert clicked.text == "Clicked." and ("move", 40, 60) in env.desktop.log
    assert clicked.data["settled"] is True  # the model's next screenshot shows what the click did
    assert ("key", "ctrl", True) in env.desktop.log
    assert specs["cursor_position"].call(env, {}).text == "X=20,Y=30"
    zoomed = specs["zoom"].call(env, {"region": [0, 0, 30, 20]})
    assert (zoomed.images[0].width, zoomed.images[0].height, zoomed.images[0].scale) == (60, 40, 1.0)
    shot = specs["screenshot"].call(env, {})
    assert (shot.images[0].width, shot.images[0].height) == (160, 120)
    assert specs["scroll"].call(env, {"scroll_direction": "down", "scroll_amount": 2}).text == "Scrolled down."
    with pytest.raises(InvalidActionError, match="coordinate"):
        specs["mouse_move"].call(env, {})
    with pytest.raises(InvalidActionError, match="off screen"):
        specs["left_click"].call(env, {"coordinate": [500, 1]})


def test_a_click_that_changed_nothing_there_says_so_to_the_model():
    missed = {"landed": {"screen": "nothing", "changes": 0, "focus_moved": False, "focused": True}}
    elsewhere = {"landed": {"screen": "elsewhere", "changes": 2, "focus_moved": True, "focused": True}}
    hit = {"landed": {"screen": "at_action", "changes": 1, "focus_moved": False, "focused": True}}
    click = {"coordinate": [10, 20]}
    assert toolset.reply_text("left_click", click, missed).endswith("Nothing changed on the screen.")
    assert toolset.reply_text("double_click", click, elsewhere).endswith("not where this acted.")
    assert "changed" not in toolset.reply_text("left_click", click, hit)
    assert "changed" not in toolset.reply_text("mouse_move", click, missed)  # a move may rightly change nothing
