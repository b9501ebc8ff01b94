"""PythonAccess: a persistent Python interpreter per session.

``python`` runs code in an interpreter that lives for the episode: variables, imports and functions persist
between calls. It runs as the session's agent account with the desktop's environment, returns what the code printed,
its stderr and the exception if one was raised, and interrupts code that runs past its timeout (restarting
the interpreter if the code will not stop). A reset gives a fresh interpreter.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from hci_envs.sandbox.interpreter import DEFAULT_MAX_OUTPUT, Interpreter
from hci_envs.tools.registry import ToolOutput, tool
from hci_envs.tools.trait import Trait


class PythonAccess(Trait):
    """A persistent Python interpreter in the session."""

    system_packages = ("python3",)
    #: The agent may run programs of its choice (CodeAct's worker may exec too).
    grants_programs = True
    #: The interpreter to run (None: the system's python3 on the agent's PATH, never the server's own).
    python_executable: ClassVar[str | None] = None

    def _interpreter(self) -> Interpreter:
        interpreter = self.__dict__.get("_python_interpreter")
        if interpreter is None:
            desktop: Any = self.desktop  # type: ignore[attr-defined]
            interpreter = Interpreter(
                env=desktop.app_env(), cwd=desktop.agent_home, python=self.python_executable,
                spawn=desktop.spawn_lasting,
            )
            self.__dict__["_python_interpreter"] = interpreter
        return interpreter

    @tool()
    def python(
        self,
        code: Annotated[str, Field(min_length=1, max_length=1_000_000, description="Python code to run.")],
        timeout: Annotated[float, Field(gt=0, le=600, description="Seconds before the code is interrupted.")] = 30.0,
        max_output: Annotated[int, Field(ge=1, le=16_000_000,
                                         description="Characters of output kept.")] = DEFAULT_MAX_OUTPUT,
    ) -> ToolOutput:
        """Run Python in the session's persistent interpreter; state survives between calls. Returns what it
        printed, its stderr, and the exception if one was raised."""
        result = self._interpreter().run(code, timeout=timeout, max_output=max_output)
        return ToolOutput(text=result.text() or "(no output)", data=result.data(), is_error=result.error is not None)

    def lasting_state(self) -> dict[str, Any]:
        state = super().lasting_state()
        interpreter = self.__dict__.get("_python_interpreter")
        if interpreter is not None and (carried := interpreter.lasting_state()) is not None:
            state["python"] = carried
        return state

    def resume_lasting(self, state: dict[str, Any], desktop: Any) -> None:
        super().resume_lasting(state, desktop)
        if "python" in state:
            self._interpreter().resume(state["python"], desktop)

    def on_session_end(self) -> None:
        super().on_session_end()
        interpreter = self.__dict__.pop("_python_interpreter", None)
        if interpreter is not None:
            interpreter.close()
