"""Human demonstrations: recorded through the VNC tap in the agents' action format, replayed, exported."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from conftest import need_programs
from helpers import McpClient, Probe, ServerProcess
from rfb_client import RfbClient

from hci_envs.recorders import EpisodeFormatError, load_episode, replay_episode

pytestmark = pytest.mark.x11

SHIFT, CTRL = 0xFFE1, 0xFFE3


def pointer(c: RfbClient, x: int, y: int, mask: int = 0, wait: float = 0.02) -> None:
    c.pointer(x, y, mask)
    time.sleep(wait)


def keys(c: RfbClient, *keysyms: int, wait: float = 0.02) -> None:
    for k in keysyms:
        c.tap(k)
        time.sleep(wait)


@pytest.fixture(scope="module")
def rec_server(x11, tmp_path_factory):
    need_programs("x11vnc")
    probe = Probe(tmp_path_factory.mktemp("recprobe"))
    episodes = tmp_path_factory.mktemp("episodes")
    server = ServerProcess("--app", " ".join(f"'{c}'" for c in probe.command()), "--vnc-port", "0",
                           "--episodes-dir", str(episodes))
    server.start()
    try:
        probe.wait_for(lambda s: s.get("ready"))
        yield server, probe, episodes
    finally:
        server.stop()


@pytest.fixture
def rec(rec_server):
    server, probe, episodes = rec_server
    probe.state_path.unlink(missing_ok=True)
    with server.http() as http:
        assert http.post("/reset", json={}).status_code == 200
        state = http.get("/state").json()
    probe.wait_for(lambda s: s.get("ready"), what="a fresh probe")
    probe.log_path.write_text("")
    return server, probe, state


def recording(server, command: str, **options) -> dict:
    with server.http() as http:
        response = http.post("/recording", json={"command": command, **options})
        assert response.status_code == 200, response.text
        return response.json()


def human(state) -> RfbClient:
    return RfbClient.tcp(state["vnc_native_port"], state["vnc_secrets"]["control"])


EXPECTED = [
    {"type": "click", "x": 150, "y": 120, "count": 2},
    {"type": "click", "x": 151, "y": 121},
    {"type": "click", "x": 300, "y": 300},
    {"type": "drag", "path": [[400, 300], [404, 300], [408, 300]]},
    {"type": "type_text", "text": "Hi @é你"},
    {"type": "key", "keys": "ctrl+shift+t"},
    {"type": "key", "keys": "ctrl+c"},
    {"type": "key", "keys": "enter"},
    {"type": "scroll", "x": 500, "y": 400, "dy": 3},
    {"type": "scroll", "x": 500, "y": 400, "dy": -2},
    {"type": "clipboard_set", "text": "pasted"},
]


def scripted_stream(c: RfbClient) -> None:
    """A known human input stream, with the timing the reduction rules hinge on."""
    for x, y in ((100, 100), (103, 101), (110, 105), (150, 120)):  # jittered moves
        pointer(c, x, y)
    pointer(c, 150, 120, 1)
    pointer(c, 151, 121, 0, wait=0.33)  # 1 px travel: a click; next press 350 ms after this one
    pointer(c, 151, 121, 1)
    pointer(c, 151, 121, 0, wait=0.53)  # a double click; the next press comes 550 ms later: a new click
    pointer(c, 151, 121, 1)
    pointer(c, 151, 121, 0, wait=0.6)
    pointer(c, 300, 300, 1)  # 5 px of travel: still a click
    pointer(c, 302, 301, 1)
    pointer(c, 305, 300, 1)
    pointer(c, 305, 300, 0, wait=0.6)
    pointer(c, 400, 300, 1)  # 8 px: a drag
    pointer(c, 404, 300, 1)
    pointer(c, 408, 300, 1)
    pointer(c, 408, 300, 0, wait=0.3)
    c.key(SHIFT, True)
    keys(c, ord("H"))
    c.key(SHIFT, False)
    keys(c, ord("i"), ord(" "))
    c.key(SHIFT, True)
    keys(c, ord("@"))
    c.key(SHIFT, False)
    keys(c, 0xE9, 0x01000000 + ord("你"))
    c.key(CTRL, True)
    c.key(SHIFT, True)
    keys(c, ord("T"))
    c.key(SHIFT, False)
    c.key(CTRL, False)
    c.key(CTRL, True)
    keys(c, ord("c"))
    c.key(CTRL, False)
    keys(c, 0xFF0D)  # Return
    for _ in range(3):  # a wheel burst, 100 ms apart
        pointer(c, 500, 400, 16, wait=0.01)
        pointer(c, 500, 400, 0, wait=0.1)
    time.sleep(0.5)  # a gap longer than 400 ms: a new scroll
    for _ in range(2):
        pointer(c, 500, 400, 8, wait=0.01)
        pointer(c, 500, 400, 0, wait=0.1)
    c.cut_text("pasted")
    time.sleep(0.3)


def test_synthetic_stream_reduces_to_the_expected_actions(rec):
    server, probe, state = rec
    started = recording(server, "start", name="synthetic")
    c = human(state)
    try:
        scripted_stream(c)
    finally:
        c.close()
    stopped = recording(server, "stop")
    episode = load_episode(stopped["path"])
    assert [a["action"] for a in episode.actions] == EXPECTED
    first = episode.actions[0]
    assert first["pre_move"] == [[100, 100], [103, 101], [110, 105], [150, 120]]
    assert first["raw"][0] == 0  # the moves are part of the click's raw span
    spans = [a["raw"] for a in episode.actions]
    assert all(a[0] <= a[1] for a in spans) and all(x[1] < y[0] for x, y in zip(spans, spans[1:]))
    assert all(a["source"] == "human" for a in episode.actions)
    assert all(a["frame_before"] and a["frame_after"] for a in episode.actions)
    kinds = {r["msg"] for r in episode.raw}
    assert kinds == {"PointerEvent", "KeyEvent", "ClientCutText"}
    assert episode.meta["screen"] == {"width": 1280, "height": 800}
    assert episode.meta["state"] == "stopped" and started["state"] == "recording"
    assert Path(started["path"]).name == "synthetic"


def test_pause_excludes_input_and_mask_hides_text(rec):
    server, probe, state = rec
    recording(server, "start", mask_text=True)
    c = human(state)
    try:
        keys(c, ord("a"), ord("b"))
        pointer(c, 700, 700)
        time.sleep(0.2)
        recording(server, "pause")
        keys(c, ord("x"), ord("y"), ord("z"))
        recording(server, "resume")
        c.key(SHIFT, True)
        keys(c, ord("C"))
        c.key(SHIFT, False)
        time.sleep(0.2)
    finally:
        c.close()
    episode = load_episode(recording(server, "stop")["path"])
    assert [a["action"] for a in episode.actions] == [{"type": "type_text", "text": "**"},
                                                      {"type": "type_text", "text": "*"}]
    typed = [r["keysym"] for r in episode.raw if r["msg"] == "KeyEvent" and r["keysym"] not in (SHIFT,)]
    assert set(typed) == {0x2A}, "typed characters reached raw/input.jsonl unmasked"
    assert len([r for r in episode.raw if r["msg"] == "KeyEvent"]) == 8  # nothing of the paused part


def test_agent_actions_record_in_the_same_format(rec):
    server, probe, state = rec
    recording(server, "start", source="agent")
    x, y = probe.center("button")
    with McpClient(f"{server.base_url}/mcp") as mcp:
        mcp.ok("click", {"x": x, "y": y})
        mcp.ok("screenshot")  # observations are not actions
        mcp.ok("type_text", {"text": "agent"})
    episode = load_episode(recording(server, "stop")["path"])
    assert [a["action"] for a in episode.actions] == [{"type": "click", "x": x, "y": y},
                                                      {"type": "type_text", "text": "agent"}]
    assert {a["source"] for a in episode.actions} == {"agent"}


def test_a_stop_can_answer_at_once_and_the_command_line_waits_for_the_video_with_progress(rec):
    """A long episode's video may take longer to write than a client waits for one answer: ``"wait": false``
    answers at once with "stopping" (then GET says "stopped"), and ``hci-envs record stop`` asks that way and
    polls, saying on stderr what it waits for; ``wait`` with another command is refused."""
    import subprocess

    from helpers import hci_envs_command

    server, probe, _ = rec
    x, y = probe.center("button")
    with server.http() as http:
        refused = http.post("/recording", json={"command": "start", "wait": False})
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "wait", refused.text
    for how in ("http", "cli"):
        recording(server, "start", source="agent", video=True)
        with McpClient(f"{server.base_url}/mcp") as mcp:
            mcp.ok("click", {"x": x, "y": y})
            mcp.ok("type_text", {"text": how})
        if how == "http":
            answer = recording(server, "stop", wait=False)
            assert answer["state"] == "stopping" and answer["video"] is None, answer
            with server.http() as http:
                deadline = time.monotonic() + 60
                while (done := http.get("/recording").json())["state"] == "stopping" and time.monotonic() < deadline:
                    time.sleep(0.1)
        else:
            run = subprocess.run([*hci_envs_command(), "record", "stop", "--url", server.base_url],
                                 capture_output=True, text=True, timeout=120)
            assert run.returncode == 0, run.stderr
            assert "writing the episode" in run.stderr and "its video" in run.stderr, run.stderr
            done = json.loads(run.stdout)
        assert done["state"] == "stopped" and Path(done["video"]).is_file(), done
        episode = load_episode(done["path"])
        assert [a["action"] for a in episode.actions][-1] == {"type": "type_text", "text": how}


def test_human_demonstration_replays_to_the_same_log_and_screen(rec, tmp_path):
    server, probe, state = rec
    recorded_state = probe.state()
    started = recording(server, "start", name="demo")
    c = human(state)
    try:
        bx, by = probe.center("button")
        pointer(c, bx - 30, by + 5)
        pointer(c, bx, by)
        c.click(bx, by)
        time.sleep(0.6)
        ex, ey = probe.center("entry")
        c.click(ex, ey)
        time.sleep(0.6)
        c.key(SHIFT, True)
        keys(c, ord("H"))
        c.key(SHIFT, False)
        keys(c, *map(ord, "ello, world"))
        c.key(CTRL, True)
        keys(c, ord("a"))
        c.key(CTRL, False)
        time.sleep(0.3)
        tx, ty, _, _ = recorded_state["widgets"]["text"]
        wx, wy, _, wh = recorded_state["text_char_bbox"]["beta"]
        c.click(tx + wx + 2, ty + wy + wh // 2)
        time.sleep(0.12)
        c.click(tx + wx + 2, ty + wy + wh // 2)  # a double click selects "beta"
        time.sleep(0.7)
        lx, ly = probe.center("listbox")
        for _ in range(4):
            pointer(c, lx, ly, 16, wait=0.01)
            pointer(c, lx, ly, 0, wait=0.05)
        time.sleep(0.6)
        cx, cy, _, _ = recorded_state["widgets"]["canvas"]
        c.click(cx + 40, cy + 40)
        time.sleep(0.6)
    finally:
        c.close()
    human_log = probe.log()
    stopped = recording(server, "stop")
    episode = load_episode(stopped["path"])
    types = [a["action"]["type"] for a in episode.actions]
    assert types.count("type_text") == 1 and "scroll" in types and {"count": 2} .items() <= next(
        a["action"] for a in episode.actions if a["action"].get("count")).items()
    assert {"button", "char", "chord", "double_click", "canvas_click"} <= {e["kind"] for e in human_log}

    replay_probe = Probe(tmp_path)
    start = dict(episode.meta["start_state"])
    start["apps"] = [replay_probe.app()]
    report = replay_episode(stopped["path"], start_state=start)
    summary = report.summary()
    assert summary["errors"] == 0, report.to_dict()
    replay_log = replay_probe.log()
    assert replay_log == human_log, f"replayed app log differs:\nhuman  {human_log}\nreplay {replay_log}"
    assert report.final_match == 1.0, summary
    assert summary["min_match"] is not None and summary["mean_match"] > 0.99, summary
    assert started["path"] == stopped["path"]


def test_killed_recorder_leaves_every_event_on_disk(x11, tmp_path):
    need_programs("x11vnc")
    episodes = tmp_path / "episodes"
    with ServerProcess("--vnc-port", "0", "--episodes-dir", str(episodes), "--app", "xterm") as server:
        with server.http() as http:
            state = http.get("/state").json()
            path = http.post("/recording", json={"command": "start"}).json()["path"]
        c = human(state)
        sent = 0
        for i in range(150):
            c.pointer(200 + i, 300)
            sent += 1
        for k in map(ord, "typed before the crash"):
            c.tap(k)
            sent += 2
        time.sleep(1.0)
        server.stop(signal.SIGKILL)
        c.close()
    episode = load_episode(path)
    assert len(episode.raw) == sent
    assert [r["i"] for r in episode.raw] == list(range(sent))
    assert episode.meta["state"] == "recording"  # it never got to write "stopped"


def test_malformed_episodes_are_named_by_file_and_line(rec, tmp_path):
    server, probe, state = rec
    recording(server, "start", name="victim")
    c = human(state)
    try:
        keys(c, ord("a"))
        c.click(600, 700)
        time.sleep(0.7)
    finally:
        c.close()
    path = Path(recording(server, "stop")["path"])
    assert load_episode(path).actions

    actions = path / "actions.jsonl"
    good = actions.read_text()
    actions.write_text(good + '{"index": 9, "action": {"type": "click", "x": 99999, "y": 1}, "t_start": 1, "t_end": 1}\n')
    with pytest.raises(EpisodeFormatError, match=r"actions.jsonl:3: invalid action"):
        load_episode(path)
    actions.write_text(good.replace("{", "[", 1))
    with pytest.raises(EpisodeFormatError, match=r"actions.jsonl:1: not valid JSON"):
        load_episode(path, allow_torn_tail=False)
    actions.write_text(good + '{"index": 2, "act')  # torn last line: what a killed recorder leaves
    assert len(load_episode(path).actions) == 2
    with pytest.raises(EpisodeFormatError, match=r"actions.jsonl:3"):
        load_episode(path, allow_torn_tail=False)
    actions.write_text(good)
    raw = path / "raw" / "input.jsonl"
    lines = raw.read_text().splitlines()
    raw.write_text("\n".join([lines[0], '{"t": 1.0, "msg": "KeyEvent"}', *lines[2:]]) + "\n")
    with pytest.raises(EpisodeFormatError, match=r"input.jsonl:2: no 'i'"):
        load_episode(path)
    (path / "meta.json").write_text("{}")
    with pytest.raises(EpisodeFormatError, match=r"meta.json: no 'schema_version'"):
        load_episode(path)
    with pytest.raises(EpisodeFormatError, match="not an episode folder"):
        load_episode(tmp_path / "nowhere")


def test_export_to_parquet_and_back(rec, tmp_path):
    from hci_envs.recorders.export import export_episodes, import_episodes

    server, probe, state = rec
    recording(server, "start", name="exported")
    c = human(state)
    try:
        keys(c, *map(ord, "abc"))
        c.click(620, 700)
        time.sleep(0.7)
    finally:
        c.close()
    path = Path(recording(server, "stop")["path"])
    original = load_episode(path)
    out = tmp_path / "demo.parquet"
    dataset = export_episodes([path], out)
    assert out.exists() and len(dataset) == len(original.actions) == 2
    row = dataset[0]
    assert json.loads(row["action"]) == original.actions[0]["action"]
    assert row["frame_after"].size == (1280, 800)  # the image bytes are inline
    back = import_episodes(out, tmp_path / "imported")
    again = load_episode(back[0])
    assert [a["action"] for a in again.actions] == [a["action"] for a in original.actions]
    assert again.raw == original.raw
    for a, b in zip(again.actions, original.actions):
        assert again.frame(a["frame_after"]).read_bytes() == original.frame(b["frame_after"]).read_bytes()


def test_an_answer_drawn_after_the_recorder_wrote_the_last_action_is_its_end_state(x11, tmp_path):
    """The recorder writes an action with no input after it a moment after it ended, for the live list; an
    app that draws its answer later still (a busy machine) leaves it on the final frame, which the episode reads
    as the last action's after-frame and a replay is judged by."""
    import sys

    from hci_envs.traits import DesktopEnv
    from recorders.recorder import AFTER_WINDOW, Recorder
    from recorders.replay import screen_match

    slow_save = [sys.executable, str(Path(__file__).resolve().parent / "apps" / "slow_save.py")]
    env = DesktopEnv(start_state={"apps": [{"command": slow_save}]})
    try:
        env.reset()
        recorder = Recorder(env, None, tmp_path, source="agent", name="late", video=False).start()
        env.executor.run({"type": "key", "keys": "l"})  # saved 3 s later
        actions = recorder.path / "actions.jsonl"
        deadline = time.monotonic() + 30
        while not actions.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        (written,) = [json.loads(line) for line in actions.read_text().splitlines()]
        time.sleep(3.0 - AFTER_WINDOW + 0.5)
        assert env.desktop.events.wait_settled(0.5, 10.0)
        end = env.desktop.screen.capture(fmt="png")
        recorder.stop()
    finally:
        env.close()
    episode = load_episode(recorder.path)
    (last,) = episode.actions
    assert last["frame_after"] == episode.meta["final_frame"] != written["frame_after"]
    assert screen_match(end, episode.frame(written["frame_after"]), ()) < 0.999  # written before the save
    assert screen_match(end, episode.frame(last["frame_after"]), ()) == 1.0

    report = replay_episode(recorder.path)
    assert report.final_match == 1.0 and report.steps[0].match == 1.0, report.to_dict()


