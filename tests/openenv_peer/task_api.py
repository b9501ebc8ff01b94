"""Runs under OpenEnv's own environment, as a trainer that enumerates tasks would: the task API's routes with
OpenEnv's own request messages, then GenericEnvClient resetting into tasks by position (over its WebSocket).
Prints one JSON document with what it saw.

    python task_api.py BASE_URL
"""

import json
import sys
import urllib.error
import urllib.request

from openenv.core import GenericEnvClient
from openenv.core.env_server.types import GetTaskRangeRequest, GetTaskRequest, ListTasksRequest, NumTasksRequest

base_url = sys.argv[1]


def call(path, message=None):
    data = None if message is None else json.dumps(message.model_dump()).encode()
    request = urllib.request.Request(base_url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


out = {}
name = call("/list_environments")[1][0]
out["name"] = name
out["splits"] = call(f"/{name}/splits")[1]
out["num_all"] = call(f"/{name}/num_tasks", NumTasksRequest(split="all"))[1]["num_tasks"]
out["tasks"] = call(f"/{name}/tasks", ListTasksRequest(split="all"))[1]["tasks"]
out["task"] = call(f"/{name}/task", GetTaskRequest(split="all", index=1))[1]["task"]
out["range"] = call(f"/{name}/task_range", GetTaskRangeRequest(split="all", start=1, stop=3))[1]["tasks"]
out["out_of_range"] = call(f"/{name}/task", GetTaskRequest(split="all", index=10_000))
out["unknown_split"] = call(f"/{name}/num_tasks", NumTasksRequest(split="nope"))[0]
out["unknown_env"] = call("/someone-else/splits")[0]
with GenericEnvClient(base_url=base_url).sync() as env:
    out["reset"] = [env.reset(split="all", index=n).observation["metadata"]["task"]["id"] for n in (1, 0)]
    try:
        env.reset(split="all", index=10_000)
        out["bad_reset"] = "accepted"
    except Exception as exc:  # GenericEnvClient raises RuntimeError on error frames
        out["bad_reset"] = str(exc)
    out["after_bad_reset"] = env.reset(split="all", index=2).observation["metadata"]["task"]["id"]
print(json.dumps(out))
