"""Desktops across a Ray cluster: a warm pool that trainers claim desktops from.

    from hci_envs.cluster import DesktopPool

    with DesktopPool(address="auto", env="workstation", size=64, spares=8) as pool:
        env = pool.claim()
        env.reset(); env.step({"type": "key", "keys": "ctrl+l"})
        pool.release(env)

Modules: ``pool`` (DesktopPool: placement, warm spares, claims, loss and replacement), ``claims`` (the clients
a claim returns), ``host`` (the Ray actor that runs one desktop on its node). Ray is imported only when a pool
is made (``pip install 'hci-envs[ray]'``); see docs/cluster.md for running it on several machines and on
Kubernetes.
"""

from .claims import AsyncPooledEnv, PooledEnv
from .host import DesktopHost
from .pool import RESOURCE, DesktopPool

__all__ = ["RESOURCE", "AsyncPooledEnv", "DesktopHost", "DesktopPool", "PooledEnv"]
