"""OSWorld's own harness, unchanged, on hci-envs desktops: ``hci_envs.osworld.DesktopEnv`` gives OSWorld's
``DesktopEnv`` (desktop-env 1.0.2, in .venv-osworld beside our light install), which resets to OSWorld-format
tasks of our own (tests/osworld_tasks: their set-up steps), takes pyautogui code through ``step`` and scores
with OSWorld's getters and metrics. A do-nothing run scores 0, the scripted solutions 1; a revert between
tasks brings back the start state; two DesktopEnvs run at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import need, need_programs

pytestmark = pytest.mark.osworld

HERE = Path(__file__).resolve().parent
TASKS = HERE / "osworld_tasks"
SOLUTIONS = json.loads((TASKS / "solutions.json").read_text())
RUNNER = HERE / "osworld_peer" / "run_tasks.py"
MAKE_FILES = TASKS / "make_files.py"
#: The two terminal tasks the revert checks look at (the files they leave), and the pair run in two envs at once.
PAIR = ("answer-in-a-file", "shout-the-notes")
ROOT = HERE.parent


def osworld_python() -> str:
    path = os.environ.get("HCI_ENVS_OSWORLD_PYTHON") or str(ROOT / ".venv-osworld" / "bin" / "python")
    need(Path(path).exists(), f"OSWorld's environment ({path}); `python3 -m hci_envs install --test` makes it")
    return path


def task_files() -> list[str]:
    return sorted(str(p) for p in (TASKS / "examples").rglob("*.json"))


#: The last step of a save in an office format: "Keep current format" once the dialog is up (not a fixed sleep,
#: which a busy machine outlasts), then the file written, before the harness scores it.
KEEP_THE_FORMAT_AND_WAIT_FOR_THE_FILE = (
    "import os, subprocess\n"
    "before = os.stat(%(path)r).st_mtime_ns\n"
    "for _ in range(240):\n"
    "    if 'Confirm File Format' in subprocess.run(['xdotool', 'getactivewindow', 'getwindowname'],"
    " capture_output=True, text=True).stdout: break\n"
    "    time.sleep(0.25)\n"
    "pyautogui.press('enter')\n"
    "for _ in range(240):\n"
    "    if os.stat(%(path)r).st_mtime_ns != before: break\n"
    "    time.sleep(0.25)\n"
    "time.sleep(1)")


def run_harness(tmp: Path, *, solutions: bool | dict, **spec: object) -> dict:
    """The runner in OSWorld's environment, in a folder holding the files the tasks upload and with the cache
    their downloads and expected files come from (both made by make_files.py, in that environment)."""
    tmp.mkdir(parents=True, exist_ok=True)
    made = subprocess.run([osworld_python(), str(MAKE_FILES), str(tmp), str(tmp / "cache")], capture_output=True,
                          text=True, timeout=120)
    assert made.returncode == 0, f"make_files.py failed:\n{made.stderr[-3000:]}"
    chosen = solutions if isinstance(solutions, dict) else SOLUTIONS if solutions else None
    spec = {"tasks": task_files(), "solutions": chosen, "cache_dir": str(tmp / "cache"), **spec}
    (tmp / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "HCI_ENVS_PYTHON": sys.executable}  # the server runs on this installation
    out = subprocess.run([osworld_python(), str(RUNNER), str(tmp / "spec.json")], capture_output=True, text=True,
                         timeout=1800, cwd=tmp, env=env)
    last = (out.stderr.strip().splitlines() or ["no stderr"])[-1]  # the first line is what a summary shows
    assert out.returncode == 0, f"the harness failed (exit {out.returncode}): {last}\n{out.stdout[-3000:]}\n" \
                                f"{out.stderr[-6000:]}"
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for t in result["tasks"]:  # shown with -s, or when a test fails: where a pass spends its time
        print(f"{tmp.name:10} {t['id']:32} score {t['score']:3} (untouched {t['untouched_score']}) reset "
              f"{t['reset_s']:6.2f}s steps {t['steps_s']:6.2f}s evaluate {t['evaluate_s']:6.2f}s")
    return result


@pytest.fixture(autouse=True)
def _programs(x11) -> None:
    need_programs("xterm")
    need(os.geteuid() == 0, "root: the provider shows the agent its home at /home/user (a mount namespace)")


def one_task_of_each_app() -> list[str]:
    """The first task of each domain (an app, or the terminal), and the pair the revert checks look at."""
    firsts: dict[str, str] = {}
    for path in task_files():
        firsts.setdefault(Path(path).parent.name, path)
    return sorted({*firsts.values(), *(path for path in task_files() if Path(path).stem in PAIR)})


@pytest.mark.timeout(1200)  # a pass over the tasks (the report gives each one's times)
def test_a_task_of_each_app_scores_zero_untouched_and_one_solved_on_a_local_desktop(tmp_path):
    """Each task is scored twice: right after its reset (the do-nothing agent's score) and after its solution.
    Every task runs so in a container (tests/test_osworld_docker.py); here the first of each domain, on this
    machine's apps, with the accessibility tree, and the revert between tasks looked at."""
    tasks = one_task_of_each_app()
    assert {Path(t).parent.name for t in tasks} == {Path(t).parent.name for t in task_files()}
    run = run_harness(tmp_path, solutions=True, a11y=True, score_untouched=True, tasks=tasks,
                      probe="ls ~/Desktop/answer.txt ~/NOTES.txt 2>/dev/null | wc -l",
                      after_all="ls ~/Desktop/answer.txt ~/NOTES.txt ~/notes.txt 2>/dev/null | wc -l")
    assert {t["id"]: t["untouched_score"] for t in run["tasks"]} == {t["id"]: 0.0 for t in run["tasks"]}
    assert len(run["tasks"]) == len(tasks) >= 2
    assert all(t["screenshot_png"] and t["a11y"] and t["instruction"] for t in run["tasks"])
    assert run["platform"] == "Linux" and run["screen"] == {"width": 1280, "height": 800}
    ids = {Path(t).stem for t in tasks}
    assert {t["id"]: t["score"] for t in run["tasks"]} == {t: 1.0 for t in SOLUTIONS if t in ids}
    # each task starts from the start state (OSWorld reverts to the snapshot, a spare here): the answer of one of
    # the pair is there only when that one is scored, and after a last reset with no task, neither is
    assert {t["id"]: t["probe"].strip() for t in run["tasks"]} == {
        t["id"]: "1" if t["id"] in PAIR else "0" for t in run["tasks"]}
    assert run["after_all"].strip() == "0"


def test_two_desktop_envs_at_once(tmp_path):
    tasks = [t for t in task_files() if Path(t).stem in PAIR]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda n: run_harness(tmp_path / f"run{n}", solutions=True, tasks=tasks), range(2)))
    for run in runs:
        assert {t["id"]: t["score"] for t in run["tasks"]} == {t: 1.0 for t in PAIR}


