"""reset / step / state over HTTP and WebSocket, sessions, secrets, faults and the client library."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from helpers import AppServer, McpClient, Probe, ServerProcess, alive, processes_named, text_of
from websockets.sync.client import connect

from hci_envs import AsyncHciEnvClient, HciEnvClient
from hci_envs.errors import CapacityError, EnvironmentStateError, InvalidActionError


def ws_url(server: ServerProcess) -> str:
    return server.base_url.replace("http://", "ws://") + "/ws"


def ws_call(ws, message) -> dict:
    ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(ws.recv(timeout=60))


# -- HTTP on the default session --------------------------------------------------------------------------
@pytest.mark.x11
def test_http_reset_step_state_and_step_forms(fresh_probe):
    server, probe = fresh_probe
    with server.http() as http:
        obs = http.post("/reset", json={"seed": 1, "episode_id": "ep-1"}).json()
        assert set(obs) == {"observation", "reward", "done", "metadata"}
        assert obs["observation"]["screenshot"]["width"] == 1280 and obs["done"] is False
        probe.wait_for(lambda s: s.get("ready"))
        x, y = probe.center("button")
        step = http.post("/step", json={"action": {"type": "click", "x": x, "y": y}}).json()
        assert step["observation"]["text"] == f"clicked left at ({x}, {y})"
        # a number on every step, as OpenEnv's wire has it (the task's reward is /score's); none at a reset
        assert obs["reward"] is None and step["reward"] == 0.0
        probe.wait_for(lambda s: s["clicks"] == 1, what="the click from /step")
        # a tool call, and a list of actions answered by one observation
        step = http.post("/step", json={"action": {"tool": "click", "arguments": {"x": x, "y": y}}}).json()
        batch = [{"type": "click", "x": x, "y": y}, {"type": "wait", "ms": 10}, {"type": "click", "x": x, "y": y}]
        step = http.post("/step", json={"action": batch}).json()
        assert step["observation"]["text"].count("clicked") == 2
        probe.wait_for(lambda s: s["clicks"] == 4, what="four clicks in all")
        state = http.get("/state").json()
        assert state["episode_id"] == "ep-1" and state["step_count"] == 3
        assert state["mcp_url"] == f"{server.base_url}/mcp" and state["session_id"] == "default"
        # OpenEnv's MCP actions through step, image results intact
        listed = http.post("/step", json={"action": {"type": "list_tools"}}).json()
        assert "screenshot" in {t["name"] for t in listed["observation"]["tools"]}
        called = http.post("/step", json={"action": {"type": "call_tool", "tool_name": "screenshot",
                                                     "arguments": {"format": "png"}}}).json()
        image = [c for c in called["observation"]["result"]["content"] if c["type"] == "image"][0]
        assert image["mimeType"] == "image/png"
        from base64 import b64decode

        assert b64decode(image["data"])[:4] == b"\x89PNG"


@pytest.mark.x11
def test_reset_restores_the_start_state(fresh_probe):
    server, probe = fresh_probe
    with McpClient(f"{server.base_url}/mcp") as mcp:
        x, y = probe.center("entry")
        mcp.ok("click", {"x": x, "y": y})
        mcp.ok("type_text", {"text": "dirty"})
        mcp.ok("clipboard_set", {"text": "left over"})
        probe.wait_for(lambda s: s["entry"] == "dirty")
        with server.http() as http:
            assert http.post("/reset", json={}).status_code == 200
        state = probe.wait_for(lambda s: s.get("ready") and s["entry"] == "" and s["clicks"] == 0,
                               what="a fresh probe app after reset")
        assert state["entry"] == ""
        assert mcp.ok("clipboard_get").structured_content["text"] is None


@pytest.mark.fake
@pytest.mark.parametrize(
    "method,path,body,status,code",
    [
        ("post", "/step", "{not json", 422, None),
        ("post", "/step", {}, 422, None),
        ("post", "/step", {"action": {"type": "teleport"}}, 422, "VALIDATION_ERROR"),
        ("post", "/step", {"action": {"type": "click", "x": 9000, "y": 1}}, 422, "VALIDATION_ERROR"),
        ("post", "/step", {"action": []}, 422, "VALIDATION_ERROR"),
        ("post", "/step", {"action": "hello"}, 422, "VALIDATION_ERROR"),
        ("post", "/reset", {"seed": -1}, 422, None),
        ("post", "/reset", {"snapshot": "never-taken"}, 400, "CONFIG_ERROR"),
        ("post", "/reset", {"color": "blue"}, 400, "CONFIG_ERROR"),
        ("get", "/sessions/nope/state", None, 404, "SESSION_NOT_FOUND"),
        ("delete", "/sessions/nope", None, 404, "SESSION_NOT_FOUND"),
    ],
)
def test_http_bad_requests_get_typed_4xx(fake_app, method, path, body, status, code):
    server = fake_app
    with server.http() as http:
        assert http.post("/reset", json={}).status_code == 200  # a running episode: only the request is bad
        if isinstance(body, str):
            response = http.request(method, path, content=body, headers={"content-type": "application/json"})
        else:
            response = http.request(method, path, json=body) if body is not None else http.request(method, path)
        assert response.status_code == status, response.text
        payload = response.json()
        assert "detail" in payload
        if code:
            assert payload["error"]["code"] == code
        assert http.get("/health").json()["status"] == "healthy"


@pytest.mark.fake
@pytest.mark.parametrize(
    "path,body,status,code",
    [
        ("/hci-envs/task", {"split": "all", "index": 10**30}, 400, "CONFIG_ERROR"),
        ("/hci-envs/task", {"split": "all", "index": -1}, 400, "CONFIG_ERROR"),
        ("/hci-envs/task", {"split": "all", "index": True}, 422, None),  # not position 1
        ("/hci-envs/task", {"split": "all", "index": "1"}, 422, None),
        ("/hci-envs/task", {"split": "all", "index": 1.5}, 422, None),
        ("/hci-envs/task", {"split": "all"}, 422, None),
        ("/hci-envs/task", {"split": {"$ne": ""}, "index": 0}, 422, None),
        ("/hci-envs/task", {"split": "../../../etc/passwd", "index": 0}, 404, "TASK_NOT_FOUND"),
        ("/hci-envs/task", {"split": "x" * 100_000, "index": 0}, 422, None),
        ("/hci-envs/task_range", {"split": "all", "start": "a"}, 422, None),
        ("/hci-envs/tasks", [{"split": "all"}], 422, None),
        ("/hci-envs/tasks", "{not json", 422, None),
        ("/%00/tasks", {"split": "all"}, 404, "TASK_NOT_FOUND"),
        ("/..%2f..%2fetc/tasks", {"split": "all"}, 404, None),
    ],
)
def test_task_api_bad_requests_get_typed_4xx(fake_app, path, body, status, code):
    """The task API as a careless or hostile caller uses it: every bad request is a 4xx that names the field,
    an error echoes at most a bounded part of what it was sent, and the server carries on."""
    with fake_app.http() as http:
        if isinstance(body, str):
            response = http.post(path, content=body, headers={"content-type": "application/json"})
        else:
            response = http.post(path, json=body)
        assert response.status_code == status, response.text[:500]
        if code:
            assert response.json()["error"]["code"] == code
            assert len(response.json()["error"]["message"]) < 400
        assert http.post("/hci-envs/num_tasks", json={"split": "all"}).json()["num_tasks"] > 0


@pytest.mark.fake
def test_task_api_ranges_clip_and_never_list_without_bound(fake_app):
    """Ranges take Python's slice rules (negative from the end, clipped), whatever their size."""
    with fake_app.http() as http:
        count = http.post("/hci-envs/num_tasks", json={"split": "all"}).json()["num_tasks"]
        listed = http.post("/hci-envs/task_range", json={"split": "all", "start": -10**30, "stop": 10**30})
        assert [t["index"] for t in listed.json()["tasks"]] == list(range(count))
        empty = http.post("/hci-envs/task_range", json={"split": "all", "start": 10**30, "stop": -10**30})
        assert empty.json() == {"tasks": []}
        last = http.post("/hci-envs/task_range", json={"split": "all", "start": -1})
        assert [t["index"] for t in last.json()["tasks"]] == [count - 1]


