"""Environments as containers: started from Python in one call, reached, isolated, cleaned up.

Runs against the real Docker daemon and the images `python3 -m hci_envs test` builds (offline) first.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import need, need_programs
from helpers import HERE, McpClient, our_containers, wait_until
from test_openenv_compat import openenv_python

from hci_envs import HciEnvClient
from hci_envs.errors import HciEnvsError, ProviderError
from hci_envs.providers import DockerProvider
from hci_envs.providers.docker import LABEL

pytestmark = pytest.mark.docker

PROBE_IMAGE = "hci-envs-test/probe:latest"
BASE_IMAGE = "hci-envs/base:latest"
EDITOR_IMAGE = "hci-envs/editor:latest"
APPS_IMAGE = "hci-envs/apps:latest"


@pytest.fixture(scope="module")
def docker_client():
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as exc:  # noqa: BLE001
        need(False, f"the Docker daemon ({exc})")
    for image in (PROBE_IMAGE, BASE_IMAGE, EDITOR_IMAGE, APPS_IMAGE):
        try:
            client.images.get(image)
        except Exception:  # noqa: BLE001
            need(False, f"the image {image}; `hci-envs image build --for-tests` builds it")
    yield client
    left = our_containers(client)
    assert not left, f"containers left behind: {[c.name for c in left]}"


def probe_state(provider: DockerProvider) -> dict:
    for _ in range(100):
        code, out = provider.container.exec_run("cat /tmp/probe-state.json")
        if code == 0:
            try:
                return json.loads(out)
            except ValueError:
                pass
        time.sleep(0.1)
    raise AssertionError("the probe app in the container wrote no state")


def wait_probe(provider: DockerProvider, predicate, what: str) -> dict:
    deadline = time.monotonic() + 10
    state = {}
    while time.monotonic() < deadline:
        state = probe_state(provider)
        if predicate(state):
            return state
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}: {state}")


def center(state: dict, widget: str) -> tuple[int, int]:
    x, y, w, h = state["widgets"][widget]
    return x + w // 2, y + h // 2


def test_a_container_episode_mcp_vnc_openenv_and_cleanup(docker_client):
    need_programs("chromium")
    with HciEnvClient.from_docker_image(PROBE_IMAGE) as env:
        provider = env.provider
        name = provider.container.name
        result = env.reset()
        assert result.observation.screenshot.width == 1280
        state = env.state()
        assert state.mcp_url.startswith(provider.base_url) and state.agent_token
        probe = wait_probe(provider, lambda s: s.get("ready"), "the probe app")
        x, y = center(probe, "button")
        with McpClient(state.mcp_url, token=state.agent_token) as mcp:
            shot = mcp.ok("screenshot", {"format": "jpeg"})
            assert shot.structured_content["width"] == 1280
            mcp.ok("click", {"x": x, "y": y})
        wait_probe(provider, lambda s: s["clicks"] == 1, "the MCP click inside the container")

        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 950})
                page.goto(state.vnc_url.replace("resize=scale", "resize=off"))
                page.wait_for_function(
                    "(() => { const c = document.querySelector('#noVNC_container canvas');"
                    " return c && c.width === 1280 && c.height === 800; })()", timeout=30000)
                box = page.locator("#noVNC_container canvas").bounding_box()
                page.mouse.move(box["x"] + x, box["y"] + y)
                time.sleep(0.2)
                page.mouse.click(box["x"] + x, box["y"] + y)
            finally:
                browser.close()
        wait_probe(provider, lambda s: s["clicks"] == 2, "the noVNC click inside the container")

        peer = subprocess.run(
            [openenv_python(), str(HERE / "openenv_peer" / "with_token.py"), provider.base_url, provider.control_token],
            capture_output=True, text=True, timeout=120,
        )
        assert peer.returncode == 0, peer.stdout + peer.stderr
        assert json.loads(peer.stdout.splitlines()[-1])["screenshot_width"] == 1280
    assert not docker_client.containers.list(all=True, filters={"name": name}, ignore_removed=True)


def test_four_containers_are_isolated(docker_client):
    def session(i: int) -> tuple[int, list[bool], list[tuple[int, int]]]:
        with HciEnvClient.from_docker_image(PROBE_IMAGE, cpus=1.0) as env:
            env.reset()
            canvas = wait_probe(env.provider, lambda s: s.get("ready"), "the probe")["widgets"]["canvas"]
            spots = [(canvas[0] + 40 + 90 * k, canvas[1] + 80) for k in range(4)]
            env.step({"type": "click", "x": spots[i][0], "y": spots[i][1]})
            wait_probe(env.provider, lambda s: len(s["marks"]) == 1, "the mark")
            image = env.step({"type": "wait", "ms": 300}).observation.screenshot.to_pil().convert("RGB")
            red = [image.getpixel(p)[0] > 200 and image.getpixel(p)[1] < 80 for p in spots]
            return i, red, spots

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(session, range(4)))
    for i, red, _ in results:
        assert red[i] and sum(red) == 1, f"container {i} sees {red}"


def test_a_container_removed_while_the_orphans_are_listed_is_passed_over(docker_client):
    """Starting a provider sweeps the orphans of dead processes, listing every provider's container; another
    provider may remove its own in the middle of the listing (four starting and stopping at once do). Here the
    removal is made to happen there, for real: the first inspection of the listing removes that container."""
    from hci_envs.providers.docker import reap_orphans, run_label

    other = docker_client.containers.create(BASE_IMAGE, command=["true"], labels={LABEL: "test", **run_label()})
    inspect = docker_client.api.inspect_container
    removed = []

    def remove_then_inspect(container_id, *args, **kwargs):
        if container_id == other.id and not removed:  # only this test's: another run's are not ours to remove
            docker_client.api.remove_container(container_id, force=True)
            removed.append(container_id)
        return inspect(container_id, *args, **kwargs)

    docker_client.api.inspect_container = remove_then_inspect
    try:
        assert reap_orphans(docker_client) == []
    finally:
        docker_client.api.inspect_container = inspect
        for leftover in docker_client.containers.list(all=True, filters={"id": other.id}, ignore_removed=True):
            leftover.remove(force=True)
    assert removed == [other.id]


def test_async_client_from_docker_image(docker_client):
    import asyncio

    from hci_envs import AsyncHciEnvClient

    async def run() -> tuple[str, dict]:
        async with await AsyncHciEnvClient.from_docker_image(BASE_IMAGE) as env:
            name = env.provider.container.name
            first = await env.reset()
            assert first.observation.screenshot.width == 1280
            moved = await env.step({"type": "mouse_move", "x": 21, "y": 34})
            assert moved.observation.text == "moved to (21, 34)"
            return name, (await env.call_tool("cursor_position")).observation.data

    name, cursor = asyncio.run(run())
    assert cursor == {"x": 21, "y": 34}
    assert not docker_client.containers.list(all=True, filters={"name": name}, ignore_removed=True)


def test_killed_container_gives_a_clear_error_and_is_cleaned_up(docker_client):
    env = HciEnvClient.from_docker_image(BASE_IMAGE, timeout=20)
    try:
        env.reset()
        name = env.provider.container.name
        env.provider.container.kill()
        start = time.monotonic()
        with pytest.raises(HciEnvsError) as info:
            env.step({"type": "wait", "ms": 1})
        assert time.monotonic() - start < 25
        assert "connection" in info.value.message or "closed" in info.value.message
    finally:
        env.close()
    assert not docker_client.containers.list(all=True, filters={"name": name}, ignore_removed=True)


def test_image_that_never_becomes_healthy_times_out_with_its_logs(docker_client):
    provider = DockerProvider(BASE_IMAGE, command=["sh", "-c", "echo this server never starts; sleep 600"])
    with pytest.raises(ProviderError) as info:
        provider.start(timeout=4)
    assert "did not become healthy" in info.value.message and "this server never starts" in info.value.message
    assert provider.container is None
    left = our_containers(docker_client, ancestor=BASE_IMAGE)
    assert not left


def _caps(status: str) -> dict[str, str]:
    return {line.split(":")[0]: line.split()[1] for line in status.splitlines() if line.startswith("Cap")}


def test_inside_the_container_nothing_runs_as_root_and_capabilities_are_dropped(docker_client):
    from hci_envs.sandbox.accounts import CAPABILITIES

    with DockerProvider(PROBE_IMAGE) as provider:
        httpx.post(provider.base_url + "/reset", json={},
                   headers={"authorization": f"Bearer {provider.control_token}"}, timeout=60).raise_for_status()
        wait_probe(provider, lambda s: s.get("ready"), "the probe app")
        # every process of the container (PID 1 and its descendants, not this exec's) runs as the server's user
        # or the agent's, none as root
        code, table = provider.container.exec_run(["ps", "-eo", "user:20=,pid=,ppid="])
        rows = [line.split() for line in table.decode().splitlines()]
        tree, users = {1}, set()
        for _ in range(len(rows)):
            tree |= {int(pid) for _user, pid, ppid in rows if int(ppid) in tree}
        users = {user for user, pid, _ppid in rows if int(pid) in tree}
        assert code == 0 and users == {"hci", "hci-agent"}, table
        code, status = provider.container.exec_run(["cat", "/proc/1/status"])
        caps = _caps(status.decode())
        wanted = sum(1 << bit for bit, _why in CAPABILITIES.values()) | 1 << 12  # and NET_ADMIN 12
        # the server (PID 1 is tini, as hci) holds exactly the six capabilities of the uid switch and the one of
        # the agents' network policy (in the container's own namespace), no more
        assert int(caps["CapEff"], 16) == int(caps["CapAmb"], 16) == int(caps["CapBnd"], 16) == wanted, caps
        assert "NoNewPrivs:\t1" in status.decode()
        code, table = provider.container.exec_run(["ps", "-eo", "pid=,user:20=,args="])
        probe_pid = next(line.split()[0] for line in table.decode().splitlines()
                         if line.split()[1] == "hci-agent" and "tk_probe.py" in line)
        code, app = provider.container.exec_run(["cat", f"/proc/{probe_pid}/status"])
        assert code == 0 and all(int(v, 16) == 0 for k, v in _caps(app.decode()).items() if k != "CapBnd"), app
        assert "NoNewPrivs:\t1" in app.decode()
        attrs = provider.container.attrs["HostConfig"]
        assert attrs["Privileged"] is False and attrs["CapDrop"] == ["ALL"] and attrs["PidsLimit"] == 1024
        assert sorted(attrs["CapAdd"]) == sorted([*(n.removeprefix("CAP_") for n in CAPABILITIES), "NET_ADMIN"])
        assert attrs["SecurityOpt"] == ["no-new-privileges"]
        health = provider.container.attrs["Config"]["Healthcheck"]["Test"]
        assert "/health" in " ".join(health)
        names = {c.name for c in docker_client.containers.list(filters={"health": "healthy"}, ignore_removed=True)}
        deadline = time.monotonic() + 30
        while provider.container.name not in names and time.monotonic() < deadline:
            time.sleep(0.5)
            names = {c.name for c in docker_client.containers.list(filters={"health": "healthy"}, ignore_removed=True)}
        assert provider.container.name in names, "docker never saw the container healthy"


def test_the_agent_in_a_container_is_contained(docker_client):
    """The attacks of test_containment.py, inside the image: the agent's bash is its only way in."""
    with HciEnvClient.from_docker_image(EDITOR_IMAGE) as env:
        env.reset()
        state = env.state()
        assert state.isolation == "uid"
        provider = env.provider
        with McpClient(state.mcp_url, token=state.agent_token) as mcp:
            def bash(command: str) -> dict:
                return mcp.call("bash", {"command": command, "persistent": True}).structured_content

            assert bash("id -un")["stdout"].strip() == "hci-agent"
            uid = int(bash("id -u")["stdout"])
            assert uid >= 2000
            environment = bash("env")["stdout"]
            assert "HCI_ENVS" not in environment and provider.control_token not in environment
            assert provider.agent_token not in environment
            stolen = bash("cat /proc/1/environ; cat /proc/$PPID/environ; cat /proc/1/cmdline")
            assert provider.control_token not in stolen["stdout"] and "Permission denied" in stolen["stderr"]
            killed = bash("kill -9 1 $PPID")
            assert killed["stderr"].count("Operation not permitted") == 2, killed
            # no network: not even the server's own port in the container, which another user listens on
            assert state.network["policy"] == "none" and state.network["enforced_by"].startswith("nftables"), state
            reached = bash("python3 -c \"import socket\ntry:\n    socket.create_connection(('127.0.0.1', 8000), "
                           "timeout=8)\n    print('connected')\nexcept OSError as e:\n    print(e.errno)\"")
            assert reached["stdout"].strip() == "111", reached
            answers = bash("tasks=$(echo /opt/hci-envs/lib/python3*/site-packages/hci_envs/tasks); "
                           "cat $tasks/builtin.jsonl; cat $tasks/suite/editor.py")
            assert "checker" not in answers["stdout"] and answers["stderr"].count("Permission denied") == 2, answers
            bash("setsid -f sleep 901; python3 -c 'import os, time\nif os.fork() == 0:\n    os.setsid()\n"
                 "    time.sleep(902)\n' & sleep 0.3")
            code, before = provider.container.exec_run(["pgrep", "-U", str(uid), "-f", "sleep.90[12]"])
            assert len(before.split()) == 2, before
        env.reset()
        code, after = provider.container.exec_run(["pgrep", "-U", str(uid), "-f", "sleep.90[12]"])
        assert code == 1 and after.strip() == b"", after
        assert provider.alive()


