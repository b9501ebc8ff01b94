"""OSWorld's harness on hci-envs desktops: what a reset and a step cost, and how many DesktopEnvs one machine runs.

    .venv-osworld/bin/python bench/bench_osworld.py [STEPS] [MAX_ENVS]

Run in OSWorld's environment (desktop-env beside hci-envs' light install; the servers run on .venv).

1. ``DesktopEnv.reset(task)`` on a used desktop (OSWorld's revert: a reset of the session, a spare desktop swapped
   in) against the cold path (a new DesktopEnv: a server and its desktop started, then the same reset).
2. A pyautogui click and its observation (``DesktopEnv.step(code, pause=0)``: OSWorld's /execute, then
   /screenshot) against OSWorld's own guest server on an Xvfb display of the same size, when its main.py is
   at hand (OSWORLD_SERVER_DIR: their checkout's desktop_env/server; else fetched from GitHub at run time: it
   is not in this repository) and runs here (OSWORLD_SERVER_PYTHON: a Python with its requirements and the
   system's pyatspi); otherwise against the floor of our own guest API, the same two requests with the code
   ``pass`` (a Python started as the agent, and a screenshot).
3. What OSWorld's browser getters pay for each DevTools connection (Playwright's ``connect_over_cdp``, the pages
   listed, the connection closed): through the guest API's port and the agent's relay to chromium's pipe,
   against the same on a headless chromium's own DevTools port (the floor: nothing relayed).
4. The same in a container (``placement="docker"``, the hci-envs/osworld image, its guest API through the relay
   and the gate): a cold start and reset, the revert of a used desktop (a reset without a spare there), and a
   step, against the same step on this machine (section 2's).
5. How many DesktopEnvs step at once (each its own server and desktop, STEPS clicks each, all at the same time)
   with a median step under a second.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from common import ROOT, Report

os.environ.setdefault("HCI_ENVS_PYTHON", str(ROOT / ".venv" / "bin" / "python"))

from hci_envs.osworld import DesktopEnv  # noqa: E402

SIZE = (1280, 800)
TASK = {"id": "bench-reset", "instruction": "nothing to do", "config": [
    {"type": "execute", "parameters": {"command": ["mkdir", "-p", "/home/user/Desktop"]}}],
    "evaluator": {"func": "exact_match", "result": {"type": "vm_command_line", "command": "true", "shell": True},
                  "expected": {"type": "rule", "rules": {"expected": ""}}}}
CLICK = "pyautogui.click(600, 400)"
OSWORLD_SERVER = "https://raw.githubusercontent.com/xlang-ai/OSWorld/main/desktop_env/server/main.py"


def new_env(cache: str, **options: object) -> object:
    return DesktopEnv(action_space="pyautogui", screen_size=SIZE, require_a11y_tree=False, cache_dir=cache, **options)


def timed_reverts(env: object, rounds: int) -> list[float]:
    """Milliseconds of each reset(task) of a used DesktopEnv (a click first: the next reset reverts)."""
    times = []
    for _ in range(rounds):
        env.step(CLICK, pause=0)
        start = time.perf_counter()
        env.reset(task_config=TASK)
        times.append((time.perf_counter() - start) * 1000)
    return times


def timed_steps(env: object, n: int) -> list[float]:
    """Milliseconds of each of ``n`` clicks through step (pause=0: execute, then the screenshot)."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        env.step(CLICK, pause=0)
        times.append((time.perf_counter() - start) * 1000)
    return times


