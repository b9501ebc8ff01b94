"""TRL's AsyncGRPOTrainer against its GRPOTrainer on hci-envs desktops, in one run: the same tiny model (taught
the oracle's calls of the built-in task term-hello by SFT), the same task, tools, temperature and rollouts per
step, the same hci-envs server.

- GRPOTrainer, in this process: generation with transformers, rollouts one after another, then the update.
- AsyncGRPOTrainer, in .venv-vllm (tests/trl_async_peer/train.py): generation on a vLLM server (its CPU build),
  rollouts in a spawned worker while the trainer updates, weights synced to the server as LoRA adapters.

A step's time is from one step's end to the next; the first step of each is shown apart (the async trainer
spawns its worker then). Steps per second are over the steps after the first.

    .venv/bin/python bench/bench_trl_async.py [--steps 6] [--batch 4]

The model is tiny (about 100k parameters): generation costs next to nothing, so what this measures is each
trainer's own overhead per step around real desktops, not what either would gain on a real model.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from common import ROOT, Report

from helpers import ServerProcess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=4, help="rollouts per step (two per prompt)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import test_trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from hci_envs.tasks import BUILTIN, OracleAgent, World, load_tasks
    from hci_envs.trl import TrlDesktopEnv, close_all, task_dataset

    work = Path(tempfile.mkdtemp(prefix="bench-trl-async-"))
    tasks = work / "tasks.jsonl"
    chosen = [t for t in load_tasks(BUILTIN) if t.id == test_trl.TASK]
    tasks.write_text("".join(t.model_dump_json() + "\n" for t in chosen))
    print("the oracle's episode, and the tiny model taught its calls ...", flush=True)
    with World(chosen, record_dir=work / "episodes") as world:
        world.run(OracleAgent(), progress=False)
    model = test_trl.sft_model(work / "episodes", work, heads=2, kv_heads=1)
    python = test_trl.vllm_python()
    report = Report("trl_async")
    control = secrets.token_urlsafe(24)
    with ServerProcess("--tasks", str(tasks), "--max-sessions", str(args.batch + 2), "--lazy-default-session",
                       env={"HCI_ENVS_CONTROL_TOKEN": control}) as server, \
            test_trl.vllm_server(python, model, work / "vllm.log") as vllm_url:
        print(f"AsyncGRPOTrainer, {args.steps} steps of {args.batch} rollouts ...", flush=True)
        spec = {"model": str(model), "vllm_url": vllm_url, "server_url": server.base_url, "control_token": control,
                "name": "BenchAsync", "tools": list(test_trl.TOOLS), "out": str(work / "async"),
                "tasks": str(tasks), "steps": args.steps, "batch": args.batch}
        (work / "async.json").write_text(json.dumps(spec))
        peer = ROOT / "tests" / "trl_async_peer" / "train.py"
        done = subprocess.run([python, str(peer), str(work / "async.json")], capture_output=True, text=True,
                              timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"the async trainer failed: {(done.stdout + done.stderr)[-4000:]}")
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        async_steps = seen["step_seconds"]
        async_rewards = [log["rewards/BenchAsync"] for log in seen["logs"] if "rewards/BenchAsync" in log]

        print(f"GRPOTrainer, {args.steps} steps of {args.batch} rollouts ...", flush=True)

        class StepEnds(TrainerCallback):
            def __init__(self) -> None:
                self.marks: list[float] = []
                self.rewards: list[float] = []

            def on_train_begin(self, *a, **k):
                self.marks.append(time.monotonic())

            def on_step_end(self, *a, **k):
                self.marks.append(time.monotonic())

            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs and "rewards/BenchSync/mean" in logs:
                    self.rewards.append(logs["rewards/BenchSync/mean"])

        ends = StepEnds()
        Sync = TrlDesktopEnv.configure("BenchSync", url=server.base_url, control_token=control, images=False,
                                       tools=test_trl.TOOLS)
        config = GRPOConfig(
            output_dir=str(work / "sync"), max_steps=args.steps, per_device_train_batch_size=args.batch,
            num_generations=2, max_completion_length=384, max_tool_calling_iterations=4, learning_rate=1e-5,
            logging_steps=1, temperature=0.2, activation_checkpointing=False, use_cpu=True, bf16=False,
            report_to="none", save_strategy="no", seed=0, dataloader_num_workers=0)
        try:
            GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model),
                        processing_class=AutoTokenizer.from_pretrained(model), environment_factory=Sync,
                        callbacks=[ends], train_dataset=task_dataset(tasks, repeat=args.steps * args.batch),
                        args=config).train()
        finally:
            close_all()
        sync_steps = [b - a for a, b in zip(ends.marks, ends.marks[1:])]

    for name, steps, rewards in (("GRPOTrainer", sync_steps, ends.rewards),
                                 ("AsyncGRPOTrainer", async_steps, async_rewards)):
        report.add(f"{name}: first step", [steps[0] * 1000])
        report.add(f"{name}: later steps", [s * 1000 for s in steps[1:]])
        report.value(f"{name}: steps per second after the first", f"{1 / statistics.fmean(steps[1:]):.3f}")
        report.value(f"{name}: mean reward per step", [round(r, 2) for r in rewards])
    report.ratio("AsyncGRPOTrainer steps/s over GRPOTrainer's (after the first)", "GRPOTrainer: later steps",
                 "AsyncGRPOTrainer: later steps")
    report.notes["command"] = "bench/bench_trl_async.py " + " ".join(f"--{k} {v}" for k, v in vars(args).items())
    report.save()


if __name__ == "__main__":
    main()
