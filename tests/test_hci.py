"""The desktop's screen, keyboard and mouse, driven through MCP by the official client, on a real Tk app."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    MANY_CHARACTERS, McpClient, by_app, image_of, text_of, typing_desktop, wait_until, window_title,
)

UNICODE = "héllo wörld ✓ 你好 @#$%^&*()"


@pytest.fixture
def mcp(fresh_probe):
    server, probe = fresh_probe
    with McpClient(f"{server.base_url}/mcp") as client:
        yield client, probe


def focus(client, probe, widget):
    x, y = probe.center(widget)
    client.ok("click", {"x": x, "y": y})
    return x, y


@pytest.mark.x11
def test_tools_are_the_vocabulary_with_read_only_annotations(mcp):
    from hci_envs.actions import ACTIONS

    client, _ = mcp
    tools = {t.name: t for t in client.list_tools()}
    assert set(tools) == set(ACTIONS) | {"find_tools", "browse_tools"}  # the vocabulary, and discovery
    read_only = {name for name, t in tools.items() if t.annotations and t.annotations.read_only_hint}
    assert read_only == {"screenshot", "cursor_position", "screen_size", "clipboard_get", "accessibility_tree",
                         "find_tools", "browse_tools"}
    assert not {"reset", "step", "state", "snapshot"} & set(tools)
    assert tools["click"].input_schema["properties"]["count"]["maximum"] == 3


@pytest.mark.x11
def test_click_on_a_button_changes_it(mcp):
    client, probe = mcp
    state = probe.state()
    x, y = probe.center("button", state)
    before = image_of(client.ok("screenshot", {})).getpixel((x - 40, y))
    assert state["clicks"] == 0
    client.ok("click", {"x": x, "y": y})
    probe.wait_for(lambda s: s["clicks"] == 1, what="one click on the button")
    client.ok("mouse_move", {"x": 1000, "y": 700, "settle": True})  # off the button: no hover colour
    after = image_of(client.ok("screenshot", {})).getpixel((x - 40, y))
    assert after != before and after[1] > after[0], f"button colour {before} -> {after}, expected green"


@pytest.mark.x11
def test_double_and_triple_click_select_a_word_and_a_line(mcp):
    client, probe = mcp
    state = probe.state()
    tx, ty, _, _ = state["widgets"]["text"]
    bx, by, bw, bh = state["text_char_bbox"]["beta"]
    client.ok("click", {"x": tx + bx + 2, "y": ty + by + bh // 2, "count": 2})
    probe.wait_for(lambda s: s["text_selection"] == "beta", what="'beta' selected by a double click")
    lx, ly, _, lh = state["text_char_bbox"]["line2"]
    client.ok("click", {"x": tx + lx, "y": ty + ly + lh // 2, "count": 3})
    probe.wait_for(lambda s: s["text_selection"].strip() == "second line of text here",
                   what="the second line selected by a triple click")


@pytest.mark.x11
def test_drag_selects_text(mcp):
    client, probe = mcp
    state = probe.state()
    tx, ty, _, _ = state["widgets"]["text"]
    ax, ay, _, ah = state["text_char_bbox"]["alpha"]
    gx, gy, gw, gh = state["text_char_bbox"]["gamma_end"]
    client.ok("drag", {"path": [[tx + ax, ty + ay + ah // 2], [tx + gx + gw, ty + gy + gh // 2]]})
    probe.wait_for(lambda s: s["text_selection"] == "alpha beta gamma", what="a dragged selection")


@pytest.mark.x11
def test_scroll_moves_the_list(mcp):
    client, probe = mcp
    x, y = probe.center("listbox")
    assert probe.state()["listbox_first_visible"] == 0
    client.ok("scroll", {"x": x, "y": y, "dy": 5})
    state = probe.wait_for(lambda s: s["listbox_first_visible"] > 0, what="the list to scroll down")
    top = state["listbox_first_visible"]
    client.ok("scroll", {"x": x, "y": y, "dy": -2})
    probe.wait_for(lambda s: 0 <= s["listbox_first_visible"] < top, what="the list to scroll back up")


@pytest.mark.x11
@pytest.mark.parametrize("mode", ["keys", "paste", "auto"])
def test_type_text_arrives_exactly(mcp, mode):
    client, probe = mcp
    focus(client, probe, "entry")
    result = client.ok("type_text", {"text": UNICODE, "mode": mode})
    assert result.structured_content["chars"] == len(UNICODE)
    probe.wait_for(lambda s: s["entry"] == UNICODE, what=f"typed unicode ({mode}) in the Entry")


@pytest.mark.x11
def test_ctrl_a_c_v(mcp):
    client, probe = mcp
    focus(client, probe, "entry")
    client.ok("type_text", {"text": "copy me"})
    probe.wait_for(lambda s: s["entry"] == "copy me", what="typed text")
    client.ok("key", {"keys": "ctrl+a"})
    probe.wait_for(lambda s: s["entry_selection"] == "copy me", what="ctrl+a to select all")
    client.ok("key", {"keys": "ctrl+c"})
    assert client.ok("clipboard_get").structured_content["text"] == "copy me"
    focus(client, probe, "entry2")
    client.ok("key", {"keys": ["ctrl+v", "ctrl+v"]})
    probe.wait_for(lambda s: s["entry2"] == "copy mecopy me", what="two pastes into the second Entry")


@pytest.mark.x11
def test_clipboard_set_then_paste(mcp):
    client, probe = mcp
    client.ok("clipboard_set", {"text": "from the clipboard ✓ 日本"})
    assert client.ok("clipboard_get").structured_content["text"] == "from the clipboard ✓ 日本"
    focus(client, probe, "entry2")
    client.ok("key", {"keys": "ctrl+v"})
    probe.wait_for(lambda s: s["entry2"] == "from the clipboard ✓ 日本", what="the pasted clipboard")


@pytest.mark.x11
def test_key_down_up_and_hold(mcp):
    client, probe = mcp
    focus(client, probe, "entry")
    client.ok("key_down", {"key": "shift"})
    client.ok("key", {"keys": "a"})
    client.ok("key_up", {"key": "shift"})
    client.ok("key", {"keys": "b", "repeat": 2})
    probe.wait_for(lambda s: s["entry"] == "Abb", what="shift held by key_down")
    client.ok("hold_key", {"keys": "shift+c", "seconds": 0.1})
    probe.wait_for(lambda s: s["entry"].startswith("AbbC"), what="hold_key")


@pytest.mark.x11
def test_mouse_down_move_up_drags(mcp):
    client, probe = mcp
    state = probe.state()
    tx, ty, _, _ = state["widgets"]["text"]
    ax, ay, _, ah = state["text_char_bbox"]["alpha"]
    bx, by, bw, bh = state["text_char_bbox"]["beta"]
    client.ok("mouse_move", {"x": tx + ax, "y": ty + ay + ah // 2})
    client.ok("mouse_down", {})
    client.ok("mouse_move", {"x": tx + bx + 4 * bw - 2, "y": ty + by + bh // 2})
    client.ok("mouse_up", {})
    probe.wait_for(lambda s: s["text_selection"] == "alpha beta", what="a selection by mouse_down/up")
    pos = client.ok("cursor_position").structured_content
    assert (pos["x"], pos["y"]) == (tx + bx + 4 * bw - 2, ty + by + bh // 2)


@pytest.mark.x11
def test_modifiers_on_click(mcp):
    client, probe = mcp
    state = probe.state()
    tx, ty, _, _ = state["widgets"]["text"]
    ax, ay, _, ah = state["text_char_bbox"]["alpha"]
    gx, gy, gw, gh = state["text_char_bbox"]["gamma_end"]
    client.ok("click", {"x": tx + ax, "y": ty + ay + ah // 2})
    client.ok("click", {"x": tx + gx + gw, "y": ty + gy + gh // 2, "modifiers": ["shift"]})
    probe.wait_for(lambda s: s["text_selection"] == "alpha beta gamma", what="shift+click extending a selection")


@pytest.mark.x11
@pytest.mark.parametrize("fmt,mime", [("png", "PNG"), ("jpeg", "JPEG"), ("webp", "WEBP")])
def test_screenshot_formats_decode_to_the_screen_size(mcp, fmt, mime):
    client, _ = mcp
    result = client.ok("screenshot", {"format": fmt})
    image = image_of(result)
    assert image.format == mime
    assert image.size == (1280, 800)
    info = result.structured_content
    assert (info["width"], info["height"], info["scale"]) == (1280, 800, 1.0)


@pytest.mark.x11
def test_region_and_downscaling(mcp):
    client, _ = mcp
    full = image_of(client.ok("screenshot", {"format": "png"})).convert("RGB")
    part = client.ok("screenshot", {"format": "png", "region": {"x": 100, "y": 50, "width": 300, "height": 200}})
    image = image_of(part).convert("RGB")
    assert image.size == (300, 200)
    assert image.tobytes() == full.crop((100, 50, 400, 250)).tobytes()
    assert (part.structured_content["left"], part.structured_content["top"]) == (100, 50)
    half = client.ok("screenshot", {"max_side": 640})
    assert image_of(half).size == (640, 400) and half.structured_content["scale"] == 0.5
    quarter = client.ok("screenshot", {"scale": 0.25, "format": "jpeg"})
    assert image_of(quarter).size == (320, 200) and quarter.structured_content["scale"] == 0.25
    odd = client.ok("screenshot", {"max_side": 1000})
    assert image_of(odd).size == (1000, 625)


@pytest.mark.x11
def test_click_in_downscaled_coordinates_lands_on_the_right_pixel(mcp):
    client, probe = mcp
    shot = client.ok("screenshot", {"max_side": 640})
    scale = shot.structured_content["scale"]
    assert scale == 0.5
    cx, cy, cw, ch = probe.state()["widgets"]["canvas"]
    # A screen pixel even in both axes is exactly one pixel of the half-size image.
    target = ((cx + 200) // 2 * 2, (cy + 100) // 2 * 2)
    client.ok("click", {"x": target[0] // 2, "y": target[1] // 2, "scale": scale})
    state = probe.wait_for(lambda s: s["marks"], what="a click on the canvas")
    assert state["marks"][-1] == [target[0] - cx, target[1] - cy]


BAD_CALLS = [
    ("click", {"x": 5000, "y": 10}, "off screen"),
    ("click", {"x": 99999, "y": 10}, "off screen"),
    ("click", {"x": -1, "y": 10}, "greater than or equal to 0"),
    ("click", {"x": 10}, "both x and y"),
    ("click", {"x": 700, "y": 10, "scale": 0.5}, "off screen"),
    ("click", {"x": "left", "y": 10}, "valid integer"),
    ("click", {"x": 10, "y": 10, "count": 4}, "less than or equal to 3"),
    ("click", {"x": 10, "y": 10, "button": "fourth"}, "left"),
    ("key", {"keys": "ctrl+nosuchkey"}, "unknown key name 'nosuchkey'"),
    ("key", {"keys": "cttrl+c"}, "did you mean"),
    ("key_down", {"key": "F99"}, "F1 to F35"),
    ("drag", {"path": [[1, 2]]}, "at least 2"),
    ("drag", {"path": [[1, 2], [3]]}, "path"),
    ("wait", {"ms": -5}, "greater than or equal to 0"),
    ("type_text", {"text": "x" * 100_001}, "at most 100000"),
    ("type_text", {"text": ""}, "at least 1"),
    ("type_text", {"text": "a", "mode": "telepathy"}, "keys"),
    ("scroll", {"dx": 0, "dy": 0}, "non-zero"),
    ("screenshot", {"region": {"x": 1200, "y": 0, "width": 200, "height": 10}}, "extends past"),
    ("screenshot", {"scale": 0.5, "max_side": 100}, "not both"),
    ("screenshot", {"format": "png", "quality": 50}, "jpeg and webp only"),
    ("screenshot", {"format": "bmp"}, "png"),
    ("hold_key", {"keys": "a", "seconds": 100}, "less than or equal to 30"),
    ("nonexistent_tool", {}, "nonexistent_tool"),
]


@pytest.mark.x11
@pytest.mark.parametrize("tool,arguments,expect", BAD_CALLS, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(BAD_CALLS)])
def test_bad_input_is_a_readable_tool_error_and_the_server_carries_on(mcp, tool, arguments, expect):
    client, _ = mcp
    result = client.call(tool, arguments)
    assert result.is_error
    message = text_of(result)
    assert expect in message, message
    assert len(message) < 2000
    after = client.ok("screen_size")
    assert after.structured_content == {"width": 1280, "height": 800}


@pytest.mark.x11
def test_settle_waits_for_the_screen(mcp):
    client, probe = mcp
    x, y = probe.center("button")
    result = client.ok("click", {"x": x, "y": y, "settle": True})
    assert result.structured_content["settled"] is True
    assert probe.state()["clicks"] == 1


TEXTAREA = ("data:text/html;charset=utf-8,<title>empty</title><textarea autofocus style='position:fixed;inset:0;"
            "width:100%;height:100%' oninput=\"document.title='got:'+this.value.length+':'+this.value.slice(-12)\">"
            "</textarea>")


@contextlib.contextmanager
def text_app(app: str) -> Iterator[tuple[Any, Callable[[], str]]]:
    """A workstation whose one app has the keyboard (chromium on TEXTAREA); yields it and the app's window title."""
    from conftest import need_programs

    need_programs(app)
    with typing_desktop(app, page=TEXTAREA) as (env, _got):
        yield env, lambda: window_title(env)


