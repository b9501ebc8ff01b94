"""The fidelity report: a folder of OSWorld task files run through OSWorld's own ``DesktopEnv`` on hci-envs
desktops, with the do-nothing agent and, where given, scripted solutions; per domain and per task, whether it set
up (and why not), its do-nothing and solution scores, why it is unsupported, and the time to reset and to
evaluate.

    python -m hci_envs.osworld.report TASKS [--solutions FILE] [--cache-dir DIR] [--out DIR] [--domain D]

TASKS is OSWorld's ``evaluation_examples`` layout (``examples/<domain>/<id>.json``, with ``test_all.json``
choosing the tasks if it is there) or any folder of task files. Solutions are ``{task id: [action, ...]}`` in
the action space given (pyautogui code by default). Downloads go through OSWorld's cache layout
(``CACHE/<task id>/<uuid5(url)>_<name>``): fill it once and the report runs offline; a file neither cached nor
reachable is reported with its URL and the cache path it was looked for at.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..tasks.osworld import find_tasks

#: Set-up steps that reach services no desktop of ours can stand in for.
UNSUPPORTED_SETUP = {
    "googledrive": "needs Google Drive (an account and its API)",
    "login": "signs in to Google Drive",
    "proxy": "needs OSWorld's proxy",
    "act": "uses a set-up step OSWorld's harness does not implement (act)",
    "replay": "uses a set-up step OSWorld's harness does not implement (replay)",
    "tidy_desktop": "uses a set-up step OSWorld's harness does not implement (tidy_desktop)",
}
#: Getters that talk to a port the desktops do not serve yet, or to services outside them.
UNSUPPORTED_GETTERS = {
    "googledrive_file": "reads Google Drive",
    # VLC is the only video player installed here, so it is the default before the agent acts; OSWorld's machine
    # has GNOME's Videos (Totem) as its default
    "default_video_player": "asks which video player is the default, which is VLC here before the agent acts "
                            "(the only one installed; OSWorld's machine has GNOME's Videos)",
}
#: Programs a task's set-up starts, and what it takes to have them. google-chrome is on the agent's PATH
#: wherever chromium is (hci_envs.tools.osworld_chrome), its DevTools on the guest API's port, and gnome-terminal
#: wherever xterm is (hci_envs.tools.osworld_terminal); socat, which
#: OSWorld's tasks start to forward the DevTools port, is not needed for that (the guest API skips it).
PROGRAMS = {"google-chrome": "chromium (which google-chrome starts)",
            "code": "VS Code, which Debian does not ship", "thunderbird": "Thunderbird", "gimp": "GIMP",
            "vlc": "VLC", "nautilus": "nautilus (GNOME's file manager)", "gnome-terminal": "GNOME's terminal"}
#: What must be installed for a program a task starts, where that is another program.
STANDS_IN = {"google-chrome": "chromium", "gnome-terminal": "xterm"}
REACH_TIMEOUT = 10.0
#: The empty browser history OSWorld's update_browse_history set-up fills, fetched into the task's cache by its
#: harness when it is not there.
HISTORY_URL = ("https://huggingface.co/datasets/xlangai/ubuntu_osworld_file_cache/resolve/main/chrome/"
               "44ee5668-ecd5-4366-a6ce-c1c9b8d4e938/history_empty.sqlite?download=true")
#: What a command names that these desktops do not have, and why: found in any command of the task (its set-up,
#: its evaluator's post-set-up and getters). The desktops run no init system, no GNOME Shell and no sound server.
NEEDS_IN_COMMANDS = (
    (re.compile(r"\b(?:timedatectl|hostnamectl|localectl|systemctl|loginctl)\b"),
     "needs systemd (timedatectl, loginctl, ...): these desktops run no init system or login manager"),
    (re.compile(r"\borg\.gnome\.shell\b"),
     "needs GNOME Shell's settings (org.gnome.shell: the dock's favourite apps), which these desktops do not run"),
    (re.compile(r"\b(?:pactl|pulseaudio)\b"), "needs a PulseAudio sound server, which these desktops do not run"),
)
#: A command that changes user with sudo (OSWorld's tasks type its password): the agent's processes run with
#: no_new_privs, so no privilege is ever gained on these desktops.
_SUDO = re.compile(r"(?:^|[\s;&|(`'\"])sudo(?:\s|$)")
NEEDS_SUDO = "runs sudo (the agent's processes run with no_new_privs: no privilege is gained on these desktops)"


@dataclass
class TaskReport:
    id: str
    domain: str
    set_up: bool | None = None
    why: str | None = None
    unsupported: str | None = None
    nothing_score: float | None = None
    solution_score: float | None = None
    reset_s: float | None = None
    evaluate_s: float | None = None


@dataclass
class Report:
    tasks: list[TaskReport] = field(default_factory=list)

    def domains(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for task in self.tasks:
            row = out.setdefault(task.domain, {"tasks": 0, "set_up": 0, "unsupported": 0, "nothing_zero": 0,
                                               "solved": 0, "with_solution": 0})
            row["tasks"] += 1
            row["set_up"] += bool(task.set_up)
            row["unsupported"] += task.unsupported is not None
            row["nothing_zero"] += task.nothing_score == 0.0
            row["with_solution"] += task.solution_score is not None
            row["solved"] += task.solution_score == 1.0
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"domains": self.domains(), "tasks": [asdict(t) for t in self.tasks]}

    def markdown(self) -> str:
        lines = ["# OSWorld on hci-envs: fidelity report", "",
                 "| domain | tasks | set up | unsupported | do-nothing 0 | solutions 1 / given |",
                 "|---|---|---|---|---|---|"]
        for name, row in sorted(self.domains().items()):
            lines.append(f"| {name} | {row['tasks']} | {row['set_up']} | {row['unsupported']} | "
                         f"{row['nothing_zero']} | {row['solved']} / {row['with_solution']} |")
        lines += ["", "| task | domain | set up | do-nothing | solution | reset s | evaluate s | unsupported or why |",
                  "|---|---|---|---|---|---|---|---|"]
        for t in self.tasks:
            note = (t.unsupported or t.why or "").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {t.id} | {t.domain} | {_yes(t.set_up)} | {_num(t.nothing_score)} | "
                         f"{_num(t.solution_score)} | {_num(t.reset_s)} | {_num(t.evaluate_s)} | {note} |")
        return "\n".join(lines) + "\n"


def _yes(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


# -- what a task needs ------------------------------------------------------------------------------------------
def cache_path(cache_dir: str | Path, task_id: str, url: str, path: str) -> Path:
    """Where OSWorld's harness keeps (and looks for) a file a task downloads."""
    return Path(cache_dir) / task_id / f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{os.path.basename(path)}"


