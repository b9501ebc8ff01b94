"""The shape of the house: one error tree whose codes travel as their own classes, step items defined once for
step() and /schema, arguments validated once and unknown ones refused, the environment's lock around every
call, a light client that imports no server, and the fake desktop as a working test seam.

Everything here runs on the fake desktop (no X): it is about the layers, not the display.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import jsonschema
import pytest
from helpers import McpClient, ServerProcess, text_of

from hci_envs import errors
from hci_envs.env import Environment
from hci_envs.errors import HciEnvsError, error_from_dict, wire_form
from hci_envs.tools import ToolOutput, tool

pytestmark = pytest.mark.fake

ROOT = Path(__file__).resolve().parent.parent


# -- errors ------------------------------------------------------------------------------------------------
def test_every_error_code_comes_back_as_its_own_class():
    # the feature errors a client never imports must still be known to it
    named = {"UNSUPPORTED_ACTION", "TASK_FORMAT", "RFB_ERROR", "ENV_CHECK_FAILED", "EPISODE_FORMAT",
             "SNAPSHOT_ERROR", "UNKNOWN_KEY", "DUPLICATE_TOOL"}
    script = (
        "import json, sys\n"
        "from hci_envs.errors import error_from_dict\n"
        "codes = json.loads(sys.argv[1])\n"
        "print(json.dumps({c: type(error_from_dict({'code': c, 'message': 'm'})).__name__ for c in codes}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script, json.dumps(sorted(named))], capture_output=True,
                         text=True, check=True)
    classes = json.loads(out.stdout)
    assert "HciEnvsError" not in classes.values(), classes
    for code, cls in errors._BY_CODE.items():
        rebuilt = error_from_dict({**_instance(cls).to_dict(), "message": "why", "field": "x"})
        assert type(rebuilt) is cls and rebuilt.code == code and rebuilt.message == "why"
        assert rebuilt.details["field"] == "x"
        if isinstance(rebuilt, errors.InvalidActionError):
            assert rebuilt.field == "x"
    checked = error_from_dict({"code": "ENV_CHECK_FAILED", "message": "m", "problems": ["a"]})
    assert isinstance(checked, AssertionError) and checked.problems == ["a"]
    assert type(error_from_dict({"code": "FROM_A_NEWER_SERVER", "message": "m"})) is HciEnvsError


def _instance(cls: type[HciEnvsError]) -> HciEnvsError:
    err = cls.__new__(cls)
    HciEnvsError.__init__(err, "m")
    return err


def test_an_error_code_names_one_class():
    with pytest.raises(TypeError, match="'TIMEOUT'.*already ActionTimeoutError"):
        type("MyTimeout", (HciEnvsError,), {"code": "TIMEOUT"})


@pytest.mark.parametrize("cls,status,ws,tool_error", [
    (errors.InvalidActionError, 422, "VALIDATION_ERROR", "invalid_args"),
    (errors.UnsupportedActionError, 422, "VALIDATION_ERROR", "invalid_args"),
    (errors.UnknownToolError, 404, "EXECUTION_ERROR", "tool_not_found"),
    (errors.ActionTimeoutError, 504, "EXECUTION_ERROR", "timeout"),
    (errors.TaskFormatError, 400, "VALIDATION_ERROR", "invalid_args"),
    (errors.CapacityError, 503, "CAPACITY_REACHED", "execution_error"),
    (errors.DuplicateToolError, 400, "VALIDATION_ERROR", "invalid_args"),
    (errors.RfbError, 500, "EXECUTION_ERROR", "execution_error"),
    (errors.NotResetError, 409, "NOT_RESET", "execution_error"),
])
def test_one_table_gives_every_boundary_its_form(cls, status, ws, tool_error):
    form = wire_form(_instance(cls))
    assert (form.http_status, form.ws_code, form.tool_error) == (status, ws, tool_error)


def test_no_stray_builtin_raises_outside_validators():
    """Library code raises the tree's errors; ValueError stays only where pydantic expects it (validators)
    and inside the interpreter's own read loop, where it never leaves the module."""
    allowed = {("hci_envs/actions/models.py", "ValueError"), ("hci_envs/tasks/spec.py", "ValueError"),
               ("hci_envs/tasks/checkers.py", "ValueError"),  # the task spec's check models: pydantic validators
               ("hci_envs/protocol.py", "ValueError"),  # the start state's validators (home_view)
               ("hci_envs/sandbox/interpreter.py", "ValueError"),
               ("hci_envs/errors.py", "TypeError")}  # two classes claiming one code: a bug at class definition
    found = []
    for path in [*ROOT.joinpath("hci_envs").rglob("*.py"), *ROOT.joinpath("recorders").glob("*.py"),
                 *ROOT.joinpath("traits").glob("*.py")]:
        rel = str(path.relative_to(ROOT))
        if rel == "traits/testing.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
                name = node.exc.func.id
                if name in ("ValueError", "KeyError", "RuntimeError", "TypeError") and (rel, name) not in allowed:
                    found.append(f"{rel}:{node.lineno} raise {name}")
    assert not found, found


