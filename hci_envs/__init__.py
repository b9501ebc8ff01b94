"""hci-envs: virtual X desktops whose screen, keyboard and mouse are MCP tools, for agents and people.

The package imports lazily: ``import hci_envs`` pulls in nothing heavy, and client-side names work without
the server extra installed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
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
    "Trait": "hci_envs.tools.trait",
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


#: Modules that moved when the package was regrouped into rooms (0.1 -> 0.2): the old path still imports, as
#: the very module at the new path, and warns. Removed in the release after 0.2.
MOVED = {
    "hci_envs.adapters.osworld": "hci_envs.adapters.osworld_actions",
    "hci_envs.accounts": "hci_envs.sandbox.accounts",
    "hci_envs.homes": "hci_envs.sandbox.homes",
    "hci_envs.watchdog": "hci_envs.sandbox.watchdog",
    "hci_envs.desktop.watchdog": "hci_envs.sandbox.watchdog_process",
    "hci_envs.desktop.processes": "hci_envs.sandbox.processes",
    "hci_envs.interpreter": "hci_envs.sandbox.interpreter",
    "hci_envs.interpreter_worker": "hci_envs.sandbox.interpreter_worker",
    "hci_envs.trait": "hci_envs.tools.trait",
    "hci_envs.discovery": "hci_envs.tools.discovery",
    "hci_envs.codeact": "hci_envs.tools.codeact",
    "hci_envs.rendering": "hci_envs.tools.rendering",
    "hci_envs.episode": "hci_envs.env.episode",
    "hci_envs.steps": "hci_envs.env.steps",
    "hci_envs.executor": "hci_envs.env.executor",
    "hci_envs.spare": "hci_envs.env.spare",
    "hci_envs.checks": "hci_envs.env.env_checker",
    "hci_envs.cli": "hci_envs.ops.cli",
    "hci_envs.bootstrap": "hci_envs.ops.bootstrap",
    "hci_envs.images": "hci_envs.ops.images",
    "hci_envs.server.control": "hci_envs.server.control_routes",
    "hci_envs.server.tasks": "hci_envs.tasks.catalog",
    "hci_envs.vnc.control": "hci_envs.vnc.takeover",
    "hci_envs.tasks.checks": "hci_envs.tasks.checkers",
    "hci_envs.recorders.cli": "hci_envs.recorders.commands",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module path of :data:`MOVED` and loads it as the module at its new path (one module object
    under both names, so that patching either patches both)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: Any) -> Any:
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; the old path goes in the release after 0.2",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: Any) -> None:
        """The module at the new path has run already."""


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
