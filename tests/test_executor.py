"""The executor's batch and its landing signal: a list of actions runs in order and stops at the first failure,
with each action's outcome; an input action followed by a settle window says what the screen did (changed at the
action, elsewhere, or nothing) and whether the keyboard focus moved; keys sent with nothing focused say so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import ANIMATE, Probe

from hci_envs.errors import InvalidActionError

SLOW_SAVE = [sys.executable, str(Path(__file__).resolve().parent / "apps" / "slow_save.py")]


def fake_env(apps=({"command": ["app"]},)):
    from hci_envs.traits import DesktopEnv

    return DesktopEnv(desktop="fake", start_state={"width": 320, "height": 240, "apps": list(apps)})


@pytest.mark.fake
def test_a_batch_runs_in_order_stops_at_the_first_failure_and_reports_each_outcome():
    with fake_env() as env:
        env.reset()
        obs = env.step([{"type": "click", "x": 10, "y": 10}, {"type": "type_text", "text": "hé ✓"},
                        {"type": "click", "x": 5000, "y": 1}, {"type": "type_text", "text": "never"}])
        assert [o["status"] for o in obs.outcomes] == ["ok", "ok", "error", "not_run"]
        assert obs.outcomes[2]["error"]["code"] == "VALIDATION_ERROR" and obs.error["field"] == "x/y"
        assert env.desktop.typed == "hé ✓"  # what came before the failure ran, nothing after it
        assert obs.screenshot is not None and env.state.step_count == 1  # one observation, one step
        shot = env.step([{"type": "screenshot", "max_side": 100}, {"type": "wait", "ms": 1}])
        assert shot.outcomes[0]["images"] == [0] and shot.outcomes[1]["images"] == []
        assert shot.images[0].width == 100


@pytest.mark.fake
def test_a_single_action_is_still_refused_before_it_runs():
    with fake_env() as env:
        env.reset()
        with pytest.raises(InvalidActionError, match="off screen"):
            env.step({"type": "click", "x": 5000, "y": 1})
        assert env.desktop.log == [] and env.step({"type": "wait", "ms": 1}).outcomes is None


@pytest.mark.fake
def test_a_click_says_it_landed_and_keys_with_nothing_focused_say_so():
    with fake_env() as env:
        env.reset()
        clicked = env.step({"type": "click", "x": 100, "y": 100})
        assert clicked.data["landed"] == {"screen": "at_action", "changes": 1, "focus_moved": False,
                                          "focused": True}
        assert "focused" not in env.step({"type": "type_text", "text": "ok"}).data
    with fake_env(apps=()) as env:  # no window: nothing has the keyboard focus
        env.reset()
        typed = env.step({"type": "type_text", "text": "x" * 69})
        assert "no window had the keyboard focus" in typed.text and typed.data["focused"] is False
        assert typed.data["landed"]["focused"] is False
        out = env.call_tool("key", {"keys": "ctrl+s"})
        assert out.data["focused"] is False and "no app received the keys" in out.text


@pytest.mark.fake
def test_the_landing_comes_with_a_settle_window_only():
    with fake_env() as env:
        env.reset()
        assert "landed" not in env.call_tool("click", {"x": 5, "y": 5}).data  # no settle: no window to watch
        assert env.call_tool("click", {"x": 5, "y": 5, "settle": True}).data["landed"]["screen"] == "at_action"


@pytest.mark.fake
def test_a_settle_after_keys_asks_the_app_and_is_not_settled_when_it_does_not_answer():
    """The bookkeeping of the question after keys, on the fake desktop with its ``handled`` answering as told (the
    declared seam; tests/test_settle.py asks real apps): keys are asked about and pointer input is not; an app
    that did not answer in time makes the settle false, one that cannot be asked does not."""
    from hci_envs.desktop.acks import Acknowledgement

    with fake_env() as env:
        env.reset()
        asked, answers = [], []
        env.desktop.input.handled = lambda timeout, drawing=True: asked.append(drawing) or answers.pop(0)
        answers.append(Acknowledgement(True, "ping"))
        assert env.executor.run({"type": "type_text", "text": "a"}, settle=True).settled is True
        assert asked == [False]  # asked, and only in a way that draws nothing
        assert env.executor.run({"type": "click", "x": 5, "y": 5}, settle=True).settled is True
        assert asked == [False]  # a click is not asked about
        answers.append(Acknowledgement(False, "ping", 2.0, "no answer to _NET_WM_PING within 2.0s"))
        assert env.executor.run({"type": "key", "keys": "ctrl+s"}, settle=True).settled is False
        answers.append(Acknowledgement(False, "unknown", 0.0, "cannot be asked"))
        assert env.executor.run({"type": "type_text", "text": "b"}, settle=True).settled is True
        answers.append(Acknowledgement(False, "none", 0.0, "the step's time limit was reached"))
        assert env.executor.run({"type": "type_text", "text": "c"}, settle=True).settled is False
        assert answers == [] and len(asked) == 4


@pytest.mark.x11
def test_on_a_real_screen_a_click_that_misses_says_it_did_not_land_there(x11):
    """A click on the probe's button changes it there; a click on the bare desktop changes nothing there; and an
    animation beside them, which never stops changing, is never a click's effect."""
    from hci_envs.traits import DesktopEnv

    probe = Probe()
    # beside the probe, not over it: the window manager stacks the two as they come up
    animation = {"command": [sys.executable, str(ANIMATE), "300", "200", "10", "900", "500"], "name": "animation"}
    with DesktopEnv(start_state={"apps": [animation, probe.app()]}) as env:
        env.reset()
        state = probe.wait_for(lambda s: s.get("ready"), what="the probe app")
        x, y = probe.center("button", state)
        hit = env.step({"type": "click", "x": x, "y": y})
        assert hit.data["landed"]["screen"] == "at_action", hit.data
        probe.wait_for(lambda s: s["clicks"] == 1, what="the click on the button")
        missed = env.step({"type": "click", "x": 820, "y": 760})  # the root window: nothing draws there
        # the probe may repaint as it loses the focus, but not where the click was
        assert missed.data["landed"]["screen"] in ("nothing", "elsewhere"), missed.data


