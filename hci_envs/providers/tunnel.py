"""OSWorld's guest API across a container's edge, for the desktop's owner only.

OSWorld's harness sends no credentials. On this machine its guest API answers only the uid that owns the
desktop (the kernel's socket table says who made each connection: :mod:`hci_envs.server.osworld_guest`). A
container's published port hides that: every connection arrives from Docker's proxy. So two tunnels carry it:

* the **gate**, inside the container (``hci-envs serve --osworld-gate-port``): a connection must open with a line
  holding the gate's secret (``HCI_ENVS_OSWORLD_TOKEN``) or it is closed unanswered; the rest is carried to the
  guest API's loopback port, where the server's own uid, the desktop's owner, is the one calling;
* the **relay**, in the harness's process (:class:`hci_envs.osworld.HciEnvsProvider` with ``placement="docker"``):
  a loopback port that carries the connections of this process's uid only (the kernel's socket table again)
  to the container's gate, the secret line first.

The harness talks HTTP and, for the browser's DevTools, WebSocket to the relay's port as it would to a VM's;
both tunnels carry bytes and never parse them. Standard library only (the harness's side has no server
installed).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import socket
import threading
from collections.abc import Awaitable, Callable

from ..errors import ProviderError
from ..sandbox.peers import socket_owner

log = logging.getLogger(__name__)

#: How a connection to the gate opens: this, the secret, a newline.
GREETING = b"hci-envs-osworld-gate "
#: Seconds a connection to the gate has to say its secret.
GREETING_TIMEOUT = 5.0
_CHUNK = 64 * 1024

#: Whether a new connection (its reader, its writer) may go on; it may read from the reader first.
Admit = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


def greeting(secret: str) -> bytes:
    return GREETING + secret.encode() + b"\n"


class Tunnel:
    """Carries each connection made to ``listener`` to ``upstream`` (host, port), both ways, once ``admit``
    lets it in; ``opening`` is sent upstream first. Runs its own event loop on a thread of its own."""

    def __init__(self, listener: socket.socket, upstream: tuple[str, int], admit: Admit, *,
                 opening: bytes = b"", name: str = "hci-envs-tunnel") -> None:
        self.listener = listener
        self.upstream = upstream
        self.admit = admit
        self.opening = opening
        self.name = name
        self.port = int(listener.getsockname()[1])
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        #: The connections being carried: held here, as asyncio's stream server lets go of a connection's task
        #: once its client has gone, and a task nobody holds is collected half-way (its upstream left open).
        self._carrying: set[asyncio.Task[None]] = set()

    def start(self) -> Tunnel:
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(asyncio.start_server(self._carry, sock=self.listener))
            except BaseException as exc:  # noqa: BLE001 - reported to start()
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise ProviderError(f"the OSWorld tunnel could not listen: {failure[0]}")
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()  # no new connections; then the ones being carried end
            carried = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in carried:
                task.cancel()
            await asyncio.gather(*carried, return_exceptions=True)
            loop.stop()

        asyncio.run_coroutine_threadsafe(close(), loop)
        thread.join(5)

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._carrying.add(task)
        task.add_done_callback(self._carrying.discard)
        try:
            if not await self.admit(reader, writer):
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            except OSError as exc:
                log.warning("%s: %s:%d unreachable: %s", self.name, *self.upstream, exc)
                return
            try:
                if self.opening:
                    up_writer.write(self.opening)
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                _close(up_writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            pass
        except asyncio.CancelledError:
            pass  # the tunnel stops: end quietly (asyncio's stream callback asks a cancelled task for its error)
        finally:
            _close(writer)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes from ``reader`` to ``writer`` until the reader's end, which is passed on as an end of writing
    (an HTTP client may half-close after its request and still read the answer)."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        _close(writer)


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()


# -- the two ends ---------------------------------------------------------------------------------------------
def gate(listener: socket.socket, secret: str, guest_port: int) -> Tunnel:
    """Inside the container: connections to ``listener`` that open with the secret go on to the guest API on
    loopback ``guest_port``; any other is closed without an answer."""
    if not secret:
        raise ProviderError("the OSWorld gate needs a secret (HCI_ENVS_OSWORLD_TOKEN)")
    expected = greeting(secret)

    async def admit(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            line = await asyncio.wait_for(reader.readuntil(b"\n"), GREETING_TIMEOUT)
        except (asyncio.TimeoutError, asyncio.LimitOverrunError, asyncio.IncompleteReadError, ConnectionError):
            return False
        return hmac.compare_digest(line, expected)

    return Tunnel(listener, ("127.0.0.1", guest_port), admit, name="hci-envs-osworld-gate")


def relay(upstream: tuple[str, int], secret: str, *, owner: int | None = None) -> Tunnel:
    """In the harness's process: a free loopback port whose connections, made by ``owner`` (default: this
    process's uid) and nobody else, go on to the gate at ``upstream`` with the secret first."""
    owner = os.getuid() if owner is None else owner
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    async def admit(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        client, server = writer.get_extra_info("peername"), writer.get_extra_info("sockname")
        found = await asyncio.get_running_loop().run_in_executor(None, socket_owner, client[:2], server[:2])
        if found != owner:
            log.warning("the OSWorld relay refused a connection from uid %s (it serves uid %d only)", found, owner)
            return False
        return True

    return Tunnel(listener, upstream, admit, opening=greeting(secret), name="hci-envs-osworld-relay")