@pytest.mark.fake
def test_the_task_api_answers_the_control_token_only():
    """An agent holding its own token (the one its tools take) lists no task and puts no session into one."""
    import secrets

    control, agent = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    with ServerProcess("--desktop", "fake", env={"HCI_ENVS_CONTROL_TOKEN": control,
                                                  "HCI_ENVS_AGENT_TOKEN": agent}) as server:
        routes = [("get", "/list_environments", None), ("get", "/hci-envs/splits", None),
                  ("post", "/hci-envs/tasks", {"split": "all"}), ("post", "/hci-envs/num_tasks", {"split": "all"}),
                  ("post", "/hci-envs/task", {"split": "all", "index": 0}),
                  ("post", "/hci-envs/task_range", {"split": "all", "start": 0}),
                  ("post", "/reset", {"split": "all", "index": 0})]
        for token in (agent, None, control[:-1]):
            auth = {"authorization": f"Bearer {token}"} if token else {}
            for method, path, body in routes:
                reply = httpx.request(method, server.base_url + path, json=body, headers=auth)
                assert reply.status_code == 401, (path, reply.status_code)
        with server.http(headers={"authorization": f"Bearer {control}"}) as http:
            assert http.post("/hci-envs/num_tasks", json={"split": "all"}).json()["num_tasks"] > 0


