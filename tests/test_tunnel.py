"""The two tunnels that carry OSWorld's guest API across a container's edge (hci_envs.providers.tunnel), in
this process over real sockets: the gate answers only a connection that opens with its secret, the relay only
its owner's connections; both carry bytes both ways, a half-closed request included."""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from hci_envs.providers import tunnel

pytestmark = pytest.mark.fake


@pytest.fixture()
def upstream() -> Iterator[int]:
    """A server that answers each connection with what it read up to the client's end of writing, reversed."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
                conn.sendall(data[::-1])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    # shutdown() wakes the accept() blocked in the thread; close() alone would not, and that thread could then
    # accept on the next socket given the same descriptor (another test's tunnel)
    try:
        listener.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    thread.join(5)
    listener.close()


#: Sends, ends writing (the answer must still come back) and reads all; a connection the other end refuses may
#: be closed (or reset) at any point of that, and what came back until then is the answer.
EXCHANGE = """
import socket, sys
def exchange(port, data):
    answer = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            while chunk := s.recv(65536):
                answer += chunk
    except OSError:
        pass
    return answer
"""
#: What the harness asks OSWorld's guest API through a tunnel: GET /platform after ``opening`` (a gate's secret
#: line, or not), without ending its writing; what came back, nothing when refused at any point.
ASK_PLATFORM = """
import socket
def ask_platform(port, opening=b""):
    answer = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(opening + b"GET /platform HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n\\r\\n")
            while chunk := s.recv(65536):
                answer += chunk
    except OSError:
        pass
    return answer
"""
namespace: dict = {}
exec(EXCHANGE + ASK_PLATFORM, namespace)
exchange, ask_platform = namespace["exchange"], namespace["ask_platform"]


def listener() -> socket.socket:
    return socket.create_server(("127.0.0.1", 0))


def test_the_gate_carries_only_a_connection_that_opens_with_its_secret(upstream):
    gate = tunnel.gate(listener(), "s3cret", upstream).start()
    try:
        big = os.urandom(300_000)  # more than one read's worth, both ways
        assert exchange(gate.port, tunnel.greeting("s3cret") + big) == big[::-1]
        assert exchange(gate.port, b"GET / HTTP/1.1\r\n\r\n") == b""
        assert exchange(gate.port, tunnel.greeting("wrong") + b"hello") == b""
        assert exchange(gate.port, tunnel.greeting("s3cret")[:-1]) == b""  # no end of line: never admitted
    finally:
        gate.stop()


def test_a_gate_without_a_secret_is_refused(upstream):
    from hci_envs.errors import ProviderError

    with pytest.raises(ProviderError, match="HCI_ENVS_OSWORLD_TOKEN"):
        tunnel.gate(listener(), "", upstream)


def test_the_relay_opens_with_the_secret_and_carries_its_owners_connections_only(upstream):
    gate = tunnel.gate(listener(), "s3cret", upstream).start()
    relay = tunnel.relay(("127.0.0.1", gate.port), "s3cret").start()
    try:
        assert exchange(relay.port, b"through both") == b"through both"[::-1]
        if os.geteuid() != 0:
            pytest.fail("root is needed to try the relay as another user", pytrace=False)
        other = pwd.getpwnam("nobody").pw_uid  # another user (not an agent account: their network is none)
        probe = subprocess.run(
            ["setpriv", "--reuid", str(other), "--regid", str(other), "--clear-groups", "/usr/bin/python3", "-c",
             EXCHANGE + f"print(repr(exchange({relay.port}, b'not mine')))"],
            capture_output=True, text=True, timeout=60)
        assert probe.returncode == 0 and probe.stdout.strip() == "b''", (probe.stdout, probe.stderr)
        assert exchange(relay.port, b"still mine") == b"still mine"[::-1]
    finally:
        relay.stop()
        gate.stop()


def test_a_stopped_tunnel_no_longer_listens(upstream):
    gate = tunnel.gate(listener(), "s3cret", upstream).start()
    port = gate.port
    gate.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