# -- step items: one definition for step() and /schema ---------------------------------------------------------
GOOD_ITEMS = [
    {"type": "click", "x": 10, "y": 20},
    {"tool": "screen_size", "arguments": {}},
    {"type": "call_tool", "tool_name": "cursor_position", "arguments": {}},
    {"type": "list_tools"},
    {"code": "print(1)", "timeout": 5, "max_output": 100},
    [{"type": "wait", "ms": 1}, {"code": "print(2)"}],
]
BAD_ITEMS = [
    {"code": "print(1)", "timeout": 0},
    {"code": "print(1)", "max_output": 0},
    {"code": "print(1)", "colour": "red"},
    {"tool": "screen_size", "arguments": [1]},
    {"type": "call_tool", "tool_name": 3},
    {"type": "list_tools", "extra": 1},
    {"type": "click", "x": -1, "y": 2},
]


def test_schema_and_step_agree_on_every_step_item(fake_server):
    with fake_server.http() as http:
        schema = http.get("/schema").json()["action"]
        assert http.post("/reset", json={}).status_code == 200
        for item in GOOD_ITEMS:
            jsonschema.validate(item, schema)
            reply = http.post("/step", json={"action": item})
            assert reply.status_code == 200, (item, reply.text)
        for item in BAD_ITEMS:
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(item, schema)
            reply = http.post("/step", json={"action": item})
            assert reply.status_code == 422 and reply.json()["error"]["code"] == "VALIDATION_ERROR", (item, reply.text)


# -- MCP: the one renderer, arguments validated once, unknown arguments refused ---------------------------------
def test_mcp_refuses_unknown_arguments_and_lists_the_registrys_schemas(fake_server):
    from hci_envs.traits import WorkstationEnv

    with fake_server.http() as http:
        assert http.post("/reset", json={}).status_code == 200
    with McpClient(f"{fake_server.base_url}/mcp") as mcp:
        listed = {t.name: t for t in mcp.list_tools()}
        specs = WorkstationEnv.tool_specs()
        assert set(listed) == set(specs) - {"execute_code"}
        for name, listed_tool in listed.items():
            assert listed_tool.input_schema == specs[name].input_schema(), name
        refused = mcp.call("click", {"x": 10, "y": 10, "clicks": 2})
        assert refused.is_error and "clicks" in text_of(refused)
        assert refused.structured_content["error"] == {
            "code": "VALIDATION_ERROR", "message": text_of(refused), "field": "clicks"}
        off = mcp.call("click", {"x": 9000, "y": 10})
        assert off.is_error and off.structured_content["error"]["code"] == "VALIDATION_ERROR"
        unknown = mcp.call("teleport", {})
        assert unknown.is_error and unknown.structured_content["error"]["code"] == "UNKNOWN_TOOL"
        moved = mcp.ok("mouse_move", {"x": 7, "y": 8})
        assert moved.structured_content == {"x": 7, "y": 8}


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def test_mcp_header_check_skips_only_tools_that_declare_no_header(fake_server):
    """The SDK's Mcp-Param-* check gets a tool's schema only when the schema declares a header: for one that
    declares none, the check (a walk of the whole schema per call) accepts every request, as with None."""
    from hci_envs.server.mcp_bridge import header_schemas
    from hci_envs.traits import WorkstationEnv

    assert set(header_schemas(WorkstationEnv.tool_specs()).values()) == {None}

    class Declaring:
        schema = {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}

        def input_schema(self):
            return self.schema

    assert header_schemas({"t": Declaring()}) == {"t": Declaring.schema}
    # what the SDK does with a schema that declares nothing: a stray Mcp-Param header is not refused
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "screen_size", "arguments": {"x": 1}, "_meta": MODERN_META}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
               "mcp-method": "tools/call", "mcp-name": "screen_size", "mcp-param-x": "2"}
    reply = httpx.post(f"{fake_server.base_url}/mcp", json=call, headers=headers).json()
    assert reply["result"]["isError"] and reply["result"]["structuredContent"]["error"]["field"] == "x", reply