def saved_file(env: Any, app: str) -> Path:
    """Where the terminal or the editor (after ctrl+s) keeps what was typed into it."""
    if app == "xterm":
        return env.home / "typed.txt"
    env.step([{"type": "key", "keys": "ctrl+s"}, {"type": "wait", "ms": 500}])
    return env.home / "note.txt"


@pytest.mark.parametrize("app", by_app("xterm", "mousepad", "chromium"))
def test_paste_arrives_in_a_terminal_a_gtk_editor_and_a_browser(x11, app):
    """'paste' (and 'auto' for text the keyboard cannot hold) reaches xterm, a GTK app and chromium (the Tk
    app is covered above): shift+Insert, with the text offered on CLIPBOARD and PRIMARY."""
    with text_app(app) as (env, title):
        first = "pasted ✓ 日本 ünïcödé\n" if app == "xterm" else "pasted ✓ 日本 ünïcödé "
        obs = env.step({"type": "type_text", "text": first, "mode": "paste"})
        assert obs.error is None, obs.error
        many = MANY_CHARACTERS + ("\n" if app == "xterm" else "")
        obs = env.step({"type": "type_text", "text": many, "mode": "auto"})
        assert obs.error is None and obs.data["mode"] == "paste", (obs.error, obs.data)
        expected = first + many
        if app == "xterm":
            saved = saved_file(env, app)
            assert wait_until(lambda: saved.exists() and saved.read_text() == expected, 20), saved.read_text()
        elif app == "mousepad":
            saved = saved_file(env, app)
            assert wait_until(lambda: saved.exists() and saved.read_text().rstrip("\n") == expected, 20), \
                saved.read_text()
        else:
            want = f"got:{len(expected)}:{expected[-12:]}"
            assert wait_until(lambda: title().startswith(want), 20), (title(), want)