@pytest.mark.fake
def test_production_mode_serves_no_simulation_route_for_any_session():
    with AppServer("--mode", "production", "--desktop", "fake") as server:
        with server.http() as http:
            sid = http.post("/sessions").json()["session_id"]
            for method, path in (("POST", "/step"), ("GET", "/state"), ("POST", "/reset"),
                                 ("POST", f"/sessions/{sid}/step"), ("GET", f"/sessions/{sid}/state"),
                                 ("POST", f"/sessions/{sid}/reset")):
                body = {"action": {"type": "wait", "ms": 1}} if method == "POST" else None
                reply = http.request(method, path, json=body)
                assert reply.status_code in (404, 405), (path, reply.status_code)


# -- WebSocket sessions ------------------------------------------------------------------------------------
@pytest.mark.fake
def test_ws_protocol_and_error_frames(fake_app):
    server = fake_app
    with server.ws("/ws") as ws:
        before = ws_call(ws, {"type": "step", "data": {"type": "wait", "ms": 1}})
        assert before["type"] == "error" and before["data"]["code"] == "NOT_RESET"  # not a generic failure
        assert "reset" in before["data"]["message"] and before["data"]["error"]["code"] == "NOT_RESET"
        assert ws_call(ws, "{oops")["data"]["code"] == "INVALID_JSON"
        assert ws_call(ws, {"type": "dance"})["data"]["code"] == "UNKNOWN_TYPE"
        assert ws_call(ws, {"type": "step"})["data"]["code"] == "VALIDATION_ERROR"
        assert ws_call(ws, {"type": "reset", "data": {}, "extra": 1})["data"]["code"] == "VALIDATION_ERROR"
        obs = ws_call(ws, {"type": "reset", "data": {"episode_id": "ws-ep"}})
        assert obs["type"] == "observation" and obs["data"]["observation"]["screenshot"]["height"] == 800
        bad = ws_call(ws, {"type": "step", "data": {"type": "key", "keys": "ctrl+nokey"}})
        assert bad["data"]["code"] == "VALIDATION_ERROR" and "nokey" in bad["data"]["message"]
        ok = ws_call(ws, {"type": "step", "data": {"type": "mouse_move", "x": 3, "y": 4}})
        assert ok["data"]["observation"]["text"] == "moved to (3, 4)"
        state = ws_call(ws, {"type": "state"})
        assert state["type"] == "state" and state["data"]["episode_id"] == "ws-ep"
        assert state["data"]["session_id"] != "default"
        mcp = ws_call(ws, {"type": "mcp", "data": {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                                   "params": {"name": "cursor_position", "arguments": {}}}})
        assert mcp["data"]["id"] == 7 and mcp["data"]["result"]["structured_content"] == {"x": 3, "y": 4}
        ws.send(json.dumps({"type": "close"}))
        with pytest.raises(Exception):
            ws.recv(timeout=10)  # closed by the server


@pytest.mark.x11
def test_ws_client_vanishing_mid_step_frees_its_desktop(probe_server):
    server, _ = probe_server

    def xvfbs() -> set[int]:  # the server's own: other sessions of pytest (CI's tiers) run desktops beside it
        return {pid for pid in processes_named("Xvfb") if pid in server.children()}

    before = xvfbs()
    ws = connect(ws_url(server), max_size=2**26).__enter__()
    ws_call(ws, {"type": "reset", "data": {}})
    during = xvfbs() - before
    assert len(during) == 1, "the WebSocket session should have its own Xvfb"
    ws.send(json.dumps({"type": "step", "data": {"type": "wait", "ms": 1500}}))
    ws.socket.close()  # vanish without a close frame, mid-step
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(alive(p) for p in during):
        time.sleep(0.1)
    assert not [p for p in during if alive(p)], "the vanished client's Xvfb is still running"
    with server.http() as http:
        assert [s["kind"] for s in http.get("/sessions").json()] == ["default"]


