"""The running server: its configuration, its sessions and its two MCP faces (one tool per call, CodeAct).

Route modules read it through :func:`hci_envs.server.deps.get_server`; it imports none of them.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from .. import __version__
from ..sandbox.accounts import IsolationStatus, agent_uids, resolve_isolation
from ..env.assembly import EnvironmentHooks
from ..errors import ConfigError, EnvironmentStateError
from .config import ServerConfig
from .mcp_bridge import build_mcp_server, session_from_request
from .profiles import profile_path, tool_profiles
from .sessions import Session, SessionManager
from ..tasks.catalog import TaskSuite

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
        name = getattr(env_class, "__name__", "hci-envs")
        instructions = getattr(env_class, "description", None) or None
        # Faces of one registry (see profiles.py): every tool one call at a time, CodeAct, the Anthropic toolset.
        # the screen each session's environment declares (the toolset's scale follows from it)
        declared = env_class.declare(config.env_kwargs.get("start_state") or env_class.start_state)
        labels = {"tools": name, "code": f"{name} (CodeAct)", "anthropic": f"{name} (Anthropic computer toolset)",
                  "osworld": f"{name} (OSWorld actions)"}
        self.mcp_servers = {
            profile: build_mcp_server(specs, session_from_request, name=labels.get(profile, f"{name} ({profile})"),
                                      instructions=instructions, version=__version__)
            for profile, specs in tool_profiles(env_class, width=declared.width, height=declared.height,
                                                mode=config.mode).items()
        }
        self.task_suite = TaskSuite(config.tasks)
        if self.isolation.mode == "uid":  # the answers of its tasks: not for the agents' accounts to read
            from ..tasks.privacy import keep_answers_private

            keep_answers_private(self.task_suite.answer_paths())
        #: Our own error that stopped the server's start-up, said in one line (see ``HciApp``).
        self.startup_error: Any = None

    async def reset_session(self, session: Session, options: dict[str, Any]) -> Any:
        """Reset ``session``: to its start state, a snapshot (``snapshot``), or a task (``task``: an id of the
        server's suite or a task spec), with ``seed`` and ``episode_id``."""
        options = dict(options)
        task_ref = options.pop("task", None)
        split, index = options.pop("split", None), options.pop("index", None)
        if split is not None or index is not None:  # OpenEnv's task API: a task by its place in a split
            if task_ref is not None:
                raise ConfigError("reset takes a task or a split and index, not both", field="task")
            if split is None or index is None:
                raise ConfigError("reset by position takes both split and index", field="split" if split is None
                                  else "index")
            options["task"] = await anyio.to_thread.run_sync(self.task_suite.from_split, split, index)
        elif task_ref is not None:
            options["task"] = await anyio.to_thread.run_sync(self.task_suite.resolve, task_ref)
        return await session.run_control(session.env.reset, **options)

    async def score_session(self, session: Session) -> dict[str, Any]:
        """Run the checker of the task ``session`` was reset into (control plane only)."""
        task = session.env.tasks.task
        if task is None:
            raise EnvironmentStateError(f"session {session.id} has no task: reset it with one (reset(task=ID))")
        result = await session.run_control(session.env.score)
        check = {"task": task.id, "score": result.value, "success": result.passed, "details": result.details}
        note = getattr(getattr(session, "recorder", None), "note_check", None)
        if note is not None:  # an episode being recorded keeps its checker's answer (check.json)
            await anyio.to_thread.run_sync(note, check)
        return check

    def _make_env(self) -> Any:
        """A session's environment, with hooks its services (VNC, see setup_session) fill in."""
        kwargs = {"isolation": self.isolation, "max_agent_processes": self.config.max_agent_processes,
                  **self.config.env_kwargs}
        return self.config.env_class(mode=self.config.mode, hooks=EnvironmentHooks(),  # type: ignore[misc]
                                     **kwargs)

    @property
    def osworld_owner(self) -> int:
        """The uid OSWorld's guest API answers (``--osworld-owner-uid``, or this server's)."""
        return os.getuid() if self.config.osworld_owner is None else self.config.osworld_owner

    def mcp_url(self, session: Session | None, profile: str | None = None) -> str:
        """The MCP endpoint of ``session`` (None: the default session) for ``profile`` (see profiles.py;
        default: the session's mode, "tools" or "code")."""
        base = self.config.base_url()
        path = "/mcp" if session is None or session.kind == "default" else f"/sessions/{session.id}/mcp"
        return base + path + profile_path(profile or (session.mode if session else self.config.action_mode))

    def mcp_profiles(self, session: Session | None) -> dict[str, str]:
        """Every MCP tool profile of ``session`` (None: the default session), by name, with its URL."""
        return {profile: self.mcp_url(session, profile) for profile in self.mcp_servers}

    def setup_session(self, session: Session) -> None:
        """Attach the per-session services (VNC) and publish the session's URLs in its state."""
        info: dict[str, Any] = {
            "session_id": session.id, "action_mode": session.mode, "mcp_url": self.mcp_url(session),
            "mcp_tools_url": self.mcp_url(session, "tools"), "mcp_code_url": self.mcp_url(session, "code"),
            "mcp_profiles": self.mcp_profiles(session), "agent_token": session.agent_token,
        }
        session.on_close.append(lambda: session.recorder.stop("the session closed") if session.recorder else None)
        for attach in self.session_services:
            info.update(attach(self, session))
        session.env.hooks.info.update(info)
        if self.config.osworld_port is not None:  # OSWorld's guest API: on its port, or one of the session's own
            if session.kind == "default":
                session.env.hooks.osworld_guest_url = f"http://127.0.0.1:{self.config.osworld_port}"
            else:
                from .osworld_guest import SessionGuest

                guest = SessionGuest(session, self.osworld_owner)
                session.on_close.append(guest.close)
                session.env.hooks.osworld_guest_url = guest.url
            session.env.hooks.info["osworld_guest_url"] = session.env.hooks.osworld_guest_url
