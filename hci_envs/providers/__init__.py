"""Providers start an environment server somewhere, wait until it answers, and always clean it up.

    provider = LocalProvider(env="desktop", size=(1280, 800))
    base_url = provider.start()      # http://127.0.0.1:PORT, healthy
    ...
    provider.stop()                  # idempotent; also runs at interpreter exit

The client (``HciEnvClient.from_local`` / ``from_docker_image``) owns its provider and stops it on close, so
user code is the same whichever provider runs the server.
"""

from .base import Provider, wait_for_health
from .docker import DockerProvider
from .local import LocalProvider

__all__ = ["DockerProvider", "LocalProvider", "Provider", "wait_for_health"]
