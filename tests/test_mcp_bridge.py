"""The MCP path, room by room: the body is read by the SDK alone unless it could be OpenEnv's (or no JSON-RPC
at all), and the tool is looked up once, by the MCP server, which hands the spec to the environment."""

from __future__ import annotations

import json

import pytest
from mcp_types import CallToolRequest, CallToolRequestParams

from hci_envs.server.app import _needs_routing

pytestmark = pytest.mark.fake


def _sdk_body(name: str, arguments: dict) -> bytes:
    """A tools/call as the official SDK writes it."""
    request = CallToolRequest(params=CallToolRequestParams(name=name, arguments=arguments))
    return json.dumps({"jsonrpc": "2.0", "id": 1, **request.model_dump(mode="json", by_alias=True,
                                                                       exclude_none=True)},
                      ensure_ascii=False).encode()


def test_the_sdks_own_calls_are_parsed_by_the_sdk_alone():
    assert not _needs_routing(_sdk_body("click", {"x": 10, "y": 20}))
    assert not _needs_routing(_sdk_body("type_text", {"text": "héllo ✓ 你好"}))


@pytest.mark.parametrize("body", [
    b'{"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}',
    b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"session_id": "s", "name": "wait"}}',
    b"{}",
    b"not json",
    # the same method, spelled with an escape: read too, so OpenEnv's routing cannot be dodged
    b'{"jsonrpc": "2.0", "id": 3, "method": "openenv\\u002fsession/create"}',
])
def test_what_the_endpoint_must_route_itself_is_read_first(body):
    assert _needs_routing(body)


def test_an_mcp_call_runs_the_spec_it_looked_up(monkeypatch):
    """The environment is handed the spec: ``call_tool`` (the lookup by name) is not on the MCP path."""
    import anyio

    from hci_envs.server.mcp_bridge import build_mcp_server
    from hci_envs.traits import DesktopEnv

    env = DesktopEnv(desktop="fake", start_state={"width": 320, "height": 240})
    try:
        env.reset()

        def no_lookup(*args, **kwargs):
            raise AssertionError("the MCP path looked the tool up by name again")

        monkeypatch.setattr(env, "call_tool", no_lookup)

        class Session:
            def __init__(self):
                self.env = env

            async def run_sync(self, fn, *args, **kwargs):
                return fn(*args, **kwargs)

        session = Session()
        server = build_mcp_server(DesktopEnv.tool_specs(), lambda request: session)

        class Ctx:
            request = None

        params = CallToolRequestParams(name="click", arguments={"x": 5, "y": 6})
        handler = server._request_handlers["tools/call"].handler  # the SDK's table of handlers
        result = anyio.run(handler, Ctx(), params)
        assert result["isError"] is False, result
        assert env.desktop.input.pointer() == (5, 6)  # the click reached the desktop's input
    finally:
        env.close()
