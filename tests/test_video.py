"""Episode videos, on real desktops: agent and human episodes in mousepad, an app that never stops animating,
the continuous capture, broken episodes, an encoder that fails, PyAV missing, replay and task reports linking
the video, and Debian's chromium playing it."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import av
import numpy as np
import pytest
from conftest import need_programs
from hci_envs.recorders import load_episode
from hci_envs.recorders.overlay import label_box
from hci_envs.recorders.video import step_shots
from helpers import ANIMATE, McpClient, ServerProcess, hci_envs_command
from PIL import Image
from test_recorder import SHIFT, human, keys, recording

SCREEN = (1280, 800)
MOUSEPAD_MENU = (330, 172, 620, 188)  # the menu bar's words: far from every mark these tests make


def decoded(path: str | Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def raw_frame(episode, name: str) -> np.ndarray:
    return np.asarray(Image.open(episode.frame(name)).convert("RGB"))


def changed(a: np.ndarray, b: np.ndarray, box: tuple[int, int, int, int], threshold: int = 60) -> float:
    """The share of pixels in ``box`` (x0, y0, x1, y1) that differ clearly between two pictures."""
    x0, y0, x1, y1 = box
    diff = np.abs(a[y0:y1, x0:x1].astype(int) - b[y0:y1, x0:x1].astype(int)).max(axis=2)
    return float((diff > threshold).mean())


def around(x: int, y: int, r: int = 24) -> tuple[int, int, int, int]:
    return x - r, y - r, x + r, y + r


def shot_of(episode, step: int, which: str) -> int:
    """The index of the video frame showing step ``step``'s frame before or after it."""
    record = episode.actions[step]
    for n, shot in enumerate(step_shots(episode)):
        if shot.mark and shot.mark.counter == f"{step + 1}/{len(episode.actions)}" and shot.frame == record[which]:
            return n
    raise AssertionError(f"no video frame shows step {step}'s {which}")


def check_marks(episode, frames: list[np.ndarray], step: int, point: tuple[int, int]) -> None:
    """On the video frame after ``step``: the pointer is drawn at ``point``, the label in its box, and the
    rest of the picture is the recorded screen."""
    record = episode.actions[step]
    video = frames[shot_of(episode, step, "frame_after")]
    raw = raw_frame(episode, record["frame_after"])
    assert video.shape == raw.shape == (SCREEN[1], SCREEN[0], 3)
    assert changed(video, raw, around(*point)) > 0.08, "no pointer drawn where the action happened"
    x0, y0, x1, y1 = label_box(SCREEN, 100, point)
    label = (x0, y0, x0 + 100, y1)  # the label's first hundred pixels are there whatever its length
    assert changed(video, raw, label) > 0.03, "no label drawn"
    assert changed(video, raw, MOUSEPAD_MENU) < 0.01, "the screen itself is not what was recorded"


@pytest.fixture(scope="module")
def editor_server(x11, tmp_path_factory):
    need_programs("mousepad", "x11vnc")
    episodes = tmp_path_factory.mktemp("episodes")
    server = ServerProcess("--app", "mousepad note.txt", "--vnc-port", "0", "--episodes-dir", str(episodes))
    server.start(timeout=90)
    try:
        yield server, episodes
    finally:
        server.stop()


@pytest.fixture
def editor(editor_server):
    server, episodes = editor_server
    with server.http() as http:
        assert http.post("/reset", json={}).status_code == 200
        state = http.get("/state").json()
    return server, state, episodes


@pytest.fixture(scope="module")
def agent_episode(editor_server):
    """An agent's episode in mousepad, recorded over HTTP with its video asked for."""
    server, _ = editor_server
    with server.http() as http:
        assert http.post("/reset", json={}).status_code == 200
    started = recording(server, "start", source="agent", name="agent-in-mousepad", video=True)
    assert started["state"] == "recording"
    with McpClient(f"{server.base_url}/mcp") as mcp:
        mcp.ok("click", {"x": 500, "y": 350})
        mcp.ok("type_text", {"text": "héllo wörld 你好"})
        mcp.ok("click", {"x": 760, "y": 430, "count": 2})
        mcp.ok("key", {"keys": "ctrl+a"})
    return recording(server, "stop")