@pytest.mark.x11
def test_on_a_real_screen_keys_with_no_window_say_nothing_received_them(x11):
    from hci_envs.traits import DesktopEnv

    with DesktopEnv(start_state={"apps": []}) as env:
        env.reset()
        typed = env.step({"type": "type_text", "text": "lost keys"})
        assert typed.data["focused"] is False and "no window had the keyboard focus" in typed.text


@pytest.mark.x11
def test_the_clipboard_is_read_once_the_app_has_handled_the_keys_before(x11):
    """An app busy when its copy key arrives fills the clipboard later than the key is delivered: reading the
    clipboard right after the key finds what the copy put there, not what was there before."""
    from hci_envs.traits import DesktopEnv

    with DesktopEnv(start_state={"apps": [{"command": SLOW_SAVE}]}) as env:
        env.reset()
        env.step({"type": "click", "x": 200, "y": 200})  # on the app's canvas: it has the keyboard
        env.step({"type": "clipboard_set", "text": "before"})
        env.step({"type": "key", "keys": "c"})
        assert env.step({"type": "clipboard_get"}).data["text"] == "slowly copied"


@pytest.mark.x11
def test_a_window_gone_before_its_title_is_read_has_none(x11):
    """Windows come and go while a list of them is walked (LibreOffice shows short-lived ones as it loads a
    document): a window gone by the time it is looked at has no title and is no shown window, not an error."""
    from Xlib import X, display

    from hci_envs.traits import DesktopEnv

    with DesktopEnv(start_state={"apps": []}) as env:
        env.reset()
        env_vars = env.desktop.app_env()
        client = display.Display(env_vars["DISPLAY"])  # as root: the display's cookie is readable here
        window = client.screen().root.create_window(0, 0, 20, 20, 0, X.CopyFromParent)
        window.set_wm_name("short-lived")
        window.map()
        client.sync()
        assert env.desktop.input.window_title(window.id) == "short-lived"
        window.destroy()
        client.sync()
        assert env.desktop.input.window_title(window.id) == ""
        assert window.id not in env.desktop.input.mapped_children()
        client.close()


@pytest.mark.fake
def test_a_look_after_input_in_a_batch_waits_for_the_screen_to_settle(monkeypatch):
    with fake_env() as env:
        env.reset()
        calls: list[str] = []
        settle = env.executor.settle
        monkeypatch.setattr(env.executor, "settle", lambda since: calls.append("settle") or settle(since))
        run = env.executor.run
        monkeypatch.setattr(env.executor, "run", lambda action, **kw: calls.append(action.type) or run(action, **kw))
        env.step([{"type": "click", "x": 10, "y": 10}, {"type": "screenshot"}, {"type": "screenshot"}])
        # settled before the first look, not again before the second (nothing was sent since), nor before the
        # step's own observation (the last screenshot)
        assert calls == ["click", "settle", "screenshot", "screenshot", "screenshot"], calls
