"""The env checker's named checks: each fails on an environment broken in its one way, saying so by name, and
every shipped environment passes them all.

Everything runs on the fake desktop (no X): the checks are about the contract, not the display; the shipped
environments on the real desktop are tests/test_conformance.py's.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import pytest

from hci_envs import Environment, ToolOutput, tool
from hci_envs.env.env_checker import (
    CHECKS,
    CLASS_CHECKS,
    RUNNING_CHECKS,
    Check,
    EnvCheckError,
    check_close,
    check_codeact_namespace,
    check_codeact_tools,
    check_env,
    check_environment_class,
    check_has_tools,
    check_list_tools,
    check_no_control_plane_tool,
    check_read_only_tools,
    check_reset,
    check_second_reset,
    check_step_count,
    check_tool_descriptions,
    check_tool_names,
    check_tool_schemas,
)
from hci_envs.errors import ActionError, DesktopError
from hci_envs.plugins import ENVIRONMENTS, load_all
from hci_envs.tools import ToolSpec
from hci_envs.traits import DesktopEnv, HumanComputerInterfaceable

pytestmark = pytest.mark.fake

#: The installed environments (the entry points), each once.
SHIPPED = sorted(set(load_all(ENVIRONMENTS)), key=lambda cls: cls.__name__)


# -- environments broken in one way each -------------------------------------------------------------------
class NotAnEnvironment(HumanComputerInterfaceable):
    """A trait mistaken for an environment: Environment is missing from its bases."""


class NoTools(DesktopEnv):
    """Every tool taken away."""

    @classmethod
    def tool_specs(cls) -> dict[str, ToolSpec]:
        return {}


class SpacedToolName(DesktopEnv):
    @tool(name="write note")
    def write_note(self) -> ToolOutput:
        """A name no Python function can have."""
        return ToolOutput("written")


class ControlPlaneTool(DesktopEnv):
    """Offers ``restore``: the class body cannot declare it (the registry refuses), so it slips it in past the
    registry, as a hand-made ``tool_specs`` could."""

    @classmethod
    def tool_specs(cls) -> dict[str, ToolSpec]:
        specs = super().tool_specs()
        # not read-only: check_read_only_tools would call it, and call_tool knows only the class's own registry
        return {**specs, "restore": dataclasses.replace(specs["screen_size"], name="restore", read_only=False)}


def _pong(env: Any) -> ToolOutput:
    return ToolOutput("pong")


class UndescribedTool(DesktopEnv):
    """A trait that builds its specs by hand and forgot the description."""

    __tool_specs__ = (ToolSpec(name="ping", description=" ", parameters=(), handler=_pong, read_only=True),)


class BareValueSpec(ToolSpec):
    """A spec whose arguments are one bare string, not an object of named parameters."""

    def input_schema(self) -> dict[str, Any]:
        return {"type": "string"}


class BareValueSchema(DesktopEnv):
    __tool_specs__ = (BareValueSpec(name="ping", description="Answers pong.", parameters=(), handler=_pong),)


class ResetReturnsDict(DesktopEnv):
    def reset(self, *args: Any, **kwargs: Any) -> Any:
        return super().reset(*args, **kwargs).model_dump()


class ResetLeavesAStep(DesktopEnv):
    """Its state starts every episode at step 1 (and still counts each step: only check_reset sees it)."""

    @property
    def state(self) -> Any:
        state = super().state
        return state.model_copy(update={"step_count": state.step_count + 1})


class HidesATool(DesktopEnv):
    """list_tools leaves out the last tool of the registry."""

    def step(self, action: Any, **kwargs: Any) -> Any:
        obs = super().step(action, **kwargs)
        if getattr(obs, "tools", None):
            obs.tools = obs.tools[:-1]
        return obs


class CountsNoStep(DesktopEnv):
    """Its state reports every episode at step 0, whatever ran."""

    @property
    def state(self) -> Any:
        return super().state.model_copy(update={"step_count": 0})


class FlakyLook(DesktopEnv):
    @tool(read_only=True)
    def flaky(self) -> ToolOutput:
        """Looks at nothing, and fails."""
        raise ActionError("broken on purpose")


class CodeReachesClose(DesktopEnv):
    """Hands CodeAct a ``close`` function (not one of the names the namespace check looks for, so only the
    tool check can catch it)."""

    def code_tools(self) -> dict[str, ToolSpec]:
        tools = super().code_tools()
        return {**tools, "close": dataclasses.replace(tools["screen_size"], name="close")}


class CodeSeesSnapshot(DesktopEnv):
    """Puts a helper named ``snapshot`` into CodeAct's namespace before the model's code (no tool of that name)."""

    def run_code(self, code: str, **kwargs: Any) -> Any:
        return super().run_code(f"snapshot = print\n{code}", **kwargs)


class KeepsEpisodeId(DesktopEnv):
    def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> Any:
        return super().reset(seed, episode_id="the-only-episode", **options)


class KeepsItsHome(DesktopEnv):
    """close() does nothing: the session's home stays (and nothing else on the fake desktop, where no process
    runs after a reset). The test closes it for real."""

    left_open: ClassVar[list[Environment]] = []

    def close(self) -> None:
        self.left_open.append(self)


class LeavesAProcess(KeepsItsHome):
    """Starts a helper with each episode, a process of the desktop that its close() leaves running."""

    def on_session_start(self, desktop: Any) -> None:
        super().on_session_start(desktop)
        desktop.spawn_agent("helper", ["sleep", "600"])


@dataclasses.dataclass(frozen=True)
class Broken:
    """``env`` fails ``check`` because of what ``reason`` matches; ``also`` are the checks its one fault
    necessarily fails too (after ``check``, in check_env's order)."""

    check: Check
    env: type
    reason: str
    also: tuple[Check, ...] = ()

    def __str__(self) -> str:
        return f"{self.check.__name__}-{self.env.__name__}"


BROKEN = [
    Broken(check_environment_class, NotAnEnvironment, "<class .*NotAnEnvironment'> is not an Environment subclass"),
    Broken(check_has_tools, NoTools, "it has no tools"),
    # CodeAct defines a function per tool: no function can be called "write note", so CodeAct's worker fails to
    # start and the namespace check cannot run (check_env stops there; check_close still runs).
    Broken(check_tool_names, SpacedToolName, "tool 'write note': the name is not a Python identifier",
           also=(check_codeact_namespace,)),
    # A tool in the registry is a tool CodeAct can call: the control-plane name reaches it too.
    Broken(check_no_control_plane_tool, ControlPlaneTool, "tool 'restore' is a control-plane name",
           also=(check_codeact_tools,)),
    Broken(check_tool_descriptions, UndescribedTool, "tool 'ping' has no description"),
    Broken(check_tool_schemas, BareValueSchema, "tool 'ping': the input schema is not an object"),
    Broken(check_reset, ResetReturnsDict, "reset\\(\\) returned dict, not an Observation"),
    Broken(check_reset, ResetLeavesAStep, "state after reset is off: .*step_count=1"),
    Broken(check_list_tools, HidesATool, "list_tools lists \\[.*\\], the registry has"),
    Broken(check_step_count, CountsNoStep, "a step did not count in state.step_count"),
    Broken(check_read_only_tools, FlakyLook, "read-only tool 'flaky' failed with no arguments: broken on purpose"),
    Broken(check_codeact_tools, CodeReachesClose, "the CodeAct namespace reaches \\['close'\\]"),
    Broken(check_codeact_namespace, CodeSeesSnapshot, "the CodeAct namespace is not clean: .*'snapshot'"),
    Broken(check_second_reset, KeepsEpisodeId, "a second reset kept the episode id"),
    Broken(check_close, KeepsItsHome, "the session's home directory was not removed at close\\(\\)"),
    Broken(check_close, LeavesAProcess, "processes left after close\\(\\): \\[\\d+"),
]


@pytest.fixture(autouse=True)
def _close_what_never_closes() -> Iterator[None]:
    yield
    while KeepsItsHome.left_open:
        Environment.close(KeepsItsHome.left_open.pop())


def assert_names_the_fault(exc: EnvCheckError, broken: Broken) -> None:
    """One problem of ``exc`` is ``broken``'s: its check's name, then its reason."""
    pattern = f"{broken.check.__name__}: {broken.reason}"
    assert any(re.match(pattern, p) for p in exc.problems), f"no problem matches {pattern!r}: {exc.problems}"


@contextmanager
def handed_to(check: Check, env_class: type) -> Iterator[Any]:
    """What check_env hands ``check``: the class for a class check; for the others, the started environment
    on the fake desktop after the running checks before ``check`` (which pass it)."""
    if check in CLASS_CHECKS:
        yield env_class
        return
    env = env_class(desktop="fake")
    try:
        env.reset()
        for earlier in RUNNING_CHECKS[:RUNNING_CHECKS.index(check)] if check in RUNNING_CHECKS else RUNNING_CHECKS:
            earlier(env)
        yield env
    finally:
        Environment.close(env)  # KeepsItsHome's own close() would leave it open


# -- each check, alone ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("broken", BROKEN, ids=str)
def test_the_check_named_fails_on_its_broken_environment(broken):
    with handed_to(broken.check, broken.env) as subject:
        with pytest.raises(EnvCheckError) as raised:
            broken.check(subject)
    assert raised.value.details["checks"] == [broken.check.__name__]
    assert_names_the_fault(raised.value, broken)
    assert broken.check.__name__ in str(raised.value)


@pytest.mark.parametrize("broken", BROKEN, ids=str)
def test_check_env_fails_on_the_broken_environment_by_that_check_only(broken):
    with pytest.raises(EnvCheckError) as raised:
        check_env(broken.env, desktop="fake")
    names = [c.__name__ for c in (broken.check, *broken.also)]
    assert raised.value.details["checks"] == names, raised.value.problems
    assert_names_the_fault(raised.value, broken)


def test_every_check_has_a_broken_environment():
    assert {b.check for b in BROKEN} == set(CHECKS)


class CannotStart(DesktopEnv):
    def reset(self, *args: Any, **kwargs: Any) -> Any:
        raise DesktopError("no display")


def test_check_env_reports_an_environment_that_cannot_start():
    with pytest.raises(EnvCheckError) as raised:
        check_env(CannotStart, desktop="fake")
    # no running check ran, and the environment's own error is the cause (its traceback with the report)
    assert raised.value.problems == ["reset: running it failed: DesktopError: no display"]
    assert raised.value.details["checks"] == [] and isinstance(raised.value.__cause__, DesktopError)


class ThreeFaults(FlakyLook, KeepsEpisodeId, KeepsItsHome):
    pass


class CrashesThenKeepsEpisodeId(SpacedToolName, KeepsEpisodeId, KeepsItsHome):
    pass


@pytest.mark.parametrize("env_class,failed", [
    # every fault found, in the order of CHECKS
    (ThreeFaults, ["check_read_only_tools", "check_second_reset", "check_close"]),
    # CodeAct's worker crashes: the running checks stop there (the second reset is not tried), close still runs
    (CrashesThenKeepsEpisodeId, ["check_tool_names", "check_codeact_namespace", "check_close"]),
], ids=["ThreeFaults", "CrashesThenKeepsEpisodeId"])
def test_check_env_lists_every_failed_check_in_order_and_stops_at_a_crash(env_class, failed):
    with pytest.raises(EnvCheckError) as raised:
        check_env(env_class, desktop="fake")
    assert raised.value.details["checks"] == failed, raised.value.problems
    assert [p.split(":")[0] for p in raised.value.problems] == failed


# -- the shipped environments --------------------------------------------------------------------------------
@pytest.mark.parametrize("env_class", SHIPPED, ids=lambda cls: cls.__name__)
def test_shipped_environments_pass_every_check_one_by_one(env_class):
    env = env_class(desktop="fake")
    try:
        env.reset()
        for check in CHECKS:
            check(env)
        assert env.closed
    finally:
        env.close()


@pytest.mark.parametrize("env_class", SHIPPED, ids=lambda cls: cls.__name__)
def test_shipped_environments_pass_check_env(env_class):
    summary = check_env(env_class, desktop="fake")
    assert summary["ok"] and summary["tools"] == sorted(env_class.tool_specs())
