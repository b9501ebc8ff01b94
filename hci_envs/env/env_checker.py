"""``check_env``: does an environment class keep the contract? For environment authors, and run in CI on every
environment this project ships.

    from hci_envs.env.env_checker import check_env
    report = check_env(MyEnv)          # raises EnvCheckError listing every problem found

``check_env`` is made of named checks, run in the order of :data:`CHECKS` (as Gymnasium's env checker is
made of ``check_reset_seed``, ``check_step_determinism``...). Each is public and checks one property; it
raises :class:`EnvCheckError` whose every problem starts with the check's name, or returns None:

* :data:`CLASS_CHECKS` take the class (or an instance): it is an Environment, it has tools, and each tool has
  a name CodeAct can call, is no control-plane name, has a description and a JSON schema;
* :data:`RUNNING_CHECKS` take a started environment (``env.reset()`` once): reset, the OpenEnv list_tools
  action, the step count, every read-only tool, the CodeAct tools and namespace (no reset, state or snapshot
  in reach of the model), a second reset;
* :func:`check_close` comes last: it closes the environment and finds no process and no home left behind.

To run them one by one::

    env = MyEnv(desktop="fake")
    env.reset()
    for check in CHECKS:
        check(env)
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import EnvCheckError, HciEnvsError
from ..protocol import EnvState, Observation
from ..tools.registry import CONTROL_PLANE_NAMES, ToolSpec

__all__ = ["CHECKS", "CLASS_CHECKS", "RUNNING_CHECKS", "EnvCheckError", "check_close", "check_codeact_namespace",
           "check_codeact_tools", "check_env", "check_environment_class", "check_has_tools", "check_list_tools",
           "check_no_control_plane_tool", "check_read_only_tools", "check_reset", "check_second_reset",
           "check_step_count", "check_tool_descriptions", "check_tool_names", "check_tool_schemas",
           "contract_check", "contract_error", "process_alive"]

#: A check: raises :class:`EnvCheckError` naming itself when its subject (a class or environment) fails it.
Check = Callable[[Any], None]


def _class_of(subject: Any) -> type:
    return subject if isinstance(subject, type) else type(subject)


def contract_error(subject: Any, problems: list[str], **details: Any) -> EnvCheckError:
    """The error listing ``problems`` of ``subject`` (an environment class or instance)."""
    lines = "\n".join(f"  - {p}" for p in problems)
    return EnvCheckError(f"{_class_of(subject).__name__} does not keep the environment contract:\n{lines}",
                         problems=problems, **details)


def _failure(exc: Exception) -> str:
    return f"running it failed: {type(exc).__name__}: {getattr(exc, 'message', exc)}"


def contract_check(func: Callable[..., Iterator[str]]) -> Check:
    """A named check made of ``func``, a generator of what is wrong with its subject. The check raises one
    :class:`EnvCheckError` with each problem prefixed by its name (``details["checks"]`` is ``[name]``).

    An exception while the check runs (the environment's error, or one it should never raise, such as its
    CodeAct worker dying on a tool name no function can have) fails the check too, marked ``crashed`` and
    chained as the error's cause: the environment is in no state to be checked further, and :func:`check_env`
    stops there (every later check would only repeat the failure)."""
    name = func.__name__

    @functools.wraps(func)
    def check(subject: Any, *args: Any, **kwargs: Any) -> None:
        problems: list[str] = []
        cause: Exception | None = None
        try:
            problems.extend(f"{name}: {p}" for p in func(subject, *args, **kwargs))
        except Exception as exc:
            problems.append(f"{name}: {_failure(exc)}")
            cause = exc
        if problems:
            raise contract_error(subject, problems, checks=[name], crashed=cause is not None) from cause

    return check


# -- the class: its registry of tools ----------------------------------------------------------------------
def _specs(env_or_class: Any) -> dict[str, ToolSpec]:
    return _class_of(env_or_class).tool_specs()


@contract_check
def check_environment_class(env_or_class: Any) -> Iterator[str]:
    """It is an :class:`~hci_envs.env.Environment` (a subclass, or an instance of one): the other checks read
    what the base provides."""
    from .environment import Environment

    if not issubclass(_class_of(env_or_class), Environment):
        yield f"{env_or_class!r} is not an Environment subclass"


@contract_check
def check_has_tools(env_or_class: Any) -> Iterator[str]:
    """It offers the model at least one tool."""
    if not _specs(env_or_class):
        yield "it has no tools"


@contract_check
def check_tool_names(env_or_class: Any) -> Iterator[str]:
    """Every tool's name is a Python identifier: CodeAct calls each tool as a function of that name."""
    for name in _specs(env_or_class):
        if not name.isidentifier():
            yield f"tool {name!r}: the name is not a Python identifier (CodeAct calls it as a function)"


