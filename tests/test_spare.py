"""Spare desktops: a reset swaps in the next episode's desktop, prepared in the background (hci_envs.env.spare).

Real desktops and apps throughout. What a user relies on: after a swap the episode is the declared start
state (apps fresh and drawn, home restored, clipboard set, input reaching the new desktop), nothing of the
old episode's agent survives, snapshots and task start states still work, VNC viewers follow the session to
its new desktop, and closing leaves nothing behind. Speed is measured in bench/bench_reset.py.
"""

from __future__ import annotations

import base64
import io
import json
import os
import time

import pytest
from PIL import Image, ImageChops
from rfb_client import RfbClient

from hci_envs.errors import DisplayStartError
from hci_envs.traits.envs import WorkstationEnv
from helpers import ANIMATE, McpClient, ServerProcess, by_app, descendants, image_of, processes_named, wait_until
from test_containment import account_pids

CHROMIUM = ["chromium", "--no-first-run", "--no-sandbox", "--disable-gpu", "--password-store=basic", "about:blank"]


def spare_ready(env) -> bool:
    return env.state.spare["state"] == "ready"


def colours(observation) -> int:
    image = Image.open(io.BytesIO(base64.b64decode(observation.screenshot.data))).convert("RGB")
    return len(image.getcolors(1 << 20) or [])


@pytest.fixture
def xterm_env(x11):
    env = WorkstationEnv(start_state={"apps": [{"command": ["xterm"]}], "clipboard": "declared"}, spare=True)
    try:
        yield env
    finally:
        env.close()


@pytest.mark.x11
def test_reset_swaps_in_the_spare_and_the_episode_starts_clean(xterm_env):
    env = xterm_env
    env.reset()
    assert wait_until(lambda: spare_ready(env), 30), env.state.spare
    first = (env.desktop.display, env.account.uid, env.home)
    # the episode leaves traces: a file, a daemon that left its group, the clipboard, a held key
    env.call_tool("bash", {"command": "echo old > ~/left-behind; setsid -f sleep 917"})
    env.call_tool("clipboard_set", {"text": "from the old episode"})
    env.call_tool("key_down", {"key": "shift"})
    assert any(b"917" in open(f"/proc/{p}/cmdline", "rb").read() for p in account_pids(first[1]))
    obs = env.reset()
    second = (env.desktop.display, env.account.uid, env.home)
    assert second[0] != first[0] and second[1] != first[1], (first, second)  # the spare, not a warm restart
    assert account_pids(first[1]) == [] or all(
        b"917" not in open(f"/proc/{p}/cmdline", "rb").read() for p in account_pids(first[1]))
    assert not (env.home / "left-behind").exists()
    assert env.call_tool("clipboard_get").data["text"] == "declared"
    assert colours(obs) > 2  # xterm drawn, not an empty frame
    # input reaches the new desktop: typed into its xterm, run by its shell, as the new account, in its home
    env.call_tool("type_text", {"text": "id -u > ~/typed\n"})
    assert wait_until(lambda: (env.home / "typed").exists() and (env.home / "typed").read_text().strip(), 10)
    assert int((env.home / "typed").read_text()) == second[1]  # shift was let go: "id -u", not "ID -U"
    # and the retired desktop becomes the next spare: the session alternates between the two
    assert wait_until(lambda: spare_ready(env), 30), env.state.spare
    env.reset()
    assert (env.desktop.display, env.account.uid) == first[:2]


@pytest.mark.parametrize("app", by_app("mousepad", "animation",
                                        values={"mousepad": ["mousepad"], "animation": ["python3", str(ANIMATE)]}))
def test_a_gtk_editor_and_an_endless_animation_swap_in_fresh(x11, app):
    with WorkstationEnv(start_state={"apps": [{"command": app}]}, spare=True) as env:
        env.reset()
        for _ in range(2):  # there, and back onto the first desktop, prepared again
            assert wait_until(lambda: spare_ready(env), 30), env.state.spare
            (old_app, old_proc), = env.desktop.apps()
            old_uid = env.account.uid
            env.step({"type": "type_text", "text": "this episode's input"})
            obs = env.reset()
            (spec, proc), = env.desktop.apps()
            assert env.account.uid != old_uid and proc.pid != old_proc.pid and proc.poll() is None
            # the last episode's app ended with it: killed before the reset answered (it runs no code after its
            # SIGKILL); its exit, on a busy machine, may finish a moment later
            assert wait_until(lambda: old_proc.poll() is not None, 10)
            assert obs.truncated_reason is None and colours(obs) > 2


