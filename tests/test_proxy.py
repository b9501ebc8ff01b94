"""People on the same desktop: native viewers (vncdotool) and the browser (chromium + noVNC), roles,
takeover, and refusals that leave everyone else working."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import need, need_programs
from helpers import McpClient, Probe, ServerProcess, agent_writable_dir, image_of, text_of
from PIL import Image, ImageChops
from rfb_client import RfbClient


@pytest.fixture(scope="module")
def vnc_server(x11, tmp_path_factory):
    need_programs("x11vnc")
    probe = Probe(tmp_path_factory.mktemp("vncprobe"))
    server = ServerProcess("--app", " ".join(f"'{c}'" for c in probe.command()), "--vnc-port", "0",
                           "--takeover-timeout", "3")
    server.start()
    try:
        probe.wait_for(lambda s: s.get("ready"))
        yield server, probe
    finally:
        server.stop()


@pytest.fixture
def vnc(vnc_server):
    server, probe = vnc_server
    probe.state_path.unlink(missing_ok=True)
    with server.http() as http:
        http.post("/control", json={"holder": "auto"}).raise_for_status()
        assert http.post("/reset", json={}).status_code == 200
        state = http.get("/state").json()
    probe.wait_for(lambda s: s.get("ready") and s["clicks"] == 0, what="a fresh probe app")
    return server, probe, state


def vncdo(state, role: str, *commands: str) -> subprocess.CompletedProcess[str]:
    port = state["vnc_native_port"]
    password = state["vnc_secrets"][role]
    return subprocess.run(
        [str(Path(sys.executable).parent / "vncdo"), "-s", f"127.0.0.1::{port}", "-p", password, *commands],
        capture_output=True, text=True, timeout=60,
    )


def differs_outside(a: Image.Image, b: Image.Image, hole: tuple[int, int], radius: int = 40) -> int:
    """Pixels that differ between two screens, outside a square around the pointer."""
    diff = ImageChops.difference(a.convert("RGB"), b.convert("RGB")).convert("L").point(lambda v: 255 if v else 0)
    x, y = hole
    diff.paste(0, (max(0, x - radius), max(0, y - radius), x + radius, y + radius))
    return diff.histogram()[255]


def canvas_image(page) -> Image.Image:
    """The pixels of noVNC's framebuffer canvas (not a screenshot: the page's overlays stay out)."""
    import base64
    import io

    url = page.evaluate("document.querySelector('#noVNC_container canvas').toDataURL('image/png')")
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")


def mostly_equal(a: Image.Image, b: Image.Image, hole: tuple[int, int]) -> float:
    """Share of pixels that differ visibly (noVNC receives lossy JPEG tiles, so exact equality is too much)."""
    diff = ImageChops.difference(a.convert("RGB"), b.convert("RGB")).convert("L").point(lambda v: 255 if v > 48 else 0)
    x, y = hole
    diff.paste(0, (max(0, x - 40), max(0, y - 40), x + 40, y + 40))
    return diff.histogram()[255] / (a.width * a.height)


@pytest.mark.x11
def test_view_only_viewer_sees_the_screen_and_cannot_act(vnc, tmp_path):
    server, probe, state = vnc
    shot = tmp_path / "vnc.png"
    out = vncdo(state, "view", "capture", str(shot))
    assert out.returncode == 0, out.stderr
    with McpClient(f"{server.base_url}/mcp") as mcp:
        mcp_image = image_of(mcp.ok("screenshot", {"format": "png"}))
        pointer = mcp.ok("cursor_position").structured_content
    vnc_image = Image.open(shot)
    assert vnc_image.size == mcp_image.size == (1280, 800)
    assert differs_outside(vnc_image, mcp_image, (pointer["x"], pointer["y"])) == 0
    x, y = probe.center("button")
    out = vncdo(state, "view", "move", str(x), str(y), "click", "1", "pause", "0.3")
    assert out.returncode == 0, out.stderr
    time.sleep(0.5)
    assert probe.state()["clicks"] == 0, "a view-only viewer's click reached the desktop"


@pytest.mark.x11
def test_control_viewer_click_presses_the_button(vnc):
    server, probe, state = vnc
    x, y = probe.center("button")
    out = vncdo(state, "control", "move", str(x), str(y), "click", "1", "pause", "0.2")
    assert out.returncode == 0, out.stderr
    probe.wait_for(lambda s: s["clicks"] == 1, what="the control viewer's click")


@pytest.mark.browser
def test_browser_view_shows_the_desktop_and_clicks_press_the_button(vnc):
    need_programs("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        need(False, "playwright (pip install 'hci-envs[test]')")
    server, probe, state = vnc
    url = state["vnc_url"].replace("resize=scale", "resize=off")
    with McpClient(f"{server.base_url}/mcp") as mcp:
        mcp.ok("mouse_move", {"x": 1279, "y": 799})  # park the pointer away from what we compare
        expected = image_of(mcp.ok("screenshot", {"format": "png"})).convert("RGB")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 950})
            page.goto(url)
            page.wait_for_selector("#noVNC_status.noVNC_status_normal", state="attached", timeout=20000)
            canvas = page.locator("#noVNC_container canvas")
            page.wait_for_function(
                "(() => { const c = document.querySelector('#noVNC_container canvas');"
                " return c && c.width === 1280 && c.height === 800; })()", timeout=20000)
            share = 1.0
            for _ in range(40):  # the first frames may still be arriving
                seen = canvas_image(page)
                share = mostly_equal(seen, expected, (1279, 799))
                if share < 0.001:
                    break
                time.sleep(0.25)
            assert share < 0.001, f"the canvas does not show the desktop ({share:.2%} of pixels differ)"
            blank = Image.new("RGB", expected.size)
            assert mostly_equal(blank, expected, (1279, 799)) > 0.2  # the comparison can tell screens apart
            box = canvas.bounding_box()
            x, y = probe.center("button")
            page.mouse.move(box["x"] + x, box["y"] + y)  # as a person would: point, then click
            time.sleep(0.2)
            page.mouse.click(box["x"] + x, box["y"] + y)
            probe.wait_for(lambda s: s["clicks"] == 1, what="a click in the browser canvas")
        finally:
            browser.close()


@pytest.mark.browser
def test_browser_view_only_url_cannot_act(vnc):
    need_programs("chromium")
    from playwright.sync_api import sync_playwright

    server, probe, state = vnc
    url = state["vnc_view_url"].replace("resize=scale", "resize=off")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 950})
            page.goto(url)
            page.wait_for_function(
                "(() => { const c = document.querySelector('#noVNC_container canvas');"
                " return c && c.width === 1280; })()", timeout=20000)
            box = page.locator("#noVNC_container canvas").bounding_box()
            x, y = probe.center("button")
            page.mouse.move(box["x"] + x, box["y"] + y)
            time.sleep(0.2)
            page.mouse.click(box["x"] + x, box["y"] + y)
            time.sleep(0.7)
        finally:
            browser.close()
    assert probe.state()["clicks"] == 0


@pytest.mark.x11
def test_takeover_blocks_agent_input_until_released(vnc):
    server, probe, state = vnc
    port, control = state["vnc_native_port"], state["vnc_secrets"]["control"]
    human = RfbClient.tcp(port, control)
    x, y = probe.center("button")
    try:
        with McpClient(f"{server.base_url}/mcp") as mcp:
            human.click(x, y)
            probe.wait_for(lambda s: s["clicks"] == 1, what="the human's click")
            refused = mcp.call("click", {"x": x, "y": y})
            assert refused.is_error and "human control" in text_of(refused)
            assert mcp.ok("screenshot", {"format": "jpeg"}), "screenshots must keep working"
            with server.http() as http:
                status = http.get("/control").json()
                assert status["holder"] == "human" and status["viewer"]
                assert http.post("/control", json={"holder": "agent"}).json()["holder"] == "agent"
            mcp.ok("click", {"x": x, "y": y})
            probe.wait_for(lambda s: s["clicks"] == 2, what="the agent's click after revoking")
            human.click(x, y)  # dropped: the control plane gave the desktop to the agent
            time.sleep(0.5)
            assert probe.state()["clicks"] == 2
            with server.http() as http:
                http.post("/control", json={"holder": "human"})
            refused = mcp.call("type_text", {"text": "x"})
            assert refused.is_error and "control plane gave it to people" in text_of(refused)
            with server.http() as http:
                http.post("/control", json={"holder": "auto"})
            human.click(x, y)
            probe.wait_for(lambda s: s["clicks"] == 3, what="the human's click in auto mode")
            assert mcp.call("click", {"x": x, "y": y}).is_error
            time.sleep(3.3)  # --takeover-timeout 3: the hold lapses without human input
            mcp.ok("click", {"x": x, "y": y})
            probe.wait_for(lambda s: s["clicks"] == 4, what="the agent's click after the hold lapsed")
    finally:
        human.close()


@pytest.mark.x11
def test_disconnecting_returns_control_to_the_agent(vnc):
    server, probe, state = vnc
    human = RfbClient.tcp(state["vnc_native_port"], state["vnc_secrets"]["control"])
    x, y = probe.center("button")
    human.click(x, y)
    probe.wait_for(lambda s: s["clicks"] == 1)
    with McpClient(f"{server.base_url}/mcp") as mcp:
        assert mcp.call("click", {"x": x, "y": y}).is_error
        human.close()
        deadline = time.monotonic() + 5
        while mcp.call("screen_size").is_error or mcp.call("mouse_move", {"x": 1, "y": 1}).is_error:
            assert time.monotonic() < deadline, "the agent did not get the desktop back after the viewer left"
            time.sleep(0.1)


@pytest.mark.x11
def test_one_controller_many_observers(vnc):
    server, probe, state = vnc
    port, secrets = state["vnc_native_port"], state["vnc_secrets"]
    first = RfbClient.tcp(port, secrets["control"])
    second = RfbClient.tcp(port, secrets["control"])
    observers = [RfbClient.tcp(port, secrets["view"]) for _ in range(3)]
    x, y = probe.center("button")
    try:
        first.click(x, y)
        probe.wait_for(lambda s: s["clicks"] == 1)
        second.click(x, y)  # the first holds the desktop: the second watches
        for observer in observers:
            observer.click(x, y)
        time.sleep(0.5)
        assert probe.state()["clicks"] == 1
        for client in (second, *observers):  # everyone still gets frames
            image = client.full_frame()
            assert image.size == (1280, 800)
        with server.http() as http:
            viewers = http.get("/control").json()["viewers"]
        assert sorted(v["role"] for v in viewers) == ["control", "control", "view", "view", "view"]
        first.close()
        time.sleep(0.3)
        second.click(x, y)
        probe.wait_for(lambda s: s["clicks"] == 2, what="the second controller after the first left")
    finally:
        for client in (second, *observers):
            client.close()


@pytest.mark.x11
@pytest.mark.parametrize("case", ["wrong-password", "empty-password"])
def test_native_wrong_secret_is_refused(vnc, case, tmp_path):
    _, _, state = vnc
    password = "nottheone" if case == "wrong-password" else ""
    with pytest.raises(PermissionError, match="authentication failed"):
        RfbClient.tcp(state["vnc_native_port"], password)
    out = vncdo({**state, "vnc_secrets": {"control": password or "x"}}, "control", "capture",
                str(tmp_path / "never.png"))
    assert out.returncode != 0 and "authentication failed" in (out.stderr + out.stdout)


@pytest.mark.x11
@pytest.mark.parametrize("path,code", [("default/WRONGSECRET", 4401), ("default", 404), ("nosuch/abcdefgh", 4401)])
def test_browser_socket_refusals(vnc, path, code):
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    server, _, _ = vnc
    url = f"{server.base_url.replace('http', 'ws')}/vnc/ws/{path}"
    if code == 404:
        with pytest.raises(InvalidStatus):
            connect(url).__enter__()
        return
    with connect(url) as ws:
        with pytest.raises(Exception):
            ws.recv(timeout=5)
        assert ws.close_code == code


@pytest.mark.x11
def test_viewer_dropping_mid_stream_leaves_the_session_working(vnc):
    server, probe, state = vnc
    port, secrets = state["vnc_native_port"], state["vnc_secrets"]
    watcher = RfbClient.tcp(port, secrets["view"])
    rude = RfbClient.tcp(port, secrets["control"])
    rude.io.send(b"\x05\x00")  # half a PointerEvent
    rude.io.sock.shutdown(socket.SHUT_RDWR)
    rude.close()
    garbage = RfbClient.tcp(port, secrets["control"])
    garbage.io.send(b"\x99garbage")  # an unknown message type: the proxy must drop this viewer only
    time.sleep(0.3)
    try:
        assert watcher.full_frame().size == (1280, 800)
        x, y = probe.center("button")
        with McpClient(f"{server.base_url}/mcp") as mcp:
            mcp.ok("click", {"x": x, "y": y})
        probe.wait_for(lambda s: s["clicks"] == 1)
        fresh = RfbClient.tcp(port, secrets["control"])
        fresh.click(x, y)
        probe.wait_for(lambda s: s["clicks"] == 2, what="a new viewer after the rude ones")
        fresh.close()
    finally:
        watcher.close()
        garbage.close()


@pytest.mark.x11
def test_state_and_serve_output_give_ready_urls(vnc):
    server, _, state = vnc
    assert state["vnc_url"].startswith(f"{server.base_url}/vnc/vnc.html?")
    assert "view_only=1" in state["vnc_view_url"]
    out = "".join(server.output)
    assert state["vnc_url"] in out and state["vnc_view_url"] in out
    with server.http() as http:
        page = http.get("/vnc/", follow_redirects=True)
        assert page.status_code == 200 and "noVNC" in page.text


def _two_fields(app: str, state_file: Path, server: ServerProcess) -> tuple[tuple[int, int], tuple[int, int], dict]:
    """Two text fields of ``app`` (a point in each, right of the middle), and how to read their texts."""
    import json

    if app == "tk":
        widgets = json.loads(state_file.read_text())["widgets"]
        ends = [(x + w - 6, y + h // 2) for x, y, w, h in (widgets["name"], widgets["email"])]
        return ends[0], ends[1], {"read": lambda s: (s["values"]["name"], s["values"]["email"]), "start": ("", "")}
    with McpClient(f"{server.base_url}/mcp") as mcp:
        nodes = mcp.ok("accessibility_tree", {}).structured_content["nodes"]
    boxes = [next(n["box"] for n in nodes if n["role"] == "text" and n.get("text") == f"value {k}") for k in (1, 2)]
    ends = [(x + w * 3 // 4, y + h // 2) for x, y, w, h in boxes]  # inside its frame, whatever GTK's theme
    return ends[0], ends[1], {"read": lambda s: (s["entries"].get("Entry 1", "value 1"),
                                                 s["entries"].get("Entry 2", "value 2")),
                              "start": ("value 1", "value 2")}


def _fields_app(app: str) -> tuple[str, Path]:
    state_file = agent_writable_dir("hci-envs-fields-") / "state.json"  # the app runs as the agent
    command = f"{sys.executable} -m hci_envs.tasks.apps.form {state_file}" if app == "tk" else \
        f"/usr/bin/python3 {Path(__file__).parent / 'apps' / 'gtk_widgets.py'} {state_file} 3"
    return command, state_file


def _texts_come_to(texts: dict, state_file: Path, want: list[str], timeout: float = 30) -> list[str] | None:
    import json

    got = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = list(texts["read"](json.loads(state_file.read_text())))
        except (OSError, ValueError, KeyError):
            got = None
        if got == want:
            break
        time.sleep(0.2)
    return got


@pytest.mark.x11
@pytest.mark.parametrize("app", ["tk", "gtk"])
def test_a_person_who_clicks_a_field_and_types_at_once_types_into_that_field_live_and_replayed(x11, tmp_path, app):
    """A click reaches the app before the keys sent right after it, at any pace. The window manager focuses
    on a click with a synchronous grab that holds the press, while keys go straight to the focused app; the
    proxy lets nothing after a press or release through until X shows it. 50 rounds of click a field, type
    into it, click the other field, type, with no pause at all; the recording replays to the same texts."""
    from hci_envs.plugins import load_env_class
    from hci_envs.recorders import load_episode, replay_episode

    need_programs("x11vnc")
    command, state_file = _fields_app(app)
    with ServerProcess("--app", command, "--vnc-port", "0", "--no-spare", "--episodes-dir", str(tmp_path)) \
            as server, server.http() as http:
        assert http.post("/reset", json={}).status_code == 200
        deadline = time.monotonic() + 30
        while not state_file.exists() and app == "tk" and time.monotonic() < deadline:
            time.sleep(0.1)
        first, second, texts = _two_fields(app, state_file, server)
        state = http.get("/state").json()
        # no video: the order of clicks and keys is what is tested, and the stop's encoding of the 200 rounds'
        # frames outlasted the client's 30 s on a machine running three suites
        assert http.post("/recording", json={"command": "start", "name": "fields", "video": False}).status_code == 200
        human = RfbClient.tcp(state["vnc_native_port"], state["vnc_secrets"]["control"])
        try:
            want = list(texts["start"])
            for i in range(50):
                for n, (x, y) in enumerate((first, second)):
                    human.click(x, y)
                    human.tap(0xFF57)  # End: after the text, whatever part of it the field shows
                    for char in f"{'ab'[n]}{i}.":
                        human.tap(ord(char))
                    want[n] += f"{'ab'[n]}{i}."
            got = _texts_come_to(texts, state_file, want)
            assert got == want, f"\n got {got}\nwant {want}"
        finally:
            human.close()
        stopped = http.post("/recording", json={"command": "stop"}).json()
    # the demonstration replays to the same texts, in a fresh desktop, read while it is still there (the form
    # writes its state every 150 ms: a desktop closed right after the last key may never write the last round)
    replay_command, replay_file = _fields_app(app)
    episode = load_episode(stopped["path"])
    replay_env = load_env_class(episode.meta["env"])(start_state={"apps": [{"command": replay_command}]})
    try:
        report = replay_episode(episode, env=replay_env)
        assert report.summary()["errors"] == 0, report.to_dict()
        replayed = _texts_come_to(texts, replay_file, want, timeout=10)
    finally:
        replay_env.close()
    assert replayed == want, f"\nreplayed {replayed}\n    want {want}"
