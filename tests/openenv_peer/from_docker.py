"""OpenEnv's own from_docker_image, with our image and our Docker provider as its container provider: tokens
stay on (the provider hands OpenEnv a base URL whose path carries the control token). Runs in OpenEnv's
environment, where the light client with the docker extra is installed beside it. Prints one JSON document.

    python from_docker.py IMAGE
"""

import asyncio
import json
import sys

import httpx
import websockets.sync.client as ws_client
from openenv.core import GenericEnvClient
from openenv.core.containers.runtime.providers import ContainerProvider
from openenv.core.env_client import _required_start_container_parameters
from openenv.core.mcp_client import MCPToolClient

from hci_envs.providers import DockerProvider

image = sys.argv[1]
out: dict = {}


def refused_without_token(base_url: str) -> dict:
    """What the container answers to requests that carry no token, or a wrong one in the path."""
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
    seen = {}
    for name, prefix in (("none", ""), ("wrong", "/t/not-the-token")):
        codes = [httpx.post(f"{base_url}{prefix}/reset", json={}).status_code,
                 httpx.get(f"{base_url}{prefix}/state").status_code,
                 httpx.post(f"{base_url}{prefix}/mcp", json=rpc).status_code]
        try:
            with ws_client.connect(base_url.replace("http://", "ws://") + prefix + "/ws") as ws:
                ws.send(json.dumps({"type": "reset", "data": {}}))
                reply = ws.recv(timeout=30)
                codes.append("UNAUTHORIZED" if "UNAUTHORIZED" in reply else f"answered: {reply[:80]}")
        except Exception as exc:  # noqa: BLE001 - refused at the handshake, or closed at once
            codes.append(type(exc).__name__)
        seen[name] = codes
    return seen


# the interface OpenEnv's code calls: every abstract method of its ContainerProvider, and a start_container()
# that needs no argument (EnvClient(provider=...) starts the provider with none)
out["interface"] = {"missing": sorted(m for m in ContainerProvider.__abstractmethods__ if not hasattr(DockerProvider, m)),
                    "required": _required_start_container_parameters(DockerProvider(image))}

provider = DockerProvider()
with GenericEnvClient.from_docker_image(image, provider=provider).sync() as env:
    result = env.reset()
    clicked = env.step({"type": "click", "x": 90, "y": 50})
    out["generic"] = {"width": result.observation["screenshot"]["width"],
                      "clicked": clicked.observation["text"].startswith("clicked"),
                      "container": provider.container.name,
                      "url_carries_token": env.base_url == f"{provider.base_url}/t/{provider.control_token}"}
    out["refused"] = refused_without_token(provider.base_url)
out["generic"]["removed"] = provider.container is None


async def mcp_tool_client() -> dict:
    mcp_provider = DockerProvider()
    env = await MCPToolClient.from_docker_image(image, provider=mcp_provider)
    try:
        seen = {"container": mcp_provider.container.name, "session": env._production_session_id}
        seen["tools"] = sorted(t.name for t in await env.list_tools())
        seen["screen_size"] = await env.call_tool("screen_size")
        await env.call_tool("mouse_move", x=12, y=34)
        seen["cursor"] = await env.call_tool("cursor_position")
        seen["reset_done"] = (await env.reset()).done
    finally:
        await env.close()
    seen["removed"] = mcp_provider.container is None
    return seen


out["mcp"] = asyncio.run(mcp_tool_client())
print(json.dumps(out))
