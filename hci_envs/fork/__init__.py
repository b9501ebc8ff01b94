"""Forking a running desktop: live copies of one moment, each an independent desktop (issue #32).

:class:`ForkableDesktop` runs every process of a desktop in one tree of namespaces (:mod:`.tree`);
:meth:`ForkableDesktop.fork` dumps it with CRIU (:mod:`.criu`, :mod:`.snapshot`) and restores the copies, each
as host uids of its own (:mod:`.criu_image`, :mod:`.uids`). Needs root and CRIU 4.2+ (``python3 -m hci_envs
install --fork`` fetches Debian 14's). Imports lazily: :mod:`.criu` is standard library only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ForkableDesktop", "fork_unavailable"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import forkable

        return getattr(forkable, name)
    raise AttributeError(name)