@contract_check
def check_no_control_plane_tool(env_or_class: Any) -> Iterator[str]:
    """No tool is named after the control plane (reset, step, state, snapshot...): the model must not reach it."""
    for name in _specs(env_or_class):
        if name in CONTROL_PLANE_NAMES:
            yield f"tool {name!r} is a control-plane name the model must not reach"


@contract_check
def check_tool_descriptions(env_or_class: Any) -> Iterator[str]:
    """Every tool has a description: it is all the model reads to choose a tool."""
    for name, spec in _specs(env_or_class).items():
        if not spec.description.strip():
            yield f"tool {name!r} has no description"


@contract_check
def check_tool_schemas(env_or_class: Any) -> Iterator[str]:
    """Every tool's parameters have a JSON schema of an object (what MCP and list_tools serve)."""
    for name, spec in _specs(env_or_class).items():
        try:
            schema = spec.input_schema()
            json.dumps(schema)
        except Exception as exc:  # whatever the schema generator raises, the tool cannot be served
            yield f"tool {name!r}: no JSON schema for its parameters ({exc})"
            continue
        if schema.get("type") != "object":
            yield f"tool {name!r}: the input schema is not an object"


# -- a started environment ---------------------------------------------------------------------------------
@contract_check
def check_reset(env: Any) -> Iterator[str]:
    """``reset()`` starts a fresh episode: it returns an Observation of a running episode, its screenshot (if
    any) at the declared screen size, and the state shows a new episode at step 0."""
    obs = env.reset()
    if not isinstance(obs, Observation):
        yield f"reset() returned {type(obs).__name__}, not an Observation"
    elif obs.done or obs.truncated:
        yield f"reset() returned a finished episode ({obs.truncated_reason})"
    elif obs.screenshot is not None and (obs.screenshot.width, obs.screenshot.height) != (
            env.declared_state.width, env.declared_state.height):
        yield "the reset observation's screenshot is not the declared screen size"
    state = env.state
    if not isinstance(state, EnvState) or not state.episode_id or state.step_count != 0:
        yield f"state after reset is off: {state!r}"


@contract_check
def check_list_tools(env: Any) -> Iterator[str]:
    """OpenEnv's ``list_tools`` step lists exactly the tools of the registry."""
    listed = env.step({"type": "list_tools"})
    names = {t["name"] for t in getattr(listed, "tools", None) or []}
    if names != set(env.tools()):
        yield f"list_tools lists {sorted(names)}, the registry has {sorted(env.tools())}"


@contract_check
def check_step_count(env: Any) -> Iterator[str]:
    """A step counts in ``state.step_count`` (one list_tools step, which changes nothing else)."""
    before = env.state.step_count
    env.step({"type": "list_tools"})
    if env.state.step_count != before + 1:
        yield "a step did not count in state.step_count"


@contract_check
def check_read_only_tools(env: Any) -> Iterator[str]:
    """Every read-only tool runs with no arguments (the model may call it any time to look)."""
    for name, spec in env.tools().items():
        if not spec.read_only:
            continue
        try:
            env.call_tool(name, {})
        except HciEnvsError as exc:
            yield f"read-only tool {name!r} failed with no arguments: {exc.message}"


@contract_check
def check_codeact_tools(env: Any) -> Iterator[str]:
    """No tool CodeAct code can call is a control-plane name."""
    leaked = CONTROL_PLANE_NAMES & set(env.code_tools())
    if leaked:
        yield f"the CodeAct namespace reaches {sorted(leaked)}"


