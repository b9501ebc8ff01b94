"""The running server: its configuration, its sessions and its two MCP faces (one tool per call, CodeAct).

Route modules read it through :func:`hci_envs.server.deps.get_server`; it imports none of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .. import __version__
from ..accounts import IsolationStatus, agent_uids, resolve_isolation
from ..codeact import BASE_TOOLS, CODE_TOOL
from ..errors import ConfigError
from .config import ServerConfig
from .mcp_bridge import build_mcp_server, session_from_request
from .sessions import Session, SessionManager

log = logging.getLogger(__name__)


class ClientActivity:
    """Requests and WebSockets in flight, and when the last one ended (for the orphan timeout)."""

    def __init__(self) -> None:
        self.open = 0
        self._last = time.monotonic()

    def begin(self) -> None:
        self.open += 1
        self._last = time.monotonic()

    def end(self) -> None:
        self.open -= 1
        self._last = time.monotonic()

    def touch(self) -> None:
        self._last = time.monotonic()

    def idle_for(self) -> float:
        """Seconds since the last client left (0 while one is here)."""
        return 0.0 if self.open > 0 else time.monotonic() - self._last


class HciServer:
    """The running server: its configuration, sessions and MCP server."""

    def __init__(self, config: ServerConfig) -> None:
        if config.env_class is None:
            raise ConfigError("ServerConfig.env_class is required")
        #: Whether each session's agent side runs as an account of its own; said at start-up and in
        #: /metadata and every session's state.
        self.isolation: IsolationStatus = resolve_isolation(config.isolation)  # type: ignore[arg-type]
        config.check_exposure(self.isolation.mode)
        if self.isolation.mode == "uid" and config.max_sessions > self.isolation.accounts:
            raise ConfigError(
                f"max_sessions {config.max_sessions} exceeds the {self.isolation.accounts} agent accounts of this "
                "machine (one per live session); create more as root with `python3 -m hci_envs install "
                f"--agent-accounts {config.max_sessions}`, or lower --max-sessions")
        self.agent_uids = agent_uids() if self.isolation.mode == "uid" else frozenset()
        self.config = config
        self.startup_hooks: list[Callable[[], Awaitable[None]]] = []
        self.shutdown_hooks: list[Callable[[], object]] = []
        self.vnc_port: int | None = None
        self.clients = ClientActivity()
        #: Per-session services (VNC): ``attach(server, session)`` returns what the session's state reports.
        self.session_services: list[Callable[[HciServer, Session], dict[str, Any]]] = []
        env_class = config.env_class
        self.env_class = env_class
        self.sessions = SessionManager(
            self._make_env,
            max_sessions=config.max_sessions,
            idle_timeout=config.idle_timeout,
            agent_tokens=config.agent_tokens,
            default_agent_token=config.agent_token,
            setup=self.setup_session,
            default_mode=config.action_mode,
            concurrency=config.session_concurrency,
            max_queued=config.max_queued_calls,
        )
        specs = env_class.tool_specs()
        name = getattr(env_class, "__name__", "hci-envs")
        instructions = getattr(env_class, "description", None) or None
        # Two faces of one registry: every tool one call at a time, or CodeAct (code in which every tool is a
        # function) with the discovery tools.
        self.mcp = build_mcp_server(
            {n: s for n, s in specs.items() if n != CODE_TOOL}, session_from_request,
            name=name, instructions=instructions, version=__version__,
        )
        self.mcp_code = build_mcp_server(
            {n: s for n, s in specs.items() if n in BASE_TOOLS}, session_from_request,
            name=f"{name} (CodeAct)", instructions=instructions, version=__version__,
        )
        self.mcp_servers = {"tools": self.mcp, "code": self.mcp_code}

    def _make_env(self) -> Any:
        kwargs = {"isolation": self.isolation, "max_agent_processes": self.config.max_agent_processes,
                  **self.config.env_kwargs}
        return self.config.env_class(mode=self.config.mode, **kwargs)  # type: ignore[misc]

    def mcp_url(self, session: Session, flavor: str | None = None) -> str:
        """The session's MCP endpoint; ``flavor`` "tools" or "code" (default: the session's mode)."""
        base = self.config.base_url()
        path = "/mcp" if session.kind == "default" else f"/sessions/{session.id}/mcp"
        return base + path + ("/code" if (flavor or session.mode) == "code" else "")

    def setup_session(self, session: Session) -> None:
        """Attach the per-session services (VNC) and publish the session's URLs in its state."""
        info: dict[str, Any] = {
            "session_id": session.id, "action_mode": session.mode, "mcp_url": self.mcp_url(session),
            "mcp_tools_url": self.mcp_url(session, "tools"), "mcp_code_url": self.mcp_url(session, "code"),
            "agent_token": session.agent_token,
        }
        session.on_close.append(lambda: session.recorder.stop("the session closed") if session.recorder else None)
        for attach in self.session_services:
            info.update(attach(self, session))
        session.env.session_info = info
