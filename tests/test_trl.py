"""TRL with no glue: episodes become SFT data, and GRPOTrainer drives desktops through the shipped class.

The whole loop runs for real: the oracle solves a built-in task while the recorder writes its episode;
``hci-envs export --format sft`` turns it into a chat dataset of tool calls; TRL's SFTTrainer teaches a tiny model
built here (no Hub) to make those calls; then TRL's GRPOTrainer trains it for two steps with
``environment_factory=TrlDesktopEnv``: the model's tool calls act on real desktops and the task's checker,
run on the server, is the reward.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import need, need_programs
from helpers import ServerProcess, free_port

TASK = "term-hello"


def need_trl() -> None:
    try:
        import transformers  # noqa: F401
        import trl  # noqa: F401
    except ImportError as exc:
        need(False, f"TRL ({exc}); pip install 'hci-envs[trl]'")


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The oracle's episode of one built-in task, recorded by the World."""
    from conftest import need_programs

    from hci_envs.tasks import BUILTIN, OracleAgent, World, load_tasks

    need_programs("Xvfb", "xterm")
    out = tmp_path_factory.mktemp("episodes")
    tasks = [t for t in load_tasks(BUILTIN) if t.id == TASK]
    with World(tasks, record_dir=out) as world:
        report = world.run(OracleAgent(), progress=False)
    assert report.results[0].success, report.results[0]
    return out


