"""OpenEnv's GenericEnvClient against a container that requires a control token (sent as a header)."""

import json
import sys

from openenv.core import GenericEnvClient

base_url, token = sys.argv[1], sys.argv[2]
with GenericEnvClient(base_url=base_url, headers={"Authorization": f"Bearer {token}"}).sync() as env:
    result = env.reset()
    env.step({"type": "mouse_move", "x": 3, "y": 4})
    print(json.dumps({"screenshot_width": result.observation["screenshot"]["width"]}))
