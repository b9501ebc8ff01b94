"""OSWorld's own ``DesktopEnv`` on an hci-envs desktop: a provider of OSWorld's kind (start, address, revert,
stop) whose "virtual machine" is an ``hci-envs serve`` process with OSWorld's guest API on a port of its own.

It runs where OSWorld's harness runs: in a Python environment with ``desktop-env`` (which pins old numpy, torch
and transformers) and hci-envs' light install beside it. ``placement="local"`` (the default) runs the server on
the hci-envs installation's Python (``server_python``; by default the checkout's ``.venv``, or
``HCI_ENVS_PYTHON``); ``placement="docker"`` runs it in a container of the ``hci-envs/osworld`` image (built by
``hci-envs image build``), whose guest API the harness reaches through a relay of its own process
(:mod:`hci_envs.providers.tunnel`).
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ProviderError
from ..providers.local import LocalProvider
from ..providers import tunnel

#: What OSWorld's harness is told the provider is called: its DesktopEnv accepts only the names it knows, and
#: "docker" is the one whose desktops start clean (no revert before the first task).
PROVIDER_NAME = "docker"
VM_PATH = "hci-envs"
#: Where OSWorld's task files expect the user's home (hundreds of them name it): the agent's processes see the
#: session's home there (a mount namespace of theirs; the server must be root, else pass home_view=None).
HOME_VIEW = "/home/user"
_SWAP_LOCK = threading.Lock()
#: The image a container placement starts (images/osworld), and the port of its guest API's gate in it.
OSWORLD_IMAGE = "hci-envs/osworld:latest"
GATE_PORT = 5001
#: Where that image keeps OSWorld's home template (hci_envs.osworld.home, written at the image's build).
IMAGE_HOME_TEMPLATE = "/opt/hci-envs/osworld-home"
#: The container's /tmp, where the homes are: as DockerProvider's, but programs in it may run (exec).
OSWORLD_TMPFS = "rw,exec,nosuid,nodev,size=1g,mode=1777"
PLACEMENTS = ("local", "docker")


def server_python() -> str:
    """The Python that runs ``hci-envs serve``: HCI_ENVS_PYTHON, else the checkout's .venv, else this one."""
    configured = os.environ.get("HCI_ENVS_PYTHON")
    if configured:
        return configured
    checkout = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "python"
    return str(checkout) if checkout.exists() else sys.executable


