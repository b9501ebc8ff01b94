"""Drive hci-envs desktops from a TRL-style ``environment_factory``, through OpenEnv's own client.

TRL's GRPOTrainer can take ``environment_factory=DesktopTask``: it makes one instance per generation, calls
``reset()`` at the start of each rollout, offers the instance's other public methods to the model as tools
(their signatures and docstrings become the tool schemas), and passes the instances to the reward functions.
This file needs only ``openenv`` (it runs in a trainer's environment, not hci-envs'):

    python3 -m hci_envs up --env workstation --app xterm &            # a desktop server on :8000
    .venv-openenv/bin/python examples/trl_environment_factory.py --url http://127.0.0.1:8000

Without TRL installed, ``main()`` plays the trainer: it opens ``--generations`` environments at once (each
is its own desktop over its own WebSocket session), lets a scripted policy stand in for the model, and prints
the rewards. With TRL:

    trainer = GRPOTrainer(model=..., train_dataset=..., environment_factory=DesktopTask, reward_funcs=[reward])
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from openenv.core import GenericEnvClient

SERVER_URL = os.environ.get("HCI_ENVS_URL", "http://127.0.0.1:8000")
GOAL = "hello from the model"


class DesktopTask:
    """One desktop per generation. The task: make the file greeting.txt contain the goal text."""

    def __init__(self) -> None:
        self._client = GenericEnvClient(base_url=SERVER_URL).sync()
        self._client.connect()
        self._width = self._height = 0

    def reset(self, **kwargs: object) -> str:
        """Called by the trainer (never by the model): a fresh desktop; returns the task's instruction."""
        result = self._client.reset()
        shot = result.observation["screenshot"]
        self._width, self._height = shot["width"], shot["height"]
        return (f"You see a {self._width}x{self._height} desktop with a terminal. "
                f"Write '{GOAL}' into the file greeting.txt in the home directory.")

    def click(self, x: int, y: int) -> str:
        """Click the left mouse button at a screen position.

        Args:
            x: Horizontal pixel, from the left edge.
            y: Vertical pixel, from the top edge.
        """
        return self._act({"type": "click", "x": x, "y": y})

    def type_text(self, text: str) -> str:
        """Type text with the keyboard into the focused window; a newline presses Enter.

        Args:
            text: The text to type (any Unicode).
        """
        return self._act({"type": "type_text", "text": text})

    def key(self, keys: str) -> str:
        """Press a key or a chord, such as "Return", "ctrl+c" or "alt+F4".

        Args:
            keys: The key or chord.
        """
        return self._act({"type": "key", "keys": keys})

    def _act(self, action: dict) -> str:
        try:
            result = self._client.step(action)
        except RuntimeError as exc:  # an error frame (bad coordinates, unknown key): tell the model
            return f"error: {exc}"
        return result.observation.get("text") or "ok"

    def _reward(self) -> float:
        result = self._client.step({"tool": "bash", "arguments": {"command": "cat greeting.txt"}})
        return 1.0 if result.observation["data"]["stdout"].strip() == GOAL else 0.0

    def _close(self) -> None:
        self._client.close()


def reward(environments: list[DesktopTask], **kwargs: object) -> list[float]:
    """A TRL reward function: one reward per generation, read from each generation's own desktop."""
    return [env._reward() for env in environments]


def scripted_policy(env: DesktopTask, instruction: str, succeed: bool) -> None:
    """Stands in for the model: what its tool calls would do."""
    env.click(env._width // 2, env._height // 2)
    env.type_text(f"echo '{GOAL if succeed else 'something else'}' > greeting.txt\n")
    env.key("ctrl+l")


def main(argv: list[str] | None = None) -> int:
    global SERVER_URL
    parser = argparse.ArgumentParser(description="TRL-style environment_factory over OpenEnv's client")
    parser.add_argument("--url", default=SERVER_URL)
    parser.add_argument("--generations", type=int, default=4)
    args = parser.parse_args(argv)
    SERVER_URL = args.url

    envs = [DesktopTask() for _ in range(args.generations)]
    try:
        def rollout(i: int) -> None:
            instruction = envs[i].reset()
            scripted_policy(envs[i], instruction, succeed=i % 2 == 0)

        with ThreadPoolExecutor(args.generations) as pool:
            list(pool.map(rollout, range(args.generations)))
        rewards = reward(envs)
    finally:
        for env in envs:
            env._close()
    print(f"rewards: {rewards}")
    expected = [1.0 if i % 2 == 0 else 0.0 for i in range(args.generations)]
    return 0 if rewards == expected else 1


if __name__ == "__main__":
    sys.exit(main())