def resets(report: Report, cache: str, rounds: int = 5) -> None:
    cold = []
    for _ in range(max(2, rounds // 2)):
        start = time.perf_counter()
        env = new_env(cache)
        env.reset(task_config=TASK)
        cold.append((time.perf_counter() - start) * 1000)
        env.close()
    env = new_env(cache)
    try:
        env.reset(task_config=TASK)
        warm = timed_reverts(env, rounds)
    finally:
        env.close()
    report.add("reset(task), cold: a new DesktopEnv, then reset", cold)
    report.add("reset(task) of a used DesktopEnv (revert: spare swap)", warm)
    report.ratio("revert is faster than cold by", "reset(task), cold: a new DesktopEnv, then reset",
                 "reset(task) of a used DesktopEnv (revert: spare swap)")


def steps(report: Report, cache: str, n: int) -> None:
    env = new_env(cache)
    try:
        env.reset(task_config=TASK)
        report.add("step(pyautogui click, pause=0): execute + screenshot", timed_steps(env, n))
        baseline, label = osworld_server_steps(n)
        if baseline is None:
            report.value("OSWorld's own guest server", label)
            base = f"http://{env.vm_ip}:{env.server_port}"
            baseline, label = floor_steps(base, n), "floor: our guest API, code `pass` + screenshot"
        report.add(label, baseline)
        report.ratio("baseline time / our step time", label, "step(pyautogui click, pause=0): execute + screenshot")
    finally:
        env.close()


def containers(report: Report, cache: str, n: int, rounds: int = 3) -> None:
    from hci_envs.ops import images
    from hci_envs.osworld.provider import OSWORLD_IMAGE

    try:
        present = images.image_exists(images.docker_client(), OSWORLD_IMAGE)
    except Exception as exc:  # noqa: BLE001 - reported, the other sections stand
        present, why = False, f"no Docker daemon ({exc})"
    else:
        why = f"no {OSWORLD_IMAGE} image (hci-envs image build)"
    if not present:
        report.value("container placement", f"not measured: {why}")
        return
    start = time.perf_counter()
    env = new_env(cache, placement="docker")
    try:
        env.reset(task_config=TASK)
        report.add("container: a new DesktopEnv, then reset(task)", [(time.perf_counter() - start) * 1000])
        warm, ours = timed_reverts(env, rounds), timed_steps(env, n)
    finally:
        env.close()
    report.add("container: reset(task) of a used DesktopEnv (no spare)", warm)
    report.add("container: step(pyautogui click, pause=0)", ours)
    report.ratio("a step on this machine / in a container", "step(pyautogui click, pause=0): execute + screenshot",
                 "container: step(pyautogui click, pause=0)")


def _execute_and_shoot(base: str, code: str) -> None:
    """What DesktopEnv.step(code, pause=0) asks a guest server: /execute of the code, then /screenshot. A command
    that did not run is an error: a baseline that clicks nothing measures nothing."""
    body = json.dumps({"command": ["python", "-c", "import pyautogui; import time; pyautogui.FAILSAFE = False; "
                                   + code], "shell": False}).encode()
    request = urllib.request.Request(base + "/execute", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    if answer.get("returncode") != 0:
        raise RuntimeError(f"/execute of {code!r} failed: {answer}")
    with urllib.request.urlopen(base + "/screenshot", timeout=60) as response:
        response.read()


def floor_steps(base: str, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        _execute_and_shoot(base, "pass")
        samples.append((time.perf_counter() - start) * 1000)
    return samples


#: OSWorld's server as a module (its own ``__main__`` runs Flask's debug reloader, which re-runs sys.argv), its
#: app served on one port; ``subprocess.CREATE_NO_WINDOW`` is a Windows flag its /execute passes on every system,
#: 0 (no flag) elsewhere.
_RUN_OSWORLD_SERVER = """import subprocess, sys
subprocess.CREATE_NO_WINDOW = getattr(subprocess, "CREATE_NO_WINDOW", 0)
sys.path.insert(0, sys.argv[1])
import main
main.app.run(host="127.0.0.1", port=int(sys.argv[2]), debug=False, threaded=True)
"""


def _osworld_server_source(work: Path) -> tuple[Path | None, str]:
    """A folder with OSWorld's main.py and pyxcursor.py: OSWORLD_SERVER_DIR (their checkout's
    desktop_env/server), else fetched now from GitHub into ``work``; or (None, why not)."""
    given = os.environ.get("OSWORLD_SERVER_DIR")
    if given:
        folder = Path(given)
        missing = [name for name in ("main.py", "pyxcursor.py") if not (folder / name).is_file()]
        return (None, f"not measured: {folder} lacks {', '.join(missing)}") if missing else (folder, "")
    try:
        for name in ("main.py", "pyxcursor.py"):
            with urllib.request.urlopen(OSWORLD_SERVER.rsplit("/", 1)[0] + "/" + name, timeout=20) as response:
                (work / name).write_bytes(response.read())
    except OSError as exc:
        return None, (f"not measured: OSWorld's server could not be fetched ({exc}); set OSWORLD_SERVER_DIR to "
                      "their checkout's desktop_env/server")
    return work, ""


def osworld_server_steps(n: int) -> tuple[list[float] | None, str]:
    """The same click and screenshot against OSWorld's own server on an Xvfb of the same size, or (None, why it
    could not run). Its Python is OSWORLD_SERVER_PYTHON (an environment with its requirements: flask, pyautogui,
    python-xlib, lxml, pillow, requests, and pyatspi from the system), by default this one; the code it runs is
    `python` on the PATH of that Python's folder first."""
    work = Path(tempfile.mkdtemp(prefix="osworld-server-"))
    folder, why = _osworld_server_source(work)
    if folder is None:
        return None, why
    python = os.environ.get("OSWORLD_SERVER_PYTHON", sys.executable)
    display, port = ":87", 5087
    xvfb = subprocess.Popen(["Xvfb", display, "-screen", "0", f"{SIZE[0]}x{SIZE[1]}x24", "-nolisten", "tcp"])
    server = None
    try:
        time.sleep(1.0)
        env = {**os.environ, "DISPLAY": display, "PATH": f"{Path(python).parent}:{os.environ.get('PATH', '')}",
               "XDG_SESSION_TYPE": "x11"}
        server = subprocess.Popen([python, "-c", _RUN_OSWORLD_SERVER, str(folder), str(port)], cwd=work, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/platform", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    error = server.stderr.read().decode(errors="replace")[-300:] if server.poll() is not None else ""
                    return None, f"not measured: OSWorld's server did not start here ({error.strip()})"
                time.sleep(0.3)
        _execute_and_shoot(base, CLICK)  # the first: Python's and pyautogui's caches warmed, as ours are
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            _execute_and_shoot(base, CLICK)
            samples.append((time.perf_counter() - start) * 1000)
        return samples, "OSWorld's own guest server on Xvfb: /execute + /screenshot"
    finally:
        for proc in (server, xvfb):
            if proc is not None:
                proc.terminate()
                proc.wait(10)


def _wait_for(url: str, timeout: float = 60.0) -> None:
    """Until ``url`` answers 200 (a browser's DevTools, starting)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=10).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _cdp_round(url: str) -> float:
    from playwright.sync_api import sync_playwright

    start = time.perf_counter()
    with sync_playwright() as p:
        browser = p.chromium.connect_over_cdp(url)
        [page.url for context in browser.contexts for page in context.pages]
        browser.close()
    return (time.perf_counter() - start) * 1000


def devtools(report: Report, cache: str, n: int) -> None:
    import shutil
    import socket

    env = new_env(cache)
    floor = None
    profile = tempfile.mkdtemp(prefix="bench-chromium-")
    try:
        env.reset(task_config=TASK)
        base = f"http://{env.vm_ip}:{env.chromium_port}"
        env.setup_controller._launch_setup(["google-chrome", "--remote-debugging-port=1337", "about:blank"])
        _wait_for(base + "/json/version")
        report.add("connect_over_cdp + pages + close: guest API, relay, pipe", [_cdp_round(base) for _ in range(n)])
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        floor = subprocess.Popen([shutil.which("chromium") or "chromium", "--headless=new", "--no-sandbox",
                                  f"--remote-debugging-port={port}", f"--user-data-dir={profile}", "about:blank"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for(f"http://127.0.0.1:{port}/json/version")
        report.add("floor: the same on a headless chromium's own port", [_cdp_round(f"http://127.0.0.1:{port}")
                                                                        for _ in range(n)])
        report.ratio("floor time / relayed time", "floor: the same on a headless chromium's own port",
                     "connect_over_cdp + pages + close: guest API, relay, pipe")
    finally:
        if floor is not None:
            floor.terminate()
            floor.wait()
        shutil.rmtree(profile, ignore_errors=True)
        env.close()


def concurrency(report: Report, cache: str, n_steps: int, max_envs: int) -> None:
    best = 0
    for count in range(1, max_envs + 1):
        envs = [new_env(cache) for _ in range(count)]
        samples: list[float] = []
        lock = threading.Lock()

        def run(env: object) -> None:
            env.reset(task_config=TASK)
            mine = []
            for _ in range(n_steps):
                start = time.perf_counter()
                env.step(CLICK, pause=0)
                mine.append((time.perf_counter() - start) * 1000)
            with lock:
                samples.extend(mine)

        try:
            threads = [threading.Thread(target=run, args=(env,)) for env in envs]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            for env in envs:
                env.close()
        report.add(f"{count} DesktopEnvs stepping at once: one step", samples)
        if statistics.median(samples) < 1000:
            best = count
        else:
            break
    report.value("DesktopEnvs at once with a median step under 1 s", f"{best} (tried up to {max_envs}; "
                 f"{os.cpu_count()} cores)")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    max_envs = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    report = Report("osworld")
    cache = tempfile.mkdtemp(prefix="osworld-bench-cache-")
    print("resets:", flush=True)
    resets(report, cache)
    print("steps:", flush=True)
    steps(report, cache, n)
    print("the browser's DevTools:", flush=True)
    devtools(report, cache, n)
    print("in a container:", flush=True)
    containers(report, cache, n)
    print("DesktopEnvs at once:", flush=True)
    concurrency(report, cache, max(5, n // 2), max_envs)
    print(f"results: {report.save()}")


if __name__ == "__main__":
    main()
