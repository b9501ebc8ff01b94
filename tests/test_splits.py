"""hci_envs.tasks.splits: the server's tasks as OpenEnv's task API shows them."""

import pytest

from hci_envs.errors import ConfigError, TaskNotFoundError
from hci_envs.tasks.catalog import APPS_SUITE, TaskSuite
from hci_envs.tasks.splits import LISTING_LIMIT, TRAIN_SEEDS

pytestmark = pytest.mark.fake


@pytest.fixture(scope="module")
def apps() -> TaskSuite:
    return TaskSuite(APPS_SUITE)


def test_the_suite_has_train_at_fresh_seeds_test_at_its_own_and_a_split_per_app(apps):
    splits = apps.splits()
    listed = {s.name: s for s in splits.splits()}
    templates = sorted({t.template for t in apps.tasks().values()})
    assert [s.name for s in splits.splits()][:3] == ["train", "test", "all"]
    assert listed["train"].type == "train" and listed["test"].type == "test"
    assert listed["train"].size == len(templates) * len(TRAIN_SEEDS)
    assert listed["test"].size == listed["all"].size == len(apps.tasks())
    assert sum(s.size for name, s in listed.items() if name.startswith("app:")) == len(apps.tasks())
    # every template in turn, then the next seed; never a seed of the test split
    first = [splits.task_id("train", n) for n in range(len(templates) + 1)]
    assert sorted(i.rsplit(".", 1)[0] for i in first[:-1]) == templates
    assert {int(i.rsplit(".", 1)[1]) for i in first[:-1]} == {TRAIN_SEEDS[0]}
    assert first[-1].endswith(f".{TRAIN_SEEDS[1]}")
    test_seeds = {t.seed for t in apps.tasks().values()}
    assert not test_seeds & {TRAIN_SEEDS[0], TRAIN_SEEDS[-1]} and max(test_seeds) < TRAIN_SEEDS[0]
    # the last training task exists too, and resets resolve what the split names
    last = splits.task_id("train", listed["train"].size - 1)
    assert apps.from_split("train", listed["train"].size - 1).id == last
    assert apps.from_split("app:calc", 0).app == "calc"


def test_a_split_shows_what_the_agent_may_read_never_the_answers(apps):
    splits = apps.splits()
    task = splits.task("train", 5)
    assert set(task) <= {"id", "split", "index", "instruction", "app", "template", "seed", "max_steps",
                         "time_limit", "tags"}
    assert task["index"] == 5 and task["split"] == "train" and task["instruction"]
    listing = splits.tasks("test", start=-3)
    assert [t["index"] for t in listing] == [len(apps.tasks()) - 3 + n for n in range(3)]
    assert len(splits.tasks("train", start=10, stop=10 + LISTING_LIMIT + 50)) == LISTING_LIMIT
    assert splits.tasks("test", start=5, stop=2) == []


def test_bad_splits_and_positions_are_clear_errors(apps):
    splits = apps.splits()
    with pytest.raises(TaskNotFoundError, match="no split named 'nope'; the splits are train, test, all"):
        splits.count("nope")
    for bad in (-1, len(apps.tasks()), "3", 2.0, True, None):
        with pytest.raises(ConfigError, match="index"):
            splits.task_id("test", bad)
    with pytest.raises(ConfigError, match="start"):
        splits.tasks("test", start="0")


def test_a_task_file_has_all_and_a_split_per_app_only(tmp_path):
    import json

    rows = [{"id": f"t{n}", "instruction": "do it", "checker": {"type": "file", "path": "x"},
             **({"app": "editor"} if n % 2 else {})} for n in range(4)]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    suite = TaskSuite(path)
    assert [(s.name, s.size) for s in suite.splits().splits()] == [("all", 4), ("app:editor", 2)]
    assert suite.splits().task_id("app:editor", 1) == "t3"
    with pytest.raises(TaskNotFoundError, match="train"):
        suite.splits().count("train")