@pytest.mark.apps
def test_an_agent_episode_has_a_video_with_the_pointer_and_the_action_drawn(agent_episode):
    assert agent_episode["video"] and "video_error" not in agent_episode, agent_episode
    episode = load_episode(agent_episode["path"])
    assert len(episode.actions) == 4
    meta = episode.meta["video"]
    assert meta["file"] == "video.mp4" and Path(agent_episode["video"]) == episode.path / meta["file"]
    assert (meta["codec"], meta["width"], meta["height"]) == ("h264", *SCREEN)
    frames = decoded(episode.path / meta["file"])
    assert len(frames) == meta["frames"] >= 2 * len(episode.actions)  # before and after each step
    assert all(f.shape == (SCREEN[1], SCREEN[0], 3) for f in frames)
    check_marks(episode, frames, 0, (500, 350))
    check_marks(episode, frames, 2, (760, 430))
    with av.open(str(episode.path / meta["file"])) as container:  # timed by the episode, each shot readable
        times = [float(f.time) for f in container.decode(video=0)]
    gaps = np.diff(times)
    assert (gaps >= 0.39).all() and (gaps <= 2.01).all(), times


@pytest.mark.apps
def test_a_human_episode_over_vnc_has_its_video(editor):
    server, state, _ = editor
    recording(server, "start", name="human-in-mousepad")
    c = human(state)
    try:
        c.click(560, 380)
        time.sleep(0.7)
        c.key(SHIFT, True)
        keys(c, ord("H"))
        c.key(SHIFT, False)
        keys(c, *map(ord, "i there"))
        time.sleep(0.5)
        c.click(820, 300)
        time.sleep(0.7)
    finally:
        c.close()
    stopped = recording(server, "stop")
    episode = load_episode(stopped["path"])
    assert [a["action"]["type"] for a in episode.actions] == ["click", "type_text", "click"]
    frames = decoded(stopped["video"])
    assert len(frames) >= len(episode.actions)
    check_marks(episode, frames, 0, (560, 380))
    check_marks(episode, frames, 2, (820, 300))


@pytest.mark.x11
def test_an_animating_app_and_the_continuous_capture(x11, tmp_path):
    """The step video of an app that never stops drawing, and the continuous capture beside it: more frames
    than steps, each showing the animation where it was."""
    from hci_envs.recorders import Recorder
    from hci_envs.traits import DesktopEnv

    env = DesktopEnv(start_state={"apps": [{"command": [sys.executable, str(ANIMATE), "600", "400"]}]})
    try:
        env.reset()
        recorder = Recorder(env, None, tmp_path, source="agent", name="animated", video_fps=4).start()
        for action in ({"type": "click", "x": 300, "y": 200}, {"type": "key", "keys": "ctrl+shift+t"},
                       {"type": "click", "x": 450, "y": 120, "button": "right"}):
            env.step(action)
            time.sleep(0.8)
        status = recorder.stop()
    finally:
        env.close()
    assert status["video"] and "video_error" not in status, status
    episode = load_episode(status["path"])
    steps = decoded(status["video"])
    assert len(steps) >= len(episode.actions) == 3
    meta = episode.meta["video"]["continuous"]
    assert meta["file"] == "continuous.mp4" and meta["fps"] == 4
    continuous = decoded(episode.path / meta["file"])
    assert len(continuous) == meta["frames"] > len(episode.actions)
    assert all(f.shape == (SCREEN[1], SCREEN[0], 3) for f in continuous)
    animation = (0, 140, 600, 240)  # the band the box sweeps through
    moved = [changed(a, b, animation) > 0.01 for a, b in zip(continuous, continuous[1:-1])]
    assert sum(moved) >= len(moved) - 1, "the continuous capture missed the animation"
    with av.open(str(episode.path / meta["file"])) as container:  # its clock is the recording's
        times = [float(f.time) for f in container.decode(video=0)]
    assert times[-1] + meta["t0"] >= episode.actions[-1]["t_end"]


