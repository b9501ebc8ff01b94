"""The fidelity report over a folder in OSWorld's layout (made here: OSWorld's task files are theirs): the tasks
that run are run with the do-nothing agent and the solutions, the rest say why not, a download neither cached
nor reachable names its URL and the cache path, and a cached one runs offline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need, need_programs

HERE = Path(__file__).resolve().parent
TASKS = HERE / "osworld_tasks"
UNREACHABLE = "http://127.0.0.1:9/osworld/report.xlsx"  # the discard port: nothing listens


def task(task_id: str, config: list, evaluator: dict, **extra) -> dict:
    return {"id": task_id, "instruction": f"task {task_id}", "config": config, "evaluator": evaluator, **extra}


RULE = {"func": "exact_match", "result": {"type": "vm_command_line", "command": "echo", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "never"}}}
GDRIVE = task("gdrive", [{"type": "googledrive", "parameters": {"settings_file": "x", "operation": [], "args": []}}],
              RULE)
VSCODE = task("vscode", [{"type": "launch", "parameters": {"command": ["code", "/home/user/project"]}}], RULE)
TABS = task("tabs", [], {"func": "is_expected_tabs", "result": {"type": "open_tabs_info"},
                         "expected": {"type": "rule", "rules": {"type": "url", "urls": []}}})
CHROME = task("chrome", [{"type": "launch",
                          "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
                         {"type": "launch", "parameters": {"command": "socat tcp-listen:9222,fork tcp:localhost:1337",
                                                           "shell": True}}], RULE)
ADDRESS_BAR = task("address-bar", [], {"func": "is_expected_active_tab", "result": {"type": "active_tab_info"},
                                       "expected": {"type": "rule", "rules": {"type": "url", "url": "x"}}})
SUDO = task("sudo", [{"type": "execute", "parameters": {"command": "echo password | sudo -S apt-get install -y cowsay",
                                                         "shell": True}}], RULE)
OFFLINE = task("offline", [{"type": "download", "parameters": {"files": [
    {"url": UNREACHABLE, "path": "/home/user/report.xlsx"}]}}], RULE)
CACHED = task("cached", [{"type": "download", "parameters": {"files": [
    {"url": "https://example.invalid/osworld/greeting.txt", "path": "/home/user/greeting.txt"}]}},
                         {"type": "launch", "parameters": {"command": ["xterm"]}},
                         {"type": "sleep", "parameters": {"seconds": 1}}],
              {"func": "check_include_exclude",
               "result": {"type": "vm_command_line", "command": "cat /home/user/greeting.txt; echo; cat ~/done",
                          "shell": True},
               "expected": {"type": "rule", "rules": {"include": ["hello from the cache", "done"], "exclude": []}}})


def layout(root: Path) -> Path:
    """OSWorld's evaluation_examples layout, with test_all.json choosing the tasks."""
    examples = root / "examples"
    for domain, tasks in {"os": [json.loads(p.read_text()) for p in sorted((TASKS / "examples" / "os").glob("*.json"))],
                          "elsewhere": [GDRIVE, VSCODE, SUDO, OFFLINE, CACHED]}.items():
        (examples / domain).mkdir(parents=True)
        for item in tasks:
            (examples / domain / f"{item['id']}.json").write_text(json.dumps(item))
    chosen = {"os": ["answer-in-a-file", "shout-the-notes"],
              "elsewhere": ["gdrive", "vscode", "sudo", "offline", "cached"]}
    (root / "test_all.json").write_text(json.dumps(chosen))
    return root


