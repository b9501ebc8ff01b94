"""Builds an environment's parts: the one place that knows which concrete part plays each role.

:class:`~hci_envs.env.environment.Environment` is a thin facade over the parts it is handed
(:class:`EnvironmentParts`); :func:`assemble` makes them from the options a user passes to an environment's
constructor (``desktop="fake"``, ``spare=True``, ``isolation``...). A test, or a program that wants other
parts (its own desktop factory, an executor with other settings), builds an ``EnvironmentParts`` itself and
passes it as ``parts=``.

What the server plugs in (VNC's input gate, its listeners, the session's URLs) comes in as
:class:`EnvironmentHooks`, also through the constructor: nothing sets an environment's attributes from
outside.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..sandbox.accounts import Isolation, IsolationStatus, resolve_isolation
from ..sandbox.homes import DEFAULT_MAX_SNAPSHOT_BYTES
from ..sandbox.limits import Limits
from ..sandbox.network import NetworkPolicy, egress
from ..tasks.manager import TaskManager
from ..tools.codeact import CodeRunner
from .episode import EpisodeTracker
from .executor import DEFAULT_PASTE_KEYS, Executor
from .handover import DEFAULT_ANSWER_WITHIN, DEFAULT_HOLD_FOR, Handover
from .supervision import DEFAULT_DECIDE_WITHIN, Supervision, supervisor
from .spare import DesktopParts, SpareDesktop

if TYPE_CHECKING:
    from ..desktop.interface import VirtualDesktop

#: Builds a desktop (not yet started) for a start state: ``factory(state, home=, account=, max_processes=)``.
DesktopFactory = Callable[..., "VirtualDesktop"]


@dataclass
class EnvironmentHooks:
    """What a server plugs into an environment it serves, handed to the constructor. The server keeps this
    object and its per-session services (VNC) fill it in; the environment only reads it."""

    #: Why agent input is refused right now (a person holds the desktop), or None.
    input_blocked: Callable[[], str | None] = lambda: None
    #: Where people can answer the agent's ``ask_human`` (the server's VNC viewers and collection page), or
    #: None: nobody can, and the tool says so at once rather than wait for its deadline.
    people: str | None = None
    #: Called with "desktop" when a reset brought another desktop (the spare, or a new display), then with
    #: "reset" after every reset: services such as VNC keep per-episode state.
    listeners: list[Callable[[str], Any]] = field(default_factory=list)
    #: What the environment's state reports besides the episode (the session's id, URLs and agent token).
    info: dict[str, Any] = field(default_factory=dict)
    #: OSWorld's guest API over this environment's desktop, where a server serves one (``serve
    #: --osworld-port``, the default session): OSWorld's tasks run their set-up and evaluator against it.
    osworld_guest_url: str | None = None

    def why_input_blocked(self) -> str | None:
        return self.input_blocked()

    def notify(self, event: str) -> None:
        for listener in list(self.listeners):
            listener(event)


@dataclass
class EnvironmentParts:
    """Everything an environment runs on besides its own lock and declared start state."""

    #: Builds the desktop of an episode (the real Xvfb desktop, or the fake one: the test seam).
    make_desktop: DesktopFactory
    #: Runs canonical actions on the current desktop (it follows the desktop across resets).
    executor: Executor
    #: An agent account and a home of its own, without a desktop yet: the rebuild and the spare share it.
    new_desktop_parts: Callable[[], DesktopParts]
    #: The episode's bookkeeping.
    episode: EpisodeTracker
    #: CodeAct's interpreter (one worker process per episode).
    code: CodeRunner
    #: The task of the episode: reset into it, set it up, score it.
    tasks: TaskManager
    #: Whether the agent side runs as an account of its own.
    isolation: IsolationStatus
    #: The next episode's desktop, prepared in the background; None without one.
    spare: SpareDesktop | None = None
    #: What the kernel lets each episode's agent side take (hci_envs.sandbox.limits).
    limits: Limits = field(default_factory=Limits.default)
    #: What each episode's agent side may connect to (hci_envs.sandbox.network).
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    #: The agent's hand-over to a person (``ask_human``); its end ends the executor's waits.
    handover: Handover = field(default_factory=Handover)
    #: Propose and accept: a person decides on each of the agent's input actions before it runs (off by default).
    supervision: Supervision = field(default_factory=Supervision)


def desktop_factory(choice: str | DesktopFactory | None) -> DesktopFactory:
    """``"xvfb"`` (the default: a real X desktop), ``"forkable"`` (a real X desktop that can be forked live:
    :mod:`hci_envs.fork`), ``"fake"`` (no X; the test seam) or a factory."""
    if callable(choice):
        return choice
    if choice in (None, "xvfb"):
        from ..desktop import Desktop

        return Desktop
    if choice == "fake":
        from ..desktop.fake import FakeDesktop

        return FakeDesktop
    if choice == "forkable":
        from ..fork import ForkableDesktop

        return ForkableDesktop
    raise ConfigError(f"desktop must be 'xvfb', 'forkable', 'fake' or a factory, not {choice!r}", field="desktop")


def assemble(
    env: Any,
    hooks: EnvironmentHooks,
    *,
    paste_keys: str = DEFAULT_PASTE_KEYS,
    isolation: Isolation = "auto",
    max_agent_processes: int = 0,
    limits: Limits | dict[str, Any] | None = None,
    network: NetworkPolicy | str | list[str] | None = None,
    max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES,
    desktop: str | DesktopFactory | None = None,
    spare: bool = False,
    human_answer_within: float = DEFAULT_ANSWER_WITHIN,
    human_hold_for: float = DEFAULT_HOLD_FOR,
    pause_clock_for_people: bool = False,
    supervise: bool = False,
    decide_within: float = DEFAULT_DECIDE_WITHIN,
) -> EnvironmentParts:
    """The parts of ``env`` (an Environment being constructed: the parts that call back into it, CodeAct's
    tool calls and the spare's preparation, get its bound methods, used only once it is built)."""
    status = resolve_isolation(isolation)
    factory = desktop_factory(desktop)
    # the kernel's limits on each session's agent side: the machine's defaults, or what was asked
    enforced = limits if isinstance(limits, Limits) else Limits.from_options(limits)
    policy = NetworkPolicy.make(network)
    if network is not None and policy.mode != "open":  # asked for: it holds, or the environment is not made
        if status.mode != "uid":
            raise ConfigError(f"network {policy.mode!r} confines agent accounts, and there are none here: "
                              f"{status.reason}", field="network")
        reason = egress().unavailable()
        if reason:
            raise ConfigError(f"network {policy.mode!r} cannot be enforced here: {reason}", field="network")

    handover = Handover(answer_within=human_answer_within, hold_for=human_hold_for,
                        pause_clock=pause_clock_for_people)
    supervision = Supervision(decide_within=decide_within)
    supervision.turn(supervise)

    def input_blocked() -> str | None:  # the agent's own request first: it paused itself
        return handover.agent_blocked() or hooks.why_input_blocked()

    def make_desktop(state: Any, *, home: str, account: Any) -> VirtualDesktop:
        return factory(state, home=home, account=account, max_processes=max_agent_processes, limits=enforced,
                       network=policy)

    executor = Executor(None, paste_keys=paste_keys, input_blocked=input_blocked, resumed=handover.agent_may_act)
    # only the agent's own calls are proposed: not a task's set-up, nor a replay (env.agent_acting says which)
    executor.supervise = supervisor(supervision, executor, lambda: env.agent_acting)
    return EnvironmentParts(
        make_desktop=make_desktop,
        executor=executor,
        new_desktop_parts=lambda: DesktopParts.new(status, max_snapshot_bytes, enforced.disk),
        episode=EpisodeTracker(),
        code=CodeRunner(call_tool=env.call_tool, tools=env.code_tools,
                        contained=not type(env).agent_can_run_programs()),
        tasks=TaskManager(),
        isolation=status,
        spare=SpareDesktop(env.prepare_spare) if spare else None,
        limits=enforced,
        network=policy,
        handover=handover,
        supervision=supervision,
    )
