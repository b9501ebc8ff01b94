"""The command line the agent-loop examples share (claude_computer_use.py, openai_computer_use.py): the model and
the task, the session the task runs in (a server started here, or one at ``--url``), and the task's reward at the
end. Not an example of its own: each example's loop is in its own file.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hci_envs import HciEnvClient
from hci_envs.errors import HciEnvsError


@dataclass
class Outcome:
    """What a loop did: the task's score (``env.score()``: task, score, success, details), how many model turns
    it took, and why it stopped before the model finished (None: the model finished, asking for no more actions)."""

    score: dict[str, Any]
    turns: int
    stopped: str | None = None


def task_parser(doc: str, model_variable: str) -> argparse.ArgumentParser:
    """The options every loop takes; ``model_variable`` is the environment variable naming the default model."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--model", default=os.environ.get(model_variable),
                        help=f"the model to run (default: ${model_variable})")
    parser.add_argument("--task", default="edit-append", help="a task of the server's suite, by id (default: "
                        "edit-append, the built-in suite's editor task)")
    parser.add_argument("--url", help="run on the hci-envs server at this URL (default: start one here, stopped "
                        "at the end)")
    parser.add_argument("--control-token", default=os.environ.get("HCI_ENVS_CONTROL_TOKEN"),
                        help="the --url server's control token, for the reset and the score (default: "
                        "$HCI_ENVS_CONTROL_TOKEN)")
    parser.add_argument("--tasks", help="the suite of the server started here: a task file or folder (default: the "
                        "built-in suite, hci_envs/tasks/builtin.jsonl)")
    parser.add_argument("--max-steps", type=int, default=30, help="the model's turns at most (default: 30)")
    parser.set_defaults(model_variable=model_variable)
    return parser


def parse_task_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The command line, checked before anything starts."""
    args = parser.parse_args(argv)
    if not args.model:
        parser.error(f"name the model: --model MODEL, or set {args.model_variable}")
    if args.url and args.tasks:
        parser.error("--tasks is the suite of a server started here; the server at --url has its own (serve --tasks)")
    if args.max_steps < 1:
        parser.error("--max-steps must be at least 1")
    return args


def run_loop(args: argparse.Namespace, loop: Callable[[HciEnvClient], Outcome],
             api_errors: tuple[type[BaseException], ...]) -> int:
    """Open the session, run ``loop`` on it and print the reward. Exits 0 once the model finished (whatever the
    reward), 1 when the loop was stopped first or could not run (an error of the model's API in
    ``api_errors``, or of hci-envs: both are printed as they were raised)."""
    try:
        session = HciEnvClient(args.url, control_token=args.control_token) if args.url \
            else HciEnvClient.from_local("workstation", tasks=args.tasks)  # the environment the suite runs in
        with session as env:
            outcome = loop(env)
    except api_errors as exc:
        print(f"error: the model's API: {exc}", file=sys.stderr)
        return 1
    except HciEnvsError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    score = outcome.score
    print(f"reward: {score['score']} (task {score['task']}, {'success' if score['success'] else 'not solved'}; "
          f"{'; '.join(score.get('details') or [])}) after {outcome.turns} model turns")
    if outcome.stopped:
        print(f"stopped: {outcome.stopped}")
        return 1
    return 0
