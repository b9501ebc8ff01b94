"""Desktops across a Ray cluster (hci_envs.cluster): a warm pool that trainers claim desktops from.

Everything runs on a real local Ray cluster (``ray.cluster_utils.Cluster``: a head that offers no
``hci_desktop`` and two nodes that offer three each) with real desktops (``hci-envs serve`` with the Tk probe
app, or the probe image through Docker). Ray is told it is not on a cluster of machines
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, and ``node_ip_address``), so every node, and every desktop's
server, is on 127.0.0.1: no test addresses another interface or a Docker bridge.

The head checks node health faster than Ray's default (every second, dead after three missed two-second
checks) so that a frozen node is declared dead in seconds: the same setting an operator picks (docs/cluster.md).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import need, need_programs
from helpers import (PROBE, McpClient, agent_writable_dir, descendants, frozen, our_containers, processes_named,
                     wait_until)

from hci_envs import AsyncHciEnvClient, HciEnvClient
from hci_envs.env.env_checker import process_alive
from hci_envs.errors import (
    ConfigError,
    DesktopLostError,
    EnvironmentStateError,
    HciEnvsError,
    NoDesktopReadyError,
    PoolError,
)

# before Ray is imported anywhere: nodes of a local test cluster take 127.0.0.1, not the machine's address
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
try:
    import ray
    from ray.cluster_utils import Cluster

    from hci_envs.cluster import AsyncPooledEnv, DesktopPool, PooledEnv
except ImportError as exc:  # pragma: no cover - the test extra installs Ray
    ray = None
    RAY_MISSING = str(exc)

LOOPBACK = "127.0.0.1"
DESKTOPS_PER_NODE = 3
HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_timeout_ms": 2000,
                 "health_check_failure_threshold": 3}
BUTTON = (90, 50)  # the probe's button under its window's title bar; (50, 50) is on it, left of its label
OFF_THE_BUTTON = {"type": "mouse_move", "x": 1000, "y": 700}
PROBE_IMAGE = "hci-envs-test/probe:latest"


# -- the cluster and the desktops' app -------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    need(ray is not None, f"Ray (pip install 'hci-envs[ray]'): {globals().get('RAY_MISSING')}")
    local = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "node_ip_address": LOOPBACK, "include_dashboard": False, "_system_config": HEALTH_CHECKS})
    try:
        for _ in range(2):
            add_desktop_node(local)
        local.wait_for_nodes()
        ray.init(address=local.address, log_to_driver=False)
        yield local
    finally:
        ray.shutdown()
        local.shutdown()


def add_desktop_node(local: Cluster):
    return local.add_node(num_cpus=1, resources={"hci_desktop": DESKTOPS_PER_NODE}, node_ip_address=LOOPBACK)


def desktop_node_ids(local: Cluster) -> set[str]:
    return {node.node_id for node in local.worker_nodes}


@pytest.fixture(scope="module")
def probe_app() -> list[str]:
    """The Tk probe, as every agent account can run it: a copy outside the checkout (which may sit in a
    private home) started by the system's Python. Its folder also marks the desktops' processes."""
    folder = agent_writable_dir("hci-envs-cluster-")
    app = folder / "tk_probe.py"
    shutil.copy(PROBE, app)
    app.chmod(0o644)
    return [os.path.realpath(sys.executable), str(app), str(folder / "probe-state.json")]


def started(pid: int) -> tuple[int, str] | None:
    """A process as (pid, start time): a pid the kernel hands out again later is another process."""
    try:
        return pid, Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def desktop_processes(probe_app: list[str]) -> set[tuple[int, str]]:
    """Every process of the pool's desktops: the servers (their command line names the probe) and all they
    started (Xvfb, openbox, x11vnc, the probe)."""
    servers = [pid for pid, cmd in processes_named(probe_app[1]).items() if "hci_envs.ops.cli" in cmd]
    found = {started(pid) for server in servers for pid in (server, *descendants(server))}
    return {p for p in found if p is not None}


def servers_among(processes: set[tuple[int, str]]) -> int:
    return sum(1 for pid, _ in processes if "hci_envs.ops.cli" in Path(f"/proc/{pid}/cmdline").read_text())


def assert_all_gone(processes: set[tuple[int, str]]) -> None:
    def left() -> list[int]:
        return [pid for pid, since in processes if process_alive(pid) and started(pid) == (pid, since)]

    # a server whose actor was killed shuts down on its own (its stdin closes): give it time, bounded
    wait_until(lambda: not left(), timeout=30)
    assert not left(), f"processes left behind: {[Path(f'/proc/{p}/cmdline').read_bytes()[:120] for p in left()]}"


def button_is_green(result) -> bool:
    r, g, b = (int(v) for v in result.observation.screenshot.to_numpy()[BUTTON[1], BUTTON[0] - 40])
    return g > r + 40 and g > b + 40


def click_the_button() -> list[dict]:
    return [{"type": "click", "x": BUTTON[0], "y": BUTTON[1]}, OFF_THE_BUTTON]


def mcp_status(url: str, token: str | None) -> int:
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "screen_size", "arguments": {}}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25",
               **({"authorization": f"Bearer {token}"} if token else {})}
    return httpx.post(url, json=rpc, headers=headers, timeout=30).status_code


def pool_of(probe_app: list[str], **kwargs) -> DesktopPool:
    options = {"size": 2, "spares": 1, "claim_timeout": 60.0, **kwargs}
    return DesktopPool(env="desktop", apps=[probe_app], **options)


# -- claims, releases, resets ----------------------------------------------------------------------------
@pytest.mark.ray
def test_a_pool_spreads_over_the_nodes_and_lends_desktops_that_work(cluster, probe_app):
    pool = pool_of(probe_app)
    try:
        status = pool.status()
        assert (status["ready"], status["claimed"], status["starting"]) == (3, 0, 0), status
        assert set(status["nodes"]) == desktop_node_ids(cluster), "three desktops, on both nodes, none on the head"
        processes = desktop_processes(probe_app)
        assert servers_among(processes) == 3

        first = pool.claim()
        assert isinstance(first, PooledEnv) and isinstance(first, HciEnvClient)
        assert first.node_id in desktop_node_ids(cluster)
        assert first.base_url.startswith(f"http://{LOOPBACK}:")
        assert first.mcp_url == f"{first.base_url}/mcp" and first.agent_token
        first.reset()
        assert first.state().spare is None  # the pool's spares stand in for each server's own
        assert not button_is_green(first.step(OFF_THE_BUTTON))
        assert button_is_green(first.step(click_the_button())), "the click changed the app on the claimed desktop"

        # the agent gets the same desktop over MCP with the claim's token, and only with it
        with McpClient(first.mcp_url, token=first.agent_token) as agent:
            agent.ok("click", {"x": BUTTON[0], "y": BUTTON[1]})
        assert not button_is_green(first.step(OFF_THE_BUTTON)), "the agent's click turned the button back"

        first_url, first_node = first.base_url, first.node_id
        pool.release(first)
        with pytest.raises(EnvironmentStateError, match="released"):
            first.step(OFF_THE_BUTTON)
        pool.release(first)  # a second release changes nothing

        # the released desktop is reset in the background and comes back last in line
        assert wait_until(lambda: pool.status()["ready"] == 3, timeout=60), pool.status()
        second, third = pool.claim(), pool.claim()
        assert first_url not in (second.base_url, third.base_url) and second.base_url != third.base_url
        assert {first_node, second.node_id, third.node_id} == desktop_node_ids(cluster), "claims from both nodes"
        for token in (second.agent_token, None, "guess"):  # each desktop has a token of its own
            assert mcp_status(third.mcp_url, token) == 401
        assert mcp_status(third.mcp_url, third.agent_token) == 200
        with pytest.raises(NoDesktopReadyError, match="all 2 claimable desktops are claimed"):
            pool.claim(timeout=0.5)
        second.close()  # close() gives it back, as release does
        pool.release(third)
        again = pool.claim()
        assert again.base_url == first_url
        assert not button_is_green(again.step(OFF_THE_BUTTON)), "the pool's reset restarted the app"

        with pool.claim() as borrowed:  # leaving `with` gives it back
            assert borrowed.step(OFF_THE_BUTTON).observation.screenshot is not None
        with pytest.raises(EnvironmentStateError, match="released"):
            borrowed.state()
        with pytest.raises(PoolError, match="not a desktop claimed from this pool"):
            pool.release(HciEnvClient(again.base_url))
        processes |= desktop_processes(probe_app)  # the apps the resets started since
    finally:
        pool.close()
    with pytest.raises(EnvironmentStateError, match="pool was closed"):
        again.step(OFF_THE_BUTTON)
    with pytest.raises(EnvironmentStateError, match="pool is closed"):
        pool.claim()
    assert_all_gone(processes)
    assert wait_until(lambda: ray.available_resources().get("hci_desktop") == 2 * DESKTOPS_PER_NODE), \
        "every actor is gone, its unit of hci_desktop free again"


@pytest.mark.ray
def test_the_async_api_claims_resets_in_a_batch_and_wakes_a_waiting_claim(cluster, probe_app):
    async def drive(pool: DesktopPool) -> None:
        cancelled = asyncio.create_task(pool.claim_async())
        await asyncio.sleep(0)  # it has taken a ready desktop and is opening its WebSocket
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert pool.status()["claimed"] == 0, "a claim cancelled while connecting gives its desktop back"

        envs = await asyncio.gather(pool.claim_async(), pool.claim_async())
        assert all(isinstance(e, AsyncPooledEnv) and isinstance(e, AsyncHciEnvClient) for e in envs)
        assert len({e.base_url for e in envs}) == 2
        results = await pool.reset_all(envs)
        assert [r.observation.screenshot.width for r in results] == [1280, 1280]
        clicked = await asyncio.gather(*(e.step(click_the_button()) for e in envs))
        assert all(button_is_green(r) for r in clicked)
        with pytest.raises(NoDesktopReadyError):
            await pool.claim_async(timeout=0.5)

        waiting = asyncio.create_task(pool.claim_async(timeout=60))
        await asyncio.sleep(0.2)
        assert not waiting.done(), "two are claimed: a third claim waits"
        await envs[0].close()
        third = await waiting
        assert not button_is_green(await third.step(OFF_THE_BUTTON)), "a ready desktop is a reset one"
        with pytest.raises(EnvironmentStateError, match="released"):
            await envs[0].step(OFF_THE_BUTTON)
        results = await pool.reset_all([envs[1], third])
        assert all(not button_is_green(r) for r in results)
        with pytest.raises(PoolError):
            await pool.reset_all([AsyncHciEnvClient(third.base_url)])
        pool.release(third)  # the synchronous release works on an async claim too
        with pytest.raises(EnvironmentStateError, match="released"):
            await third.state()

    pool = pool_of(probe_app)
    try:
        processes = desktop_processes(probe_app)
        asyncio.run(drive(pool))
        processes |= desktop_processes(probe_app)
    finally:
        pool.close()
    assert_all_gone(processes)


# -- losing nodes --------------------------------------------------------------------------------------
def lose_on_next_steps(env: PooledEnv) -> HciEnvsError | None:
    """Step until the desktop's loss reaches the claim (bounded: the test fails if it never does)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            env.step({"type": "wait", "ms": 20})
        except HciEnvsError as exc:
            return exc
    return None


