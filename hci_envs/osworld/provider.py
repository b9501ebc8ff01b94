"""OSWorld's own ``DesktopEnv`` on an hci-envs desktop: a provider of OSWorld's kind (start, address, revert,
stop) whose "virtual machine" is an ``hci-envs serve`` process with OSWorld's guest API on a port of its own.

It runs where OSWorld's harness runs: in a Python environment with ``desktop-env`` (which pins old numpy, torch
and transformers) and hci-envs' light install beside it. The server itself runs on the hci-envs installation's
Python (``server_python``; by default the checkout's ``.venv``, or ``HCI_ENVS_PYTHON``).
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

#: What OSWorld's harness is told the provider is called: its DesktopEnv accepts only the names it knows, and
#: "docker" is the one whose desktops start clean (no revert before the first task).
PROVIDER_NAME = "docker"
VM_PATH = "hci-envs"
#: Where OSWorld's task files expect the user's home (hundreds of them name it): the agent's processes see the
#: session's home there (a mount namespace of theirs; the server must be root, else pass home_view=None).
HOME_VIEW = "/home/user"
_SWAP_LOCK = threading.Lock()


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
                 **serve_options: Any) -> None:
        self.region = None
        self.env = env
        self.screen_size = screen_size
        self.python = python or server_python()
        self.start_timeout = start_timeout
        self.serve_options = serve_options
        if home_view is not None:
            self.serve_options["home_view"] = home_view
        if "home_template" not in self.serve_options:  # OSWorld's home: see .home
            import shutil
            import weakref

            from .home import make_home_template

            template = make_home_template()
            self.serve_options["home_template"] = str(template)
            weakref.finalize(self, shutil.rmtree, template, True)
        self.server: LocalProvider | None = None
        self._control_token = secrets.token_urlsafe(24)
        self.guest_port: int | None = None

    # -- OSWorld's Provider ------------------------------------------------------------------------------
    def start_emulator(self, path_to_vm: str, headless: bool, os_type: str | None = None) -> None:
        if self.server is not None and self.server.alive():
            return  # a revert keeps the server: DesktopEnv calls this again after each one
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
        self.guest_port = None
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
               home_view: str | None = HOME_VIEW, **osworld_args: Any) -> Any:
    """OSWorld's own ``desktop_env.desktop_env.DesktopEnv``, with OSWorld's arguments (``action_space``,
    ``screen_size``, ``require_a11y_tree``, ``cache_dir``, ...), driving an hci-envs desktop instead of a virtual
    machine. ``provider_name``, ``path_to_vm`` and ``region`` are the provider's to set and are refused. ``env``:
    the hci-envs environment to serve; ``home_view``: where the agent sees its home (OSWorld's /home/user)."""
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
    provider = provider or HciEnvsProvider(env=env, screen_size=(int(size[0]), int(size[1])), home_view=home_view)
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