def test_exposed_without_tokens_is_refused_in_the_container(docker_client):
    container = docker_client.containers.run(BASE_IMAGE, detach=True, labels={LABEL: "test"})
    try:
        container.wait(timeout=30)
        logs = container.logs().decode()
        assert "refusing to listen on 0.0.0.0" in logs
        assert "provider=hci_envs.providers.DockerProvider()" in logs  # what OpenEnv's users should do
    finally:
        container.remove(force=True)


def test_openenv_from_docker_image_with_our_provider_keeps_tokens_on(docker_client):
    """OpenEnv's GenericEnvClient and MCPToolClient, each through its own from_docker_image with our Docker
    provider as its container provider, in OpenEnv's environment: they work, tokens on (the base URL they were
    handed carries the control token in its path), requests without it are refused, and the containers go
    when the clients close."""
    before = {c.id for c in our_containers(docker_client)}
    peer = subprocess.run([openenv_python(), str(HERE / "openenv_peer" / "from_docker.py"), PROBE_IMAGE],
                          capture_output=True, text=True, timeout=400)
    assert peer.returncode == 0, peer.stdout + peer.stderr
    seen = json.loads(peer.stdout.splitlines()[-1])
    assert seen["interface"] == {"missing": [], "required": []}
    generic, mcp = seen["generic"], seen["mcp"]
    assert generic["width"] == 1280 and generic["clicked"] and generic["url_carries_token"] and generic["removed"]
    for refused in seen["refused"].values():  # /reset, /state, openenv/session/create, then /ws
        # /ws: refused at the handshake (a wrong prefix), or an UNAUTHORIZED frame and a close (no token)
        assert refused[:3] == [401, 401, 401], seen
        assert refused[3] in ("InvalidStatus", "ConnectionClosedError", "UNAUTHORIZED"), seen
    assert mcp["session"] and {"screenshot", "click", "type_text"} <= set(mcp["tools"])
    assert mcp["screen_size"] == {"width": 1280, "height": 800} and mcp["cursor"] == {"x": 12, "y": 34}
    assert mcp["reset_done"] is False and mcp["removed"]
    time.sleep(1)
    after = {c.id for c in our_containers(docker_client)}
    assert not (after - before), "a container was left"


