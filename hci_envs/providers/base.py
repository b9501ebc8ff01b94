"""The provider interface and the health wait every provider shares."""

from __future__ import annotations

import abc
import atexit
import os
import re
import signal
import threading
import time
from collections.abc import Callable

import httpx

from ..errors import ProviderError

#: Started providers, held strongly: one its owner dropped without stop() is still stopped at exit.
_LIVE: set[Provider] = set()
_LOCK = threading.Lock()


_SECRETS_IN_OUTPUT = (
    (re.compile(r"(vnc%2Fws%2F[^%&\s]+%2F)[^&\s]+"), r"\1<redacted>"),  # the VNC page URLs carry the secret
    (re.compile(r"((?:agent token|control password|view-only password)[:\s]+)[^\s,)]+"), r"\1<redacted>"),
)


def redact(text: str) -> str:
    """A server's output with the secrets it prints for its operator taken out, for error messages and logs
    that travel further (CI output, tracebacks)."""
    for pattern, replacement in _SECRETS_IN_OUTPUT:
        text = pattern.sub(replacement, text)
    return text


def redact_url(url: str) -> str:
    """A base URL with a control token in its path (``/t/<token>``, see hci_envs.server.path_token) hidden."""
    head, sep, _token = url.partition("/t/")
    return head + sep + "<redacted>" if sep else url


def _stop_all() -> None:
    for provider in list(_LIVE):
        try:
            provider.stop()
        except Exception:
            pass


atexit.register(_stop_all)


def _on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM ends a process without running atexit: stop this process's servers first, then end it as
    SIGTERM would have (its status still says so)."""
    _stop_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _handle_sigterm() -> None:
    """While a provider runs, SIGTERM cleans up like Ctrl-C and interpreter exit do. Only where nobody else
    handles SIGTERM (the default action) and only from the main thread, where Python allows handlers."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


class Provider(abc.ABC):
    """Runs one environment server. ``start()`` returns its base URL once ``/health`` answers."""

    base_url: str | None = None

    @abc.abstractmethod
    def _start(self) -> str:
        """Start the server and return its base URL (not yet known to be healthy)."""

    @abc.abstractmethod
    def _stop(self) -> None:
        """Stop the server and remove everything it created; must be safe to call twice."""

    def logs(self, lines: int = 30) -> str:
        """The last lines the server printed, for error messages."""
        return ""

    def alive(self) -> bool:
        return True

    def start(self, timeout: float = 60.0, headers: dict[str, str] | None = None) -> str:
        with _LOCK:
            _LIVE.add(self)
        _handle_sigterm()
        try:
            self.base_url = self._start()
            wait_for_health(self.base_url, timeout, alive=self.alive, logs=self.logs, headers=headers)
        except BaseException:
            self.stop()
            raise
        return self.base_url

    def stop(self) -> None:
        with _LOCK:
            _LIVE.discard(self)
        self._stop()

    def __enter__(self) -> Provider:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_for_health(
    base_url: str,
    timeout: float,
    *,
    alive: Callable[[], bool] = lambda: True,
    logs: Callable[[int], str] = lambda n: "",
    headers: dict[str, str] | None = None,
) -> dict[str, object]:
    """Poll ``/health`` until it answers with a running desktop; raise :class:`ProviderError` with the
    server's last log lines if it dies or does not answer within ``timeout`` seconds (a token in the URL's path
    is not repeated)."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    with httpx.Client(timeout=2.0, headers=headers, trust_env=False) as http:
        while time.monotonic() < deadline:
            if not alive():
                raise ProviderError(f"the server exited before it became healthy; its last output:\n{logs(30)}")
            try:
                response = http.get(f"{base_url}/health")
                if response.status_code == 200:
                    body = response.json()
                    desktop = body.get("desktop", {}).get("status")
                    if desktop in ("ok", "none", "idle"):
                        return body
                    last = f"desktop {desktop}: {body.get('desktop')}"
                else:
                    last = f"HTTP {response.status_code}"
            except (httpx.HTTPError, ValueError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.1)
    shown = redact_url(base_url)
    raise ProviderError(
        f"the server at {shown} did not become healthy within {timeout:.0f}s ({last.replace(base_url, shown)}); "
        f"its last output:\n{logs(30)}"
    )
