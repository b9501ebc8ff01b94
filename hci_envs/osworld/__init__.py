"""OSWorld on hci-envs desktops: OSWorld's own harness (``desktop-env``), its task files and its evaluators, run
unchanged against our desktops. ``DesktopEnv(...)`` takes OSWorld's arguments and returns OSWorld's own
``DesktopEnv`` whose "virtual machine" is an hci-envs server serving OSWorld's guest API
(:mod:`hci_envs.server.osworld_guest`). This package needs only hci-envs' light install beside desktop-env."""

from .provider import DesktopEnv, HciEnvsProvider

__all__ = ["DesktopEnv", "HciEnvsProvider"]
