"""The recorder, replay and import path where it used to break: input left held by a viewer that left, holds,
wheel reversals, keysyms without names, media keys, shared frames, a killed server, episodes sharing a name,
one bad episode among good ones; and the reducer's invariant (nothing it emits fails the schema) as a
property over any raw stream."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import need_programs
from hci_envs.recorders import Unreduced, load_episode, reduce_events
from helpers import McpClient, Probe, ServerProcess, hci_envs_command
from hypothesis import given, settings
from hypothesis import strategies as st
from rfb_client import RfbClient, _SocketIO
from test_recorder import SHIFT, human, keys, pointer, rec, rec_server, recording  # noqa: F401 (fixtures)
from test_proxy import vncdo

from hci_envs.actions import parse_action
from hci_envs.vnc.rfb import CLIENT_CUT_TEXT, KEY_EVENT, POINTER_EVENT, ClientMessage

SCREEN = (1280, 800)
CHECK = 0x2713  # what vncdotool sends for "✓": no keysym of X's
RAISE_VOLUME = 0x1008FF13  # XF86AudioRaiseVolume, which noVNC sends for the media key


def key_ev(i: int, t: float, keysym: int, down: bool) -> ClientMessage:
    return ClientMessage(KEY_EVENT, down=down, keysym=keysym, i=i, t=t)


def ptr_ev(i: int, t: float, x: int, y: int, mask: int) -> ClientMessage:
    return ClientMessage(POINTER_EVENT, mask=mask, x=x, y=y, i=i, t=t)


def actions_of(events: list[ClientMessage], unreduced: list[Unreduced] | None = None) -> list[dict]:
    return [a.action for a in reduce_events(events, screen=SCREEN, unreduced=unreduced)]


def wheel(start_i: int, t: float, bit: int, n: int, gap: float = 0.02) -> list[ClientMessage]:
    out = []
    for k in range(n):
        at = t + k * gap
        out += [ptr_ev(start_i + 2 * k, at, 500, 400, bit), ptr_ev(start_i + 2 * k + 1, at + 0.005, 500, 400, 0)]
    return out


# -- the reducer, on streams as the proxy stamps them ----------------------------------------------------------

@pytest.mark.fake
def test_a_held_button_keeps_its_duration():
    events = [ptr_ev(0, 0.0, 300, 200, 0), ptr_ev(1, 0.1, 305, 210, 0), ptr_ev(2, 0.2, 305, 210, 1),
              ptr_ev(3, 1.0, 306, 211, 0)]
    reduced = reduce_events(events, screen=SCREEN)
    assert [a.action for a in reduced] == [
        {"type": "mouse_move", "x": 305, "y": 210}, {"type": "mouse_down"}, {"type": "wait", "ms": 800},
        {"type": "mouse_up"},
    ]
    assert reduced[0].pre_move == [[300, 200], [305, 210]]
    # a quick press stays a click; a held one with ctrl holds ctrl around it
    assert actions_of([ptr_ev(0, 0.0, 5, 5, 1), ptr_ev(1, 0.12, 5, 5, 0)]) == [{"type": "click", "x": 5, "y": 5}]
    held = actions_of([key_ev(0, 0.0, 0xFFE3, True), ptr_ev(1, 0.1, 5, 5, 4), ptr_ev(2, 0.6, 5, 5, 0),
                       key_ev(3, 0.7, 0xFFE3, False)])
    assert held == [{"type": "key_down", "key": "ctrl"}, {"type": "mouse_move", "x": 5, "y": 5},
                    {"type": "mouse_down", "button": "right"}, {"type": "wait", "ms": 500},
                    {"type": "mouse_up", "button": "right"}, {"type": "key_up", "key": "ctrl"}]


@pytest.mark.fake
def test_a_wheel_burst_ends_where_it_changes_direction():
    assert actions_of(wheel(0, 0.0, 16, 15) + wheel(30, 0.31, 8, 1)) == [
        {"type": "scroll", "x": 500, "y": 400, "dy": 15}, {"type": "scroll", "x": 500, "y": 400, "dy": -1}]


@pytest.mark.fake
def test_a_wheel_burst_ends_where_it_moves_on_or_a_modifier_changes():
    # three notches over one list, a move to another, one more notch within the burst's time: two scrolls
    moved = [ptr_ev(0, 0.0, 500, 400, 16), ptr_ev(1, 0.005, 500, 400, 0), ptr_ev(2, 0.03, 503, 401, 16),
             ptr_ev(3, 0.035, 503, 401, 0), ptr_ev(4, 0.06, 700, 300, 0), ptr_ev(5, 0.08, 700, 300, 16),
             ptr_ev(6, 0.085, 700, 300, 0)]
    assert actions_of(moved) == [{"type": "scroll", "x": 500, "y": 400, "dy": 2},  # 3 px of drift stays in it
                                 {"type": "scroll", "x": 700, "y": 300, "dy": 1}]
    # ctrl pressed between two notches: the second zooms where the first scrolled
    ctrl = [ptr_ev(0, 0.0, 500, 400, 16), ptr_ev(1, 0.005, 500, 400, 0), key_ev(2, 0.02, 0xFFE3, True),
            ptr_ev(3, 0.05, 500, 400, 16), ptr_ev(4, 0.055, 500, 400, 0), key_ev(5, 0.07, 0xFFE3, False)]
    assert actions_of(ctrl) == [{"type": "scroll", "x": 500, "y": 400, "dy": 1},
                                {"type": "scroll", "x": 500, "y": 400, "dy": 1, "modifiers": ["ctrl"]}]


@pytest.mark.fake
def test_a_double_click_that_drags_or_holds_keeps_the_drag_or_the_hold():
    # double-click and drag (selecting by words): a click, then the drag, which the app counts as a double
    drag = [ptr_ev(0, 0.0, 100, 100, 1), ptr_ev(1, 0.06, 100, 100, 0), ptr_ev(2, 0.12, 100, 100, 1),
            ptr_ev(3, 0.2, 130, 100, 1), ptr_ev(4, 0.25, 160, 100, 1), ptr_ev(5, 0.3, 160, 100, 0)]
    assert actions_of(drag) == [{"type": "click", "x": 100, "y": 100},
                                {"type": "drag", "path": [[100, 100], [130, 100], [160, 100]]}]
    # the second press held past the double-click time: the time running out must not close it as a click
    hold = [ptr_ev(0, 0.0, 100, 100, 1), ptr_ev(1, 0.06, 100, 100, 0), ptr_ev(2, 0.12, 100, 100, 1),
            ptr_ev(3, 0.9, 100, 100, 0)]
    assert actions_of(hold) == [{"type": "click", "x": 100, "y": 100}, {"type": "mouse_move", "x": 100, "y": 100},
                                {"type": "mouse_down"}, {"type": "wait", "ms": 780}, {"type": "mouse_up"}]


@pytest.mark.fake
def test_down_then_up_is_two_scrolls_not_an_invalid_zero():
    unreduced: list[Unreduced] = []
    reduced = actions_of(wheel(0, 0.0, 16, 1) + wheel(2, 0.02, 8, 1), unreduced)
    assert reduced == [{"type": "scroll", "x": 500, "y": 400, "dy": 1},
                       {"type": "scroll", "x": 500, "y": 400, "dy": -1}]
    assert unreduced == []


@pytest.mark.fake
def test_keysyms_with_a_unicode_value_type_it_and_unnamed_ones_are_reported():
    unreduced: list[Unreduced] = []
    events = [key_ev(0, 0.0, ord("a"), True), key_ev(1, 0.01, ord("a"), False),
              key_ev(2, 0.02, 0x01000000 + 0x2713, True), key_ev(3, 0.03, 0x01000000 + 0x2713, False),
              key_ev(4, 0.04, CHECK, True), key_ev(5, 0.05, CHECK, False),
              key_ev(6, 0.06, 0x01000000 + 0x200B, True),  # a zero-width space: a character that does not print
              key_ev(7, 0.07, ord("b"), True)]
    assert actions_of(events, unreduced) == [
        {"type": "type_text", "text": "a✓"}, {"type": "key", "keys": "U200B"}, {"type": "type_text", "text": "b"}]
    assert [(u.raw, u.reason) for u in unreduced] == [((4, 4), "keysym 0x2713 has no key name")]


@pytest.mark.fake
def test_a_media_key_is_a_key_and_the_click_closed_with_it_survives():
    unreduced: list[Unreduced] = []
    events = [ptr_ev(0, 0.0, 40, 40, 1), ptr_ev(1, 0.05, 40, 40, 0),
              key_ev(2, 0.8, RAISE_VOLUME, True),  # this feed closes the click (its double-click time is over)
              key_ev(3, 0.85, RAISE_VOLUME, False)]
    assert actions_of(events, unreduced) == [{"type": "click", "x": 40, "y": 40},
                                             {"type": "key", "keys": "XF86AudioRaiseVolume"}]
    assert unreduced == []


# -- the invariant, as a property ------------------------------------------------------------------------------

KEYSYMS = st.one_of(
    st.integers(0x20, 0x7E), st.integers(0xA0, 0xFF), st.sampled_from([0xFF0D, 0xFF08, 0xFF09, 0xFF1B, 0xFFBE]),
    st.sampled_from([0xFFE1, 0xFFE3, 0xFFE9, 0xFFEB, 0xFE03]),  # modifiers
    st.integers(0x01000000, 0x0110FFFF),  # Unicode, surrogates and unassigned included
    st.integers(0x1008FF00, 0x1008FFFF),  # XF86
    st.integers(0, 0x1FFFFFFF),  # anything a viewer may send, named or not
)
EVENT = st.one_of(
    st.tuples(st.just("key"), KEYSYMS, st.booleans()),
    st.tuples(st.just("ptr"), st.integers(0, 127), st.integers(0, 1400), st.integers(0, 900)),  # buttons 1-7
    st.tuples(st.just("cut"), st.text(max_size=20)),
)


def to_messages(specs: list[tuple], gaps: list[float]) -> list[ClientMessage]:
    out, t = [], 0.0
    for i, (spec, gap) in enumerate(zip(specs, gaps, strict=True)):
        t += gap
        if spec[0] == "key":
            out.append(key_ev(i, t, spec[1], spec[2]))
        elif spec[0] == "ptr":
            out.append(ptr_ev(i, t, spec[2], spec[3], spec[1]))
        else:
            out.append(ClientMessage(CLIENT_CUT_TEXT, text=spec[1], i=i, t=t))
    return out


@pytest.mark.fake
@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(EVENT, st.floats(0, 1.5)), max_size=60))
def test_any_raw_stream_reduces_to_actions_the_schema_accepts(stream):
    unreduced: list[Unreduced] = []
    reduced = reduce_events(to_messages([s for s, _ in stream], [g for _, g in stream]), screen=SCREEN,
                            unreduced=unreduced)
    for a in reduced:
        parse_action(a.action, screen=SCREEN)  # raises on anything the schema rejects
        json.dumps(a.to_dict(), ensure_ascii=False).encode("utf-8")  # and every action can be written
        assert a.raw[0] <= a.raw[1]
    assert not [u for u in unreduced if u.reason.startswith("reducer error")], unreduced


# -- replay on a real desktop -------------------------------------------------------------------------------------
# The replay property itself (any person's input stream, raw through x11vnc and reduced through the executor,
# leaves the app in the same state) is tests/test_reducer.py.

@pytest.fixture(scope="module")
def typing_env(x11, tmp_path_factory):
    from hci_envs.traits import DesktopEnv

    probe = Probe(tmp_path_factory.mktemp("typing"))
    env = DesktopEnv(start_state={"apps": [probe.app()]})
    env.reset()
    probe.wait_for(lambda s: s.get("ready"), what="the probe app")
    try:
        yield env, probe
    finally:
        env.close()


F5 = 0xFFC2


def entry_after(env, probe: Probe, run, marker=None) -> str:
    """Clear the probe's entry, run the input, and read the entry once the app has seen a marker key (F5)
    sent after it, the same way (``marker``; default the executor)."""
    executor = env.executor
    executor.run({"type": "key", "keys": ["ctrl+a", "backspace"]})
    probe.wait_for(lambda s: s["entry"] == "" and last_key(s) == "BackSpace", what="an empty entry")
    run(executor)
    (marker or (lambda: executor.run({"type": "key", "keys": "F5"})))()
    return probe.wait_for(lambda s: last_key(s) == "F5", what="the marker")["entry"]


def last_key(state: dict) -> str | None:
    return state["keys"][-1]["keysym"] if state.get("keys") else None


@pytest.mark.x11
def test_text_typed_right_after_a_click_lands_where_the_click_was(typing_env):
    """openbox takes a click with a synchronous grab and focuses the window before it lets the click through;
    keys are not held meanwhile. A click must return only once the app has it, or the text typed after it goes
    to the field that had the focus. Stopping openbox for a moment makes that moment long."""
    env, probe = typing_env
    run = env.executor.run
    run({"type": "key", "keys": "F12"})  # the probe as it started: both entries empty, the first one focused
    x, y, w, h = probe.wait_for(lambda s: s["entry"] == s["entry2"] == "" and s["focus"].endswith("!entry"),
                                what="a fresh probe")["widgets"]["entry2"]
    wm = env.desktop._wm  # the window manager runs on the server's side, as this test's own child
    wm.send_signal(signal.SIGSTOP)
    resume = threading.Timer(0.3, wm.send_signal, (signal.SIGCONT,))
    resume.start()
    try:
        run({"type": "click", "x": x + w // 2, "y": y + h // 2})
        run({"type": "type_text", "text": "here"})
    finally:
        resume.join()
        wm.send_signal(signal.SIGCONT)
    state = probe.wait_for(lambda s: "here" in s["entry"] + s["entry2"], what="the typing")
    run({"type": "key", "keys": "F12"})  # the focus back on the first entry, for the tests after this one
    assert (state["entry"], state["entry2"]) == ("", "here")


@pytest.mark.x11
def test_a_viewers_clipboard_reaches_the_apps_as_soon_as_x11vnc_runs(x11):
    """x11vnc owns selections through a window it makes only once no display manager could kill it: 8 s after
    a viewer connects, unless told there is none. A person pasting into a new session lost the paste."""
    need_programs("x11vnc")
    from hci_envs.traits import DesktopEnv

    with DesktopEnv(start_state={"apps": []}) as env:
        env.reset()
        client = x11vnc_client(env)
        try:
            deadline = time.monotonic() + 3.0
            while env.desktop.events.get_clipboard() != "pasted" and time.monotonic() < deadline:
                client.cut_text("pasted")  # what x11vnc gets before its window exists, it drops
                time.sleep(0.1)
        finally:
            client.close()
        assert env.desktop.events.get_clipboard() == "pasted"


def x11vnc_client(env) -> RfbClient:
    """A VNC client straight to the desktop's x11vnc."""
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(env.desktop.vnc_socket()))
    return RfbClient(_SocketIO(sock), None)


