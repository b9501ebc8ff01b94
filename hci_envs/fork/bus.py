"""A forkable desktop's accessibility bus: a ``dbus-daemon`` and ``at-spi2-registryd`` inside its tree.

As on any desktop (:mod:`hci_envs.desktop.a11ybus`), apps find the bus through ``AT_SPI_BUS_ADDRESS``; here
both programs run in the tree, as its root, so a dump holds them with the apps' connections to them, and each
copy has a bus of its own. Its socket is in the display's socket folder (the tree's, bound in from the host): the
tree's processes and the server reach it, nothing else. The server connects from outside the tree's user
namespace, where its uid is nobody's: the bus takes anonymous connections (it cannot check a uid it cannot see),
and the folder is what keeps everyone else out. The server's own connection is closed around a fork, as its X
connections are.
"""

from __future__ import annotations

import socket
import time

from ..desktop.a11ybus import REGISTRY_NAME, available, registry_program
from ..errors import DisplayStartError, MissingDependencyError
from ..sandbox.accounts import AGENT_PATH
from .tree import STATE, DesktopTree, TreeProcess

#: The socket's name in the display's socket folder (/tmp/.X11-unix inside the tree).
SOCKET = "hci-a11y-bus"
INSIDE_ADDRESS = f"unix:path=/tmp/.X11-unix/{SOCKET}"

CONFIG = f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>accessibility</type>
  <auth>ANONYMOUS</auth>
  <allow_anonymous/>
  <listen>{INSIDE_ADDRESS}</listen>
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
    <allow own="*"/>
  </policy>
  <limit name="max_replies_per_connection">20000</limit>
  <limit name="max_message_size">67108864</limit>
</busconfig>
"""


class TreeBus:
    """The bus of one tree: what :class:`~hci_envs.desktop.a11ybus.AccessibilityBus` offers a desktop (its
    ``address`` for the server, ``agent_env()`` for the apps, ``alive()``, ``wait_registry()``, ``close()``)."""

    anonymous = True

    def __init__(self, tree: DesktopTree, daemon: TreeProcess | None = None,
                 registry: TreeProcess | None = None) -> None:
        self.tree = tree
        self.socket = tree.folder / "x11" / SOCKET
        self.address = f"unix:path={self.socket}"
        self._daemon, self._registry = daemon, registry

    @staticmethod
    def files() -> dict[str, str]:
        """What the tree's state folder needs for a bus (written at its launch)."""
        return {"a11y-bus.conf": CONFIG}

    def start(self) -> None:
        missing = available()
        if missing:
            raise MissingDependencyError(f"the accessibility bus cannot start: {missing}", program="dbus-daemon")
        env = {"PATH": AGENT_PATH, "LANG": "C.UTF-8"}
        self._daemon = self.tree.spawn(["dbus-daemon", f"--config-file={STATE}/a11y-bus.conf", "--nofork",
                                        "--nopidfile", "--nosyslog"], env=env, uid=0, log="a11y-bus.log")
        self._wait(self._accepts, self._daemon, "dbus-daemon", "a11y-bus.log")
        self.socket.chmod(0o666)  # the tree's agent too: the folder keeps everyone else out
        self._registry = self.tree.spawn([registry_program() or "at-spi2-registryd"], uid=0, log="a11y-registry.log",
                                         env={**env, "AT_SPI_BUS_ADDRESS": INSIDE_ADDRESS,
                                              "DBUS_SESSION_BUS_ADDRESS": "disabled:"})

    def adopt(self, daemon_pid: int, registry_pid: int) -> TreeBus:
        """The bus of a copy: the same programs, under the pids the source's had inside."""
        return TreeBus(self.tree, self.tree.process(daemon_pid), self.tree.process(registry_pid))

    @property
    def pids(self) -> tuple[int, int]:
        assert self._daemon is not None and self._registry is not None
        return self._daemon.inside_pid, self._registry.inside_pid

    def _accepts(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(self.socket))
            except OSError:
                return False
        return True

    def wait_registry(self, timeout: float = 5.0) -> None:
        from ..desktop.a11y_dbus import name_has_owner

        assert self._registry is not None
        self._wait(lambda: name_has_owner(self.address, REGISTRY_NAME, anonymous=True), self._registry,
                   "at-spi2-registryd", "a11y-registry.log", timeout)

    def _wait(self, ready: object, proc: TreeProcess, what: str, log_name: str, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not ready():  # type: ignore[operator]
            if proc.poll() is not None or time.monotonic() > deadline:
                raise DisplayStartError(f"the accessibility bus did not start: {what} "
                                        f"{'exited' if proc.poll() is not None else 'is not ready'}: "
                                        f"{self.tree.log_tail(log_name)}")
            time.sleep(0.005)

    def alive(self) -> bool:
        return all(p is not None and p.poll() is None for p in (self._daemon, self._registry))

    def agent_env(self) -> dict[str, str]:
        return {"AT_SPI_BUS_ADDRESS": INSIDE_ADDRESS, "ACCESSIBILITY_ENABLED": "1",
                "QT_LINUX_ACCESSIBILITY_ALWAYS_ON": "1"}

    def close(self) -> None:
        """Nothing to stop: the programs end with the tree."""


__all__ = ["TreeBus", "SOCKET"]
