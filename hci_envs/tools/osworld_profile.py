"""OSWorld's action spaces as tools (the ``osworld`` MCP profile, ``/mcp/osworld``), so that an agent trained on
OSWorld drives an hci-envs session as it drives OSWorld's machine:

* ``pyautogui``: Python code as OSWorld's agents send it (``pyautogui.click(640, 400)``), run as the session's
  agent with pyautogui imported, as OSWorld's harness runs it; or ``WAIT``, ``DONE``, ``FAIL``;
* ``computer_13``: one action of OSWorld's ``computer_13`` space (``{"action_type": "CLICK", "parameters":
  {...}}``), run as the canonical actions it stands for (:mod:`hci_envs.adapters.osworld_actions`);
* ``screenshot`` (with the pointer drawn in, as OSWorld's are) and ``accessibility_tree`` (OSWorld's XML).

Each input tool answers with the screenshot once the screen has settled, as OSWorld's ``step`` answers with
its observation. Also here: running a program as the agent to its end (:func:`run_as_agent`), which OSWorld's
guest API shares, and where the agent's Python finds pyautogui (:func:`guest_site`).
"""

from __future__ import annotations

import inspect
import os
import subprocess
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from ..errors import InvalidActionError
from ..sandbox.pipes import OutputBuffer, read_pipes
from .registry import ToolOutput, ToolSpec

#: The agent's Python finds pyautogui here: HCI_ENVS_OSWORLD_SITE, else the checkout's .cache/osworld-guest.
GUEST_SITE_ENV = "HCI_ENVS_OSWORLD_SITE"
#: What OSWorld's harness puts before an agent's code.
PYAUTOGUI_PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False; "
#: How long one ``pyautogui`` call may run (OSWorld's client waits 90 s for it).
PYAUTOGUI_TIMEOUT = 90.0
#: The most of a command's stdout, and of its stderr, that is kept.
MAX_OUTPUT = 16 * 1024 * 1024
#: ``WAIT``: OSWorld's step pauses this long.
WAIT_SECONDS = 2.0
#: The signals OSWorld's agents send instead of code.
SIGNALS = ("WAIT", "DONE", "FAIL")


def guest_site() -> str | None:
    """Where the agent's Python finds pyautogui (OSWorld's agents send pyautogui code): HCI_ENVS_OSWORLD_SITE, or
    the checkout's .cache/osworld-guest that `python3 -m hci_envs install --test` fills; None: the system's."""
    configured = os.environ.get(GUEST_SITE_ENV)
    if configured:
        return configured
    checkout = Path(__file__).resolve().parents[2] / ".cache" / "osworld-guest"
    return str(checkout) if checkout.is_dir() else None


def agent_env(desktop: Any) -> dict[str, str]:
    """The agent's environment (:meth:`app_env`), its Python finding pyautogui, ``google-chrome`` and ``vlc``
    first on its PATH (:mod:`.osworld_apps`)."""
    from .osworld_apps import with_osworld_apps

    env = with_osworld_apps(desktop.app_env())
    # an X11 session, as OSWorld's Ubuntu says: pyautogui's screenshots (pyscreeze) take scrot only then
    env["XDG_SESSION_TYPE"] = "x11"
    # GNOME's settings as gsettings reads and writes them (OSWorld's os tasks and their checks): the agent's side
    # has no session bus for dconf, so they are kept in the home's .config/glib-2.0/settings/keyfile, which each
    # episode's home starts with as OSWorld's machine has it (tasks.osworld.GNOME_SETTINGS)
    env["GSETTINGS_BACKEND"] = "keyfile"
    site = guest_site()
    if site is not None:
        env["PYTHONPATH"] = site
    return env


def check_program(program: str, env: dict[str, str]) -> None:
    """Raise FileNotFoundError when ``program`` is not on the agent's PATH. A path is left to the agent's side,
    which may see it where this process does not (``home_view``)."""
    import shutil

    if "/" not in program and shutil.which(program, path=env.get("PATH")) is None:
        raise FileNotFoundError(2, "No such file or directory", program)


def run_as_agent(desktop: Any, argv: list[str], *, timeout: float, stdin: bytes | None = None,
                 cwd: str | None = None, merge: bool = False) -> tuple[int | None, bytes, bytes]:
    """Run ``argv`` on the agent's side to its end, or ``timeout``: (exit code, or None on timeout; stdout;
    stderr), each at most MAX_OUTPUT bytes (what is beyond is dropped and said so: the agent's side may print
    without end). What it leaves running in the background lives on until the episode ends, as on OSWorld's
    machine (set-up steps start apps so). Raises FileNotFoundError when the program is not there (a path is
    left to the agent's side, which may see it where this process does not: ``home_view``)."""
    import threading

    env = agent_env(desktop)
    check_program(argv[0], env)
    proc = desktop.spawn_agent(
        "osworld-command", argv, env=env, cwd=cwd or desktop.agent_home,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge else subprocess.PIPE)
    if stdin is not None:
        def feed() -> None:
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except OSError:  # it exited without reading all of it
                pass

        threading.Thread(target=feed, name="osworld-stdin", daemon=True).start()
    streams = [proc.stdout] + ([proc.stderr] if proc.stderr is not None else [])
    buffers = {stream.fileno(): OutputBuffer(MAX_OUTPUT) for stream in streams}
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        # a descendant that keeps a pipe open past its parent's end (in the background, in a session of its
        # own) holds the call a second at most
        timed_out = read_pipes(buffers, deadline, lambda: proc.poll() is not None, grace=1.0) is not None
        if not timed_out:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()) + 1.0)
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        if timed_out:
            desktop.processes.stop(proc, timeout=1.0)  # and whatever it started
        for stream in streams:
            stream.close()
    if timed_out:
        return None, b"", b""
    desktop.processes.finished(proc)
    texts = []
    for buffer in buffers.values():
        data = bytes(buffer.data)
        if buffer.dropped:
            data += f"\n[{buffer.dropped} more bytes not kept]\n".encode()
        texts.append(data)
    return proc.returncode, texts[0], texts[1] if len(texts) > 1 else b""


