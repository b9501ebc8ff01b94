"""A checker that cannot run is an error that names what to install, never a score of 0: up front in ``World`` and
``serve --tasks``, and at scoring time when something went missing after the start."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import need
from helpers import ServerProcess

from hci_envs.errors import MissingDependencyError
from hci_envs.tasks import TaskSpec, World
from hci_envs.tasks.needs import Need, first_program, needs

#: A program no machine has; named for this run, since one test puts it on the machine's PATH for a while and
#: another suite running beside this one must not see it there.
MISSING = f"hci-envs-no-such-checker-program-{os.getpid()}"


def task_file(tmp_path: Path, run: str) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({"id": "needs-a-program", "instruction": "Do nothing.",
                                "checker": {"type": "command", "run": run}}) + "\n")
    return path


@pytest.mark.fake
@pytest.mark.parametrize("checker,wanted", [
    ({"type": "document", "path": "a.odt", "contains": ["x"]}, {Need("module", "odf"), Need("module", "docx")}),
    ({"type": "document", "path": "a.docx", "format": "docx", "contains": ["x"]}, {Need("module", "docx")}),
    ({"type": "document", "path": "a.txt", "format": "text", "contains": ["x"]}, set()),
    ({"type": "spreadsheet", "path": "a.csv", "format": "csv", "cells": {"A1": 1}}, set()),
    ({"type": "all", "checks": [
        {"type": "gate", "gate": {"type": "command", "run": "sqlite3 db 'select 1'"},
         "then": {"type": "spreadsheet", "path": "b.xlsx", "format": "xlsx", "cells": {"A1": 1}}},
        {"type": "weighted", "parts": [{"name": "n", "weight": 1,
                                        "check": {"type": "command", "run": "test -f x"}}]}]},
     {Need("program", "sqlite3"), Need("module", "openpyxl")}),
])
def test_a_checker_needs_every_reader_its_formats_allow_and_the_program_it_starts(checker, wanted):
    task = TaskSpec.model_validate({"id": "t", "instruction": "i", "checker": checker})
    assert set(needs(task.checker)) == wanted


@pytest.mark.fake
@pytest.mark.parametrize("command,program", [
    ("sqlite3 db 'select 1'", "sqlite3"), ("grep -q x f | wc -l", "grep"), ("/usr/bin/env true", "/usr/bin/env"),
    ("A=1 run", None), ("test -f x && cat x", None), ("[ -f x ]", None), ("$(which x)", None), ("'unclosed", None),
])
def test_the_program_a_command_starts_is_told_only_when_it_can_be(command, program):
    assert first_program(command) == program


@pytest.mark.fake
def test_a_world_whose_checker_cannot_run_refuses_to_start_naming_the_program(tmp_path):
    with pytest.raises(MissingDependencyError, match=f"the program '{MISSING}'.*needs-a-program") as refused:
        World(task_file(tmp_path, f"{MISSING} --check"))
    assert refused.value.code == "MISSING_DEPENDENCY" and "would score 0" in refused.value.message


@pytest.mark.fake
def test_serve_with_tasks_whose_checker_cannot_run_exits_with_the_fix_in_one_line(tmp_path):
    server = ServerProcess("--desktop", "fake", "--tasks", str(task_file(tmp_path, f"{MISSING} --check")))
    with pytest.raises(AssertionError, match="exited 2") as refused:
        server.start(timeout=60)
    said = str(refused.value)
    assert f"hci-envs: error: the tasks {tmp_path}" in said and f"the program '{MISSING}'" in said, said
    assert "Traceback" not in said


@pytest.mark.fake
def test_without_the_tasks_extra_document_checkers_are_refused_naming_it(tmp_path):
    """OpenEnv's environment has our light client and no office readers, as a machine without the extra."""
    python = os.environ.get("HCI_ENVS_OPENENV_PYTHON") or str(Path(__file__).parent.parent / ".venv-openenv" / "bin"
                                                                / "python")
    need(Path(python).exists(), f"OpenEnv's environment ({python}); `python3 -m hci_envs install --test` makes it")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a-memo", "instruction": "Write a memo.",
                                 "checker": {"type": "document", "path": "memo.odt", "contains": ["memo"]}}) + "\n")
    probe = ("from hci_envs.errors import MissingDependencyError\n"
             "from hci_envs.tasks.catalog import TaskSuite\n"
             "try:\n    TaskSuite(__import__('sys').argv[1]).require_checkers()\n"
             "except MissingDependencyError as exc:\n    print(exc.code, exc.message)\n")
    done = subprocess.run([python, "-c", probe, str(tasks)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("MISSING_DEPENDENCY") and "the Python package 'odf'" in done.stdout, done.stdout
    assert "pip install 'hci-envs[tasks]'" in done.stdout and "a-memo" in done.stdout


@pytest.mark.x11
def test_a_checker_program_gone_after_the_start_is_an_error_at_score_not_a_zero(tmp_path):
    """Served while the program was there; removed before scoring: /score answers MISSING_DEPENDENCY (501)."""
    need(os.geteuid() == 0, "root, to put a program on the agent's PATH (/usr/local/sbin)")
    program = Path("/usr/local/sbin") / MISSING
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    try:
        with ServerProcess("--tasks", str(task_file(tmp_path, f"{MISSING} --check"))) as server, \
                server.http() as http:
            assert http.post("/reset", json={"task": "needs-a-program"}).status_code == 200
            assert http.post("/score").json()["score"] == 1.0
            program.unlink()
            answer = http.post("/score")
            assert answer.status_code == 501 and answer.json()["error"]["code"] == "MISSING_DEPENDENCY", answer.text
            assert MISSING in answer.json()["error"]["message"]
    finally:
        program.unlink(missing_ok=True)
