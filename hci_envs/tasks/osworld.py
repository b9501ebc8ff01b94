"""OSWorld's task files as hci-envs tasks: ``load(PATH)`` reads their ``evaluation_examples`` layout (or any folder
of them) into task specs whose set-up is the task's own config and whose checker is the task's own evaluator
(OSWorld's getters and metrics), both run by OSWorld's harness (``desktop-env``, in its own environment) against
the session's guest API. ``serve --tasks osworld:PATH`` serves them, and ``World`` and ``DesktopPool`` run them;
a reset into one runs its set-up, ``score`` runs its evaluator and gives OSWorld's reward. The guest API is the
server's (``--osworld-port``) where there is one, else the environment's own (:func:`guest_url`).

The harness runs as a child process of the server (``python -m hci_envs.osworld.bridge`` on
``HCI_ENVS_OSWORLD_PYTHON``, by default the checkout's .venv-osworld); downloads go through OSWorld's cache layout
in ``HCI_ENVS_OSWORLD_CACHE`` (default ``osworld-cache``, beside where the server runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

from ..errors import ConfigError, EnvironmentStateError, MissingDependencyError, TaskFormatError

#: Where OSWorld's task files expect the user's home.
HOME_VIEW = "/home/user"
#: LibreOffice's default profile, as OSWorld's machine has it.
LIBREOFFICE_PROFILE = ".config/libreoffice/4"
#: How long a task's set-up, or its evaluation, may take (OSWorld's waits for a window are long).
BRIDGE_TIMEOUT = 900.0


def find_tasks(folder: str | Path, domain: str | None = None) -> list[tuple[str, Path]]:
    """(domain, task file) of every task in ``folder``: OSWorld's layout (examples/<domain>/<id>.json, chosen by
    test_all.json when it is there), else every .json file under it (its folder's name is its domain)."""
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"{root}: not a folder of OSWorld task files")
    examples = root / "examples" if (root / "examples").is_dir() else root
    index = root / "test_all.json"
    found: list[tuple[str, Path]] = []
    if index.is_file():
        chosen = json.loads(index.read_text())
        for name, ids in chosen.items():
            found += [(name, examples / name / f"{task_id}.json") for task_id in ids]
    else:
        found = [(path.parent.name, path) for path in sorted(examples.rglob("*.json"))]
    found = [(name, path) for name, path in found if domain is None or name == domain]
    missing = [str(path) for _, path in found if not path.is_file()]
    if missing:
        raise ConfigError(f"task files named by {index} are missing: {', '.join(missing[:5])}")
    return found


#: What opens what, as on OSWorld's Ubuntu: text in the text editor (mousepad stands for gedit), web pages in
#: google-chrome (chromium with its DevTools served, hci_envs.tools.osworld_chrome; the system's chromium entry
#: would start a browser the harness cannot reach).
MIME_DEFAULTS = {"text/plain": "org.xfce.mousepad.desktop", "text/html": "google-chrome.desktop",
                 "x-scheme-handler/http": "google-chrome.desktop", "x-scheme-handler/https": "google-chrome.desktop"}
GOOGLE_CHROME_ENTRY = """[Desktop Entry]
Type=Application
Name=Google Chrome
Exec=google-chrome %U
MimeType=text/html;x-scheme-handler/http;x-scheme-handler/https;
Terminal=false
"""


#: GNOME's settings where OSWorld's machine differs from GNOME's defaults, as the keyfile that gsettings keeps
#: them in on these desktops (tools.osworld_profile.agent_env): its screen never locks (a task asks the agent to
#: turn the lock on, which is already on by GNOME's default).
GNOME_SETTINGS = "[org/gnome/desktop/screensaver]\nlock-enabled=false\n"
#: VLC's settings as an installation started once leaves them: its first-run question (privacy and network
#: access) answered, every other option at its default. OSWorld's VLC getter reads this file and fails without it.
VLC_SETTINGS = "###\n###  vlc 3.0 (written once, at the first start)\n###\n\n[qt]\nqt-privacy-ask=0\n"


def home_files() -> dict[str, str]:
    """The home OSWorld's tasks start from, as files: LibreOffice as an installation started once (its default
    profile; no first-run dialog or tip to catch a solution's first keys), the apps files open in
    (:data:`MIME_DEFAULTS`), GNOME's settings as OSWorld's machine has them (:data:`GNOME_SETTINGS`) and VLC as an
    installation started once (:data:`VLC_SETTINGS`)."""
    from .suite.apps import LIBREOFFICE_STARTED_ONCE, libreoffice_profile

    defaults = "[Default Applications]\n" + "".join(f"{kind}={app}\n" for kind, app in MIME_DEFAULTS.items())
    return {**libreoffice_profile(LIBREOFFICE_PROFILE, LIBREOFFICE_STARTED_ONCE), ".config/mimeapps.list": defaults,
            ".config/glib-2.0/settings/keyfile": GNOME_SETTINGS, ".config/vlc/vlcrc": VLC_SETTINGS,
            ".local/share/applications/google-chrome.desktop": GOOGLE_CHROME_ENTRY}