# -- through the real VNC path, recorder and CLI ---------------------------------------------------------------

@pytest.mark.x11
def test_faults_in_a_live_recording_become_valid_actions_and_reports(rec, tmp_path):  # noqa: F811
    server, probe, state = rec
    recording(server, "start", name="faults")
    c = human(state)
    try:
        lx, ly = probe.center("listbox")
        pointer(c, lx, ly)
        pointer(c, lx, ly, 1, wait=0.8)  # a hold
        pointer(c, lx, ly, 0, wait=0.1)
        for _ in range(15):
            pointer(c, lx, ly, 16, wait=0.005)
            pointer(c, lx, ly, 0, wait=0.02)
        pointer(c, lx, ly, 8, wait=0.005)
        pointer(c, lx, ly, 0, wait=0.5)
        pointer(c, lx, ly, 16, wait=0.005)  # down then up at once: once "dy": 0
        pointer(c, lx, ly, 0, wait=0.005)
        pointer(c, lx, ly, 8, wait=0.005)
        pointer(c, lx, ly, 0, wait=0.5)
        c.click(*probe.center("entry"))
        time.sleep(0.6)
        keys(c, CHECK, 0x01000000 + 0x2713, ord("z"))
        c.click(*probe.center("canvas"))
        keys(c, RAISE_VOLUME)
        time.sleep(0.6)
    finally:
        c.close()
    stopped = recording(server, "stop")
    assert stopped["unreduced"] == 1
    episode = load_episode(stopped["path"])
    actions = [a["action"] for a in episode.actions]
    assert actions[:4] == [{"type": "mouse_move", "x": lx, "y": ly}, {"type": "mouse_down"},
                           {"type": "wait", "ms": actions[2]["ms"]}, {"type": "mouse_up"}]
    assert actions[2]["ms"] >= 300  # held 0.8 s: a hold, not a click
    scrolls = [(a.get("dy")) for a in actions if a["type"] == "scroll"]
    assert scrolls == [15, -1, 1, -1]
    assert {"type": "type_text", "text": "✓z"} in actions
    assert actions[-1] == {"type": "key", "keys": "XF86AudioRaiseVolume"}
    assert actions[-2]["type"] == "click", "the click closed by the media key was lost"
    check_raw = next(r["i"] for r in episode.raw if r.get("keysym") == CHECK)
    assert episode.meta["unreduced"][0]["raw"] == [check_raw, check_raw]
    assert "no key name" in episode.meta["unreduced"][0]["reason"]
    assert episode.meta["counts"]["unreduced"] == 1
    out = run_cli("export", stopped["path"], "--out", str(tmp_path / "faults.parquet"))
    assert out.returncode == 0, out.stderr


