"""The running server: its configuration, its sessions and its two MCP faces (one tool per call, CodeAct).

Route modules read it through :func:`hci_envs.server.deps.get_server`; it imports none of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from .. import __version__
from ..accounts import IsolationStatus, agent_uids, resolve_isolation
from ..codeact import BASE_TOOLS, CODE_TOOL
from ..errors import ConfigError, EnvironmentStateError
from .config import ServerConfig
from .mcp_bridge import build_mcp_server, session_from_request
from .sessions import Session, SessionManager
from .tasks import TaskSuite

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
        self.task_suite = TaskSuite(config.tasks)

    async def reset_session(self, session: Session, options: dict[str, Any]) -> Any:
        """Reset ``session``: to its start state, a snapshot (``snapshot``), or a task (``task``: an id of the
        server's suite or a task spec), with ``seed`` and ``episode_id``."""
        from .tasks import SessionTask

        options = dict(options)
        seed, episode_id = options.pop("seed", None), options.pop("episode_id", None)
        task_ref = options.pop("task", None)
        if task_ref is None:
            if session.task is not None and session.task.task is not None:
                # after a task, a plain reset is back in the session's own start state, with nothing to score
                options.setdefault("start_state", session.task.own_start_state)
                session.task.task = None
            return await session.run_control(session.env.reset, seed=seed, episode_id=episode_id, **options)
        if options:
            raise ConfigError(f"a reset into a task takes no other options ({', '.join(sorted(options))})")
        task = await anyio.to_thread.run_sync(self.task_suite.resolve, task_ref)
        if session.task is None:
            session.task = SessionTask(session.env)
        return await session.run_control(session.task.reset, task, seed)

    async def score_session(self, session: Session) -> dict[str, Any]:
        """Run the checker of the task ``session`` was reset into (control plane only)."""
        if session.task is None:
            raise EnvironmentStateError(f"session {session.id} has no task: reset it with one (reset(task=ID))")
        return await session.run_control(session.task.score)

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
        session.on_close.append(lambda: session.task.close() if session.task else None)
        for attach in self.session_services:
            info.update(attach(self, session))
        session.env.session_info = info
