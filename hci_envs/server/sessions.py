"""Sessions: one environment (one desktop) each, with its own agent token and MCP path.

The server has a default session (HTTP /reset, /step, /state and /mcp act on it); every WebSocket /ws
connection gets a session of its own, closed with the connection. ``max_sessions`` bounds them all, and a
reaper closes sessions idle for longer than ``idle_timeout``.

Fair share: every blocking call of a session's agent (tool calls) runs in a worker thread under the
session's own limiter, so one session's flood of slow calls waits in its own queue (without holding
threads) while other sessions' calls start at once; a session's queue is bounded. The control plane's calls
(reset, step, snapshot) have a limiter of their own: a reset never queues behind the agent's calls (it
interrupts them, see Environment.interrupt_agent).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from ..errors import AuthError, CapacityError, SessionNotFoundError, StorageError, TooManyCallsError
from .config import new_token

log = logging.getLogger(__name__)

Kind = Literal["default", "ws", "api"]


@dataclass
class Session:
    id: str
    env: Any  # hci_envs.env.Environment
    kind: Kind
    agent_token: str | None = None
    created: float = field(default_factory=time.monotonic)
    closed: bool = False
    #: Extra per-session services (VNC, recorders) register closers here.
    on_close: list[Callable[[], None]] = field(default_factory=list)
    #: The VNC side of the session (hci_envs.vnc.VncSession), when the server offers VNC.
    vnc: Any = None
    #: The session's recorder (recorders.Recorder), while one exists.
    recorder: Any = None
    #: The episode folders recorded in this session, oldest first (the collection page lists these).
    episodes: list[Any] = field(default_factory=list)
    #: The collection page's state for this session (hci_envs.server.collect_routes.CollectState).
    collect: Any = None
    #: The person's side of the agent's hand-over (hci_envs.server.handover_routes.PersonSide), with VNC.
    handover_side: Any = None
    #: Propose and accept's side (hci_envs.server.supervision_routes.SupervisionSide), with VNC.
    supervision_side: Any = None
    #: How the session's agent acts: "tools" (one tool per call) or "code" (CodeAct).
    mode: Literal["tools", "code"] = "tools"
    #: Blocking calls this session runs at once, and how many may wait.
    concurrency: int = 4
    max_queued: int = 256

    _start_lock: Any = None
    _limiter: Any = None
    _control_limiter: Any = None

    async def run_sync(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking call of this session in a worker thread, under the session's own limiter."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.concurrency)
        if self._limiter.statistics().tasks_waiting >= self.max_queued:
            raise TooManyCallsError(
                f"session {self.id} has {self.max_queued} calls waiting already; wait for some to finish",
                max_queued=self.max_queued,
            )
        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=self._limiter)

    async def run_control(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking control-plane call (reset, step, snapshot) of this session, apart from the agent's
        queue."""
        if self._control_limiter is None:
            self._control_limiter = anyio.CapacityLimiter(2)
        try:
            return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=self._control_limiter)
        except OSError as exc:  # a full disk is the caller's to hear about, as a typed error
            raise StorageError.translate(exc, f"running {getattr(fn, '__name__', 'a control call')}") or exc from exc

    async def ensure_started(self) -> None:
        """Bring up the desktop of a session created without one (a lazy default session) on first use."""
        if self.env.desktop is not None or self.closed:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self.env.desktop is None:
                await self.run_control(self.env.start)

    @property
    def idle_seconds(self) -> float:
        return time.monotonic() - self.env.last_used

    def check_agent_token(self, presented: str | None) -> None:
        if self.agent_token is None:
            return
        if presented is None or not hmac.compare_digest(presented.encode(), self.agent_token.encode()):
            raise AuthError(f"missing or wrong agent token for session {self.id}")


