"""Clients of an environment server, sync and async, over OpenEnv's WebSocket protocol.

    with HciEnvClient.from_local(size=(1280, 800), apps=["xterm"]) as env:
        result = env.reset()
        result = env.step({"type": "click", "x": 100, "y": 200})
        image = result.observation.screenshot.to_pil()

Each client connection is one session: its own desktop, closed with the client; or, with ``session_id``, the
connection attaches to a session that outlives it (``"default"``, or one made with ``POST /sessions``).
``state()`` tells the session's MCP URL and agent token, for handing the desktop to an agent. Imports with the
light install (pydantic, httpx, websockets, python-xlib for key names): no X server or server packages.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from .errors import EnvironmentStateError, TransportError, error_from_dict
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


def ws_url(base_url: str, session_id: str | None = None) -> str:
    """The ``/ws`` URL of a server; with ``session_id``, the socket attaches to that session (it outlives the
    socket) instead of getting a desktop of its own."""
    url = base_url.rstrip("/")
    if url.startswith("https://"):
        url = "wss://" + url[8:]
    elif url.startswith("http://"):
        url = "ws://" + url[7:]
    elif not url.startswith(("ws://", "wss://")):
        url = "ws://" + url
    return url + "/ws" + (f"?session_id={quote(session_id, safe='')}" if session_id else "")


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


#: The task API's environment name every server answers to (besides its class's): OpenEnv's ``/{env_name}/...``.
TASK_API = "/hci-envs"


def _task_range(split: str, start: int | None, stop: int | None) -> tuple[str, dict[str, Any]]:
    """The task API's route and body for a listing of ``split`` (a range where ``start`` or ``stop`` is given)."""
    if start is None and stop is None:
        return f"{TASK_API}/tasks", {"split": split}
    return f"{TASK_API}/task_range", {"split": split, "start": start, "stop": stop}


def _control_reply(response: Any) -> Any:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code >= 400:
        detail = body.get("error") if isinstance(body, dict) and isinstance(body.get("error"), dict) else {
            "code": None, "message": f"HTTP {response.status_code}: {response.text[:200]}"}
        raise error_from_dict(detail)
    if not isinstance(body, dict | list):
        raise TransportError(f"the server answered {response.request.url.path} with something other than JSON")
    return body


def _result(message: dict[str, Any]) -> StepResult:
    data = message.get("data") or {}
    obs = Observation.model_validate(data.get("observation") or {})
    obs.reward = data.get("reward")
    obs.done = bool(data.get("done", False))
    return StepResult(obs, data.get("reward"), bool(data.get("done", False)), data.get("metadata"))