def test_mcp_spans_exist_only_where_tracing_is_set_up():
    """The SDK's span per request costs a tenth of a call in the server and is a no-op without a tracer
    provider: it is dropped then, and kept when one is set up, as ``opentelemetry-instrument`` does."""
    from hci_envs.server.mcp_bridge import build_mcp_server
    from hci_envs.traits import DesktopEnv

    assert build_mcp_server(DesktopEnv.tool_specs(), lambda request: None).middleware == []
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
           "OTEL_SERVICE_NAME": "hci-envs-test"}
    instrument = Path(sys.executable).with_name("opentelemetry-instrument")
    with ServerProcess("--desktop", "fake", prefix=[str(instrument)], env=env) as server:
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "screen_size", "arguments": {}, "_meta": MODERN_META}}
        headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28",
                   "mcp-method": "tools/call", "mcp-name": "screen_size"}
        reply = httpx.post(f"{server.base_url}/mcp", json=call, headers=headers).json()
        assert reply["result"]["structuredContent"] == {"width": 1280, "height": 800}, reply
        deadline = time.monotonic() + 10  # the console exporter writes a span as it ends
        while '"name": "tools/call screen_size"' not in "".join(server.output):
            assert time.monotonic() < deadline, "".join(server.output)[-3000:]
            time.sleep(0.05)


