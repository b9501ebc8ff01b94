"""``check_env``: does an environment class keep the contract? For environment authors, and run in CI on every
environment this project ships.

    from hci_envs.checks import check_env
    report = check_env(MyEnv)          # raises EnvCheckError listing every problem found

It checks the tool registry (names, descriptions, schemas, no control-plane tool), then runs the class:
reset and step shapes, state, the OpenEnv list_tools action, every read-only tool, the CodeAct namespace
(no reset, state or snapshot in reach of the model), a second reset, and a clean shutdown with no process
left behind.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from .errors import EnvCheckError, HciEnvsError
from .protocol import EnvState, Observation
from .tools import CONTROL_PLANE_NAMES


def contract_error(env_class: type, problems: list[str]) -> EnvCheckError:
    lines = "\n".join(f"  - {p}" for p in problems)
    return EnvCheckError(f"{env_class.__name__} does not keep the environment contract:\n{lines}",
                         problems=problems)


def check_registry(env_class: type) -> list[str]:
    from .env import Environment

    problems = []
    if not (isinstance(env_class, type) and issubclass(env_class, Environment)):
        return [f"{env_class!r} is not an Environment subclass"]
    specs = env_class.tool_specs()
    if not specs:
        problems.append("it has no tools")
    for name, spec in specs.items():
        if not name.isidentifier():
            problems.append(f"tool {name!r}: the name is not a Python identifier (CodeAct calls it as a function)")
        if name in CONTROL_PLANE_NAMES:
            problems.append(f"tool {name!r} is a control-plane name the model must not reach")
        if not spec.description.strip():
            problems.append(f"tool {name!r} has no description")
        try:
            schema = spec.input_schema()
            json.dumps(schema)
            if schema.get("type") != "object":
                problems.append(f"tool {name!r}: the input schema is not an object")
        except Exception as exc:
            problems.append(f"tool {name!r}: no JSON schema for its parameters ({exc})")
    return problems


def process_alive(pid: int) -> bool:
    """The process exists and is not a zombie (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def check_env(env_class: type, *, start_state: Any = None, **env_kwargs: Any) -> dict[str, Any]:
    """Check ``env_class``; returns a summary, or raises :class:`EnvCheckError` with every problem found."""
    problems = check_registry(env_class)
    if problems and problems[0].endswith("not an Environment subclass"):
        raise contract_error(env_class, problems)
    summary: dict[str, Any] = {"env": env_class.__name__, "tools": sorted(env_class.tool_specs())}
    env = env_class(start_state=start_state, **env_kwargs)
    pids: list[int] = []
    try:
        started = time.monotonic()
        obs = env.reset()
        summary["reset_seconds"] = round(time.monotonic() - started, 3)
        if not isinstance(obs, Observation):
            problems.append(f"reset() returned {type(obs).__name__}, not an Observation")
        elif obs.done or obs.truncated:
            problems.append(f"reset() returned a finished episode ({obs.truncated_reason})")
        elif obs.screenshot is not None and (obs.screenshot.width, obs.screenshot.height) != (
                env.declared_state.width, env.declared_state.height):
            problems.append("the reset observation's screenshot is not the declared screen size")
        state = env.state
        if not isinstance(state, EnvState) or not state.episode_id or state.step_count != 0:
            problems.append(f"state after reset is off: {state!r}")
        listed = env.step({"type": "list_tools"})
        names = {t["name"] for t in getattr(listed, "tools", None) or []}
        if names != set(env.tools()):
            problems.append(f"list_tools lists {sorted(names)}, the registry has {sorted(env.tools())}")
        if env.state.step_count != 1:
            problems.append("a step did not count in state.step_count")
        for name, spec in env.tools().items():
            if not spec.read_only:
                continue
            try:
                env.call_tool(name, {})
            except HciEnvsError as exc:
                problems.append(f"read-only tool {name!r} failed with no arguments: {exc.message}")
        reachable = env.code_tools()
        leaked = CONTROL_PLANE_NAMES & set(reachable)
        if leaked:
            problems.append(f"the CodeAct namespace reaches {sorted(leaked)}")
        result = env.run_code("print(sorted(n for n in dir() if n in {'reset', 'state', 'snapshot', 'step'}))")
        if result.error or result.stdout.strip() != "[]":
            problems.append(f"the CodeAct namespace is not clean: {result.text()!r}")
        first = env.state.episode_id
        env.reset()
        if env.state.episode_id == first:
            problems.append("a second reset kept the episode id")
        pids = env.desktop.processes.pids() if env.desktop is not None else []
    except HciEnvsError as exc:
        problems.append(f"running it failed: {type(exc).__name__}: {exc.message}")
    finally:
        env.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(process_alive(p) for p in pids):
        time.sleep(0.05)
    left = [p for p in pids if process_alive(p)]
    if left:
        problems.append(f"processes left after close(): {left}")
    if env.home.exists() if hasattr(env, "home") else False:
        problems.append("the session's home directory was not removed at close()")
    if problems:
        raise contract_error(env_class, problems)
    summary["ok"] = True
    summary["pid"] = os.getpid()
    return summary
