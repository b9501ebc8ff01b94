"""Tasks and worlds: the built-in suite is solvable and not trivially so; reports; bad task files."""

from __future__ import annotations

import json

import pytest
from conftest import need_programs

from hci_envs.tasks import BUILTIN, NoopAgent, OracleAgent, RandomAgent, TaskFormatError, World, load_tasks


@pytest.fixture(scope="module")
def world(x11):
    need_programs("xterm", "mousepad")
    with World() as world:
        yield world


def test_the_suite_has_twelve_tasks_over_four_apps():
    tasks = load_tasks(BUILTIN)
    assert len(tasks) >= 12
    apps = {app.name for t in tasks for app in t.start_state.apps}
    assert {"form", "game", "terminal", "editor"} <= apps


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


def test_doing_nothing_scores_zero_everywhere(world):
    report = world.run(NoopAgent(), progress=False)
    assert [r.score for r in report.results] == [0.0] * len(world.tasks)


def test_a_random_agent_almost_never_succeeds(world):
    report = world.run(RandomAgent(seed=3, steps=15), progress=False)
    assert report.summary()["success_rate"] <= 1 / len(world.tasks)


def test_episodes_of_a_run_are_recorded(world, tmp_path):
    from recorders import load_episode

    recorded = World([world.task("form-contact")], env=world.env, record_dir=tmp_path)
    report = recorded.run(OracleAgent(), progress=False)
    episode = load_episode(report.results[0].episode)
    assert episode.meta["task"] == "form-contact"
    assert [a["action"]["type"] for a in episode.actions].count("type_text") == 2


def test_next_task_walks_the_tasks(world):
    other = World(BUILTIN, env=world.env)
    ids = []
    while (task := other.next_task()) is not None:
        ids.append(task.id)
    assert ids == [t.id for t in world.tasks]


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
         "relative paths inside the home"),
        ('{"id": "x", "instruction": "i", "start_state": {"width": 5}, "checker": {"type": "file", "path": "a"}}',
         "start_state.width"),
        ('{"id": "x", "instruction": "i", "surprise": 1, "checker": {"type": "file", "path": "a"}}', "surprise"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_task_files_name_the_field(tmp_path, content, message):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "ok", "instruction": "fine", "checker": {"type": "file", "path": "a"}}\n' + content + "\n")
    with pytest.raises(TaskFormatError) as info:
        load_tasks(path)
    assert f"{path}:2" in str(info.value) and message in str(info.value)


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
