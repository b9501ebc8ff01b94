"""Schema adapters: payloads in Anthropic's, OpenAI's and OSWorld's computer-use schemas, translated and
executed, hit the same widgets as their canonical equivalents."""

from __future__ import annotations

import time

import pytest

from hci_envs.adapters import EpisodeSignal, UnsupportedActionError
from hci_envs.adapters.anthropic import from_anthropic, to_anthropic
from hci_envs.adapters.openai import from_openai, to_openai
from hci_envs.adapters.osworld_actions import from_osworld, to_osworld
from hci_envs.errors import InvalidActionError


@pytest.fixture(scope="module")
def desk(x11, tmp_path_factory):
    from helpers import Probe

    from hci_envs.traits import DesktopEnv

    probe = Probe(tmp_path_factory.mktemp("adapters"))
    env = DesktopEnv(start_state={"apps": [probe.app()]})
    env.reset()
    yield env, probe
    env.close()


@pytest.fixture
def fresh(desk):
    env, probe = desk
    probe.state_path.unlink(missing_ok=True)
    env.reset()
    state = probe.wait_for(lambda s: s.get("ready"), what="the probe")
    return env, probe, state


def effects(env, probe, actions) -> dict:
    for action in actions:  # one step each, the screen settling in between, as an agent would see it
        env.step(action)
        env.desktop.events.wait_settled(0.15, 3)
    time.sleep(0.2)
    s = probe.state()
    return {k: s[k] for k in ("clicks", "entry", "entry_selection", "text_selection", "listbox_first_visible", "marks")}