class SessionManager:
    def __init__(
        self,
        factory: Callable[[], Any],
        *,
        max_sessions: int,
        idle_timeout: float,
        agent_tokens: bool,
        default_agent_token: str | None = None,
        setup: Callable[[Session], None] | None = None,
        default_mode: Literal["tools", "code"] = "tools",
        concurrency: int = 4,
        max_queued: int = 256,
    ) -> None:
        self.default_mode = default_mode
        self.concurrency = concurrency
        self.max_queued = max_queued
        self._factory = factory
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self._agent_tokens = agent_tokens
        self._default_agent_token = default_agent_token
        self._sessions: dict[str, Session] = {}
        self._starting = 0
        self._lock = asyncio.Lock()
        self.default_id: str | None = None
        self.setup = setup or (lambda s: None)

    def __len__(self) -> int:
        return len(self._sessions)

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    async def create(self, kind: Kind, *, start: bool = True, mode: Literal["tools", "code"] | None = None) -> Session:
        """Make a session and (with ``start``) bring its desktop up; raises :class:`CapacityError` when full."""
        async with self._lock:
            active = len(self._sessions) + self._starting
            if active >= self.max_sessions:
                raise CapacityError(
                    f"server at capacity: {active}/{self.max_sessions} sessions active",
                    active_sessions=active,
                    max_sessions=self.max_sessions,
                )
            self._starting += 1
        env = None
        try:
            try:
                env = await anyio.to_thread.run_sync(self._factory)
            except OSError as exc:
                raise StorageError.translate(exc, "making a session") or exc from exc
            session_id = "default" if kind == "default" else uuid.uuid4().hex[:12]
            token = None
            if self._agent_tokens:
                token = (self._default_agent_token if kind == "default" else None) or new_token()
            session = Session(session_id, env, kind, token, mode=mode or self.default_mode,
                              concurrency=self.concurrency, max_queued=self.max_queued)
            self.setup(session)
            if start:
                await session.run_control(env.start)
        except BaseException:
            if env is not None:
                await anyio.to_thread.run_sync(env.close)
            raise
        finally:
            async with self._lock:
                self._starting -= 1
        async with self._lock:
            self._sessions[session.id] = session
            if kind == "default":
                self.default_id = session.id
        return session

    async def fork(self, source: Session, n: int) -> list[Session]:
        """``n`` new sessions whose desktops are live copies of ``source``'s (see Environment.fork), each with its
        own agent account, token and MCP path; they count against ``max_sessions`` (:class:`CapacityError` when
        they would not fit). All or nothing."""
        from ..env.forking import check_count

        check_count(n)
        async with self._lock:
            active = len(self._sessions) + self._starting
            if active + n > self.max_sessions:
                raise CapacityError(
                    f"a fork to {n} needs {n} free sessions: {active}/{self.max_sessions} are active",
                    active_sessions=active, max_sessions=self.max_sessions)
            self._starting += n
        envs: list[Any] = []
        made: list[Session] = []
        try:
            for _ in range(n):
                try:
                    envs.append(await anyio.to_thread.run_sync(self._factory))
                except OSError as exc:
                    raise StorageError.translate(exc, "making a session") or exc from exc
            await source.run_control(source.env.fork_into, envs)
            for env in envs:
                token = new_token() if self._agent_tokens else None
                session = Session(uuid.uuid4().hex[:12], env, "api", token, mode=source.mode,
                                  concurrency=self.concurrency, max_queued=self.max_queued)
                self.setup(session)
                made.append(session)
        except BaseException:
            with anyio.CancelScope(shield=True):  # a cancelled request too: nothing of the copies may stay
                for session in made:
                    for closer in session.on_close:
                        try:
                            await anyio.to_thread.run_sync(closer)
                        except Exception:
                            log.exception("closing a service of a fork's session failed")
                for env in envs:
                    await anyio.to_thread.run_sync(env.close)
            raise
        finally:
            async with self._lock:
                self._starting -= n
        async with self._lock:
            for session in made:
                self._sessions[session.id] = session
        return made

    def get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None or session.closed:
            raise SessionNotFoundError(f"no session {session_id!r}", session_id=session_id)
        return session

    def default(self) -> Session:
        if self.default_id is None:
            raise SessionNotFoundError("the server has no default session", session_id="default")
        return self.get(self.default_id)

    async def close(self, session_id: str) -> None:
        async with self._lock:
            session = self._sessions.pop(session_id, None)
            if session is not None and session_id == self.default_id:
                self.default_id = None
        if session is None or session.closed:
            return
        session.closed = True
        for closer in session.on_close:
            try:
                await anyio.to_thread.run_sync(closer)
            except Exception:
                log.exception("closing a service of session %s failed", session_id)
        await anyio.to_thread.run_sync(session.env.close)

    async def close_all(self) -> None:
        for session_id in list(self._sessions):
            await self.close(session_id)

    async def reap_forever(self) -> None:
        """Close non-default sessions idle longer than the idle timeout."""
        interval = max(0.2, min(5.0, self.idle_timeout / 4))
        while True:
            await anyio.sleep(interval)
            for session in self.sessions():
                if session.kind != "default" and session.idle_seconds > self.idle_timeout:
                    log.info("closing idle session %s (%.0fs idle)", session.id, session.idle_seconds)
                    await self.close(session.id)