def load(path: str | Path, *, domain: str | None = None, width: int = 1920, height: int = 1080) -> list[Any]:
    """OSWorld's tasks under ``path`` as task specs (see the module's docstring)."""
    from .spec import parse_task

    tasks = []
    for name, file in find_tasks(path, domain):
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise TaskFormatError(f"{file}: not valid JSON ({exc})") from None
        if not isinstance(data, dict) or not data.get("id") or "evaluator" not in data:
            raise TaskFormatError(f"{file}: not an OSWorld task (it needs an id and an evaluator)")
        spec = {"id": data["id"], "instruction": data.get("instruction") or data["id"],
                "start_state": {"width": width, "height": height, "home_view": HOME_VIEW},
                "home_files": home_files(), "checker": {"type": "osworld", "task": data},
                "setup": [{"osworld": {"config": data.get("config") or []}}], "tags": ["osworld", name], "app": name}
        tasks.append(parse_task(spec, where=str(file)))
    return tasks


# -- the harness, as a child process -----------------------------------------------------------------------------
def harness_python() -> str:
    configured = os.environ.get("HCI_ENVS_OSWORLD_PYTHON")
    path = configured or str(Path(__file__).resolve().parents[2] / ".venv-osworld" / "bin" / "python")
    if not Path(path).exists():
        raise MissingDependencyError(f"OSWorld's harness is not installed ({path} is missing): "
                                     "`python3 -m hci_envs install --test` makes .venv-osworld, or set "
                                     "HCI_ENVS_OSWORLD_PYTHON", program="desktop-env")
    return path


_GUEST_LOCK = threading.Lock()


def guest_url(env: Any) -> str:
    """Where OSWorld's guest API serves ``env``'s desktop: the server's (``serve --osworld-port``, or a session's
    own port), else one of the environment's own, started now on a loopback port, answering only this process's
    user (OSWorld's harness runs as its child) and closed with the environment's tasks."""
    from .. import plugins

    hooks = env.hooks
    with _GUEST_LOCK:
        if hooks.osworld_guest_url is None:
            guest = plugins.load(plugins.SERVICES, "osworld-guest")(env, os.getuid())  # the server's, a floor up
            env.tasks.on_close.append(guest.close)
            hooks.osworld_guest_url = guest.url
            hooks.info["osworld_guest_url"] = guest.url
        return hooks.osworld_guest_url


def _bridge(env: Any, command: str, task: dict[str, Any], **extra: Any) -> dict[str, Any]:
    request = {"command": command, "url": guest_url(env), "task": task,
               "cache_dir": os.environ.get("HCI_ENVS_OSWORLD_CACHE", "osworld-cache"), **extra}
    # The harness parses what the agent left (spreadsheets, documents, media): none of the server's secrets in
    # its environment.
    env_vars = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "TZ", "HOME", "TMPDIR") if k in os.environ}
    try:
        out = subprocess.run([harness_python(), "-m", "hci_envs.osworld.bridge"], input=json.dumps(request),
                             capture_output=True, text=True, timeout=BRIDGE_TIMEOUT, env=env_vars)
    except subprocess.TimeoutExpired:
        raise EnvironmentStateError(f"OSWorld's {command} of {task.get('id')} took more than "
                                    f"{BRIDGE_TIMEOUT:g} seconds") from None
    lines = out.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except ValueError:
        answer = {}
    if out.returncode != 0 or "error" in answer or not answer:
        why = answer.get("error") or out.stderr.strip()[-500:] or f"exit code {out.returncode}"
        raise EnvironmentStateError(f"OSWorld's {command} of task {task.get('id')} failed: {why}")
    return answer


#: The folders of a fresh Ubuntu user's home (xdg-user-dirs), made before a task's own set-up.
FOLDERS = ("Desktop", "Documents", "Downloads", "Music", "Pictures", "Public", "Templates", "Videos")


def run_setup(env: Any, task: Any, config: list[dict[str, Any]]) -> None:
    """Run an OSWorld task's set-up steps (``config``) on the session's desktop, in a home that has an Ubuntu
    user's folders."""
    folders = {"type": "execute", "parameters": {"command": ["mkdir", "-p", *(f"{HOME_VIEW}/{f}" for f in FOLDERS)]}}
    _bridge(env, "setup", {**task.checker.task, "config": [folders, *config]})


def evaluate(env: Any, check: Any) -> tuple[float, str]:
    """OSWorld's own evaluator on the session as it is: (the reward, what it says)."""
    # OSWorld scores an infeasible task 1 when the agent's last action was FAIL (and any other task 0 then)
    signal = getattr(env.episode, "signal", None)
    answer = _bridge(env, "evaluate", check.task, actions=[signal] if signal else [])
    score = float(answer["score"])
    return score, f"OSWorld's evaluator ({check.task.get('evaluator', {}).get('func')}): {score:g}"
