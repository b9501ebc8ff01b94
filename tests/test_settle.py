"""Observations that show the action: "settled" on real screens, with carets that blink and apps that animate.

A step's observation is taken once the screen shows the action's effect (on by default, ObservationSpec.settle);
a screen whose background never stops changing (a blinking caret, an animation) still settles.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import pytest
from conftest import need_programs
from helpers import by_app, typing_desktop
from PIL import ImageChops

HERE = Path(__file__).resolve().parent
ANIMATION = [sys.executable, str(HERE / "apps" / "animate.py"), "600", "400"]


def home_without_blinking(tmp_path: Path) -> str:
    """A home template whose GTK settings stop the caret blinking: then a new screenshot differs from the last
    one only through what the step typed."""
    home = tmp_path / "home"
    settings = home / ".config" / "gtk-3.0"
    settings.mkdir(parents=True)
    (settings / "settings.ini").write_text("[Settings]\ngtk-cursor-blink=false\n")
    for path in (tmp_path, *home.rglob("*"), home):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return str(home)


@pytest.mark.parametrize("app", by_app("xterm", "mousepad"))
def test_fifty_steps_never_observe_the_screen_before_the_action(x11, tmp_path, app):
    from hci_envs.traits import DesktopEnv

    need_programs(app)
    command = {"xterm": ["xterm", "-e", "sh", "-c", "cat > /dev/null"], "mousepad": ["mousepad", "note.txt"]}[app]
    env = DesktopEnv(start_state={"apps": [{"command": command, "timeout": 60}],
                                  "home_template": home_without_blinking(tmp_path)})
    try:
        previous = env.reset().screenshot.data
        stale = []
        for i in range(50):
            obs = env.step({"type": "type_text", "text": "abcdefghij"[i % 10]})
            assert obs.error is None, obs.error
            if obs.screenshot.data == previous:
                stale.append(i)
            previous = obs.screenshot.data
        assert stale == [], f"{len(stale)} of 50 observations showed the screen before their action: {stale}"
    finally:
        env.close()


@pytest.mark.parametrize("app", by_app("mousepad", "chromium"))
def test_a_step_shows_the_keys_of_an_app_too_busy_to_read_them_at_once(x11, app):
    """The app is stopped for a second as a step types into it: the step's observation still shows the text. The
    settle asks the app whether it has read the keys before it waits for their effect; without that, the wait
    for an effect (0.3 s) saw nothing, called the unchanged screen settled, and the agent saw its typing lost
    (Writer on a loaded machine)."""
    need_programs(app)
    with typing_desktop(app) as (env, _):
        before = env.observe().screenshot.to_pil().convert("L")
        pid = env.desktop.apps()[-1][1].pid
        os.kill(pid, signal.SIGSTOP)
        threading.Timer(1.0, os.kill, (pid, signal.SIGCONT)).start()
        obs = env.step([{"type": "type_text", "text": "WWWW", "mode": "keys"}])
        assert obs.error is None, obs.error
        after = obs.screenshot.to_pil().convert("L")
        changed = ImageChops.difference(before, after).point(lambda v: 255 if v > 64 else 0).getbbox()
        # four wide letters, not a caret that blinked between the two screenshots
        assert changed is not None and changed[2] - changed[0] >= 20, \
            f"the step's screenshot does not show the typing: {changed}, {obs.outcomes}"
        assert obs.outcomes[0]["data"]["landed"]["screen"] == "changed", obs.outcomes


@pytest.mark.apps
def test_a_screen_that_never_stops_moving_settles(x11):
    """An animation and a GTK editor with a blinking caret: the screen is never still, yet it settles, and
    typed text is on the observation."""
    from hci_envs.traits import DesktopEnv

    need_programs("mousepad")
    env = DesktopEnv(start_state={"apps": [{"command": ANIMATION}, {"command": ["mousepad", "note.txt"], "timeout": 60}]})
    try:
        env.reset()
        events = env.desktop.events
        assert events.wait_settled(0.05, 2.0), "the animation kept the screen from settling"
        for text in ("one ", "two ", "three"):
            result = env.executor.run({"type": "type_text", "text": text}, settle=True)
            assert result.settled, f"typing {text!r} did not settle"
        assert env.desktop.input.window_title(env.desktop.windows()[-1]).startswith("*")  # mousepad: modified
    finally:
        env.close()


@pytest.mark.x11
def test_settle_can_be_turned_off(x11):
    from hci_envs.protocol import ObservationSpec
    from hci_envs.traits import DesktopEnv

    assert ObservationSpec().settle is True
    env = DesktopEnv(start_state={"apps": [{"command": ANIMATION}]}, observation={"settle": False})
    try:
        env.reset()
        waited = []
        env.executor.settle = lambda since: waited.append(since) or True  # observe whether step() settles
        env.step({"type": "mouse_move", "x": 10, "y": 10})
        assert waited == []
    finally:
        env.close()


@pytest.mark.x11
def test_changes_read_late_are_placed_where_they_were_drawn(x11):
    """A loaded machine reads the screen's damage late. Two small changes at opposite corners, drawn while the
    event thread is held busy (as a loaded machine holds it), are read afterwards as two small boxes, not one
    box over the whole screen between them (a click in the middle would have "landed"). The thread is held
    through the events' own queue (``_post``): the declared seam for a thread that cannot run."""
    import time

    from Xlib import X, display as xdisplay

    from hci_envs.env.executor import near_action
    from hci_envs.traits import DesktopEnv

    env = DesktopEnv(start_state={"apps": []})
    try:
        env.reset()
        events = env.desktop.events
        assert events.wait_settled(0.2, 5.0)
        conn = xdisplay.Display(env.desktop.display)
        try:
            screen = conn.screen()
            width, height = screen.width_in_pixels, screen.height_in_pixels
            gc = screen.root.create_gc(foreground=screen.white_pixel, subwindow_mode=X.IncludeInferiors)
            held = threading.Event()
            events._post(lambda: (held.set(), time.sleep(1.5)))
            assert held.wait(5)
            drawn_from = time.monotonic()
            screen.root.fill_rectangle(gc, 10, 10, 20, 20)
            conn.sync()
            time.sleep(0.1)
            screen.root.fill_rectangle(gc, width - 30, height - 30, 20, 20)
            conn.sync()
        finally:
            conn.close()
        events.damage_generation()  # waits for the held thread, then reads every event
        assert time.monotonic() - drawn_from >= 1.0, "the event thread was not held: nothing was read late"
        boxes = events.changes_since(drawn_from - 0.05)
        assert any(near_action(box, (20, 20)) for box in boxes), boxes
        assert any(near_action(box, (width - 20, height - 20)) for box in boxes), boxes
        assert not any(near_action(box, (width // 2, height // 2)) for box in boxes), boxes
    finally:
        env.close()