@pytest.mark.fake
def test_capacity_and_idle_reaper():
    with AppServer("--max-sessions", "2", "--idle-timeout", "1.5", "--desktop", "fake") as server:
        with server.http() as http:
            created = http.post("/sessions").json()
            assert created["mcp_url"].endswith(f"/sessions/{created['session_id']}/mcp")
            with server.ws("/ws") as ws:
                refused = json.loads(ws.recv(timeout=30))
                assert refused["type"] == "error" and refused["data"]["code"] == "CAPACITY_REACHED"
                assert refused["data"]["max_sessions"] == 2
            too_many = http.post("/sessions")
            assert too_many.status_code == 503 and too_many.json()["error"]["code"] == "CAPACITY_REACHED"
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and len(http.get("/sessions").json()) > 1:
                time.sleep(0.2)
            assert [s["session_id"] for s in http.get("/sessions").json()] == ["default"], "idle session not reaped"


@pytest.mark.x11
def test_eight_sessions_each_see_only_their_own_desktop(x11, tmp_path):
    probe = Probe(tmp_path)
    with ServerProcess("--app", " ".join(f"'{c}'" for c in probe.command()), "--max-sessions", "9",
                       "--agent-tokens") as server:
        canvas = probe.wait_for(lambda s: s.get("ready"))["widgets"]["canvas"]
        spots = [(canvas[0] + 30 + 50 * i, canvas[1] + 60 + 20 * i) for i in range(8)]

        def session(i: int) -> tuple[int, list[bool]]:
            with HciEnvClient(server.base_url) as env:
                env.reset()
                x, y = spots[i]
                env.step({"type": "click", "x": x, "y": y})
                time.sleep(0.5)
                result = env.step({"type": "wait", "ms": 1})
                image = result.observation.screenshot.to_pil().convert("RGB")
                red = [image.getpixel(p)[0] > 200 and image.getpixel(p)[1] < 80 for p in spots]
                return i, red

        with ThreadPoolExecutor(8) as pool:
            results = dict(pool.map(session, range(8)))
        for i, red in results.items():
            assert red[i], f"session {i} does not see its own mark"
            assert sum(red) == 1, f"session {i} sees marks of others: {red}"


@pytest.mark.fake
def test_agent_token_of_one_session_is_refused_by_another():
    with AppServer("--agent-tokens", "--desktop", "fake") as server, server.http() as http:
        a = http.post("/sessions").json()
        b = http.post("/sessions").json()
        assert a["agent_token"] != b["agent_token"]
        with server.mcp(a["mcp_url"], token=a["agent_token"]) as mcp:
            assert mcp.ok("screen_size").structured_content["width"] == 1280
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "screen_size", "arguments": {}}}
        headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
        for token in (a["agent_token"], None, "guess"):
            auth = {"authorization": f"Bearer {token}"} if token else {}
            response = http.post(b["mcp_url"], json=rpc, headers={**headers, **auth})
            assert response.status_code == 401, response.text
            assert response.json()["error"]["code"] == "UNAUTHORIZED"
        ok = http.post(b["mcp_url"], json=rpc, headers={**headers, "authorization": f"Bearer {b['agent_token']}"})
        assert ok.status_code == 200 and ok.json()["result"]["structuredContent"]["height"] == 800


@pytest.mark.fake
def test_exposed_binding_requires_secrets():
    server = ServerProcess("--host", "0.0.0.0", "--desktop", "fake")
    with pytest.raises(AssertionError, match="refusing to listen on 0.0.0.0"):
        server.start()
    tokens = {"HCI_ENVS_CONTROL_TOKEN": "ctl-secret", "HCI_ENVS_AGENT_TOKEN": "agent-secret"}
    with ServerProcess("--host", "0.0.0.0", "--desktop", "fake", env=tokens) as server:
        with server.http() as http:
            assert http.post("/reset", json={}).status_code == 401
            assert http.post("/reset", json={}, headers={"authorization": "Bearer ctl-secret"}).status_code == 200
            assert http.get("/health").status_code == 200
        with McpClient(f"{server.base_url}/mcp", token="agent-secret") as mcp:
            assert mcp.ok("screen_size").structured_content["width"] == 1280