def export(episodes: Path, out: Path, *extra: str) -> object:
    import datasets

    cli = Path(sys.executable).parent / "hci-envs"
    done = subprocess.run([str(cli), "export", str(episodes), "--format", "sft", "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "wrote 1 conversations" in done.stdout
    return datasets.Dataset.from_parquet(str(out))


@pytest.mark.x11
def test_episodes_export_as_chat_data_with_tool_calls_and_screens(episodes, tmp_path):
    need_trl()
    from hci_envs.recorders import load_episode
    from hci_envs.tasks import BUILTIN, load_tasks
    from hci_envs.trl import tool_schemas

    episode = load_episode(next(episodes.iterdir()))
    instruction = next(t.instruction for t in load_tasks(BUILTIN) if t.id == TASK)
    data = export(episodes, tmp_path / "sft.parquet")
    row = data[0]
    messages = row["messages"]
    assert messages[0]["role"] == "user" and messages[0]["content"][0] == {"type": "text", "text": instruction}
    calls = [m["tool_calls"][0]["function"] for m in messages if m["role"] == "assistant"]
    assert calls == [{"name": a["action"]["type"], "arguments": {k: v for k, v in a["action"].items() if k != "type"}}
                     for a in episode.actions]
    assert [m["name"] for m in messages if m["role"] == "tool"] == [c["name"] for c in calls]
    blocks = sum(1 for m in messages if isinstance(m["content"], list) for b in m["content"] if b["type"] == "image")
    assert blocks == len(row["images"]) >= 2 and row["images"][0].size == (1280, 800)
    assert json.loads(row["tools"]) == tool_schemas()

    text_only = export(episodes, tmp_path / "text.parquet", "--images", "none")[0]
    assert "images" not in text_only and all(isinstance(m["content"], str) for m in text_only["messages"])


#: The oracle's actions: a short prompt keeps the tiny model's training short.
TOOLS = ("type_text", "wait")


def sft_model(episodes: Path, tmp_path: Path, **shape: int) -> Path:
    """The oracle's episode as text-only chat data (the tiny model has no vision), and a tiny model built on it
    and taught by SFT to make the oracle's tool calls: ``tmp_path / "sft-model"``. ``shape``: tiny_lm.build's."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import tiny_lm
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    sft = export(episodes, tmp_path / "sft.parquet", "--images", "none", "--tools", ",".join(TOOLS))
    sft = sft.remove_columns("episode")
    model_dir = tiny_lm.build(tmp_path / "model", list(sft), **shape)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    sft_trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir), processing_class=tokenizer,
        train_dataset=sft.select([0] * 8),
        args=SFTConfig(output_dir=str(tmp_path / "sft"), max_steps=120, learning_rate=5e-3,
                       per_device_train_batch_size=8, logging_steps=50, max_length=4096, use_cpu=True, bf16=False,
                       report_to="none", save_strategy="no", seed=0, dataloader_num_workers=0))
    sft_trainer.train()
    sft_trainer.save_model(str(tmp_path / "sft-model"))
    tokenizer.save_pretrained(tmp_path / "sft-model")
    return tmp_path / "sft-model"


@pytest.mark.x11
# a hang guard sized for the work on a busy machine: an SFT warm-up of 120 steps and two GRPO runs on four desktops,
# all on the CPU (beside two more test runs the SFT alone took 260 s of the default guard's 300)
@pytest.mark.timeout(1200)
def test_grpo_trains_on_desktops_through_the_shipped_environment(episodes, tmp_path):
    need_trl()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from hci_envs.trl import TrlDesktopEnv, close_all, task_dataset

    # 1-2. the oracle's episode as text-only chat data, and the tiny model taught by SFT to make its tool calls
    sft_model(episodes, tmp_path)
    common = dict(use_cpu=True, bf16=False, report_to="none", save_strategy="no", seed=0, dataloader_num_workers=0)
    tools = TOOLS

    # 3. GRPO on desktops: the shipped class, its tools, its reward (the task's checker)
    class KeepLogs(TrainerCallback):
        logs: list[dict] = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.append(dict(logs or {}))

    def train(factory: type, **dataset: object) -> tuple[GRPOTrainer, list[dict]]:
        """Two GRPO steps of the SFT model on ``factory``'s desktops; the steps' logs."""
        keep = KeepLogs()
        keep.logs = []
        try:
            trainer = GRPOTrainer(
                model=AutoModelForCausalLM.from_pretrained(tmp_path / "sft-model"),
                processing_class=AutoTokenizer.from_pretrained(tmp_path / "sft-model"),
                environment_factory=factory, callbacks=[keep], **dataset,
                args=GRPOConfig(output_dir=str(tmp_path / factory.__name__), max_steps=2,
                                per_device_train_batch_size=4, num_generations=2, max_completion_length=384,
                                max_tool_calling_iterations=4, learning_rate=1e-5, logging_steps=1,
                                activation_checkpointing=False, **common),
            )
            trainer.train()
        finally:
            close_all()
        assert trainer.state.global_step == 2
        steps = [log for log in keep.logs if f"rewards/{factory.__name__}/mean" in log]
        assert len(steps) == 2, keep.logs
        assert all(log["tools/call_frequency"] > 0 for log in steps), steps  # the model's calls ran on desktops
        # and the checker (the row's task, or the one the environment drew) saw their effect
        assert max(log[f"rewards/{factory.__name__}/mean"] for log in steps) > 0, steps
        return trainer, steps

    # images left to "auto": the tiny model's tokenizer takes none, so the class gives it text (as the README says)
    Desktop = TrlDesktopEnv.configure("Desktop", max_sessions=4, tools=tools)
    _, steps = train(Desktop, train_dataset=task_dataset(tasks=[t for t in _tasks() if t.id == TASK], repeat=4))
    assert any(log["loss"] != 0 for log in steps), steps  # rewards differed within a group: a real gradient

    # 4. the environment owns the data (no train_dataset): each group's prompt is the next task of a split of the
    # server's task API, the group as large as the trainer's num_generations
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(t.model_dump_json() + "\n" for t in _tasks() if t.id == TASK))
    train(TrlDesktopEnv.configure("Owned", max_sessions=4, tools=tools, tasks=str(tasks), split="all"))


ASYNC_PEER = Path(__file__).parent / "trl_async_peer" / "train.py"


def vllm_python() -> str:
    path = os.environ.get("HCI_ENVS_VLLM_PYTHON") or str(Path(__file__).parent.parent / ".venv-vllm" / "bin" / "python")
    need(os.access(path, os.X_OK), f"vLLM's environment ({path}): python3 -m hci_envs install --test makes it")
    return path


@contextmanager
def vllm_server(python: str, model: Path, log_path: Path) -> Iterator[str]:
    """vLLM's OpenAI server on ``model``, on CPU, with runtime LoRA adapters (how TRL's async trainer syncs
    weights without a GPU) and its development routes (the trainer pauses and resumes generation around a sync)."""
    import httpx

    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1",
           "VLLM_CPU_KVCACHE_SPACE": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
             "--port", str(port), "--dtype", "float32", "--max-model-len", "4096", "--enable-lora",
             "--max-lora-rank", "8", "--max-loras", "4"], stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, f"vLLM's server exited {proc.returncode}: {log_path.read_text()[-3000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"vLLM's server did not start: {log_path.read_text()[-3000:]}"
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.mark.vllm
# a hang guard sized for the work on a busy machine: an SFT warm-up, a vLLM server and two training runs, all on the
# CPU (about 110 s alone, past 300 s beside a second test run); each run's own limit below bounds it too
@pytest.mark.timeout(2100)
def test_async_grpo_trains_on_desktops_from_a_dataset_and_from_tasks_the_environment_draws(episodes, tmp_path):
    """TRL's AsyncGRPOTrainer, unchanged: the model generates on a vLLM server, rollouts run in the trainer's
    spawned worker with the configured class as it pickled, tool results reach the model as strings (the text
    view), and the task's checker is the reward; once with a dataset of tasks, once with none (each group's task
    drawn from the server's task API). Every session the worker opened is closed when it ends."""
    import secrets

    import httpx

    need_trl()
    python = vllm_python()
    model = sft_model(episodes, tmp_path, heads=2, kv_heads=1)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(t.model_dump_json() + "\n" for t in _tasks() if t.id == TASK))
    control = secrets.token_urlsafe(24)
    with ServerProcess("--tasks", str(tasks), "--max-sessions", "6", "--lazy-default-session",
                       env={"HCI_ENVS_CONTROL_TOKEN": control}) as server, \
            vllm_server(python, model, tmp_path / "vllm.log") as vllm_url:
        for name, data in (("AsyncFromDataset", {"tasks": str(tasks)}), ("AsyncOwned", {"split": "all"})):
            spec = {"model": str(model), "vllm_url": vllm_url, "server_url": server.base_url,
                    "control_token": control, "name": name, "tools": list(TOOLS), "out": str(tmp_path / name),
                    **data}
            (tmp_path / f"{name}.json").write_text(json.dumps(spec))
            done = subprocess.run([python, str(ASYNC_PEER), str(tmp_path / f"{name}.json")], capture_output=True,
                                  text=True, timeout=900, env={**os.environ, "HCI_ENVS_STRICT": ""})
            assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
            seen = json.loads(done.stdout.strip().splitlines()[-1])
            assert seen["global_step"] == 2, seen
            # the async trainer logs each step's means without a "/mean" (the class's reward column is its name)
            steps = [log for log in seen["logs"] if f"rewards/{name}" in log]
            assert len(steps) == 2, seen["logs"]
            assert all(log.get("tools/call_frequency", 0) > 0 for log in steps), steps  # the calls ran on desktops
            assert max(log[f"rewards/{name}"] for log in steps) > 0, steps  # and the checker saw their effect
            with httpx.Client(base_url=server.base_url, headers={"authorization": f"Bearer {control}"}) as http:
                assert [s["session_id"] for s in http.get("/sessions").json()] == ["default"], name


