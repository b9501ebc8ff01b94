"""hci-envs: virtual X desktops whose screen, keyboard and mouse are MCP tools, for agents and people.

The package imports lazily: ``import hci_envs`` pulls in nothing heavy, and client-side names work without
the server extra installed.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    # actions (client-safe)
    "actions": "hci_envs.actions",
    "parse_action": "hci_envs.actions",
    # errors (client-safe)
    "HciEnvsError": "hci_envs.errors",
    "InvalidActionError": "hci_envs.errors",
    # desktop runtime (server extra)
    "Desktop": "hci_envs.desktop",
    "DesktopConfig": "hci_envs.desktop",
    "AppSpec": "hci_envs.desktop",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hci_envs' has no attribute {name!r}")
    mod = importlib.import_module(module)
    return mod if module.endswith("." + name) else getattr(mod, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