@pytest.mark.fake
def test_loopback_server_refuses_foreign_hosts_and_origins(fake_app):
    server = fake_app
    with server.http() as http:
        assert http.get("/health", headers={"host": "evil.example"}).status_code == 403
        assert http.get("/health", headers={"origin": "http://evil.example"}).status_code == 403
        assert http.get("/health", headers={"origin": "http://localhost:3000"}).status_code == 200


# -- faults ------------------------------------------------------------------------------------------------
@pytest.mark.x11
@pytest.mark.parametrize("victim", ["Xvfb", "app"])
def test_desktop_failure_truncates_and_reset_recovers(x11, tmp_path, victim):
    from hci_envs.traits import DesktopEnv

    probe = Probe(tmp_path)
    with DesktopEnv(start_state={"apps": [probe.app()]}) as env:
        env.reset()
        probe.wait_for(lambda s: s.get("ready"))
        assert not env.step({"type": "mouse_move", "x": 5, "y": 5}).done
        if victim == "Xvfb":
            os.kill(env.desktop._xvfb.pid, signal.SIGKILL)
        else:
            os.kill(env.desktop.apps()[0][1].pid, signal.SIGKILL)
        time.sleep(0.3)
        obs = env.step({"type": "mouse_move", "x": 6, "y": 6})
        assert obs.done and obs.truncated
        assert ("Xvfb" in obs.truncated_reason) if victim == "Xvfb" else ("probe" in obs.truncated_reason)
        with pytest.raises(EnvironmentStateError, match="reset"):
            env.step({"type": "mouse_move", "x": 7, "y": 7})
        probe.state_path.unlink(missing_ok=True)
        obs = env.reset()
        assert not obs.done and obs.screenshot is not None
        probe.wait_for(lambda s: s.get("ready"), what="the app after recovery")
        assert env.step({"type": "cursor_position"}).data == {"x": 0, "y": 0}


@pytest.mark.x11
def test_an_app_showing_only_an_override_redirect_window_stops_serve_with_one_line_that_says_so():
    """What was seen and how to declare readiness, on one line, not a traceback."""
    app = Path(__file__).parent / "apps" / "override_only.py"
    server = ServerProcess("--app", f"python3 {app}")
    with pytest.raises(AssertionError, match="exited") as failed:
        server.start(timeout=60)
    server.stop()
    said = str(failed.value)
    assert "showed only 1 override-redirect window" in said and '"wait_for_window": false' in said, said
    assert "Traceback" not in said, said
    # as the line says: the app's start state as JSON, and the server is up with the app on screen
    declared = json.dumps({"command": ["python3", str(app)], "wait_for_window": False})
    with ServerProcess("--app", declared) as server, server.http() as http:
        reset = http.post("/reset", json={})
        assert reset.status_code == 200 and reset.json()["observation"]["screenshot"]["width"] == 1280, reset.text


@pytest.mark.x11
def test_xvfb_killed_under_the_server_keeps_it_up(fresh_probe):
    server, probe = fresh_probe
    xvfb = [pid for pid, cmd in processes_named("Xvfb").items() if pid in server.children()]
    assert len(xvfb) == 1
    os.kill(xvfb[0], signal.SIGKILL)
    time.sleep(0.3)
    with server.http() as http:
        step = http.post("/step", json={"action": {"type": "wait", "ms": 1}}).json()
        assert step["done"] is True and "Xvfb" in step["observation"]["truncated_reason"]
        assert http.get("/health").json()["desktop"]["status"] == "down"
    with McpClient(f"{server.base_url}/mcp") as mcp:
        result = mcp.call("screen_size")
        assert result.is_error and "reset" in text_of(result)
    with server.http() as http:
        assert http.post("/reset", json={}).status_code == 200
        assert http.get("/health").json()["desktop"]["status"] == "ok"
    probe.wait_for(lambda s: s.get("ready"), what="the probe app after recovery")


