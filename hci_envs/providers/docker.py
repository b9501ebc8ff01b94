"""Environments as containers, through the ``docker`` SDK.

    provider = DockerProvider("hci-envs/base:latest")
    base_url = provider.start()          # a free loopback port mapped to 8000, healthy
    ...
    provider.stop()                      # the container is gone

Secure by default: random control and agent tokens are passed in the environment (the server inside binds
0.0.0.0 and refuses to start without them), every capability is dropped but the six the server needs to run
each session's agent side as an account of its own (``hci_envs.sandbox.accounts.CAPABILITIES``: SETUID, SETGID, KILL,
CHOWN, DAC_OVERRIDE, FOWNER; the image's entrypoint hands them to the non-root server as ambient capabilities
and no process stays root), no-new-privileges is set, the container is never privileged, and memory, CPU
and process limits apply. The container is removed on
``stop()``, on a failed start, at interpreter exit and on SIGTERM (where the process has no SIGTERM handler
of its own); a container whose client died without cleaning up (SIGKILL) exits by itself after
``orphan_timeout`` seconds with no client (default 600; None: never), and is removed by the next provider
started on the same machine.

It is also an OpenEnv container provider (``start_container``, ``stop_container``, ``wait_for_ready``,
``close``; duck-typed, as OpenEnv calls them, so openenv is never imported here):

    from openenv.core import GenericEnvClient
    env = GenericEnvClient.from_docker_image("hci-envs/base:latest", provider=DockerProvider()).sync()

OpenEnv's clients send no headers when they start a container, so ``start_container`` returns a base URL
that carries the control token as a path prefix (``http://127.0.0.1:PORT/t/<token>``), which the server
takes as that token (:mod:`hci_envs.server.path_token`); tokens stay on, and requests without one are refused.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from typing import Any

from ..sandbox.accounts import CAPABILITIES

#: What the server in a container may do: switch to the agent accounts (CAPABILITIES), and keep the agents'
#: network policy in the container's own network namespace (NET_ADMIN: its rules, nothing of the host's). The
#: agent's programs have none of them.
CONTAINER_CAPABILITIES = [*(name.removeprefix("CAP_") for name in CAPABILITIES), "NET_ADMIN"]
from ..errors import ConfigError, ProviderError, require
from .base import Provider, redact, wait_for_health

LABEL = "hci-envs.provider"
#: What a token in a URL's path may be made of (it must come back from the server's decoded path unchanged).
_URL_SAFE = re.compile(r"[A-Za-z0-9._~-]+")
OWNER = "hci-envs.owner"
#: The label that names the run a container belongs to, from the environment variable of the same meaning
#: (``HCI_ENVS_RUN``): runs that share a Docker daemon (two CI jobs on one machine) tell theirs apart by it.
RUN = "hci-envs.run"


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_label() -> dict[str, str]:
    """``{RUN: name}`` when ``HCI_ENVS_RUN`` names this run, else nothing."""
    name = os.environ.get("HCI_ENVS_RUN", "")
    return {RUN: name} if name else {}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_orphans(client: Any) -> list[str]:
    """Remove containers started by providers of processes on this machine that are gone: of this run (see
    :data:`RUN`) only, since another run sharing the daemon keeps to its own."""
    removed = []
    host = socket.gethostname()
    ours = run_label().get(RUN, "")
    # Listing inspects each container: one removed meanwhile (another provider's, stopping) is passed over.
    for container in client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True):
        if container.labels.get(RUN, "") != ours:
            continue
        owner = container.labels.get(OWNER, "")
        owner_host, _, pid = owner.rpartition(":")
        if owner_host == host and pid.isdigit() and not _pid_alive(int(pid)):
            try:
                container.remove(force=True)
                removed.append(container.name)
            except Exception:
                pass
    return removed


class DockerProvider(Provider):
    def __init__(
        self,
        image: str | None = None,
        *,
        env_vars: dict[str, str] | None = None,
        control_token: str | None = None,
        agent_token: str | None = None,
        mem_limit: str = "2g",
        cpus: float = 2.0,
        pids_limit: int = 1024,
        shm_size: str = "256m",
        tmpfs: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        command: list[str] | None = None,
        name: str | None = None,
        orphan_timeout: float | None = 600.0,
        publish: tuple[int, ...] = (),
        **run_kwargs: Any,
    ) -> None:
        self.image = image
        self.control_token = control_token or secrets.token_urlsafe(24)
        self.agent_token = agent_token or secrets.token_urlsafe(24)
        self.env_vars = {"HCI_ENVS_CONTROL_TOKEN": self.control_token, "HCI_ENVS_AGENT_TOKEN": self.agent_token,
                         **({"HCI_ENVS_ORPHAN_TIMEOUT": f"{orphan_timeout:g}"} if orphan_timeout else {})}
        self._add_env(env_vars)
        self.limits = {"mem_limit": mem_limit, "nano_cpus": int(cpus * 1e9), "pids_limit": pids_limit,
                       "shm_size": shm_size}
        self.tmpfs = tmpfs if tmpfs is not None else {"/tmp": "rw,size=512m,mode=1777"}
        self.host, self.port = host, port
        self.command = command
        self.name = name
        #: More container ports published on ``host`` (each at a free port: see host_port)
        self.publish = tuple(publish)
        self.run_kwargs = run_kwargs
        self.container: Any = None
        self._client: Any = None

    def _add_env(self, env_vars: dict[str, str] | None) -> None:
        """More variables for the container; tokens given here are the tokens (the URLs must carry them)."""
        self.env_vars.update(env_vars or {})
        self.control_token = self.env_vars["HCI_ENVS_CONTROL_TOKEN"]
        self.agent_token = self.env_vars["HCI_ENVS_AGENT_TOKEN"]

    # -- OpenEnv's ContainerProvider interface ------------------------------------------------------------
    def start_container(self, image: str | None = None, port: int | None = None,
                        env_vars: dict[str, str] | None = None, *, timeout: float = 90.0, **run_kwargs: Any) -> str:
        """Start the container and wait until it is healthy (what OpenEnv's ``from_docker_image`` calls, with
        its ``port``, ``env_vars`` and other keyword arguments, which are ``docker run`` options here). Returns
        the base URL for OpenEnv's clients: the control token is its path (see the module), so keep it as
        private as the token."""
        if image is not None:
            self.image = image
        if port is not None:
            self.port = port
        self._add_env(env_vars)
        self.run_kwargs.update(run_kwargs)
        return self.token_url(self.start(timeout=timeout))

    def token_url(self, base_url: str) -> str:
        """``base_url`` with the control token as its path prefix (:mod:`hci_envs.server.path_token`)."""
        if not _URL_SAFE.fullmatch(self.control_token):
            raise ConfigError("a control token that goes in a URL's path must be made of letters, digits and "
                              "'-', '_', '.', '~' (secrets.token_urlsafe makes such tokens)", field="control_token")
        return f"{base_url.rstrip('/')}/t/{self.control_token}"

    def wait_for_ready(self, base_url: str, timeout_s: float = 30.0) -> None:
        """Wait until the server at ``base_url`` answers ``/health`` with a running desktop (``start_container``
        has already waited: this is then one request). Raises :class:`ProviderError` (a RuntimeError) with the
        container's last log lines."""
        wait_for_health(base_url, timeout_s, alive=self.alive, logs=self.logs)

    def stop_container(self) -> None:
        """Remove the container (OpenEnv calls this when its client closes); safe to call twice."""
        self.stop()

    def close(self) -> None:
        """Release the Docker SDK's client (OpenEnv's hook for a provider's own resources); the container,
        if still running, is removed by ``stop_container``, at interpreter exit, or on SIGTERM."""
        client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- running the container ----------------------------------------------------------------------------
    def _docker(self) -> Any:
        if self._client is None:
            docker = require("docker", "docker", "running environments in containers")
            try:
                self._client = docker.from_env()
                self._client.ping()
            except Exception as exc:
                raise ProviderError(f"cannot reach the Docker daemon: {exc}") from exc
        return self._client

    def _start(self) -> str:
        import docker

        if self.image is None:
            raise ProviderError("no image to start: DockerProvider(image) or start_container(image)")
        client = self._docker()
        reap_orphans(client)
        try:
            client.images.get(self.image)
        except docker.errors.ImageNotFound:
            raise ProviderError(
                f"no image {self.image!r} here; build it with `hci-envs image build` (no registry is used)"
            ) from None
        chosen = self.port
        for attempt in range(3 if chosen is None else 1):
            # Chosen here, so the server inside can report URLs that work from outside; another process may
            # take the port before Docker binds it, hence the retries.
            self.port = chosen if chosen is not None else _free_port(self.host)
            env_vars = {"HCI_ENVS_PUBLIC_URL": f"http://{self.host}:{self.port}", **self.env_vars}
            try:
                # create, remember, then start: a container that exists is always ours to remove, even when
                # starting it fails or Ctrl-C arrives in between.
                self.container = client.containers.create(
                    self.image, command=self.command, name=self.name,
                    ports={"8000/tcp": (self.host, self.port), **{f"{p}/tcp": (self.host, None) for p in self.publish}},
                    environment=env_vars,
                    labels={LABEL: "docker", OWNER: _owner(), **run_label()},
                    cap_drop=["ALL"], cap_add=CONTAINER_CAPABILITIES,
                    security_opt=["no-new-privileges"], privileged=False,
                    tmpfs=self.tmpfs, **self.limits, **self.run_kwargs,
                )
                self.container.start()
                break
            except docker.errors.APIError as exc:
                self._stop()
                taken = "address already in use" in str(exc).lower() or "port is already allocated" in str(exc).lower()
                if taken and chosen is None and attempt < 2:
                    continue
                raise ProviderError(f"docker could not start {self.image}: {exc.explanation or exc}") from exc
        self.container.reload()
        bindings = self.container.attrs["NetworkSettings"]["Ports"].get("8000/tcp") or []
        if not bindings:
            raise ProviderError(f"{self.image} published no port for 8000: {self.logs()}")
        return f"http://{self.host}:{bindings[0]['HostPort']}"

    def host_port(self, container_port: int) -> int:
        """The port on ``host`` where the running container's ``container_port`` (one of ``publish``) is."""
        if self.container is None:
            raise ProviderError("the container is not running")
        self.container.reload()
        bindings = self.container.attrs["NetworkSettings"]["Ports"].get(f"{container_port}/tcp") or []
        if not bindings:
            raise ProviderError(f"{self.image} has no published port for {container_port} (publish=...)")
        return int(bindings[0]["HostPort"])

    def alive(self) -> bool:
        if self.container is None:
            return False
        try:
            self.container.reload()
        except Exception:
            return False
        return self.container.status in ("created", "running")

    def logs(self, lines: int = 30) -> str:
        if self.container is None:
            return "(no container)"
        try:
            return redact(self.container.logs(tail=lines).decode("utf-8", errors="replace").rstrip())
        except Exception as exc:
            return f"(no logs: {exc})"

    def _stop(self) -> None:
        container, self.container = self.container, None
        if container is None:
            return
        try:
            container.remove(force=True)
        except Exception as exc:
            if "No such container" not in str(exc) and "404" not in str(exc):
                raise ProviderError(f"could not remove container {container.name}: {exc}") from exc
