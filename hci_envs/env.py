"""The environment contract: Gymnasium-style ``reset`` / ``step`` / ``state`` over a desktop and its tools.

An environment is interface + state. The interface is the tool registry its traits contribute (served over
MCP). The state is the declared :class:`StartState`: screen size, home-directory template, apps to launch,
environment variables and clipboard; ``reset()`` brings the desktop back to it. ``reset``, ``state`` and
``snapshot`` belong to the control plane: they are never tools and never reachable from CodeAct.

A failure of the desktop itself (Xvfb or the app dying) ends the episode as truncated with a reason; the next
``reset()`` brings the desktop back. It never raises out of ``step``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from . import deadline
from .actions import ACTIONS, parse_action
from .actions.models import ActionBase, Screenshot
from .errors import (
    ActionError,
    ConfigError,
    DesktopDiedError,
    DesktopError,
    EnvironmentStateError,
    HciEnvsError,
    InvalidActionError,
    ModeError,
    UnknownToolError,
)
from .accounts import Isolation, resolve_isolation
from .homes import DEFAULT_MAX_SNAPSHOT_BYTES, HomeStore, check_snapshot_name
from .protocol import EnvState, ImageData, Mode, Observation, ObservationSpec, StartState
from .tools import ToolOutput, ToolSpec, tool
from .trait import Trait

#: The tool that runs CodeAct code; CodeAct code itself cannot call it.
CODE_TOOL = "execute_code"
#: Tools of the environment itself (not of a trait): discovery and CodeAct.
BASE_TOOLS = ("find_tools", "browse_tools", CODE_TOOL)

log = logging.getLogger(__name__)

def image_data(image: Any) -> ImageData:
    return ImageData(
        data=image.base64(), mime_type=image.mime_type, width=image.width, height=image.height, scale=image.scale
    )


class DesktopEnvironment(Trait):
    """Base of every environment: owns one desktop per episode and the tools of its traits.

    Compose it with traits: ``class MyEnv(HumanComputerInterfaceable, BashAccess, DesktopEnvironment)``.
    Thread-safe: calls are serialised per environment.
    """

    #: The default start state of this environment class (instances may override it).
    start_state: ClassVar[StartState] = StartState()
    #: A human-readable description, served at /metadata.
    description: ClassVar[str] = ""

    def __init__(
        self,
        start_state: StartState | dict[str, Any] | None = None,
        *,
        mode: Mode = "simulation",
        observation: ObservationSpec | dict[str, Any] | None = None,
        paste_keys: str = "ctrl+v",
        isolation: Isolation = "auto",
        max_agent_processes: int = 0,
        max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
    ) -> None:
        state = start_state if start_state is not None else type(self).start_state
        if mode not in ("simulation", "production"):
            raise ConfigError(f"mode must be 'simulation' or 'production', not {mode!r}")
        self.declared_state: StartState = self._declare(state)
        self.mode: Mode = mode
        self.observation_spec = (
            observation if isinstance(observation, ObservationSpec) else ObservationSpec.model_validate(observation or {})
        )
        self.paste_keys = paste_keys
        self.desktop: Any = None  # hci_envs.desktop.Desktop
        self.executor: Any = None  # hci_envs.executor.Executor
        self.session_info: dict[str, Any] = {}
        #: Returns why agent input is refused right now (a person holds the desktop), or None.
        self.input_gate: Any = lambda: None
        #: Called with "reset" after every reset (services such as VNC keep per-episode state).
        self.listeners: list[Any] = []
        self._lock = threading.RLock()
        self._epoch = 0
        #: Whether the agent side runs as an account of its own ("uid") or as this process's user ("none").
        self.isolation = resolve_isolation(isolation)
        self.max_agent_processes = max_agent_processes
        self._lease = self.isolation.lease()
        #: The agent account of this environment (None without isolation); every process of it ends at reset.
        self.account = self._lease.account if self._lease is not None else None
        try:
            self._homes = HomeStore(self.account, max_snapshot_bytes=max_snapshot_bytes)
        except BaseException:
            if self._lease is not None:
                self._lease.release()
            raise
        self._episode_id: str | None = None
        self._step_count = 0
        self._done = False
        self._truncated_reason: str | None = None
        self._closed = False
        self._started = False
        self._episode_active = False
        # True while the desktop is exactly as a reset left it (nothing has acted on it since)
        self._pristine = False
        self._pristine_home: frozenset[tuple[str, int, int]] = frozenset()
        self.seed: int | None = None
        self.last_used = time.monotonic()
        self._code_runner: Any = None  # hci_envs.interpreter.Interpreter, per episode

    @classmethod
    def _declare(cls, state: StartState | dict[str, Any]) -> StartState:
        """A start state with the traits' pieces merged in (their apps first, their variables as defaults)."""
        if isinstance(state, dict):
            state = StartState.model_validate(state)
        defaults = cls.merged_start_state_defaults()
        if not defaults:
            return state
        merged = state.model_dump()
        for key, value in defaults.items():
            if isinstance(value, list):
                merged[key] = [*value, *merged.get(key, [])]
            elif isinstance(value, dict):
                merged[key] = {**value, **merged.get(key, {})}
            elif merged.get(key) in (None, StartState.model_fields[key].default):
                merged[key] = value
        return StartState.model_validate(merged)

    # -- the tools -------------------------------------------------------------------------------------
    @classmethod
    def tool_specs(cls) -> dict[str, ToolSpec]:
        """The traits' tools, then the environment's own (discovery and CodeAct)."""
        specs = super().tool_specs()
        return {**{n: s for n, s in specs.items() if n not in BASE_TOOLS},
                **{n: s for n, s in specs.items() if n in BASE_TOOLS}}

    @property
    def home(self) -> Path:
        return self._homes.path

    def tools(self) -> dict[str, ToolSpec]:
        return type(self).tool_specs()

    @property
    def epoch(self) -> int:
        """Counts resets (and closing): a call queued in one epoch must not run in the next."""
        return self._epoch

    def interrupt_agent(self) -> None:
        """Stop what the agent is doing, from any thread, without the environment's lock: end every process
        of its account (commands, interpreters, CodeAct, apps) and cut long actions short, so that a reset or
        a close does not wait behind the agent's calls. Calls still queued see a new epoch and do not run."""
        self._epoch += 1
        if self.executor is not None:
            self.executor.interrupt.set()
        if self.account is not None:
            self.account.kill_all()

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *, epoch: int | None = None) -> ToolOutput:
        """The model's way in: run one tool. Raises :class:`UnknownToolError`, :class:`InvalidActionError`,
        :class:`ActionError` or :class:`DesktopDiedError`. With ``epoch`` (read when the call arrived), a call
        that waited while the episode was reset is refused instead of acting on the new episode."""
        if epoch is not None and epoch != self._epoch:
            raise EnvironmentStateError("the episode was reset (or closed) while this call waited; it did not run")
        spec = self.tools().get(name)
        if spec is None:
            raise UnknownToolError(
                f"unknown tool {name!r}; available: {', '.join(sorted(self.tools()))}", tool=name
            )
        self.last_used = time.monotonic()
        self._require_running()
        self._pristine = False
        failure = self._desktop_failure()
        if failure is not None:
            self._mark_truncated(failure)
            raise DesktopDiedError(f"the episode was truncated ({failure}); call reset()")
        deadline.check(name)
        left = deadline.remaining()
        if left is not None and spec.has_parameter("timeout"):
            # a step's time limit bounds the tool's own timeout (bash, python, CodeAct)
            arguments = dict(arguments or {})
            given = arguments.get("timeout", spec.default("timeout"))
            if isinstance(given, int | float) and not isinstance(given, bool):
                arguments["timeout"] = min(given, max(left, 0.001))
        try:
            return spec.call(self, arguments)
        except DesktopDiedError as exc:
            self._mark_truncated(str(exc))
            raise

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
                                               "arguments); print what you want to see.", max_length=200_000)],
        timeout: Annotated[float, Field(gt=0, le=600, description="Seconds before the code is interrupted.")] = 30.0,
        max_output: Annotated[int, Field(ge=1, le=16_000_000, description="Characters of output kept.")] = 65536,
    ) -> ToolOutput:
        """Run Python in which every tool of this environment is a pre-imported function (CodeAct): loop, filter
        and combine tool results in the code and print only what matters. Variables persist between calls.
        Imports are not allowed; json, re, math, itertools, collections, statistics, datetime, random and
        textwrap are already imported. Returns the printed output, the error if any, and every image the
        tools produced."""
        result = self.run_code(code, timeout=timeout, max_output=max_output)
        return ToolOutput(text=result.text(), data=result.data(), images=result.images,
                          is_error=result.error is not None)

    def code_tools(self) -> dict[str, ToolSpec]:
        """The tools CodeAct code can call: all of them but the code runner itself."""
        return {name: spec for name, spec in self.tools().items() if name != CODE_TOOL}

    def run_code(self, code: str, *, timeout: float = 30.0, max_output: int = 65536) -> Any:
        """Run a code action in this episode's CodeAct interpreter; returns an interpreter RunResult."""
        from .discovery import function_source
        from .interpreter import Interpreter, check_code_action

        check_code_action(code)
        self._require_running()
        if self._code_runner is None:
            desktop = self.desktop
            # The worker runs as the agent: an escape from the namespace gains nothing the agent's apps do
            # not have. An environment that gives the agent no programs (no bash, no python) gives CodeAct
            # none either: its worker cannot exec, fork, open sockets or write files (see interpreter_worker).
            runner = Interpreter(codeact=True, env=desktop.app_env(), cwd=str(self.home),
                                 spawn=desktop.spawn_agent, contained=not self.agent_can_run_programs())
            runner.define("".join(function_source(spec) for spec in self.code_tools().values()))
            self._code_runner = runner
        tools = self.code_tools()

        def on_call(name: str, arguments: dict[str, Any], result: Any) -> Any:
            if name not in tools:
                raise UnknownToolError(f"unknown tool {name!r}")
            out = self.call_tool(name, arguments)
            result.images.extend(out.images)
            if out.is_error:
                raise ActionError(out.text or f"{name} failed")
            return out.value()

        return self._code_runner.run(code, timeout=timeout, max_output=max_output, on_call=on_call)

    @classmethod
    def agent_can_run_programs(cls) -> bool:
        """Whether a trait of this environment lets the agent run programs of its choice (bash, python)."""
        return any(getattr(c, "__dict__", {}).get("grants_programs", False) for c in cls.__mro__)

    def _close_code_runner(self) -> None:
        runner, self._code_runner = self._code_runner, None
        if runner is not None:
            runner.close()

    def _require_running(self) -> None:
        if self._closed:
            raise EnvironmentStateError("the environment is closed")
        if not self._started:
            raise EnvironmentStateError("the environment has not been reset yet; call reset() first")
        if self._truncated_reason is not None:
            raise DesktopDiedError(f"the episode was truncated ({self._truncated_reason}); call reset()")

    # -- control plane ---------------------------------------------------------------------------------
    def start(self) -> Observation:
        """Bring the desktop up for the first time (allowed in production mode too)."""
        with self._lock:
            if self._started and self._truncated_reason is None:
                return self._observe(text="already running")
            obs = self._reset(seed=None, episode_id=None, snapshot=None)
            self._episode_active = self.mode == "production"  # production has no reset: its episode runs
            return obs

    def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> Observation:
        """End the episode's processes, restore the start state (or ``snapshot=NAME``), relaunch the apps and
        return the first observation once the screen is stable. The agent's calls in flight are interrupted
        first (see :meth:`interrupt_agent`), so a reset never waits behind them."""
        if not self._pristine and self._started and not self._closed:
            self.interrupt_agent()
        with self._lock:
            if self._closed:
                raise EnvironmentStateError("the environment is closed")
            if self.mode == "production" and self._started:
                raise ModeError("reset is disabled in production mode")
            snapshot = options.pop("snapshot", None)
            new_state = options.pop("start_state", None)
            if options:
                raise ConfigError(f"unknown reset options: {', '.join(sorted(options))}")
            if new_state is not None:  # a task brings its own world: from now on, this is the start state
                from pydantic import ValidationError

                try:
                    self.declared_state = self._declare(new_state)
                except ValidationError as exc:
                    from .actions.models import format_validation_error

                    raise ConfigError(f"start_state: {format_validation_error(exc)}") from None
                self._pristine = False
            if self._pristine and snapshot is None and self._truncated_reason is None \
                    and self._desktop_failure() is None and self._homes.fingerprint() == self._pristine_home:
                # Nothing has touched the desktop since it reached the start state: no need to rebuild it.
                self._begin_episode(seed, episode_id)
                obs = self._observe(text="reset")
            else:
                obs = self._reset(seed=seed, episode_id=episode_id, snapshot=snapshot)
            self._episode_active = True
            return obs

    def _reset(self, *, seed: int | None, episode_id: str | None, snapshot: str | None) -> Observation:
        from .desktop import AppSpec, Desktop, DesktopConfig
        from .executor import Executor

        source = self._homes.snapshot_path(snapshot) if snapshot is not None else None
        s = self.declared_state
        if self._started:
            try:
                self.on_session_end()
            except Exception:
                log.exception("on_session_end hook failed")
        self._close_code_runner()
        config = DesktopConfig(
            width=s.width, height=s.height, depth=s.depth, window_manager=s.window_manager,
            apps=[AppSpec(a.command, a.name, dict(a.env), a.wait_for_window, a.timeout, a.required) for a in s.apps],
            env=dict(s.env), home=str(self.home),
        )
        desktop = self.desktop
        reuse = desktop is not None and desktop.can_reuse(config)
        # Every process of the agent ends before its home is touched: nothing may race the restore.
        if reuse:
            desktop.end_agent_side()
        elif desktop is not None:
            desktop.close()
            self.desktop = None
        self._homes.restore(source if source is not None else s.home_template)
        if reuse:
            desktop.restart_session(config)
            self.executor.interrupt.clear()
        else:
            desktop = Desktop(config, account=self.account, max_processes=self.max_agent_processes).start()
            self.desktop = desktop
            self.executor = Executor(desktop, paste_keys=self.paste_keys)
            self.executor.input_blocked = lambda: self.input_gate()
        if s.clipboard is not None:
            desktop.events.set_clipboard(s.clipboard)
        self._started = True
        self._begin_episode(seed, episode_id)
        self.on_session_start(desktop)
        for listener in list(self.listeners):
            listener("reset")
        self._pristine = True
        self._pristine_home = self._homes.fingerprint()
        return self._observe(text="reset")

    def _begin_episode(self, seed: int | None, episode_id: str | None) -> None:
        self._episode_id = episode_id or str(uuid.uuid4())
        self._step_count = 0
        self._done = False
        self._truncated_reason = None
        self.seed = seed
        self.last_used = time.monotonic()

    def mark_touched(self) -> None:
        """Something acted on the desktop (a tool call, a step, a human): the next reset must rebuild it."""
        self._pristine = False

    def snapshot(self, name: str) -> dict[str, Any]:
        """Capture the session's files (its home directory) under ``name``; ``reset(snapshot=name)`` branches
        from it. The agent's processes are stopped while the files are copied."""
        with self._lock:
            if self.mode == "production":
                raise ModeError("snapshot is disabled in production mode")
            check_snapshot_name(name)
            with self.agent_frozen():
                return self._homes.snapshot(name)

    def snapshots(self) -> list[str]:
        return self._homes.names()

    def agent_frozen(self) -> Any:
        """A context in which no process of the agent runs (SIGSTOP), for the server to read the agent's files
        without racing it: snapshots and checkers. Without isolation, nothing is stopped."""
        import contextlib

        return self.account.frozen() if self.account is not None else contextlib.nullcontext()

    @property
    def state(self) -> EnvState:
        width, height = self.declared_state.width, self.declared_state.height
        return EnvState(
            episode_id=self._episode_id,
            step_count=self._step_count,
            screen_width=width,
            screen_height=height,
            mode=self.mode,
            done=self._done,
            truncated_reason=self._truncated_reason,
            isolation=self.isolation.mode,
            **self.session_info,
        )

    def step(self, action: Any, *, timeout_s: float | None = None) -> Observation:
        """Run one action and observe. ``action`` is a canonical action, a tool call ``{"tool", "arguments"}``,
        OpenEnv's ``{"type": "call_tool" | "list_tools", ...}``, or a list of these run in order. With
        ``timeout_s``, the step keeps to that many seconds: waits are cut short and commands get at most the
        time left; the observation then carries a TIMEOUT error."""
        with self._lock, deadline.deadline(timeout_s):
            if self._closed:
                raise EnvironmentStateError("the environment is closed")
            if not self._episode_active:
                raise EnvironmentStateError("step() before reset(): call reset() first")
            if self._truncated_reason is not None or self._done:
                raise EnvironmentStateError(
                    f"the episode is over ({self._truncated_reason or 'done'}); call reset() to start a new one"
                )
            items = action if isinstance(action, list) else [action]
            if not items:
                raise InvalidActionError("an empty list of actions", field="action")
            parsed = [self.parse_step_item(item) for item in items]  # validate all before running any
            self._step_count += 1
            self._pristine = False
            failure = self._desktop_failure()
            if failure is not None:
                self._mark_truncated(failure)
                return self._truncated_observation([])
            self.last_used = time.monotonic()
            texts: list[str] = []
            extra: dict[str, Any] = {}
            data: Any = None
            images: list[ImageData] = []
            error: dict[str, Any] | None = None
            injected = False
            for kind, payload in parsed:
                try:
                    out = self._run_item(kind, payload)
                except DesktopError as exc:
                    self._mark_truncated(str(exc))
                    return self._truncated_observation(texts)
                except ActionError as exc:
                    error = exc.to_dict()
                    texts.append(f"error: {exc.message}")
                    break
                texts.append(out.text)
                data = out.data
                images.extend(image_data(img) for img in out.images)
                injected = injected or kind != "list_tools"
                extra.update(out.extra)
            settle = self.observation_spec.settle and injected
            obs = self._observe(text="\n".join(t for t in texts if t), settle=settle)
            if obs.truncated:
                return obs
            obs.data = data
            obs.images = images
            obs.error = error
            for key, value in extra.items():
                setattr(obs, key, value)
            return obs

    def perform(self, item: Any) -> Observation:
        """Run one step item (an action, a tool call, code) without counting it as a step of the episode:
        for task setup and other control-plane work. Returns the text and data it produced."""
        with self._lock:
            self._require_running()
            kind, payload = self.parse_step_item(item)
            out = self._run_item(kind, payload)
            return Observation(text=out.text, data=out.data, images=[image_data(i) for i in out.images])

    def observe(self) -> Observation:
        """A fresh observation of the current screen (control plane; not a step)."""
        with self._lock:
            return self._observe()

    # -- step internals ----------------------------------------------------------------------------------
    def parse_step_item(self, item: Any) -> tuple[str, Any]:
        """Classify and validate one step item; raises :class:`InvalidActionError`."""
        if isinstance(item, ActionBase):
            return "action", self.executor.validate(item) if self.executor else item
        if isinstance(item, str):
            import json

            try:
                item = json.loads(item)
            except ValueError as exc:
                raise InvalidActionError(f"action is not valid JSON: {exc}", field="action") from None
        if not isinstance(item, dict):
            raise InvalidActionError(
                f"an action must be an object, not {type(item).__name__}", field="action"
            )
        kind = item.get("type")
        if kind == "list_tools":
            _only(item, {"type", "metadata"})
            return "list_tools", None
        if kind == "call_tool":
            _only(item, {"type", "tool_name", "arguments", "metadata"})
            name = item.get("tool_name")
            if not isinstance(name, str):
                raise InvalidActionError("call_tool needs a string 'tool_name'", field="tool_name")
            return "tool", (name, item.get("arguments") or {}, True)
        if "tool" in item and kind is None:
            _only(item, {"tool", "arguments"})
            if not isinstance(item["tool"], str):
                raise InvalidActionError("'tool' must be a tool name", field="tool")
            args = item.get("arguments") or {}
            if not isinstance(args, dict):
                raise InvalidActionError("'arguments' must be an object", field="arguments")
            return "tool", (item["tool"], args, False)
        if "code" in item and kind is None:
            return self.parse_code_item(item)
        if kind in ACTIONS:
            screen = (self.declared_state.width, self.declared_state.height)
            return "action", parse_action(item, screen=screen)
        raise InvalidActionError(
            f"unknown action {kind!r}; expected a canonical action ({', '.join(ACTIONS)}), "
            "{'tool': NAME, 'arguments': {...}}, or OpenEnv's call_tool / list_tools",
            field="type",
        )

    def parse_code_item(self, item: dict[str, Any]) -> tuple[str, Any]:
        """A CodeAct step ``{"code": "...", "timeout"?, "max_output"?}``: checked now, run in order."""
        from .interpreter import check_code_action

        _only(item, {"code", "timeout", "max_output"})
        code = item["code"]
        if not isinstance(code, str) or not code.strip():
            raise InvalidActionError("'code' must be a non-empty string", field="code")
        check_code_action(code)
        timeout = item.get("timeout", 30.0)
        max_output = item.get("max_output", 65536)
        if not isinstance(timeout, int | float) or not 0 < timeout <= 600:
            raise InvalidActionError("'timeout' must be a number of seconds in (0, 600]", field="timeout")
        if not isinstance(max_output, int) or not 0 < max_output <= 16_000_000:
            raise InvalidActionError("'max_output' must be an integer in (0, 16000000]", field="max_output")
        return "code", (code, float(timeout), max_output)

    def _run_item(self, kind: str, payload: Any) -> _ItemOutput:
        if kind == "list_tools":
            tools = [
                {"name": s.name, "description": s.description, "input_schema": s.input_schema()}
                for s in self.tools().values()
            ]
            return _ItemOutput(f"{len(tools)} tools", None, [], {"tools": tools})
        if kind == "tool":
            name, arguments, openenv_style = payload
            if openenv_style:
                return self._openenv_call(name, arguments)
            out = self.call_tool(name, arguments)
            return _ItemOutput(out.text, out.data, out.images, {})
        if kind == "action":
            result = self.executor.run(payload)
            images = [result.image] if result.image is not None else []
            return _ItemOutput(result.text, result.structured() or None, images, {})
        return self.run_custom_item(kind, payload)

    def run_custom_item(self, kind: str, payload: Any) -> _ItemOutput:
        if kind == "code":
            code, timeout, max_output = payload
            result = self.run_code(code, timeout=timeout, max_output=max_output)
            extra = {"error": {"code": "CODE_ERROR", "message": result.error}} if result.error else {}
            return _ItemOutput(result.text(), result.data(), result.images, extra)
        raise InvalidActionError(f"unsupported step item {kind!r}")

    def _openenv_call(self, name: str, arguments: dict[str, Any]) -> _ItemOutput:
        """OpenEnv's CallToolAction: a CallToolObservation-shaped result; errors go in ``error``."""
        from .server.mcp_bridge import output_to_mcp_dict

        try:
            out = self.call_tool(name, arguments)
        except DesktopError:
            raise
        except HciEnvsError as exc:
            kind = {
                "UNKNOWN_TOOL": "tool_not_found", "VALIDATION_ERROR": "invalid_args", "TIMEOUT": "timeout",
            }.get(exc.code, "execution_error")
            return _ItemOutput(
                f"error: {exc.message}", None, [],
                {"tool_name": name, "result": None, "error": {"error_type": kind, "message": exc.message}},
            )
        return _ItemOutput(
            out.text, out.data, out.images, {"tool_name": name, "result": output_to_mcp_dict(out), "error": None}
        )

    def _observe(self, text: str = "", settle: bool = False) -> Observation:
        spec = self.observation_spec
        shot = None
        if spec.format is not None and self.desktop is not None:
            try:
                if settle:
                    self.desktop.events.wait_settled()
                result = self.executor.run(
                    Screenshot(format=spec.format, quality=spec.quality, max_side=spec.max_side)
                )
                shot = image_data(result.image)
            except DesktopError as exc:
                self._mark_truncated(str(exc))
                return self._truncated_observation([text])
        return Observation(screenshot=shot, text=text, done=self._done)

    def _mark_truncated(self, reason: str) -> None:
        if self._truncated_reason is None:
            log.warning("episode %s truncated: %s", self._episode_id, reason)
        self._truncated_reason = reason
        self._done = True

    def _truncated_observation(self, texts: list[str]) -> Observation:
        return Observation(
            text="\n".join(t for t in texts if t),
            done=True,
            truncated=True,
            truncated_reason=self._truncated_reason,
        )

    def _desktop_failure(self) -> str | None:
        """Why the desktop can no longer run the episode (Xvfb or a required app gone), without a round trip."""
        if self.desktop is None:
            return "the desktop is not running"
        return self.desktop.quick_failure()

    def check_health(self) -> str | None:
        """None if the desktop is healthy; otherwise the reason, and the episode is marked truncated."""
        if self.desktop is None:
            return "not started"
        health = self.desktop.health()
        if not health.ok:
            self._mark_truncated(health.reason or "desktop unhealthy")
            return health.reason
        return None

    def close(self) -> None:
        if not self._closed:
            self.interrupt_agent()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._started:
                    self.on_session_end()
            except Exception:
                log.exception("on_session_end hook failed")
            self._close_code_runner()
            try:
                if self.desktop is not None:
                    self.desktop.close()
                    self.desktop = None
                self._homes.close()
            finally:
                if self._lease is not None:
                    self._lease.release()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> DesktopEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ItemOutput:
    __slots__ = ("text", "data", "images", "extra")

    def __init__(self, text: str, data: Any, images: list[Any], extra: dict[str, Any]) -> None:
        self.text, self.data, self.images, self.extra = text, data, images, extra


def _only(item: dict[str, Any], allowed: set[str]) -> None:
    extra = set(item) - allowed
    if extra:
        raise InvalidActionError(f"unexpected field(s): {', '.join(sorted(extra))}", field=sorted(extra)[0])