# -- snapshots and the home directory --------------------------------------------------------------------
@pytest.mark.fake
@pytest.mark.parametrize("name", ["bad\x00name", "x" * 300, "../up", ".hidden", "", "tab\there"])
def test_bad_snapshot_names_are_typed_errors(fake_app, name):
    server = fake_app
    with server.http() as http:
        assert http.post("/reset", json={}).status_code == 200
        reply = http.post("/snapshot", json={"name": name})
        assert reply.status_code == 400 and reply.json()["error"]["code"] == "CONFIG_ERROR", reply.text
        assert http.get("/health").json()["status"] == "healthy"


@pytest.mark.fake
def test_snapshots_skip_pipes_keep_sparse_files_sparse_and_refuse_oversize():
    from hci_envs.traits import DesktopEnv

    from hci_envs.sandbox.homes import SnapshotError

    with DesktopEnv(max_snapshot_bytes=32 * 1024**2, desktop="fake") as env:
        env.reset()
        os.mkfifo(env.home / "pipe")  # opening it to copy would block for ever
        with open(env.home / "sparse.bin", "wb") as f:  # 300 MB long, one page of data
            f.truncate(300 * 1024**2)
            f.seek(100 * 1024**2)
            f.write(b"data")
        info = env.snapshot("with-holes")
        assert "pipe (named pipe)" in info["skipped"] and info["bytes"] < 1024**2, info
        (env.home / "sparse.bin").unlink()
        env.reset(snapshot="with-holes")
        restored = env.home / "sparse.bin"
        st = restored.stat()
        assert st.st_size == 300 * 1024**2 and st.st_blocks * 512 < 1024**2, (st.st_size, st.st_blocks)
        with open(restored, "rb") as f:
            f.seek(100 * 1024**2)
            assert f.read(4) == b"data"
        assert not (env.home / "pipe").exists()
        (env.home / "big.bin").write_bytes(os.urandom(33 * 1024**2))
        with pytest.raises(SnapshotError) as failed:
            env.snapshot("too-big")
        assert failed.value.code == "SNAPSHOT_ERROR" and "too-big" not in env.snapshots()


@pytest.mark.fake
def test_home_template_and_snapshots(tmp_path):
    from hci_envs.traits import DesktopEnv

    template = tmp_path / "template"
    (template / "docs").mkdir(parents=True)
    (template / "docs" / "note.txt").write_text("original")
    with DesktopEnv(start_state={"home_template": str(template)}, desktop="fake") as env:
        env.reset()
        note = env.home / "docs" / "note.txt"
        assert note.read_text() == "original"
        note.write_text("edited")
        (env.home / "new.txt").write_text("new")
        assert env.snapshot("edited")["files"] >= 2  # ours, and what the window manager keeps in ~/.cache
        note.write_text("edited again")
        env.reset()
        assert note.read_text() == "original" and not (env.home / "new.txt").exists()
        env.reset(snapshot="edited")
        assert note.read_text() == "edited" and (env.home / "new.txt").read_text() == "new"


@pytest.mark.fake
def test_client_snapshot_branches_its_own_session(fake_server):
    """A client's desktop is its own WebSocket session: its snapshot and branch must act on that session."""
    from hci_envs.errors import ConfigError

    def cat(env) -> str:
        return env.call_tool("bash", command="cat saved.txt 2>/dev/null || echo missing").observation.data["stdout"]

    async def async_side(url: str) -> str:
        async with AsyncHciEnvClient(url) as env:
            await env.reset()
            await env.step({"tool": "bash", "arguments": {"command": "echo async > saved.txt"}})
            await env.snapshot("async-branch")
            await env.reset()
            await env.reset(snapshot="async-branch")
            result = await env.call_tool("bash", command="cat saved.txt")
            return result.observation.data["stdout"]

    server = fake_server
    with HciEnvClient(server.base_url) as env:
        env.reset()
        env.call_tool("bash", command="echo kept > saved.txt")
        assert env.snapshot("branch")["name"] == "branch"
        env.call_tool("bash", command="echo changed > saved.txt")
        env.reset()
        assert cat(env) == "missing\n"
        env.reset(snapshot="branch")
        assert cat(env) == "kept\n"
        with pytest.raises(ConfigError, match="snapshot"):
            env.snapshot("bad/name")
        assert cat(env) == "kept\n"  # the session carries on
    assert asyncio.run(async_side(server.base_url)) == "async\n"


