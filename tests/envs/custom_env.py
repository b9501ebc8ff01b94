"""A custom environment composed in a test file: all three traits, plus a tool of its own."""

from typing import Annotated

from pydantic import Field

from hci_envs import Environment, StartState, ToolOutput, tool
from hci_envs.traits import BashAccess, HumanComputerInterfaceable, PythonAccess


class NotesTrait:
    """Not a Trait subclass on purpose: tools come from Trait subclasses (the environment) only."""


class CustomEnv(HumanComputerInterfaceable, BashAccess, PythonAccess, Environment):
    """A desktop with a shell, Python, and a notes tool of its own."""

    description = "Test environment: screen, keyboard, mouse, bash, python and notes."
    start_state = StartState(width=1024, height=768)

    @tool()
    def write_note(self, text: Annotated[str, Field(max_length=1000, description="The note.")]) -> ToolOutput:
        """Append a line to notes.txt in the session's home."""
        with open(self.home / "notes.txt", "a", encoding="utf-8") as f:
            f.write(text + "\n")
        return ToolOutput(text="noted", data={"lines": sum(1 for _ in open(self.home / "notes.txt"))})