def restored_on(pool: DesktopPool, node_id: str) -> bool:
    s = pool.status()
    return s["ready"] + s["claimed"] == 3 and s["nodes"] == {node_id: 3}


@pytest.mark.ray
def test_a_node_removed_mid_episode_ends_its_claims_and_the_pool_refills_elsewhere(cluster, probe_app):
    pool = pool_of(probe_app)
    try:
        processes = desktop_processes(probe_app)
        env = pool.claim()
        env.reset()
        assert button_is_green(env.step(click_the_button()))
        victim = next(n for n in cluster.worker_nodes if n.node_id == env.node_id)
        (survivor,) = desktop_node_ids(cluster) - {victim.node_id}

        cluster.remove_node(victim, allow_graceful=False)  # as a crash: no goodbye from its raylet
        lost = lose_on_next_steps(env)
        assert isinstance(lost, DesktopLostError), lost
        assert lost.code == "DESKTOP_LOST" and lost.details["node_id"] == victim.node_id
        with pytest.raises(DesktopLostError, match="claim another"):
            env.state()  # at once, and every time after

        assert wait_until(lambda: restored_on(pool, survivor), timeout=120), pool.status()
        a, b = pool.claim(), pool.claim()
        assert a.node_id == b.node_id == survivor
        assert all(button_is_green(e.step(click_the_button())) for e in (a, b))
        pool.release(env)  # giving back a lost desktop is allowed and does nothing
        processes |= desktop_processes(probe_app)
    finally:
        pool.close()
        add_desktop_node(cluster)  # two desktop nodes again for the next test
        cluster.wait_for_nodes()
    assert_all_gone(processes)


