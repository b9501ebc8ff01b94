"""AsksForHelp: the agent may ask a person to take over the desktop.

``ask_human(reason)`` pauses the episode for the agent: a person watching (a control viewer over VNC, the
collection page) takes the desktop, works, and hands it back with a note; the agent's next result carries the
note, what the person did (as canonical actions) and a fresh screen. Until then the agent's input is refused
and ``wait`` ends early when the desktop comes back. See :mod:`hci_envs.env.handover`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from hci_envs.env.handover import MAX_TEXT
from hci_envs.tools.registry import ToolOutput, tool
from hci_envs.tools.trait import Trait


class AsksForHelp(Trait):
    """A person on call: the agent hands the desktop over and gets it back with a note."""

    @tool()
    def ask_human(
        self,
        reason: Annotated[str, Field(min_length=1, max_length=MAX_TEXT,
                                     description="What you need the person to do, or why you are stuck.")],
    ) -> ToolOutput:
        """Ask a person to take over the desktop. Your input is refused until they hand it back (or nobody has
        answered in time); call `wait` meanwhile, which ends early when the desktop is yours again. Your next
        result then tells you their note and what they did, with a fresh screenshot."""
        asked = self.ask_human_for(reason)  # type: ignore[attr-defined]
        return ToolOutput(
            text=f"asked for a person: {asked['reason']!r} ({asked['where']}); your input is refused until they "
                 f"hand the desktop back, or until nobody has answered in {asked['answer_within_seconds']:g}s",
            data=asked)
