"""The DevTools protocol of the desktop's browser, on the guest API's port (only the desktop's owner may call it):
what Playwright's ``connect_over_cdp`` asks for, which OSWorld's set-up steps and getters use.

* ``GET /json/version``: the browser's version and where its WebSocket is, or 503 when no browser with
  DevTools runs (OSWorld's harness retries then, as while Chrome starts);
* WebSocket ``/devtools/browser/{id}``: the protocol itself, each message relayed to the browser and back.

The browser is the agent's (``google-chrome`` on its PATH, :mod:`hci_envs.tools.osworld_chrome`), reached
through a socket in its private runtime folder by a small connector run on the agent's side per connection.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..tools.osworld_chrome import CONNECTOR, SOCKET_NAME
from ..tools.osworld_profile import agent_env

#: The one browser target a connection reaches (the browser itself; pages are reached through it).
BROWSER_PATH = "/devtools/browser/hci-envs"
#: The largest message relayed (chromium's own WebSocket takes up to 256 MiB; a screenshot of a page is large).
MAX_MESSAGE = 256 * 1024 * 1024
#: How long the connector may take to reach the browser, and /json/version to get its answer.
CONNECT_TIMEOUT = 15.0


def _refusal(message: str) -> Response:
    """503, as the guest API's refusals are written (OSWorld's harness retries while the browser starts)."""
    return JSONResponse({"status": "error", "message": message, "error": message}, status_code=503)


class _Browser:
    """One connection to the agent's browser: the connector's process, its pipes as asyncio streams."""

    def __init__(self, proc: subprocess.Popen[bytes], reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 desktop: Any) -> None:
        self.proc, self.reader, self.writer, self.desktop = proc, reader, writer, desktop

    @classmethod
    async def open(cls, desktop: Any) -> _Browser | None:
        """Connected to the browser, or None when none with DevTools runs."""
        proc = desktop.spawn_agent("osworld-devtools", ["python3", "-I", "-c", CONNECTOR, SOCKET_NAME],
                                   env=agent_env(desktop), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_MESSAGE)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), proc.stdout)
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, proc.stdin)
        browser = cls(proc, reader, asyncio.StreamWriter(transport, protocol, None, loop), desktop)
        try:
            connected = await asyncio.wait_for(reader.readexactly(1), CONNECT_TIMEOUT)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError):
            connected = b""
        if connected != b"\0":
            browser.close()
            return None
        return browser

    async def send(self, message: str) -> None:
        self.writer.write(message.encode() + b"\0")
        await self.writer.drain()

    async def receive(self) -> str | None:
        """The browser's next message, or None when the connection has ended."""
        try:
            return (await self.reader.readuntil(b"\0"))[:-1].decode()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return None

    def close(self) -> None:
        self.writer.close()
        self.desktop.processes.stop(self.proc, timeout=1.0)


class DevTools:
    """The two routes, over the guest API's session (``session()``: the default session, started)."""

    def __init__(self, session: Any) -> None:
        self._session = session

    async def version(self, request: Request) -> Response:
        session = await self._session()
        browser = await _Browser.open(session.env.desktop)
        if browser is None:
            return _refusal("no browser with DevTools runs on the desktop: start google-chrome")
        try:
            await browser.send(json.dumps({"id": 1, "method": "Browser.getVersion"}))
            answer = json.loads(await asyncio.wait_for(browser.receive(), CONNECT_TIMEOUT) or "{}")
        except (asyncio.TimeoutError, ValueError):
            return _refusal("the browser did not say its version")
        finally:
            browser.close()
        result = answer.get("result") or {}
        host = request.headers.get("host", "127.0.0.1")
        return JSONResponse({
            "Browser": result.get("product", ""), "Protocol-Version": result.get("protocolVersion", "1.3"),
            "User-Agent": result.get("userAgent", ""), "V8-Version": result.get("jsVersion", ""),
            "WebKit-Version": result.get("revision", ""), "webSocketDebuggerUrl": f"ws://{host}{BROWSER_PATH}",
        })

    async def relay(self, websocket: WebSocket) -> None:
        try:
            session = await self._session()
            browser = await _Browser.open(session.env.desktop)
        except Exception:  # noqa: BLE001 - the desktop is not running: said in the close frame
            browser = None
        if browser is None:
            await websocket.close(code=1011, reason="no browser with DevTools runs on the desktop")
            return
        await websocket.accept()

        async def to_browser() -> None:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                text = message.get("text")
                if text is None and message.get("bytes") is not None:
                    text = message["bytes"].decode("utf-8", "replace")
                if text is not None and "\0" not in text:  # a NUL would end the message early on the pipe
                    await browser.send(text)

        async def to_client() -> None:
            while (text := await browser.receive()) is not None:
                await websocket.send_text(text)

        tasks = [asyncio.ensure_future(to_browser()), asyncio.ensure_future(to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            browser.close()
            try:
                await websocket.close(code=1000)
            except (RuntimeError, WebSocketDisconnect):  # already closed by the client
                pass

    def routes(self, answering: Any) -> list[Any]:
        return [Route("/json/version", answering(self.version), methods=["GET"]),
                Route("/json/version/", answering(self.version), methods=["GET"]),
                WebSocketRoute(BROWSER_PATH, self.relay)]
