"""Test configuration.

Everything runs against real parts: Xvfb, openbox, x11vnc, Tk apps, chromium, Docker. Tests of what is not the
display (the control plane, MCP, CodeAct, the clients) run on the declared test seam, the fake desktop
(``--desktop fake``, :mod:`hci_envs.desktop.fake`), which needs no X. A test whose parts
are missing is skipped on a developer machine, but with ``HCI_ENVS_STRICT=1`` (set by the README's test
command and therefore by CI) it fails instead, and any skip at all fails the run.

Every test has exactly one tier, a marker that says what it needs (``pytest -m fake`` runs one tier alone):

* ``fake``: no X server: the fake desktop, the server in this process (the ``fake_app`` fixture) or as a
  process (``fake_server``, for what needs a real process or socket), pure-Python units;
* ``x11``: real Xvfb desktops with the Tk probe, xterm and the test apps;
* ``apps``: real applications (mousepad, LibreOffice, the task suite);
* ``browser``: Debian's chromium;
* ``osworld``: OSWorld's own harness (``desktop-env``, in ``.venv-osworld``) driving real desktops;
* ``docker``: the Docker daemon and the project's images;
* ``ray``: a local Ray cluster.

Mostly a module's ``pytestmark``; a module that mixes tiers marks each test instead (``helpers.by_app`` marks
the parameters of a test run once per app). A test with no tier, or with two, stops the collection.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import AppServer, Probe, ServerProcess  # noqa: E402

STRICT = os.environ.get("HCI_ENVS_STRICT") == "1"
# This run's name, on every container its Docker providers start (hci_envs.providers.docker.RUN): what a test
# counts is its own, with another run beside it on the same Docker daemon.
os.environ.setdefault("HCI_ENVS_RUN", f"tests-{os.getpid()}-{os.urandom(4).hex()}")
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


#: The tiers, in the order CI runs them (hci_envs/ops/bootstrap.py); registered in pyproject.toml.
TIERS = ("fake", "x11", "fork", "apps", "browser", "osworld", "docker", "ray", "vllm")


@pytest.hookimpl(tryfirst=True)  # before -m deselects: a test with no tier would otherwise never run in any tier
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong = []
    for item in items:
        tiers = sorted({mark.name for mark in item.iter_markers() if mark.name in TIERS})
        if len(tiers) != 1:
            wrong.append(f"  {item.nodeid}: {', '.join(tiers) if tiers else 'no tier'}")
    if wrong:
        raise pytest.UsageError(
            f"every test needs exactly one tier marker ({', '.join(TIERS)}; see tests/conftest.py), and "
            f"{len(wrong)} have none or several:\n" + "\n".join(wrong))


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


#: What ``fake_app`` and ``fake_server`` serve: the workstation on the fake desktop.
FAKE_SERVE = ("--env", "workstation", "--desktop", "fake", "--max-sessions", "8")


@pytest.fixture(scope="module")
def fake_app() -> Iterator[AppServer]:
    """``hci-envs serve --desktop fake`` built in this process and reached without a socket (helpers.AppServer:
    ``.http()``, ``.ws()``, ``.mcp()``, ``.base_url``), shared by a module's tests: for tests of the control
    plane, MCP and CodeAct over HTTP and WebSocket that need no real screen, process or socket."""
    with AppServer(*FAKE_SERVE) as server:
        yield server


@pytest.fixture(scope="module")
def fake_server() -> Iterator[ServerProcess]:
    """The same server as ``fake_app``, as a real ``hci-envs serve`` process on a real socket: for tests whose
    point is the process or the socket (the clients, which open their own connections; another process's
    client; signals; serve's output)."""
    server = ServerProcess(*FAKE_SERVE)
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