def _tasks() -> list:
    from hci_envs.tasks import BUILTIN, load_tasks

    return load_tasks(BUILTIN)



@pytest.mark.x11
def test_a_model_without_vision_sees_the_screen_as_the_accessibility_tree(x11):
    """images=False: every result carries the accessibility tree's outline (text_view, on by default), with the
    elements numbered as element= takes them; a GTK editor's text area is among them, and what was typed shows
    in it; text_view="none" gives the bare results."""
    need_trl()
    need_programs("mousepad")
    from hci_envs.errors import ConfigError
    from hci_envs.trl import TEXT_VIEW_NODES, TrlDesktopEnv, close_all

    Seeing = TrlDesktopEnv.configure("SeeingText", images=False, apps=["mousepad"], max_sessions=1)
    Bare = TrlDesktopEnv.configure("BareText", images=False, apps=["mousepad"], max_sessions=1, text_view="none")
    try:
        env = Seeing()
        first = env.reset(instruction="write")
        assert isinstance(first, str) and "accessibility tree:" in first and "mousepad" in first.lower()
        assert 0 < len(re.findall(r"^\s*\[\d+\] ", first, re.MULTILINE)) <= TEXT_VIEW_NODES
        typed = env.type_text(text="héllo tree")
        assert typed.startswith("typed") and "héllo tree" in typed, typed
        bare = Bare()
        assert "accessibility tree" not in (bare.reset(instruction="write") or "")
        assert "accessibility tree" not in bare.type_text(text="x")
    finally:
        close_all()
    with pytest.raises(ConfigError, match="text_view"):
        TrlDesktopEnv.configure(text_view="marks")