@pytest.mark.apps
def test_a_reset_ends_the_recording_and_the_stop_command_answers_with_its_video(editor):
    server, _, _ = editor
    recording(server, "start", source="agent", name="reset-mid-episode")
    with McpClient(f"{server.base_url}/mcp") as mcp:
        mcp.ok("click", {"x": 600, "y": 400})
        mcp.ok("type_text", {"text": "before the reset"})
    with server.http() as http:
        assert http.post("/reset", json={}).status_code == 200  # stops the recording, in the background
    stopped = recording(server, "stop")  # waits for that stop to have written the video
    assert stopped["end_reason"] == "the session was reset" and stopped["video"], stopped
    episode = load_episode(stopped["path"])
    assert len(decoded(stopped["video"])) == episode.meta["video"]["frames"] >= 2 * len(episode.actions) == 4


@pytest.mark.x11
def test_an_odd_sized_screen_gets_a_video_one_pixel_larger(x11, tmp_path):
    """4:2:0 video needs even sizes: the screen is kept whole, with a black edge."""
    from hci_envs.recorders import Recorder
    from hci_envs.traits import DesktopEnv

    env = DesktopEnv(start_state={"width": 1001, "height": 701, "apps": [{"command": ["xterm"]}]})
    try:
        env.reset()
        recorder = Recorder(env, None, tmp_path, source="agent").start()
        env.step({"type": "click", "x": 1000, "y": 700})  # the last pixel of the screen
        status = recorder.stop()
    finally:
        env.close()
    episode = load_episode(status["path"])
    meta = episode.meta["video"]
    assert (meta["width"], meta["height"]) == (1002, 702)
    frames = decoded(status["video"])
    assert all(f.shape == (702, 1002, 3) for f in frames)
    raw = raw_frame(episode, episode.actions[0]["frame_after"])
    video = frames[shot_of(episode, 0, "frame_after")][:701, :1001]
    assert changed(video, raw, (960, 660, 1001, 701)) > 0.05  # the pointer, at the corner


@pytest.mark.x11
def test_a_failed_encoding_leaves_a_valid_episode_and_says_why(x11, tmp_path):
    """A frame damaged on disk while recording (a real fault: the file is cut short): the episode stops
    normally, has no video, and meta.json says why."""
    from hci_envs.recorders import Recorder
    from hci_envs.traits import DesktopEnv

    env = DesktopEnv(start_state={"apps": [{"command": [sys.executable, str(ANIMATE), "300", "200"]}]})
    try:
        env.reset()
        recorder = Recorder(env, None, tmp_path, source="agent", name="damaged").start()
        env.step({"type": "click", "x": 100, "y": 100})
        first = recorder.path / "frames" / "000000.png"
        first.write_bytes(first.read_bytes()[:200])
        status = recorder.stop()
    finally:
        env.close()
    assert status["video"] is None and "000000.png" in status["video_error"], status
    episode = load_episode(status["path"])
    assert len(episode.actions) == 1 and episode.meta["state"] == "stopped"
    assert "000000.png" in episode.meta["video_error"]["message"] and "video" not in episode.meta
    assert not list(episode.path.glob("*.mp4")) and not list(episode.path.glob(".*tmp"))


def _copy_without_video(source: Path, dest: Path) -> Path:
    shutil.copytree(source, dest)
    for video in dest.glob("*.mp4"):
        video.unlink()
    meta = json.loads((dest / "meta.json").read_text())
    meta.pop("video", None)
    (dest / "meta.json").write_text(json.dumps(meta))
    return dest


