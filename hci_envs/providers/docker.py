"""Environments as containers, through the ``docker`` SDK.

    provider = DockerProvider("hci-envs/base:latest")
    base_url = provider.start()          # a free loopback port mapped to 8000, healthy
    ...
    provider.stop()                      # the container is gone

Secure by default: random control and agent tokens are passed in the environment (the server inside binds
0.0.0.0 and refuses to start without them), every capability is dropped but the six the server needs to run
each session's agent side as an account of its own (``hci_envs.accounts.CAPABILITIES``: SETUID, SETGID, KILL,
CHOWN, DAC_OVERRIDE, FOWNER; the image's entrypoint hands them to the non-root server as ambient capabilities
and no process stays root), no-new-privileges is set, the container is never privileged, and memory, CPU
and process limits apply. The container is removed on
``stop()``, on a failed start, at interpreter exit and on SIGTERM (where the process has no SIGTERM handler
of its own); a container whose client died without cleaning up (SIGKILL) exits by itself after
``orphan_timeout`` seconds with no client (default 600; None: never), and is removed by the next provider
started on the same machine.
"""

from __future__ import annotations

import os
import secrets
import socket
from typing import Any

from ..accounts import CAPABILITIES
from ..errors import ProviderError, require
from .base import Provider, redact

LABEL = "hci-envs.provider"
OWNER = "hci-envs.owner"


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_orphans(client: Any) -> list[str]:
    """Remove containers started by providers of processes on this machine that are gone."""
    removed = []
    host = socket.gethostname()
    for container in client.containers.list(all=True, filters={"label": LABEL}):
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
        image: str,
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
        **run_kwargs: Any,
    ) -> None:
        self.image = image
        self.control_token = control_token or secrets.token_urlsafe(24)
        self.agent_token = agent_token or secrets.token_urlsafe(24)
        self.env_vars = {"HCI_ENVS_CONTROL_TOKEN": self.control_token, "HCI_ENVS_AGENT_TOKEN": self.agent_token,
                         **({"HCI_ENVS_ORPHAN_TIMEOUT": f"{orphan_timeout:g}"} if orphan_timeout else {}),
                         **(env_vars or {})}
        self.limits = {"mem_limit": mem_limit, "nano_cpus": int(cpus * 1e9), "pids_limit": pids_limit,
                       "shm_size": shm_size}
        self.tmpfs = tmpfs if tmpfs is not None else {"/tmp": "rw,size=512m,mode=1777"}
        self.host, self.port = host, port
        self.command = command
        self.name = name
        self.run_kwargs = run_kwargs
        self.container: Any = None
        self._client: Any = None

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
                    ports={"8000/tcp": (self.host, self.port)}, environment=env_vars,
                    labels={LABEL: "docker", OWNER: _owner()},
                    cap_drop=["ALL"], cap_add=[name.removeprefix("CAP_") for name in CAPABILITIES],
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
