"""Claude on a desktop task: the official anthropic SDK's tool runner with Anthropic's computer toolset.

    export ANTHROPIC_API_KEY=...     # the SDK reads its key and ANTHROPIC_BASE_URL from the environment
    .venv/bin/python examples/claude_computer_use.py --model MODEL                 # the suite's editor task
    .venv/bin/python examples/claude_computer_use.py --model MODEL --task term-hello --url http://127.0.0.1:8000

The task's desktop is an hci-envs session (a server started here with the built-in suite, or the one at --url);
``env.reset(task=...)`` builds its world and gives its instruction, which is Claude's first message. The toolset
(``computer_toolset_20260801``) is served by ``HciComputerToolset``, the SDK's own toolset class on the session,
in the pixels of screenshots that fit Claude's image budget (``fit_scale``). The loop runs until Claude asks for
no more actions (or --max-steps model turns), then prints the task's reward (``env.score()``, the checker run on
the server). Needs ``pip install 'hci-envs[anthropic]'``.

Why the tool runner (``client.beta.messages.tool_runner``) and not ``messages.create`` in a loop of our own: the
SDK ships the computer toolset as a class to subclass (``anthropic.tools.BetaAbstractComputerToolset20260801``)
for its tool runner to run, which is how the SDK documents serving a toolset. The runner does what a loop of our
own would have to copy: it runs a reply's calls in order and answers the ones after a failure with the API's
"Not executed" text, echoes ``toolset_name``, asks ``confirm`` before ``type``/``key``/``hold_key``, keeps the
conversation as a message thread (each turn sends only the new tool results), resumes paused turns and stops
when the model does. Each member call is one step of the session. (``run_turn`` in
``hci_envs.adapters.anthropic_toolset`` runs a whole reply as one step instead, for loops that must.)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import anthropic
from agent_cli import Outcome, parse_task_args, run_loop, task_parser

from hci_envs import HciEnvClient
from hci_envs.adapters.anthropic_toolset import HciComputerToolset, fit_scale

#: Why the loop stopped, for a last turn that did not end the conversation.
UNFINISHED = {"tool_use": "the step limit (--max-steps) came before Claude finished",
              "max_tokens": "a reply reached --max-tokens", "refusal": "Claude refused to go on"}


def run_task(client: anthropic.Anthropic, env: HciEnvClient, task: str | dict[str, Any], *, model: str,
             max_steps: int = 30, max_tokens: int = 4096, say: Callable[[str], None] = print) -> Outcome:
    instruction = env.reset(task=task).observation.text  # the task's instruction; its answers stay on the server
    state = env.state()
    computer = HciComputerToolset(env, scale=fit_scale(state.screen_width, state.screen_height), confirm=approve)
    runner = client.beta.messages.tool_runner(model=model, max_tokens=max_tokens, max_iterations=max_steps,
                                              tools=[computer], messages=[{"role": "user", "content": instruction}])
    turns, last = 0, None
    for turns, last in enumerate(runner, start=1):  # Claude's turns; the toolset runs its calls in between
        show(last, say)
    reason = None if last is None or last.stop_reason in ("end_turn", "stop_sequence") else last.stop_reason
    return Outcome(env.score(), turns, reason and UNFINISHED.get(reason, f"stop_reason {reason}"))


def approve(context: Any) -> bool:
    """The toolset's ``confirm``, asked before each ``type``, ``key`` and ``hold_key`` (the SDK requires one for
    them). An hci-envs desktop is a disposable sandbox whose agent side runs as an account of its own, so every
    call is approved; on a desktop that matters, ask a person here (``context.member``, ``context.input``)."""
    return True


def show(message: Any, say: Callable[[str], None]) -> None:
    """Claude's text and the member calls of one turn."""
    for block in message.content:
        if block.type == "text" and block.text.strip():
            say(f"claude: {block.text.strip()}")
        elif block.type == "tool_use":
            say(f"  {block.name} {json.dumps(block.input, ensure_ascii=False)}")


def main(argv: list[str] | None = None) -> int:
    parser = task_parser(__doc__, "ANTHROPIC_MODEL")
    parser.add_argument("--max-tokens", type=int, default=4096, help="tokens per reply at most (default: 4096)")
    args = parse_task_args(parser, argv)
    try:
        client = anthropic.Anthropic()  # credentials and base URL as the SDK finds them (ANTHROPIC_API_KEY, ...)
    except anthropic.AnthropicError as exc:  # credentials it found and cannot use (a profile's file missing)
        parser.error(str(exc))
    if client.api_key is None and client.auth_token is None and client.credentials is None:
        parser.error("no Anthropic credentials: set ANTHROPIC_API_KEY (or any other way the SDK reads)")
    return run_loop(args, lambda env: run_task(client, env, args.task, model=args.model, max_steps=args.max_steps,
                                               max_tokens=args.max_tokens), (anthropic.AnthropicError,))


if __name__ == "__main__":
    sys.exit(main())
