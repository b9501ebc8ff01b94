"""Test configuration.

Everything runs against real parts: Xvfb, openbox, x11vnc, Tk apps, chromium, Docker. Tests of what is not the
display (the control plane, MCP, CodeAct, the clients) run on the declared test seam, the fake desktop
(``--desktop fake``, :mod:`hci_envs.desktop.fake`), which needs no X. A test whose parts
are missing is skipped on a developer machine, but with ``HCI_ENVS_STRICT=1`` (set by the README's test
command and therefore by CI) it fails instead, and any skip at all fails the run.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import Probe, ServerProcess  # noqa: E402

STRICT = os.environ.get("HCI_ENVS_STRICT") == "1"
_skipped: list[str] = []


def need(condition: bool, why: str) -> None:
    """Skip (or, in strict mode, fail) unless ``condition`` holds."""
    if condition:
        return
    if STRICT:
        pytest.fail(f"required for this test and missing: {why}", pytrace=False)
    pytest.skip(why)


def need_programs(*programs: str) -> None:
    missing = [p for p in programs if shutil.which(p) is None]
    need(not missing, f"programs not installed: {', '.join(missing)}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if STRICT and _skipped:
        print(f"\nHCI_ENVS_STRICT: {len(_skipped)} test(s) skipped, which counts as a failure:", file=sys.stderr)
        for nodeid in _skipped:
            print(f"  {nodeid}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def x11() -> None:
    need_programs("Xvfb", "openbox")


@pytest.fixture
def probe(tmp_path: Path) -> Probe:
    return Probe(tmp_path)


@pytest.fixture
def probe_env(x11: None, tmp_path: Path) -> Iterator[tuple[object, Probe]]:
    """A started DesktopEnv running the Tk probe app."""
    from hci_envs.traits import DesktopEnv

    probe = Probe(tmp_path)
    env = DesktopEnv(start_state={"apps": [probe.app()]})
    try:
        env.reset()
        probe.wait_for(lambda s: s.get("ready"), what="the probe app")
        yield env, probe
    finally:
        env.close()


@pytest.fixture(scope="module")
def probe_server(x11: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Probe]]:
    """``hci-envs serve`` running the probe app, shared by a module's tests (reset between them)."""
    probe = Probe(tmp_path_factory.mktemp("probe"))
    args = [arg for cmd in [" ".join(f"'{c}'" for c in probe.command())] for arg in ("--app", cmd)]
    server = ServerProcess(*args)
    server.start()
    try:
        probe.wait_for(lambda s: s.get("ready"), what="the probe app")
        yield server, probe
    finally:
        server.stop()


@pytest.fixture(scope="module")
def fake_server() -> Iterator[ServerProcess]:
    """``hci-envs serve --desktop fake`` (no X; the declared test seam), shared by a module's tests: for tests
    of the control plane, MCP, CodeAct and the clients that need no real screen."""
    server = ServerProcess("--env", "workstation", "--desktop", "fake", "--max-sessions", "8")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_probe(probe_server: tuple[ServerProcess, Probe]) -> tuple[ServerProcess, Probe]:
    """The module's server after a reset: a new probe app in a known state."""
    server, probe = probe_server
    probe.state_path.unlink(missing_ok=True)
    with server.http() as http:
        response = http.post("/reset", json={})
        assert response.status_code == 200, response.text
    probe.wait_for(lambda s: s.get("ready"), what="the probe app after reset")
    return server, probe