@pytest.mark.x11
def test_dense_actions_mark_the_frames_they_share(rec):  # noqa: F811
    server, probe, state = rec
    recording(server, "start", name="dense")
    c = human(state)
    try:
        c.click(*probe.center("entry"))
        time.sleep(0.6)
        keys(c, *map(ord, "abcdef"))
        time.sleep(0.5)
        keys(c, 0xFF51, 0xFF51, 0xFF08, 0xFF50, 0xFFFF, wait=0.005)  # Left Left BackSpace Home Delete
        time.sleep(0.6)
    finally:
        c.close()
    episode = load_episode(recording(server, "stop")["path"])
    steps = episode.actions
    assert [s["action"]["keys"] for s in steps[-5:]] == ["left", "left", "backspace", "home", "delete"]
    shared = [s for s in steps if "frame_shared_with" in s]
    assert shared, "five keys 5 ms apart got frames of their own"
    by_index = {s["index"]: s for s in steps}
    for s in steps:
        owner = s.get("frame_shared_with")
        previous = by_index.get(s["index"] - 1)
        same = previous is not None and (s["frame_before"], s["frame_after"]) == (
            previous["frame_before"], previous["frame_after"])
        assert same == (owner is not None), s
        if owner is not None:
            first = by_index[owner]
            assert "frame_shared_with" not in first
            assert (first["frame_before"], first["frame_after"]) == (s["frame_before"], s["frame_after"])


