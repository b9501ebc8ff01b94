"""Entry points: how hci_envs finds code that lives outside it (the recorders, CLI commands, environments)
without importing those packages directly; and the one loader of environment classes that the command
line, images, replay and task worlds share."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from importlib import metadata
from typing import Any

from .errors import ConfigError, MissingDependencyError

RECORDERS = "hci_envs.recorders"
CLI = "hci_envs.cli"
ENVIRONMENTS = "hci_envs.environments"
#: Services of the server's that environments no server serves start for themselves (OSWorld's guest API).
SERVICES = "hci_envs.services"
#: The environment a server serves when none is named (``serve --env``, HCI_ENVS_ENV).
DEFAULT_ENV = "desktop"


def load(group: str, name: str) -> Any:
    for ep in metadata.entry_points(group=group):
        if ep.name == name:
            return ep.load()
    raise MissingDependencyError(
        f"no '{name}' plugin in {group}; is hci-envs installed (pip install -e .) with its recorders?",
        group=group, name=name,
    )


def load_all(group: str) -> list[Any]:
    return [ep.load() for ep in metadata.entry_points(group=group)]


def load_env_class(spec: str) -> type:
    """An environment class from ``NAME`` (an installed ``hci_envs.environments`` entry point),
    ``module:Class`` (``Class`` may be a dotted path) or ``path/to/file.py:Class``; a :class:`ConfigError`
    that says which part failed otherwise."""
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"an environment is NAME, module:Class or file.py:Class, not {spec!r}")
    if ":" not in spec:
        for ep in metadata.entry_points(group=ENVIRONMENTS):
            if ep.name == spec:
                return ep.load()
        names = sorted(ep.name for ep in metadata.entry_points(group=ENVIRONMENTS))
        raise ConfigError(f"no environment named {spec!r}; installed: {', '.join(names) or 'none'}; "
                          "or give module:Class")
    module_name, _, attr = spec.rpartition(":")
    if module_name.endswith(".py"):
        path = os.path.abspath(module_name)
        if not os.path.exists(path):
            raise ConfigError(f"no such file: {module_name}")
        mod_spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
        if mod_spec is None or mod_spec.loader is None:
            raise ConfigError(f"cannot load {module_name} as a Python module")
        module: Any = importlib.util.module_from_spec(mod_spec)
        sys.modules[mod_spec.name] = module
        mod_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"cannot import {module_name!r}: {exc}") from exc
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, type):
        raise ConfigError(f"{spec!r} is not a class")
    return obj