@contract_check
def check_codeact_namespace(env: Any) -> Iterator[str]:
    """CodeAct code sees no reset, state, snapshot or step in its namespace, whatever put them there."""
    result = env.run_code("print(sorted(n for n in dir() if n in {'reset', 'state', 'snapshot', 'step'}))")
    if result.error or result.stdout.strip() != "[]":
        yield f"the CodeAct namespace is not clean: {result.text()!r}"


@contract_check
def check_second_reset(env: Any) -> Iterator[str]:
    """Another reset starts another episode: a new episode id."""
    first = env.state.episode_id
    env.reset()
    if env.state.episode_id == first:
        yield "a second reset kept the episode id"


def process_alive(pid: int) -> bool:
    """The process exists and is not a zombie (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contract_check
def check_close(env: Any) -> Iterator[str]:
    """``close()`` leaves nothing behind: every process of the desktop ends (within 5 s) and the session's home
    directory is removed. It closes ``env``: run it last."""
    pids = env.desktop.processes.pids() if env.desktop is not None else []
    env.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(process_alive(p) for p in pids):
        time.sleep(0.05)
    left = [p for p in pids if process_alive(p)]
    if left:
        yield f"processes left after close(): {left}"
    home = getattr(env, "home", None)
    if home is not None and home.exists():
        yield "the session's home directory was not removed at close()"


#: The checks of the class (or of an instance): its tool registry.
CLASS_CHECKS: tuple[Check, ...] = (check_environment_class, check_has_tools, check_tool_names,
                                   check_no_control_plane_tool, check_tool_descriptions, check_tool_schemas)
#: The checks of a started environment, in order; :func:`check_close` follows them.
RUNNING_CHECKS: tuple[Check, ...] = (check_reset, check_list_tools, check_step_count, check_read_only_tools,
                                     check_codeact_tools, check_codeact_namespace, check_second_reset)
#: Every check, in the order :func:`check_env` runs them.
CHECKS: tuple[Check, ...] = (*CLASS_CHECKS, *RUNNING_CHECKS, check_close)


def check_env(env_class: type, *, start_state: Any = None, **env_kwargs: Any) -> dict[str, Any]:
    """Check ``env_class`` with every check of :data:`CHECKS` on an instance made with ``start_state`` and
    ``env_kwargs``; returns a summary, or raises :class:`EnvCheckError` with every problem found
    (``details["checks"]`` names the checks that failed)."""
    problems: list[str] = []
    failed: list[str] = []
    causes: list[BaseException] = []  # what the environment raised under a check: the first is the error's cause

    def run(check: Check, subject: Any) -> bool:
        """Run one check, keeping its problems; False when the environment failed under it."""
        try:
            check(subject)
        except EnvCheckError as exc:
            problems.extend(exc.problems)
            failed.append(check.__name__)
            if exc.__cause__ is not None:
                causes.append(exc.__cause__)
            return not exc.details.get("crashed")
        return True

    run(check_environment_class, env_class)
    if failed:  # nothing else can be read of something that is no environment
        raise contract_error(env_class, problems, checks=failed)
    for check in CLASS_CHECKS[1:]:
        run(check, env_class)
    summary: dict[str, Any] = {"env": env_class.__name__, "tools": sorted(env_class.tool_specs())}
    env = env_class(start_state=start_state, **env_kwargs)
    try:
        started = time.monotonic()
        env.reset()  # the start: the running checks need a started environment
        summary["reset_seconds"] = round(time.monotonic() - started, 3)
        for check in RUNNING_CHECKS:
            if not run(check, env):
                break
    except Exception as exc:  # the start failed: no running check can run
        problems.append(f"reset: {_failure(exc)}")
        causes.append(exc)
    finally:
        run(check_close, env)
    if problems:
        raise contract_error(env_class, problems, checks=failed) from (causes[0] if causes else None)
    summary["ok"] = True
    summary["pid"] = os.getpid()
    return summary