def _getters(evaluator: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("result", "expected"):
        value = evaluator.get(key)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, dict) and item.get("type"):
                yield item


def unsupported(task: dict[str, Any], have: Callable[[str], bool]) -> str | None:
    """Why the task cannot run on these desktops yet, or None. ``have(program)`` says whether a program is
    there."""
    for step in task.get("config") or []:
        reason = UNSUPPORTED_SETUP.get(step.get("type"))
        if reason:
            return reason
        if step.get("type") in ("launch", "execute", "command"):
            command = (step.get("parameters") or {}).get("command")
            first = command.split()[0] if isinstance(command, str) and command.split() else \
                command[0] if isinstance(command, list) and command else None
            if isinstance(first, str):
                program = os.path.basename(first)
                if program in PROGRAMS and not have(STANDS_IN.get(program, program)):
                    return f"needs {PROGRAMS[program]}"
    if task.get("proxy"):
        return UNSUPPORTED_SETUP["proxy"]
    evaluator = task.get("evaluator") or {}
    steps = [*(task.get("config") or []), *(evaluator.get("postconfig") or [])]
    commands = [(step.get("parameters") or {}).get("command") for step in steps]
    commands += [getter.get("command") for getter in _getters(evaluator)]
    texts = [" ".join(c) if isinstance(c, list) else c for c in commands
             if isinstance(c, str) or (isinstance(c, list) and all(isinstance(a, str) for a in c))]
    if any(_SUDO.search(text) for text in texts):
        return NEEDS_SUDO
    for pattern, reason in NEEDS_IN_COMMANDS:
        if any(pattern.search(text) for text in texts):
            return reason
    for getter in _getters(evaluator):
        kind = getter["type"]
        if kind in UNSUPPORTED_GETTERS:
            return UNSUPPORTED_GETTERS[kind]
    return None


def missing_downloads(task: dict[str, Any], cache_dir: str | Path,
                      reachable: Callable[[str], str | None]) -> str | None:
    """The first file the task downloads (in its set-up, its evaluator's post-set-up, or its evaluator's cloud
    files) that is neither in the cache nor reachable, said with its URL and the cache path; None if every one is
    there or reachable."""
    wanted: list[tuple[str, Path]] = []
    # the evaluator's post-set-up downloads too: OSWorld's harness runs them before its getters, from the same cache
    for step in [*(task.get("config") or []), *((task.get("evaluator") or {}).get("postconfig") or [])]:
        if step.get("type") == "download":
            for item in (step.get("parameters") or {}).get("files", []):
                wanted.append((item["url"], cache_path(cache_dir, task["id"], item["url"], item["path"])))
        if step.get("type") == "update_browse_history":  # the empty history it fills, from OSWorld's file cache
            wanted.append((HISTORY_URL, Path(cache_dir) / task["id"] / "history_new.sqlite"))
    for getter in _getters(task.get("evaluator") or {}):
        if getter["type"] == "cloud_file":
            urls = getter["path"] if isinstance(getter.get("path"), list) else [getter.get("path")]
            dests = getter["dest"] if isinstance(getter.get("dest"), list) else [getter.get("dest")]
            wanted += [(url, Path(cache_dir) / task["id"] / str(dest)) for url, dest in zip(urls, dests) if url]
    for url, path in wanted:
        if path.is_file():
            continue
        problem = reachable(url)
        if problem is not None:
            return f"{url} is not in the cache (looked for {path}) and cannot be fetched: {problem}"
    return None


