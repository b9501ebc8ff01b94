"""Capability mixins that environments are composed from.

    from hci_envs import Environment
    from hci_envs.traits import BashAccess, HumanComputerInterfaceable, PythonAccess

    class MyEnv(HumanComputerInterfaceable, BashAccess, PythonAccess, Environment): ...
"""

from .bash import BashAccess
from .envs import AssistedDesktopEnv, DesktopEnv, WorkstationEnv
from .hci import HumanComputerInterfaceable
from .ask_human import AsksForHelp
from .python import PythonAccess

__all__ = ["AsksForHelp", "AssistedDesktopEnv", "BashAccess", "DesktopEnv", "HumanComputerInterfaceable",
           "PythonAccess", "WorkstationEnv"]
