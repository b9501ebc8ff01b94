"""The ASGI server: MCP, the OpenEnv control plane and VNC on one port (needs the ``server`` extra)."""

from .app import create_app
from .config import ServerConfig
from .core import HciServer

__all__ = ["HciServer", "ServerConfig", "create_app"]
