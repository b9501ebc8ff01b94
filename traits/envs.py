"""Ready-made environments built from the traits."""

from __future__ import annotations

from hci_envs.env.environment import Environment

from .bash import BashAccess
from .hci import HumanComputerInterfaceable
from .ask_human import AsksForHelp
from .python import PythonAccess


class DesktopEnv(HumanComputerInterfaceable, Environment):
    """A plain desktop (Xvfb + openbox) whose screen, keyboard and mouse are the tools."""

    description = "A virtual X desktop; the screen, keyboard and mouse are MCP tools."


class WorkstationEnv(HumanComputerInterfaceable, BashAccess, PythonAccess, Environment):
    """A desktop with a shell and a Python interpreter as well: screen, keyboard, mouse, bash and python."""

    description = "A virtual X desktop with bash and a persistent Python interpreter."


class AssistedDesktopEnv(AsksForHelp, HumanComputerInterfaceable, Environment):
    """A plain desktop whose agent may ask a person to take over (``ask_human``)."""

    description = ("A virtual X desktop; the screen, keyboard and mouse are MCP tools, and the agent may hand the "
                   "desktop to a person watching over VNC and get it back with a note.")
