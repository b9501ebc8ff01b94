"""The examples run as a user would run them, and do what their docstrings say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need_programs

pytestmark = pytest.mark.x11

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str, python: str = sys.executable, timeout: float = 300,
                cwd: Path | None = None) -> str:
    out = subprocess.run([python, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=timeout,
                         cwd=cwd)
    assert out.returncode == 0, f"{name} exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def test_custom_env_composes_checks_and_serves(x11):
    need_programs("xterm")
    out = run_example("custom_env.py")
    assert "check_env: ok" in out
    assert "1 notes" in out and "lines: 3" in out
    tools = out.split("tools: ", 1)[1].split(", ")
    assert {"write_note", "bash", "python", "click", "screenshot", "execute_code"} <= {t.strip() for t in tools}


def test_run_suite_writes_reports_for_the_chosen_tasks(x11, tmp_path):
    need_programs("xterm")
    out = run_example("run_suite.py", "--tasks", "form-contact", "term-hello", "--out", str(tmp_path / "r"))
    assert "oracle: success rate 1.00 over 2 tasks" in out
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [r["task"] for r in report["results"]] == ["form-contact", "term-hello"]


def test_run_suite_names_unknown_tasks(x11):
    out = subprocess.run([sys.executable, str(EXAMPLES / "run_suite.py"), "--tasks", "no-such-task"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "unknown task ids: no-such-task" in out.stderr


def test_record_and_replay_a_scripted_human(x11, tmp_path):
    need_programs("xterm", "x11vnc")
    out = run_example("record_and_replay.py", "--scripted", "--episodes", str(tmp_path), "--name", "demo",
                      cwd=tmp_path)
    assert "'text': 'echo hello from a human'" in out, out
    assert "0 errors" in out and "final screen match 1.0" in out, out
    assert (tmp_path / "demo" / "actions.jsonl").exists()


def test_trl_example_trains_a_model_on_desktop_tasks(x11, tmp_path):
    """The example as a user runs it, with a model built here (the Hub is out of reach): real GRPO steps whose
    rollouts reset desktops into the task and whose reward is its checker."""
    need_programs("xterm")
    from test_trl import need_trl

    need_trl()
    import tiny_lm

    conversation = {"messages": [{"role": "user", "content": "In the terminal, create hello.txt"}], "tools": "[]"}
    model = tiny_lm.build(tmp_path / "model", [conversation])
    out = run_example("trl_environment_factory.py", "--model", str(model), "--text-only", "--task", "term-hello",
                      "--tools", "type_text,wait", "--max-steps", "1", "--batch", "2", "--output-dir",
                      str(tmp_path / "out"), timeout=600)
    assert "mean reward per step: [0.0]" in out, out
