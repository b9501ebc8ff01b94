"""The peer guard on a real uvicorn server with the server's own HTTP protocol: the kernel is asked who owns a
connection once per connection (not once per request), the decision is still made at every request, and a
closed or upgraded connection leaves nothing behind that a later connection on the same addresses could
inherit."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
import websockets.sync.client

from hci_envs.sandbox import peers
from hci_envs.server import guards
from helpers import free_port

pytestmark = pytest.mark.fake


class Switch:
    """The agent uids the guard sees, changed by the test between requests."""

    def __init__(self) -> None:
        # another account's uid: the guard asks about every connection (with no agent uids it asks nothing)
        self.uids: frozenset[int] = frozenset({os.getuid() + 1})


async def echo(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
    if scope["type"] == "lifespan":
        while True:
            kind = (await receive())["type"]
            await send({"type": kind + ".complete"})  # lifespan.startup.complete, lifespan.shutdown.complete
            if kind == "lifespan.shutdown":
                return
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        message = await receive()
        if message["type"] == "websocket.receive":
            await send({"type": "websocket.send", "text": message.get("text") or ""})
            await receive()
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture()
def guarded(monkeypatch) -> Iterator[tuple[str, Switch, list[tuple]]]:
    """A guarded server in this process; yields its URL, the uid switch and the kernel lookups it made."""
    switch, lookups = Switch(), []
    real = peers._look_up_owner

    def counted(client, server):  # the real lookup, counted
        lookups.append((client, server))
        return real(client, server)

    monkeypatch.setattr(peers, "_look_up_owner", counted)
    port = free_port()
    config = uvicorn.Config(guards.PeerGuard(echo, lambda: switch.uids), host="127.0.0.1", port=port,
                            http=guards.header_timeout_protocol(), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}", switch, lookups
    finally:
        server.should_exit = True
        thread.join(10)


def wait_forgotten(timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while peers._open_connections:
        assert time.monotonic() < deadline, f"connections still remembered: {peers._open_connections}"
        time.sleep(0.02)


def test_a_keep_alive_connection_is_looked_up_once_and_judged_at_every_request(guarded):
    url, switch, lookups = guarded
    with httpx.Client(base_url=url) as http:
        for _ in range(5):
            assert http.get("/").status_code == 200
        assert len(lookups) == 1, lookups  # one connection, one question to the kernel
        # the owner is remembered, not the answer: this uid becomes an agent's, and the same connection is
        # refused at its next request
        switch.uids = frozenset({os.getuid()})
        refused = http.get("/")
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "AGENT_PEER"
    with httpx.Client(base_url=url) as http:  # a second connection is asked about on its own
        assert http.get("/").status_code == 403
    assert len(lookups) == 2, lookups
    wait_forgotten()


def test_closed_and_upgraded_connections_leave_nothing_behind(guarded):
    url, switch, lookups = guarded
    for _ in range(3):
        with httpx.Client(base_url=url, headers={"connection": "close"}) as http:
            assert http.get("/").status_code == 200
    # a connection that closes before its first request, and one cut off mid-headers
    address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
    socket.create_connection(address).close()
    half = socket.create_connection(address)
    half.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    half.close()
    # a WebSocket: the HTTP protocol hands the connection on and hears nothing of its end
    with websockets.sync.client.connect(url.replace("http", "ws") + "/ws") as ws:
        ws.send("hello")
        assert ws.recv(timeout=5) == "hello"
    wait_forgotten()
    # and the WebSocket was judged as well
    switch.uids = frozenset({os.getuid()})
    with pytest.raises(websockets.exceptions.InvalidStatus):
        websockets.sync.client.connect(url.replace("http", "ws") + "/ws", open_timeout=5)
    wait_forgotten()