@pytest.mark.x11
def test_the_environment_class_without_a_trainer(x11):
    """What TRL calls, called directly: typed tools generated from the vocabulary, image blocks, errors that
    raise (TRL counts them as failed calls), the checker as reward, async tools, and the multi-environment dict."""
    need_trl()
    import asyncio
    import inspect

    from transformers.utils import get_json_schema

    from hci_envs.actions import ACTIONS
    from hci_envs.errors import InvalidActionError
    from hci_envs.trl import DEFAULT_TOOLS, AsyncTrlDesktopEnv, TrlDesktopEnv, close_all, environment_factories

    tools = [n for n, _ in inspect.getmembers(TrlDesktopEnv, predicate=inspect.isfunction)
             if not n.startswith("_") and n not in ("reset", "get_reward")]
    assert sorted(tools) == sorted(DEFAULT_TOOLS) and set(tools) <= set(ACTIONS)
    click = get_json_schema(TrlDesktopEnv.click)["function"]
    assert click["parameters"]["properties"]["button"]["enum"] == ["left", "right", "middle"]
    assert "x" not in click["parameters"].get("required", []) and click["description"].startswith("Click")

    Small = TrlDesktopEnv.configure("Small", max_sessions=2, size=(800, 600))  # a task brings its own size
    try:
        env = Small()
        first = env.reset(task=TASK)  # no prompt in the row: the instruction comes with the screen
        assert first[0]["type"] == "text" and "hello.txt" in first[0]["text"]
        assert first[-1]["type"] == "image" and first[-1]["image"].size == (1280, 800)
        assert env.reset(task=TASK, prompt=[{"role": "user", "content": "x"}])[0]["type"] == "image"
        assert env.get_reward() == 0.0
        with pytest.raises(InvalidActionError, match="x"):
            env.click(x=5000, y=10)
        # the last call types a command that takes a second: the reward, asked once right after the call, is
        # the finished episode's (the checker waits for the shell, not only for a quiet screen)
        answer = env.type_text(text=SLOW_HELLO)
        assert answer[0]["text"].startswith("typed") and answer[1]["image"].size == (1280, 800)
        assert env.get_reward() == 1.0
        plain = env.reset(instruction="anything")  # no task: the configured desktop, and no reward (TRL skips it)
        assert plain[0]["text"] == "anything" and plain[-1]["image"].size == (800, 600)
        assert env.get_reward() is None

        async_env = AsyncTrlDesktopEnv.configure("AsyncSmall", images=False, max_sessions=2)()
        async_env.reset(task=TASK)
        assert inspect.iscoroutinefunction(type(async_env).type_text)
        assert asyncio.run(async_env.type_text(text=SLOW_HELLO)).startswith("typed")
        assert inspect.iscoroutinefunction(type(async_env).get_reward)  # both trainers await it
        assert asyncio.run(async_env.get_reward()) == 1.0

        factories = environment_factories(terminal={"tools": ("type_text", "key")}, editor={"apps": ["mousepad"]})
        assert set(factories) == {"terminal", "editor"} and factories["terminal"] is not factories["editor"]
        assert factories["terminal"].type_text is not None and factories["terminal"].click is None
        assert factories["editor"].config["apps"] == ["mousepad"]
    finally:
        close_all()


