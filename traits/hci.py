"""HumanComputerInterfaceable: the screen, keyboard and mouse of the desktop as tools.

One tool per canonical action (generated beside the vocabulary, in :mod:`hci_envs.tools.action_tools`), named
exactly as the action type, with the action's fields as parameters; input tools take ``settle``.
"""

from __future__ import annotations

from hci_envs.tools.action_tools import action_tool_specs
from hci_envs.tools.trait import Trait


class HumanComputerInterfaceable(Trait):
    """Screen, keyboard and mouse: every canonical action as a tool."""

    system_packages = ("xvfb", "openbox", "x11vnc", "xauth", "fonts-dejavu-core", "dbus-daemon", "at-spi2-core")
    __tool_specs__ = action_tool_specs()
