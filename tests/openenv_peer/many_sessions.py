"""Several GenericEnvClient sessions at once (as TRL's num_generations opens them). Prints JSON."""

import json
import sys
from concurrent.futures import ThreadPoolExecutor

from openenv.core import GenericEnvClient

base_url, n = sys.argv[1], int(sys.argv[2])


def one(i: int) -> dict:
    with GenericEnvClient(base_url=base_url).sync() as env:
        env.reset()
        env.step({"type": "mouse_move", "x": 10 + i, "y": 20 + i})
        result = env.step({"tool": "cursor_position", "arguments": {}})
        state = env.state()
        return {"cursor": result.observation["data"], "session": state["session_id"]}


with ThreadPoolExecutor(n) as pool:
    print(json.dumps(list(pool.map(one, range(n)))))