#: The task's command, slowed down: it writes the file a second after the screen shows it typed.
SLOW_HELLO = "sleep 1; echo hello world > hello.txt\n"


@pytest.mark.fake
def test_async_calls_of_a_rollout_run_in_the_order_trl_made_them():
    """TRL gathers a rollout's async tool calls (asyncio.gather over the coroutines, in the order the model
    made them): each clipboard_get sees the clipboard_set just before it."""
    import asyncio

    from hci_envs.trl import AsyncTrlDesktopEnv, close_all

    Ordered = AsyncTrlDesktopEnv.configure("Ordered", images=False, max_sessions=1, desktop="fake")
    try:
        env = Ordered()
        env.reset(instruction="anything")

        async def rollout() -> list:
            calls = []
            for n in range(12):
                calls += [env.clipboard_set(text=f"text {n}"), env.clipboard_get()]
            return await asyncio.gather(*calls)

        for _ in range(3):
            results = asyncio.run(rollout())
            assert results[1::2] == [f"text {n}" for n in range(12)], results
    finally:
        close_all()


#: A trainer's spawned worker, as far as the environment sees it: a fresh interpreter that unpickles the factories,
#: makes an instance of each and runs a rollout's first calls.
WORKER_SCRIPT = """
import json, pickle, sys
from hci_envs.trl import close_all
factories = pickle.load(sys.stdin.buffer)
seen = {}
try:
    for key, factory in factories.items():
        env = factory()
        first = env.reset(instruction="type something")
        seen[key] = {"name": factory.__name__, "config": factory.config, "first": first,
                     "typed": env.type_text(text="hi"), "has_click": factory.click is not None,
                     "mcp_url": env.mcp_url}
finally:
    close_all()
print(json.dumps(seen))
"""


