"""The node's side of a pool: one Ray actor per desktop, holding the desktop's server for as long as it lives.

A :class:`DesktopHost` runs on a node that offers the custom resource ``hci_desktop`` (one unit per desktop). It
starts the desktop with a provider, on the node itself: ``hci-envs serve`` as a local process (the default), or
the project's image through the Docker provider (``image=``). Either listens on the node's address as Ray
knows it, so the trainer reaches it directly; the tokens come from the pool as the actor's arguments, and reach
the server in its environment, never on a command line.

The desktop never outlives its actor: a local server watches a pipe from the actor and shuts down when the
actor's process ends, however it ends; a container is kept alive by the actor's health checks and exits on
its own (``--orphan-timeout``) once they stop. Standard library and the light client's dependencies only; Ray
is imported by whoever makes this class an actor.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import httpx

from ..providers import DockerProvider, LocalProvider, Provider

#: Seconds without a client after which a pooled container exits (its actor calls it 4x as often; the
#: ``orphan_timeout`` option of an image pool changes it).
CONTAINER_ORPHAN_TIMEOUT = 120.0


class DesktopHost:
    """One desktop of a pool. Methods run in the actor's threads: ``until_stopped`` blocks one for the actor's
    life, so the pool learns of the actor's death as that call failing."""

    def __init__(self, env: str, image: str | None, options: dict[str, Any], control_token: str,
                 agent_token: str) -> None:
        self.env, self.image, self.options = env, image, dict(options)
        self.control_token, self.agent_token = control_token, agent_token
        self.provider: Provider | None = None
        self._stopped = threading.Event()

    def start(self, timeout: float) -> dict[str, Any]:
        """Start the desktop's server on this node and wait until it is healthy; what the pool needs to reach it."""
        import ray

        host = ray.util.get_node_ip_address()
        tokens = {"control_token": self.control_token, "agent_token": self.agent_token}
        if self.image:
            options = {"orphan_timeout": CONTAINER_ORPHAN_TIMEOUT, **self.options}
            self.provider = DockerProvider(self.image, host=host, **tokens, **options)
        else:
            # One session (the default one, which the pool attaches to) unless asked (max_sessions=N: room for
            # forks of a claimed desktop, desktop="forkable"): a stray client gets CAPACITY_REACHED instead of a
            # second desktop on a node that was sized for one.
            # No spare desktop per server unless asked (spare=True): the pool's own spares already make a claim
            # instant, and a spare would double what each unit of hci_desktop costs the node.
            options = {"spare": False, "max_sessions": 1, **self.options}
            self.provider = LocalProvider(self.env, host=host, **tokens, **options)
        headers = {"Authorization": f"Bearer {self.control_token}"}
        base_url = self.provider.start(timeout=timeout, headers=headers)
        state = httpx.get(f"{base_url}/state", headers=headers, timeout=30.0, trust_env=False)
        state.raise_for_status()
        if self.image and options["orphan_timeout"]:
            threading.Thread(target=self._keep_container, args=(base_url, headers, options["orphan_timeout"] / 4),
                             daemon=True, name="hci-envs-keepalive").start()
        return {"node_id": ray.get_runtime_context().get_node_id(), "node_ip": host, "base_url": base_url,
                "mcp_url": state.json().get("mcp_url"), "actor_pid": os.getpid()}

    def _keep_container(self, base_url: str, headers: dict[str, str], interval: float) -> None:
        # /state, not /health: health probes do not count as clients for the orphan timeout
        with httpx.Client(timeout=10.0, headers=headers, trust_env=False) as http:
            while not self._stopped.wait(interval):
                try:
                    http.get(f"{base_url}/state")
                except httpx.HTTPError:
                    pass  # the pool's probe decides what a silent desktop means

    def alive(self) -> bool:
        """Whether the desktop's server (process or container) still runs."""
        return self.provider is not None and self.provider.alive()

    def until_stopped(self) -> None:
        """Returns when the pool stops this desktop; fails (in the pool) when the actor dies instead."""
        self._stopped.wait()

    def stop(self) -> None:
        """Stop the desktop's server and everything it started; safe to call twice."""
        self._stopped.set()
        provider, self.provider = self.provider, None
        if provider is not None:
            provider.stop()