@pytest.mark.apps
def test_hci_envs_video_reports_a_bad_episode_and_encodes_the_rest(agent_episode, tmp_path):
    folder = tmp_path / "episodes"
    folder.mkdir()
    good = _copy_without_video(Path(agent_episode["path"]), folder / "a-good")
    damaged = _copy_without_video(Path(agent_episode["path"]), folder / "b-damaged-frame")
    frame = damaged / "frames" / load_episode(damaged).actions[1]["frame_after"]
    frame.write_bytes(frame.read_bytes()[:300])
    malformed = _copy_without_video(Path(agent_episode["path"]), folder / "c-malformed")
    (malformed / "actions.jsonl").write_text('{"index": 0, "action": {"type": "click", "x": -4}}\n')
    last = _copy_without_video(Path(agent_episode["path"]), folder / "d-good")

    out = subprocess.run([*hci_envs_command(), "video", str(folder)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out
    assert "skipped" in out.stderr and "b-damaged-frame" in out.stderr and "c-malformed" in out.stderr
    assert "Traceback" not in out.stderr
    for episode in (good, last):
        meta = json.loads((episode / "meta.json").read_text())["video"]
        assert len(decoded(episode / meta["file"])) == meta["frames"] >= 8
        assert str(episode / "video.mp4") in out.stdout
    for episode in (damaged, malformed):
        assert not list(episode.glob("*.mp4")) and not list(episode.glob(".*tmp"))
        assert "video" not in json.loads((episode / "meta.json").read_text())

    again = subprocess.run([*hci_envs_command(), "video", "--codec", "vp9", str(good)], capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0, again
    meta = json.loads((good / "meta.json").read_text())["video"]
    assert meta["file"] == "video.webm" and meta["codec"] == "vp9" and not (good / "video.mp4").exists()
    assert len(decoded(good / "video.webm")) == meta["frames"]


BLOCK_PYAV = "import sys; sys.modules['av'] = None  # as if PyAV were not installed\n"


@pytest.mark.apps
def test_without_pyav_asking_for_video_names_the_extra_and_the_default_records_without(x11, agent_episode,
                                                                                        tmp_path):
    script = BLOCK_PYAV + (
        "import json, sys\n"
        "from hci_envs.errors import MissingDependencyError\n"
        "from hci_envs.recorders import Recorder\n"
        "from hci_envs.traits import DesktopEnv\n"
        "env = DesktopEnv(start_state={'apps': [{'command': ['xterm']}]})\n"
        "env.reset()\n"
        "try:\n"
        "    for options in ({'video': True}, {'video_fps': 2}):\n"
        "        try:\n"
        "            Recorder(env, None, sys.argv[1], source='agent', **options)\n"
        "            print('not refused', options)\n"
        "        except MissingDependencyError as exc:\n"
        "            print('refused:', exc.message)\n"
        "    recorder = Recorder(env, None, sys.argv[1], source='agent', name='plain').start()\n"
        "    env.step({'type': 'click', 'x': 100, 'y': 100})\n"
        "    print(json.dumps(recorder.stop()))\n"
        "finally:\n"
        "    env.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out
    lines = out.stdout.splitlines()
    assert lines[:2] == ["refused: writing an episode's video needs the Python package 'av', which is not "
                         "installed. Install it with: pip install 'hci-envs[video]'"] * 2, out.stdout
    status = json.loads(lines[2])
    assert status["video"] is None and "video_error" not in status
    episode = load_episode(tmp_path / "plain")
    assert len(episode.actions) == 1 and "video" not in episode.meta
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]  # the refused ones left nothing behind

    command = BLOCK_PYAV + "from hci_envs.ops.cli import main; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", command, "video", agent_episode["path"]], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "pip install 'hci-envs[video]'" in out.stderr, out


@pytest.mark.x11
def test_without_pyav_the_server_refuses_a_required_video_and_records_without_one(x11, tmp_path):
    need_programs("xterm")
    run_without_pyav = [sys.executable, "-c", BLOCK_PYAV + "from hci_envs.ops.cli import main\n"
                        "sys.exit(main(sys.argv[sys.argv.index('hci_envs.ops.cli') + 1:]))"]
    with ServerProcess("--app", "xterm", "--episodes-dir", str(tmp_path), prefix=run_without_pyav) as server:
        with server.http() as http:
            refused = http.post("/recording", json={"command": "start", "source": "agent", "video": True})
            assert refused.status_code == 501, refused.text  # typed, and not a bare 500
            error = refused.json()["error"]
            assert error["code"] == "MISSING_DEPENDENCY" and error["extra"] == "video", refused.text
            assert "pip install 'hci-envs[video]'" in error["message"]
            assert http.get("/recording").json() == {"state": "none"}
        started = recording(server, "start", source="agent", name="without")
        with McpClient(f"{server.base_url}/mcp") as mcp:
            mcp.ok("click", {"x": 200, "y": 200})
        stopped = recording(server, "stop")
    assert started["state"] == "recording" and stopped["video"] is None and "video_error" not in stopped
    assert len(load_episode(stopped["path"]).actions) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["without"]


@pytest.mark.apps
def test_replay_links_the_episode_video(agent_episode, tmp_path):
    report = tmp_path / "replay.json"
    out = subprocess.run([*hci_envs_command(), "replay", agent_episode["path"], "--no-timing", "--no-compare",
                          "--json", str(report)], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out
    assert f"video: {agent_episode['video']}" in out.stdout
    assert json.loads(report.read_text())["video"] == agent_episode["video"]


@pytest.mark.apps
def test_task_reports_link_each_recorded_episode_video(x11, tmp_path):
    from hci_envs.tasks import BUILTIN, OracleAgent, World

    need_programs("mousepad")
    with World(BUILTIN, record_dir=tmp_path / "episodes") as world:
        report = world.run(OracleAgent(), tasks=[world.task("edit-append")], report_dir=tmp_path / "report",
                           progress=False)
    result = report.results[0]
    assert result.score == 1.0 and result.video == str(tmp_path / "episodes" / "edit-append" / "video.mp4")
    assert len(decoded(result.video)) >= load_episode(result.episode).meta["counts"]["actions"]
    out = tmp_path / "report"
    assert json.loads((out / "report.json").read_text())["results"][0]["video"] == result.video
    link = "../episodes/edit-append/video.mp4"
    assert (out / link).resolve() == Path(result.video)
    assert f"[video of the episode]({link})" in (out / "report.md").read_text()
    assert f'<video controls preload="metadata" width="480" src="{link}">' in (out / "report.html").read_text()


@pytest.mark.browser
def test_debian_chromium_plays_the_video_in_a_page(agent_episode):
    """The step video plays in a <video> element of Debian's chromium, at the screen's size."""
    need_programs("chromium")
    from playwright.sync_api import sync_playwright

    folder = Path(agent_episode["path"])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    meta = json.loads((folder / "meta.json").read_text())["video"]
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{server.server_port}/meta.json")
                played = page.evaluate("""async (src) => {
                    const video = document.createElement('video');
                    video.muted = true;
                    video.src = src;
                    document.body.appendChild(video);
                    await new Promise((ok, bad) => { video.onloadeddata = ok; video.onerror = () => bad(
                        new Error('cannot play: ' + (video.error && video.error.message))); });
                    await video.play();
                    await new Promise(ok => setTimeout(ok, 600));
                    return {width: video.videoWidth, height: video.videoHeight, duration: video.duration,
                            time: video.currentTime};
                }""", meta["file"])
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()
    assert (played["width"], played["height"]) == SCREEN
    assert abs(played["duration"] - meta["duration"]) < 0.5 and played["time"] > 0.2, played


@pytest.mark.fake
def test_labels_say_what_each_action_was():
    from hci_envs.recorders.overlay import action_label

    assert [action_label(a) for a in (
        {"type": "click", "x": 512, "y": 320},
        {"type": "click", "x": 1024, "y": 640, "scale": 2.0, "count": 2, "button": "right", "modifiers": ["ctrl"]},
        {"type": "type_text", "text": 'héllo "x"\n'},
        {"type": "key", "keys": "ctrl+shift+t"},
        {"type": "key", "keys": ["ctrl+a", "Delete"], "repeat": 2},
        {"type": "drag", "path": [[1, 2], [3, 4], [50, 60]]},
        {"type": "scroll", "x": 5, "y": 6, "dy": -3, "dx": 1},
        {"type": "wait", "ms": 800},
        {"type": "hold_key", "keys": "shift", "seconds": 1.5},
    )] == [
        "click 512,320", "ctrl+double right click 512,320", 'type_text "héllo \\"x\\"\\n"', "key ctrl+shift+t",
        "key ctrl+a, Delete ×2", "drag 1,2 → 50,60", "scroll 5,6 up 3, right 1", "wait 800 ms",
        "hold_key shift 1.5s",
    ]