# -- stuck input ---------------------------------------------------------------------------------------------

def agent_types(server, probe: Probe, text: str) -> str:
    with McpClient(f"{server.base_url}/mcp") as mcp:
        mcp.ok("click", {"x": probe.center("entry2")[0], "y": probe.center("entry2")[1]})
        mcp.ok("type_text", {"text": text})
    return probe.wait_for(lambda s: len(s["entry2"]) == len(text), what="the agent's text")["entry2"]


@pytest.mark.x11
def test_a_viewer_leaving_with_shift_and_a_button_held_leaves_nothing_held(rec):  # noqa: F811
    server, probe, state = rec
    recorded = probe.state()
    tx, ty, _, _ = recorded["widgets"]["text"]
    ax, ay, _, ah = recorded["text_char_bbox"]["alpha"]
    out = vncdo(state, "control", "keydown", "shift", "move", str(tx + ax + 1), str(ty + ay + ah // 2),
                "mousedown", "1")  # and vncdo disconnects with both held
    assert out.returncode == 0, out.stderr
    assert agent_types(server, probe, "agent typed") == "agent typed"
    with McpClient(f"{server.base_url}/mcp") as mcp:  # button 1 held would make this motion select text
        mcp.ok("mouse_move", {"x": tx + 200, "y": ty + 60})
    assert probe.wait_for(lambda s: s["focus"].endswith("entry2"))["text_selection"] == ""


@pytest.mark.x11
def test_a_viewer_leaving_with_a_button_held_releases_it_for_the_next_person(rec):  # noqa: F811
    server, probe, state = rec
    recorded = probe.state()
    tx, ty, _, _ = recorded["widgets"]["text"]
    ax, ay, _, ah = recorded["text_char_bbox"]["alpha"]
    out = vncdo(state, "control", "move", str(tx + ax + 1), str(ty + ay + ah // 2), "mousedown", "1")
    assert out.returncode == 0, out.stderr
    c = human(state)  # no agent input in between: the release on disconnect alone must do it
    try:
        c.pointer(tx + 200, ty + 60)  # with button 1 still held, this motion would select text
        c.tap(F5)  # the app handles the motion before this key
        settled = probe.wait_for(lambda s: last_key(s) == "F5", what="the marker key")
    finally:
        c.close()
    assert settled["text_selection"] == ""


@pytest.mark.x11
def test_the_agent_taking_the_desktop_back_releases_what_the_person_held(rec):  # noqa: F811
    server, probe, state = rec
    c = human(state)
    try:
        c.key(SHIFT, True)  # and the person stays connected, holding it
        time.sleep(0.2)
        with server.http() as http:
            assert http.post("/control", json={"holder": "agent"}).status_code == 200
        try:
            assert agent_types(server, probe, "handed back") == "handed back"
        finally:
            with server.http() as http:
                http.post("/control", json={"holder": "auto"})
    finally:
        c.close()


@pytest.mark.x11
def test_reset_releases_keys_nobody_told_the_agent_about(typing_env, monkeypatch):
    from Xlib import XK, X, display
    from Xlib.ext import xtest

    env, probe = typing_env
    for key, value in env.desktop.server_env().items():
        if key in ("DISPLAY", "XAUTHORITY"):
            monkeypatch.setenv(key, value)
    entry_after(env, probe, lambda ex: None)  # an empty entry: with Shift held, ctrl+a selects nothing
    other = display.Display()  # another X client: its XTEST press is in no one's bookkeeping
    try:
        xtest.fake_input(other, X.KeyPress, other.keysym_to_keycode(XK.XK_Shift_L))
        other.sync()
        assert entry_after(env, probe, lambda ex: ex.run({"type": "type_text", "text": "x"})) == "X"
        env.step({"type": "type_text", "text": "y"})  # the episode is touched: the reset restarts the session
        env.reset()
        probe.wait_for(lambda s: s.get("ready"), what="the probe after the reset")
        assert entry_after(env, probe, lambda ex: ex.run({"type": "type_text", "text": "x"})) == "x"
    finally:
        other.close()


# -- a killed server, folders of episodes ------------------------------------------------------------------------

@pytest.mark.x11
def test_a_server_killed_mid_recording_has_its_episode_finished_at_the_next_start(x11, tmp_path):
    need_programs("x11vnc")
    episodes = tmp_path / "episodes"
    with ServerProcess("--vnc-port", "0", "--episodes-dir", str(episodes), "--app", "xterm") as server:
        with server.http() as http:
            state = http.get("/state").json()
            path = Path(http.post("/recording", json={"command": "start"}).json()["path"])
        c = human(state)
        c.click(300, 300)
        time.sleep(0.7)
        keys(c, *map(ord, "typed before the crash"), wait=0.01)
        time.sleep(0.3)
        server.stop(signal.SIGKILL)
        c.close()
    before = json.loads((path / "meta.json").read_text())
    assert before["state"] == "recording" and before["counts"]["actions"] == 0
    written = len((path / "actions.jsonl").read_text().splitlines())
    assert written < 2, "the typing was written before the kill: nothing left to recover"
    with ServerProcess("--vnc-port", "0", "--episodes-dir", str(episodes), "--app", "xterm") as server:
        with server.http() as http:
            assert http.post("/recording", json={"command": "start", "name": "next"}).status_code == 200
            http.post("/recording", json={"command": "stop"})
    episode = load_episode(path)
    assert [a["action"] for a in episode.actions] == [{"type": "click", "x": 300, "y": 300},
                                                      {"type": "type_text", "text": "typed before the crash"}]
    assert [a["index"] for a in episode.actions] == [0, 1]
    meta = episode.meta
    assert meta["state"] == "stopped" and meta["recovered"]["actions_added"] == 2 - written
    assert meta["counts"]["raw"] == len(episode.raw) and meta["counts"]["actions"] == 2
    assert meta["counts"]["frames"] == len(list((path / "frames").glob("*.png"))) >= 1
    assert all(a["frame_before"] and a["frame_after"] for a in episode.actions)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*hci_envs_command(), *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def two_episodes(rec_server, tmp_path_factory):  # noqa: F811
    """Two recorded episodes of the probe, each a click and some typing."""
    server, probe, _ = rec_server
    paths = []
    for text in ("first", "second"):
        with server.http() as http:
            assert http.post("/reset", json={}).status_code == 200
            state = http.get("/state").json()
        probe.wait_for(lambda s: s.get("ready") and s["entry"] == "", what="a fresh probe")
        recording(server, "start", name=text)
        c = human(state)
        try:
            c.click(*probe.center("entry"))
            time.sleep(0.6)
            keys(c, *map(ord, text))
            time.sleep(0.5)
        finally:
            c.close()
        paths.append(Path(recording(server, "stop")["path"]))
    return paths


@pytest.mark.x11
def test_import_never_merges_episodes_that_share_a_name(two_episodes, tmp_path):
    first, second = two_episodes
    sources = []
    for n, original in enumerate((first, first, second)):  # a copy of one episode, and another episode
        target = tmp_path / f"source{n}" / "demo"
        shutil.copytree(original, target)
        sources.append(str(target))
    out = run_cli("export", *sources, "--out", str(tmp_path / "demos.parquet"))
    assert out.returncode == 0, out.stderr
    back = run_cli("import", str(tmp_path / "demos.parquet"), "--out", str(tmp_path / "back"))
    assert back.returncode == 0, back.stderr
    assert sorted(p.name for p in (tmp_path / "back").iterdir()) == ["demo", "demo-2", "demo-3"]
    assert back.stderr.count("is imported as") == 2, back.stderr
    for name, original in (("demo", first), ("demo-2", first), ("demo-3", second)):
        again, source = load_episode(tmp_path / "back" / name), load_episode(original)
        assert [a["action"] for a in again.actions] == [a["action"] for a in source.actions]
        assert again.raw == source.raw


@pytest.mark.x11
def test_one_bad_episode_never_blocks_the_others(two_episodes, tmp_path):
    first, second = two_episodes
    folder = tmp_path / "episodes"
    shutil.copytree(first, folder / "good")
    shutil.copytree(second, folder / "bad")
    actions = folder / "bad" / "actions.jsonl"
    actions.write_text(actions.read_text() + '{"index": 9, "action": {"type": "scroll", "dy": 0}, '
                       '"t_start": 1, "t_end": 1}\n')

    out = run_cli("export", str(folder), "--out", str(tmp_path / "out.parquet"))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "skipped" in out.stderr and "bad" in out.stderr and "actions.jsonl:3" in out.stderr
    import datasets

    exported = datasets.Dataset.from_parquet(str(tmp_path / "out.parquet"))
    assert set(exported["episode"]) == {"good"}

    # a file with a damaged episode: the other still imports
    both = tmp_path / "both.parquet"
    assert run_cli("export", str(first), str(second), "--out", str(both)).returncode == 0
    rows = datasets.Dataset.from_parquet(str(both)).map(
        lambda row: {"meta": "{not json" if row["episode"] == "second" else row["meta"]})
    rows.to_parquet(str(tmp_path / "damaged.parquet"))
    back = run_cli("import", str(tmp_path / "damaged.parquet"), "--out", str(tmp_path / "back"))
    assert back.returncode == 1 and "Traceback" not in back.stderr, back.stderr
    assert "skipped second" in back.stderr
    assert [p.name for p in (tmp_path / "back").iterdir()] == ["first"]

    replayed = run_cli("replay", str(folder), "--no-timing", "--no-compare")
    assert replayed.returncode == 1 and "Traceback" not in replayed.stderr, replayed.stderr
    assert "skipped" in replayed.stderr and "bad" in replayed.stderr
    assert '"errors": 0' in replayed.stdout  # the good one was replayed, without errors


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