# -- the tools --------------------------------------------------------------------------------------------------
def _after_input(env: Any, since: float, text: str, data: dict[str, Any] | None = None) -> ToolOutput:
    """The answer of an input tool: its text, and the screenshot once the screen shows what it did."""
    env.executor.settle(since)
    shot = env.executor.run({"type": "screenshot"})
    return ToolOutput(text=text, data=data, images=[shot.image] if shot.image is not None else [])


def _pyautogui(env: Any, code: str) -> ToolOutput:
    signal = code.strip()
    env.episode.signal = signal if signal in ("DONE", "FAIL") else None
    if signal in SIGNALS:
        if signal == "WAIT":
            time.sleep(WAIT_SECONDS)
            return _after_input(env, time.monotonic(), "waited", {"signal": "WAIT"})
        return ToolOutput(text=f"{signal}: the episode is the harness's to end", data={"signal": signal})
    since = time.monotonic()
    try:
        code_, out, err = run_as_agent(env.desktop, ["python3", "-c", PYAUTOGUI_PREFIX + code],
                                       timeout=PYAUTOGUI_TIMEOUT)
    except FileNotFoundError:
        raise InvalidActionError("pyautogui: the desktop has no python3 for the agent") from None
    if code_ is None:
        raise InvalidActionError(f"pyautogui: the code did not finish within {PYAUTOGUI_TIMEOUT:g} seconds")
    answer = {"returncode": code_, "output": out.decode("utf-8", "replace"), "error": err.decode("utf-8", "replace")}
    if code_ != 0:
        # the traceback's last line says what went wrong; the desktop may have taken part of the code's input
        last = answer["error"].strip().splitlines()[-1:] or [f"exit code {code_}"]
        output = _after_input(env, since, f"the code failed: {last[0]}", answer)
        output.is_error = True
        return output
    return _after_input(env, since, answer["output"].strip() or "done", answer)


def _computer_13(env: Any, action: dict[str, Any]) -> ToolOutput:
    from ..adapters import EpisodeSignal
    from ..adapters.osworld_actions import from_osworld

    env.episode.signal = None
    try:
        actions = from_osworld(action)
    except EpisodeSignal as signal:
        env.episode.signal = signal.status
        return ToolOutput(text=f"{signal.status}: the episode is the harness's to end", data={"signal": signal.status})
    since = time.monotonic()
    for item in actions:
        env.executor.run(item)
    return _after_input(env, since, "done")


def _screenshot(env: Any) -> ToolOutput:
    return ToolOutput(images=[env.desktop.screen.capture(fmt="png", cursor=True)])


def _accessibility_tree(env: Any) -> ToolOutput:
    from ..adapters.osworld_actions import accessibility_tree_xml
    from ..desktop.a11y_model import Query

    accessibility = env.desktop.accessibility
    if accessibility is None:
        raise InvalidActionError("this desktop has no accessibility tree")
    tree = accessibility.tree(Query(visible_only=False, max_nodes=10_000), remember=False)
    return ToolOutput(text=accessibility_tree_xml(tree.to_dict()))


def _param(name: str, annotation: Any, description: str) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                             annotation=Annotated[annotation, Field(description=description)])


def osworld_specs() -> dict[str, ToolSpec]:
    """The ``osworld`` profile's tools, by name."""
    trait = "OSWorldActions"
    return {
        "pyautogui": ToolSpec(
            name="pyautogui", trait=trait, handler=_pyautogui,
            description=("Run Python code that drives the desktop with pyautogui, as OSWorld's agents do "
                         "(pyautogui and time are imported; e.g. pyautogui.click(640, 400)), or send WAIT, DONE "
                         "or FAIL. Returns the screenshot once the screen has settled."),
            parameters=(_param("code", Annotated[str, Field(min_length=1, max_length=100_000)],
                               "pyautogui code, or WAIT, DONE or FAIL"),)),
        "computer_13": ToolSpec(
            name="computer_13", trait=trait, handler=_computer_13,
            description=("One action of OSWorld's computer_13 space: {\"action_type\": \"CLICK\", \"parameters\": "
                         "{\"x\": 640, \"y\": 400}} (MOVE_TO, CLICK, MOUSE_DOWN, MOUSE_UP, RIGHT_CLICK, "
                         "DOUBLE_CLICK, DRAG_TO, SCROLL, TYPING, PRESS, KEY_DOWN, KEY_UP, HOTKEY, WAIT, DONE, "
                         "FAIL). Returns the screenshot once the screen has settled."),
            parameters=(_param("action", dict[str, Any], "the action, as OSWorld's computer_13 writes it"),)),
        "screenshot": ToolSpec(name="screenshot", trait=trait, handler=_screenshot, read_only=True,
                               description="The screen, with the pointer drawn in, as a PNG.", parameters=()),
        "accessibility_tree": ToolSpec(
            name="accessibility_tree", trait=trait, handler=_accessibility_tree, read_only=True,
            description="The desktop's accessibility tree in OSWorld's XML.", parameters=()),
    }