@pytest.mark.ray
def test_a_frozen_node_cannot_hang_a_step(cluster, probe_app):
    """A node that stops answering (every process of it frozen, its sockets open) is declared dead by Ray's
    health checks; the pool then cuts the claim's connection, so the step blocked on it raises."""
    pool = pool_of(probe_app, step_timeout=60.0)
    victim = None
    try:
        processes = desktop_processes(probe_app)
        env = pool.claim()
        env.reset()
        victim = next(n for n in cluster.worker_nodes if n.node_id == env.node_id)
        (survivor,) = desktop_node_ids(cluster) - {victim.node_id}
        with frozen(victim.all_processes["raylet"][0].process.pid) as pids:
            assert env._desktop.actor_pid in pids and any(pid in pids for pid, _ in processes)
            started_at = time.monotonic()
            with pytest.raises(DesktopLostError) as lost:
                env.step({"type": "wait", "ms": 20})  # blocks on a server that never answers, until Ray tells
            took = time.monotonic() - started_at
            # Ray's verdict, not the step's own timeout and the pool's /health check (the next test's fallback)
            assert "actor died" in lost.value.details["reason"], (f"after {took:.0f}s", lost.value, ray.nodes())
            assert wait_until(lambda: restored_on(pool, survivor), timeout=120), pool.status()
            a = pool.claim()
            assert a.node_id == survivor and button_is_green(a.step(click_the_button()))
            processes |= desktop_processes(probe_app)
    finally:
        pool.close()
        if victim is not None:
            cluster.remove_node(victim, allow_graceful=False)
            add_desktop_node(cluster)
            cluster.wait_for_nodes()
    assert_all_gone(processes)


