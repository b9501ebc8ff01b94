"""The environment's task part (hci_envs.tasks.manager): a reset into a task keeps the caller's seed and episode
id, builds the task's world and sets it up; score runs its checker; a plain reset leaves the task. On the fake
desktop (no X), in process and through the server."""

from __future__ import annotations

import json

import pytest
from helpers import ServerProcess

from hci_envs.errors import ConfigError, EnvironmentStateError
from hci_envs.tasks import TaskSpec
from hci_envs.tasks.spec import parse_task

pytestmark = pytest.mark.fake

TASK = {"id": "make-note", "instruction": "Write ok into note.txt in the home folder.",
        "home_files": {"seed.txt": "given\n"},
        "setup": [{"tool": "bash", "arguments": {"command": "echo set > setup.txt"}}],
        "checker": {"type": "file", "path": "note.txt", "equals": "ok\n"}}
WRITE_OK = {"tool": "bash", "arguments": {"command": "echo ok > note.txt"}}


@pytest.fixture
def env():
    from hci_envs.traits import WorkstationEnv

    with WorkstationEnv(desktop="fake", start_state={"width": 320, "height": 240}) as env:
        yield env


def test_a_task_reset_keeps_the_callers_seed_and_episode_id(env):
    obs = env.reset(seed=5, episode_id="ep-1", task=TASK)
    state = env.state
    assert (state.seed, state.episode_id, state.task) == (5, "ep-1", "make-note")
    assert obs.text == TASK["instruction"] and obs.metadata["task"]["id"] == "make-note"
    # without an id of the caller's, the episode gets one of its own, not the task's name
    env.reset(seed=6, task=TASK)
    assert env.state.seed == 6 and env.state.episode_id not in (None, "ep-1", "make-note")


def test_the_tasks_world_is_built_set_up_and_scored(env):
    env.reset(task=parse_task(TASK))
    assert (env.home / "seed.txt").read_text() == "given\n"  # the task's home files
    assert (env.home / "setup.txt").read_text() == "set\n"  # its setup ran
    assert env.state.step_count == 0  # as the control plane, not as the agent's steps
    assert env.score().passed is False
    env.step(WRITE_OK)
    result = env.score()
    assert result.passed and result.value == 1.0


def test_a_plain_reset_after_a_task_is_back_in_the_own_start_state(env):
    env.reset()
    own = env.declared_state
    env.reset(task=TASK)
    assert env.declared_state.home_template is not None
    env.reset(seed=3)
    assert env.declared_state == own and env.state.task is None and env.state.seed == 3
    assert not (env.home / "seed.txt").exists()
    with pytest.raises(EnvironmentStateError, match="has no task"):
        env.score()


def test_a_task_reset_refuses_other_options_and_what_is_not_a_task(env):
    with pytest.raises(ConfigError, match="no other options"):
        env.reset(task=TASK, snapshot="x")
    with pytest.raises(ConfigError, match="must be a task spec"):
        env.reset(task=42)
    assert isinstance(parse_task(TASK), TaskSpec)


def test_the_server_passes_seed_and_episode_id_through_a_task_reset(tmp_path):
    suite = tmp_path / "tasks.jsonl"
    suite.write_text(json.dumps(TASK) + "\n")
    suite.chmod(0o600)
    with ServerProcess("--env", "workstation", "--desktop", "fake", "--tasks", str(suite)) as server, \
            server.http() as http:
        reply = http.post("/reset", json={"task": "make-note", "seed": 5, "episode_id": "trainer-7"})
        assert reply.status_code == 200, reply.text
        state = http.get("/state").json()
        assert (state["seed"], state["episode_id"], state["task"]) == (5, "trainer-7", "make-note")
        assert http.post("/score").json()["task"] == "make-note"
