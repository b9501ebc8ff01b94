"""The environment's own tools: discovery (``find_tools``, ``browse_tools``) and CodeAct (``execute_code``).

CodeAct code runs in a worker process of the agent (see :mod:`hci_envs.sandbox.interpreter`) in which every other
tool of the environment is a function; its tool calls come back here and run through ``call_tool`` like any
other. The worker lives for one episode.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from ..errors import ActionError, UnknownToolError
from ..sandbox.interpreter import DEFAULT_CODE_OUTPUT, DEFAULT_CODE_TIMEOUT, MAX_CODE_CHARS, MAX_CODE_OUTPUT, MAX_CODE_TIMEOUT
from .registry import ToolOutput, ToolSpec, in_mode, tool
from .trait import Trait

#: The tool that runs CodeAct code; CodeAct code itself cannot call it.
CODE_TOOL = "execute_code"
#: Tools of the environment itself (not of a trait): discovery and CodeAct.
BASE_TOOLS = ("find_tools", "browse_tools", CODE_TOOL)


class EnvironmentTools(Trait):
    """Discovery and CodeAct over the tools of the environment it is part of."""

    #: The folder ``browse_tools`` shows these tools in: they are the environment's own.
    trait_name = "Environment"

    @tool(read_only=True)
    def find_tools(
        self,
        query: Annotated[str, Field(description="Words to look for in tool names and descriptions; empty lists all.")] = "",
        detail: Annotated[Literal["names", "descriptions", "schemas"], Field(description="How much to say per tool.")] = "descriptions",
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
    ) -> ToolOutput:
        """Search this environment's tools by words of their names and descriptions. Use it instead of reading
        every tool's schema: names only, names with one-line descriptions, or full input schemas."""
        from .discovery import find_tools

        found = find_tools(self.tools(), query, detail, limit)
        lines = [f if isinstance(f, str) else f"{f['name']}: {f['description']}" for f in found]
        return ToolOutput(text="\n".join(lines) or "no tool matches", data={"tools": found})

    @tool(read_only=True)
    def browse_tools(
        self,
        path: Annotated[str, Field(description='"" for the folders (one per trait), "Folder" for its files, '
                                               '"Folder/tool.py" for one tool\'s signature and docs.')] = "",
    ) -> ToolOutput:
        """Browse the tools as a directory: a folder per trait, a Python stub file per tool."""
        from .discovery import browse_tools

        listing = browse_tools(self.tools(), path)
        text = listing.get("source") or "\n".join(listing["entries"])
        return ToolOutput(text=text, data=listing)

    @tool()
    def execute_code(
        self,
        code: Annotated[str, Field(description="Python. Every tool is a function already in scope (keyword "
                                               "arguments); print what you want to see.", max_length=MAX_CODE_CHARS)],
        timeout: Annotated[float, Field(gt=0, le=MAX_CODE_TIMEOUT,
                                        description="Seconds before the code is interrupted.")] = DEFAULT_CODE_TIMEOUT,
        max_output: Annotated[int, Field(ge=1, le=MAX_CODE_OUTPUT,
                                         description="Characters of output kept.")] = DEFAULT_CODE_OUTPUT,
    ) -> ToolOutput:
        """Run Python in which every tool of this environment is a pre-imported function (CodeAct): loop, filter
        and combine tool results in the code and print only what matters. Variables persist between calls.
        Imports are not allowed; json, re, math, itertools, collections, statistics, datetime, random and
        textwrap are already imported. Returns the printed output, the error if any, and every image the
        tools produced."""
        result = self.run_code(code, timeout=timeout, max_output=max_output)
        return ToolOutput(text=result.text(), data=result.data(), images=result.images,
                          is_error=result.error is not None)

    def tools(self) -> dict[str, ToolSpec]:
        """The tools of this environment in its mode (production has no simulation-only tool)."""
        return in_mode(type(self).tool_specs(), getattr(self, "mode", "simulation"))

    def code_tools(self) -> dict[str, ToolSpec]:
        """The tools CodeAct code can call: all of them but the code runner itself."""
        return {name: spec for name, spec in self.tools().items() if name != CODE_TOOL}

    def run_code(self, code: str, *, timeout: float = DEFAULT_CODE_TIMEOUT,
                 max_output: int = DEFAULT_CODE_OUTPUT) -> Any:
        """Run a code action (the environment runs it in its :class:`CodeRunner`)."""
        raise NotImplementedError

    @classmethod
    def agent_can_run_programs(cls) -> bool:
        """Whether a trait of this environment lets the agent run programs of its choice (bash, python)."""
        return any(getattr(c, "__dict__", {}).get("grants_programs", False) for c in cls.__mro__)


class CodeRunner:
    """CodeAct's interpreter for one environment: a worker process of the agent per episode, in which every
    tool but ``execute_code`` is a function whose calls come back through ``call_tool``.

    It is handed what it needs (``call_tool``, the tools it exposes, whether the worker is contained) and, at
    each run, the episode's desktop and home; it reads nothing else of the environment. The caller holds the
    environment's (re-entrant) lock around :meth:`run`, so the code's tool calls run under it too.
    """

    def __init__(self, *, call_tool: Callable[..., ToolOutput], tools: Callable[[], dict[str, ToolSpec]],
                 contained: bool) -> None:
        self._call_tool = call_tool
        self._tools = tools
        #: No bash, no python in the environment: the worker cannot exec, fork, open sockets or write files.
        self.contained = contained
        self._runner: Any = None  # hci_envs.sandbox.interpreter.Interpreter, per episode

    def run(self, code: str, *, desktop: Any, home: Path, timeout: float = DEFAULT_CODE_TIMEOUT,
            max_output: int = DEFAULT_CODE_OUTPUT) -> Any:
        """Run a code action; returns an interpreter RunResult."""
        from ..sandbox.interpreter import check_code_action

        check_code_action(code)
        runner = self._runner or self._start(desktop, home)
        tools = self._tools()

        def on_call(name: str, arguments: dict[str, Any], result: Any) -> Any:
            if name not in tools:
                raise UnknownToolError(f"unknown tool {name!r}")
            out = self._call_tool(name, arguments)
            result.images.extend(out.images)
            if out.is_error:
                raise ActionError(out.text or f"{name} failed")
            return out.value()

        return runner.run(code, timeout=timeout, max_output=max_output, on_call=on_call)

    def _start(self, desktop: Any, home: Path) -> Any:
        from ..sandbox.interpreter import Interpreter
        from .discovery import function_source

        # The worker runs as the agent: an escape from the namespace gains nothing the agent's apps do not
        # have. An environment that gives the agent no programs (no bash, no python) gives CodeAct none
        # either: its worker cannot exec, fork, open sockets or write files (see interpreter_worker).
        runner = Interpreter(codeact=True, env=desktop.app_env(), cwd=desktop.agent_path(home),
                             spawn=desktop.spawn_lasting,
                             contained=self.contained)
        runner.define("".join(function_source(spec) for spec in self._tools().values()))
        self._runner = runner
        return runner

    def lasting_state(self) -> dict[str, Any] | None:
        """The worker, for a fork or checkpoint to carry (see :meth:`Interpreter.lasting_state`)."""
        return self._runner.lasting_state() if self._runner is not None else None

    def resume(self, state: dict[str, Any] | None, desktop: Any, home: Path) -> None:
        """Take the worker ``state`` describes, carried into ``desktop`` (a copy's, a checkpoint's)."""
        self.close()
        if state is not None:
            runner = self._start(desktop, home)
            if not runner.resume(state, desktop):
                self.close()

    def close(self) -> None:
        """End this episode's worker (the next run starts another)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.close()
