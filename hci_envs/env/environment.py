"""The environment contract: Gymnasium-style ``reset`` / ``step`` / ``state`` over a desktop and its tools.

An environment is interface + state. The interface is the tool registry its traits contribute (served over
MCP). The state is the declared :class:`StartState`: screen size, home-directory template, apps to launch,
environment variables and clipboard; ``reset()`` brings the desktop back to it. ``reset``, ``state`` and
``snapshot`` belong to the control plane: they are never tools and never reachable from CodeAct.

:class:`Environment` is a facade over the parts it is handed (:class:`~hci_envs.env.assembly.EnvironmentParts`,
built by :func:`~hci_envs.env.assembly.assemble`): a desktop factory (the real Xvfb desktop, or
:class:`~hci_envs.desktop.fake.FakeDesktop` as the test seam), the executor, the factory of agent accounts
and homes (:class:`~hci_envs.sandbox.homes.HomeStore`) that the rebuild and the spare share, the episode's
bookkeeping (:class:`~hci_envs.env.episode.EpisodeTracker`), CodeAct's runner and the task manager; a server
hands it :class:`~hci_envs.env.assembly.EnvironmentHooks`. A failure of the desktop itself (Xvfb or the app
dying) ends the episode as truncated with a reason; the next ``reset()`` brings the desktop back. It never
raises out of ``step``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .. import deadline
from ..actions.models import ActionBase
from ..tools.codeact import BASE_TOOLS, CODE_TOOL, EnvironmentTools
from .assembly import DesktopFactory, EnvironmentHooks, EnvironmentParts, assemble
from .executor import keys_read
from .people import PAUSED_TOOLS, PeopleInTheLoop
from ..errors import (
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
from ..protocol import EnvState, ImageData, Mode, Observation, ObservationSpec, StartState
from ..sandbox.homes import check_snapshot_name
from ..sandbox.interpreter import DEFAULT_CODE_OUTPUT, DEFAULT_CODE_TIMEOUT
from ..sandbox.limits import status as limits_status
from ..sandbox.network import status as network_status
from ..tools.registry import ToolOutput, ToolSpec
from .spare import DesktopParts
from .steps import CallToolAction, CodeAction, ListToolsAction, ToolCall, parse_step_item

if TYPE_CHECKING:  # the light install has no desktop runtime: the interface is for the types
    from ..desktop.interface import VirtualDesktop

__all__ = ["BASE_TOOLS", "CODE_TOOL", "DesktopFactory", "Environment", "EnvironmentHooks", "EnvironmentParts",
           "image_data"]

log = logging.getLogger(__name__)

def image_data(image: Any) -> ImageData:
    return ImageData(
        data=image.base64(), mime_type=image.mime_type, width=image.width, height=image.height, scale=image.scale
    )


#: The reward of every step: 0. A task's reward is its checker's, asked for on the control plane (``score()``,
#: POST /score, TRL's ``get_reward``) when the trainer wants it: a step never runs the checker, which reads the
#: answers and takes time, and what a step returns reaches the agent. OpenEnv's wire carries a number on
#: every step (its validator grades that), so the number is 0, not null; a reset's reward is null.
STEP_REWARD = 0.0


class Environment(PeopleInTheLoop, EnvironmentTools):
    """Base of every environment: owns one desktop per episode and the tools of its traits.

    Compose it with traits: ``class MyEnv(HumanComputerInterfaceable, BashAccess, Environment)``.
    Thread-safe: every public method takes the environment's (re-entrant) lock, except
    :meth:`interrupt_agent`, which a reset or close calls first so that they never wait behind the agent.
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
        hooks: EnvironmentHooks | None = None,
        parts: EnvironmentParts | None = None,
        **options: Any,
    ) -> None:
        """``options`` are :func:`~hci_envs.env.assembly.assemble`'s (``desktop``, ``spare``, ``isolation``,
        ``max_agent_processes``, ``limits``, ``network``, ``max_snapshot_bytes``, ``paste_keys``, and people in the
        loop's ``human_answer_within``, ``human_hold_for``, ``pause_clock_for_people``, ``supervise``,
        ``decide_within``); ``parts`` replaces them all."""
        state = start_state if start_state is not None else type(self).start_state
        if mode not in ("simulation", "production"):
            raise ConfigError(f"mode must be 'simulation' or 'production', not {mode!r}")
        if parts is not None and options:
            raise ConfigError(f"an environment given its parts takes no options ({', '.join(sorted(options))})")
        self.declared_state: StartState = self.declare(state)
        self.mode: Mode = mode
        self.observation_spec = (
            observation if isinstance(observation, ObservationSpec) else ObservationSpec.model_validate(observation or {})
        )
        #: What a server plugged in: VNC's input gate and listeners, the session's URLs (see EnvironmentHooks).
        self.hooks = hooks if hooks is not None else EnvironmentHooks()
        self._lock = threading.RLock()
        self._performing = False
        self._epoch = 0
        #: How this environment was made, for the environments a fork makes (see :meth:`fork`).
        self._made_with = (state, mode, self.observation_spec, dict(options)) if parts is None else None
        parts = parts if parts is not None else assemble(self, self.hooks, **options)
        # The parts, each a role of its own:
        self.make_desktop = parts.make_desktop
        self.executor = parts.executor
        self.new_desktop_parts = parts.new_desktop_parts
        self.episode = parts.episode
        self.code = parts.code
        self.tasks = parts.tasks
        #: The next episode's desktop, prepared in the background (see :mod:`hci_envs.env.spare`), or None.
        self.spare = parts.spare
        #: Whether the agent side runs as an account of its own ("uid") or as this process's user ("none").
        self.isolation = parts.isolation
        self.limits = parts.limits
        self.network = parts.network
        self._tool_depth = 0  # tool calls in progress on this environment's lock: CodeAct's are nested
        self._join_people(parts)
        # What the current episode runs on: its desktop (None until the first reset), home and agent account.
        self.desktop: VirtualDesktop | None = None
        current = self.new_desktop_parts()
        self._lease, self.homes = current.lease, current.homes
        #: The agent account of this environment (None without isolation); every process of it ends at reset.
        self.account = current.account
        from .forking import Checkpoints

        #: Moments to return to (``checkpoint``, ``reset(checkpoint=NAME)``).
        self._checkpoints = Checkpoints()

    @classmethod
    def declare(cls, state: StartState | dict[str, Any]) -> StartState:
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

    @classmethod
    def tool_specs(cls) -> dict[str, ToolSpec]:
        """The traits' tools, then the environment's own (discovery and CodeAct)."""
        specs = super().tool_specs()
        return {**{n: s for n, s in specs.items() if n not in BASE_TOOLS},
                **{n: s for n, s in specs.items() if n in BASE_TOOLS}}

    # -- what callers read -----------------------------------------------------------------------------
    @property
    def home(self) -> Path:
        return self.homes.path

    @property
    def epoch(self) -> int:
        """Counts resets (and closing): a call queued in one epoch must not run in the next."""
        return self._epoch

    @property
    def closed(self) -> bool:
        return self.episode.closed

    @property
    def seed(self) -> int | None:
        return self.episode.seed

    @property
    def last_used(self) -> float:
        return self.episode.last_used

    @property
    def state(self) -> EnvState:
        e = self.episode
        task = self.tasks.task
        return EnvState(
            episode_id=e.id, step_count=e.step_count, seed=e.seed, task=task.id if task is not None else None,
            screen_width=self.declared_state.width, screen_height=self.declared_state.height, mode=self.mode,
            done=e.done, truncated_reason=e.truncated_reason, isolation=self.isolation.mode,
            limits=limits_status(self.limits.over(self.declared_state.limits), self.isolation.mode == "uid"),
            network=network_status(self.network, self.isolation.mode == "uid"),
            spare=self.spare.status() if self.spare is not None else None, human=self.handover.status(),
            supervision=self.supervision.status(),
            **self.hooks.info,
        )

    @property
    def listeners(self) -> list[Callable[[str], Any]]:
        """Called with "desktop" and "reset" (see :class:`~hci_envs.env.assembly.EnvironmentHooks`)."""
        return self.hooks.listeners

    @property
    def session_info(self) -> dict[str, Any]:
        """What the server publishes in this environment's state (the session's id, URLs and token)."""
        return self.hooks.info

    # -- the model's way in ----------------------------------------------------------------------------
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
        """Run one tool. Raises :class:`UnknownToolError`, :class:`InvalidActionError`, :class:`ActionError`
        or :class:`DesktopDiedError`. With ``epoch`` (read when the call arrived), a call that waited while
        the episode was reset is refused instead of acting on the new episode."""
        spec = self.tools().get(name)
        if spec is None:
            raise UnknownToolError(f"unknown tool {name!r}; available: {', '.join(sorted(self.tools()))}", tool=name)
        return self.run_tool(spec, arguments, epoch=epoch)

    def run_tool(self, spec: ToolSpec, arguments: dict[str, Any] | None = None, *,
                 epoch: int | None = None) -> ToolOutput:
        """Run a tool already looked up (``call_tool`` by name; the MCP server has looked it up in the tools it
        serves)."""
        with self._lock:
            if epoch is not None and epoch != self._epoch:
                raise EnvironmentStateError("the episode was reset (or closed) while this call waited; it did not run")
            self.episode.require_running()
            self.episode.touch(by_agent=not self._performing)
            failure = self._desktop_failure()
            if failure is not None:
                self.episode.truncate(failure)
                raise DesktopDiedError(f"the episode was truncated ({failure}); call reset()")
            deadline.check(spec.name)
            if not spec.read_only and spec.name not in PAUSED_TOOLS:
                self._refuse_while_paused()
            arguments = _bounded_timeout(spec, arguments)
            self._tool_depth += 1
            try:
                with self._agent_call():
                    output = spec.call(self, arguments)
            except DesktopDiedError as exc:
                self.episode.truncate(str(exc))
                raise
            finally:
                self._tool_depth -= 1
            # the hand-over's news goes with the outermost result: a CodeAct call's, not a tool its code called
            return self._with_notices(output, news=self._tool_depth == 0)

    def _with_notices(self, output: Any, news: bool = True) -> Any:
        """``output`` with what the kernel did for the session's limits since the last result, if anything (a
        process it stopped for memory, forks it refused: the agent learns why its program died), and with the
        hand-over's news: a person's report once they handed back (and a fresh screen), or that one holds it."""
        if not isinstance(output, ToolOutput):
            return output
        enforced = self.desktop.limits_enforced() if self.desktop is not None else None
        if enforced:
            output.text = _with_limit(output.text, enforced)
            if isinstance(output.data, dict):
                output.data = {**output.data, "limit": enforced}
        told, report = self._handover_news() if news else (None, False)
        if told:
            output.text = f"{told}\n{output.text}" if output.text else told
            if isinstance(output.data, dict) or output.data is None:
                output.data = {**(output.data or {}), "human": self.handover.status()}
            if report and self.desktop is not None and not output.images:
                output.images = [self.executor.run({"type": "screenshot"}).image]
        return output

    def run_code(self, code: str, *, timeout: float = DEFAULT_CODE_TIMEOUT,
                 max_output: int = DEFAULT_CODE_OUTPUT) -> Any:
        """Run a code action in this episode's CodeAct runner; returns an interpreter RunResult. Takes the
        environment's lock: the code's tool calls run under it too (it is re-entrant)."""
        with self._lock:
            self.episode.require_running()
            self._refuse_while_paused()
            return self.code.run(code, desktop=self.desktop, home=self.home, timeout=timeout,
                                 max_output=max_output)

    # -- control plane ---------------------------------------------------------------------------------
    def start(self) -> Observation:
        """Bring the desktop up for the first time (allowed in production mode too)."""
        with self._lock:
            if self.episode.started and self.episode.truncated_reason is None:
                return self._observe(text="already running")
            obs = self._rebuild(seed=None, episode_id=None, snapshot=None)
            self.episode.active = self.mode == "production"  # production has no reset: its episode runs
            return obs

    def reset(self, seed: int | None = None, episode_id: str | None = None, *, task: Any = None,
              **options: Any) -> Observation:
        """End the episode's processes, restore the start state (or ``snapshot=NAME``, or ``start_state=``),
        relaunch the apps and return the first observation once the screen is stable (or ``checkpoint=NAME``: back
        to the moment :meth:`checkpoint` kept, its episode with it). With ``task`` (a
        :class:`~hci_envs.tasks.TaskSpec` or its dict), the episode is that task's: its world is built, its
        setup run, and the observation carries its instruction; ``score()`` then runs its checker. The seed and
        episode id are the caller's either way. The agent's calls in flight are interrupted first (see
        :meth:`interrupt_agent`), so a reset never waits behind them."""
        if task is not None:
            if options:
                raise ConfigError(f"a reset into a task takes no other options ({', '.join(sorted(options))})")
            task = _task_spec(task)
            with self._lock:
                state = self.tasks.enter(task, self.declared_state)
                obs = self._reset(seed, episode_id, start_state=state)
                return self.tasks.set_up(self, task, obs)
        if options.get("checkpoint") is not None:  # back to a moment: its task (if any) with it
            return self._reset(seed, episode_id, **options)
        own = self.tasks.leave()
        if own is not None:  # after a task, a plain reset is back in the environment's own start state
            options.setdefault("start_state", own)
        return self._reset(seed, episode_id, **options)

    def score(self, *, settle: float = 0.3, catch_up: float = 10.0) -> Any:
        """Run the checker of the task this episode was reset into (control plane only); a
        :class:`~hci_envs.tasks.scoring.Score`. See :meth:`hci_envs.tasks.manager.TaskManager.score`."""
        return self.tasks.score(self, settle=settle, catch_up=catch_up)

    def _reset(self, seed: int | None, episode_id: str | None, **options: Any) -> Observation:
        e = self.episode
        if not e.pristine and e.started and not e.closed:
            self.interrupt_agent()
        self._people_leave()  # a new episode: whoever was asked for the old one is not wanted any more
        with self._lock:
            if e.closed:
                raise EnvironmentStateError("the environment is closed")
            if self.mode == "production" and e.started:
                raise ModeError("reset is disabled in production mode")
            self._people_leave()  # again, under the lock: an ask_human that ran just before asked the old episode
            snapshot = options.pop("snapshot", None)
            new_state = options.pop("start_state", None)
            checkpoint = options.pop("checkpoint", None)
            if options:
                raise ConfigError(f"unknown reset options: {', '.join(sorted(options))}")
            if checkpoint is not None:
                if snapshot is not None or new_state is not None:
                    raise ConfigError("a reset to a checkpoint takes no snapshot or start state", field="checkpoint")
                return self._return_to(self._checkpoints.get(checkpoint), seed, episode_id)
            if new_state is not None:  # a task brings its own world: from now on, this is the start state
                self.declared_state = self._declare_checked(new_state)
                e.pristine = False
            if e.pristine and snapshot is None and e.truncated_reason is None \
                    and self._desktop_failure() is None and self.homes.fingerprint() == e.pristine_home:
                # Nothing has touched the desktop since it reached the start state: no need to rebuild it.
                e.begin(seed, episode_id)
                obs = self._observe(text="reset")
            else:
                obs = self._rebuild(seed=seed, episode_id=episode_id, snapshot=snapshot)
            e.active = True
            return obs

    def _return_to(self, checkpoint: Any, seed: int | None, episode_id: str | None) -> Observation:
        from .forking import return_to

        if self.episode.started:
            self._session_end_hook()
        self.code.close()
        return_to(self, checkpoint, seed, episode_id)
        return self._observe(text="reset")

    def _declare_checked(self, state: StartState | dict[str, Any]) -> StartState:
        from pydantic import ValidationError

        try:
            return self.declare(state)
        except ValidationError as exc:
            from ..actions.models import format_validation_error

            raise ConfigError(f"start_state: {format_validation_error(exc)}") from None

    def _rebuild(self, *, seed: int | None, episode_id: str | None, snapshot: str | None) -> Observation:
        """Bring the desktop to the start state: the spare swapped in when one is ready for it, else the same
        display warm when it can be kept, else a new one."""
        source = self.homes.snapshot_path(snapshot) if snapshot is not None else None
        s = self.declared_state
        if self.episode.started:
            self._session_end_hook()
        self.code.close()
        current = DesktopParts(self.desktop, self.homes, self._lease)
        spare = self.spare.take(s) if self.spare is not None and source is None else None
        if spare is not None:
            # The episode's agent ends now (not in the background): nothing of it may outlive the reset.
            if current.desktop is not None:
                current.desktop.end_agent_side()
                # The retired display stays up (it becomes the next spare): what the agent opened on it, such
                # as access for every local user (``xhost +``), closes now too, not when it is prepared again.
                with contextlib.suppress(DesktopDiedError):
                    current.desktop.input.restore_access_control()
            spare.homes.adopt_snapshots(current.homes)
            parts = spare
        else:
            parts = self._bring_up(current, s, source)
        old_desktop = self.desktop
        self.desktop, self.homes, self._lease, self.account = parts.desktop, parts.homes, parts.lease, parts.account
        desktop = self.desktop
        self.executor.use(desktop)
        if s.clipboard is not None:
            desktop.events.set_clipboard(s.clipboard)
        self.episode.started = True
        self.episode.begin(seed, episode_id)
        self.on_session_start(desktop)
        if desktop is not old_desktop:
            self.hooks.notify("desktop")  # viewers of the old display must come over to this one
        self.hooks.notify("reset")
        self.episode.pristine = True
        self.episode.pristine_home = parts.home_fingerprint if spare is not None else None
        if self.episode.pristine_home is None:
            self.episode.pristine_home = self.homes.fingerprint()
        if self.spare is not None:
            self.spare.want(s, recycled=current if spare is not None else None)
        return self._observe(text="reset")

    def _bring_up(self, parts: DesktopParts, state: StartState, source: Path | None) -> DesktopParts:
        """Bring ``parts`` to ``state`` (home from ``source`` or the template): the same display warm when it
        can be kept, else a new one. Used on the reset path and, in the background, for the spare."""
        desktop = parts.desktop
        reuse = desktop is not None and desktop.can_reuse(state)
        # Every process of the agent ends before its home is touched: nothing may race the restore.
        if reuse:
            desktop.end_agent_side()
        elif desktop is not None:
            desktop.close()
            parts.desktop = None
        # the episode's limits: the server's, with what the start state (a task's) asks over them
        limits = self.limits.over(state.limits)
        parts.homes.restore(source if source is not None else state.home_template, disk=limits.disk)
        if reuse:
            desktop.take_limits(state)
            desktop.restart_session(state)
        else:
            desktop = self.make_desktop(state, home=str(parts.homes.path), account=parts.account)
            desktop.start()
            parts.desktop = desktop
        return parts

    def prepare_spare(self, parts: DesktopParts | None, state: StartState) -> DesktopParts:
        """Bring ``parts`` (or new ones) to ``state`` in the background: the spare's work (see SpareDesktop)."""
        if parts is None:  # a second account: the spare's apps must not be this episode's
            parts = self.new_desktop_parts()
        parts = self._bring_up(parts, state, None)
        parts.home_fingerprint = parts.homes.fingerprint()
        return parts

    def fork(self, n: int) -> list[Environment]:
        """``n`` environments whose desktops are live copies of this one's as it is now (every process with its
        memory, the home, the clipboard, the pointer), each with its own agent account and home, in the same
        episode (its task, step count and seed; an episode id of its own). This one goes on unchanged, but for
        the agent's commands still running, which end (the tools start them again). Needs a forkable desktop
        (``desktop="forkable"``); control plane only. See :mod:`hci_envs.env.forking`."""
        from .forking import check_count, fork_into

        check_count(n)
        if self._made_with is None:
            raise ConfigError("an environment built from its parts cannot make its copies: make them as it was "
                              "made and call fork_into(copies)")
        state, mode, observation, options = self._made_with
        with self._lock:
            self.episode.require_running()
            copies: list[Environment] = []
            try:
                for _ in range(n):
                    copies.append(type(self)(state, mode=mode, observation=observation, **options))
                fork_into(self, copies)
            except BaseException:
                for copy in copies:
                    copy.close()
                raise
            return copies

    def checkpoint(self, name: str) -> dict[str, Any]:
        """Keep this environment as it is now under ``name`` (its desktop's every process with its memory, the
        home, the episode); ``reset(checkpoint=name)`` returns to it, as many times as wanted. Needs a forkable
        desktop; control plane only. What it cost: ``{"name", "seconds", "frozen_seconds", "bytes"}``."""
        with self._lock:
            self.episode.require_running()
            return self._checkpoints.take(self, name)

    def fork_into(self, copies: list[Environment]) -> None:
        """Fork into ``copies``, environments made like this one and not started (a server makes its sessions'
        environments itself): see :meth:`fork`."""
        from .forking import fork_into

        with self._lock:
            self.episode.require_running()
            fork_into(self, copies)

    def mark_touched(self) -> None:
        """Something acted on the desktop (a tool call, a step, a human): the next reset must rebuild it."""
        self.episode.touch()

    def snapshot(self, name: str) -> dict[str, Any]:
        """Capture the session's files (its home directory) under ``name``; ``reset(snapshot=name)`` branches
        from it. The agent's processes are stopped while the files are copied."""
        with self._lock:
            if self.mode == "production":
                raise ModeError("snapshot is disabled in production mode")
            check_snapshot_name(name)
            with self.agent_frozen():
                return self.homes.snapshot(name)

    def snapshots(self) -> list[str]:
        return self.homes.names()

    def agent_frozen(self) -> Any:
        """A context in which no process of the agent runs (SIGSTOP), for the server to read the agent's files
        without racing it: snapshots and checkers. Without isolation, nothing is stopped."""
        return self.account.frozen() if self.account is not None else contextlib.nullcontext()

    # -- steps -----------------------------------------------------------------------------------------
    def step(self, action: Any, *, timeout_s: float | None = None) -> Observation:
        """Run one action and observe. ``action`` is one item of :mod:`hci_envs.env.steps` (a canonical action,
        a tool call, OpenEnv's call_tool / list_tools, CodeAct code) or a list of them run in order. With
        ``timeout_s``, the step keeps to that many seconds: waits are cut short and commands get at most the
        time left; the observation then carries a TIMEOUT error. Its reward is :data:`STEP_REWARD`."""
        obs = self._step(action, timeout_s)
        if obs.reward is None:
            obs.reward = STEP_REWARD
        return obs

    def _step(self, action: Any, timeout_s: float | None) -> Observation:
        with self._lock, deadline.deadline(timeout_s, self.handover.agent_clock), self._agent_call():
            self.episode.require_steppable()
            items = action if isinstance(action, list) else [action]
            if not items:
                raise InvalidActionError("an empty list of actions", field="action")
            # Validate every item before running any; a batch (a list) checks coordinates against the screen
            # as each action runs, so that its actions before an off-screen one run and it stops there.
            screen = None if isinstance(action, list) else (self.declared_state.width, self.declared_state.height)
            parsed = [parse_step_item(item, screen=screen) for item in items]
            self.episode.step_count += 1
            self.episode.touch()
            failure = self._desktop_failure()
            if failure is not None:
                self.episode.truncate(failure)
                return self._truncated_observation([])
            texts: list[str] = []
            reply = Observation()
            # A batch: the items run in order and stop at the first that fails; each one's outcome is
            # reported (ok, error, or not run), with the indexes of the images it produced in ``images``.
            outcomes: list[dict[str, Any]] = []
            landing: list[tuple[int, Any]] = []  # (index, ActionResult) of the canonical input actions run
            injected = False
            since = time.monotonic()
            for index, item in enumerate(parsed):
                ran: list[Any] = []
                if self.observation_spec.settle and injected and _observes(item):
                    # a look after input in the same batch (click, then screenshot) sees the input's effect
                    self.executor.settle(since)
                    injected = False
                if not (isinstance(item, ListToolsAction) or _observes(item)):
                    # the effect a look waits for is the last input's: the screen changed by earlier input (typing
                    # before a chord) is no sign that the app has drawn what the last one did
                    since = time.monotonic()
                try:
                    out = self._run_item(item, reply, ran)
                except DesktopError as exc:
                    self.episode.truncate(str(exc))
                    return self._truncated_observation(texts)
                except ActionError as exc:
                    reply.error = exc.to_dict()
                    texts.append(f"error: {exc.message}")
                    outcomes.append({"index": index, "status": "error", "error": reply.error})
                    break
                texts.append(out.text)
                reply.data = out.data
                first = len(reply.images)
                reply.images.extend(image_data(img) for img in out.images)
                outcomes.append({"index": index, "status": "error" if out.is_error else "ok", "text": out.text,
                                 "data": out.data, "images": list(range(first, len(reply.images)))})
                # anything but a look (a screenshot, the tree, the tool list) may change the screen, a wait
                # included (the app goes on): the observation after it settles
                injected = injected or not (isinstance(item, ListToolsAction) or _observes(item))
                landing.extend((index, r) for r in ran if r.started)
                if out.is_error:  # a tool that answered with an error (CodeAct's) stops the batch too
                    break
            outcomes.extend({"index": i, "status": "not_run"} for i in range(len(outcomes), len(parsed)))
            settle_since = since if self.observation_spec.settle and injected else None
            obs = self._observe(text="\n".join(t for t in texts if t), settle_since=settle_since,
                                landing=landing if settle_since is not None else None, outcomes=outcomes)
            if obs.truncated:
                return obs
            obs.data, obs.images, obs.error = reply.data, reply.images, reply.error
            for key, value in (reply.model_extra or {}).items():
                setattr(obs, key, value)
            if isinstance(action, list):
                obs.outcomes = outcomes
            return obs

    def perform(self, item: Any) -> Observation:
        """Run one step item (an action, a tool call, code) without counting it as a step of the episode:
        for task setup and other control-plane work. Returns the text and data it produced."""
        with self._lock:
            self.episode.require_running()
            self._performing = True  # what runs here is the control plane's, not the agent's (catch_up)
            try:
                out = self._run_item(self.parse_step_item(item), Observation())
            finally:
                self._performing = False
            return Observation(text=out.text, data=out.data, images=[image_data(i) for i in out.images])

    def catch_up(self, timeout: float = 10.0, quiet: float = 0.3) -> list[str]:
        """Wait until the world has caught up with the agent, before a checker reads it: the calls in flight
        have finished (this takes the environment's lock, as they hold it), the app that gets the keys has
        handled those sent (a terminal that has not read a command's Enter shows no command running), no
        command the agent typed into a terminal still runs and the terminals are still
        (:mod:`hci_envs.desktop.quiescence`), then the screen has settled for ``quiet`` seconds. At most
        ``timeout`` seconds for the keys and the terminals (a reset cuts it short); returns what was still busy
        then, or [] when the world caught up."""
        with self._lock:
            if self.desktop is None:
                return []
            epoch = self._epoch
            start = time.monotonic()
            since = self.episode.agent_since or time.clock_gettime(time.CLOCK_BOOTTIME)
            busy = self._keys_handled(timeout, cancelled=lambda: self._epoch != epoch)
            wait = getattr(self.desktop, "wait_caught_up", None)  # a factory's own desktop may not have it
            left = max(0.0, timeout - (time.monotonic() - start))
            busy += wait(since, left, cancelled=lambda: self._epoch != epoch) if wait else []
            if quiet:
                self.desktop.events.wait_settled(quiet=quiet, timeout=5.0)
            return busy

    def _keys_handled(self, timeout: float, cancelled: Callable[[], bool]) -> list[str]:
        """Wait until the app that gets the keys has handled those the agent sent this episode (asked again every
        half second, so that a reset cuts the wait short); what kept it from answering, or []."""
        handled = getattr(self.desktop.input, "handled", None)  # a factory's own desktop may not have it
        if handled is None or self.episode.agent_since is None or self.executor.keys_sent < 0:
            return []  # no keys to wait for
        deadline_at = time.monotonic() + timeout
        while True:
            try:
                answer = handled(max(0.0, min(0.5, deadline_at - time.monotonic())))
            except DesktopError:
                return []  # the desktop is gone: the checker reads what is left
            if keys_read(answer):
                return []
            if cancelled() or time.monotonic() >= deadline_at:
                return [getattr(answer, "why", "") or "the app that gets the keys did not show it had handled them"]

    def observe(self) -> Observation:
        """A fresh observation of the current screen (control plane; not a step)."""
        with self._lock:
            return self._observe()

    def parse_step_item(self, item: Any) -> Any:
        """One step item as its model (see :mod:`hci_envs.env.steps`); raises :class:`InvalidActionError`."""
        return parse_step_item(item, screen=(self.declared_state.width, self.declared_state.height))

    def _run_item(self, item: Any, reply: Observation, actions: list[Any] | None = None) -> ToolOutput:
        """Run one parsed step item; OpenEnv's items also fill their fields of the ``reply``. A canonical
        action's result is appended to ``actions`` (the step says where each one landed once it settled)."""
        from ..tools.rendering import openenv_error, tool_listing, tool_result

        if isinstance(item, ActionBase):
            result = self.executor.run(item, landing=actions is not None)
            if actions is not None:
                actions.append(result)
            return ToolOutput(result.text, result.structured() or None, [result.image] if result.image else [])
        if isinstance(item, ToolCall):
            return self.call_tool(item.tool, item.arguments)
        if isinstance(item, CodeAction):
            result = self.run_code(item.code, timeout=item.timeout, max_output=item.max_output)
            if result.error:
                reply.error = {"code": "CODE_ERROR", "message": result.error}
            return ToolOutput(result.text(), result.data(), result.images)
        if isinstance(item, ListToolsAction):
            reply.tools = tool_listing(self.tools(), style="openenv")
            return ToolOutput(f"{len(reply.tools)} tools")
        if isinstance(item, CallToolAction):  # OpenEnv's CallToolObservation: errors go in ``error``
            reply.tool_name = item.tool_name
            try:
                out = self.call_tool(item.tool_name, item.arguments)
            except DesktopError:
                raise
            except HciEnvsError as exc:
                reply.result, reply.error = None, openenv_error(exc)
                return ToolOutput(f"error: {exc.message}")
            reply.result, reply.error = tool_result(out), None
            return out
        raise InvalidActionError(f"unsupported step item {type(item).__name__}")

    def _observe(self, text: str = "", settle_since: float | None = None, *,
                 landing: list[tuple[int, Any]] | None = None, outcomes: list[dict[str, Any]] | None = None
                 ) -> Observation:
        """The observation; with ``settle_since``, once the screen shows the effect of what ran after it. With
        ``landing`` (the input actions that ran, by their index in the step), each one's landing goes into its
        outcome's data once the settle window has shown it."""
        spec = self.observation_spec
        shot = tree = marks = None
        if (spec.format is not None or spec.accessibility) and self.desktop is not None:
            try:
                if settle_since is not None:
                    self.executor.settle(settle_since)
                for index, result in landing or ():
                    self.executor.land(result)
                    if outcomes and isinstance(outcomes[index].get("data"), dict):
                        outcomes[index]["data"]["landed"] = result.landed
                image, tree, marks = self.executor.observation(spec)
                shot = image_data(image) if image is not None else None
            except DesktopError as exc:
                self.episode.truncate(str(exc))
                return self._truncated_observation([text])
        enforced = self.desktop.limits_enforced() if self.desktop is not None else None
        if enforced:  # what the kernel did for the session's limits since the last observation
            text = _with_limit(text, enforced)
        news, _ = self._handover_news()
        obs = Observation(screenshot=shot, accessibility_tree=tree, marks=marks,
                          text=f"{news}\n{text}" if news and text else news or text, done=self.episode.done)
        if news:
            obs.metadata = {"human": self.handover.status()}
        return obs

    def _truncated_observation(self, texts: list[str]) -> Observation:
        return Observation(text="\n".join(t for t in texts if t), done=True, truncated=True,
                           truncated_reason=self.episode.truncated_reason)

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
            self.episode.truncate(health.reason or "desktop unhealthy")
            return health.reason
        return None

    # -- the end ---------------------------------------------------------------------------------------
    def _session_end_hook(self) -> None:
        try:
            self.on_session_end()
        except Exception:
            log.exception("on_session_end hook failed")

    def close(self) -> None:
        if not self.episode.closed:
            self.interrupt_agent()
        with self._lock:
            if self.episode.closed:
                return
            self.episode.closed = True
            self._people_leave()
            if self.episode.started:
                self._session_end_hook()
            self.code.close()
            self.tasks.close()
            self._checkpoints.close()
            try:
                if self.spare is not None:
                    self.spare.close()
            finally:
                DesktopParts(self.desktop, self.homes, self._lease).close()
                self.desktop = None

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _with_limit(text: str, enforced: str) -> str:
    """``text`` after the line that says what the kernel did for the session's limits."""
    return f"[limit] {enforced}" + (f"\n{text}" if text else "")


def _observes(item: Any) -> bool:
    """Whether a step item looks at the screen (a screenshot, the accessibility tree) rather than acting on it."""
    return isinstance(item, ActionBase) and item.type in ("screenshot", "accessibility_tree")


def _task_spec(task: Any) -> Any:
    """A task given to ``reset`` as a TaskSpec or as its dict."""
    if isinstance(task, dict):
        from ..tasks.spec import parse_task

        return parse_task(task, where="task")
    if not hasattr(task, "checker") or not hasattr(task, "start_state"):
        raise ConfigError(f"task must be a task spec (TaskSpec or its dict), not {type(task).__name__}",
                          field="task")
    return task


def _bounded_timeout(spec: ToolSpec, arguments: dict[str, Any] | None) -> dict[str, Any] | None:
    """Within a step's time limit, a tool's own ``timeout`` (bash, python, CodeAct) gets at most the time left."""
    left = deadline.remaining()
    if left is None or not spec.has_parameter("timeout") or not isinstance(arguments, dict | None):
        return arguments
    arguments = dict(arguments or {})
    given = arguments.get("timeout", spec.default("timeout"))
    if isinstance(given, int | float) and not isinstance(given, bool):
        arguments["timeout"] = min(given, max(left, 0.001))
    return arguments