@pytest.mark.ray
def test_a_server_that_hangs_while_its_node_lives_is_lost_at_the_step_timeout(cluster, probe_app):
    """Ray sees nothing wrong (node and actor answer) but the desktop's server is frozen: the step's timeout
    makes the pool ask the server's /health, and a silent server is a lost desktop, replaced, never lent again."""
    pool = pool_of(probe_app, step_timeout=5.0, probe_timeout=3.0)
    try:
        processes = desktop_processes(probe_app)
        env = pool.claim()
        env.reset()
        (server,) = (pid for pid in descendants(env._desktop.actor_pid)
                     if "hci_envs.ops.cli" in Path(f"/proc/{pid}/cmdline").read_text())
        with frozen(server):
            with pytest.raises(DesktopLostError, match="did not answer /health") as lost:
                env.step({"type": "wait", "ms": 20})
            assert lost.value.details["node_id"] == env.node_id
            with pytest.raises(DesktopLostError):
                env.state()
            assert wait_until(lambda: sum(pool.status()[k] for k in ("ready", "claimed")) == 3, timeout=120), \
                pool.status()
            fresh = [pool.claim(), pool.claim()]
            assert all(e._desktop is not env._desktop and button_is_green(e.step(click_the_button())) for e in fresh)
            processes |= desktop_processes(probe_app)
    finally:
        pool.close()
    assert_all_gone(processes)


# -- containers, bad input, the missing extra ----------------------------------------------------------
@pytest.mark.docker
def test_desktops_as_containers_through_the_docker_provider(cluster):
    try:
        import docker

        client = docker.from_env()
        client.images.get(PROBE_IMAGE)
    except Exception as exc:  # noqa: BLE001
        need(False, f"the Docker daemon and {PROBE_IMAGE} (`hci-envs image build --for-tests`): {exc}")

    def containers() -> list:
        return our_containers(client)

    # a container exits after `orphan_timeout` seconds without a client, unless its actor keeps calling it
    with DesktopPool(image=PROBE_IMAGE, size=1, spares=0, mem_limit="1g", cpus=1.0, orphan_timeout=4) as pool:
        env = pool.claim()
        assert env.node_id in desktop_node_ids(cluster) and env.base_url.startswith(f"http://{LOOPBACK}:")
        env.reset()
        assert wait_until(lambda: not button_is_green(env.step(OFF_THE_BUTTON)), timeout=20)
        assert button_is_green(env.step(click_the_button()))
        (container,) = containers()
        assert container.attrs["HostConfig"]["PortBindings"]["8000/tcp"][0]["HostIp"] == LOOPBACK
        pool.release(env)
        time.sleep(8)  # twice the orphan timeout with no client but the actor
        env = pool.claim()
        assert containers() == [container] and container.status == "running"
        assert not button_is_green(env.step(OFF_THE_BUTTON)), "the same container, reset on release"

        os.kill(env._desktop.actor_pid, signal.SIGKILL)  # the actor dies; its node lives on
        assert isinstance(lose_on_next_steps(env), DesktopLostError)
        assert wait_until(lambda: pool.status()["ready"] == 1, timeout=120), pool.status()
        (replacement,) = containers()
        assert replacement.id != container.id, "the dead actor's container went too (the replacement reaped it)"
    assert not containers(), "the pool's container is gone"


