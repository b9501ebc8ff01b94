"""TRL's AsyncGRPOTrainer on hci-envs desktops, as a trainer runs it: generation on a vLLM server (LoRA adapters
synced to it through a folder, which needs no GPU), rollouts in TRL's spawned worker process, where the
environment class arrives pickled and every tool result becomes a string. Runs in .venv-vllm (TRL's rollout
worker imports vLLM); the desktops are a running hci-envs server's, reached by URL. Prints one JSON document.

    python train.py SPEC.json

SPEC: model (a folder), vllm_url, server_url, control_token, name (the environment class's), tools, out (a
folder), and either tasks (a task file: a dataset of its tasks, one row each, repeated) or split (the
environment owns the data: each group of rollouts draws the split's next task); steps (default 2) and batch
(rollouts per step, default 2) for the benchmark.
"""

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cpu_stand_ins  # noqa: E402
import httpx  # noqa: E402
from peft import LoraConfig  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer  # noqa: E402

from hci_envs.trl import TrlDesktopEnv, task_dataset  # noqa: E402

STEPS, BATCH = 2, 2
#: Close to greedy: the tiny model makes the calls SFT taught it (at 1.0 about one rollout in four did, and a run
#: of four rollouts saw no reward one time in three); the test is of the pipeline, not of exploration.
TEMPERATURE = 0.2


class KeepLogs(TrainerCallback):
    def __init__(self) -> None:
        self.logs: list[dict] = []
        self.begun = 0.0
        self.step_ends: list[float] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.begun = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        self.step_ends.append(time.monotonic())

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append({k: v for k, v in (logs or {}).items() if isinstance(v, int | float | str)})


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    cpu_stand_ins.install()
    owned = "split" in spec
    Desktop = TrlDesktopEnv.configure(
        spec["name"], url=spec["server_url"], control_token=spec["control_token"], images=False,
        tools=tuple(spec["tools"]), **({"split": spec["split"], "group_size": 2} if owned else {}))
    # TRL numbers its adapters from 1 in every run and vLLM refuses a name it holds: a server kept between runs
    # gets its earlier run's adapters unloaded first (the server answers 404 for one it does not hold)
    steps, batch = spec.get("steps", STEPS), spec.get("batch", BATCH)
    for version in range(1, steps + 4):
        httpx.post(f"{spec['vllm_url']}/v1/unload_lora_adapter", json={"lora_name": f"trl-policy-v{version}"},
                   timeout=60)
    keep = KeepLogs()
    args = AsyncGRPOConfig(
        output_dir=spec["out"], max_steps=steps, per_device_train_batch_size=batch, gradient_accumulation_steps=1,
        num_generations=2, max_completion_length=384, max_tool_calling_iterations=4, learning_rate=1e-5,
        bf16=False, use_cpu=True, seed=0, report_to="none", save_strategy="no", logging_steps=1,
        temperature=TEMPERATURE,
        dataloader_num_workers=0,
        # one adapter per step on the server (which holds at most four), at most one step behind
        max_staleness=1, weight_sync_steps=1,
        vllm_server_base_url=spec["vllm_url"], vllm_server_timeout=120, request_timeout=120,
        # each step trains on exactly its batch's rollouts, as GRPOTrainer does (not on as many as fit the budget)
        token_budget=0)
    started = time.monotonic()
    trainer = AsyncGRPOTrainer(
        model=spec["model"], args=args, environment_factory=Desktop, callbacks=[keep],
        peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                               task_type="CAUSAL_LM"),
        **({} if owned else {"train_dataset": task_dataset(spec["tasks"], repeat=steps * batch)}))
    built = time.monotonic()
    trainer.train()
    ended = time.monotonic()
    marks = [keep.begun, *keep.step_ends]
    print(json.dumps({"global_step": trainer.state.global_step, "logs": keep.logs,
                      "step_seconds": [b - a for a, b in zip(marks, marks[1:])],
                      "init_seconds": built - started, "train_seconds": ended - built}), flush=True)


if __name__ == "__main__":
    main()
