"""An OpenAI model on a desktop task: the official openai SDK's Responses API with the released computer tool.

    export OPENAI_API_KEY=...        # the SDK reads its key and OPENAI_BASE_URL from the environment
    .venv/bin/python examples/openai_computer_use.py --model MODEL                 # the suite's editor task
    .venv/bin/python examples/openai_computer_use.py --model MODEL --task term-hello --acknowledge-safety-checks

The task's desktop is an hci-envs session (a server started here with the built-in suite, or the one at --url);
``env.reset(task=...)`` builds its world and gives its instruction, the first input. The tool is declared bare
(``{"type": "computer"}``); each ``computer_call`` in a response carries a batch of ``actions``, which
``run_computer_call`` runs as one step of the session, stopping at the first that fails, and answers with a
``computer_call_output`` holding the screenshot taken after them (and, after a failure, a message saying which
action failed and which did not run). The next request continues the stored response with
``previous_response_id`` and sends only those answers, as the SDK documents for multi-turn conversations. The
loop runs until a response has no computer_call (or --max-steps responses), then prints the task's reward
(``env.score()``, the checker run on the server). Needs ``pip install 'hci-envs[openai]'``.

Pending safety checks are shown, and acknowledged only with --acknowledge-safety-checks: without it, the call's
actions do not run and the episode ends there.

Why a loop of our own and not the SDK's ``openai.lib.computer.ComputerToolset.run``: that runner calls a driver
once per action and, when an action fails, raises out of the run, so the model is never told; here a batch is one
step of the session and a failure is the model's to read. Its history (the whole input sent again each turn) is
for when responses are not stored.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import openai
from agent_cli import Outcome, parse_task_args, run_loop, task_parser

from hci_envs import HciEnvClient
from hci_envs.adapters.openai_computer import SafetyChecksPending, computer_tool, run_computer_call


def run_task(client: openai.OpenAI, env: HciEnvClient, task: str | dict[str, Any], *, model: str,
             max_steps: int = 30, acknowledge: bool = False, say: Callable[[str], None] = print) -> Outcome:
    request: dict[str, Any] = {"input": env.reset(task=task).observation.text}  # the instruction; answers stay put
    scale = None  # of the last screenshot sent: the model's coordinates are its pixels
    try:
        for turn in range(1, max_steps + 1):
            response = client.responses.create(model=model, tools=[computer_tool()], **request)
            request = {"previous_response_id": response.id, "input": []}  # the next turn sends only the answers
            for call in [item for item in show(response, say) if item.type == "computer_call"]:
                result = run_computer_call(call, env.step, scale=scale, acknowledge=checker(acknowledge, say))
                if result.output is None:  # the desktop went away under the batch: no screen to answer with
                    return Outcome(env.score(), turn, f"the episode ended: {result.observation.truncated_reason}")
                scale, request["input"] = result.scale, [*request["input"], *result.items]
            if not request["input"]:  # no computer_call: the model finished
                return Outcome(env.score(), turn)
    except SafetyChecksPending as pending:  # not acknowledged: the call's actions did not run
        return Outcome(env.score(), turn, f"{pending}; none of its actions ran")
    return Outcome(env.score(), max_steps, "the step limit (--max-steps) came before the model finished")


def checker(acknowledge: bool, say: Callable[[str], None]) -> Callable[[list[dict[str, Any]]], bool]:
    """What ``run_computer_call`` asks about a call's pending safety checks: each is shown, and all are
    acknowledged only when the user said so on the command line."""

    def decide(checks: list[dict[str, Any]]) -> bool:
        for check in checks:
            say(f"safety check {check.get('code') or check['id']}: {check.get('message') or '(no message)'}")
        say("  acknowledged (--acknowledge-safety-checks)" if acknowledge else "  not acknowledged")
        return acknowledge

    return decide


def show(response: Any, say: Callable[[str], None]) -> list[Any]:
    """The model's text and the actions of one response; its output items."""
    for item in response.output:
        if item.type == "message":
            text = " ".join(part.text for part in item.content if part.type == "output_text").strip()
            if text:
                say(f"model: {text}")
        elif item.type == "computer_call":
            for action in item.actions or [item.action]:
                say(f"  {json.dumps(action.to_dict(), ensure_ascii=False)}")
    return list(response.output)


def main(argv: list[str] | None = None) -> int:
    parser = task_parser(__doc__, "OPENAI_MODEL")
    parser.add_argument("--acknowledge-safety-checks", action="store_true",
                        help="acknowledge the safety checks the API marks pending (default: show them and stop)")
    args = parse_task_args(parser, argv)
    try:
        client = openai.OpenAI()  # credentials and base URL as the SDK finds them (OPENAI_API_KEY, OPENAI_BASE_URL)
    except openai.OpenAIError as exc:  # no credentials
        parser.error(str(exc))
    return run_loop(args, lambda env: run_task(client, env, args.task, model=args.model, max_steps=args.max_steps,
                                               acknowledge=args.acknowledge_safety_checks), (openai.OpenAIError,))


if __name__ == "__main__":
    sys.exit(main())