class ClientBase:
    """What both clients share: the messages they send and how replies are read (no I/O here). The sync and
    async clients only carry messages (a WebSocket per client, HTTP for the snapshot route)."""

    def __init__(self, base_url: str, *, control_token: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 provider: Any = None, session_id: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.session_id = session_id
        self.control_token = control_token
        self.timeout = timeout
        self.provider = provider
        #: What the server said of this client's session when it made it for a fork (its ``agent_token``,
        #: ``mcp_url``, VNC URLs...); empty otherwise.
        self.session: dict[str, Any] = {}
        #: A session made for this client (a fork's copy) ends with it; one it attached to lives on.
        self._owns_session = False
        self._closed = False
        self._ws: Any = None

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.control_token}"} if self.control_token else {}

    def _check_open(self) -> None:
        if self._closed:
            raise EnvironmentStateError("the client is closed")

    # -- providers -------------------------------------------------------------------------------------
    @staticmethod
    def _local_provider(env: str, options: dict[str, Any]) -> tuple[Any, str | None]:
        from .providers import LocalProvider

        return LocalProvider(env, **options), options.get("control_token")

    @staticmethod
    def _docker_provider(image: str, options: dict[str, Any]) -> tuple[Any, str | None]:
        from .providers import DockerProvider

        provider = DockerProvider(image, **options)
        return provider, provider.control_token

    # -- messages out ----------------------------------------------------------------------------------
    @staticmethod
    def _reset_message(seed: int | None, episode_id: str | None, options: dict[str, Any]) -> dict[str, Any]:
        data = {k: v for k, v in {"seed": seed, "episode_id": episode_id, **options}.items() if v is not None}
        return {"type": "reset", "data": data}

    @staticmethod
    def _step_message(action: Any) -> dict[str, Any]:
        return {"type": "step", "data": _payload(action)}

    _STATE = {"type": "state"}
    _CLOSE = {"type": "close"}
    _LIST_TOOLS = {"type": "list_tools"}

    @staticmethod
    def _tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"tool": name, "arguments": arguments}

    def _snapshot_body(self, name: str, state: EnvState) -> dict[str, Any]:
        return {"name": name, "session_id": state.session_id}

    @staticmethod
    def _checkpoint_path(state: EnvState) -> str:
        return f"/sessions/{state.session_id or 'default'}/checkpoint"

    @staticmethod
    def _fork_message(n: int) -> dict[str, Any]:
        return {"type": "fork", "data": {"n": n}}

    #: The client of a fork's copies: the plain sync or async client (a pool's claim forks into plain clients).
    _fork_class: Any = None

    def _forked(self, message: dict[str, Any]) -> list[Any]:
        """A client of each session a fork made (each closes its session when it closes)."""
        clients = []
        for info in (message.get("data") or {}).get("sessions") or []:
            client = self._fork_class(self.base_url, control_token=self.control_token, timeout=self.timeout,
                                      session_id=info["session_id"])
            client.session, client._owns_session = dict(info), True
            clients.append(client)
        return clients

    @staticmethod
    def _score_path(state: EnvState) -> str:
        return f"/sessions/{state.session_id}/score" if state.session_id else "/score"

    # -- replies in ------------------------------------------------------------------------------------
    _decode = staticmethod(_decode)
    _result = staticmethod(_result)
    _control_reply = staticmethod(_control_reply)

    @staticmethod
    def _state(message: dict[str, Any]) -> EnvState:
        return EnvState.model_validate(message.get("data") or {})

    @staticmethod
    def _tools(result: StepResult) -> list[dict[str, Any]]:
        return list(getattr(result.observation, "tools", None) or [])

    def _connect_kwargs(self) -> dict[str, Any]:
        # no per-message deflate: observations are base64 images, which it cannot shrink
        return {"additional_headers": self._headers, "max_size": MAX_MESSAGE, "open_timeout": self.timeout,
                "proxy": None, "compression": None}

    def _connect_error(self, exc: Exception) -> TransportError:
        return TransportError(f"cannot connect to {ws_url(self.base_url, self.session_id)}: {exc}")

    def _broken(self, exc: Exception) -> TransportError:
        return TransportError(f"the connection to {self.base_url} broke: {exc}")

    def _no_reply(self) -> TransportError:
        return TransportError(f"no reply within {self.timeout}s; the connection was dropped")

    def _unreachable(self, exc: Exception) -> TransportError:
        return TransportError(f"cannot reach {self.base_url}: {exc}")


