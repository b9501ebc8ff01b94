"""Typing any Unicode as keys: scratch keys are remapped only once the app that gets the keys has shown that it
handled the keys sent on them (an answer to _NET_WM_PING, or the repaint of an exposed corner), never after
some time. A stopped app makes typing wait, an app that never answers ends the action with a TIMEOUT and
no wrong character, and how a text is typed does not depend on the clock.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager

import pytest
from conftest import need_programs
from helpers import MANY_CHARACTERS, TYPING_COMMANDS, by_app, typing_desktop, wait_until

MANY = MANY_CHARACTERS
COMMANDS = TYPING_COMMANDS


@contextmanager
def desktop_with(app: str):
    if app != "tk":
        need_programs(app)
    with typing_desktop(app) as pair:
        yield pair


def stop_app(env, seconds: float | None) -> int:
    """SIGSTOP the app (the newest one), and SIGCONT it after ``seconds`` (None: the caller does)."""
    pid = env.desktop.apps()[-1][1].pid
    os.kill(pid, signal.SIGSTOP)
    if seconds is not None:
        threading.Timer(seconds, os.kill, (pid, signal.SIGCONT)).start()
    return pid


def wrong(expected: str, got: str) -> int:
    return sum(a != b for a, b in zip(expected, got)) + abs(len(expected) - len(got))


@pytest.mark.parametrize("app", by_app("xterm", "mousepad", "chromium", "tk"))
def test_keys_wait_for_a_stopped_app_and_every_character_arrives(x11, app):
    """The app is stopped for 2.5 s while 310 characters (300 of them on no key) are typed as keys: the step
    waits for it at the pause instead of remapping keys it has not handled, and not one character is wrong
    (85 of 310 were in xterm, mousepad and Tk when the pause was a settle of the screen; chromium lost the
    whole page to a scratch key on the keycode of XF86Back, and read the first key after the pause with the
    old map in 1 run of 6 until its input method's own connection was asked about the new map)."""
    with desktop_with(app) as (env, got):
        # chromium also reads the map on GDK's connection (its input method), which is asked after a remap
        side = env.desktop.events.app_acknowledged(new_map=True)
        assert side.ok and side.how == ("ping" if app == "chromium" else "none"), side
        text = MANY + ("\n" if app == "xterm" else "")
        stop_app(env, 2.5)
        start = time.monotonic()
        obs = env.step({"type": "type_text", "text": text, "mode": "keys"})
        took = time.monotonic() - start
        assert wait_until(lambda: got() == MANY, 20), \
            f"{wrong(MANY, got())} wrong characters: {got()!r} ({obs.error}, {obs.data}, {took:.2f}s)"
        assert obs.error is None and obs.data["mode"] == "keys" and obs.data["pauses"] >= 1, (obs.error, obs.data)
        assert took > 2.0, f"the step did not wait for the stopped app ({took:.2f}s)"


@pytest.mark.parametrize("app", by_app("xterm", "mousepad"))
def test_an_app_that_never_answers_ends_in_a_timeout_not_in_wrong_text(x11, app):
    """An app that stays stopped cannot show it has handled the first keys: typing stops there with a TIMEOUT
    that says how far it got, within the step's time limit, and what the app gets once it resumes is exactly
    the start of the text (the ping path in mousepad, the Expose path in xterm)."""
    with desktop_with(app) as (env, got):
        pid = stop_app(env, None)
        try:
            start = time.monotonic()
            obs = env.step({"type": "type_text", "text": MANY, "mode": "keys"}, timeout_s=3.0)
            took = time.monotonic() - start
        finally:
            os.kill(pid, signal.SIGCONT)
        assert obs.error is not None and obs.error["code"] == "TIMEOUT", obs.error
        typed = obs.error["typed"]
        assert 0 < typed < len(MANY) and f"typed {typed} of {len(MANY)} characters" in obs.error["message"], obs.error
        assert took < 3.0 + 1.5, f"the step overran its time limit: {took:.2f}s"
        if app == "xterm":
            env.step({"type": "key", "keys": "Return"})
        assert wait_until(lambda: got() == MANY[:typed], 20), f"{wrong(MANY[:typed], got())} wrong: {got()!r}"


@pytest.mark.x11
def test_two_texts_back_to_back_are_both_typed_as_keys(x11):
    """'auto' types as keys any text that needs no more spare keys than the keyboard has, however recently
    the keys were used: the second text waits for one answer from the app, not for a second of idleness
    (which made it paste when it came within a second of the first)."""
    first = "".join(chr(c) for c in range(0x4E00, 0x4E00 + 150))
    second = "".join(chr(c) for c in range(0x5E00, 0x5E00 + 150))
    with desktop_with("xterm") as (env, got):
        one = env.step({"type": "type_text", "text": first, "mode": "auto"})
        two = env.step({"type": "type_text", "text": second + "\n", "mode": "auto"})
        assert one.error is None and one.data["mode"] == "keys", (one.error, one.data)
        assert two.error is None and two.data["mode"] == "keys" and two.data["pauses"] == 1, (two.error, two.data)
        assert wait_until(lambda: got() == first + second, 20), f"{wrong(first + second, got())} wrong"


@pytest.mark.x11
def test_keys_go_to_the_app_under_the_pointer_when_the_focus_is_the_root(x11):
    """Without a window manager the focus stays where the X server starts it (PointerRoot): keys go to the
    window under the pointer, and so does the question whether they have been handled."""
    from Xlib import X, display

    from hci_envs.traits import WorkstationEnv

    with WorkstationEnv(start_state={"window_manager": None, "apps": [{"command": COMMANDS["xterm"]}]}) as env:
        env.reset()
        box = env.desktop.input.window_box(env.desktop.windows()[-1])
        env.step({"type": "mouse_move", "x": box[0] + box[2] // 2, "y": box[1] + box[3] // 2})
        d = display.Display(env.desktop.display)
        try:
            focus = d.get_input_focus().focus
        finally:
            d.close()
        assert focus == X.PointerRoot, focus
        stop_app(env, 1.5)
        obs = env.step({"type": "type_text", "text": MANY + "\n", "mode": "keys"})
        assert obs.error is None and obs.data["pauses"] >= 1, (obs.error, obs.data)
        saved = env.home / "typed.txt"
        assert wait_until(lambda: saved.exists() and saved.read_text(encoding="utf-8").rstrip("\n") == MANY, 20), \
            saved.read_text(encoding="utf-8") if saved.exists() else "nothing saved"


@pytest.mark.x11
def test_keys_nobody_gets_need_no_answer(x11):
    """With no app at all (the window manager holds the focus), typing past the spare keys neither waits nor
    fails: nobody can misread the keys."""
    from hci_envs.traits import WorkstationEnv

    with WorkstationEnv(start_state={"apps": []}) as env:
        env.reset()
        start = time.monotonic()
        obs = env.step({"type": "type_text", "text": MANY, "mode": "keys"})
        assert obs.error is None and obs.data["pauses"] >= 1, (obs.error, obs.data)
        assert time.monotonic() - start < 3.0


@pytest.mark.x11
def test_a_scratch_key_is_remapped_only_after_its_batch_is_acknowledged(x11):
    """The bookkeeping: a slot used by a plan is busy until the caller reports that the apps caught up with
    that plan, whatever the time; unmapped and acknowledged slots are free."""
    from hci_envs.desktop.desktop import Desktop
    from hci_envs.protocol import StartState

    with Desktop(StartState(apps=[])) as desktop:
        keyboard = desktop.input.keyboard
        slots = keyboard.scratch_slots
        assert slots >= 200
        first = [0x1004E00 + i for i in range(slots)]
        plan = keyboard.plan(first)
        assert not plan.missing and keyboard.busy() == slots
        time.sleep(1.2)  # the clock frees nothing
        more = [0x1005E00 + i for i in range(10)]
        assert keyboard.plan(more).missing == more
        assert keyboard.plan(first[:5]).keys == {k: plan.keys[k] for k in first[:5]}  # still on their keys
        keyboard.acknowledged(plan.batch)
        later = keyboard.plan(more)
        assert not later.missing
        assert set(later.keys.values()).isdisjoint(plan.keys[k] for k in first[:5])  # used after the answer
        assert keyboard.fits(set(first)) and not keyboard.fits(set(first + more))


@pytest.mark.fake
def test_auto_pastes_what_keys_could_not_type_and_keys_says_how_far_it_got(monkeypatch):
    """The executor's side, on the fake desktop: when typing stops short because the app did not answer,
    'auto' pastes the rest and 'keys' raises TIMEOUT with the number of characters typed."""
    from hci_envs.desktop.xinput import Typed
    from hci_envs.traits import WorkstationEnv

    with WorkstationEnv(desktop="fake") as env:
        env.reset()

        def typed_partly(text: str) -> Typed:
            env.desktop.typed += text[:5]
            return Typed(5, 1, "the app of window 0x1 ('x'): no answer to _NET_WM_PING within 10.0s")

        monkeypatch.setattr(env.desktop.input, "type_keys", typed_partly)
        obs = env.step({"type": "type_text", "text": "héllo wörld", "mode": "auto"})
        assert obs.error is None and obs.data["mode"] == "keys+paste" and obs.data["keys"] == 5, (obs.error, obs.data)
        assert env.desktop.typed == "héllo wörld"  # five keys, then the rest pasted
        obs = env.step({"type": "type_text", "text": "héllo wörld", "mode": "keys"})
        assert obs.error["code"] == "TIMEOUT" and obs.error["typed"] == 5 and obs.error["chars"] == 11, obs.error
        assert "typed 5 of 11 characters" in obs.error["message"] and "_NET_WM_PING" in obs.error["message"]


@pytest.mark.x11
def test_a_terminal_draws_the_unicode_typed_into_it():
    """What the agent sees of its own typing: xterm draws check marks, CJK and Greek (its default bitmap font is
    not installed, and drew them as blanks although the characters arrived)."""
    import base64
    import io

    from PIL import Image

    from hci_envs.traits import DesktopEnv

    need_programs("xterm")
    app = {"command": ["xterm", "-geometry", "40x3+0+0", "-e", "cat"], "name": "xterm"}
    with DesktopEnv(start_state={"window_manager": None, "apps": [app]}) as env:
        env.reset()

        def dark_in_first_row() -> int:  # the typed line's echo; the cursor has gone to the third row
            shot = env.step({"type": "screenshot", "format": "png"}).screenshot
            image = Image.open(io.BytesIO(base64.b64decode(shot.data))).convert("L")
            return sum(image.crop((2, 2, 200, 14)).histogram()[:128])  # inside the window, whatever the font

        env.step({"type": "type_text", "text": "✓✓ 日本語 αβγ\n"})
        assert wait_until(lambda: dark_in_first_row() > 60, 10), dark_in_first_row()