class HciEnvsProvider:
    """OSWorld's Provider interface over one hci-envs server (the methods OSWorld's DesktopEnv calls)."""

    def __init__(self, *, env: str = "desktop", screen_size: tuple[int, int] = (1920, 1080),
                 python: str | None = None, start_timeout: float = 120.0, home_view: str | None = HOME_VIEW,
                 placement: str = "local", image: str = OSWORLD_IMAGE, docker_options: dict[str, Any] | None = None,
                 **serve_options: Any) -> None:
        """``serve_options`` are a local server's (``hci-envs serve`` options); ``docker_options`` are
        :class:`~hci_envs.providers.docker.DockerProvider`'s (limits, ``docker run`` options) for a container."""
        if placement not in PLACEMENTS:
            raise ConfigError(f"placement must be one of {', '.join(PLACEMENTS)}, not {placement!r}", field="placement")
        if placement == "docker" and serve_options:
            raise ConfigError(f"{', '.join(sorted(serve_options))}: options of a local server; a container runs its "
                              "image's server (pass docker_options for the container)", field="placement")
        if placement == "local" and docker_options:
            raise ConfigError("docker_options are for placement='docker'", field="docker_options")
        self.region = None
        self.env = env
        self.screen_size = screen_size
        self.placement = placement
        self.image = image
        self.docker_options = dict(docker_options or {})
        self.home_view = home_view
        self.python = python or server_python()
        self.start_timeout = start_timeout
        self.serve_options = serve_options
        self._relay: tunnel.Tunnel | None = None
        if placement == "docker":
            self.server: Any = None
            self._control_token = secrets.token_urlsafe(24)
            self.guest_port: int | None = None
            return
        if home_view is not None:
            self.serve_options["home_view"] = home_view
        # OSWorld's machine reaches the network, and its tasks open web pages: so do its agents here, unless the
        # caller confines them (network="none", or an allowlist: allow=[...])
        if "allow" not in self.serve_options:
            self.serve_options.setdefault("network", "open")
        if "home_template" not in self.serve_options:  # OSWorld's home: see .home
            import shutil
            import weakref

            from .home import make_home_template

            template = make_home_template()
            self.serve_options["home_template"] = str(template)
            weakref.finalize(self, shutil.rmtree, template, True)
        self.server = None
        self._control_token = secrets.token_urlsafe(24)
        self.guest_port = None

    # -- OSWorld's Provider ------------------------------------------------------------------------------
    def start_emulator(self, path_to_vm: str, headless: bool, os_type: str | None = None) -> None:
        if self.server is not None and self.server.alive():
            return  # a revert keeps the server: DesktopEnv calls this again after each one
        if self.placement == "docker":
            self._start_container()
            return
        server = LocalProvider(self.env, python=self.python, size=self.screen_size, osworld_port=0,
                               control_token=self._control_token, **self.serve_options)
        try:
            server.start(timeout=self.start_timeout)
        except ProviderError as exc:
            raise ProviderError(f"the hci-envs desktop for OSWorld did not start: {exc.message}") from None
        self.server = server
        deadline = time.monotonic() + 5.0  # the line is printed before /health answers; its reader may lag
        while (port := _guest_port(server.logs(200))) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.guest_port = port
        if self.guest_port is None:
            server.stop()
            self.server = None
            raise ProviderError("hci-envs serve did not say where OSWorld's guest API listens")

    def _start_container(self) -> None:
        """The desktop in a container of the osworld image; its gate reached through a relay of this process."""
        from ..providers.docker import DockerProvider

        secret = secrets.token_urlsafe(32)
        width, height = self.screen_size
        command = ["hci-envs", "serve", "--host", "0.0.0.0", "--port", "8000", "--env", self.env,
                   "--size", f"{width}x{height}", "--osworld-gate-port", str(GATE_PORT), "--max-sessions", "1",
                   # the view is a link in the image, which serves one desktop at a time: no spare
                   "--no-spare", "--home-template", IMAGE_HOME_TEMPLATE, "--network", "open"]
        if self.home_view is not None:
            command += ["--home-view", self.home_view]
        # The homes are on the container's /tmp: OSWorld's tasks run scripts from theirs (~/bin/...), which
        # Docker's default tmpfs (noexec) would refuse, as a VM's home never does
        options = {"tmpfs": {"/tmp": OSWORLD_TMPFS}, **self.docker_options}
        server = DockerProvider(self.image, control_token=self._control_token, command=command,
                                env_vars={"HCI_ENVS_OSWORLD_TOKEN": secret}, publish=(GATE_PORT,), **options)
        try:
            server.start(timeout=self.start_timeout)
            self._relay = tunnel.relay(("127.0.0.1", server.host_port(GATE_PORT)), secret).start()
        except ProviderError as exc:
            server.stop()
            raise ProviderError(f"the hci-envs desktop for OSWorld did not start in a container: {exc.message}") from None
        self.server = server
        self.guest_port = self._relay.port

    def get_ip_address(self, path_to_vm: str) -> str:
        if self.guest_port is None:
            raise ProviderError("the desktop is not running: start_emulator first")
        # ip:guest API:DevTools:VNC:VLC. The browser's DevTools and VLC's HTTP interface are served on the guest
        # API's port (only this process's user may call it); no VNC for the harness.
        return f"127.0.0.1:{self.guest_port}:{self.guest_port}:0:{self.guest_port}"

    def save_state(self, path_to_vm: str, snapshot_name: str) -> None:
        raise ProviderError("hci-envs desktops revert to their start state (a spare desktop); they keep no "
                            "other snapshots")

    def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str) -> str:
        """The start state again: a reset of the session (a spare desktop swapped in where there is one)."""
        if self.server is None or not self.server.alive():
            return path_to_vm  # DesktopEnv starts it again next
        request = urllib.request.Request(
            f"{self.server.base_url}/reset", data=b"{}", method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self._control_token}"})
        try:
            with urllib.request.urlopen(request, timeout=self.start_timeout) as response:
                response.read()
        except OSError as exc:
            raise ProviderError(f"resetting the hci-envs desktop failed: {exc}") from None
        return path_to_vm

    def stop_emulator(self, path_to_vm: str, region: str | None = None, *args: Any, **kwargs: Any) -> None:
        server, self.server = self.server, None
        relay, self._relay = self._relay, None
        self.guest_port = None
        if relay is not None:
            relay.stop()
        if server is not None:
            server.stop()


