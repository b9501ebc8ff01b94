"""Entry points: how hci_envs finds code that lives outside it (the recorders, CLI commands, environments)
without importing those packages directly."""

from __future__ import annotations

from importlib import metadata
from typing import Any

from .errors import MissingDependencyError

RECORDERS = "hci_envs.recorders"
CLI = "hci_envs.cli"
ENVIRONMENTS = "hci_envs.environments"


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
