"""What an agent's programs may connect to (hci_envs.sandbox.network): under ``none``, the default, nothing over IP
but its own listeners: not another user's listener on loopback, on the machine's other addresses or IPv6, not
another session's, no datagram; under an allowlist, what it lists and nothing more; ``open`` reaches what the
machine reaches. Played by the agent with its own tools, against listeners this test runs as another user."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from conftest import need

from hci_envs.errors import ConfigError
from hci_envs.sandbox.network import Destination, NetworkPolicy

CONTROL = "network-control-token-0123456789abcdef"

#: Run by the agent: a TCP connection to each (host, port) given in argv as JSON, one line of outcome each.
PROBE = r"""
import json, socket, sys, time
for host, port in json.loads(sys.argv[1]):
    family = socket.AF_INET6 if ':' in host else socket.AF_INET
    s = socket.socket(family)
    s.settimeout(8)
    start = time.monotonic()
    try:
        s.connect((host, port))
        s.sendall(b'from-the-agent\n')
        print(host, port, 'connected', s.recv(64).decode().strip() or '-')
    except OSError as e:
        print(host, port, 'refused' if e.errno == 111 else 'failed', e.errno, round(time.monotonic() - start, 1))
    finally:
        s.close()
"""


# -- the policy, as written -----------------------------------------------------------------------------
@pytest.mark.fake
@pytest.mark.parametrize("written,rule", [
    ("10.0.0.0/8", "ip daddr 10.0.0.0/8 accept"),
    ("192.0.2.7:443", "ip daddr 192.0.2.7/32 meta l4proto { tcp, udp } th dport 443 accept"),
    ("[::1]:80", "ip6 daddr ::1/128 meta l4proto { tcp, udp } th dport 80 accept"),
    ("2001:db8::/32", "ip6 daddr 2001:db8::/32 accept"),
    ("localhost:8080", "daddr 127.0.0.1/32 meta l4proto { tcp, udp } th dport 8080 accept"),
])
def test_allowed_destinations_read_as_people_write_them(written, rule):
    rules = [d.rule() for d in Destination.parse(written)]
    assert any(r.endswith(rule) for r in rules), rules


@pytest.mark.fake
@pytest.mark.parametrize("given,message", [
    (["10.0.0.1:0"], "1 to 65535"), (["10.0.0.1:http"], "1 to 65535"), (["[::1"], "no closing bracket"),
    (["[::1]443"], "':PORT'"), ([":80"], "no host"), (["no such host.invalid"], "not an address"),
    (["nosuchhost.invalid"], "does not resolve"), ("allowlist", "needs its destinations"), ("closed", "must be 'none'"),
    ([], "non-empty list"), ([7], "non-empty list"),
])
def test_a_policy_that_cannot_be_read_is_refused_naming_the_field(given, message):
    with pytest.raises(ConfigError, match=message) as refused:
        NetworkPolicy.make(given)
    assert refused.value.details["field"] == "network"


@pytest.mark.fake
def test_serve_takes_a_policy_or_an_allowlist_and_refuses_both():
    from helpers import serve_config

    assert "network" not in serve_config(port=1).env_kwargs  # the default: none
    assert serve_config("--network", "open", port=1).env_kwargs["network"].mode == "open"
    allowed = serve_config("--allow", "10.1.2.3:80", "--allow", "10.9.0.0/16", port=1).env_kwargs["network"]
    assert allowed.to_dict() == {"policy": "allowlist", "allow": ["10.1.2.3:80", "10.9.0.0/16"]}
    with pytest.raises(ConfigError, match="contradict"):
        serve_config("--network", "open", "--allow", "10.1.2.3", port=1)
    with pytest.raises(ConfigError, match="needs its destinations"):
        serve_config("--network", "allowlist", port=1)


# -- enforced: the agent, its own tools, listeners of another user ----------------------------------------
class Listeners:
    """TCP listeners on every address of the machine (one port, IPv4 and IPv6) and a UDP socket, run by this
    test's user: what each received."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.sockets = []
        tcp = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
        self.port = tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("0.0.0.0", 0))
        self.udp_port = self.udp.getsockname()[1]
        self.sockets = [tcp, self.udp]
        threading.Thread(target=self._accept, args=(tcp,), daemon=True).start()
        threading.Thread(target=self._datagrams, daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.received.append(conn.recv(64).decode().strip())
                    conn.sendall(b"the-other-user\n")
                except OSError:
                    self.received.append("(nothing)")

    def _datagrams(self) -> None:
        while True:
            try:
                self.received.append(self.udp.recv(64).decode())
            except OSError:
                return

    def close(self) -> None:
        for s in self.sockets:
            s.close()


def machine_addresses() -> list[str]:
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    return ["127.0.0.1", "127.0.0.2", "::1", *found]


@contextmanager
def listening() -> Iterator[Listeners]:
    listeners = Listeners()
    try:
        yield listeners
    finally:
        listeners.close()


@contextmanager
def _sessions(server, n: int) -> Iterator[list]:
    import httpx
    from helpers import McpClient

    clients = []
    try:
        for _ in range(n):
            info = httpx.post(f"{server.base_url}/sessions", headers={"authorization": f"Bearer {CONTROL}"},
                              timeout=120).json()
            clients.append(McpClient(info["mcp_tools_url"], info["agent_token"]).__enter__())
        yield clients
    finally:
        for client in clients:
            client.__exit__(None, None, None)


def _bash(client, command: str, timeout: float = 60, persistent: bool = False) -> str:
    result = client.call("bash", {"command": command, "timeout": timeout, "persistent": persistent}).structured_content
    assert not result.get("timed_out"), result
    return result["stdout"]


def _probe(client, targets: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    out = _bash(client, f"python3 -c {_quote(PROBE)} {_quote(json.dumps(targets))}")
    outcomes = {}
    for line in out.strip().splitlines():
        host, port, outcome = line.split(" ", 2)
        outcomes[(host, int(port))] = outcome
    assert set(outcomes) == set(targets), out
    return outcomes


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _own_listener(client) -> int:
    """A listener the agent runs itself (in the background of its shell); its port."""
    out = _bash(client, "nohup python3 -c \"import socket\ns = socket.create_server(('127.0.0.1', 0))\n"
                        "print(s.getsockname()[1], flush=True)\nwhile True:\n    c, _ = s.accept(); c.recv(64); "
                        "c.sendall(b'its-own\\n'); c.close()\" > ~/port.txt 2>&1 & sleep 1; cat ~/port.txt",
                persistent=True)
    return int(out.split()[0])


@pytest.mark.x11
def test_under_none_the_agent_reaches_its_own_listeners_only():
    need(os.geteuid() == 0, "root: the rules are the kernel's firewall, which a root server changes")
    import httpx
    from helpers import ServerProcess

    with listening() as others, ServerProcess("--env", "workstation", "--agent-tokens", "--max-sessions", "3",
                                              env={"HCI_ENVS_CONTROL_TOKEN": CONTROL}) as server:
        metadata = httpx.get(f"{server.base_url}/metadata", headers={"authorization": f"Bearer {CONTROL}"}).json()
        assert metadata["network"]["policy"] == "none", metadata["network"]
        assert metadata["network"]["enforced_by"].startswith("nftables"), metadata["network"]
        with _sessions(server, 2) as (a, b):
            targets = [(address, others.port) for address in machine_addresses()]
            outcomes = _probe(a, targets)
            # refused, at once or at the SYN's second try: never waiting out a timeout, never connected
            assert all(o.startswith("refused") and float(o.split()[-1]) < 4 for o in outcomes.values()), outcomes
            # nothing the agent sent reached the other user's program; no datagram either
            _bash(a, f"python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                     f"[s.sendto(b'datagram', (h, {others.udp_port})) for h in ('127.0.0.1',)]\" 2>&1; true")
            # the session's own listener answers it; another session's does not
            own = _own_listener(a)
            assert _probe(a, [("127.0.0.1", own)])[("127.0.0.1", own)] == "connected its-own"
            theirs = _own_listener(b)
            assert _probe(a, [("127.0.0.1", theirs)])[("127.0.0.1", theirs)].startswith("refused")
            assert _probe(b, [("127.0.0.1", theirs)])[("127.0.0.1", theirs)] == "connected its-own"
            # the server, as another user, still reaches the agent's listener (its tools do, e.g. VLC's)
            with socket.create_connection(("127.0.0.1", own), timeout=5) as conn:
                conn.sendall(b"x\n")
                assert conn.recv(64) == b"its-own\n"
            assert others.received == [], others.received
            state = httpx.get(f"{server.base_url}/state", headers={"authorization": f"Bearer {CONTROL}"}).json()
            assert state["network"]["policy"] == "none", state


@pytest.mark.x11
@pytest.mark.parametrize("policy", ["allowlist", "open"])
def test_an_allowlist_lets_through_what_it_lists_and_open_everything(policy):
    need(os.geteuid() == 0, "root: the rules are the kernel's firewall, which a root server changes")
    from helpers import ServerProcess

    with listening() as allowed, listening() as other:
        options = ["--allow", f"127.0.0.1:{allowed.port}"] if policy == "allowlist" else ["--network", "open"]
        with ServerProcess("--env", "workstation", "--agent-tokens", *options,
                           env={"HCI_ENVS_CONTROL_TOKEN": CONTROL}) as server:
            with _sessions(server, 1) as (agent,):
                outcomes = _probe(agent, [("127.0.0.1", allowed.port), ("127.0.0.1", other.port)])
                assert outcomes[("127.0.0.1", allowed.port)] == "connected the-other-user", outcomes
                if policy == "allowlist":
                    assert outcomes[("127.0.0.1", other.port)].startswith("refused"), outcomes
                    assert other.received == []
                else:
                    assert outcomes[("127.0.0.1", other.port)] == "connected the-other-user", outcomes
                assert "from-the-agent" in allowed.received


@pytest.mark.x11
def test_an_account_between_sessions_has_no_network():
    """A session's end gives its account back with ``none``, whatever its policy was: no account keeps a
    policy a server gave it once the server is done with it."""
    need(os.geteuid() == 0, "root: the rules are the kernel's firewall, which a root server changes")
    from hci_envs.sandbox.accounts import account_pool
    from hci_envs.sandbox.network import egress

    lease = account_pool().lease()  # an account no other server holds meanwhile
    try:
        with listening() as other:
            egress().assign(lease.account.uid, NetworkPolicy.make("open"))
            probe = lease.account.command(["/usr/bin/python3", "-c", PROBE, json.dumps([["127.0.0.1", other.port]])])
            opened = subprocess.run(probe, capture_output=True, text=True, timeout=30).stdout
            egress().clear(lease.account.uid)
            closed = subprocess.run(probe, capture_output=True, text=True, timeout=30).stdout
    finally:
        lease.release()
    assert "connected" in opened, opened
    assert "refused" in closed, closed
