"""Server settings, and the start-up check that nothing is exposed without a secret."""

from __future__ import annotations

import ipaddress
import os
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError

LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(24)


@dataclass
class ServerConfig:
    """How the server runs.

    Secrets: ``control_token`` guards the control plane (reset, step, state, sessions); agent tokens guard
    each session's MCP endpoint (``agent_tokens=True`` gives every session its own random token;
    ``agent_token`` fixes the default session's). On a loopback address they may be off; on any other
    address the server refuses to start without both.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    env_class: type | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    mode: Literal["simulation", "production"] = "simulation"
    max_sessions: int = 8
    idle_timeout: float = 600.0
    control_token: str | None = None
    agent_tokens: bool = False
    agent_token: str | None = None
    start_default_session: bool = True
    #: Create the default session's desktop on first use rather than at start-up: a container whose
    #: clients each open a session of their own (OpenEnv's WebSocket clients) then runs one desktop, not two.
    lazy_default_session: bool = False
    public_url: str | None = None
    vnc: bool = True
    #: A raw VNC TCP port for native viewers (on ``host``); None for none, 0 for a free one.
    vnc_port: int | None = None
    #: Seconds without human input after which a person's hold on the desktop lapses.
    takeover_timeout: float = 30.0
    #: Where recorded episodes go (one folder each).
    episodes_dir: str = "episodes"
    #: The task suite a reset can name tasks of (a file or folder; None: the built-in suite).
    tasks: str | None = None
    #: The agent interface sessions advertise: "tools" (one tool per call) or "code" (CodeAct).
    action_mode: Literal["tools", "code"] = "tools"
    #: Called (with the HciServer) once the default session is up; the CLI prints the URLs from it.
    on_ready: Any = None
    #: Serve a non-loopback address without secrets anyway (HCI_ENVS_ALLOW_NO_TOKENS=1): only on a network
    #: you trust, e.g. for clients that cannot send a token.
    allow_no_tokens: bool = False
    #: Agent containment: "uid" (each session's agent side runs as an account of its own; required),
    #: "none" (as the server's user), "auto" (uid where the machine allows it).
    isolation: str = "auto"
    #: Serve a non-loopback address although agents cannot be isolated (HCI_ENVS_ALLOW_NO_ISOLATION=1).
    allow_no_isolation: bool = False
    #: Processes an agent account may run at once (RLIMIT_NPROC, counted per uid); 0 for no limit (containers
    #: bound processes with their cgroup instead).
    max_agent_processes: int = 0
    #: Tool calls one session runs at once; more wait their turn without holding a server thread.
    session_concurrency: int = 4
    #: Calls one session may have waiting; beyond it a call is refused (HTTP 429, an MCP tool error).
    max_queued_calls: int = 256
    #: Seconds a client has to send a request's headers (after connecting or after the previous response).
    header_timeout: float = 10.0
    #: Seconds with no client (no request, no open WebSocket, no VNC viewer) after which the server exits:
    #: a container whose client died without removing it ends on its own. None: never.
    orphan_timeout: float | None = None
    #: A port (on loopback) serving OSWorld's guest API over the default session (hci_envs.server.osworld_guest);
    #: None for none. Only ``osworld_owner`` (a uid; default: this server's) may call it.
    osworld_port: int | None = None
    osworld_owner: int | None = None
    #: Where the gate to the guest API listens (host:port), if it does (hci_envs.providers.tunnel); set by serve.
    osworld_gate: str | None = None

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise ConfigError("max_sessions must be at least 1")
        if self.idle_timeout <= 0:
            raise ConfigError("idle_timeout must be positive")
        if self.agent_token:
            self.agent_tokens = True
        if self.session_concurrency < 1 or self.max_queued_calls < 1:
            raise ConfigError("session_concurrency and max_queued_calls must be at least 1")
        if self.orphan_timeout is not None and self.orphan_timeout <= 0:
            raise ConfigError("orphan_timeout must be positive (or None for never)")
        if self.isolation not in ("auto", "uid", "none"):
            raise ConfigError(f"isolation must be 'auto', 'uid' or 'none', not {self.isolation!r}")

    @classmethod
    def from_env(cls, **overrides: Any) -> ServerConfig:
        """Secrets may also come from HCI_ENVS_CONTROL_TOKEN and HCI_ENVS_AGENT_TOKEN."""
        values: dict[str, Any] = {}
        if os.environ.get("HCI_ENVS_CONTROL_TOKEN"):
            values["control_token"] = os.environ["HCI_ENVS_CONTROL_TOKEN"]
        if os.environ.get("HCI_ENVS_AGENT_TOKEN"):
            values["agent_token"] = os.environ["HCI_ENVS_AGENT_TOKEN"]
        if os.environ.get("HCI_ENVS_LAZY_DEFAULT_SESSION") == "1":
            values["lazy_default_session"] = True
        if os.environ.get("HCI_ENVS_ALLOW_NO_TOKENS") == "1":
            values["allow_no_tokens"] = True
        if os.environ.get("HCI_ENVS_ALLOW_NO_ISOLATION") == "1":
            values["allow_no_isolation"] = True
        if os.environ.get("HCI_ENVS_ISOLATION"):
            values["isolation"] = os.environ["HCI_ENVS_ISOLATION"]
        for variable, key in (("HCI_ENVS_HEADER_TIMEOUT", "header_timeout"),
                              ("HCI_ENVS_ORPHAN_TIMEOUT", "orphan_timeout")):
            try:
                if os.environ.get(variable):
                    values[key] = float(os.environ[variable])
            except ValueError:
                raise ConfigError(f"{variable} must be a number of seconds") from None
        if os.environ.get("HCI_ENVS_MAX_AGENT_PROCESSES", "").isdigit():
            values["max_agent_processes"] = int(os.environ["HCI_ENVS_MAX_AGENT_PROCESSES"])
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @property
    def exposed(self) -> bool:
        return not is_loopback(self.host)

    @property
    def guards_origin(self) -> bool:
        """Whether web pages' Origin is checked: unless both a control token and agent tokens are set."""
        return not (self.control_token and self.agent_tokens)

    def check_exposure(self, isolation: str = "uid") -> None:
        """Refuse to serve on a non-loopback address without secrets, or without agent isolation (raises
        ConfigError)."""
        if not self.exposed:
            return
        if isolation != "uid" and not self.allow_no_isolation:
            raise ConfigError(
                f"refusing to listen on {self.host}, which is not a loopback address, without agent isolation "
                "(agents would run as the server's own user and could read its secrets). Run the server as root "
                "on a machine set up with `python3 -m hci_envs install`, use the images, bind to 127.0.0.1, or "
                "set HCI_ENVS_ALLOW_NO_ISOLATION=1 if every agent is trusted."
            )
        if self.allow_no_tokens:
            import sys

            print(f"hci-envs: WARNING: serving {self.host} without secrets (HCI_ENVS_ALLOW_NO_TOKENS=1); anyone "
                  "who can reach the port can drive the desktop", file=sys.stderr, flush=True)
            return
        missing = []
        if not self.control_token:
            missing.append("a control token (--control-token or HCI_ENVS_CONTROL_TOKEN)")
        if not self.agent_tokens:
            missing.append("agent tokens (--agent-token TOKEN, HCI_ENVS_AGENT_TOKEN, or --agent-tokens)")
        if missing:
            raise ConfigError(
                f"refusing to listen on {self.host}, which is not a loopback address, without "
                f"{' and '.join(missing)}. Anyone who can reach the port could drive the desktop. "
                "Set the secrets, or bind to 127.0.0.1. (Starting an image with OpenEnv's from_docker_image? "
                "Pass provider=hci_envs.providers.DockerProvider(): it sets them.)"
            )

    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"
