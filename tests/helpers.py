"""Helpers shared by the tests and the benchmarks: the probe app, a server process or one in this process, an MCP
client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from hci_envs.env.env_checker import process_alive as alive

HERE = Path(__file__).resolve().parent
PROBE = HERE / "apps" / "tk_probe.py"
ANIMATE = HERE / "apps" / "animate.py"


def agent_writable_dir(prefix: str = "hci-envs-test-") -> Path:
    """A folder the agent account of any session can write into and replace files in (apps of several
    sessions report their state there): pytest's own temporary folders are private to the user running the
    tests."""
    import atexit
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(path, 0o777)
    atexit.register(shutil.rmtree, path, True)
    return path


class Probe:
    """Reads what the Tk probe app reports (see tests/apps/tk_probe.py). The app runs on the agent's side of
    the desktop (as its account), so it reports into a folder every account can write to."""

    def __init__(self, directory: Path | None = None) -> None:
        directory = agent_writable_dir("hci-envs-probe-")
        self.state_path = directory / "probe-state.json"
        self.log_path = directory / "probe-log.jsonl"

    def command(self) -> list[str]:
        return [sys.executable, str(PROBE), str(self.state_path), str(self.log_path)]

    def app(self) -> dict[str, Any]:
        return {"command": self.command(), "name": "probe"}

    def state(self) -> dict[str, Any]:
        for _ in range(50):
            try:
                return json.loads(self.state_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                time.sleep(0.02)
        raise AssertionError(f"the probe app wrote no state to {self.state_path}")

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 5.0,
                 what: str = "condition") -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                state = self.state()
            except AssertionError:
                state = {}
            if state and predicate(state):
                return state
            time.sleep(0.03)
        raise AssertionError(f"timed out waiting for {what}; last probe state: {json.dumps(state)[:800]}")

    def log(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text(encoding="utf-8").splitlines() if line]

    def center(self, widget: str, state: dict[str, Any] | None = None) -> tuple[int, int]:
        x, y, w, h = (state or self.state())["widgets"][widget]
        return x + w // 2, y + h // 2


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hci_envs_command() -> list[str]:
    return [sys.executable, "-m", "hci_envs.ops.cli"]


class ServerProcess:
    """``hci-envs serve`` as a real subprocess on a free port."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, port: int | None = None,
                 prefix: list[str] | None = None, spare_flag: bool = True, command: list[str] | None = None) -> None:
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        # Spare desktops are off unless a test asks for them (--spare): the Tk probe of a spare would write
        # into the same report files as the session's own (tests/test_spare.py covers spares).
        given = not spare_flag or any(a in ("--spare", "--no-spare") for a in args)
        spare = [] if given else ["--no-spare"]
        self.args = ["serve", "--port", str(self.port), *spare, *args]
        self.env = {**os.environ, **(env or {})}
        self.prefix = prefix or []  # e.g. setpriv, to run the server as another user
        self.command = command or hci_envs_command()  # e.g. the hci-envs of another installation
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []

    def start(self, timeout: float = 30.0) -> ServerProcess:
        self.proc = subprocess.Popen(
            [*self.prefix, *self.command, *self.args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=self.env, start_new_session=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"hci-envs serve exited {self.proc.returncode}:\n{''.join(self.output)}")
            if any(line.startswith("hci-envs: ") and "ready" in line for line in self.output):
                return self
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"hci-envs serve did not become ready:\n{''.join(self.output)}")

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)

    def stop(self, sig: int = signal.SIGINT, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def children(self) -> list[int]:
        """PIDs of every process descended from the server (via /proc)."""
        assert self.proc is not None
        return descendants(self.proc.pid)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def http(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=30.0, **kwargs)


def serve_config(*args: str, port: int) -> Any:
    """The ServerConfig ``hci-envs serve ARGS --port PORT`` runs with."""
    from hci_envs.ops import cli

    return cli.serve_config(cli.build_parser().parse_args(["serve", *args, "--port", str(port)]), port)


class AppServer:
    """``hci-envs serve`` built in this process (``create_app``) and reached without a socket, through Starlette's
    TestClient: requests, WebSockets and MCP calls run on the app's own event loop (a thread of the TestClient),
    whose lifespan (the MCP session managers, the default session, the reaper) runs for as long as the server is
    up. The same face as ServerProcess where a test needs no process: ``base_url``, ``http()``, plus ``ws()``
    and ``mcp()`` for what would open a socket. Nothing listens on ``base_url``'s port (it is held, bound and
    not listening, so that a stray real connection is refused rather than reaching another server).

    The guards run as they do behind uvicorn. The requests come from the TestClient's peer ``testclient``, not
    an IP address: PeerGuard finds no socket of this machine for it and lets it through as it would a client on
    another machine; HostGuard sees the Host and Origin headers each request sends. What needs the real process
    or socket (the peer guard's kernel lookup, signals, serve's output, clients in another process) stays on
    ServerProcess.
    """

    def __init__(self, *args: str, spare_flag: bool = True) -> None:
        given = not spare_flag or any(a in ("--spare", "--no-spare") for a in args)
        self.args = [*([] if given else ["--no-spare"]), *args]  # as ServerProcess: no spares unless asked
        self._held = socket.socket()
        self._held.bind(("127.0.0.1", 0))
        self.port = self._held.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.app: Any = None
        self.client: Any = None

    def start(self) -> AppServer:
        from starlette.testclient import TestClient

        from hci_envs.server.app import create_app

        try:
            config = serve_config(*self.args, port=self.port)
            if config.orphan_timeout is not None:  # it would end this process, the test run, with SIGTERM
                raise AssertionError("an in-process server cannot exit on its orphan timeout: use ServerProcess")
            self.app = create_app(config)
            client = TestClient(self.app, base_url=self.base_url)
            client.__enter__()  # runs the lifespan
        except BaseException:
            self._held.close()
            raise
        self.client = client
        return self

    def stop(self) -> None:
        try:
            if self.client is not None:
                self.client.__exit__(None, None, None)
                self.client = None
        finally:
            self._held.close()

    def __enter__(self) -> AppServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def hci(self) -> Any:
        """The server's HciServer (its sessions, config)."""
        return self.app.hci

    def path(self, url_or_path: str) -> str:
        """A path of this server, from a path or from a URL the server gave (``mcp_url``, ...)."""
        return url_or_path.replace("ws://", "http://", 1).removeprefix(self.base_url) or "/"

    def http(self, **kwargs: Any) -> Any:
        """An httpx2 client (httpx's successor, which the TestClient and the MCP SDK are built on; the same API as
        ServerProcess.http()'s httpx client) whose requests go to the app."""
        import httpx2

        return httpx2.Client(base_url=self.base_url, transport=_borrowed(self.client._transport),
                             timeout=kwargs.pop("timeout", 30.0), **kwargs)

    @contextlib.contextmanager
    def ws(self, path: str = "/ws", headers: dict[str, str] | None = None) -> Iterator[InProcessWebSocket]:
        """A WebSocket to ``path`` (a path or one of the server's URLs), with websockets' send/recv."""
        url = self.base_url.replace("http://", "ws://", 1) + self.path(path)  # a whole URL: its Host is the server's
        with self.client.websocket_connect(url, headers=dict(headers or {})) as session:
            yield InProcessWebSocket(session)

    def mcp(self, url_or_path: str = "/mcp", token: str | None = None, mode: str = "auto") -> McpClient:
        """The official MCP client (McpClient) on an MCP endpoint of this server."""
        return McpClient(self.base_url + self.path(url_or_path), token, mode,
                         transport=_async_bridge(self.client._transport))


def _borrowed(transport: Any) -> Any:
    """The TestClient's transport, lent to another client: closing that client leaves it open."""
    import httpx2

    class Borrowed(httpx2.BaseTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            return transport.handle_request(request)

    return Borrowed()


def _async_bridge(transport: Any) -> Any:
    """An async transport (what the MCP SDK's client takes) onto the TestClient's: each request goes to the app's
    event loop from a worker thread, and its whole response comes back (the server answers MCP with plain JSON)."""
    import httpx2

    class AsyncBridge(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            forwarded = httpx2.Request(request.method, request.url, headers=request.headers,
                                       content=await request.aread())

            def call() -> tuple[int, list[tuple[bytes, bytes]], bytes]:
                response = transport.handle_request(forwarded)
                try:
                    return response.status_code, response.headers.raw, response.read()
                finally:
                    response.close()

            status, headers, content = await asyncio.to_thread(call)
            # the content is decoded and whole: its length and encoding are httpx2's to set again
            kept = [(k, v) for k, v in headers
                    if k.lower() not in (b"content-length", b"content-encoding", b"transfer-encoding")]
            return httpx2.Response(status, headers=kept, content=content, request=request)

    return AsyncBridge()


class InProcessWebSocket:
    """A TestClient WebSocket session with the face of websockets' sync client: send() and recv(timeout)."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def send(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            self.session.send_bytes(message)
        else:
            self.session.send_text(message)

    def recv(self, timeout: float | None = None) -> str | bytes:
        import anyio

        async def receive() -> Any:
            with anyio.fail_after(timeout):
                return await self.session._send_rx.receive()

        message = self.session.portal.call(receive)
        self.session._raise_on_close(message)
        return message["text"] if message.get("text") is not None else message["bytes"]

    def close(self) -> None:
        self.session.close()


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _freezer() -> tuple[Path, bool]:
    """The cgroup hierarchy that can freeze processes, and whether it is cgroup v1's freezer."""
    if Path("/sys/fs/cgroup/freezer").is_dir():
        return Path("/sys/fs/cgroup/freezer"), True
    for mount in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if (mount / "cgroup.subtree_control").exists():
            return mount, False
    raise RuntimeError("no cgroup freezer is mounted under /sys/fs/cgroup (v1 freezer or v2)")


@contextlib.contextmanager
def frozen(tree_root: int) -> Iterator[list[int]]:
    """Freeze a process and all its descendants as a machine that hangs would: in a cgroup freezer (v1, or
    v2's cgroup.freeze), where no signal can wake them. SIGSTOP is not enough: when a process exits and leaves
    a process group of stopped processes orphaned, the kernel sends that group SIGHUP and SIGCONT. Thawed, and
    the cgroup removed, on exit. Yields the frozen pids."""
    mount, v1 = _freezer()
    group = mount / f"hci-envs-test-frozen-{os.getpid()}-{tree_root}"
    group.mkdir()
    pids = [tree_root, *descendants(tree_root)]
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # ended since it was listed
                (group / "cgroup.procs").write_text(str(pid))
        if v1:
            (group / "freezer.state").write_text("FROZEN")
            done = lambda: (group / "freezer.state").read_text().strip() == "FROZEN"  # noqa: E731
        else:
            (group / "cgroup.freeze").write_text("1")
            done = lambda: "frozen 1" in (group / "cgroup.events").read_text()  # noqa: E731
        assert wait_until(done, timeout=30), f"{group} did not freeze"
        yield pids
    finally:
        if v1:
            (group / "freezer.state").write_text("THAWED")
        elif (group / "cgroup.freeze").exists():
            (group / "cgroup.freeze").write_text("0")
        for _ in range(50):  # back to the parent cgroup, so that the group can go
            for pid in (group / "cgroup.procs").read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    (mount / "cgroup.procs").write_text(pid)
            with contextlib.suppress(OSError):
                group.rmdir()
                break
            time.sleep(0.1)


def processes_named(*names: str) -> dict[int, str]:
    """PIDs whose command line mentions one of ``names`` (used to look for leftovers)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in cmd for n in names) and alive(int(entry)):
            found[int(entry)] = cmd
    return found


class McpClient:
    """A synchronous face on the official ``mcp`` SDK client (its event loop runs in a thread)."""

    def __init__(self, url: str, token: str | None = None, mode: str = "auto", transport: Any = None) -> None:
        self.url, self.token, self.mode = url, token, mode
        self.transport = transport  # an httpx2 transport (AppServer's, to a server in this process); None: a socket
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.client: Any = None

    def __enter__(self) -> McpClient:
        self._thread.start()
        self._opened = asyncio.run_coroutine_threadsafe(self._lifecycle(), self._loop)
        self._run(self._wait_open())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._loop.call_soon_threadsafe(self._closing.set)
            self._opened.result(30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def _run(self, coro: Any, timeout: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def run(self, coro: Any, timeout: float = 600.0) -> Any:
        """Run a coroutine on the client's event loop (where ``self.client`` lives) and return its result."""
        return self._run(coro, timeout)

    async def _wait_open(self) -> None:
        while self.client is None:
            if self._opened.done():
                self._opened.result()  # raises the connection error
            await asyncio.sleep(0.01)

    async def _lifecycle(self) -> None:
        """Enter and leave the client in one task (anyio requires it); calls run as separate tasks."""
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        self._closing = asyncio.Event()
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        # reads wait as long as the longest tool call a test makes (a call's own bound is run()'s timeout)
        timeout = httpx2.Timeout(60.0, read=600.0)
        async with httpx2.AsyncClient(headers=headers, timeout=timeout, transport=self.transport) as http:
            async with Client(streamable_http_client(self.url, http_client=http), mode=self.mode) as client:
                self.client = client
                await self._closing.wait()

    def list_tools(self) -> list[Any]:
        return self._run(self.client.list_tools()).tools

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return self._run(self.client.call_tool(name, arguments or {}))

    def ok(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """Call a tool that must succeed; return its result."""
        result = self.call(name, arguments)
        if result.is_error:
            raise AssertionError(f"{name}({arguments}) failed: {text_of(result)}")
        return result

    def timed(self, name: str, arguments: dict[str, Any] | None, n: int, warmup: int = 3) -> list[float]:
        """Milliseconds of ``n`` successful calls made back to back on the client's own event loop, as an
        async agent makes them (``ok`` adds a hop from the caller's thread to that loop and back per call)."""
        async def run() -> list[float]:
            samples = []
            for i in range(warmup + n):
                start = time.perf_counter()
                result = await self.client.call_tool(name, arguments or {})
                if result.is_error:
                    raise AssertionError(f"{name}({arguments}) failed: {text_of(result)}")
                if i >= warmup:
                    samples.append((time.perf_counter() - start) * 1000)
            return samples

        return self.run(run())


def text_of(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content if getattr(c, "type", "") == "text")


def image_of(result: Any) -> Any:
    """The first image of an MCP tool result, decoded with Pillow."""
    import base64
    import io

    from PIL import Image

    for block in result.content:
        if getattr(block, "type", "") == "image":
            image = Image.open(io.BytesIO(base64.b64decode(block.data)))
            image.load()
            return image
    raise AssertionError("the result has no image")


@contextlib.contextmanager
def timer() -> Iterator[Callable[[], float]]:
    start = time.perf_counter()
    yield lambda: time.perf_counter() - start


class PrefixProxy:
    """A reverse proxy that publishes a server under a path prefix, as nginx's ``location /PREFIX/ {
    proxy_pass http://server/; }`` does: the prefix comes off each request's path and the bytes are relayed both
    ways (WebSocket upgrades and streamed responses included). Each connection carries one request (the server
    is asked to close after it), so the proxy stays a byte relay."""

    def __init__(self, target_port: int, prefix: str) -> None:
        self.target_port = target_port
        self.prefix = prefix.rstrip("/").encode()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix.decode()}"

    def __enter__(self) -> PrefixProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        request_line, *headers = head[:-4].split(b"\r\n")
        method, target, version = request_line.split(b" ", 2)
        if not target.startswith(self.prefix + b"/"):
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        upgrade = any(h.lower().startswith(b"upgrade:") for h in headers)
        if not upgrade:
            headers = [h for h in headers if not h.lower().startswith((b"connection:", b"keep-alive:"))]
            headers.append(b"Connection: close")
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        up_writer.write(b"\r\n".join([b" ".join([method, target[len(self.prefix):], version]), *headers]) + b"\r\n\r\n")

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except ConnectionError:
                pass
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


#: More distinct characters than the keyboard has spare keys for: typing them needs a pause.
MANY_CHARACTERS = "".join(chr(c) for c in range(0x4E00, 0x4E00 + 300)) + " ✓ ünïcödé"
_TEXTAREA = ("data:text/html;charset=utf-8,<title>empty</title><textarea autofocus style='position:fixed;inset:0;"
             "width:100%;height:100%' oninput=\"document.title='got:'+this.value\"></textarea>")
#: The apps typed into (beside the Tk probe, "tk"), each with the way to read back what it got.
TYPING_COMMANDS = {
    "xterm": ["xterm", "-e", "sh", "-c", 'cat > "$HOME/typed.txt"'],
    "mousepad": ["mousepad", "note.txt"],
    "chromium": ["chromium", "--no-first-run", "--disable-gpu", "--window-position=0,0", "--window-size=1280,800",
                 _TEXTAREA],
}


#: The tier (see tests/conftest.py) a test needs for each app it starts: the Tk test apps, the animation and xterm
#: run on any X desktop; mousepad and LibreOffice are real applications; chromium is the browser tier.
APP_TIERS = {"tk": "x11", "animation": "x11", "xterm": "x11", "mousepad": "apps", "libreoffice": "apps",
             "chromium": "browser"}


def by_app(*apps: str, values: dict[str, Any] | None = None) -> list[Any]:
    """Parameters for ``parametrize("app", ...)``, one per app, each marked with the tier that app needs
    (``values``: what the test gets for each app, if not its name)."""
    import pytest

    return [pytest.param(app if values is None else values[app], marks=getattr(pytest.mark, APP_TIERS[app]), id=app)
            for app in apps]


def window_title(env: Any) -> str:
    """The title of the newest window on an environment's desktop ("" when there is none)."""
    windows = env.desktop.windows()
    return env.desktop.input.window_title(windows[-1]) if windows else ""


@contextlib.contextmanager
def typing_desktop(app: str, page: str | None = None) -> Iterator[tuple[Any, Callable[[], str]]]:
    """A desktop running ``app`` (xterm, mousepad, chromium or the Tk probe, "tk"), ready to type into, and a
    function that reads back what the app got (the typing tests and bench/bench_typing.py). ``page``: the
    page chromium shows instead of its text area (titled "empty" until typed into)."""
    from hci_envs.traits import WorkstationEnv

    probe = Probe() if app == "tk" else None
    command = TYPING_COMMANDS[app] if probe is None else None
    if app == "chromium" and page is not None:
        command = [*TYPING_COMMANDS[app][:-1], page]
    spec = probe.app() if probe else {"command": command, "timeout": 90}
    env = WorkstationEnv(start_state={"apps": [spec]})

    def title() -> str:
        return window_title(env)

    def got() -> str:
        if app in ("xterm", "mousepad"):
            if app == "mousepad":
                env.step([{"type": "key", "keys": "ctrl+s"}, {"type": "wait", "ms": 500}])
            saved = env.home / ("typed.txt" if app == "xterm" else "note.txt")
            return saved.read_text(encoding="utf-8").rstrip("\n") if saved.exists() else ""
        if app == "chromium":
            shown = title().removesuffix(" - Chromium")
            return shown[4:] if shown.startswith("got:") else ""
        assert probe is not None
        return probe.state().get("entry", "")

    try:
        env.reset()
        if app == "chromium":
            if not wait_until(lambda: title().startswith("empty"), 60):
                raise AssertionError(f"chromium did not show the page: {title()!r}")
            env.step([{"type": "click", "x": 640, "y": 400}, {"type": "wait", "ms": 500}])  # the page takes focus
        if probe is not None:
            probe.wait_for(lambda s: s.get("ready"), what="the probe app")
        yield env, got
    finally:
        env.close()


async def serve_vnc_proxy(session: Any, host: str = "127.0.0.1") -> asyncio.Server:
    """The server's VNC proxy (a :class:`~hci_envs.vnc.proxy.VncSession`) on a TCP port, with VNC
    authentication, as native viewers reach it (the server adds only its routes around this)."""
    from hci_envs.vnc.proxy import AsyncioStream, finish_security, viewer_handshake
    from hci_envs.vnc.rfb import SECURITY_VNC

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = AsyncioStream(reader, writer)
        challenge, response = await viewer_handshake(stream, SECURITY_VNC)
        role = session.role_for_response(challenge, response)
        await finish_security(stream, role is not None)
        if role is not None:
            await session.serve(stream, role, "tcp")

    return await asyncio.start_server(handle, host, 0)


@contextlib.contextmanager
def vnc_proxy(env: Any) -> Iterator[tuple[int, str]]:
    """The VNC proxy in front of an environment's desktop, on a loop thread of its own, wired to the desktop as
    the server wires it (a person's press or release reaches X before what follows it; what a leaving viewer
    held is released): yields its TCP port and control password. A person's path to the desktop."""
    from hci_envs.vnc.proxy import VncSession

    async def socket_path() -> Path:
        return await asyncio.to_thread(env.desktop.vnc_socket)

    session = VncSession(socket_path, release_input=lambda **held: env.desktop.input.release_stray(**held),
                         buttons_delivered=lambda down, changed: env.desktop.input.buttons_delivered(down, changed))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="vnc-proxy", daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(serve_vnc_proxy(session), loop).result(30)
    try:
        yield server.sockets[0].getsockname()[1], session.control_password
    finally:
        async def stop() -> None:
            server.close()
            relays = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in relays:
                task.cancel()
            await asyncio.gather(*relays, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def our_containers(client: Any, **filters: Any) -> list[Any]:
    """The containers this test run's providers started (label ``hci-envs.run``, set by conftest): another run
    sharing the Docker daemon has its own."""
    from hci_envs.providers.docker import LABEL, RUN, run_label

    label = [LABEL, f"{RUN}={run_label()[RUN]}"]
    return client.containers.list(all=True, filters={"label": label, **filters}, ignore_removed=True)
