"""Capability mixins that environments are composed from.

    from hci_envs import DesktopEnvironment
    from traits import HumanComputerInterfaceable

    class MyEnv(HumanComputerInterfaceable, DesktopEnvironment): ...
"""

from .hci import HumanComputerInterfaceable
from .envs import DesktopEnv

__all__ = ["DesktopEnv", "HumanComputerInterfaceable"]
