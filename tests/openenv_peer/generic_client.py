"""Runs under OpenEnv's own environment (its pinned mcp), as a trainer would: GenericEnvClient against our
server. Prints one JSON document with what it saw.

    python generic_client.py BASE_URL
"""

import base64
import json
import sys

from openenv.core import GenericEnvClient

base_url = sys.argv[1]
out = {}
with GenericEnvClient(base_url=base_url).sync() as env:
    result = env.reset(seed=3)
    shot = result.observation["screenshot"]
    out["reset"] = {"done": result.done, "width": shot["width"], "height": shot["height"],
                    "png": base64.b64decode(shot["data"])[:8] == b"\x89PNG\r\n\x1a\n"}
    result = env.step({"type": "click", "x": 640, "y": 400})
    out["click"] = {"done": result.done, "text": result.observation["text"]}
    result = env.step({"type": "list_tools"})
    out["tools"] = sorted(t["name"] for t in result.observation["tools"])
    result = env.step({"type": "call_tool", "tool_name": "screenshot", "arguments": {"format": "jpeg"}})
    content = result.observation["result"]["content"]
    image = next(c for c in content if c["type"] == "image")
    data = base64.b64decode(image["data"])
    out["call_tool_image"] = {"mime": image["mimeType"], "jpeg": data[:2] == b"\xff\xd8", "bytes": len(data),
                              "structured": result.observation["result"]["structured_content"]}
    result = env.step({"type": "call_tool", "tool_name": "no_such_tool", "arguments": {}})
    out["unknown_tool_error"] = result.observation["error"]
    state = env.state()
    out["state"] = {"step_count": state["step_count"], "episode_id": state["episode_id"], "mcp_url": state["mcp_url"]}
    try:
        env.step({"type": "click", "x": 9999, "y": 1})
        out["bad_action"] = "accepted"
    except Exception as exc:  # GenericEnvClient raises RuntimeError on error frames
        out["bad_action"] = str(exc)
print(json.dumps(out))