def unreachable_pages(task: dict[str, Any], reachable: Callable[[str], str | None]) -> str | None:
    """The first web page the task's set-up opens (its browser's tabs, a URL a program is started with) that
    cannot be reached from here, said with why: without it the task does not start as on OSWorld's machine (a
    site's cookies that were never set are "deleted" before the agent acts), so it is not run."""
    pages: list[str] = []
    for step in task.get("config") or []:
        parameters = step.get("parameters") or {}
        if step.get("type") == "chrome_open_tabs":
            pages += [url for url in parameters.get("urls_to_open") or []
                      if isinstance(url, str) and url.startswith(("http://", "https://"))]
        elif step.get("type") in ("launch", "execute", "command"):
            command = parameters.get("command")
            words = command.split() if isinstance(command, str) else command if isinstance(command, list) else []
            pages += [word for word in words if isinstance(word, str) and word.startswith(("http://", "https://"))]
    for url in dict.fromkeys(pages):
        problem = reachable(url)
        if problem is not None:
            return f"needs the network: its set-up opens {url}, which cannot be reached from here ({problem})"
    return None


def reach(url: str) -> str | None:
    """None if ``url`` answers a HEAD request (or a GET where HEAD is refused), else what went wrong."""
    for method in ("HEAD", "GET"):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=REACH_TIMEOUT):
                return None
        except urllib.error.HTTPError as exc:
            if method == "HEAD" and exc.code in (403, 405):
                continue
            return f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            return str(getattr(exc, "reason", None) or exc)
    return None


# -- running them ---------------------------------------------------------------------------------------------
def run_report(folder: str | Path, *, solutions: dict[str, list[Any]] | None = None, cache_dir: str | Path = "cache",
               action_space: str = "pyautogui", screen_size: tuple[int, int] = (1920, 1080),
               domain: str | None = None, env: Any = None, say: Callable[[str], None] = print,
               reachable: Callable[[str], str | None] = reach) -> Report:
    """Run every task of ``folder`` (see the module's docstring) and return the report. ``env``: an OSWorld
    ``DesktopEnv`` to use (default: one made here, closed at the end)."""
    import shutil

    from .provider import DesktopEnv

    tasks = find_tasks(folder, domain)
    solutions = solutions or {}
    reachable = functools.lru_cache(maxsize=None)(reachable)  # a site is asked once per run
    report = Report()
    own = env is None
    started = time.monotonic()
    try:
        for n, (name, path) in enumerate(tasks, start=1):
            task = json.loads(path.read_text())
            row = TaskReport(id=str(task.get("id", path.stem)), domain=name)
            report.tasks.append(row)
            row.unsupported = unsupported(task, lambda program: shutil.which(program) is not None)
            if row.unsupported is None:
                row.unsupported = unreachable_pages(task, reachable)
            if row.unsupported is None:
                row.why = missing_downloads(task, cache_dir, reachable)
                if row.why is not None:
                    row.set_up = False
            if row.unsupported is None and row.set_up is None:
                if env is None:
                    say(f"[osworld] starting a desktop ({screen_size[0]}x{screen_size[1]})")
                    env = DesktopEnv(action_space=action_space, screen_size=screen_size, cache_dir=str(cache_dir),
                                     require_a11y_tree=False)
                _run_task(env, task, row, solutions.get(row.id))
            state = row.unsupported or row.why or (
                f"do-nothing {_num(row.nothing_score)}, solution {_num(row.solution_score)}")
            say(f"[osworld] {n}/{len(tasks)} {name}/{row.id}: {state} ({time.monotonic() - started:.0f}s)")
    finally:
        if own and env is not None:
            env.close()
    return report


def evaluating_changes_the_desktop(task: dict[str, Any]) -> bool:
    """Whether scoring ``task`` changes the desktop: its evaluator's post-configuration steps (closing a window,
    saving) run before the getters. A task scored untouched is reset again before its solution only then."""
    return bool((task.get("evaluator") or {}).get("postconfig"))