# -- the client library ----------------------------------------------------------------------------------
@pytest.mark.fake
def test_client_from_local_starts_and_always_stops_the_server():
    with HciEnvClient.from_local(size=(800, 600), apps=["xterm"], desktop="fake") as env:
        provider = env.provider
        pid = provider.proc.pid
        result = env.reset()
        image = result.observation.screenshot.to_pil()
        assert image.size == (800, 600)
        array = result.observation.screenshot.to_numpy()
        assert array.shape == (600, 800, 3)
        state = env.state()
        assert state.screen_width == 800 and state.mcp_url
        with pytest.raises(InvalidActionError, match="off screen"):
            env.step({"type": "click", "x": 900, "y": 10})
        assert env.call_tool("screen_size").observation.data == {"width": 800, "height": 600}
        tools = {t["name"] for t in env.list_tools()}
        assert "type_text" in tools and "reset" not in tools
    assert not alive(pid)
    with pytest.raises(EnvironmentStateError):
        env.step({"type": "wait", "ms": 1})


@pytest.mark.fake
def test_client_capacity_error_is_typed():
    with ServerProcess("--max-sessions", "1", "--desktop", "fake") as server:
        with pytest.raises(CapacityError):
            HciEnvClient(server.base_url).reset()


@pytest.mark.fake
def test_async_client():
    async def run() -> None:
        env = await AsyncHciEnvClient.from_local(apps=["xterm"], desktop="fake")
        async with env:
            result = await env.reset()
            assert result.observation.screenshot.width == 1280
            result = await env.step({"type": "mouse_move", "x": 12, "y": 34})
            state = await env.state()
            assert state.step_count == 1
            position = await env.call_tool("cursor_position")
            assert position.observation.data == {"x": 12, "y": 34}
        assert env.provider.proc is None

    asyncio.run(run())