@pytest.mark.fake
def test_configured_variants_have_their_own_names_and_reach_a_spawned_worker_as_they_are():
    import pickle

    from hci_envs.errors import ConfigError
    from hci_envs.trl import AsyncTrlDesktopEnv, TrlDesktopEnv, environment_factories

    Text = TrlDesktopEnv.configure(images=False, apps=["/usr/bin/xterm -geometry 80x24"], desktop="fake")
    assert Text.__name__ == "TrlDesktopEnv_workstation_xterm_text"  # TRL's reward column, not "TrlDesktopEnv"
    assert TrlDesktopEnv.configure(images=False, apps=["/usr/bin/xterm -geometry 80x24"], desktop="fake") is Text
    assert TrlDesktopEnv.configure(env="my_envs.py:Editor", apps=[{"command": ["/usr/bin/mousepad", "a.txt"]}],
                                   desktop="fake").__name__ == "TrlDesktopEnv_my_envs_py_Editor_mousepad"
    assert pickle.loads(pickle.dumps(Text)) is Text and pickle.loads(pickle.dumps(TrlDesktopEnv)) is TrlDesktopEnv
    with pytest.raises(ConfigError, match="images"):
        TrlDesktopEnv.configure(images="yes")
    both = TrlDesktopEnv.configure(serve={"tasks": "apps", "size": (800, 600)}, desktop="fake").config["serve"]
    assert both == {"tasks": "apps", "size": (800, 600), "desktop": "fake"}
    Again = pickle.loads(pickle.dumps(AsyncTrlDesktopEnv.configure("Again", tools=("key",), desktop="fake")))
    assert Again.__name__ == "Again" and issubclass(Again, AsyncTrlDesktopEnv) and Again.click is None

    factories = {**environment_factories(terminal={"tools": ("type_text", "key"), "images": False,
                                                   "desktop": "fake", "max_sessions": 1}),
                 "text": Text.configure("Smaller", max_sessions=1)}
    worker = subprocess.run([sys.executable, "-c", WORKER_SCRIPT], input=pickle.dumps(factories),
                            capture_output=True, timeout=240)
    assert worker.returncode == 0, worker.stderr.decode(errors="replace")[-3000:]
    seen = json.loads(worker.stdout.decode().strip().splitlines()[-1])
    assert seen["terminal"]["name"] == "TrlDesktopEnv_terminal" and not seen["terminal"]["has_click"]
    assert seen["text"]["name"] == "Smaller" and seen["text"]["has_click"]
    assert seen["text"]["config"]["apps"] == ["/usr/bin/xterm -geometry 80x24"]
    assert seen["text"]["config"]["max_sessions"] == 1 and seen["text"]["config"]["serve"] == {"desktop": "fake"}
    for got in seen.values():
        assert got["first"].strip() == "type something" and got["typed"].startswith("typed")
        assert got["mcp_url"] and got["mcp_url"].startswith("http://127.0.0.1:")
    # each desktop said where it is, once
    printed = worker.stderr.decode(errors="replace")
    assert printed.count("tools (MCP): http://127.0.0.1:") == 2, printed[-3000:]


@pytest.mark.fake
def test_a_rollout_left_unfinished_is_reclaimed_at_the_idle_deadline_and_the_instance_goes_on():
    """TRL never closes an environment: a rollout cut off mid-episode (or a trainer slower than the deadline
    between batches) leaves a session that only the server's idle deadline ends. The instance's next reset
    then starts on a new session instead of failing for good."""
    import httpx

    from hci_envs.trl import TrlDesktopEnv, _server, close_all

    Idle = TrlDesktopEnv.configure("Idle", images=False, desktop="fake", max_sessions=2, idle_timeout=1.0)
    try:
        env = Idle()
        env.reset(instruction="type something")
        env.type_text(text="half a rollout")
        server = _server(Idle.config)
        control = {"Authorization": f"Bearer {server.control_token}"}

        def sessions() -> list[str]:
            return [s["session_id"] for s in httpx.get(f"{server.url}/sessions", headers=control).json()
                    if s["kind"] != "default"]

        first = sessions()
        assert len(first) == 1 and first[0] in env.mcp_url
        deadline = time.monotonic() + 60
        while sessions() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sessions() == []  # reclaimed: no desktop leaked
        assert env.reset(instruction="again").strip() == "again"
        assert env.type_text(text="a whole rollout").startswith("typed")
        assert len(sessions()) == 1 and sessions() != first and sessions()[0] in env.mcp_url
    finally:
        close_all()


