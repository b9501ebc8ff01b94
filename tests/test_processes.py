"""Every process a desktop starts is gone after shutdown, also when the server is killed outright."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

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
    import tempfile

    # a temporary directory of this server's own (TMPDIR): other servers, of tests running beside this one, make
    # and remove theirs in /tmp meanwhile
    folder = Path(tempfile.mkdtemp(prefix="leftovers-"))
    folder.chmod(0o711)  # the agent's folders are in it
    pattern = f"{folder}/hci-envs-*"
    try:
        server = ServerProcess("--no-vnc", env={"TMPDIR": str(folder)}).start()
        made = set(glob.glob(pattern))
        wanted = ["xauth", "desktop", "home"] + (["agent"] if os.geteuid() == 0 else [])  # an agent account's
        assert all(any(f"hci-envs-{kind}-" in p for p in made) for kind in wanted), made
        server.stop(sig)
        assert wait_until(lambda: not glob.glob(pattern), 15), glob.glob(pattern)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _named(server: ServerProcess, program: str) -> list[int]:
    """The server's descendants that run ``program`` (by the name of their executable), zombies aside."""
    found = []
    for pid, cmd in _desktop_processes(server).items():
        if cmd.split() and os.path.basename(cmd.split()[0]) == program and alive(pid):
            found.append(pid)
    return [pid for pid in found if pid not in _zombies(server)]


@pytest.mark.parametrize("victim", ["Xvfb", "x11vnc", "openbox"])
def test_a_desktop_process_killed_during_a_step_is_said_and_the_next_reset_recovers(x11, victim):
    """Xvfb, x11vnc or the window manager killed (-9) while a step runs: the step answers (never hangs), the
    loss of the display or the window manager ends the episode with a reason naming it, a lost x11vnc only the
    viewers' connections (the next viewer gets a new one), and a reset brings back a whole desktop, with
    nothing of the old one left."""
    import threading

    from rfb_client import RfbClient

    with ServerProcess("--vnc-port", "0", "--no-spare") as server, server.http() as http:
        assert http.post("/reset", json={}).status_code == 200
        state = http.get("/state").json()
        viewer = RfbClient.tcp(state["vnc_native_port"], state["vnc_secrets"]["control"])
        old = {name: _named(server, name) for name in ("Xvfb", "x11vnc", "openbox")}
        assert all(len(pids) == 1 for pids in old.values()), old
        killer = threading.Timer(0.5, os.kill, (old[victim][0], signal.SIGKILL))
        killer.start()
        step = http.post("/step", json={"action": {"type": "wait", "ms": 2000}}, timeout=60)
        killer.join()
        assert step.status_code == 200, step.text
        if victim == "x11vnc":
            assert not step.json()["done"], step.text
            assert not http.post("/step", json={"action": {"type": "wait", "ms": 1}}).json()["done"]
            with pytest.raises((OSError, EOFError)):  # the viewer's connection ended with its x11vnc ...
                for _ in range(50):
                    viewer.io.recv_exact(1)
            fresh = RfbClient.tcp(state["vnc_native_port"], state["vnc_secrets"]["control"])  # ... the next gets one
            assert (fresh.width, fresh.height) == (1280, 800)
            fresh.io.close()
        else:
            said = ("Xvfb", "X connection") if victim == "Xvfb" else ("window manager",)
            ended = step.json()
            if not ended["done"]:  # the loss may show only at the next step
                ended = http.post("/step", json={"action": {"type": "wait", "ms": 1}}).json()
            reason = ended["observation"]["truncated_reason"] or ""
            assert ended["done"] and any(word in reason for word in said), ended
            late = http.post("/step", json={"action": {"type": "wait", "ms": 1}})  # and then: reset first
            assert late.status_code == 409 and "call reset()" in late.text, late.text
        viewer.io.close()
        assert http.post("/reset", json={}).status_code == 200
        assert http.get("/health").json()["desktop"]["status"] == "ok"
        again = http.post("/step", json={"action": {"type": "click", "x": 5, "y": 5}}, timeout=60).json()
        assert not again["done"], again
        # one of each again; the killed one's leftovers reaped (no zombie) and nothing of the old desktop left
        assert wait_until(lambda: len(_named(server, "Xvfb")) == 1 and len(_named(server, "openbox")) == 1), \
            "one display and one window manager"
        assert not set(_named(server, victim)) & set(old[victim])
        assert wait_until(lambda: not _zombies(server)), f"the killed processes are not reaped: {_zombies(server)}"


def _zombies(server: ServerProcess) -> list[int]:
    found = []
    for pid in server.children():
        try:
            if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                found.append(pid)
        except OSError:
            pass
    return found