@pytest.mark.x11
def test_killed_client_process_stops_its_local_server(x11, tmp_path):
    import subprocess
    import sys

    script = tmp_path / "user.py"
    script.write_text(
        "import sys, time\n"
        "from hci_envs import HciEnvClient\n"
        "env = HciEnvClient.from_local()\n"
        "print(env.provider.proc.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    user = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    server_pid = int(user.stdout.readline())
    from helpers import descendants

    desktop = descendants(server_pid)
    assert desktop
    user.kill()
    user.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (alive(server_pid) or any(alive(p) for p in desktop)):
        time.sleep(0.1)
    assert not alive(server_pid), "the server outlived the process that started it"
    assert not [p for p in desktop if alive(p)]


@pytest.mark.fake
def test_step_results_carry_images_of_tool_calls(fake_server):
    server = fake_server
    with HciEnvClient(server.base_url) as env:
        env.reset()
        result = env.step({"tool": "screenshot", "arguments": {"format": "jpeg", "max_side": 640}})
        assert result.observation.images and result.observation.images[0].width == 640
        assert result.observation.images[0].to_pil().size == (640, 400)



@pytest.mark.x11
def test_local_provider_keeps_secrets_off_the_command_line_and_out_of_its_logs(x11):
    with HciEnvClient.from_local(control_token="s3cret-control", agent_token="s3cret-agent") as env:
        env.reset()
        with open(f"/proc/{env.provider.proc.pid}/cmdline", "rb") as f:
            assert b"s3cret" not in f.read()  # readable by every local user
        assert httpx.get(f"{env.base_url}/state").status_code == 401  # and yet the server has them
        assert httpx.get(f"{env.base_url}/state", headers={"Authorization": "Bearer s3cret-control"}).status_code == 200
        logs = env.provider.logs(200)
        assert "agent token:" in logs and "s3cret-agent" not in logs
        assert "vnc%2Fws%2F" in logs and "<redacted>" in logs


@pytest.mark.fake
@pytest.mark.slow
def test_a_server_with_no_client_for_its_orphan_timeout_exits():
    with ServerProcess("--desktop", "fake", "--orphan-timeout", "2") as server:
        with connect(ws_url(server)) as ws:  # an open WebSocket is a client, however quiet
            ws_call(ws, {"type": "reset", "data": {}})
            time.sleep(4)
            assert server.proc.poll() is None, "the server left while a client was connected"
            assert ws_call(ws, {"type": "state"})["type"] == "state"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and server.proc.poll() is None:
            try:
                httpx.get(f"{server.base_url}/health")  # a health probe (Docker's, Kubernetes') is no client
            except httpx.TransportError:
                break  # it is on its way out
            time.sleep(0.2)
        time.sleep(1)
        assert server.proc.poll() is not None, "the server outlived its orphan timeout"
        assert "orphan-timeout" in "".join(server.output)


@pytest.mark.fake
def test_a_full_disk_is_a_typed_error_and_the_server_carries_on(tmp_path):
    import shutil
    import subprocess

    full = tmp_path / "small-tmp"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,nr_inodes=400,mode=1777", "tmpfs", str(full)], check=True)
    try:
        with ServerProcess("--desktop", "fake", "--max-sessions", "4", env={"TMPDIR": str(full)}) as server:
            with server.http() as http:
                assert http.post("/sessions").status_code == 200
                fillers = full / "fillers"
                fillers.mkdir()
                with open(fillers / "data", "wb") as f:  # the disk fills up: its space, then its inodes
                    try:
                        while True:
                            f.write(b"x" * 65536)
                    except OSError:
                        pass
                try:
                    for n in range(10_000):
                        (fillers / str(n)).touch()
                except OSError:
                    pass
                refused = http.post("/sessions")
                assert refused.status_code == 507, refused.text
                assert refused.json()["error"]["code"] == "NO_SPACE" and "no space left" in refused.json()["detail"]
                with connect(ws_url(server)) as ws:
                    frame = json.loads(ws.recv(timeout=30))
                    assert frame["type"] == "error" and frame["data"]["error"]["code"] == "NO_SPACE"
                shutil.rmtree(fillers)
                assert http.post("/sessions").status_code == 200  # space again: sessions again
                assert http.get("/health").json()["status"] == "healthy"
    finally:
        subprocess.run(["umount", "-l", str(full)], check=False)


# -- tasks on the control plane --------------------------------------------------------------------------------
@pytest.mark.fake
def test_a_reset_names_a_task_and_the_server_scores_it(tmp_path):
    """A trainer names a task of the server's suite (or sends a spec); the checker runs on the server and the
    score comes back on the control plane only. Bad names, bad specs and scores without a task are typed 4xx."""
    task = {"id": "make-note", "instruction": "Write ok into note.txt in the home folder.",
            "checker": {"type": "file", "path": "note.txt", "equals": "ok\n"}}
    suite = tmp_path / "tasks.jsonl"
    suite.write_text(json.dumps(task) + "\n")
    suite.chmod(0o600)
    write_ok = {"action": {"tool": "bash", "arguments": {"command": "echo ok > note.txt"}}}
    with ServerProcess("--env", "workstation", "--desktop", "fake", "--tasks", str(suite)) as server:
        with server.http() as http:
            refused = http.post("/reset", json={"task": "nope"})
            assert refused.status_code == 404 and refused.json()["error"]["code"] == "TASK_NOT_FOUND"
            assert "make-note" in refused.json()["error"]["message"]
            assert http.post("/reset", json={"task": {"id": 5}}).json()["error"]["code"] == "TASK_FORMAT"
            assert http.post("/reset", json={"task": "make-note", "snapshot": "x"}).status_code == 400
            no_task = http.post("/score")
            assert no_task.status_code == 409 and no_task.json()["error"]["code"] == "STATE_ERROR"

            first = http.post("/reset", json={"task": "make-note"}).json()
            assert first["observation"]["text"] == task["instruction"]
            assert first["metadata"]["task"] == {"id": "make-note", "instruction": task["instruction"]}
            assert http.post("/score").json() == {"task": "make-note", "score": 0.0, "success": False,
                                                  "details": ["fail: note.txt: absent"]}
            assert http.post("/step", json=write_ok).status_code == 200
            assert http.post("/score").json()["success"] is True

            # a spec of the trainer's own, on a session of its own
            sid = http.post("/sessions").json()["session_id"]
            spec = {**task, "id": "own", "checker": {"type": "file", "path": "note.txt", "equals": "no\n"}}
            assert http.post(f"/sessions/{sid}/reset", json={"task": spec}).status_code == 200
            assert http.post(f"/sessions/{sid}/step", json=write_ok).status_code == 200
            assert http.post(f"/sessions/{sid}/score").json()["score"] == 0.0

            assert http.post("/reset", json={}).status_code == 200  # an episode without a task: nothing to score
            assert http.post("/score").status_code == 409
        with HciEnvClient(server.base_url) as env:  # the client's score() on its WebSocket session
            env.reset(task="make-note")
            env.step(write_ok["action"])
            assert env.score()["score"] == 1.0