def solution_step(env: Any, action: Any, pause: float = 0.5) -> Any:
    """One step of a scripted solution: an action for ``env.step`` (code or an action dict), or a wait as an agent
    that reads the accessibility tree waits, ``{"wait_for_tree": text, "timeout": seconds}``: until ``text`` is in
    OSWorld's XML of the tree (``controller.get_accessibility_tree()``), or with ``"regex": true`` until the
    pattern ``text`` matches there. A fixed pause is not enough for every app
    on a loaded machine: LibreOffice Calc runs cursor keys as commands it posts to itself and handles typing at
    once, so typing sent half a second after the moves landed in a cell on the way; its Name Box says where the
    cursor is (``>A4</text>``). And ``{"wait_for_window": title, "timeout": seconds}`` waits until the active
    window's name holds ``title`` (a file's name): an app opening a document shows it in its window's name once
    the document is loaded, where keys sent earlier went nowhere (LibreOffice in a loaded container takes well
    over the few seconds a fixed pause gives it). Returns what ``env.step`` returned, or None after a wait."""
    if isinstance(action, dict) and "wait_for_window" in action:
        from xml.sax.saxutils import escape

        name = str(action["wait_for_window"])
        title = re.escape(escape(name, {'"': "&quot;"}))  # as the XML's attribute spells it
        window = re.compile(f'<frame name="[^"]*{title}[^"]*"[^>]*st:active="true"')
        _wait_for_tree(env, window.search, f"an active window named {name!r}", float(action.get("timeout", 120)))
        return None
    if isinstance(action, dict) and "wait_for_tree" in action:
        text = str(action["wait_for_tree"])
        # with "regex": true, a pattern: what a text cannot say (this element focused, with that text)
        found = re.compile(text).search if action.get("regex") else lambda xml: text in xml
        _wait_for_tree(env, found, repr(text), float(action.get("timeout", 30)))
        return None
    return env.step(action, pause=pause)


def _wait_for_tree(env: Any, found: Any, shown: str, timeout: float) -> None:
    """Poll OSWorld's XML of the tree until ``found(xml)``; a TimeoutError that names ``shown`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not found(env.controller.get_accessibility_tree() or ""):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the accessibility tree did not show {shown} within {timeout:g}s")
        time.sleep(0.5)


def _run_task(env: Any, task: dict[str, Any], row: TaskReport, solution: list[Any] | None) -> None:
    t0 = time.monotonic()
    try:
        env.reset(task_config=task)
    except Exception as exc:  # noqa: BLE001 - whatever the task's set-up raised is the report's answer
        row.set_up, row.why = False, f"{type(exc).__name__}: {exc}"
        return
    row.set_up, row.reset_s = True, round(time.monotonic() - t0, 2)
    t1 = time.monotonic()
    try:
        row.nothing_score = float(env.evaluate())
    except Exception as exc:  # noqa: BLE001
        row.why = f"evaluating failed: {type(exc).__name__}: {exc}"
        return
    row.evaluate_s = round(time.monotonic() - t1, 2)
    if solution is None:
        return
    try:
        if evaluating_changes_the_desktop(task):  # else the solution starts from the state just scored
            env.reset(task_config=task)
        for action in solution:
            solution_step(env, action)
        row.solution_score = float(env.evaluate())
    except Exception as exc:  # noqa: BLE001
        row.why = f"the solution failed: {type(exc).__name__}: {exc}"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m hci_envs.osworld.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", help="OSWorld's evaluation_examples folder, or any folder of task files")
    parser.add_argument("--solutions", help="JSON: {task id: [action, ...]} to run after the do-nothing agent (an "
                        "action may be {\"wait_for_tree\": text}: a wait until the accessibility tree shows text, or "
                        "{\"wait_for_window\": title}: until the active window's name holds title)")
    parser.add_argument("--cache-dir", default="cache", help="OSWorld's download cache (default ./cache)")
    parser.add_argument("--out", default="osworld-report", help="where report.json and report.md go")
    parser.add_argument("--domain", help="only this domain")
    parser.add_argument("--action-space", default="pyautogui", choices=("pyautogui", "computer_13"))
    parser.add_argument("--screen-size", default="1920x1080", help="WIDTHxHEIGHT (default 1920x1080)")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.screen_size.lower().split("x"))
    solutions = json.loads(Path(args.solutions).read_text()) if args.solutions else None
    report = run_report(args.tasks, solutions=solutions, cache_dir=args.cache_dir, action_space=args.action_space,
                        screen_size=(width, height), domain=args.domain)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    (out / "report.md").write_text(report.markdown())
    print(f"[osworld] report: {out / 'report.md'} ({len(report.tasks)} tasks)")
    return 0


if __name__ == "__main__":
    import sys

    from ..errors import HciEnvsError

    try:
        sys.exit(main())
    except HciEnvsError as exc:
        print(f"hci-envs: {exc.message}", file=sys.stderr)
        sys.exit(1)