def test_image_derived_from_an_environments_traits(docker_client):
    from hci_envs.ops.images import build_env_image, derived_dockerfile
    from hci_envs.traits import WorkstationEnv

    dockerfile = derived_dockerfile("workstation", WorkstationEnv)
    assert "HCI_ENVS_ENV=workstation" in dockerfile
    tag = f"hci-envs-test/custom:{os.environ['HCI_ENVS_RUN']}"  # this run's: another run removes its own
    build_env_image(str(HERE / "envs" / "custom_env.py") + ":CustomEnv", tag, progress=lambda m: None)
    try:
        with HciEnvClient.from_docker_image(tag) as env:
            env.reset()
            out = env.call_tool("bash", command="id -un; echo $HOME")
            assert out.observation.data["stdout"].split()[0] == "hci-agent"  # the agent's account
            assert env.call_tool("write_note", text="inside").observation.data == {"lines": 1}
            assert env.state().screen_width == 1024
    finally:
        docker_client.images.remove(tag, force=True)


OWNER_SCRIPT = """
import signal, sys, time
from hci_envs import HciEnvClient
# started as a background job of a non-interactive shell, a process inherits SIGINT ignored, and Python then
# installs no KeyboardInterrupt: a program that wants Ctrl-C puts the default handler back itself
signal.signal(signal.SIGINT, signal.default_int_handler)
env = HciEnvClient.from_docker_image(sys.argv[1])
env.reset()
print(env.provider.container.name, flush=True)
if sys.argv[2] == "exit":
    sys.exit(0)  # never closed: the interpreter's exit must remove the container
time.sleep(600)  # interrupted by Ctrl-C or SIGTERM
"""