class HciEnvsVMManager:
    """OSWorld's VMManager for desktops that need no registry: each DesktopEnv starts its own."""

    checked_and_cleaned = True

    def initialize_registry(self, **kwargs: Any) -> None: ...
    def add_vm(self, vm_path: str, **kwargs: Any) -> None: ...
    def delete_vm(self, vm_path: str, **kwargs: Any) -> None: ...
    def occupy_vm(self, vm_path: str, pid: int, **kwargs: Any) -> None: ...
    def list_free_vms(self, **kwargs: Any) -> list[str]:
        return [VM_PATH]

    def check_and_clean(self, **kwargs: Any) -> None: ...

    def get_vm_path(self, **kwargs: Any) -> str:
        return VM_PATH


def DesktopEnv(*, provider: HciEnvsProvider | None = None, env: str = "desktop",  # noqa: N802 - OSWorld's name
               home_view: str | None = HOME_VIEW, placement: str = "local", image: str = OSWORLD_IMAGE,
               **osworld_args: Any) -> Any:
    """OSWorld's own ``desktop_env.desktop_env.DesktopEnv``, with OSWorld's arguments (``action_space``,
    ``screen_size``, ``require_a11y_tree``, ``cache_dir``, ...), driving an hci-envs desktop instead of a virtual
    machine. ``provider_name``, ``path_to_vm`` and ``region`` are the provider's to set and are refused. ``env``:
    the hci-envs environment to serve; ``home_view``: where the agent sees its home (OSWorld's /home/user);
    ``placement``: "local" (a server on this machine) or "docker" (a container of ``image``)."""
    _stand_in_for_easyocr()
    try:
        from desktop_env import desktop_env as osworld
    except ImportError as exc:
        raise ConfigError(f"OSWorld's harness is not installed here ({exc}): install desktop-env==1.0.2 in "
                          "this environment (`python3 -m hci_envs install --test` makes .venv-osworld)") from None
    for taken in ("provider_name", "path_to_vm", "region"):
        if taken in osworld_args:
            raise ConfigError(f"{taken} is set by hci-envs' provider; leave it out", field=taken)
    size = tuple(osworld_args.get("screen_size") or (1920, 1080))
    provider = provider or HciEnvsProvider(env=env, screen_size=(int(size[0]), int(size[1])), home_view=home_view,
                                           placement=placement, image=image)
    manager = HciEnvsVMManager()
    with _SWAP_LOCK:  # OSWorld's DesktopEnv asks this module-level factory for its provider
        original = osworld.create_vm_manager_and_provider
        osworld.create_vm_manager_and_provider = lambda *args, **kwargs: (manager, provider)
        try:
            return osworld.DesktopEnv(provider_name=PROVIDER_NAME, path_to_vm=VM_PATH, **osworld_args)
        finally:
            osworld.create_vm_manager_and_provider = original


def _stand_in_for_easyocr() -> None:
    """OSWorld's metrics import easyocr (and with it torch) at module level for one OCR metric. Where it is not
    installed, a stand-in module lets the harness import, and that metric fails saying what is missing."""
    import importlib.util
    import types

    if "easyocr" in sys.modules or importlib.util.find_spec("easyocr") is not None:
        return
    stand_in = types.ModuleType("easyocr")

    def __getattr__(name: str) -> Any:
        raise ImportError("easyocr is not installed (OSWorld's OCR metric compare_image_text needs it, with torch): "
                          "pip install easyocr in OSWorld's environment")

    stand_in.__getattr__ = __getattr__  # type: ignore[attr-defined]
    sys.modules["easyocr"] = stand_in


def _guest_port(output: str) -> int | None:
    for line in output.splitlines():
        if "OSWorld guest API:" in line:
            address = line.split("OSWorld guest API:", 1)[1].split()[0]
            return int(address.rsplit(":", 1)[1])
    return None
