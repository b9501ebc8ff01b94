"""Train a model on desktop tasks with TRL's GRPOTrainer: hci-envs' environment class, no glue.

    .venv/bin/python examples/trl_environment_factory.py --model Qwen/Qwen2.5-VL-3B-Instruct
    .venv/bin/python examples/trl_environment_factory.py --model ./my-text-model --text-only --max-steps 10

Each dataset row names a task of the built-in suite (the answers stay with the server); TRL resets one desktop
per rollout into the row's task, the model's tool calls (click, type_text, key, ..., generated from the action
vocabulary) act on it, and the task's checker is the reward (``get_reward``). One local server holds every
rollout's desktop and is stopped when this process exits. Needs ``pip install 'hci-envs[trl]'``. A model without
vision gets text tool results, without screenshots (its processor takes no images); ``--text-only`` forces that.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a model id or a local folder")
    parser.add_argument("--tasks", help="a task file or folder (default: the built-in suite)")
    parser.add_argument("--task", action="append", help="only these task ids (repeatable)")
    parser.add_argument("--text-only", action="store_true",
                        help="no screenshots, whatever the model takes (default: screenshots for models with vision)")
    parser.add_argument("--tools", help="the tools offered, as action names separated by commas (default: all)")
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--generations", type=int, default=2, help="rollouts per task in a group")
    parser.add_argument("--batch", type=int, default=4, help="rollouts (desktops) at once")
    parser.add_argument("--output-dir", default="trl-out")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoProcessor
    from trl import GRPOConfig, GRPOTrainer

    from hci_envs.tasks import BUILTIN, load_tasks
    from hci_envs.trl import TrlDesktopEnv, task_dataset

    tasks = [t for t in load_tasks(args.tasks or BUILTIN) if not args.task or t.id in args.task]
    if not tasks:
        parser.error("no task matches --task")
    tools = tuple(args.tools.split(",")) if args.tools else None
    Desktop = TrlDesktopEnv.configure("Desktop", images=False if args.text_only else "auto", max_sessions=args.batch,
                                      tools=tools, tasks=args.tasks)
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(args.model),
        processing_class=AutoProcessor.from_pretrained(args.model),
        train_dataset=task_dataset(tasks, repeat=max(1, args.batch // max(1, len(tasks)))),
        environment_factory=Desktop,  # its get_reward() is the task's checker: no reward_funcs needed
        args=GRPOConfig(output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=args.batch,
                        num_generations=args.generations, max_completion_length=512, max_tool_calling_iterations=8,
                        logging_steps=1, report_to="none", save_strategy="no",
                        use_cpu=not torch.cuda.is_available(), bf16=torch.cuda.is_available()),
    )
    trainer.train()
    rewards = [log["rewards/Desktop/mean"] for log in trainer.state.log_history if "rewards/Desktop/mean" in log]
    print(f"mean reward per step: {rewards}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
