"""GNOME's terminal as OSWorld's tasks start, stop and read it, on the desktop's terminal (xterm).

OSWorld's set-ups run ``gnome-terminal --maximize --working-directory=DIR``, its post-set-ups ``killall
gnome-terminal-server``, its checks look for a window of class ``gnome-terminal-server.Gnome-terminal``, and its
``/terminal`` route gives the text of the focused terminal (GNOME's terminal exposes it to the accessibility
bus; xterm does not). So ``gnome-terminal`` on the agent's PATH (:data:`SHIM`, see :mod:`.osworld_apps`) starts
xterm through a link named ``gnome-terminal-server`` (the process's name), with that window class, in the
background (gnome-terminal returns at once), and with xterm's log of everything shown in it written to the
agent's private runtime folder under the terminal's process id; :func:`terminal_text` reads the focused
terminal's log as the agent and gives it as text.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

#: The agent's folder (in its XDG_RUNTIME_DIR) where each terminal's log is, as PID.log.
LOG_FOLDER = "hci-envs-terminals"
#: The window class GNOME's terminal has, which OSWorld's checks look for.
WINDOW_CLASS = "Gnome-terminal"
SERVER = "gnome-terminal-server"
#: The most of a terminal's log that is read back (its end: what a person would see last).
MAX_LOG = 1024 * 1024

#: ``gnome-terminal`` as the agent runs it (standard library only, -I: nothing of the agent's own Python path).
SHIM = r'''#!/usr/bin/python3 -I
"""gnome-terminal for OSWorld's tasks on hci-envs: xterm, named and classed as GNOME's terminal, its log in the
agent's private runtime folder (see hci_envs.tools.osworld_terminal)."""
import os, sys

here = os.path.dirname(os.path.abspath(__file__))
args, command, options = sys.argv[1:], [], []


def enter(folder):
    folder = os.path.expanduser(folder)
    try:
        os.chdir(folder)
    except OSError as exc:  # as GNOME's: the terminal opens where it was started, and says why
        print("gnome-terminal: %s" % exc, file=sys.stderr)
    else:  # the shell keeps the path as it was given (a home seen through a link stays /home/user)
        os.environ["PWD"] = os.path.abspath(folder)


while args:
    arg = args.pop(0)
    if arg == "--maximize":
        options.append("-maximized")
    elif arg.startswith("--working-directory="):
        enter(arg.split("=", 1)[1])
    elif arg == "--working-directory" and args:
        enter(args.pop(0))
    elif arg in ("--", "-x", "--execute"):
        command = args
        break
    elif arg in ("-e", "--command") and args:
        command = ["/bin/sh", "-c", args.pop(0)]
        break
    elif arg.startswith("--command="):
        command = ["/bin/sh", "-c", arg.split("=", 1)[1]]
        break
    # tabs, profiles, titles, geometry: GNOME's, with no equivalent here
logs = os.path.join(os.environ.get("XDG_RUNTIME_DIR") or "/nonexistent", __LOGS__)
os.makedirs(logs, mode=0o700, exist_ok=True)
if os.fork() == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    log = os.path.join(logs, "%d.log" % os.getpid())  # this process becomes the terminal: its pid names the log
    argv = [__SERVER__, "-class", __CLASS__, "-title", "Terminal", "-l", "-lf", log, *options]
    os.execv(os.path.join(here, __SERVER__), argv + (["-e", *command] if command else []))
'''


def shims() -> dict[str, str]:
    """``gnome-terminal``, as a file to put on the agent's PATH; none where xterm is not installed."""
    if shutil.which("xterm") is None:
        return {}
    text = SHIM.replace("__LOGS__", repr(LOG_FOLDER)).replace("__SERVER__", repr(SERVER))
    return {"gnome-terminal": text.replace("__CLASS__", repr(WINDOW_CLASS))}


def links() -> dict[str, str]:
    """``gnome-terminal-server``: xterm under GNOME's terminal's name (what ``killall`` and ``ps`` see)."""
    xterm = shutil.which("xterm")
    return {SERVER: os.path.realpath(xterm)} if xterm else {}


#: What a terminal's log holds besides text: control sequences (CSI, OSC and other escapes) and carriage returns.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]"              # CSI: colours, cursor moves
                      r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"      # OSC: the window's title
                      r"|\x1b[@-Z\\-_]"                        # other escapes
                      r"|[\x00-\x07\x0b-\x0c\x0e-\x1f]")         # control characters but \b, \t, \n, \r


def log_text(raw: bytes) -> str:
    """A terminal's log as the text it showed: escapes gone, backspaces applied, and of a line rewritten after a
    carriage return, what was written last."""
    text = raw.decode("utf-8", "replace").replace("\r\n", "\n")
    lines = []
    for line in text.split("\n"):
        out: list[str] = []
        for char in _ESCAPES.sub("", line.rstrip("\r").rsplit("\r", 1)[-1]):
            if char == "\b":
                if out:
                    out.pop()
            else:
                out.append(char)
        lines.append("".join(out))
    return "\n".join(lines).rstrip()


def terminal_text(desktop: Any, read_as_agent: Any) -> str | None:
    """The text of the focused terminal (GNOME's, as OSWorld's tasks start it), or None when the focused window is
    not one. ``read_as_agent(desktop, path, tail=N)`` reads the last N bytes of a file as the agent does."""
    window = desktop.input.focused_window()
    if window is None or WINDOW_CLASS not in desktop.input.window_class(window):
        return None
    pid = desktop.input.window_pid(window)
    runtime = desktop.app_env().get("XDG_RUNTIME_DIR")
    if pid is None or not runtime:
        return None
    try:
        raw = read_as_agent(desktop, os.path.join(runtime, LOG_FOLDER, f"{pid}.log"), tail=MAX_LOG)
    except Exception:  # noqa: BLE001 - no log (a terminal started otherwise): no text, as for any other window
        return None
    return log_text(raw)
