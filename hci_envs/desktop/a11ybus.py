"""A private accessibility (AT-SPI) bus for one display: a ``dbus-daemon`` and ``at-spi2-registryd``.

Apps find it through ``AT_SPI_BUS_ADDRESS`` (GTK, Qt, LibreOffice and chromium all read it before looking for
a session bus), register with the registry on it, and answer the server's tree queries there. Both programs
run on the server's side, as the server's user: the agent can neither stop them nor put a bus of its own in
their place (the socket's folder is the server's, 0711). The bus lets in two users only, the server's and
the desktop's agent account (dbus-daemon's own check of the peer's uid), so no other session can connect,
read this desktop's tree or pose as its apps.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from xml.sax.saxutils import quoteattr

from ..errors import MissingDependencyError
from ..sandbox.processes import ProcessSupervisor
from ..sandbox.watchdog import remove_temporary_dir, temporary_dir

log = logging.getLogger(__name__)

#: Where Debian's at-spi2-core puts the registry daemon (the first that exists is used).
REGISTRY_PROGRAMS = ("/usr/libexec/at-spi2-registryd", "/usr/lib/at-spi2-core/at-spi2-registryd",
                     "/usr/lib/at-spi2/at-spi2-registryd")
#: What to install when a piece is missing (Debian and Ubuntu package names).
APT_HINT = "sudo apt-get install dbus-daemon at-spi2-core"
#: The registry's well-known name: apps register with it, and the tree starts from it.
REGISTRY_NAME = "org.a11y.atspi.Registry"

_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>accessibility</type>
  <auth>EXTERNAL</auth>
  <listen>unix:path={socket}</listen>
  <policy context="default">
    {users}
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
    <allow own="*"/>
  </policy>
  <!-- a tree query pipelines one call per element -->
  <limit name="max_replies_per_connection">20000</limit>
  <limit name="max_message_size">67108864</limit>
  <limit name="max_connections_per_user">256</limit>
</busconfig>
"""


def _accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def registry_program() -> str | None:
    for path in REGISTRY_PROGRAMS:
        if os.access(path, os.X_OK):
            return path
    return None


def available() -> str | None:
    """None when a bus can be started here; otherwise what is missing, with the command that installs it."""
    missing = [name for name, found in (("dbus-daemon", shutil.which("dbus-daemon")),
                                        ("at-spi2-registryd", registry_program())) if not found]
    return f"{' and '.join(missing)} not installed ({APT_HINT})" if missing else None


class AccessibilityBus:
    """The bus of one display. ``start()`` returns once the registry has taken its name."""

    #: The server authenticates by its uid (EXTERNAL), which the bus checks.
    anonymous = False

    def __init__(self, processes: ProcessSupervisor, *, agent_uid: int | None, log_dir: Path) -> None:
        self.processes = processes
        self.agent_uid = agent_uid
        self.log_dir = log_dir
        # The socket's folder: the server's, and only traversable by others (a socket file needs write access
        # to connect, which the server grants the socket itself once it exists).
        self.folder = temporary_dir("hci-envs-a11y-")
        os.chmod(self.folder, 0o711)
        self.socket = self.folder / "bus"
        self.address = f"unix:path={self.socket}"
        self._daemon: subprocess.Popen[bytes] | None = None
        self._registry: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the daemon and the registry; raises :class:`MissingDependencyError` if either is missing."""
        missing = available()
        if missing:
            raise MissingDependencyError(f"the accessibility bus cannot start: {missing}", program="dbus-daemon")
        users = [f"<allow user={quoteattr(str(os.getuid()))}/>"]
        if self.agent_uid is not None and self.agent_uid != os.getuid():
            users.append(f"<allow user={quoteattr(str(self.agent_uid))}/>")
        config = self.log_dir / "a11y-bus.conf"
        config.write_text(_CONFIG.format(socket=self.socket, users="\n    ".join(users)), encoding="utf-8")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        with open(self.log_dir / "a11y-bus.log", "wb") as out:
            self._daemon = self.processes.spawn(
                "a11y-bus", [shutil.which("dbus-daemon") or "dbus-daemon", f"--config-file={config}", "--nofork",
                             "--nopidfile", "--nosyslog"], env=env, stdout=out.fileno(), stderr=out.fileno())
        # The socket file appears when the daemon binds it, a moment before it listens: wait for a connection
        # to be taken, or the registry started in that moment finds the bus refusing it.
        self._wait_for(lambda: _accepts(self.socket), self._daemon, "dbus-daemon", "a11y-bus.log")
        os.chmod(self.socket, 0o666)  # the folder and the daemon's uid check keep everyone else out
        with open(self.log_dir / "a11y-registry.log", "wb") as out:
            # No DISPLAY: the registry needs no X connection to relay registrations and tree queries.
            self._registry = self.processes.spawn(
                "a11y-registry", [registry_program() or "at-spi2-registryd"],
                env={**env, "AT_SPI_BUS_ADDRESS": self.address, "DBUS_SESSION_BUS_ADDRESS": "disabled:"},
                stdout=out.fileno(), stderr=out.fileno())

    def wait_registry(self, timeout: float = 5.0) -> None:
        """Return once the registry owns its name (apps started earlier would find no one to register with)."""
        from .a11y_dbus import name_has_owner

        assert self._registry is not None
        self._wait_for(lambda: name_has_owner(self.address, REGISTRY_NAME), self._registry, "at-spi2-registryd",
                       "a11y-registry.log", timeout)

    def _wait_for(self, ready: object, proc: subprocess.Popen[bytes], what: str, log_name: str,
                  timeout: float = 5.0) -> None:
        from ..errors import DisplayStartError

        deadline = time.monotonic() + timeout
        while not ready():  # type: ignore[operator]
            if proc.poll() is not None or time.monotonic() > deadline:
                try:
                    tail = (self.log_dir / log_name).read_text(errors="replace").strip()[-400:]
                except OSError:
                    tail = ""
                raise DisplayStartError(f"the accessibility bus did not start: {what} "
                                        f"{'exited' if proc.poll() is not None else 'is not ready'}: {tail}")
            time.sleep(0.005)

    def alive(self) -> bool:
        return all(p is not None and p.poll() is None for p in (self._daemon, self._registry))

    def agent_env(self) -> dict[str, str]:
        """What apps need to find the bus and expose their widgets on it."""
        return {
            "AT_SPI_BUS_ADDRESS": self.address,
            # chromium and Qt expose their trees only when told that assistive technology is listening
            "ACCESSIBILITY_ENABLED": "1",
            "QT_LINUX_ACCESSIBILITY_ALWAYS_ON": "1",
        }

    def close(self) -> None:
        for proc in (self._registry, self._daemon):
            if proc is not None:
                self.processes.stop(proc, timeout=0.5)
        remove_temporary_dir(self.folder)