@pytest.mark.parametrize("version", ["2025-03-26", "2025-11-25", "2026-07-28"])
def test_mcp_results_take_each_protocol_versions_wire_form(fake_server, version):
    """Results reach the SDK as wire-form dicts; the SDK validates them once and sieves them per version."""
    params: dict = {"name": "screenshot", "arguments": {"format": "jpeg", "max_side": 64}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": version}
    if version == "2026-07-28":
        params["_meta"] = MODERN_META
        headers.update({"mcp-method": "tools/call", "mcp-name": "screenshot"})
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    result = httpx.post(f"{fake_server.base_url}/mcp", json=call, headers=headers).json()["result"]
    text, image = result["content"]
    assert text == {"type": "text", "text": "screenshot 64x40 jpeg, scale 0.05 (pass scale=0.05 with coordinates "
                                             "read off this image)"}
    assert set(image) == {"type", "data", "mimeType"} and image["mimeType"] == "image/jpeg"
    assert result["isError"] is False and result["structuredContent"]["width"] == 64
    assert ("resultType" in result) == (version == "2026-07-28")
    refused = {**call, "params": {**params, "name": "click", "arguments": {"x": -5, "y": 1}}}
    result = httpx.post(f"{fake_server.base_url}/mcp", json=refused,
                        headers={**headers, "mcp-name": "click"} if "mcp-name" in headers else headers).json()["result"]
    assert result["isError"] is True and result["structuredContent"]["error"]["code"] == "VALIDATION_ERROR"
    assert [c["type"] for c in result["content"]] == ["text"]


def test_action_tools_validate_their_arguments_once(monkeypatch):
    """An action tool's arguments become the action model once: neither the model built from the tool's
    parameters nor the executor's parse of a dict runs on that path (the executor only checks the screen)."""
    from hci_envs.traits import WorkstationEnv

    from hci_envs.actions import models

    seen = []
    monkeypatch.setattr(models, "_validate", lambda data: seen.append("executor parsed a dict") or None)
    with WorkstationEnv(desktop="fake", isolation="none") as env:
        env.reset()
        spec = env.tools()["click"]
        monkeypatch.setattr(spec.arguments_model, "model_validate",
                            classmethod(lambda cls, *a, **k: seen.append("parameters model") or None))
        assert env.call_tool("click", {"x": 5, "y": 6}).data == {"x": 5, "y": 6}
        moved = env.call_tool("mouse_move", {"x": 7, "y": 8, "settle": True}).data
        assert {k: moved[k] for k in ("x", "y", "settled")} == {"x": 7, "y": 8, "settled": True}
    assert seen == []


# -- the lock ------------------------------------------------------------------------------------------------
class LockProbe(Environment):
    """A tool that notes whether it ran while a reset was rebuilding the desktop."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rebuilding = False
        self.overlaps = 0
        self.calls = 0

    @tool(read_only=True)
    def probe(self) -> ToolOutput:
        """Note an overlap with a reset."""
        self.calls += 1
        if self.rebuilding:
            self.overlaps += 1
        time.sleep(0.002)
        return ToolOutput(text="ok")

    def _rebuild(self, **kwargs):
        self.rebuilding = True
        try:
            time.sleep(0.05)
            return super()._rebuild(**kwargs)
        finally:
            self.rebuilding = False


def test_tool_calls_never_overlap_a_reset():
    with LockProbe(desktop="fake", isolation="none") as env:
        env.reset()
        stop = threading.Event()
        refused = []

        def caller() -> None:
            while not stop.is_set():
                try:
                    env.call_tool("probe", {})
                except HciEnvsError as exc:
                    refused.append(exc.code)

        threads = [threading.Thread(target=caller) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            for _ in range(8):
                before = env.calls
                deadline = time.monotonic() + 10
                while env.calls < before + 3 and time.monotonic() < deadline:
                    time.sleep(0.005)  # calls run between resets (and wait for them)
                env.mark_touched()
                env.reset()
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert env.calls >= 24 and env.overlaps == 0, (env.calls, env.overlaps)


# -- imports -------------------------------------------------------------------------------------------------
def test_the_light_client_imports_no_server():
    script = (
        "import sys\n"
        "import hci_envs, hci_envs.client, hci_envs.providers.docker, hci_envs.providers.local, hci_envs.cluster\n"
        "from hci_envs import HciEnvClient, AsyncHciEnvClient, LocalProvider, StartState\n"
        "heavy = sorted(m for m in sys.modules if m.startswith('hci_envs.server') or m.startswith('hci_envs.desktop')\n"
        "               or m.split('.')[0] in ('fastapi', 'starlette', 'uvicorn', 'mcp', 'numpy', 'mss', 'Xlib', 'ray'))\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
    assert hasattr(__import__("hci_envs").AsyncHciEnvClient, "from_docker_image")


def test_one_environment_loader_serves_every_caller():
    from hci_envs.errors import ConfigError
    from hci_envs.plugins import load_env_class
    from hci_envs.traits import WorkstationEnv

    assert load_env_class("workstation") is WorkstationEnv
    assert load_env_class("hci_envs.traits:WorkstationEnv") is WorkstationEnv
    with pytest.raises(ConfigError, match="no environment named 'nope'; installed: .*workstation"):
        load_env_class("nope")
    with pytest.raises(ConfigError, match="has no attribute"):
        load_env_class("hci_envs.traits:Nope")
    with pytest.raises(ConfigError, match="is not a class"):
        load_env_class("hci_envs.traits:__name__")
    for module in ("hci_envs/ops/cli.py", "hci_envs/ops/images.py", "recorders/replay.py", "hci_envs/tasks/world.py"):
        source = ROOT.joinpath(module).read_text()
        assert "def load_env_class" not in source and "entry_points(" not in source, module



def test_one_name_per_concept():
    """No two public classes of the package share a name (an environment's base, its shipped environments and
    the X display were DesktopEnvironment, DesktopEnv and Desktop beside the pool's Desktop), and the base's
    old name still works, with a warning."""
    # the same concept on both sides of the CodeAct sandbox: the worker cannot import the package
    same_concept = {"ToolCallError": {"hci_envs/sandbox/interpreter_worker.py", "hci_envs/trl.py"}}
    where: dict[str, set[str]] = {}
    for top in ("hci_envs", "traits", "recorders"):
        for path in sorted(ROOT.joinpath(top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    where.setdefault(node.name, set()).add(str(path.relative_to(ROOT)))
    shared = {name: files for name, files in where.items() if len(files) > 1 and same_concept.get(name) != files}
    assert not shared, shared
    import hci_envs
    import hci_envs.env

    with pytest.warns(DeprecationWarning, match="DesktopEnvironment is now hci_envs.Environment"):
        assert hci_envs.DesktopEnvironment is Environment
    with pytest.warns(DeprecationWarning):
        assert hci_envs.env.DesktopEnvironment is Environment
    with pytest.raises(AttributeError):
        hci_envs.env.NoSuchThing  # noqa: B018

# -- the fake desktop ------------------------------------------------------------------------------------------
def test_the_fake_desktop_keeps_the_environment_contract():
    from hci_envs.traits import WorkstationEnv

    with WorkstationEnv(desktop="fake", start_state={"width": 640, "height": 480}) as env:
        first = env.reset()
        assert (first.screenshot.width, first.screenshot.height) == (640, 480)
        clicked = env.step({"type": "click", "x": 100, "y": 100})
        assert clicked.screenshot.data != first.screenshot.data  # the action shows on the screen
        typed = env.step({"type": "type_text", "text": "héllo ✓ 日本"})
        assert env.desktop.typed == "héllo ✓ 日本" and typed.screenshot.data != clicked.screenshot.data
        assert env.step({"tool": "bash", "arguments": {"command": "echo $HOME"}}).data["stdout"].strip() == str(env.home)
        coded = env.step({"code": "print(cursor_position())"})
        assert coded.text.strip() == "{'x': 100, 'y': 100}"
        env.desktop.fail("Xvfb exited")
        truncated = env.step({"type": "wait", "ms": 1})
        assert truncated.truncated and truncated.truncated_reason == "Xvfb exited"
        again = env.reset()
        assert not again.done and env.state.step_count == 0 and env.desktop.typed == ""


def test_serve_desktop_fake_needs_no_x(fake_server):
    with fake_server.http() as http:
        assert http.post("/reset", json={}).status_code == 200
        assert http.get("/health").json()["desktop"]["status"] == "ok"
        state = http.get("/state").json()
        assert "vnc_url" not in state or state["vnc_url"] is None
    reply = httpx.get(f"{fake_server.base_url}/vnc/")
    assert reply.status_code == 404


# -- nesting too deep for the parser ---------------------------------------------------------------------------
def test_deeply_nested_json_is_a_parse_error_everywhere(fake_server):
    from websockets.sync.client import connect

    deep = "[" * 100_000
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25",
               "content-type": "application/json"}
    with fake_server.http() as http:
        reply = http.post("/mcp", content=deep, headers=headers)
        assert reply.status_code < 500 and reply.json()["error"]["code"] == -32700, reply.text
        nested = "[" * 900 + "]" * 900
        call = ('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "screen_size", '
                f'"arguments": {{"deep": {nested}}}}}}}')
        reply = http.post("/mcp", content=call, headers=headers)
        assert reply.status_code < 500, reply.text
        result = reply.json().get("result") or {}
        assert result.get("isError") or "error" in reply.json(), reply.text
        assert http.post("/step", content=deep, headers={"content-type": "application/json"}).status_code == 400
        assert http.get("/health").json()["status"] == "healthy"
    with connect(fake_server.base_url.replace("http://", "ws://") + "/ws", max_size=2**26) as ws:
        ws.send(deep)
        frame = json.loads(ws.recv(timeout=30))
        assert frame["type"] == "error" and frame["data"]["code"] == "INVALID_JSON"
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv(timeout=30))["type"] == "state"  # the socket carries on