@pytest.mark.parametrize("ending", ["ctrl-c", "sigterm", "exit"])
def test_ctrl_c_sigterm_or_interpreter_exit_removes_the_container(docker_client, ending):
    import signal
    import sys

    # as a background job of a non-interactive shell starts it: SIGINT ignored
    proc = subprocess.Popen([sys.executable, "-c", OWNER_SCRIPT, BASE_IMAGE, ending],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        name = proc.stdout.readline().strip()
        assert name, proc.stderr.read()
        assert docker_client.containers.list(all=True, filters={"name": name}, ignore_removed=True)
        if ending == "ctrl-c":
            proc.send_signal(signal.SIGINT)
        elif ending == "sigterm":
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        if ending == "sigterm":
            assert proc.returncode == -signal.SIGTERM  # it still ends as SIGTERM says
    finally:
        if proc.poll() is None:
            proc.kill()
    left = docker_client.containers.list(all=True, filters={"name": name}, ignore_removed=True)
    assert not left, f"{name} left after {ending}"


def test_a_container_whose_client_was_killed_exits_after_its_orphan_timeout(docker_client):
    import signal
    import sys

    script = ("import sys\nfrom hci_envs.providers import DockerProvider\n"
              "p = DockerProvider(sys.argv[1], orphan_timeout=3)\np.start()\n"
              "print(p.container.name, flush=True)\nimport time\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, BASE_IMAGE], stdout=subprocess.PIPE, text=True)
    name = proc.stdout.readline().strip()
    assert name
    proc.send_signal(signal.SIGKILL)  # no cleanup of any kind
    proc.wait()
    try:
        container = docker_client.containers.get(name)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            container.reload()
            if container.status == "exited":
                break
            time.sleep(0.5)
        assert container.status == "exited", container.status
        assert "orphan-timeout" in container.logs().decode(errors="replace")
    finally:
        for leftover in docker_client.containers.list(all=True, filters={"name": name}, ignore_removed=True):
            leftover.remove(force=True)


def test_a_shipped_image_resets_through_its_spare_and_records_video(docker_client):
    """The editor image as shipped: a reset swaps in the spare desktop (a second agent account inside the
    container), and a recording made in the container gets its video."""
    with HciEnvClient.from_docker_image(EDITOR_IMAGE) as env:
        env.reset()
        deadline = time.monotonic() + 60
        while env.state().spare["state"] != "ready":
            assert time.monotonic() < deadline, env.state().spare
            time.sleep(0.2)
        provider = env.provider
        with httpx.Client(base_url=provider.base_url,
                          headers={"Authorization": f"Bearer {provider.control_token}"}) as http:
            started = http.post("/recording", json={"command": "start", "source": "agent", "name": "in-container"})
            assert started.status_code == 200, started.text
            first = env.step({"type": "type_text", "text": "typed before the reset"}).observation
            stopped = http.post("/recording", json={"command": "stop"}).json()
        code, out = provider.container.exec_run(["cat", f"{stopped['path']}/meta.json"], user="root")
        assert code == 0, out
        video = json.loads(out)["video"]
        assert video["file"] == "video.mp4" and video["frames"] >= 1, video
        agent = env.call_tool("bash", command="id -u").observation.data["stdout"].strip()
        fresh = env.reset().observation
        assert env.state().spare is not None
        after = env.call_tool("bash", command="id -u").observation.data["stdout"].strip()
        assert after != agent  # the spare's account: a desktop prepared while the last episode ran
        assert fresh.screenshot.to_pil().tobytes() != first.screenshot.to_pil().tobytes()


def test_the_apps_image_serves_the_suite_with_its_real_apps(docker_client):
    """hci-envs/apps: a reset names a task of the real-application suite; its apps start inside the container
    as the agent (LibreOffice, chromium, the file manager, the calculator show their accessibility trees),
    untouched they score 0, and a task done over the wire scores 1 on the server, beside the answers."""
    from hci_envs.tasks.suite import suite, templates

    def first_task(app: str, seed: int) -> str:  # the first template of the app, at a seed
        return next(f"{t.id}.{seed}" for t in templates().values() if t.app == app and t.apps == (app,))

    with HciEnvClient.from_docker_image(APPS_IMAGE, mem_limit="3g") as env:
        for task_id, app, role in ((first_task("calc", 2), "calc", "menu"), (first_task("writer", 1), "writer", "menu"),
                                   (first_task("browser", 4), "browser", "document web"),
                                   (first_task("calculator", 0), "calculator", "toggle button")):
            obs = env.reset(task=task_id)
            assert obs.observation.text, task_id  # the instruction
            # a reset waits until the windows are drawn; chromium's renderer sends the page's part of the tree
            # after that, and a loaded machine showed the browser's tree without its document for a moment
            tree: dict = {}

            def shows_role() -> bool:
                tree.update(env.call_tool("accessibility_tree", app=app).observation.data)
                return any(n["role"] == role for n in tree["nodes"])

            assert wait_until(shows_role, timeout=30), (task_id, tree.get("reason"), tree["apps"])
            result = env.score()
            assert result["score"] == 0.0 and not result["success"], (task_id, result)
        env.reset(task="editor-append-line.9")
        wanted = suite(seeds=[9], ids=("editor-append-line",))[0].checker.equals
        env.step({"type": "key", "keys": "ctrl+End"})
        env.step({"type": "type_text", "text": wanted.rsplit("\n", 2)[-2] + "\n", "mode": "keys"})
        env.step({"type": "key", "keys": "ctrl+s"})
        result = env.score()
        assert result["score"] == 1.0 and result["success"], result


def _agents_running(container, *names: str) -> list[str]:
    """The container's live processes (zombies aside) of agent accounts whose program is one of ``names``."""
    code, out = container.exec_run(["ps", "-e", "-o", "stat=,uid=,comm="])
    return [line for line in out.decode().splitlines() if len(line.split()) == 3 and not line.startswith("Z")
            and int(line.split()[1]) >= 2000 and line.split()[2] in names]


def test_a_hostile_agent_in_a_container_meets_the_containers_bounds_and_the_server_carries_on(docker_client):
    """In a container the server is not root and makes no control groups: the container's own bounds hold, for
    all its sessions together, and state() says so with their values. A fork bomb and a memory hog stop at
    them; the server answers throughout; a reset ends everything of the agent."""
    with HciEnvClient.from_docker_image(EDITOR_IMAGE, mem_limit="1g", pids_limit=400, cpus=1.5) as env:
        env.reset()
        state = env.state()
        limits = state.limits
        assert limits["shared"] == {"memory": 1024**3, "processes": 400, "cpus": 1.5}, limits
        assert limits["enforced_by"].startswith("none per session here") and "400 processes" in \
            limits["enforced_by"], limits
        container = env.provider.container
        with McpClient(state.mcp_url, token=state.agent_token) as mcp:
            hog = mcp.call("bash", {"command": "python3 -c \"x = b'a' * (1500 * 1024 * 1024); print('survived')\"; "
                                               "echo exit=$?", "timeout": 60}).structured_content
            assert "survived" not in hog["stdout"] and "exit=" in hog["stdout"], hog
            started = time.monotonic()
            bomb = mcp.call("bash", {"command": "bomb() { bomb | bomb & }; bomb; sleep 5", "timeout": 20})
            # answered within the command's time (plus the stopping), whatever the bomb did to the shell
            assert time.monotonic() - started < 60 and (bomb.is_error or bomb.structured_content), bomb
        assert env.provider.alive() and httpx.get(f"{env.provider.base_url}/health", timeout=30).status_code == 200
        env.reset()
        assert _agents_running(container, "bash", "sleep", "python3") == []  # the bomb, its shell and the hog
        assert env.step({"type": "key", "keys": "a"}).done is False


@pytest.mark.parametrize("victim", ["Xvfb", "x11vnc", "openbox"])
def test_a_desktop_process_killed_in_a_container_is_said_and_the_next_reset_recovers(docker_client, victim):
    """tests/test_processes.py's kills, inside the image, during a step: the step answers, the loss is said (the
    display's or the window manager's ends the episode; x11vnc's only the viewers' connections), a reset brings
    a whole desktop back, and nothing of the old one is left in the container."""
    import threading
    import urllib.parse

    from rfb_client import RfbClient

    with HciEnvClient.from_docker_image(BASE_IMAGE, env_vars={"HCI_ENVS_SPARE": "0"}) as env:  # one display
        env.reset()
        state = env.state()
        container = env.provider.container
        path = urllib.parse.parse_qs(urllib.parse.urlsplit(state.vnc_url).query)["path"][0]
        viewer = RfbClient.websocket(env.provider.base_url.replace("http", "ws", 1) + "/" + path)  # x11vnc runs

        def running(name: str) -> list[str]:
            code, out = container.exec_run(["pgrep", "-x", name])
            return out.decode().split()

        before = running(victim)
        assert len(before) == 1, before
        killer = threading.Timer(0.5, container.exec_run, (["pkill", "-KILL", "-x", victim],))
        killer.start()
        first = env.step({"type": "wait", "ms": 2000})
        killer.join()
        if victim == "x11vnc":
            assert not first.done and not env.step({"type": "wait", "ms": 1}).done
            with pytest.raises(Exception):  # the viewer's connection ended with its x11vnc
                for _ in range(50):
                    viewer.io.recv_exact(1)
            again = RfbClient.websocket(env.provider.base_url.replace("http", "ws", 1) + "/" + path)
            assert (again.width, again.height) == (1280, 800)
            again.io.close()
        else:
            ended = first if first.done else env.step({"type": "wait", "ms": 1})
            reason = ended.observation.truncated_reason or ""
            said = ("Xvfb", "X connection") if victim == "Xvfb" else ("window manager",)
            assert ended.done and any(word in reason for word in said), reason
        with contextlib.suppress(Exception):
            viewer.io.close()
        env.reset()
        assert not env.step({"type": "click", "x": 5, "y": 5}).done
        assert len(running("Xvfb")) == 1 and len(running("openbox")) == 1
        assert not set(running(victim)) & set(before)
        code, zombies = container.exec_run(["sh", "-c", "ps -e -o stat= | grep -c '^Z' || true"])
        assert zombies.decode().strip() == "0", zombies
        assert env.provider.alive()


def test_building_again_removes_the_image_it_replaced_and_nothing_else(docker_client, tmp_path):
    """A build that replaces an image of hci-envs' removes the one it replaced (building again and again would fill
    the disk); an untagged image of somebody else's stays, even one built on an image of ours."""
    from hci_envs.ops.images import build_dockerfile_dir, one_build_at_a_time

    tag = f"hci-envs-test/rebuilt:{os.environ['HCI_ENVS_RUN']}"
    context = tmp_path / "rebuilt"
    context.mkdir()
    foreign_context = tmp_path / "foreign"
    foreign_context.mkdir()
    (foreign_context / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN echo {os.urandom(4).hex()} > /foreign\n")
    with one_build_at_a_time():  # a build on our base while another checkout's build replaces it would lose it
        foreign = docker_client.images.build(path=str(foreign_context), rm=True)[0]  # untagged, on ours, not ours
    ids = []
    try:
        for n in range(2):
            (context / "Dockerfile").write_text(f"ARG BASE\nFROM $BASE\nRUN echo {n}-{os.urandom(4).hex()} > /n\n")
            ids.append(build_dockerfile_dir(context, tag, base=BASE_IMAGE, progress=lambda m: None))
        assert ids[0] != ids[1] and docker_client.images.get(tag).id == ids[1]
        with pytest.raises(Exception, match="No such image|not found"):
            docker_client.images.get(ids[0])
        assert docker_client.images.get(foreign.id).id == foreign.id  # somebody else's: left alone
    finally:
        docker_client.images.remove(tag, force=True)
        docker_client.images.remove(foreign.id, force=True)
