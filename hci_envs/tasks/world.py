"""World = data (tasks) + environment + evals + rewards.

    world = World("hci_envs/tasks/builtin.jsonl")
    task = world.next_task()
    obs = world.reset(task)                 # the task's start state, home files and setup steps
    ... agent acts through world.env ...
    world.score(task).value                 # the reward: the task's checker on the resulting world
    report = world.run(agent, report_dir="out")   # every task: reset, agent, score; JSON + Markdown + HTML
    World(tasks, sessions=3).run(agent)           # three desktops at once, each task on one of them

An agent is any callable ``agent(observation, context) -> action | list of actions | None`` (None: done).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import plugins
from ..errors import ConfigError, HciEnvsError, MissingDependencyError
from ..protocol import Observation
from .needs import require_checkers
from .privacy import answer_paths, keep_answers_private
from .reports import RunReport, TaskResult, write_reports
from .scoring import Score
from .spec import TaskSpec, load_tasks

log = logging.getLogger(__name__)

BUILTIN = Path(__file__).with_name("builtin.jsonl")
Agent = Callable[[Observation, "AgentContext"], Any]


@dataclass
class AgentContext:
    """What an agent is told besides the observation. ``env`` gives privileged agents (scripted oracles)
    the session; a learning agent should act through observations and actions only."""

    task: TaskSpec
    step: int
    env: Any

    def read_json(self, relative: str) -> Any:
        """A JSON file of the session's home (the task apps write their state there), or None."""
        try:
            return json.loads((self.env.home / relative).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None


class World:
    def __init__(self, tasks: str | Path | Iterable[TaskSpec] = BUILTIN, env: Any = None, *,
                 env_name: str = "workstation", record_dir: str | Path | None = None,
                 record_video: bool | None = None, sessions: int = 1,
                 env_factory: Callable[[], Any] | None = None) -> None:
        self.tasks = load_tasks(tasks) if isinstance(tasks, str | Path) else list(tasks)
        if not self.tasks:
            raise HciEnvsError("a world needs at least one task")
        from ..sandbox.accounts import resolve_isolation

        if resolve_isolation().mode == "uid":  # the answers: not for the agents' accounts to read
            files = [Path(tasks)] if isinstance(tasks, str | Path) else []
            builtin = any(Path(f).resolve() == BUILTIN.resolve() for f in files)
            keep_answers_private(answer_paths(files, builtin=builtin))
        elif isinstance(tasks, str | Path):
            warn_if_readable_by_agents(Path(tasks))
        require_checkers(self.tasks, "World")
        if sessions < 1:
            raise ConfigError("sessions must be at least 1", field="sessions")
        if sessions > 1 and env is not None and env_factory is None:
            raise ConfigError("a world of several sessions given one env needs env_factory for the others",
                              field="env_factory")
        self._own_env = env is None
        self.env_factory = env_factory or (lambda: plugins.load_env_class(env_name)())
        self.env = env if env is not None else self.env_factory()
        #: How many desktops ``run`` uses at once, each running one task at a time.
        self.sessions = sessions
        self.record_dir = Path(record_dir) if record_dir else None
        self.record_video = record_video  # None: a video of each recorded episode if PyAV is installed
        self._next = 0
        self._runner = _Runner(self, self.env)
        self._extra: list[_Runner] = []  # the other sessions' runners, made on first use

    def next_task(self) -> TaskSpec | None:
        """The next task, in order; None after the last."""
        if self._next >= len(self.tasks):
            return None
        task = self.tasks[self._next]
        self._next += 1
        return task

    def task(self, task_id: str) -> TaskSpec:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise HciEnvsError(f"no task {task_id!r}")

    # -- one task --------------------------------------------------------------------------------------
    def reset(self, task: TaskSpec, env: Any = None) -> Observation:
        """Reset ``env`` (default: the world's) into ``task``: its start state, home files and setup steps
        (see :class:`~hci_envs.tasks.manager.TaskManager`, the environment's task part)."""
        env = env if env is not None else self.env
        return env.reset(task=task)

    def score(self, task: TaskSpec, settle: float = 0.3, catch_up: float = 10.0, env: Any = None) -> Score:
        """Score ``task`` on ``env`` once the world has caught up with the agent (see
        :meth:`TaskManager.score <hci_envs.tasks.manager.TaskManager.score>`)."""
        env = env if env is not None else self.env
        return env.tasks.score(env, task, settle=settle, catch_up=catch_up)

    # -- the runner ------------------------------------------------------------------------------------
    def run(self, agent: Agent, *, tasks: Iterable[TaskSpec] | None = None, report_dir: str | Path | None = None,
            progress: bool = True, sessions: int | None = None) -> RunReport:
        """Every task: reset, the agent until it is done or a limit is reached, the checker. With several
        ``sessions``, that many desktops run tasks at once (each task on one; the agent is called from
        several threads). A task that fails (its reset, the agent, a step, the checker) is reported with its
        error and the run goes on; the reports, in task order, are written even when the run is interrupted."""
        chosen = list(tasks) if tasks is not None else self.tasks
        out = Path(report_dir) if report_dir else None
        if out:
            (out / "screens").mkdir(parents=True, exist_ok=True)
        count = max(1, min(sessions or self.sessions, len(chosen)))
        while len(self._extra) < count - 1:
            self._extra.append(_Runner(self, self.env_factory()))
        runners = [self._runner, *self._extra[:count - 1]]
        results: list[TaskResult | None] = [None] * len(chosen)
        pending = list(enumerate(chosen))
        lock = threading.Lock()
        done = [0]

        def work(runner: _Runner) -> None:
            while True:
                with lock:
                    if not pending:
                        return
                    index, task = pending.pop(0)
                result = runner.run_one(agent, task, out)
                with lock:
                    results[index] = result
                    done[0] += 1
                    if progress:
                        mark = "ok " if result.success else ("ERR" if result.error else "-- ")
                        print(f"[{done[0]:>3}/{len(chosen)}] {mark} {task.id:<32} score {result.score:.2f}  "
                              f"{result.steps:>3} steps  {result.seconds:6.1f}s", file=sys.stderr, flush=True)

        try:
            if count == 1:
                work(runners[0])
            else:
                threads = [threading.Thread(target=work, args=(r,), name=f"hci-envs-world-{i}", daemon=True)
                           for i, r in enumerate(runners)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    while thread.is_alive():
                        thread.join(0.5)  # in steps, so that Ctrl-C reaches this thread
        finally:
            report = RunReport([r for r in results if r is not None])
            if out:
                write_reports(report, out)
        return report

    def close(self) -> None:
        for runner in [self._runner, *self._extra]:
            runner.close()
        for runner in self._extra:
            runner.env.close()
        if self._own_env:
            self.env.close()

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Runner:
    """One session of a run: its environment, and the thread its agent is asked in."""

    def __init__(self, world: World, env: Any) -> None:
        self.world = world
        self.env = env
        self._agent_thread: ThreadPoolExecutor | None = None

    def ask(self, agent: Agent, obs: Observation, context: AgentContext, seconds: float) -> Any:
        """The agent's next actions, within the task's remaining time. An agent that overruns is stopped: the
        waits it has the environment doing are cut short, and :class:`AgentOverrun` is raised inside its thread
        (at its next Python instruction, so a loop or a sleep in steps ends). One stuck longer than
        ``STOP_GRACE`` in a single call (a C call, a long command) is left behind in its thread, said in the
        log, and the next task gets a fresh thread."""
        if self._agent_thread is None:
            self._agent_thread = ThreadPoolExecutor(1, thread_name_prefix="hci-envs-agent")
        ident: list[int] = []

        def ask() -> Any:
            ident.append(threading.get_ident())
            return agent(obs, context)

        future = self._agent_thread.submit(ask)
        try:
            return future.result(timeout=max(seconds, 0.001))
        except FutureTimeout:
            executor = getattr(self.env, "executor", None)
            if executor is not None:
                executor.interrupt.set()  # cut short the waits it has the environment doing
            if ident and _raise_in_thread(ident[0], AgentOverrun):
                try:
                    future.result(timeout=STOP_GRACE)
                except BaseException:  # noqa: BLE001 - AgentOverrun, or whatever the agent raised on its way out
                    pass
            if executor is not None and future.done():
                executor.interrupt.clear()
            if not future.done():
                log.warning("the agent did not stop within %gs of its time limit; its thread is left behind",
                            STOP_GRACE)
                self._agent_thread.shutdown(wait=False)
                self._agent_thread = None
            raise TimeoutError("the agent did not answer within the task's time limit") from None

    def run_one(self, agent: Agent, task: TaskSpec, out: Path | None) -> TaskResult:
        world, env = self.world, self.env
        started = time.monotonic()
        # the task's time limit counts the agent's time: its clock may stand still while it waits for a person
        handover = getattr(env, "handover", None)
        clock = handover.agent_clock if handover is not None else time.monotonic
        started_agent = clock()
        steps = 0
        recorder = None
        error = None
        ready = False
        try:
            obs = world.reset(task, env)
            ready = True
            if world.record_dir is not None:
                video = {} if world.record_video is None else {"video": world.record_video}
                recorder = plugins.load(plugins.RECORDERS, "episodes")(
                    env, None, world.record_dir, source="agent", name=task.id, task=task.id, **video).start()
            while steps < task.max_steps and not obs.done:
                remaining = task.time_limit - (clock() - started_agent)
                if remaining <= 0:
                    break
                action = self.ask(agent, obs, AgentContext(task, steps, env), remaining)
                if action is None:
                    break
                obs = env.step(action)
                steps += 1
        except Exception as exc:  # noqa: BLE001 - any failure of one task is that task's result, not the run's
            error = _describe(exc) if ready else f"the task did not start: {_describe(exc)}"
        finally:
            recorded = recorder.stop("task ended") if recorder is not None else {}
        # What the agent last saw, before the checker (a browser check ends the browser): the final screen,
        # and the tree, kept for a failed task.
        screenshot = self._final_screen(task, out) if ready else None
        tree = self._tree() if ready and out is not None else None
        if not ready:  # nothing was done in this task's world: there is nothing to score
            result_score = Score(0.0, False, [])
        else:
            try:
                result_score = world.score(task, env=env)
            except MissingDependencyError:
                raise  # the machine's lack, not the task's result: no zero for it (hci_envs.tasks.needs)
            except Exception as exc:  # noqa: BLE001
                result_score, error = Score(0.0, False, []), error or f"scoring failed: {_describe(exc)}"
        return TaskResult(task.id, result_score.value, result_score.passed, steps,
                          round(time.monotonic() - started, 3), result_score.details, error, screenshot,
                          str(recorder.path) if recorder is not None else None, recorded.get("video"),
                          task.app, task.template, None if result_score.passed else tree)

    def _final_screen(self, task: TaskSpec, out: Path | None) -> str | None:
        if out is None or self.env.desktop is None:
            return None
        try:
            image = self.env.desktop.screen.capture(fmt="png", max_side=960)
        except HciEnvsError:
            return None
        name = f"screens/{task.id}.png"
        (out / name).write_bytes(image.data)
        return name

    def _tree(self) -> str | None:
        from ..desktop.a11y_model import Query

        executor = getattr(self.env, "executor", None)
        if executor is None:
            return None
        try:
            return executor.read_tree(Query(max_nodes=400)).outline(limit=400)
        except HciEnvsError as exc:
            return f"(no tree: {exc.message})"

    def close(self) -> None:
        if self._agent_thread is not None:
            self._agent_thread.shutdown(wait=False)


class AgentOverrun(BaseException):
    """Raised inside an agent's thread when it overruns its task's time limit (a BaseException, so that an
    agent's own ``except Exception`` does not swallow it)."""


#: Seconds an overrunning agent has to stop once told to.
STOP_GRACE = 2.0


def _raise_in_thread(ident: int, exc_type: type[BaseException]) -> bool:
    """Raise ``exc_type`` in the thread ``ident`` at its next Python instruction (CPython's
    PyThreadState_SetAsyncExc); whether the thread was found."""
    import ctypes

    found = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc_type))
    if found > 1:  # more than one thread state changed: undo, as the C API asks
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)
        return False
    return found == 1


def warn_if_readable_by_agents(path: Path) -> bool:
    """Say so when a task file, which holds its checkers' answers, is readable by other users (the agents'
    accounts among them); returns whether it is."""
    import logging
    import stat

    try:
        readable = bool(path.stat().st_mode & stat.S_IROTH) and all(
            parent.stat().st_mode & stat.S_IXOTH for parent in path.resolve().parents)
    except OSError:
        return False
    if readable:
        message = (f"the task file {path} is readable by every user, the agents' accounts included: they could "
                   f"read the checkers' answers. Make it private: chmod go-r {path}")
        logging.getLogger(__name__).warning(message)
        print(f"hci-envs: WARNING: {message}", file=sys.stderr, flush=True)
    return readable


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc.message if isinstance(exc, HciEnvsError) else exc}"