def test_a_held_press_replays_as_long_as_it_was_recorded_on_a_busy_machine(rec, tmp_path):
    """A person holds a press for 800 ms: the replay's hold, on the X server's clock, is the recorded one within
    20 ms while two programs spin on the machine's CPUs. The replay keeps the recorded timeline: a pause ends
    when the recording says (not its length after a late start), and no screen is compared inside the hold."""
    import subprocess
    import sys

    server, probe, state = rec
    recording(server, "start", name="hold")
    c = human(state)
    try:
        cx, cy, _, _ = probe.state()["widgets"]["canvas"]
        pointer(c, cx + 40, cy + 40)
        pointer(c, cx + 40, cy + 40, 1, wait=0.8)
        pointer(c, cx + 40, cy + 40, 0, wait=0.4)
    finally:
        c.close()
    stopped = recording(server, "stop")
    episode = load_episode(stopped["path"])
    by_type = {a["action"]["type"]: a for a in episode.actions}
    assert {"mouse_down", "mouse_up"} <= set(by_type), [a["action"] for a in episode.actions]
    recorded_ms = (by_type["mouse_up"]["t_start"] - by_type["mouse_down"]["t_start"]) * 1000

    from hci_envs.traits import DesktopEnv

    replay_probe = Probe(tmp_path)
    start = dict(episode.meta["start_state"])
    start["apps"] = [replay_probe.app()]
    env = DesktopEnv(start_state=start)
    done_at: dict[str, float] = {}  # when the replay's press and release were sent (the executor's observers)
    env.executor.observers.append(lambda action, result: done_at.setdefault(action.type, time.monotonic()))
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    # What the machine alone does to a sleeping thread of this process during the hold (its scheduler, this
    # process's other threads): a spike of the machine's load then is not the replay's drift, the bound's subject
    noise = SleepNoise().start()
    try:
        report = replay_episode(stopped["path"], env=env)
    finally:
        noise.stop()
        env.close()
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert report.summary()["errors"] == 0, report.to_dict()
    held = [e[-1]["held_ms"] for e in replay_probe.state()["events"] if e[0] == "release" and e[1] == "canvas"]
    during = noise.worst_between(done_at["mouse_down"], done_at["mouse_up"])
    assert len(held) == 1 and abs(held[0] - recorded_ms) <= 20 + during, \
        (held, recorded_ms, during, report.to_dict()["steps"])


class SleepNoise:
    """How long the 10 ms sleeps of a thread of this process overslept, and when."""

    def __init__(self) -> None:
        import threading

        self.samples: list[tuple[float, float]] = []  # (when the sleep began, ms it overslept)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> SleepNoise:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            time.sleep(0.01)
            self.samples.append((started, (time.monotonic() - started - 0.01) * 1000))

    def worst_between(self, begin: float, end: float) -> float:
        return max((ms for at, ms in self.samples if begin - 0.02 <= at <= end), default=0.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
