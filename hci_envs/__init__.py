"""hci-envs: virtual X desktops whose screen, keyboard and mouse are MCP tools, for agents and people.

The package imports lazily: ``import hci_envs`` pulls in nothing heavy, and client-side names work without
the server extra installed.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    # client side: the vocabulary, the wire types, the errors, the clients (light install)
    "actions": "hci_envs.actions",
    "parse_action": "hci_envs.actions",
    "StartState": "hci_envs.protocol",
    "AppState": "hci_envs.protocol",
    "Observation": "hci_envs.protocol",
    "EnvState": "hci_envs.protocol",
    "ObservationSpec": "hci_envs.protocol",
    "HciEnvClient": "hci_envs.client",
    "AsyncHciEnvClient": "hci_envs.client",
    "StepResult": "hci_envs.client",
    "LocalProvider": "hci_envs.providers",
    "HciEnvsError": "hci_envs.errors",
    "InvalidActionError": "hci_envs.errors",
    # environment authors: the contract, traits' base and tools (pydantic only)
    "Environment": "hci_envs.env",
    "DesktopEnvironment": "hci_envs.env",  # the old name of Environment (deprecated: warns)
    "Trait": "hci_envs.trait",
    "tool": "hci_envs.tools",
    "ToolOutput": "hci_envs.tools",
    # the desktop runtime (server extra and X11)
    "Desktop": "hci_envs.desktop",
    "FakeDesktop": "hci_envs.desktop.fake",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hci_envs' has no attribute {name!r}")
    mod = importlib.import_module(module)
    return mod if module.endswith("." + name) else getattr(mod, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