@pytest.mark.x11
def test_snapshots_and_other_start_states_rebuild_in_place_and_keep_working(xterm_env):
    env = xterm_env
    env.reset()
    env.call_tool("bash", {"command": "echo kept > ~/note"})
    env.snapshot("with-note")
    assert wait_until(lambda: spare_ready(env), 30)
    env.reset()  # swapped: the snapshot was taken in the other home and must have come along
    assert not (env.home / "note").exists()
    env.reset(snapshot="with-note")
    assert (env.home / "note").read_text() == "kept\n"
    # a task's own start state: the spare (prepared for the old one) is not used, and is prepared anew
    env.reset(start_state={"apps": [{"command": ["python3", str(ANIMATE)], "name": "animation"}]})
    assert [spec.label for spec, _ in env.desktop.apps()] == ["animation"]
    assert wait_until(lambda: spare_ready(env), 30)
    env.reset()
    assert [spec.label for spec, _ in env.desktop.apps()] == ["animation"]


@pytest.mark.apps
def test_close_leaves_no_process_display_or_account_behind(x11):
    def xvfbs() -> set[int]:  # this process's own: other sessions of pytest (CI's tiers) run desktops beside it
        return {pid for pid in processes_named("Xvfb") if pid in descendants(os.getpid())}

    before = xvfbs()
    env = WorkstationEnv(start_state={"apps": [{"command": ["mousepad"]}]}, spare=True)
    env.reset()
    assert wait_until(lambda: spare_ready(env), 30)
    uids = {env.account.uid}
    env.step({"type": "click", "x": 400, "y": 300})  # an untouched episode is not rebuilt at all
    env.reset()
    uids.add(env.account.uid)
    env.close()
    assert len(uids) == 2
    assert wait_until(lambda: all(not account_pids(uid) for uid in uids), 10)
    assert wait_until(lambda: xvfbs() <= before, 10)


@pytest.mark.browser
def test_close_while_the_spare_is_still_starting(x11):
    env = WorkstationEnv(start_state={"apps": [{"command": CHROMIUM}]}, spare=True)
    env.reset()
    env.close()  # the spare's chromium may be half up: close waits for it and ends it
    assert wait_until(lambda: not [p for p, cmd in processes_named("chromium").items() if "about:blank" in cmd], 15)


@pytest.mark.browser
def test_a_browser_counts_as_up_once_it_has_drawn(x11):
    """chromium maps an empty grey window long before it paints its UI: with and without a spare, the first
    observation after a reset shows the UI."""
    with WorkstationEnv(start_state={"apps": [{"command": CHROMIUM}]}, spare=True) as env:
        assert colours(env.reset()) > 20
        assert wait_until(lambda: spare_ready(env), 60)
        env.step({"type": "click", "x": 600, "y": 400})
        assert colours(env.reset()) > 20
    with WorkstationEnv(start_state={"apps": [{"command": CHROMIUM}]}, spare=False) as env:
        assert colours(env.reset()) > 20
        env.step({"type": "click", "x": 600, "y": 400})
        assert colours(env.reset()) > 20


@pytest.mark.x11
def test_an_apps_own_readiness_probe_is_waited_for(x11, tmp_path):
    slow = 'sleep 1; touch "$HOME/up"; exec xterm'
    app = {"command": ["sh", "-c", slow], "name": "slow", "ready_command": ["test", "-e", "up"]}
    with WorkstationEnv(start_state={"apps": [app]}) as env:
        env.reset()
        assert (env.home / "up").exists()  # reset returned after the probe passed, not before
    never = {"command": ["xterm"], "ready_command": ["false"], "timeout": 2}
    with WorkstationEnv(start_state={"apps": [never]}) as env:
        with pytest.raises(DisplayStartError, match="readiness probe"):
            env.reset()