@pytest.mark.fake
def test_what_a_task_needs_is_said_before_it_runs(tmp_path):
    from hci_envs.osworld.report import cache_path, find_tasks, missing_downloads, unsupported

    root = layout(tmp_path / "evaluation_examples")
    found = find_tasks(root)
    assert [(d, p.stem) for d, p in found][:3] == [("os", "answer-in-a-file"), ("os", "shout-the-notes"),
                                                   ("elsewhere", "gdrive")]
    assert [p.stem for _, p in find_tasks(root, "os")] == ["answer-in-a-file", "shout-the-notes"]
    nothing_installed = lambda program: False  # noqa: E731
    assert "Google Drive" in unsupported(GDRIVE, nothing_installed)
    assert "VS Code" in unsupported(VSCODE, nothing_installed)
    assert unsupported(TABS, nothing_installed) is None  # the browser's DevTools are served
    assert "chromium" in unsupported(CHROME, nothing_installed)
    assert unsupported(CHROME, lambda program: program == "chromium") is None
    assert unsupported(ADDRESS_BAR, nothing_installed) is None  # the browser is named Google Chrome in the tree
    assert unsupported(OFFLINE, nothing_installed) is None
    sudo_setup = {"config": [{"type": "execute", "parameters": {"command": ["bash", "-c", "echo password | sudo -S true"]}}]}
    sudo_check = {"evaluator": {"result": {"type": "vm_command_line", "command": "sudo cat /etc/shadow"}}}
    assert "sudo" in unsupported(sudo_setup, nothing_installed) and "sudo" in unsupported(sudo_check, nothing_installed)
    assert unsupported({"config": [{"type": "execute", "parameters": {"command": "echo pseudo sudoku"}}]},
                       nothing_installed) is None
    # what the desktops do not run, named in any command: the set-up's, the post-set-up's, the getters'
    time_zone = {"evaluator": {"func": "is_utc_0",
                               "result": {"type": "vm_command_line", "command": "timedatectl status"}}}
    dock = {"config": [{"type": "execute", "parameters": {"command": "gsettings set org.gnome.shell favorite-apps []",
                                                          "shell": True}}]}
    volume = {"evaluator": {"postconfig": [{"type": "execute", "parameters": {"command": ["sh", "-c", "pactl list"]}}]}}
    assert "systemd" in unsupported(time_zone, nothing_installed)
    assert "GNOME Shell" in unsupported(dock, nothing_installed)
    assert "PulseAudio" in unsupported(volume, nothing_installed)
    assert unsupported({"evaluator": {"result": {"type": "vm_command_line",
                                                 "command": "gsettings get org.gnome.shell-extensions-not x"}}},
                       nothing_installed) is not None  # GNOME Shell's other schemas too

    cache = tmp_path / "cache"
    why = missing_downloads(OFFLINE, cache, lambda url: "connection refused")
    assert UNREACHABLE in why and str(cache_path(cache, "offline", UNREACHABLE, "/home/user/report.xlsx")) in why
    assert missing_downloads(OFFLINE, cache, lambda url: None) is None  # reachable: the harness fetches it
    # the evaluator's post-set-up downloads from the same cache before its getters run
    later = {"id": "later", "config": [], "evaluator": {"postconfig": [{"type": "download", "parameters": {
        "files": [{"url": UNREACHABLE, "path": "/home/user/eval.sh"}]}}]}}
    why = missing_downloads(later, cache, lambda url: "connection refused")
    assert why and str(cache_path(cache, "later", UNREACHABLE, "/home/user/eval.sh")) in why
    assert missing_downloads({**later, "evaluator": {}}, cache, lambda url: "connection refused") is None
    history = {"id": "history", "config": [{"type": "update_browse_history", "parameters": {"history": []}}]}
    assert "history_new.sqlite" in missing_downloads(history, cache, lambda url: "no network")
    (cache / "history").mkdir(parents=True)
    (cache / "history" / "history_new.sqlite").write_bytes(b"SQLite format 3\0")
    assert missing_downloads(history, cache, lambda url: "no network") is None

    # a start state made of web pages is not OSWorld's when they cannot be reached: such a task is not run
    from hci_envs.osworld.report import unreachable_pages

    tabs = {"config": [{"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["https://shop.example/"]}},
                       {"type": "launch", "parameters": {"command": ["google-chrome", "https://news.example/"]}}]}
    asked: list[str] = []

    def offline(url: str) -> str:
        asked.append(url)
        return "Name or service not known"

    why = unreachable_pages(tabs, offline)
    assert why and "needs the network" in why and "https://shop.example/" in why and asked == ["https://shop.example/"]
    assert unreachable_pages(tabs, lambda url: None) is None
    local = {"config": [{"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["file:///home/user/a.html"]}}]}
    assert unreachable_pages(local, offline) is None
    (tmp_path / "test_all.json").write_text(json.dumps({"os": ["not-there"]}))
    from hci_envs.errors import ConfigError

    with pytest.raises(ConfigError, match="not-there"):
        find_tasks(tmp_path)


@pytest.mark.osworld
def test_the_report_runs_a_folder_and_says_why_the_rest_do_not_run(x11, tmp_path):
    from hci_envs.osworld.report import cache_path

    need_programs("xterm")
    need(os.geteuid() == 0, "root: the provider shows the agent its home at /home/user (a mount namespace)")
    python = os.environ.get("HCI_ENVS_OSWORLD_PYTHON") or str(HERE.parent / ".venv-osworld" / "bin" / "python")
    need(Path(python).exists(), f"OSWorld's environment ({python})")
    root = layout(tmp_path / "evaluation_examples")
    work = tmp_path / "work"
    (work / "files").mkdir(parents=True)
    (work / "files" / "notes.txt").write_text("shopping list\nmilk, bread\n")
    (work / "files" / "expected.txt").write_text("SHOPPING LIST\nMILK, BREAD\n")
    cached = cache_path(work / "cache", "cached", CACHED["config"][0]["parameters"]["files"][0]["url"],
                        "/home/user/greeting.txt")
    cached.parent.mkdir(parents=True)
    cached.write_text("hello from the cache")  # filled once: no network needed
    solutions = {**json.loads((TASKS / "solutions.json").read_text()),
                 "cached": ["pyautogui.typewrite('echo done > ~/done'); pyautogui.press('enter')"]}
    (work / "solutions.json").write_text(json.dumps(solutions))
    env = {**os.environ, "HCI_ENVS_PYTHON": sys.executable}
    run = subprocess.run([python, "-m", "hci_envs.osworld.report", str(root), "--solutions", "solutions.json",
                          "--out", "out", "--screen-size", "1280x800"], cwd=work, env=env, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    assert "[osworld] 7/7 elsewhere/cached" in run.stdout  # progress, task by task
    report = json.loads((work / "out" / "report.json").read_text())
    rows = {t["id"]: t for t in report["tasks"]}
    for solved in ("answer-in-a-file", "shout-the-notes", "cached"):
        assert rows[solved]["set_up"] and rows[solved]["nothing_score"] == 0.0, rows[solved]
        assert rows[solved]["solution_score"] == 1.0, rows[solved]
        assert rows[solved]["reset_s"] > 0 and rows[solved]["evaluate_s"] >= 0
    for name in ("gdrive", "vscode", "sudo"):
        assert rows[name]["unsupported"] and rows[name]["set_up"] is None and rows[name]["nothing_score"] is None
    assert rows["offline"]["set_up"] is False and UNREACHABLE in rows["offline"]["why"]
    assert report["domains"]["os"] == {"tasks": 2, "set_up": 2, "unsupported": 0, "nothing_zero": 2, "solved": 2,
                                       "with_solution": 2}
    markdown = (work / "out" / "report.md").read_text()
    assert "| elsewhere | 5 | 1 | 3 | 1 | 1 / 1 |" in markdown, markdown
    assert shutil.which("code") is None  # the VS Code row is honest on this machine


@pytest.mark.fake
def test_a_solution_waits_for_the_tree_and_says_what_it_did_not_see(monkeypatch):
    """A scripted solution's ``{"wait_for_tree": text}`` polls OSWorld's tree XML until the text is in it, then
    the next actions go to ``env.step``; a wait that never ends names the text. The environment here is a stand-in
    (the declared seam: an object with OSWorld's ``step`` and ``controller.get_accessibility_tree``)."""
    from types import SimpleNamespace

    from hci_envs.osworld import report

    monkeypatch.setattr(report.time, "sleep", lambda _s: None)
    trees = [None, "<desktop-frame><text>A1</text></desktop-frame>", "<desktop-frame><text>A4</text></desktop-frame>"]
    looks, stepped = [], []

    def tree() -> str | None:
        looks.append(1)
        return trees[min(len(looks) - 1, len(trees) - 1)]

    env = SimpleNamespace(controller=SimpleNamespace(get_accessibility_tree=tree),
                          step=lambda action, pause: stepped.append(action) or ({}, 0, False, {}))
    for action in ["pyautogui.press('down')", {"wait_for_tree": ">A4</text>"}, "pyautogui.typewrite('x')"]:
        report.solution_step(env, action)
    assert stepped == ["pyautogui.press('down')", "pyautogui.typewrite('x')"] and len(looks) == 3
    with pytest.raises(TimeoutError, match="did not show '>B9</text>' within 0s"):
        report.solution_step(env, {"wait_for_tree": ">B9</text>", "timeout": 0})


@pytest.mark.fake
def test_a_solution_may_wait_for_a_pattern_of_the_tree(monkeypatch):
    """With ``"regex": true`` the wait is for a pattern (a focused element with that text, which a plain text
    cannot say); the same seam as above."""
    from types import SimpleNamespace

    from hci_envs.osworld import report

    monkeypatch.setattr(report.time, "sleep", lambda _s: None)
    trees = ['<p st:focused="true">First</p><p>Last</p>', '<p>First</p><p st:focused="true">Last</p>']
    looks: list[int] = []

    def tree() -> str:
        looks.append(1)
        return trees[min(len(looks) - 1, len(trees) - 1)]

    env = SimpleNamespace(controller=SimpleNamespace(get_accessibility_tree=tree), step=None)
    report.solution_step(env, {"wait_for_tree": 'st:focused="true"[^>]*>Last</p>', "regex": True})
    assert len(looks) == 2  # the first tree has the text, but not focused
    with pytest.raises(TimeoutError, match="did not show"):
        report.solution_step(env, {"wait_for_tree": 'st:focused="true"[^>]*>Other</p>', "regex": True,
                                   "timeout": 0})


@pytest.mark.fake
def test_a_solution_waits_for_the_window_of_its_document(monkeypatch):
    """``{"wait_for_window": name}`` waits until a window whose name holds ``name`` is the active one (a document
    loaded and taking the keys), a name with XML's special characters included; a window of that name that is not
    active, or the app's start window, does not end it. The same seam as above, with trees made by the adapter
    that makes the real ones (``accessibility_tree_xml``)."""
    from types import SimpleNamespace

    from hci_envs.adapters.osworld_actions import accessibility_tree_xml
    from hci_envs.osworld import report

    monkeypatch.setattr(report.time, "sleep", lambda _s: None)

    def frame(name: str, *states: str) -> dict:
        return {"nodes": [{"element": 1, "role": "application", "name": "soffice"},
                          {"element": 2, "parent": 1, "role": "frame", "name": name, "states": ["enabled", *states]}]}

    name = 'Q&A "final".docx'
    trees = [accessibility_tree_xml(frame("LibreOffice", "active")),
             accessibility_tree_xml(frame(f"{name} - LibreOffice Writer")),
             accessibility_tree_xml(frame(f"{name} - LibreOffice Writer", "active", "showing"))]
    looks: list[int] = []

    def tree() -> str:
        looks.append(1)
        return trees[min(len(looks) - 1, len(trees) - 1)]

    env = SimpleNamespace(controller=SimpleNamespace(get_accessibility_tree=tree), step=None)
    report.solution_step(env, {"wait_for_window": name})
    assert len(looks) == 3
    with pytest.raises(TimeoutError, match="did not show an active window named 'other.docx' within 0s"):
        report.solution_step(env, {"wait_for_window": "other.docx", "timeout": 0})
