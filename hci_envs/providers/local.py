"""The embedded default: ``hci-envs serve`` as a local process tree (no Docker)."""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import threading
from typing import Any

from ..errors import ProviderError
from .base import Provider, redact

_STARTING = re.compile(r"starting \S+ on (http://\S+) \.\.\.")
#: Secrets go to the server in its environment, never on its command line (which every local user can read).
_SECRET_OPTIONS = {"control_token": "HCI_ENVS_CONTROL_TOKEN", "agent_token": "HCI_ENVS_AGENT_TOKEN"}
#: serve's on/off flags: False turns them off (--no-spare) rather than leaving serve's default.
_NEGATABLE = {"spare", "settle"}


class LocalProvider(Provider):
    """Runs ``hci-envs serve`` in a child process on a free port of ``host`` (loopback by default; any other
    address needs both tokens and agent isolation, which the server checks before it listens).

    Keyword arguments become ``serve`` options: ``env="desktop"``, ``size=(w, h)``, ``apps=["xterm"]``,
    ``mode="simulation"``, ``max_sessions=8``, ``control_token=...``, ``agent_token=...``.
    """

    def __init__(self, env: str = "desktop", *, host: str = "127.0.0.1", python: str | None = None,
                 **options: Any) -> None:
        self.env = env
        self.host = host
        self.options = options
        self.python = python or sys.executable
        self.proc: subprocess.Popen[str] | None = None
        self._output: collections.deque[str] = collections.deque(maxlen=200)

    def argv(self) -> list[str]:
        argv = [self.python, "-m", "hci_envs.ops.cli", "serve", "--host", self.host, "--port", "0", "--env", self.env,
                "--exit-with-stdin"]
        for key, value in self.options.items():
            flag = "--" + key.replace("_", "-")
            if value is False and key in _NEGATABLE:
                argv.append("--no-" + key.replace("_", "-"))
                continue
            if value is None or value is False or key in _SECRET_OPTIONS:
                continue
            if key == "size":
                argv += [flag, f"{value[0]}x{value[1]}"]
            elif key == "apps":
                for app in value:
                    argv += ["--app", app if isinstance(app, str) else " ".join(f"'{a}'" for a in app)]
            elif value is True:
                argv.append(flag)
            elif isinstance(value, list | tuple):  # a repeatable option (allow=[...])
                for item in value:
                    argv += [flag, str(item)]
            else:
                argv += [flag, str(value)]
        return argv

    def _secrets(self) -> dict[str, str]:
        return {var: str(self.options[key]) for key, var in _SECRET_OPTIONS.items() if self.options.get(key)}

    def _start(self) -> str:
        self.proc = subprocess.Popen(
            # stdin is a pipe the server watches: if this process dies, even by SIGKILL, the pipe closes
            # and the server shuts its desktops down.
            self.argv(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self._secrets()},
        )
        url: list[str] = []
        found = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self._output.append(line.rstrip("\n"))
                m = _STARTING.search(line)
                if m and not url:
                    url.append(m.group(1))
                    found.set()
            found.set()

        threading.Thread(target=pump, name="hci-envs-local-provider", daemon=True).start()
        if not found.wait(60) or not url:
            raise ProviderError(f"hci-envs serve did not start; its output:\n{self.logs()}")
        return url[0]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self, lines: int = 30) -> str:
        return redact("\n".join(list(self._output)[-lines:]))

    def _stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
