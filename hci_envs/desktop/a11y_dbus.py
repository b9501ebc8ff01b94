"""The D-Bus plumbing of the accessibility reader (:mod:`.a11y`): one event loop thread for every bus
connection in the process, connections over dbus-fast whose calls are bounded in time and in number
outstanding, and the bus's own NameHasOwner for start-up waits (:mod:`.a11ybus`).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from typing import Any

CALL_TIMEOUT = 2.0        # one call to one app
# Calls outstanding at once on the connection. More would not be faster (the app answers one at a time) and
# could fill the socket's send buffer, which dbus-fast takes for a broken connection.
IN_FLIGHT = 128


class BusLoop:
    """One event loop thread for every desktop's bus connections in this process."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or not cls._loop.is_running():
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                threading.Thread(target=run, name="hci-envs-a11y", daemon=True).start()
                started.wait()
                cls._loop = loop
            return cls._loop

    @classmethod
    def run(cls, coro: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, cls.get())
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise


class BusConnection:
    """One D-Bus connection with bounded calls: ``await call(...)`` returns the reply body or raises
    :class:`CallError` (an error reply, a timeout, or the connection gone)."""

    def __init__(self, address: str, *, anonymous: bool = False) -> None:
        self.address = address
        #: Connect without credentials: a bus in another user namespace sees this process's uid as nobody's,
        #: so its EXTERNAL check fails (a forkable desktop's bus, which only its tree and root can reach).
        self.anonymous = anonymous
        self.bus: Any = None
        self._slots: asyncio.Semaphore | None = None

    async def connect(self) -> None:
        if self.bus is not None and self.bus.connected:
            return
        from dbus_fast.aio import MessageBus
        from dbus_fast.auth import AuthAnonymous

        bus = MessageBus(bus_address=self.address, auth=AuthAnonymous() if self.anonymous else None)
        self.bus = await asyncio.wait_for(bus.connect(), CALL_TIMEOUT)
        self._slots = asyncio.Semaphore(IN_FLIGHT)

    async def call(self, dest: str, path: str, interface: str, member: str, signature: str = "",
                   body: Iterable[Any] = (), timeout: float = CALL_TIMEOUT) -> list[Any]:
        from dbus_fast import Message, MessageType

        await self.connect()
        assert self._slots is not None
        async with self._slots:
            try:
                reply = await asyncio.wait_for(self.bus.call(Message(
                    destination=dest, path=path, interface=interface, member=member, signature=signature,
                    body=list(body))), timeout)
            except asyncio.TimeoutError:
                raise CallError(f"{dest} did not answer {member} within {timeout:g}s", timeout=True) from None
            except Exception as exc:  # noqa: BLE001 - a malformed reply or a closed connection
                raise CallError(f"{member} to {dest} failed: {exc}") from None
        if reply.message_type == MessageType.ERROR:
            raise CallError(f"{member} to {dest}: {reply.error_name}", name=reply.error_name or "")
        return list(reply.body)

    def close(self) -> None:
        if self.bus is not None:
            try:
                self.bus.disconnect()
            except Exception:  # noqa: BLE001 - already gone
                pass
            self.bus = None


class CallError(Exception):
    def __init__(self, message: str, *, timeout: bool = False, name: str = "") -> None:
        super().__init__(message)
        self.timeout = timeout
        self.name = name


def name_has_owner(address: str, name: str, *, anonymous: bool = False) -> bool:
    """Whether ``name`` is owned on the bus at ``address`` (a fresh connection; for start-up waits)."""

    async def ask() -> bool:
        conn = BusConnection(address, anonymous=anonymous)
        try:
            body = await conn.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                   "NameHasOwner", "s", [name])
            return bool(body[0])
        except (CallError, OSError):
            return False
        finally:
            conn.close()

    try:
        return bool(BusLoop.run(ask(), CALL_TIMEOUT + 1))
    except Exception:  # noqa: BLE001 - the bus is not up yet
        return False

