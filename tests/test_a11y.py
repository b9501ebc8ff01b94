"""The accessibility tree, set-of-marks and element= on real apps: a GTK window of known widgets, mousepad,
chromium, LibreOffice Writer, xterm (which exposes nothing) and an animation that never settles. The apps run
as the session's agent account; the tree is read from the display's private bus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import need, need_programs

from helpers import ANIMATE, wait_until

HERE = Path(__file__).resolve().parent
WIDGETS = HERE / "apps" / "gtk_widgets.py"
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with GTK's introspection bindings (python3-gi)


@pytest.fixture(scope="module")
def a11y(x11: None) -> None:
    from hci_envs.desktop.a11ybus import available

    need(available() is None, f"the accessibility bus: {available()}")
    need(subprocess.run([SYSTEM_PYTHON, "-c", "import gi; gi.require_version('Gtk', '3.0')"],
                        capture_output=True).returncode == 0, "python3-gi and gir1.2-gtk-3.0 (the GTK test app)")


def widgets_app(rows: int = 6) -> dict[str, Any]:
    return {"command": [SYSTEM_PYTHON, str(WIDGETS), "{home}/widgets.json", str(rows)], "name": "widgets"}


def make_env(apps: list[dict[str, Any]], tmp_path: Path | None = None, **kwargs: Any) -> Any:
    from hci_envs.traits import DesktopEnv

    state: dict[str, Any] = {"apps": apps}
    if tmp_path is not None:
        state["home_template"] = str(tmp_path)
    return DesktopEnv(start_state=state, **kwargs)


def widget_state(env: Any) -> dict[str, Any]:
    for _ in range(100):
        try:
            return json.loads((env.home / "widgets.json").read_text())
        except (OSError, ValueError):
            time.sleep(0.02)
    raise AssertionError("the widgets app wrote no state")


def by_name(nodes: list[dict[str, Any]], role: str, name: str) -> dict[str, Any]:
    found = [n for n in nodes if n["role"] == role and n["name"] == name]
    assert len(found) == 1, (role, name, [(n["role"], n["name"]) for n in nodes])
    return found[0]


@pytest.fixture(scope="module")
def widgets(a11y: None) -> Any:
    env = make_env([widgets_app()])
    env.reset()
    widget_state(env)
    yield env
    env.close()


@pytest.mark.x11
def test_the_tree_names_known_widgets_with_roles_states_values_and_text(widgets):
    tree = widgets.call_tool("accessibility_tree", {}).data
    nodes = tree["nodes"]
    assert tree["apps"] == ["widgets"] and tree["reason"] is None
    frame = by_name(nodes, "frame", "Widgets")
    assert frame["depth"] == 1 and nodes[frame["parent"] - 1]["role"] == "application"
    apply = by_name(nodes, "push button", "Apply")
    assert apply["interactive"] and {"enabled", "showing", "visible"} <= set(apply["states"])
    assert by_name(nodes, "label", "Row 4")["interactive"] is False
    assert by_name(nodes, "check box", "Option 2")["interactive"]
    entries = [n for n in nodes if n["role"] == "text" and n.get("text", "").startswith("value ")]
    assert sorted(n["text"] for n in entries) == [f"value {i}" for i in range(1, 7)]
    assert all("editable" in n["states"] for n in entries)
    assert [n["value"] for n in nodes if n["role"] == "slider"] == [30.0]
    assert [n["value"] for n in nodes if n["role"] == "progress bar"] == [0.5]
    # numbered 1..N in document order; every parent comes before its children
    assert [n["element"] for n in nodes] == list(range(1, len(nodes) + 1))
    assert all(n["parent"] is None or n["parent"] < n["element"] for n in nodes)
    # the model's text says the same
    text = widgets.call_tool("accessibility_tree", {}).text
    assert "push button 'Apply'" in text and "check box 'Option 2'" in text


@pytest.mark.x11
def test_a_compact_tree_leaves_out_only_the_boxes_around_other_elements(widgets):
    """compact drops what a reader learns nothing from (no name, text or value, nothing to act on) and keeps
    everything else, each under its nearest kept ancestor."""
    full = widgets.call_tool("accessibility_tree", {}).data["nodes"]
    compact = widgets.call_tool("accessibility_tree", {"compact": True}).data["nodes"]

    def telling(n: dict[str, Any]) -> bool:
        return n["depth"] == 0 or n["interactive"] or bool(n["name"] or n.get("text")) or "value" in n

    key = lambda n: (n["role"], n["name"], n.get("text"), tuple(n.get("box", ())))  # noqa: E731
    dropped = [n for n in full if not telling(n)]
    assert dropped and all(n["role"] in ("panel", "filler", "scroll pane", "viewport") or not n["name"]
                           for n in dropped)
    assert sorted(map(key, compact)) == sorted(key(n) for n in full if telling(n))
    assert all(n["parent"] is None or compact[n["parent"] - 1]["depth"] == n["depth"] - 1 for n in compact)
    assert len(widgets.call_tool("accessibility_tree", {"compact": True}).text) \
        < len(widgets.call_tool("accessibility_tree", {}).text)


@pytest.mark.x11
def test_each_box_is_its_widget_a_click_at_its_centre_toggles_that_one(widgets):
    nodes = widgets.call_tool("accessibility_tree", {"interactive_only": True}).data["nodes"]
    assert all(n["interactive"] for n in nodes)
    for n in (2, 5):
        box = by_name(nodes, "check box", f"Option {n}")["box"]
        widgets.call_tool("click", {"x": box[0] + box[2] // 2, "y": box[1] + box[3] // 2})
        assert wait_until(lambda: widget_state(widgets)["checked"].get(f"Option {n}") is True, 3)
    assert set(widget_state(widgets)["checked"]) == {"Option 2", "Option 5"}


@pytest.mark.x11
def test_an_element_number_is_clicked_at_its_centre_and_the_recorder_keeps_coordinates(widgets, tmp_path):
    from hci_envs.recorders.recorder import Recorder
    from hci_envs.recorders.store import load_episode

    nodes = widgets.call_tool("accessibility_tree", {}).data["nodes"]
    press = by_name(nodes, "push button", "Press 3")
    recorder = Recorder(widgets, None, tmp_path, source="agent", name="element-click", video=False).start()
    out = widgets.call_tool("click", {"element": press["element"]})
    recorder.stop("done")
    assert wait_until(lambda: widget_state(widgets)["pressed"].get("Press 3") == 1, 3)
    x, y, w, h = press["box"]
    assert x <= out.data["x"] < x + w and y <= out.data["y"] < y + h
    episode = load_episode(tmp_path / "element-click")
    clicks = [step["action"] for step in episode.actions if step["action"]["type"] == "click"]
    assert clicks == [{"type": "click", "x": out.data["x"], "y": out.data["y"]}]


@pytest.mark.x11
def test_elements_are_refused_when_stale_and_forgotten_at_reset(a11y):
    from hci_envs.errors import StaleElementError

    env = make_env([{**widgets_app(), "required": False}])  # it is killed below; the episode goes on
    try:
        env.reset()
        widget_state(env)
        with pytest.raises(StaleElementError, match="no element table yet"):
            env.call_tool("click", {"element": 1})
        nodes = env.call_tool("accessibility_tree", {}).data["nodes"]
        with pytest.raises(StaleElementError, match=f"not in the latest observation \\(elements 1..{len(nodes)}\\)"):
            env.call_tool("click", {"element": len(nodes) + 5})
        press = by_name(nodes, "push button", "Press 1")
        # the app goes away: its elements are gone, and the click says so rather than clicking the desktop
        for _spec, proc in env.desktop.apps():
            proc.kill()
        time.sleep(0.3)
        with pytest.raises(StaleElementError, match="is gone"):
            env.call_tool("click", {"element": press["element"]})
        obs = env.step({"type": "mouse_move", "element": press["element"]})
        assert obs.error["code"] == "STALE_ELEMENT" and not obs.truncated
        env.reset()
        widget_state(env)
        with pytest.raises(StaleElementError, match="no element table yet"):
            env.call_tool("click", {"element": press["element"]})
    finally:
        env.close()


@pytest.mark.x11
def test_coordinates_and_an_element_together_are_refused(widgets):
    from hci_envs.errors import InvalidActionError

    with pytest.raises(InvalidActionError, match="not both"):
        widgets.call_tool("click", {"element": 1, "x": 5, "y": 5})
    with pytest.raises(InvalidActionError, match="give x and y, or element"):
        widgets.call_tool("mouse_move", {})
    with pytest.raises(InvalidActionError):
        widgets.call_tool("click", {"element": 0})


@pytest.mark.x11
def test_a_marked_screenshot_numbers_what_can_be_acted_on_and_a_mark_click_presses_it(widgets):
    from hci_envs.desktop import decode

    out = widgets.call_tool("screenshot", {"marks": True, "max_side": 1000})
    marks = out.data["marks"]
    scale = out.data["scale"]
    assert scale == pytest.approx(1000 / 1280)
    named = {m["name"]: m for m in marks}
    assert {"Apply", "Press 1", "Press 6", "Option 3"} <= set(named)
    assert "Row 1" not in named  # a label is not something to act on
    assert "[1] push button 'Apply'" in out.text or f"[{named['Apply']['element']}] push button 'Apply'" in out.text
    # the tag of each mark is drawn at its box's corner, in the mark's colour (not the window's grey)
    image = decode(out.images[0].data).convert("RGB")
    x, y, _w, _h = named["Press 4"]["box"]
    r, g, b = image.getpixel((x + 1, y + 1))
    assert max(r, g, b) - min(r, g, b) > 60, (r, g, b)
    plain = decode(widgets.call_tool("screenshot", {"max_side": 1000}).images[0].data).convert("RGB")
    assert plain.getpixel((x + 1, y + 1)) != (r, g, b)
    # boxes are in the image's pixels: back in screen pixels, they hold the widget
    tree = {n["name"]: n for n in widgets.call_tool("accessibility_tree", {"interactive_only": True}).data["nodes"]}
    sx, sy, sw, sh = tree["Press 4"]["box"]
    mx, my, mw, mh = named["Press 4"]["box"]
    assert abs(mx / scale - sx) <= 2 and abs(my / scale - sy) <= 2 and abs(mw / scale - sw) <= 3
    # the screenshot's marks are the element table now: a mark's number clicks its widget
    again = widgets.call_tool("screenshot", {"marks": True})
    mark = next(m for m in again.data["marks"] if m["name"] == "Press 6")
    before = widget_state(widgets)["pressed"].get("Press 6", 0)
    widgets.call_tool("click", {"element": mark["element"]})
    assert wait_until(lambda: widget_state(widgets)["pressed"].get("Press 6", 0) == before + 1, 3)


@pytest.mark.x11
def test_observations_carry_the_tree_in_the_screenshots_pixels_and_marks_numbered_as_the_tree(a11y):
    env = make_env([widgets_app()], observation={"format": "jpeg", "max_side": 640, "accessibility": True,
                                                  "marks": True})
    try:
        obs = env.reset()
        widget_state(env)
        obs = env.step({"type": "wait", "ms": 10})
        tree = obs.accessibility_tree
        assert obs.screenshot.scale == tree["scale"] == 0.5
        nodes = {n["element"]: n for n in tree["nodes"]}
        assert obs.marks and all(nodes[m["element"]]["name"] == m["name"] for m in obs.marks)
        apply = next(n for n in tree["nodes"] if n["name"] == "Apply")
        assert apply["box"][2] < 50  # 71 px wide on the screen, halved
        mark = next(m for m in obs.marks if m["name"] == "Press 2")
        env.step({"type": "click", "element": mark["element"]})
        assert wait_until(lambda: widget_state(env)["pressed"].get("Press 2") == 1, 3)
    finally:
        env.close()


@pytest.mark.apps
def test_a_gtk_editor_exposes_its_menus_and_the_text_typed_into_it(a11y):
    need_programs("mousepad")
    env = make_env([{"command": ["mousepad"], "name": "mousepad"}])
    try:
        env.reset()
        env.call_tool("type_text", {"text": "héllo ✓ accessible"})

        def typed() -> list[dict[str, Any]]:  # the editor takes the keys a moment after X has them
            nodes = env.call_tool("accessibility_tree", {"app": "mousepad"}).data["nodes"]
            return [n for n in nodes if n["role"] == "text" and "editable" in n["states"]
                    and "héllo ✓ accessible" in n.get("text", "")]

        assert wait_until(lambda: typed(), 5)
        tree = env.call_tool("accessibility_tree", {"app": "mousepad"}).data
        menus = {n["name"] for n in tree["nodes"] if n["role"] == "menu"}
        assert {"File", "Edit", "Search", "View", "Document", "Help"} <= menus
        assert env.call_tool("accessibility_tree", {"app": "no-such-app"}).data["nodes"] == []
    finally:
        env.close()


@pytest.mark.browser
def test_chromium_exposes_web_content_and_a_mark_click_presses_a_page_button(a11y, tmp_path):
    need_programs("chromium")
    page = tmp_path / "page.html"
    page.write_text("<title>Marks</title><h1 id=h>Waiting</h1>"
                    "<button onclick=\"document.getElementById('h').textContent='Pressed'\">Press me</button>"
                    "<input value=hello><a href='#next'>Next page</a>")
    command = ["chromium", "--no-sandbox", "--no-first-run", "--no-default-browser-check", "--password-store=basic",
               "--disable-gpu", "--force-renderer-accessibility", "--user-data-dir={home}/.chromium",
               "file://{home}/page.html"]
    env = make_env([{"command": command, "name": "browser", "timeout": 60}], tmp_path)  # the page is a home file
    try:
        env.reset()

        def page_nodes() -> list[dict[str, Any]]:
            return env.call_tool("accessibility_tree", {}).data["nodes"]

        assert wait_until(lambda: any(n["name"] == "Press me" for n in page_nodes()), 15)
        nodes = page_nodes()
        assert by_name(nodes, "heading", "Waiting")
        assert by_name(nodes, "link", "Next page")["interactive"]
        assert any(n["role"] == "entry" and n.get("text") == "hello" for n in nodes)
        marks = env.call_tool("screenshot", {"marks": True}).data["marks"]
        button = next(m for m in marks if m["name"] == "Press me")
        env.call_tool("click", {"element": button["element"]})
        assert wait_until(lambda: any(n["role"] == "heading" and n["name"] == "Pressed" for n in page_nodes()), 5)
    finally:
        env.close()


@pytest.mark.apps
def test_menu_items_never_opened_are_in_the_whole_tree(a11y):
    """GTK's menus say they do not know how many children they have (-1); the items the app's cache holds are
    theirs all the same (OSWorld's checkers look for a radio menu item's checked state, say)."""
    need_programs("galculator")
    env = make_env([{"command": ["galculator"], "name": "galculator", "ready": "accessible"}])
    try:
        env.reset()
        nodes = env.call_tool("accessibility_tree", {"app": "galculator", "visible_only": False}).data["nodes"]
        modes = {n["name"]: "checked" in n["states"] for n in nodes if n["role"] == "radio menu item"}
        assert modes.get("Basic Mode") is True and modes.get("Scientific Mode") is False, modes
    finally:
        env.close()


@pytest.mark.apps
def test_libreoffice_writer_exposes_its_toolbar_and_a_mark_click_toggles_bold(a11y):
    need_programs("soffice")
    command = ["soffice", "--writer", "--norestore", "--nologo", "--nofirststartwizard",
               "-env:UserInstallation=file://{home}/.lo"]
    env = make_env([{"command": command, "name": "writer", "timeout": 120, "env": {"SAL_USE_VCLPLUGIN": "gtk3"}}])
    try:
        env.reset()

        def bold() -> dict[str, Any] | None:
            nodes = env.call_tool("accessibility_tree", {"app": "writer", "interactive_only": True}).data["nodes"]
            return next((n for n in nodes if n["role"] == "toggle button" and n["name"] == "Bold"), None)

        assert wait_until(lambda: bold() is not None, 30)
        # LibreOffice 7.4 reports its toolbars 25 px too high (without the menu bar above them) until its
        # window has taken a click; a click into the empty page puts that right and changes nothing.
        env.call_tool("click", {"x": 600, "y": 400})
        assert wait_until(lambda: bold()["box"][1] > 80, 5), bold()
        assert "checked" not in bold()["states"]
        marks = env.call_tool("screenshot", {"marks": True}).data["marks"]
        mark = next(m for m in marks if m["role"] == "toggle button" and m["name"] == "Bold")
        env.call_tool("click", {"element": mark["element"]})
        assert wait_until(lambda: "checked" in (bold() or {}).get("states", ()), 5)
        menus = {n["name"] for n in env.call_tool("accessibility_tree", {}).data["nodes"] if n["role"] == "menu"}
        assert {"File", "Edit", "Format", "Table"} <= menus
        # The document's text: its paragraphs are in the tree with what they say (LibreOffice says its text
        # document manages its descendants, and gives the paragraphs in view when asked)
        env.call_tool("type_text", {"text": "Plans for the méadow\nSecond line"})

        def paragraphs() -> list[str]:
            nodes = env.call_tool("accessibility_tree", {"app": "writer"}).data["nodes"]
            return [n.get("text", "") for n in nodes if n["role"] == "paragraph"]

        assert wait_until(lambda: paragraphs()[:2] == ["Plans for the méadow", "Second line"], 10), paragraphs()
    finally:
        env.close()


@pytest.mark.x11
def test_an_app_that_exposes_nothing_gives_an_empty_tree_with_the_reason(a11y):
    need_programs("xterm")
    env = make_env([{"command": ["xterm"], "name": "xterm"},
                    {"command": [sys.executable, str(ANIMATE), "400", "300", "10"], "name": "animation"}])
    try:
        env.reset()
        out = env.call_tool("accessibility_tree", {})
        assert out.data["nodes"] == [] and "no app has registered" in out.data["reason"]
        assert "no app has registered" in out.text
        shot = env.call_tool("screenshot", {"marks": True})  # on a screen that never stops changing
        assert shot.data["marks"] == [] and shot.images
    finally:
        env.close()


@pytest.mark.x11
def test_a_tree_beside_an_animation_and_a_gtk_app(a11y):
    env = make_env([widgets_app(), {"command": [sys.executable, str(ANIMATE), "300", "200", "5"],
                                    "name": "animation"}])
    try:
        env.reset()
        widget_state(env)
        for _ in range(3):
            nodes = env.call_tool("accessibility_tree", {"interactive_only": True}).data["nodes"]
            assert by_name(nodes, "push button", "Apply")
    finally:
        env.close()


@pytest.mark.fake
def test_the_fake_desktop_has_no_tree_and_says_why():
    from hci_envs.errors import StaleElementError

    env = make_env([{"command": ["true"]}], desktop="fake")
    try:
        env.reset()
        out = env.call_tool("accessibility_tree", {})
        assert out.data["nodes"] == [] and "no accessibility tree" in out.data["reason"]
        with pytest.raises(StaleElementError, match="no accessibility tree"):
            env.call_tool("click", {"element": 1})
    finally:
        env.close()


@pytest.mark.x11
def test_the_bus_lets_in_the_sessions_agent_and_no_other(a11y):
    """Another session's agent cannot read this desktop's tree or pose as its apps; the agent cannot swap
    the bus for one of its own."""
    from hci_envs.sandbox.accounts import AgentAccount
    from hci_envs.desktop.a11ybus import REGISTRY_NAME

    env = make_env([widgets_app()], isolation="uid")
    other = make_env([], isolation="uid")
    try:
        env.reset()
        other.reset()
        widget_state(env)
        bus = env.desktop._a11y_bus
        assert env.account is not None and other.account is not None
        assert oct(os.stat(bus.folder).st_mode & 0o777) == "0o711" and os.stat(bus.folder).st_uid == os.getuid()
        probe = ("import asyncio, sys\nfrom dbus_fast.aio import MessageBus\n"
                 "async def main():\n"
                 f"    bus = await MessageBus(bus_address={bus.address!r}).connect()\n"
                 "    print('connected', bus.unique_name)\n"
                 "asyncio.run(main())\n")

        def run_as(account: AgentAccount) -> subprocess.CompletedProcess[str]:
            return subprocess.run(account.command([sys.executable, "-c", probe]), capture_output=True, text=True,
                                  timeout=30, env={"PATH": os.environ["PATH"]})

        assert "connected" in run_as(env.account).stdout
        refused = run_as(other.account)
        assert "connected" not in refused.stdout and refused.returncode != 0, refused
        replace = subprocess.run(env.account.command(["sh", "-c", f"rm -f {bus.socket}; touch {bus.folder}/x"]),
                                 capture_output=True, text=True)
        assert replace.returncode != 0 and bus.socket.exists()
        from hci_envs.desktop.a11y import name_has_owner

        assert name_has_owner(bus.address, REGISTRY_NAME)
    finally:
        other.close()
        env.close()


@pytest.mark.x11
def test_osworld_agents_get_their_xml_tree_from_ours(widgets):
    import xml.etree.ElementTree as ET

    from hci_envs.adapters.osworld_actions import NAMESPACES, accessibility_tree_xml, observation

    tree = widgets.call_tool("accessibility_tree", {"scale": 0.5}).data
    root = ET.fromstring(accessibility_tree_xml(tree))
    st, cp = "{%s}" % NAMESPACES["st"], "{%s}" % NAMESPACES["cp"]
    app = root.find("application")
    assert root.tag == "desktop-frame" and app is not None and app.get("name")
    (apply,) = [e for e in root.iter("push-button") if e.get("name") == "Apply"]
    assert apply.get(st + "showing") == "true" and apply.get(st + "enabled") == "true"
    ours = next(n for n in tree["nodes"] if n["name"] == "Apply")["box"]  # at scale 0.5
    x, y = (int(v) for v in apply.get(cp + "screencoord").strip("()").split(","))
    assert abs(x - ours[0] * 2) <= 1 and abs(y - ours[1] * 2) <= 1  # OSWorld's are screen pixels
    assert [e.text for e in root.iter("text") if (e.text or "").startswith("value 1")]
    obs = widgets.observe().model_dump()
    obs["accessibility_tree"] = tree
    mapped = observation(obs, instruction="press Apply")
    assert mapped["screenshot"][:4] == b"\x89PNG" and "push-button" in mapped["accessibility_tree"]
