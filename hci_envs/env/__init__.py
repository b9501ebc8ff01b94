"""The environment: Gymnasium-style ``reset`` / ``step`` / ``state`` over a desktop and the tools of its traits.

``environment`` (the :class:`Environment` facade), ``assembly`` (builds its parts), ``episode`` (the episode's
bookkeeping), ``steps`` (what a step may carry), ``executor`` (canonical actions on a desktop), ``spare`` (the
next episode's desktop, prepared in the background), ``handover`` (the agent's ``ask_human``) and
``env_checker`` (:func:`check_env`).
"""

from __future__ import annotations

import warnings
from typing import Any

from .assembly import EnvironmentHooks
from .environment import BASE_TOOLS, CODE_TOOL, DesktopFactory, Environment, image_data

__all__ = ["BASE_TOOLS", "CODE_TOOL", "DesktopFactory", "Environment", "EnvironmentHooks", "image_data"]


def __getattr__(name: str) -> Any:
    # The class's name until 0.1: it stood beside DesktopEnv (a shipped environment) and Desktop (the X
    # display), three names for two concepts. Kept, with a warning, so that code written against it runs.
    if name == "DesktopEnvironment":
        warnings.warn("hci_envs.DesktopEnvironment is now hci_envs.Environment", DeprecationWarning, stacklevel=2)
        return Environment
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