@pytest.mark.ray
def test_a_pool_runs_osworld_tasks_with_osworlds_reward(cluster, tmp_path):
    """OSWorld's task files served by the pool's desktops (``tasks="osworld:PATH"``): a claim resets into one, its
    set-up and its evaluator run by OSWorld's harness on the desktop's node, the reward OSWorld's own."""
    need_programs("xterm")
    need(os.geteuid() == 0, "root: OSWorld's tasks see the home at /home/user")
    harness = Path(__file__).resolve().parents[1] / ".venv-osworld" / "bin" / "python"
    need(harness.exists(), f"OSWorld's environment ({harness}: `python3 -m hci_envs install --test`)")
    folder = tmp_path / "osworld" / "examples" / "os"
    folder.mkdir(parents=True)
    shutil.copy(Path(__file__).with_name("osworld_tasks") / "examples" / "os" / "answer-in-a-file.json", folder)
    with DesktopPool(env="desktop", size=1, tasks=f"osworld:{folder.parents[1]}", claim_timeout=120.0) as pool:
        env = pool.claim()
        try:
            first = env.reset(task="answer-in-a-file")
            assert "forty-two" in (first.observation.text or "")
            assert env.score()["score"] == 0.0  # nothing done
            env.reset(task="answer-in-a-file")
            env.step({"type": "type_text", "text": "echo forty-two > ~/Desktop/answer.txt\n"})
            solved = env.score()
            assert solved["score"] == 1.0 and "check_include_exclude" in " ".join(solved["details"]), solved
        finally:
            pool.release(env)


@pytest.mark.ray
def test_bad_settings_and_desktops_that_cannot_start_are_clear_errors(cluster, probe_app):
    for bad in ({"size": 0}, {"size": 2.5}, {"size": 1, "spares": -1}, {"size": 1, "claim_timeout": 0}):
        with pytest.raises(ConfigError):
            DesktopPool(**bad)
    with pytest.raises(ConfigError, match="screen_size is for local desktops"):
        DesktopPool(size=1, image=PROBE_IMAGE, screen_size=(1024, 768))
    with DesktopPool(size=1, apps=[probe_app], screen_size=(1024, 768)) as pool:
        with pytest.raises(ConfigError, match="timeout is a number"):
            pool.claim(timeout="soon")
        with pool.claim() as env:
            assert env.reset().observation.screenshot.width == 1024
    with pytest.raises(PoolError, match="(?s)did not start.*no environment named 'nope'"):
        DesktopPool(env="nope", size=1, start_timeout=120)
    assert wait_until(lambda: ray.available_resources().get("hci_desktop") == 2 * DESKTOPS_PER_NODE, timeout=30)


@pytest.mark.fake
def test_without_ray_the_error_names_the_extra():
    # Ray is installed here, so its absence is produced by refusing its import in a fresh interpreter.
    script = ("import sys; sys.modules['ray'] = None\n"
              "from hci_envs.cluster import DesktopPool\n"
              "from hci_envs.errors import MissingDependencyError\n"
              "try:\n    DesktopPool(size=1)\nexcept MissingDependencyError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert "pip install 'hci-envs[ray]'" in out.stdout, out.stdout + out.stderr


@pytest.mark.ray
def test_a_claimed_desktop_forks_into_sessions_of_its_node(cluster):
    """A pool of forkable desktops (room for two more sessions each): a claim forks, and its copies are clients
    of sessions of their own on the same node, which end when they close."""
    from hci_envs.fork import fork_unavailable

    why = fork_unavailable()
    need(why is None, f"forking: {why}")
    with DesktopPool(env="workstation", size=1, spares=0, desktop="forkable", max_sessions=3, apps=["xterm"],
                     agent_tokens=True, screen_size=(800, 600)) as pool:
        env = pool.claim()
        try:
            env.reset()
            env.call_tool("bash", command="echo pooled > f.txt")
            before = env.call_tool("screenshot").screenshot.to_numpy()
            copies = env.fork(2)
            try:
                for copy in copies:
                    assert copy.session["agent_token"] and copy.base_url == env.base_url
                    assert copy.call_tool("bash", command="cat f.txt").observation.data["stdout"] == "pooled\n"
                    assert (copy.call_tool("screenshot").screenshot.to_numpy() == before).all()
                    assert copy.state().session_id != env.state().session_id
            finally:
                for copy in copies:
                    copy.close()
            sessions = httpx.get(f"{env.base_url}/sessions", trust_env=False,
                                 headers={"Authorization": f"Bearer {env.control_token}"}).json()
            assert [s["session_id"] for s in sessions] == ["default"]
        finally:
            pool.release(env)
