"""The environment's own tools: discovery (``find_tools``, ``browse_tools``) and CodeAct (``execute_code``).

CodeAct code runs in a worker process of the agent (see :mod:`hci_envs.interpreter`) in which every other
tool of the environment is a function; its tool calls come back here and run through ``call_tool`` like any
other. The worker lives for one episode.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from .errors import ActionError, UnknownToolError
from .steps import DEFAULT_CODE_OUTPUT, DEFAULT_CODE_TIMEOUT, MAX_CODE_CHARS, MAX_CODE_OUTPUT, MAX_CODE_TIMEOUT
from .tools import ToolOutput, ToolSpec, tool
from .trait import Trait

#: The tool that runs CodeAct code; CodeAct code itself cannot call it.
CODE_TOOL = "execute_code"
#: Tools of the environment itself (not of a trait): discovery and CodeAct.
BASE_TOOLS = ("find_tools", "browse_tools", CODE_TOOL)


class EnvironmentTools(Trait):
    """Discovery and CodeAct over the tools of the environment it is part of."""

    #: The folder ``browse_tools`` shows these tools in: they are the environment's own.
    trait_name = "Environment"

    _code_runner: Any = None  # hci_envs.interpreter.Interpreter, per episode

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
        return type(self).tool_specs()

    def code_tools(self) -> dict[str, ToolSpec]:
        """The tools CodeAct code can call: all of them but the code runner itself."""
        return {name: spec for name, spec in self.tools().items() if name != CODE_TOOL}

    def run_code(self, code: str, *, timeout: float = DEFAULT_CODE_TIMEOUT,
                 max_output: int = DEFAULT_CODE_OUTPUT) -> Any:
        """Run a code action in this episode's CodeAct interpreter; returns an interpreter RunResult. Takes
        the environment's lock: the code's tool calls run under it too (it is re-entrant)."""
        from .interpreter import check_code_action

        check_code_action(code)
        with self._lock:  # type: ignore[attr-defined]
            self.episode.require_running()  # type: ignore[attr-defined]
            runner = self._code_runner or self._start_code_runner()
            tools = self.code_tools()

            def on_call(name: str, arguments: dict[str, Any], result: Any) -> Any:
                if name not in tools:
                    raise UnknownToolError(f"unknown tool {name!r}")
                out = self.call_tool(name, arguments)  # type: ignore[attr-defined]
                result.images.extend(out.images)
                if out.is_error:
                    raise ActionError(out.text or f"{name} failed")
                return out.value()

            return runner.run(code, timeout=timeout, max_output=max_output, on_call=on_call)

    def _start_code_runner(self) -> Any:
        from .discovery import function_source
        from .interpreter import Interpreter

        desktop = self.desktop  # type: ignore[attr-defined]
        # The worker runs as the agent: an escape from the namespace gains nothing the agent's apps do not
        # have. An environment that gives the agent no programs (no bash, no python) gives CodeAct none
        # either: its worker cannot exec, fork, open sockets or write files (see interpreter_worker).
        runner = Interpreter(codeact=True, env=desktop.app_env(), cwd=str(self.home),  # type: ignore[attr-defined]
                             spawn=desktop.spawn_agent, contained=not self.agent_can_run_programs())
        runner.define("".join(function_source(spec) for spec in self.code_tools().values()))
        self._code_runner = runner
        return runner

    @classmethod
    def agent_can_run_programs(cls) -> bool:
        """Whether a trait of this environment lets the agent run programs of its choice (bash, python)."""
        return any(getattr(c, "__dict__", {}).get("grants_programs", False) for c in cls.__mro__)

    def _close_code_runner(self) -> None:
        runner, self._code_runner = self._code_runner, None
        if runner is not None:
            runner.close()
