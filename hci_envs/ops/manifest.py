"""OpenEnv's manifest (``openenv.yaml``) of what an installation serves: its Environment Card (``discovery:``)
and what OpenEnv's validator grades it on (``validation:``), made from the environment class's tools and the task
catalog a server of it would serve, so that the file cannot drift from the code.

    hci-envs manifest [--env NAME] [--tasks SOURCE] [--image KIND]   # the YAML, on stdout

The repository's ``openenv.yaml`` is this command's output for the default server (a test keeps them equal); every
image writes its own at build time (``/opt/hci-envs/openenv.yaml``), for its environment and task catalog.
``hci_envs.ops.openenv_check`` runs OpenEnv's validator over the repository and over each image.
"""

from __future__ import annotations

import json
import os
from typing import Any

#: Where an image keeps its manifest.
IMAGE_MANIFEST = "/opt/hci-envs/openenv.yaml"
#: What the validator's runtime level runs (package-relative): the probe episode and the image to run it on.
PROBE_PATH = "images/openenv/runtime.json"
DOCKERFILE = "images/openenv/Dockerfile"
#: The suite's scripted oracles, the verifier (a task's checker, asked on the control plane) and the canaries
#: (tasks whose trivial answers must score 0).
ORACLE = "hci_envs/tasks/oracles.py"
VERIFIER = "hci_envs/tasks/checkers.py"
CANARIES = "images/openenv/canaries.json"

#: Resources one desktop takes, per image kind: a CPU, and memory and disk with room above what
#: ``bench/bench_docker.py`` measures idle (a desktop and the server) for the apps the kind starts
#: (LibreOffice, chromium and GIMP take hundreds of MiB each once open).
RESOURCES = {
    "base": {"cpu": 1, "memory_mb": 1024, "disk_mb": 1024},
    "editor": {"cpu": 1, "memory_mb": 1024, "disk_mb": 1024},
    "apps": {"cpu": 1, "memory_mb": 4096, "disk_mb": 2048},
    "osworld": {"cpu": 1, "memory_mb": 4096, "disk_mb": 2048},
}
DESCRIPTION = ("A virtual X desktop whose screen, keyboard and mouse are MCP tools: agents see screenshots and "
               "the accessibility tree and act with clicks, keys and text; people watch and take over over VNC; "
               "tasks are scored by checkers on the control plane, which the agent cannot reach. The agent's "
               "programs reach no network by default (policy none: their own listeners only; an allowlist or "
               "open on request), enforced by the kernel per agent account.")
QUERIES = ["fill in a web form in a desktop app", "edit a spreadsheet in LibreOffice Calc",
           "computer-use agent environment with screenshots and mouse", "OSWorld tasks without a virtual machine"]
TAGS = ["computer-use", "desktop", "gui", "mcp", "x11"]


def manifest(*, env: str | None = None, tasks: str | None = None, image: str = "base") -> dict[str, Any]:
    """The manifest of a server of ``env`` (default: HCI_ENVS_ENV, else the serve default) serving the catalog
    ``tasks`` (default: HCI_ENVS_TASKS, else the built-in suite), in an image of kind ``image``."""
    from .. import __version__, plugins
    from ..tasks.catalog import TaskSuite

    if image not in RESOURCES:
        from ..errors import ConfigError

        raise ConfigError(f"image must be one of {', '.join(RESOURCES)}, not {image!r}", field="image")
    env = env or os.environ.get("HCI_ENVS_ENV") or plugins.DEFAULT_ENV
    tasks = tasks if tasks is not None else os.environ.get("HCI_ENVS_TASKS")
    tools = sorted(plugins.load_env_class(env).tool_specs())
    catalog = TaskSuite(tasks)
    splits = {split.name: split.size for split in catalog.splits().splits()}
    longest = max((task.time_limit for task in catalog.tasks().values()), default=300.0)
    return {
        "spec_version": 1,
        "name": "hci-envs",
        "version": __version__,
        "type": "space",
        "runtime": "fastapi",
        "port": 8000,
        "discovery": {
            "description": DESCRIPTION,
            "tags": TAGS,
            "representative_queries": QUERIES,
            "license": "Apache-2.0",
            "environment": env,
            "agent_tools": tools,
        },
        "validation": {
            # The suite's oracles score 1 on every task and doing nothing scores 0 (tests/test_suite.py,
            # tests/test_tasks.py): no tolerance below the top, and the whole range between floor and top.
            "reward": {"range": [0.0, 1.0], "oracle_tolerance": 0.0, "floor_margin": 0.9},
            "resources": {**RESOURCES[image], "episode_timeout_s": int(longest)},
            # The server's own posture, which the validator's providers enforce on the container: public (its
            # no-network mode needs a helper image from a registry). The agents' programs inside have a policy
            # of their own, none by default (hci_envs.sandbox.network), said in the description and /metadata.
            "network": {"mode": "public"},
            "task_distribution": {"dataset_version": __version__},
            "capabilities": {
                "oracle": {"form": "script", "location": ORACLE},
                # The reward is the task's checker, asked for on the control plane (POST /score, or TRL's
                # get_reward): never in a step, which the agent's side could read.
                "verifier": {"kind": "script", "entry": VERIFIER},
                "task_api": True,
                "canaries": CANARIES,
                "declared_tools": tools,
                "declared_task_count": splits,
            },
            "types": {"tags": TAGS},
            "execution": {"kind": "openenv_ws", "probe_path": PROBE_PATH, "dockerfile": DOCKERFILE,
                          "context": "images/openenv", "agent_boundary": "api", "requires_credentials": False},
        },
    }


def to_yaml(value: Any, indent: int = 0) -> str:
    """``value`` (dicts, lists, strings, numbers, booleans) as block YAML; strings as JSON's double-quoted
    scalars, which YAML reads as they are."""
    pad = "  " * indent
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, dict) and item or isinstance(item, list) and not _flow(item):
                lines.append(f"{pad}{key}:\n{to_yaml(item, indent + 1)}")
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}")
        return "\n".join(lines)
    if isinstance(value, list):
        return "\n".join(f"{pad}- {_scalar(item)}" for item in value)
    return f"{pad}{_scalar(value)}"


def _flow(items: list[Any]) -> bool:
    """Short lists of scalars go on their key's line."""
    return all(not isinstance(item, dict | list) for item in items) and len(json.dumps(items)) <= 80


def _scalar(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(item) for item in value) + "]"
    return json.dumps(value)  # JSON's true, false, numbers and quoted strings are YAML's too


def text(**options: Any) -> str:
    return ("# OpenEnv's manifest of hci-envs, written by `hci-envs manifest` (hci_envs/ops/manifest.py): edit that,\n"
            "# not this file.\n" + to_yaml(manifest(**options)) + "\n")