def test_computer_13_actions_through_step(tmp_path):
    """OSWorld's other action space: action dicts, which its controller turns into pyautogui code."""
    typing = [{"action_type": "TYPING", "parameters": {"text": "echo forty-two > ~/Desktop/answer.txt"}},
              {"action_type": "PRESS", "parameters": {"key": "enter"}}]
    tasks = [t for t in task_files() if t.endswith("answer-in-a-file.json")]
    nothing = run_harness(tmp_path / "nothing", solutions=False, action_space="computer_13", tasks=tasks)
    solved = run_harness(tmp_path / "solved", solutions={"answer-in-a-file": typing}, action_space="computer_13",
                         tasks=tasks)
    assert [t["score"] for t in nothing["tasks"]] == [0.0] and [t["score"] for t in solved["tasks"]] == [1.0]


def test_a_calc_task_opens_its_download_and_is_scored_by_compare_table(tmp_path):
    """OSWorld's most common shape: a spreadsheet downloaded (from the cache: offline), opened by its path (the
    set-up waits for "prices.xlsx - LibreOffice Calc"), edited by pyautogui code at the first keys (no first-run
    dialog in OSWorld's home), saved, and compared with the expected table by OSWorld's compare_table."""
    import uuid

    import openpyxl

    need_programs("localc")

    def sheet(path: Path, rows: list) -> None:
        book = openpyxl.Workbook()
        for row in rows:
            book.active.append(row)
        book.save(path)

    source, expected = "https://example.invalid/osworld/prices.xlsx", "https://example.invalid/osworld/total.xlsx"
    rows = [["item", "price"], ["milk", 2], ["bread", 3]]
    cache = tmp_path / "cache" / "calc-total"
    cache.mkdir(parents=True)
    sheet(cache / f"{uuid.uuid5(uuid.NAMESPACE_URL, source)}_prices.xlsx", rows)  # OSWorld's cache layout
    sheet(cache / "total.xlsx", rows + [["total", 5]])
    task = {"id": "calc-total", "instruction": "Add a row named total with the sum of the prices.",
            "config": [{"type": "download", "parameters": {"files": [{"url": source, "path": "/home/user/prices.xlsx"}]}},
                       {"type": "open", "parameters": {"path": "/home/user/prices.xlsx"}}],
            "evaluator": {"func": "compare_table",
                          "result": {"type": "vm_file", "path": "/home/user/prices.xlsx", "dest": "prices.xlsx"},
                          "expected": {"type": "cloud_file", "path": expected, "dest": "total.xlsx"},
                          "options": {"rules": [{"type": "sheet_data", "sheet_idx0": "RI0", "sheet_idx1": "EI0"}]}}}
    (tmp_path / "calc-total.json").write_text(json.dumps(task))
    solution = ["pyautogui.hotkey('ctrl', 'home'); pyautogui.press('down', presses=3)",  # to A4
                {"wait_for_tree": ">A4</text>"},  # until the Name Box shows A4 (the peer's wait: Calc moves late)
                "pyautogui.typewrite('total\\t=SUM(B2:B3)\\n')",
                "pyautogui.hotkey('ctrl', 's')",
                KEEP_THE_FORMAT_AND_WAIT_FOR_THE_FILE % {"path": "/home/user/prices.xlsx"}]
    tasks = [str(tmp_path / "calc-total.json")]
    nothing = run_harness(tmp_path, solutions=False, tasks=tasks)
    solved = run_harness(tmp_path, solutions={"calc-total": solution}, tasks=tasks)
    assert [t["score"] for t in nothing["tasks"]] == [0.0] and [t["score"] for t in solved["tasks"]] == [1.0]
