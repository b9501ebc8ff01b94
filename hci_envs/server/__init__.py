"""The ASGI server: MCP, the OpenEnv control plane and VNC on one port (needs the ``server`` extra)."""

from .app import HciServer, create_app
from .config import ServerConfig

__all__ = ["HciServer", "ServerConfig", "create_app"]
