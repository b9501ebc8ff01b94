"""Claimed desktops: the usual clients, attached to a pooled desktop's session, that know how to end.

A claim is an :class:`~hci_envs.client.HciEnvClient` (or, from ``claim_async``, an
:class:`~hci_envs.client.AsyncHciEnvClient`) whose WebSocket attaches to the desktop's default session, so the
desktop the pool warmed up is the one the trainer drives. It adds:

* ``node_id`` (the Ray node's id, hex), ``mcp_url`` and ``agent_token`` (to hand the desktop to an agent);
* an end: once released (``close()``, ``pool.release(env)``), lost with its node, or its pool closed, every call
  raises the typed error of that end at once, without touching the network;
* a judgement on broken connections: a connection that breaks or stays silent past the timeout is put to the
  pool, which asks the desktop's actor and then its server (each within ``probe_timeout``); a desktop that is
  gone or whose server is silent raises :class:`~hci_envs.errors.DesktopLostError`, one that still answers
  leaves the TransportError as it was.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from ..client import AsyncHciEnvClient, HciEnvClient
from ..errors import HciEnvsError, TransportError


class Claim:
    """What both kinds of claimed desktop share. ``pool`` is the lending DesktopPool, ``desktop`` its record."""

    _pool: Any
    _desktop: Any
    _ended: HciEnvsError | None

    def _attach(self, pool: Any, desktop: Any) -> None:
        self._pool, self._desktop, self._ended = pool, desktop, None
        #: The Ray node the desktop runs on (hex), its MCP endpoint and the agent's token for it.
        self.node_id: str = desktop.node_id
        self.mcp_url: str = desktop.mcp_url
        self.agent_token: str = desktop.agent_token

    def _check_open(self) -> None:
        ended = self._ended
        if ended is not None:
            # a fresh exception each time: re-raising one instance would grow its traceback with every call
            raise type(ended)(ended.message, **ended.details)
        super()._check_open()  # type: ignore[misc]

    def _connect_kwargs(self) -> dict[str, Any]:
        # connecting to a warm desktop is one handshake; a peer that does not complete it is judged, not awaited
        # No keepalive pings: whether a claimed desktop lives is the pool's call (Ray's node health checks, then
        # its probe of the actor), and a ping timing out first, on a loaded machine, turned a lost node into a
        # bare TransportError. A reply that never comes is still bounded by the pool's step_timeout.
        return {**super()._connect_kwargs(), "open_timeout": self._pool.probe_timeout,  # type: ignore[misc]
                "close_timeout": 2.0, "ping_interval": None}

    def _end(self, error: HciEnvsError) -> None:
        """Mark the claim over (released, lost, pool closed) and cut its connection, from any thread: a call
        blocked on the desktop returns now instead of at its timeout."""
        if self._ended is None:
            self._ended = error
        self._abort()

    def _abort(self) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        state = "open" if self._ended is None else self._ended.code.lower()
        return f"<{type(self).__name__} {self.base_url} node {self.node_id[:12]} {state}>"  # type: ignore[attr-defined]


class PooledEnv(Claim, HciEnvClient):
    """A desktop claimed with ``DesktopPool.claim()``; ``close()`` (or leaving ``with``) gives it back."""

    def __init__(self, pool: Any, desktop: Any) -> None:
        super().__init__(desktop.base_url, control_token=desktop.control_token, timeout=pool.step_timeout,
                         session_id="default")
        self._attach(pool, desktop)

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            return super()._request(message)
        except TransportError as exc:
            verdict = self._pool._judge(self._desktop, exc)
            if verdict is exc:
                raise
            raise verdict from exc

    def _abort(self) -> None:
        ws = self._ws
        if ws is not None:
            try:
                # wakes a recv() blocked in another thread; the connection's reader then closes the socket
                ws.socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """Give the desktop back to the pool (reset there, in the background)."""
        self._pool.release(self)
        self._drop()
        self._closed = True


class AsyncPooledEnv(Claim, AsyncHciEnvClient):
    """A desktop claimed with ``await DesktopPool.claim_async()``; ``await close()`` gives it back."""

    def __init__(self, pool: Any, desktop: Any) -> None:
        super().__init__(desktop.base_url, control_token=desktop.control_token, timeout=pool.step_timeout,
                         session_id="default")
        self._attach(pool, desktop)
        self._loop: asyncio.AbstractEventLoop | None = None

    async def connect(self) -> AsyncPooledEnv:
        self._loop = asyncio.get_running_loop()
        await super().connect()
        return self

    async def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            return await super()._request(message)
        except TransportError as exc:
            verdict = await self._pool._judge_async(self._desktop, exc)
            if verdict is exc:
                raise
            raise verdict from exc

    def _abort(self) -> None:
        ws, loop = self._ws, self._loop
        if ws is not None and loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(ws.transport.abort)
            except RuntimeError:  # the loop closed meanwhile
                pass

    async def close(self) -> None:
        """Give the desktop back to the pool (reset there, in the background)."""
        self._pool.release(self)
        await self._drop()
        self._closed = True