class HciEnvClient(ClientBase):
    """A synchronous client; one WebSocket session (its own desktop) per client."""

    # -- construction ----------------------------------------------------------------------------------
    @classmethod
    def from_local(cls, env: str = "desktop", *, timeout: float = DEFAULT_TIMEOUT, **options: Any) -> HciEnvClient:
        """Start ``hci-envs serve`` locally (no Docker), connect, and stop the server when the client closes."""
        provider, token = cls._local_provider(env, options)
        return cls.from_provider(provider, timeout=timeout, control_token=token)

    @classmethod
    def from_docker_image(cls, image: str, *, timeout: float = DEFAULT_TIMEOUT, **options: Any) -> HciEnvClient:
        """Start ``image`` as a container (see :class:`hci_envs.providers.DockerProvider` for ``options``),
        connect with the tokens the provider generated, and remove the container when the client closes."""
        provider, token = cls._docker_provider(image, options)
        return cls.from_provider(provider, timeout=timeout, control_token=token)

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

    # -- I/O ---------------------------------------------------------------------------------------------
    def connect(self) -> HciEnvClient:
        from websockets.sync.client import connect

        self._check_open()
        if self._ws is None:
            try:
                # entered as a context manager, as websockets asks, and left in _drop()
                self._ws = connect(ws_url(self.base_url, self.session_id), **self._connect_kwargs()).__enter__()
            except Exception as exc:
                raise self._connect_error(exc) from exc
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
            raise self._no_reply() from None
        except Exception as exc:
            self._drop()
            raise self._broken(exc) from exc
        return self._decode(raw)

    def _control(self, path: str, body: dict[str, Any] | None = None, *, delete: bool = False) -> Any:
        """A control-plane request: GET ``path``, POST ``body`` to it, or DELETE it."""
        import httpx

        try:
            if delete:
                return httpx.delete(f"{self.base_url}{path}", headers=self._headers, timeout=self.timeout)
            if body is None:
                return httpx.get(f"{self.base_url}{path}", headers=self._headers, timeout=self.timeout)
            return httpx.post(f"{self.base_url}{path}", json=body, headers=self._headers, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None

    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                ws.close()
            except Exception:
                pass

    # -- the environment ------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> StepResult:
        return self._result(self._request(self._reset_message(seed, episode_id, options)))

    def step(self, action: Any) -> StepResult:
        return self._result(self._request(self._step_message(action)))

    def state(self) -> EnvState:
        return self._state(self._request(self._STATE))

    def call_tool(self, name: str, **arguments: Any) -> StepResult:
        return self.step(self._tool_call(name, arguments))

    def list_tools(self) -> list[dict[str, Any]]:
        return self._tools(self.step(self._LIST_TOOLS))

    def snapshot(self, name: str) -> dict[str, Any]:
        """Capture this session's files as ``name``; ``reset(snapshot=name)`` branches from it later.
        Control plane only (needs the control token where one is set); refused in production mode."""
        return self._control_reply(self._control("/snapshot", self._snapshot_body(name, self.state())))

    def score(self) -> dict[str, Any]:
        """Run the checker of the task this session was reset into (``reset(task=ID)``): ``{"task", "score",
        "success", "details"}``. Control plane only: the checker runs on the server, beside the answers."""
        return self._control_reply(self._control(self._score_path(self.state()), {}))

    def checkpoint(self, name: str) -> dict[str, Any]:
        """Keep this session as it is now under ``name`` (a forkable desktop: every process with its memory, the
        home, the episode); ``reset(checkpoint=name)`` returns to it. Control plane only."""
        return self._control_reply(self._control(self._checkpoint_path(self.state()), {"name": name}))

    def fork(self, n: int) -> list[HciEnvClient]:
        """``n`` new sessions whose desktops are live copies of this session's as it is now (a server with
        forkable desktops: ``serve --desktop forkable``), as clients of their own; each one's ``session`` holds
        its agent token and URLs, and closing it closes its session. Control plane only."""
        return self._forked(self._request(self._fork_message(n)))

    # -- the server's tasks (OpenEnv's task API; control plane) -------------------------------------------
    def splits(self) -> list[dict[str, Any]]:
        """The server's splits: ``[{"name", "type", "num_tasks"}]``; ``reset(split=, index=)`` starts one's task."""
        return self._control_reply(self._control(f"{TASK_API}/splits"))

    def num_tasks(self, split: str = "all") -> int:
        return self._control_reply(self._control(f"{TASK_API}/num_tasks", {"split": split}))["num_tasks"]

    def task(self, split: str, index: int) -> dict[str, Any]:
        """Task ``index`` of ``split`` as the agent may see it (never its checker)."""
        return self._control_reply(self._control(f"{TASK_API}/task", {"split": split, "index": index}))["task"]

    def tasks(self, split: str = "all", start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        """The tasks of ``split`` (the first thousand), or those from ``start`` to ``stop``."""
        return self._control_reply(self._control(*_task_range(split, start, stop)))["tasks"]

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._ws is not None:
                try:
                    self._ws.send(json.dumps(self._CLOSE))
                except Exception:
                    pass
                self._drop()
            if self._owns_session:
                self._control(f"/sessions/{self.session_id}", delete=True)
        finally:
            self._closed = True
            if self.provider is not None:
                self.provider.stop()

    def __enter__(self) -> HciEnvClient:
        return self.connect()

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncHciEnvClient(ClientBase):
    """The asyncio twin of :class:`HciEnvClient`: the same messages, carried with asyncio."""

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(base_url, **kwargs)
        self._lock = asyncio.Lock()

    # -- construction ----------------------------------------------------------------------------------
    @classmethod
    async def from_local(cls, env: str = "desktop", *, timeout: float = DEFAULT_TIMEOUT,
                         **options: Any) -> AsyncHciEnvClient:
        """Start ``hci-envs serve`` locally (no Docker), connect, and stop the server when the client closes."""
        provider, token = cls._local_provider(env, options)
        return await cls.from_provider(provider, timeout=timeout, control_token=token)

    @classmethod
    async def from_docker_image(cls, image: str, *, timeout: float = DEFAULT_TIMEOUT,
                                **options: Any) -> AsyncHciEnvClient:
        """Start ``image`` as a container, connect, and remove the container when the client closes."""
        provider, token = cls._docker_provider(image, options)
        return await cls.from_provider(provider, timeout=timeout, control_token=token)

    @classmethod
    async def from_provider(cls, provider: Any, *, timeout: float = DEFAULT_TIMEOUT,
                            control_token: str | None = None, start_timeout: float = 90.0) -> AsyncHciEnvClient:
        headers = {"Authorization": f"Bearer {control_token}"} if control_token else None
        base_url = await asyncio.to_thread(provider.start, start_timeout, headers)
        client = cls(base_url, timeout=timeout, provider=provider, control_token=control_token)
        try:
            await client.connect()
        except BaseException:
            await asyncio.to_thread(provider.stop)
            raise
        return client

    # -- I/O ---------------------------------------------------------------------------------------------
    async def connect(self) -> AsyncHciEnvClient:
        from websockets.asyncio.client import connect

        self._check_open()
        if self._ws is None:
            try:
                self._ws = await connect(ws_url(self.base_url, self.session_id), **self._connect_kwargs()).__aenter__()
            except Exception as exc:
                raise self._connect_error(exc) from exc
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
                raise self._no_reply() from None
            except Exception as exc:
                await self._drop()
                raise self._broken(exc) from exc
        return self._decode(raw)

    async def _control(self, path: str, body: dict[str, Any] | None = None, *, delete: bool = False) -> Any:
        """See :meth:`HciEnvClient._control`."""
        import httpx

        try:
            async with httpx.AsyncClient(timeout=self.timeout) as http:
                if delete:
                    return await http.delete(f"{self.base_url}{path}", headers=self._headers)
                if body is None:
                    return await http.get(f"{self.base_url}{path}", headers=self._headers)
                return await http.post(f"{self.base_url}{path}", json=body, headers=self._headers)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None

    async def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                await ws.close()
            except Exception:
                pass

    # -- the environment ------------------------------------------------------------------------------
    async def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> StepResult:
        return self._result(await self._request(self._reset_message(seed, episode_id, options)))

    async def step(self, action: Any) -> StepResult:
        return self._result(await self._request(self._step_message(action)))

    async def state(self) -> EnvState:
        return self._state(await self._request(self._STATE))

    async def call_tool(self, name: str, **arguments: Any) -> StepResult:
        return await self.step(self._tool_call(name, arguments))

    async def list_tools(self) -> list[dict[str, Any]]:
        return self._tools(await self.step(self._LIST_TOOLS))

    async def snapshot(self, name: str) -> dict[str, Any]:
        """Capture this session's files as ``name``; ``reset(snapshot=name)`` branches from it later."""
        return self._control_reply(await self._control("/snapshot", self._snapshot_body(name, await self.state())))

    async def score(self) -> dict[str, Any]:
        """Run the checker of the task this session was reset into; see :meth:`HciEnvClient.score`."""
        return self._control_reply(await self._control(self._score_path(await self.state()), {}))

    async def checkpoint(self, name: str) -> dict[str, Any]:
        """See :meth:`HciEnvClient.checkpoint`."""
        return self._control_reply(await self._control(self._checkpoint_path(await self.state()), {"name": name}))

    async def fork(self, n: int) -> list[AsyncHciEnvClient]:
        """See :meth:`HciEnvClient.fork`."""
        return self._forked(await self._request(self._fork_message(n)))

    async def splits(self) -> list[dict[str, Any]]:
        """See :meth:`HciEnvClient.splits`."""
        return self._control_reply(await self._control(f"{TASK_API}/splits"))

    async def num_tasks(self, split: str = "all") -> int:
        return self._control_reply(await self._control(f"{TASK_API}/num_tasks", {"split": split}))["num_tasks"]

    async def task(self, split: str, index: int) -> dict[str, Any]:
        return self._control_reply(await self._control(f"{TASK_API}/task", {"split": split, "index": index}))["task"]

    async def tasks(self, split: str = "all", start: int | None = None,
                    stop: int | None = None) -> list[dict[str, Any]]:
        return self._control_reply(await self._control(*_task_range(split, start, stop)))["tasks"]

    async def close(self) -> None:
        if self._closed:
            return
        try:
            if self._ws is not None:
                try:
                    await self._ws.send(json.dumps(self._CLOSE))
                except Exception:
                    pass
                await self._drop()
            if self._owns_session:
                await self._control(f"/sessions/{self.session_id}", delete=True)
        finally:
            self._closed = True
            if self.provider is not None:
                await asyncio.to_thread(self.provider.stop)

    async def __aenter__(self) -> AsyncHciEnvClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


HciEnvClient._fork_class = HciEnvClient
AsyncHciEnvClient._fork_class = AsyncHciEnvClient
