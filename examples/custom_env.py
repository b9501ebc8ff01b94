"""Compose an environment from traits, add a tool of its own, check it, and drive it.

    .venv/bin/python examples/custom_env.py            # check_env, then a short episode over the wire
    .venv/bin/hci-envs serve --env examples/custom_env.py:NotesEnv   # or serve it for any MCP client

The class below is a complete, servable environment: the screen, keyboard and mouse (HumanComputerInterfaceable),
a shell (BashAccess), a persistent Python interpreter (PythonAccess), and ``write_note``, a tool of its own.
Every tool is also a function inside a CodeAct step (``{"code": ...}``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from pydantic import Field

from hci_envs import AppState, Environment, HciEnvClient, StartState, ToolOutput, tool
from hci_envs.env.env_checker import check_env
from hci_envs.traits import BashAccess, HumanComputerInterfaceable, PythonAccess


class NotesEnv(HumanComputerInterfaceable, BashAccess, PythonAccess, Environment):
    """A desktop with a terminal, a shell, Python, and a notes file the agent appends to."""

    description = "A desktop with xterm, bash, python and a notes tool."
    start_state = StartState(width=1024, height=768, apps=[AppState(command=["xterm"])])

    @tool()
    def write_note(self, text: Annotated[str, Field(min_length=1, max_length=1000, description="One line.")]) -> ToolOutput:
        """Append one line to notes.txt in the session's home and say how many lines it has."""
        notes = self.home / "notes.txt"
        with notes.open("a", encoding="utf-8") as f:
            f.write(text.replace("\n", " ") + "\n")
        lines = len(notes.read_text(encoding="utf-8").splitlines())
        return ToolOutput(text=f"{lines} notes", data={"lines": lines})


def main() -> int:
    summary = check_env(NotesEnv)  # the contract every environment must meet; raises listing each problem
    print(f"check_env: ok, {len(summary['tools'])} tools, reset in {summary['reset_seconds']} s")

    spec = f"{Path(__file__).resolve()}:NotesEnv"
    with HciEnvClient.from_local(spec) as env:  # a real server process, stopped on exit
        env.reset()
        # The same tools three ways: a tool call, a canonical action, and a CodeAct step.
        print(env.step({"tool": "write_note", "arguments": {"text": "first"}}).observation.text)
        env.step({"type": "type_text", "text": "echo typed in xterm\n"})
        result = env.step({"code": (
            "for word in ['second', 'third']:\n"
            "    write_note(text=word)\n"
            "out = bash(command='wc -l < notes.txt')\n"
            "print('lines:', out['stdout'].strip())\n"
        )})
        print(result.observation.text.strip())
        tools = sorted(t["name"] for t in env.list_tools())
        print("tools:", ", ".join(tools))
        assert "reset" not in tools and "snapshot" not in tools  # control plane only, never the model's
    return 0


if __name__ == "__main__":
    sys.exit(main())