@pytest.mark.parametrize("app", by_app("mousepad", "chromium"))
def test_a_paste_over_selected_text_replaces_it(x11, app):
    """Select all, then paste: the text replaces the selection, as it does for a person. (Offering PRIMARY to
    a GTK text view takes its selection away first, and the paste then lands beside the old text.)"""
    with text_app(app) as (env, title):
        env.step({"type": "type_text", "text": "old words here", "mode": "keys"})
        env.step({"type": "key", "keys": "ctrl+a"})
        obs = env.step({"type": "type_text", "text": "new ✓ 文字", "mode": "paste"})
        assert obs.error is None, obs.error
        if app == "mousepad":
            saved = saved_file(env, app)
            assert wait_until(lambda: saved.exists() and saved.read_text().rstrip("\n") == "new ✓ 文字", 20), \
                saved.read_text()
        else:
            want = f"got:{len('new ✓ 文字')}:new ✓ 文字"
            assert wait_until(lambda: title().startswith(want), 20), (title(), want)


@pytest.mark.parametrize("app", by_app("xterm", "mousepad"))
def test_keys_mode_types_more_characters_than_the_keyboard_has_spare_keys(x11, app):
    """Past the ~220 scratch slots, 'keys' types in batches and remaps slots between them once the app has
    drawn the last batch: every character arrives, in order, in a terminal and in a GTK editor."""
    with text_app(app) as (env, _title):
        text = MANY_CHARACTERS + ("\n" if app == "xterm" else "")
        obs = env.step({"type": "type_text", "text": text, "mode": "keys"})
        assert obs.error is None and obs.data["mode"] == "keys" and obs.data["pauses"] >= 1, (obs.error, obs.data)
        saved = saved_file(env, app)
        assert wait_until(lambda: saved.exists() and saved.read_text().rstrip("\n") == MANY_CHARACTERS, 30), \
            saved.read_text() if saved.exists() else "nothing saved"
