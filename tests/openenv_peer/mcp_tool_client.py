"""Runs under OpenEnv's own environment: its MCPToolClient (production mode: a session made over HTTP /mcp
with openenv/session/create, tools over /mcp, reset and step over /ws?session_id=) against our server, then
its MCP WebSocket. Prints one JSON document with what it saw.

    python mcp_tool_client.py BASE_URL [CONTROL_TOKEN]
"""

import asyncio
import json
import sys

import websockets
from openenv.core.mcp_client import MCPToolClient

base_url = sys.argv[1]
headers = {"Authorization": f"Bearer {sys.argv[2]}"} if len(sys.argv) > 2 else None


async def main() -> dict:
    out: dict = {}
    async with MCPToolClient(base_url=base_url, headers=headers) as env:
        out["session"] = env._production_session_id
        tools = await env.list_tools()
        out["tools"] = sorted(t.name for t in tools)
        out["screen_size"] = await env.call_tool("screen_size")
        await env.call_tool("mouse_move", x=11, y=22)
        out["cursor"] = await env.call_tool("cursor_position")
        try:  # a tool error is the tool's result (MCP's isError), with our error as its data
            out["unknown_argument"] = await env.call_tool("click", x=10, y=10, clicks=2)
        except RuntimeError as exc:
            out["unknown_argument"] = str(exc)
        result = await env.reset()
        out["reset_done"] = result.done
        state = await env.state()
        out["state_episode"] = state.episode_id
    ws_url = base_url.replace("http://", "ws://") + "/mcp"
    async with websockets.connect(ws_url, additional_headers=headers or {}) as ws:
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}))
        listed = json.loads(await ws.recv())
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                  "params": {"name": "screen_size", "arguments": {}}}))
        called = json.loads(await ws.recv())
        await ws.send("{not json")
        bad = json.loads(await ws.recv())
    out["ws_tools"] = len(listed["result"]["tools"])
    out["ws_screen_size"] = called["result"]["structured_content"]
    out["ws_bad"] = bad["error"]["code"]
    return out


print(json.dumps(asyncio.run(main())))
