"""Every environment this project ships passes check_env and the conformance mixin of each of its traits.

The shipped environments are the installed ``hci_envs.environments`` entry points, so a new one is covered
the moment it is registered.
"""

from __future__ import annotations

from importlib import metadata

import pytest

from hci_envs.checks import check_env
from hci_envs.traits.testing import conformance_classes

SHIPPED = {ep.name: ep.load() for ep in metadata.entry_points(group="hci_envs.environments")}


def test_some_environments_are_shipped():
    assert {"desktop", "workstation"} <= set(SHIPPED)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_check_env(x11, name):
    assert check_env(SHIPPED[name])["ok"]


for _env in {id(c): c for c in SHIPPED.values()}.values():
    globals().update(conformance_classes(_env))
