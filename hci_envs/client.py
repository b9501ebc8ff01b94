"""Clients of an environment server, sync and async, over OpenEnv's WebSocket protocol.

    with HciEnvClient.from_local(size=(1280, 800), apps=["xterm"]) as env:
        result = env.reset()
        result = env.step({"type": "click", "x": 100, "y": 200})
        image = result.observation.screenshot.to_pil()

Each client connection is one session: its own desktop, closed with the client. ``state()`` tells the
session's MCP URL and agent token, for handing the desktop to an agent. Imports with the light install
(pydantic, httpx, websockets, python-xlib for key names): no X server or server packages.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from .errors import EnvironmentStateError, HciEnvsError, TransportError, error_from_dict
from .protocol import EnvState, Observation

DEFAULT_TIMEOUT = 120.0
MAX_MESSAGE = 64 * 1024 * 1024


@dataclass
class StepResult:
    """One reply of reset or step."""

    observation: Observation
    reward: float | None
    done: bool
    metadata: dict[str, Any] | None = None

    @property
    def screenshot(self) -> Any:
        return self.observation.screenshot


def ws_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    if url.startswith("https://"):
        url = "wss://" + url[8:]
    elif url.startswith("http://"):
        url = "ws://" + url[7:]
    elif not url.startswith(("ws://", "wss://")):
        url = "ws://" + url
    return url + "/ws"


def _payload(action: Any) -> Any:
    if isinstance(action, BaseModel):
        return json.loads(action.model_dump_json())
    if isinstance(action, list):
        return [_payload(a) for a in action]
    return action


def _decode(raw: str | bytes) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except ValueError as exc:
        raise TransportError(f"the server sent invalid JSON: {exc}") from None
    if not isinstance(message, dict):
        raise TransportError("the server sent a non-object message")
    if message.get("type") == "error":
        data = message.get("data") or {}
        detail = data.get("error") if isinstance(data.get("error"), dict) else {
            "code": data.get("code"), "message": data.get("message", "server error")
        }
        raise error_from_dict(detail)
    return message


def _snapshot_reply(response: Any) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code >= 400:
        detail = body.get("error") if isinstance(body, dict) and isinstance(body.get("error"), dict) else {
            "code": None, "message": f"HTTP {response.status_code}: {response.text[:200]}"}
        raise error_from_dict(detail)
    if not isinstance(body, dict):
        raise TransportError("the server answered /snapshot with something other than a JSON object")
    return body


def _result(message: dict[str, Any]) -> StepResult:
    data = message.get("data") or {}
    obs = Observation.model_validate(data.get("observation") or {})
    obs.reward = data.get("reward")
    obs.done = bool(data.get("done", False))
    return StepResult(obs, data.get("reward"), bool(data.get("done", False)), data.get("metadata"))


class _Base:
    def __init__(self, base_url: str, *, control_token: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 provider: Any = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.control_token = control_token
        self.timeout = timeout
        self.provider = provider
        self._closed = False

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.control_token}"} if self.control_token else {}

    def _check_open(self) -> None:
        if self._closed:
            raise EnvironmentStateError("the client is closed")


class HciEnvClient(_Base):
    """A synchronous client; one WebSocket session (its own desktop) per client."""

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._ws: Any = None

    # -- construction ----------------------------------------------------------------------------------
    @classmethod
    def from_local(cls, env: str = "desktop", *, timeout: float = DEFAULT_TIMEOUT, **options: Any) -> HciEnvClient:
        """Start ``hci-envs serve`` locally (no Docker), connect, and stop the server when the client closes."""
        from .providers import LocalProvider

        return cls.from_provider(LocalProvider(env, **options), timeout=timeout,
                                 control_token=options.get("control_token"))

    @classmethod
    def from_docker_image(cls, image: str, *, timeout: float = DEFAULT_TIMEOUT, **options: Any) -> HciEnvClient:
        """Start ``image`` as a container (see :class:`hci_envs.providers.DockerProvider` for ``options``),
        connect with the tokens the provider generated, and remove the container when the client closes."""
        from .providers import DockerProvider

        provider = DockerProvider(image, **options)
        return cls.from_provider(provider, timeout=timeout, control_token=provider.control_token)

    @classmethod
    def from_provider(cls, provider: Any, *, timeout: float = DEFAULT_TIMEOUT, control_token: str | None = None,
                      start_timeout: float = 90.0) -> HciEnvClient:
        headers = {"Authorization": f"Bearer {control_token}"} if control_token else None
        base_url = provider.start(timeout=start_timeout, headers=headers)
        client = cls(base_url, timeout=timeout, provider=provider, control_token=control_token)
        try:
            client.connect()
        except BaseException:
            provider.stop()
            raise
        return client

    # -- connection -----------------------------------------------------------------------------------
    def connect(self) -> HciEnvClient:
        from websockets.sync.client import connect

        self._check_open()
        if self._ws is None:
            try:
                # entered as a context manager, as websockets asks, and left in _drop()
                self._ws = connect(
                    ws_url(self.base_url), additional_headers=self._headers, max_size=MAX_MESSAGE,
                    open_timeout=self.timeout, proxy=None,
                ).__enter__()
            except Exception as exc:
                raise TransportError(f"cannot connect to {ws_url(self.base_url)}: {exc}") from exc
        return self

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        self._check_open()
        self.connect()
        try:
            try:
                self._ws.send(json.dumps(message))
            except Exception:
                # The server may have refused the session (a capacity error frame, then close) before we
                # sent anything: that frame explains the refusal better than the broken pipe does.
                raw = self._ws.recv(timeout=0.5)
            else:
                raw = self._ws.recv(timeout=self.timeout)
        except TimeoutError:
            self._drop()
            raise TransportError(f"no reply within {self.timeout}s; the connection was dropped") from None
        except HciEnvsError:
            raise
        except Exception as exc:
            self._drop()
            raise TransportError(f"the connection to {self.base_url} broke: {exc}") from exc
        return _decode(raw)

    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:
                pass

    # -- the environment ------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> StepResult:
        data = {k: v for k, v in {"seed": seed, "episode_id": episode_id, **options}.items() if v is not None}
        return _result(self._request({"type": "reset", "data": data}))

    def step(self, action: Any) -> StepResult:
        return _result(self._request({"type": "step", "data": _payload(action)}))

    def state(self) -> EnvState:
        return EnvState.model_validate(self._request({"type": "state"}).get("data") or {})

    def call_tool(self, name: str, **arguments: Any) -> StepResult:
        return self.step({"tool": name, "arguments": arguments})

    def list_tools(self) -> list[dict[str, Any]]:
        result = self.step({"type": "list_tools"})
        return list(getattr(result.observation, "tools", None) or [])

    def snapshot(self, name: str) -> dict[str, Any]:
        """Capture this session's files as ``name``; ``reset(snapshot=name)`` branches from it later.
        Control plane only (needs the control token where one is set); refused in production mode."""
        import httpx

        session_id = self.state().session_id
        try:
            response = httpx.post(f"{self.base_url}/snapshot", json={"name": name, "session_id": session_id},
                                  headers=self._headers, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach {self.base_url}: {exc}") from None
        return _snapshot_reply(response)

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._ws is not None:
                try:
                    self._ws.send(json.dumps({"type": "close"}))
                except Exception:
                    pass
                self._drop()
        finally:
            self._closed = True
            if self.provider is not None:
                self.provider.stop()

    def __enter__(self) -> HciEnvClient:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncHciEnvClient(_Base):
    """The asyncio twin of :class:`HciEnvClient`."""

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._ws: Any = None
        self._lock = asyncio.Lock()

    @classmethod
    async def from_local(cls, env: str = "desktop", *, timeout: float = DEFAULT_TIMEOUT,
                         **options: Any) -> AsyncHciEnvClient:
        from .providers import LocalProvider

        provider = LocalProvider(env, **options)
        token = options.get("control_token")
        headers = {"Authorization": f"Bearer {token}"} if token else None
        base_url = await asyncio.to_thread(provider.start, 90.0, headers)
        client = cls(base_url, timeout=timeout, provider=provider, control_token=token)
        try:
            await client.connect()
        except BaseException:
            await asyncio.to_thread(provider.stop)
            raise
        return client

    async def connect(self) -> AsyncHciEnvClient:
        from websockets.asyncio.client import connect

        self._check_open()
        if self._ws is None:
            try:
                self._ws = await connect(
                    ws_url(self.base_url), additional_headers=self._headers, max_size=MAX_MESSAGE,
                    open_timeout=self.timeout, proxy=None,
                ).__aenter__()
            except Exception as exc:
                raise TransportError(f"cannot connect to {ws_url(self.base_url)}: {exc}") from exc
        return self

    async def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        self._check_open()
        await self.connect()
        async with self._lock:
            try:
                try:
                    await self._ws.send(json.dumps(message))
                except Exception:
                    raw = await asyncio.wait_for(self._ws.recv(), 0.5)  # a refusal frame sent on connect
                else:
                    raw = await asyncio.wait_for(self._ws.recv(), self.timeout)
            except asyncio.TimeoutError:
                await self._drop()
                raise TransportError(f"no reply within {self.timeout}s; the connection was dropped") from None
            except Exception as exc:
                await self._drop()
                raise TransportError(f"the connection to {self.base_url} broke: {exc}") from exc
        return _decode(raw)

    async def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                await ws.close()
            except Exception:
                pass

    async def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> StepResult:
        data = {k: v for k, v in {"seed": seed, "episode_id": episode_id, **options}.items() if v is not None}
        return _result(await self._request({"type": "reset", "data": data}))

    async def step(self, action: Any) -> StepResult:
        return _result(await self._request({"type": "step", "data": _payload(action)}))

    async def state(self) -> EnvState:
        return EnvState.model_validate((await self._request({"type": "state"})).get("data") or {})

    async def call_tool(self, name: str, **arguments: Any) -> StepResult:
        return await self.step({"tool": name, "arguments": arguments})

    async def list_tools(self) -> list[dict[str, Any]]:
        result = await self.step({"type": "list_tools"})
        return list(getattr(result.observation, "tools", None) or [])

    async def snapshot(self, name: str) -> dict[str, Any]:
        """Capture this session's files as ``name``; ``reset(snapshot=name)`` branches from it later."""
        import httpx

        session_id = (await self.state()).session_id
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as http:
                response = await http.post(f"{self.base_url}/snapshot", json={"name": name, "session_id": session_id},
                                           headers=self._headers)
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach {self.base_url}: {exc}") from None
        return _snapshot_reply(response)

    async def close(self) -> None:
        if self._closed:
            return
        try:
            if self._ws is not None:
                try:
                    await self._ws.send(json.dumps({"type": "close"}))
                except Exception:
                    pass
                await self._drop()
        finally:
            self._closed = True
            if self.provider is not None:
                await asyncio.to_thread(self.provider.stop)

    async def __aenter__(self) -> AsyncHciEnvClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