@pytest.mark.fake
def test_the_environment_can_own_the_data_drawing_each_group_a_task_of_a_split(tmp_path):
    """TRL's dataset-less mode: every row is an empty placeholder prompt, and ``reset()`` gives the prompt. With
    ``split`` configured, each group of rollouts (``group_size``, else the trainer's num_generations) gets the
    split's next task, in turn; rows that name a split and index get that task."""
    from hci_envs.errors import ConfigError, TaskNotFoundError
    from hci_envs.trl import TrlDesktopEnv, close_all

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{n}", "instruction": f"Write {n} into answer.txt.",
                                         "checker": {"type": "file", "path": "answer.txt", "equals": f"{n}\n"}})
                             + "\n" for n in range(3)))
    placeholder = {"prompt": [{"role": "user", "content": ""}]}  # what TRL passes without a dataset
    Owned = TrlDesktopEnv.configure("Owned", images=False, desktop="fake", max_sessions=2, tasks=str(tasks),
                                    split="all", group_size=2)
    try:
        first, second = Owned(), Owned()
        prompts = [env.reset(**placeholder) for env in (first, second) * 4]
        assert prompts == [f"Write {n} into answer.txt." for n in (0, 0, 1, 1, 2, 2, 0, 0)]
        assert first.get_reward() == 0.0  # scored as the task drawn, on the server
        # a dataset built from the task API: rows name a split and an index (and a prompt that says it all)
        named = first.reset(split="all", index=2, prompt=[{"role": "user", "content": "Write 2 into answer.txt."}])
        assert named is None and first._task == "t2"
        with pytest.raises(TaskNotFoundError, match="no split named 'train'"):
            TrlDesktopEnv.configure("Wrong", images=False, desktop="fake", tasks=str(tasks), split="train")() \
                .reset(**placeholder)
        with pytest.raises(ConfigError, match="group_size"):
            TrlDesktopEnv.configure(group_size=0)
    finally:
        close_all()


EXIT_SCRIPT = """
import faulthandler, json, os, signal, sys, time
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks where it is stuck, if it is
from hci_envs.trl import TrlDesktopEnv, _servers
Desktop = TrlDesktopEnv.configure("Exiting", images=False, max_sessions=1, apps=["xterm"])
env = Desktop()
env.reset(instruction="anything")
env.type_text(text="sleep 600 &\\n")
server = next(iter(_servers.values())).provider.proc.pid
tree, changed = {server}, True
while changed:  # the server and everything below it: its desktop, the agent's xterm, shell and sleep
    changed = False
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in tree:
            try:
                ppid = int(open(f"/proc/{entry}/stat").read().rpartition(")")[2].split()[1])
            except OSError:
                continue
            if ppid in tree:
                tree.add(int(entry))
                changed = True
print(json.dumps(sorted(tree)), flush=True)
if sys.argv[1] == "exit":
    sys.exit(0)  # never closed: TRL closes nothing
time.sleep(600)  # ended by SIGTERM
"""


def _stuck(proc: subprocess.Popen) -> str:
    """What a process that does not end is doing: each thread's kernel state and wait channel, and its Python
    stacks (faulthandler, registered on SIGUSR1 by the script); the process is killed after."""
    threads = []
    for tid in sorted(os.listdir(f"/proc/{proc.pid}/task")):
        try:
            stat = open(f"/proc/{proc.pid}/task/{tid}/stat").read().rpartition(")")[2].split()[0]
            wchan = open(f"/proc/{proc.pid}/task/{tid}/wchan").read()
            name = open(f"/proc/{proc.pid}/task/{tid}/comm").read().strip()
        except OSError:
            continue
        threads.append(f"thread {tid} {name}: state {stat}, waiting in {wchan or '-'}")
    proc.send_signal(signal.SIGUSR1)
    time.sleep(1.0)
    proc.kill()
    return "\n".join(threads) + "\n" + proc.stderr.read()


@pytest.mark.x11
@pytest.mark.parametrize("ending", ["exit", "sigterm"])
def test_a_process_that_never_closes_its_environments_leaves_no_server_behind(x11, ending):
    """TRL never closes environments: a training process that exits (or is ended with SIGTERM) with its
    TrlDesktopEnv open leaves no server, desktop or agent process behind."""
    from helpers import wait_until

    from hci_envs.env.env_checker import process_alive

    proc = subprocess.Popen([sys.executable, "-c", EXIT_SCRIPT, ending], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        tree = json.loads(line)
        assert len(tree) >= 4, tree  # the server, Xvfb, the window manager, the agent's xterm...
        if ending == "sigterm":
            proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the process did not end within 60 s; where it was:\n{_stuck(proc)}")
        assert status in (0, -signal.SIGTERM), proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert wait_until(lambda: not any(process_alive(pid) for pid in tree), 10), \
        [pid for pid in tree if process_alive(pid)]