@pytest.mark.x11
def test_vnc_viewers_follow_the_session_to_its_new_desktop(x11):
    """A viewer of the old display is let go at the swap (the old display lives on as the spare, which nobody
    may see or drive); reconnecting reaches the new one."""
    with ServerProcess("--spare", "--app", "xterm", "--vnc-port", "0") as server:
        with server.http() as http:
            http.post("/reset", json={}).raise_for_status()
            assert wait_until(lambda: http.get("/state").json()["spare"]["state"] == "ready", 30)
            state = http.get("/state").json()
            viewer = RfbClient.tcp(state["vnc_native_port"], state["vnc_secrets"]["view"])
            try:
                assert viewer.full_frame().size == (1280, 800)
                with McpClient(f"{server.base_url}/mcp") as mcp:
                    mcp.ok("click", {"x": 600, "y": 400})  # an untouched episode is not rebuilt at all
                http.post("/reset", json={}).raise_for_status()
                with pytest.raises((EOFError, ConnectionError, OSError)):
                    for _ in range(50):
                        viewer.full_frame()
                        time.sleep(0.1)
            finally:
                viewer.close()
            again = RfbClient.tcp(state["vnc_native_port"], state["vnc_secrets"]["control"])
            try:
                before = again.full_frame()
                for ch in "echo seen\r":  # a person types into the new desktop's xterm
                    again.tap(0xFF0D if ch == "\r" else ord(ch))
                assert wait_until(lambda: again.full_frame().tobytes() != before.tobytes(), 10)
                # and it is the session's desktop that changed: the agent's screenshot shows the same screen
                time.sleep(0.5)
                with McpClient(f"{server.base_url}/mcp") as mcp:
                    seen = image_of(mcp.ok("screenshot", {"format": "png"})).convert("RGB")
                diff = ImageChops.difference(seen, again.full_frame().convert("RGB")).convert("L")
                assert diff.point(lambda v: 255 if v else 0).histogram()[255] < 0.01 * 1280 * 800
            finally:
                again.close()


@pytest.mark.apps
def test_server_sessions_report_their_spare(x11):
    with ServerProcess("--spare", "--app", "mousepad", "--no-vnc") as server, server.http() as http:
        http.post("/reset", json={}).raise_for_status()
        assert wait_until(lambda: http.get("/state").json()["spare"]["state"] == "ready", 30)
    with ServerProcess("--no-spare", "--app", "xterm", "--no-vnc") as server, server.http() as http:
        http.post("/reset", json={}).raise_for_status()
        assert http.get("/state").json()["spare"] is None


@pytest.mark.x11
def test_serve_keeps_spares_by_default(x11):
    with ServerProcess("--app", "xterm", "--no-vnc", spare_flag=False) as server, server.http() as http:
        http.post("/reset", json={}).raise_for_status()
        assert http.get("/state").json()["spare"] is not None


@pytest.mark.x11
def test_a_task_world_follows_the_home_of_each_swapped_in_desktop(x11):
    """A task's app that names {home} gets the home of the desktop it runs on, on the spare as on the first."""
    from hci_envs.tasks import BUILTIN, World, load_tasks

    task = next(t for t in load_tasks(BUILTIN) if "{home}" in json.dumps(t.start_state.model_dump()))
    with WorkstationEnv(spare=True) as env:
        world = World([task], env=env)
        homes = set()
        for _ in range(3):
            world.reset(task)
            (_spec, proc), = env.desktop.apps()[-1:]
            cmdline = open(f"/proc/{proc.pid}/cmdline", "rb").read().decode()
            assert str(env.home) in cmdline, (cmdline, env.home)
            homes.add(str(env.home))
            env.step({"type": "click", "x": 5, "y": 5})
            assert wait_until(lambda: spare_ready(env), 30), env.state.spare
        assert len(homes) == 2  # the session alternated between its two desktops


@pytest.mark.fake
def test_parts_whose_desktop_fails_to_close_still_remove_their_home_and_return_their_account():
    """A desktop whose close raises (a firewall command that failed on a busy machine) still lets the parts' home go
    and their account's lease end: the home left behind would outlive the lease, for the account's next session."""
    from hci_envs.env.spare import DesktopParts
    from hci_envs.errors import DesktopError
    from hci_envs.sandbox.homes import HomeStore

    class FailingDesktop:
        def close(self) -> None:
            raise DesktopError("the display server could not be stopped")

    class Lease:
        released = False

        def release(self) -> None:
            self.released = True

    homes, lease = HomeStore(), Lease()
    parts = DesktopParts(FailingDesktop(), homes, lease)
    with pytest.raises(DesktopError):
        parts.close()
    assert not homes.path.exists() and lease.released and parts.desktop is None and parts.lease is None
