"""Every environment this project ships passes check_env and the conformance mixin of each of its traits.

The shipped environments are the installed ``hci_envs.environments`` entry points, so a new one is covered
the moment it is registered.
"""

from __future__ import annotations

from importlib import metadata

import pytest

from hci_envs.env.env_checker import check_env
from hci_envs.traits.testing import conformance_classes

SHIPPED = {ep.name: ep.load() for ep in metadata.entry_points(group="hci_envs.environments")}


@pytest.mark.fake
def test_some_environments_are_shipped():
    assert {"desktop", "workstation"} <= set(SHIPPED)


@pytest.mark.x11
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_check_env(x11, name):
    assert check_env(SHIPPED[name])["ok"]


for _env in {id(c): c for c in SHIPPED.values()}.values():  # each on a real desktop: the x11 tier
    globals().update({name: pytest.mark.x11(cls) for name, cls in conformance_classes(_env).items()})