def scenario(state) -> dict:
    bx, by, bw, bh = state["widgets"]["button"]
    ex, ey, ew, eh = state["widgets"]["entry"]
    lx, ly, lw, lh = state["widgets"]["listbox"]
    tx, ty, _, _ = state["widgets"]["text"]
    beta = state["text_char_bbox"]["beta"]
    cx, cy, _, _ = state["widgets"]["canvas"]
    return {"button": (bx + bw // 2, by + bh // 2), "entry": (ex + 20, ey + eh // 2), "list": (lx + lw // 2, ly + lh // 2),
            "beta": (tx + beta[0] + 2, ty + beta[1] + beta[3] // 2), "canvas": (cx + 100, cy + 50),
            "canvas_far": (cx + 200, cy + 60)}


def canonical(p) -> list[dict]:
    return [
        {"type": "click", "x": p["button"][0], "y": p["button"][1]},
        {"type": "click", "x": p["entry"][0], "y": p["entry"][1]},
        {"type": "type_text", "text": "hé llo"},
        {"type": "key", "keys": "ctrl+a"},
        {"type": "scroll", "x": p["list"][0], "y": p["list"][1], "dy": 3},
        {"type": "click", "x": p["beta"][0], "y": p["beta"][1], "count": 2},
        {"type": "mouse_move", "x": p["canvas"][0], "y": p["canvas"][1]},
        {"type": "click", "x": p["canvas"][0], "y": p["canvas"][1]},
    ]


def anthropic_payloads(p, scale=1.0):
    s = lambda xy: [round(xy[0] * scale), round(xy[1] * scale)]  # noqa: E731
    return [
        {"action": "left_click", "coordinate": s(p["button"])},
        {"action": "left_click", "coordinate": s(p["entry"])},
        {"action": "type", "text": "hé llo"},
        {"action": "key", "text": "ctrl+a"},
        {"action": "scroll", "coordinate": s(p["list"]), "scroll_direction": "down", "scroll_amount": 3},
        {"action": "double_click", "coordinate": s(p["beta"])},
        {"action": "mouse_move", "coordinate": s(p["canvas"])},
        {"action": "left_click"},
    ]


def openai_payloads(p, scroll=300):
    return [
        {"type": "click", "x": p["button"][0], "y": p["button"][1], "button": "left"},
        {"type": "click", "x": p["entry"][0], "y": p["entry"][1], "button": "left"},
        {"type": "type", "text": "hé llo"},
        {"type": "keypress", "keys": ["CTRL", "A"]},
        {"type": "scroll", "x": p["list"][0], "y": p["list"][1], "scroll_x": 0, "scroll_y": scroll},
        {"type": "double_click", "x": p["beta"][0], "y": p["beta"][1]},
        {"type": "move", "x": p["canvas"][0], "y": p["canvas"][1]},
        {"type": "click", "x": p["canvas"][0], "y": p["canvas"][1], "button": "left"},
    ]


def osworld_payloads(p):
    return [
        {"action_type": "CLICK", "parameters": {"button": "left", "x": p["button"][0], "y": p["button"][1]}},
        {"action_type": "CLICK", "parameters": {"x": p["entry"][0], "y": p["entry"][1], "num_clicks": 1}},
        {"action_type": "TYPING", "parameters": {"text": "hé llo"}},
        {"action_type": "HOTKEY", "parameters": {"keys": ["ctrl", "a"]}},
        {"action_type": "MOVE_TO", "parameters": {"x": p["list"][0], "y": p["list"][1]}},
        {"action_type": "SCROLL", "parameters": {"dx": 0, "dy": -3}},
        {"action_type": "DOUBLE_CLICK", "parameters": {"x": p["beta"][0], "y": p["beta"][1]}},
        {"action_type": "MOVE_TO", "parameters": {"x": p["canvas"][0], "y": p["canvas"][1]}},
        {"action_type": "CLICK", "parameters": {"button": "left"}},
    ]


@pytest.mark.x11
def test_foreign_payloads_hit_the_same_widgets(fresh, desk):
    env, probe, state = fresh
    points = scenario(state)
    expected = effects(env, probe, canonical(points))
    assert expected["clicks"] == 1 and expected["entry"] == "hé llo" and expected["text_selection"] == "beta"
    assert expected["listbox_first_visible"] > 0 and len(expected["marks"]) == 1
    for name, payloads, translate in (
        ("anthropic", anthropic_payloads(points), from_anthropic),
        ("openai", openai_payloads(points), from_openai),
        ("osworld", osworld_payloads(points), from_osworld),
    ):
        probe.state_path.unlink(missing_ok=True)
        env.reset()
        probe.wait_for(lambda s: s.get("ready"))
        actions = [a for payload in payloads for a in translate(payload)]
        assert effects(env, probe, actions) == expected, name


@pytest.mark.x11
def test_payloads_read_off_a_downscaled_screenshot_hit_the_same_widgets(fresh):
    """A model shown 640x400 screenshots (scale 0.5) clicks, scrolls and moves in their pixels, and scrolls by
    their pixels too (OpenAI): given scale=0.5, every schema's payloads act where the canonical actions at full
    size do."""
    env, probe, state = fresh
    points = {k: (x // 2 * 2, y // 2 * 2) for k, (x, y) in scenario(state).items()}  # exact at half size
    expected = effects(env, probe, canonical(points))
    assert expected["clicks"] == 1 and expected["text_selection"] == "beta" and len(expected["marks"]) == 1
    half = {k: (x // 2, y // 2) for k, (x, y) in points.items()}
    for name, payloads, translate in (
        ("anthropic", anthropic_payloads(half), from_anthropic),
        ("openai", openai_payloads(half, scroll=150), from_openai),  # 150 of its pixels: 300 of the screen's
        ("osworld", osworld_payloads(half), from_osworld),
    ):
        probe.state_path.unlink(missing_ok=True)
        env.reset()
        probe.wait_for(lambda s: s.get("ready"))
        actions = [a for payload in payloads for a in translate(payload, scale=0.5)]
        assert effects(env, probe, actions) == expected, name


@pytest.mark.x11
def test_openai_screenshots_and_osworld_observations_are_in_the_models_space(fresh):
    import base64
    import io

    from PIL import Image

    from hci_envs.adapters import osworld_actions as osworld

    env, probe, state = fresh
    shot = env.step(from_openai({"type": "screenshot"}, scale=0.5))
    assert (shot.images[0].width, shot.images[0].height) == (640, 400) and shot.data["scale"] == 0.5
    obs = env.step({"type": "wait", "ms": 1})  # the environment's own observation, at full size
    assert obs.screenshot.width == 1280
    seen = osworld.observation(obs, instruction="do it", scale=0.5)
    image = Image.open(io.BytesIO(seen["screenshot"]))
    assert image.size == (640, 400) and seen["instruction"] == "do it"
    # what the model sees at half size is the screen at half size: the probe's canvas is where it was
    cx, cy, cw, ch = state["widgets"]["canvas"]
    x, y = (cx + cw // 2) // 2 * 2, (cy + ch // 2) // 2 * 2
    full = Image.open(io.BytesIO(base64.b64decode(obs.screenshot.data))).convert("RGB")
    assert image.convert("RGB").getpixel((x // 2, y // 2)) == full.getpixel((x, y))
    assert osworld.observation(obs)["screenshot"] == base64.b64decode(obs.screenshot.data)  # no scale: as taken
    tree = {"scale": 1.0, "nodes": [{"element": 1, "role": "push button", "name": "OK", "states": ["enabled"],
                                     "box": [100, 50, 20, 10], "parent": None}]}
    assert 'screencoord="(50, 25)"' in osworld.accessibility_tree_xml(tree, scale=0.5)
    assert 'size="(10, 5)"' in osworld.accessibility_tree_xml(tree, scale=0.5)
    assert 'screencoord="(200, 100)"' in osworld.accessibility_tree_xml({**tree, "scale": 0.5})  # to the screen


@pytest.mark.x11
def test_anthropic_coordinate_scaling(fresh):
    env, probe, state = fresh
    points = scenario(state)
    scale = 0.5  # the model saw a 640x400 screenshot
    shrunk = {k: (v[0] // 2 * 2, v[1] // 2 * 2) for k, v in points.items()}
    actions = from_anthropic({"action": "left_click", "coordinate": [shrunk["canvas"][0] // 2, shrunk["canvas"][1] // 2]},
                             scale=scale)
    assert actions == [{"type": "click", "button": "left", "count": 1, "x": shrunk["canvas"][0] // 2,
                        "y": shrunk["canvas"][1] // 2, "scale": 0.5}]
    env.step(actions[0])
    mark = probe.wait_for(lambda s: s["marks"], what="the scaled click")["marks"][0]
    cx, cy, _, _ = state["widgets"]["canvas"]
    assert mark == [shrunk["canvas"][0] - cx, shrunk["canvas"][1] - cy]


@pytest.mark.x11
def test_anthropic_screenshots_and_cursor_are_in_the_models_space_and_zoom_is_full_resolution(fresh):
    """Told its display is 640x400 (scale 0.5), the model gets 640x400 screenshots, a cursor position in that
    space, and zoom returns the asked part of its screenshot at the screen's own resolution."""
    env, probe, state = fresh
    scale = 0.5
    shot = env.step(from_anthropic({"action": "screenshot"}, scale=scale))
    image = shot.images[0] if shot.images else None
    assert image is not None and (image.width, image.height) == (640, 400) and shot.data["scale"] == 0.5
    env.step(from_anthropic({"action": "mouse_move", "coordinate": [300, 200]}, scale=scale))
    at = env.step(from_anthropic({"action": "cursor_position"}, scale=scale))
    assert (at.data["x"], at.data["y"]) == (300, 200)  # where the model put it, in its own space
    assert env.desktop.input.pointer() == (600, 400)  # and on the screen
    cx, cy, cw, ch = state["widgets"]["canvas"]
    region = [cx // 2, cy // 2, (cx + cw) // 2, (cy + ch) // 2]  # the canvas, in the model's space
    zoomed = env.step(from_anthropic({"action": "zoom", "region": region}, scale=scale))
    z = zoomed.images[0]
    assert (z.width, z.height) == (region[2] * 2 - region[0] * 2, region[3] * 2 - region[1] * 2)  # full size
    assert zoomed.data["left"] == region[0] * 2 and zoomed.data["scale"] == 1.0
    assert to_anthropic(from_anthropic({"action": "zoom", "region": [10, 20, 110, 70]})[0]) == {
        "action": "zoom", "region": [10, 20, 110, 70]}
    with pytest.raises(InvalidActionError, match="empty"):
        from_anthropic({"action": "zoom", "region": [50, 50, 10, 60]})
    with pytest.raises(UnsupportedActionError, match=r"\[x0, y0, x1, y1\]"):
        from_anthropic({"action": "zoom", "region": [1, 2, 3]})


@pytest.mark.fake
def test_round_trips():
    for action in ({"type": "click", "x": 5, "y": 6, "count": 2}, {"type": "scroll", "x": 1, "y": 2, "dy": -3},
                   {"type": "type_text", "text": "x"}, {"type": "key", "keys": "ctrl+shift+t"},
                   {"type": "drag", "path": [[1, 2], [30, 40]]}, {"type": "wait", "ms": 250}):
        from hci_envs.actions import parse_action

        canonical_action = parse_action(action)
        assert parse_action(from_anthropic(to_anthropic(action))[0]) == canonical_action
        assert [parse_action(a) for a in from_openai(to_openai(action))] == [canonical_action]
    for action in ({"type": "click", "x": 5, "y": 6}, {"type": "type_text", "text": "x"},
                   {"type": "key", "keys": ["ctrl+a", "BackSpace"]}):
        from hci_envs.actions import parse_action

        back = [a for p in to_osworld(action) for a in from_osworld(p)]
        if action["type"] != "key":
            assert [parse_action(a) for a in back] == [parse_action(action)]
        else:  # pyautogui spells keys its own way: compare the keys pressed, not their spelling
            from hci_envs.actions.keys import parse_combo

            assert [[k for _, k in parse_combo(parse_action(a).keys)] for a in back] == \
                [[k for _, k in parse_combo(c)] for c in ["ctrl+a", "BackSpace"]]


@pytest.mark.fake
@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: from_anthropic({"action": "teleport"}), "unknown action 'teleport'"),
        (lambda: from_anthropic({"action": "left_click", "coordinate": [1]}), "coordinate must be [x, y]"),
        (lambda: from_anthropic({"action": "type"}), "needs 'text'"),
        (lambda: from_anthropic({"action": "scroll", "scroll_direction": "sideways"}), "sideways"),
        (lambda: from_anthropic({"action": "key", "text": "ctrl+nokey"}), "unknown key name"),
        (lambda: from_openai({"type": "click", "x": 1, "y": 2, "button": "back"}), "'back' button"),
        (lambda: from_openai({"type": "fly"}), "unknown action 'fly'"),
        (lambda: from_osworld({"action_type": "JUMP"}), "unknown action_type 'JUMP'"),
        (lambda: from_osworld({"action_type": "TYPING", "parameters": {}}), "needs the parameter 'text'"),
        (lambda: to_anthropic({"type": "clipboard_set", "text": "x"}), "no equivalent of 'clipboard_set'"),
        (lambda: to_anthropic({"type": "drag", "path": [[0, 0], [1, 1], [2, 2]]}), "two points"),
        (lambda: to_openai({"type": "hold_key", "keys": "a", "seconds": 1}), "no equivalent"),
    ],
)
def test_unknown_or_untranslatable_actions_are_refused(call, message):
    with pytest.raises(InvalidActionError) as info:
        call()
    assert message in str(info.value)


@pytest.mark.fake
def test_osworld_done_and_fail_end_the_episode():
    for status in ("DONE", "FAIL"):
        with pytest.raises(EpisodeSignal) as info:
            from_osworld({"action_type": status})
        assert info.value.status == status
    assert issubclass(UnsupportedActionError, InvalidActionError)


@pytest.mark.fake
@pytest.mark.parametrize("keys", ["enter", "ctrl+shift+t", "super+pageup", "F11", "F24", "ctrl++", "Caps_Lock",
                                  "é", "shift+Tab", "alt+F4", "Prior", "ctrl+Home"])
def test_key_names_translate_both_ways(keys):
    from hci_envs.actions.keys import parse_combo

    pressed = [k for _, k in parse_combo(keys)]
    via_openai = from_openai(to_openai({"type": "key", "keys": keys}))
    via_osworld = [a for p in to_osworld({"type": "key", "keys": keys}) for a in from_osworld(p)]
    for back in (via_openai, via_osworld):
        assert [[k for _, k in parse_combo(a["keys"])] for a in back] == [pressed]


@pytest.mark.fake
def test_foreign_key_names_arrive_as_our_keys():
    assert to_openai({"type": "key", "keys": "Return"})["keys"] == ["ENTER"]
    assert to_openai({"type": "key", "keys": "up"})["keys"] == ["ARROWUP"]
    assert to_osworld({"type": "key", "keys": "super"})[0]["parameters"]["key"] == "win"
    for pyautogui, ours in [("\n", "Return"), ("winleft", "Super_L"), ("ctrlright", "Control_R"), ("num0", "KP_0"),
                            ("volumemute", "XF86AudioMute"), ("prtsc", "Print"), ("pgdn", "pgdn")]:
        assert from_osworld({"action_type": "PRESS", "parameters": {"key": pyautogui}})[0]["keys"] == ours
    with pytest.raises(UnsupportedActionError, match="no name for the key"):
        to_openai({"type": "key", "keys": "XF86AudioMute"})


@pytest.mark.fake
@pytest.mark.parametrize("translate,payload,message", [
    (from_anthropic, {"action": "key", "text": "  "}, "key needs key names"),
    (from_anthropic, {"action": "left_click", "coordinate": ["a", 2]}, "malformed action"),
    (from_anthropic, {"action": "wait", "duration": 1000}, "wait.ms"),
    (from_openai, {"type": "drag", "path": [{"x": 1}]}, "malformed action"),
    (from_openai, {"type": "scroll", "x": 1, "y": 1, "scroll_y": "50"}, "malformed action"),
    (from_openai, "click", "an action is a JSON object"),
    (from_osworld, {"action_type": "CLICK", "parameters": {"x": 10}}, "'y' is missing"),
    (from_osworld, {"action_type": "CLICK", "parameters": {"num_clicks": "two"}}, "malformed action"),
])
def test_malformed_foreign_payloads_are_typed_errors(translate, payload, message):
    with pytest.raises(InvalidActionError, match=message):
        translate(payload)


@pytest.mark.fake
def test_what_the_other_schema_cannot_say_is_refused():
    with pytest.raises(UnsupportedActionError, match="left button only"):
        to_openai({"type": "click", "x": 1, "y": 2, "button": "right", "count": 2})
    steps = to_osworld({"type": "drag", "path": [[0, 0], [100, 0], [100, 100]]})
    assert [s["action_type"] for s in steps] == ["MOVE_TO", "MOUSE_DOWN", "MOVE_TO", "MOVE_TO", "MOUSE_UP"]


@pytest.mark.fake
@pytest.mark.parametrize("module,fn", [("anthropic", "to_anthropic"), ("openai", "to_openai"),
                                       ("osworld", "to_osworld")])
def test_an_action_on_an_element_has_no_foreign_form(module, fn):
    import importlib

    translate = getattr(importlib.import_module(f"hci_envs.adapters.{module}"), fn)
    with pytest.raises(UnsupportedActionError, match="element numbers") as info:
        translate({"type": "click", "element": 3})
    assert info.value.field == "element"
