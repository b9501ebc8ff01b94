"""Ready-made environments built from the traits."""

from __future__ import annotations

from hci_envs.env import DesktopEnvironment

from .hci import HumanComputerInterfaceable


class DesktopEnv(HumanComputerInterfaceable, DesktopEnvironment):
    """A plain desktop (Xvfb + openbox) whose screen, keyboard and mouse are the tools."""

    description = "A virtual X desktop; the screen, keyboard and mouse are MCP tools."
