"""Tasks and worlds: the built-in suite is solvable and not trivially so; reports; bad task files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import need_programs

from hci_envs.tasks import (
    BUILTIN, NoopAgent, OracleAgent, RandomAgent, TaskFormatError, World, load_tasks, parse_task, score,
)


@pytest.fixture(scope="module")
def world(x11):
    need_programs("xterm", "mousepad")
    with World() as world:
        yield world


@pytest.mark.fake
def test_the_suite_has_twelve_tasks_over_four_apps():
    tasks = load_tasks(BUILTIN)
    assert len(tasks) >= 12
    apps = {app.name for t in tasks for app in t.start_state.apps}
    assert {"form", "game", "terminal", "editor"} <= apps


@pytest.mark.apps
def test_oracle_solves_every_task_and_the_report_shows_each_screen(world, tmp_path):
    report = world.run(OracleAgent(), report_dir=tmp_path, progress=False)
    failed = [(r.task, r.details, r.error) for r in report.results if r.score != 1.0]
    assert not failed, failed
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["summary"]["success_rate"] == 1.0 and data["summary"]["tasks"] == len(world.tasks)
    markdown = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    for r in report.results:
        assert (tmp_path / r.screenshot).stat().st_size > 1000
        assert f"![final screen of {r.task}]({r.screenshot})" in markdown
        assert f'alt="final screen of {r.task}"' in html


@pytest.mark.apps
def test_doing_nothing_scores_zero_everywhere(world):
    report = world.run(NoopAgent(), progress=False)
    assert [r.score for r in report.results] == [0.0] * len(world.tasks)


@pytest.mark.apps
def test_the_canaries_openenv_is_told_of_score_zero(world):
    """images/openenv/canaries.json (the manifest's canaries): every built-in task, untouched and with trivial
    input, scores 0 (the untouched ones are the test above's)."""
    data = json.loads((Path(__file__).resolve().parents[1] / "images" / "openenv" / "canaries.json").read_text())
    assert data["catalog"] == "builtin" and data["max_reward"] == 0.0
    assert sorted({c["task"] for c in data["canaries"]}) == sorted(t.id for t in world.tasks)
    assert {c["task"] for c in data["canaries"] if not c["actions"]} == {t.id for t in world.tasks}
    plans = {c["task"]: c["actions"] for c in data["canaries"] if c["actions"]}

    def trivial(obs, context):
        return plans[context.task.id] if context.step == 0 else None

    report = world.run(trivial, tasks=[world.task(task) for task in plans], progress=False)
    assert [(r.task, r.score, r.error) for r in report.results] == [(task, 0.0, None) for task in plans]


@pytest.mark.apps
def test_a_random_agent_almost_never_succeeds(world):
    report = world.run(RandomAgent(seed=3, steps=15), progress=False)
    assert report.summary()["success_rate"] <= 1 / len(world.tasks)


@pytest.mark.apps
def test_episodes_of_a_run_are_recorded(world, tmp_path):
    from hci_envs.recorders import load_episode

    recorded = World([world.task("form-contact")], env=world.env, record_dir=tmp_path)
    report = recorded.run(OracleAgent(), progress=False)
    episode = load_episode(report.results[0].episode)
    assert episode.meta["task"] == "form-contact"
    assert [a["action"]["type"] for a in episode.actions].count("type_text") == 2


@pytest.mark.apps
def test_next_task_walks_the_tasks(world):
    other = World(BUILTIN, env=world.env)
    ids = []
    while (task := other.next_task()) is not None:
        ids.append(task.id)
    assert ids == [t.id for t in world.tasks]


@pytest.mark.fake
@pytest.mark.parametrize(
    "content,message",
    [
        ('{"id": "x", "instruction": "i"}', "checker: Field required"),
        ('{"id": "bad id!", "instruction": "i", "checker": {"type": "file", "path": "a"}}', "id: String should match"),
        ('{"id": "x", "instruction": "i", "checker": {"type": "smell", "path": "a"}}', "checker"),
        ('{"id": "x", "instruction": "i", "checker": {"type": "file", "path": "a", "matches": "("}}', "not a regular expression"),
        ('{"id": "x", "instruction": "i", "checker": {"type": "file"}}', "checker.file.path: Field required"),
        ('{"id": "x", "instruction": "i", "max_steps": 0, "checker": {"type": "file", "path": "a"}}', "max_steps"),
        ('{"id": "x", "instruction": "i", "home_files": {"../escape": "x"}, "checker": {"type": "file", "path": "a"}}',
         "paths are relative paths inside the session's home"),
        ('{"id": "x", "instruction": "i", "start_state": {"width": 5}, "checker": {"type": "file", "path": "a"}}',
         "start_state.width"),
        ('{"id": "x", "instruction": "i", "surprise": 1, "checker": {"type": "file", "path": "a"}}', "surprise"),
        ("{not json", "not valid JSON"),
        ('{"id": "x", "instruction": "i", "checker": {"type": "json", "path": "s.json", "pointer": "/a"}}',
         "give exactly one of 'equals'"),
        ('{"id": "x", "instruction": "i", "checker": {"type": "file", "path": "/etc/passwd"}}',
         "checker.file.path: '/etc/passwd': paths are relative"),
        ('{"id": "x", "instruction": "i", "checker": {"type": "command", "run": "true", "exit_code": null}}',
         "else it always passes"),
        ('{"id": "x", "instruction": "i", "setup": [{"type": "clikc"}], "checker": {"type": "file", "path": "a"}}',
         "setup[0]: unknown action type 'clikc'"),
        ('{"id": "x", "instruction": "i", "home_files": {"a": "", "a/b": ""}, "checker": {"type": "file", "path": "a"}}',
         "'a' is a file, and a folder of other home files"),
    ],
)
def test_bad_task_files_name_the_field(tmp_path, content, message):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "ok", "instruction": "fine", "checker": {"type": "file", "path": "a"}}\n' + content + "\n")
    with pytest.raises(TaskFormatError) as info:
        load_tasks(path)
    assert f"{path}:2" in str(info.value) and message in str(info.value)


@pytest.mark.fake
def test_duplicate_ids_and_other_formats(tmp_path):
    task = {"id": "same", "instruction": "i", "checker": {"type": "file", "path": "a"}}
    (tmp_path / "a.json").write_text(json.dumps([task, task]))
    with pytest.raises(TaskFormatError, match="two tasks have the id 'same'"):
        load_tasks(tmp_path / "a.json")
    yaml_file = tmp_path / "b.yaml"
    yaml_file.write_text("id: y1\ninstruction: do it\nchecker:\n  type: file\n  path: a.txt\n")
    assert load_tasks(yaml_file)[0].id == "y1"
    import datasets
    folder = tmp_path / "ds"
    datasets.Dataset.from_list([{"task": json.dumps({**task, "id": f"d{i}"})} for i in range(3)]).save_to_disk(str(folder))
    assert [t.id for t in load_tasks(folder)] == ["d0", "d1", "d2"]


@pytest.mark.fake
def test_json_checks_compare_as_json():
    class Home:
        def __init__(self, path):
            self.home = path

    import tempfile
    from pathlib import Path

    home = Path(tempfile.mkdtemp())
    (home / "s.json").write_text('{"flag": 1, "items": [true, 2]}')

    def passes(pointer, equals):
        check = parse_task({"id": "t", "instruction": "i", "checker": {
            "type": "json", "path": "s.json", "pointer": pointer, "equals": equals}}).checker
        return score(check, Home(home)).passed

    assert passes("/flag", 1) and not passes("/flag", True)
    assert passes("/items", [True, 2]) and not passes("/items", [1, 2])


@pytest.mark.apps
def test_a_failing_task_is_reported_and_the_run_goes_on(world, tmp_path):
    """An agent raising, an agent too slow for the time limit, a task whose app cannot start: each is that
    task's result with its error; the other tasks run and the reports are written."""
    import time as _time

    oracle = OracleAgent()

    def agent(observation, context):
        if context.task.id == "raises":
            raise KeyError("no plan for this one")
        if context.task.id == "slow":
            _time.sleep(5)
        if context.task.id == "spins":
            spun.append(1)
            try:
                while True:  # a runaway loop: it must be stopped, not left to burn a core
                    spun[0] += 1
            except Exception:  # an agent's catch-all must not swallow the stop
                pass
        if context.task.id == "naps":
            for _ in range(600):
                napped[0] += 1
                _time.sleep(0.1)
        return oracle(observation, context)

    spun: list[int] = []
    napped = [0]

    broken = parse_task({"id": "no-app", "instruction": "i", "checker": {"type": "file", "path": "x", "exists": False},
                         "start_state": {"apps": [{"command": ["false"], "timeout": 3}]}})
    raises = world.task("term-hello").model_copy(update={"id": "raises"})
    slow = world.task("term-hello").model_copy(update={"id": "slow", "time_limit": 1.0})
    spins = world.task("term-hello").model_copy(update={"id": "spins", "time_limit": 1.0})
    naps = world.task("term-hello").model_copy(update={"id": "naps", "time_limit": 1.0})
    tasks = [raises, broken, slow, spins, naps, world.task("term-hello")]
    started = _time.monotonic()
    report = World(tasks, env=world.env).run(agent, report_dir=tmp_path, progress=False)
    by_id = {r.task: r for r in report.results}
    assert "KeyError" in by_id["raises"].error and by_id["raises"].score == 0.0
    assert by_id["no-app"].error.startswith("the task did not start") and by_id["no-app"].score == 0.0
    assert "time limit" in by_id["slow"].error and by_id["slow"].score == 0.0
    for overran in ("spins", "naps"):
        assert "time limit" in by_id[overran].error and by_id[overran].score == 0.0
    spun_then, napped_then = spun[0], napped[0]
    _time.sleep(0.5)
    assert spun[0] == spun_then, "the overrunning agent is still spinning in its thread"
    assert napped[0] == napped_then and napped[0] < 50, "the overrunning agent is still napping in its thread"
    assert by_id["term-hello"].score == 1.0 and by_id["term-hello"].error is None
    assert _time.monotonic() - started < 60
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["summary"]["errors"] == 5 and data["summary"]["tasks"] == 6



@pytest.mark.fake
def test_a_task_file_readable_by_agents_is_called_out(tmp_path, capsys):

    from helpers import agent_writable_dir

    from hci_envs.tasks.world import warn_if_readable_by_agents

    shared = agent_writable_dir() / "tasks.jsonl"
    shared.write_text("{}\n")
    os.chmod(shared, 0o644)
    assert warn_if_readable_by_agents(shared)
    assert f"chmod go-r {shared}" in capsys.readouterr().err
    os.chmod(shared, 0o600)
    assert not warn_if_readable_by_agents(shared)
    from hci_envs.tasks import BUILTIN

    assert not warn_if_readable_by_agents(BUILTIN)  # the set-up command made the built-in suite private


@pytest.mark.x11
def test_a_huge_sparse_file_fails_its_check_instead_of_filling_the_servers_memory(x11):
    from hci_envs.traits import WorkstationEnv

    from hci_envs.tasks.scoring import score
    from hci_envs.tasks.spec import parse_task

    task = parse_task({"id": "t", "instruction": "x", "checker": {"type": "file", "path": "notes.txt",
                                                                   "contains": "done"}})
    with WorkstationEnv() as env:
        env.reset()
        # as the agent would (a sparse file far past what a checker reads, within the disk limit)
        env.call_tool("bash", {"command": "truncate -s 512M notes.txt; mkfifo pipe.json"})
        result = score(task.checker, env)
        assert result.value == 0.0 and "more than a checker reads" in result.details[0], result
        json_task = parse_task({"id": "j", "instruction": "x", "checker": {"type": "json", "path": "pipe.json",
                                                                          "pointer": "/a", "equals": 1}})
        result = score(json_task.checker, env)  # a named pipe: refused, not waited on
        assert result.value == 0.0 and "unreadable" in result.details[0], result


@pytest.mark.fake
def test_the_terminals_catch_up_when_the_agents_commands_have_finished(tmp_path):
    """What a checker waits for (hci_envs.desktop.quiescence), on a real shell in a real terminal (a pty):
    a command typed since the agent's first input holds it until it ends; a program that was already in the
    terminal's foreground (an editor the task opened) does not; a command that never ends is named once the
    wait runs out."""
    import shutil
    import time

    from hci_envs.desktop.quiescence import all_processes, boot_clock, descendants, wait_caught_up

    pid, master = os.forkpty()
    if pid == 0:  # the shell, with the pty as its controlling terminal
        os.chdir(tmp_path)
        os.execve(shutil.which("bash"), ["bash", "--norc", "--noprofile", "-i"], {"PATH": os.environ["PATH"],
                                                                                 "PS1": "$ ", "TERM": "dumb"})
    os.set_blocking(master, False)

    def shell_side():
        try:
            os.read(master, 65536)  # keep the pty's output from filling up
        except BlockingIOError:
            pass
        return descendants(all_processes(), [pid])

    def typed(text: str) -> None:
        os.write(master, text.encode())

    try:
        assert wait_caught_up(shell_side, boot_clock(), 5) == []  # an idle shell
        typed("cat\n")  # a program waiting for keys, there before the agent acted
        time.sleep(0.3)
        since = boot_clock()
        assert wait_caught_up(shell_side, since, 5) == []
        typed("\x04")  # ctrl+d: cat ends
        typed("sleep 1; echo done > out.txt\n")
        started = time.monotonic()
        assert wait_caught_up(shell_side, since, 10) == []
        assert (tmp_path / "out.txt").read_text() == "done\n" and time.monotonic() - started >= 0.9
        typed("sleep 30\n")
        busy = wait_caught_up(shell_side, since, 0.5)
        assert busy and "sleep" in busy[-1] and "foreground" in busy[-1], busy
    finally:
        for left in descendants(all_processes(), [pid]):  # the shell and its sleep
            os.kill(left, 9)
        os.waitpid(pid, 0)
        os.close(master)


@pytest.mark.x11
def test_a_score_waits_for_the_keys_a_stopped_terminal_has_not_read(x11):
    """The terminal is stopped while the agent types its command: the score waits until it has handled the keys
    (xterm is asked with an Expose), then for the command, instead of finding every process of the terminal
    idle (a terminal that has not read the Enter shows no command running) and scoring the episode 0."""
    import signal
    import threading

    from hci_envs.traits import WorkstationEnv

    with WorkstationEnv() as env:
        env.reset(task=next(t for t in load_tasks(BUILTIN) if t.id == "term-hello"))
        pid = env.desktop.apps()[-1][1].pid
        os.kill(pid, signal.SIGSTOP)
        threading.Timer(1.5, os.kill, (pid, signal.SIGCONT)).start()
        obs = env.step({"type": "type_text", "text": "echo hello world > hello.txt\n", "mode": "keys"})
        assert obs.error is None, obs.error
        result = env.score()
        assert result.value == 1.0, result
        # a terminal that never answers holds the score only as long as the wait, and is named
        os.kill(pid, signal.SIGSTOP)
        try:
            env.step({"type": "key", "keys": "space"})
            busy = env.catch_up(timeout=1.0)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert busy and "Expose" in busy[0], busy


@pytest.mark.x11
def test_answers_an_agent_could_read_are_made_private_or_the_start_is_refused_naming_the_fix():
    """Asked as an agent account: a readable task file becomes its owner's alone; one that cannot be changed
    (immutable here, as a file of another owner would be to a server that is not root) stops the start with the
    command that fixes it."""
    import subprocess

    from conftest import need
    from helpers import agent_writable_dir

    from hci_envs.errors import ConfigError
    from hci_envs.tasks.privacy import keep_answers_private, readable_by_agents

    need(os.geteuid() == 0, "root: the agent accounts are asked, and files changed, by a root server")
    folder = agent_writable_dir("hci-envs-answers-")
    os.chmod(folder, 0o755)
    tasks, fixed = folder / "tasks.jsonl", folder / "fixed.jsonl"
    for path in (tasks, fixed):
        path.write_text('{"id": "t", "instruction": "x", "checker": {"type": "file", "path": "a", "equals": "b"}}\n')
        os.chmod(path, 0o644)
    assert readable_by_agents([tasks, fixed, folder]) == [tasks, fixed, folder]
    assert keep_answers_private([tasks]) == [tasks]
    assert readable_by_agents([tasks]) == [] and oct(tasks.stat().st_mode & 0o777) == "0o600"
    assert keep_answers_private([tasks]) == []  # nothing left to do
    need(subprocess.run(["chattr", "+i", str(fixed)], capture_output=True).returncode == 0,
         "chattr +i on the test's folder (an ext4-like file system)")
    try:
        with pytest.raises(ConfigError, match=r"chmod -R go-rwx .*fixed\.jsonl") as refused:
            keep_answers_private([fixed])
        assert "cannot make them private" in refused.value.message
    finally:
        subprocess.run(["chattr", "-i", str(fixed)], check=True)
