"""Every process a desktop starts is gone after shutdown, also when the server is killed outright."""

from __future__ import annotations

import os
import signal
import time

import pytest

from helpers import Probe, ServerProcess, alive, wait_until

pytestmark = pytest.mark.x11


def _desktop_processes(server: ServerProcess) -> dict[int, str]:
    out = {}
    for pid in server.children():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out[pid] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            pass
    return out


def _wait_gone(pids: dict[int, str], timeout: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    left = dict(pids)
    while left and time.monotonic() < deadline:
        left = {pid: cmd for pid, cmd in left.items() if alive(pid)}
        time.sleep(0.05)
    return left


def _start(tmp_path) -> tuple[ServerProcess, dict[int, str]]:
    probe = Probe(tmp_path)
    server = ServerProcess("--app", " ".join(f"'{c}'" for c in probe.command()), "--app", "xterm").start()
    probe.wait_for(lambda s: s.get("ready"), what="the probe app")
    procs = _desktop_processes(server)
    names = " ".join(procs.values())
    for expected in ("Xvfb", "openbox", "tk_probe.py", "xterm", "watchdog_process.py"):
        assert expected in names, f"{expected} not among the server's processes: {procs}"
    return server, procs


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_clean_shutdown_leaves_no_process(x11, tmp_path, sig):
    server, procs = _start(tmp_path)
    code = server.stop(sig)
    assert code in (0, 130, -sig), code  # Ctrl-C conventionally exits 130
    assert "Traceback" not in "".join(server.output), "".join(server.output)
    left = _wait_gone(procs, 5.0)
    assert not left, f"left behind after a clean shutdown: {left}"


def test_killed_server_leaves_no_process(x11, tmp_path):
    server, procs = _start(tmp_path)
    server.stop(signal.SIGKILL)
    left = _wait_gone(procs, 10.0)
    assert not left, f"left behind after the server was killed: {left}"


def test_desktop_close_leaves_no_process(x11, tmp_path):
    from hci_envs import AppState, StartState
    from hci_envs.desktop import Desktop

    probe = Probe(tmp_path)
    with Desktop(StartState(apps=[AppState(command=probe.command(), name="probe")])) as desktop:
        pids = desktop.processes.pids()
        names = [name for name, _proc in desktop.processes.processes()]
        assert names == ["Xvfb", "a11y-bus", "a11y-registry", "window-manager", "probe"], names
        assert all(alive(p) for p in pids)
        assert desktop.health().ok
    assert not [p for p in pids if alive(p)]


def test_a_dead_window_manager_truncates_the_episode_and_reset_recovers(x11):
    from hci_envs.traits import DesktopEnv

    with DesktopEnv(start_state={"apps": [{"command": ["xterm"]}]}) as env:
        env.reset()
        wm = env.desktop._wm
        wm.kill()
        wm.wait(5)
        obs = env.step({"type": "wait", "ms": 1})
        assert obs.truncated and "window manager" in (obs.truncated_reason or ""), obs
        env.reset()
        assert env.desktop.health().ok
        assert not env.step({"type": "wait", "ms": 1}).truncated


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_server_leaves_no_folder_behind(x11, sig):
    """Neither its X authority folder nor its desktop's, nor the session's home or the agent's runtime folder
    (with its copy of the X authority): SIGTERM (how providers stop a server) included, after which uvicorn
    raises the signal again and no atexit handler runs; and SIGKILL, after which the watchdog removes them."""
    import glob

    pattern = "/tmp/hci-envs-*"
    before = set(glob.glob(pattern))
    server = ServerProcess("--no-vnc").start()
    made = set(glob.glob(pattern)) - before
    wanted = ["xauth", "desktop", "home"] + (["agent"] if os.geteuid() == 0 else [])  # an agent account's
    assert all(any(f"hci-envs-{kind}-" in p for p in made) for kind in wanted), made
    server.stop(sig)
    assert wait_until(lambda: set(glob.glob(pattern)) <= before, 15), set(glob.glob(pattern)) - before
