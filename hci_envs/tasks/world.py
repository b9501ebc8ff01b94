"""World = data (tasks) + environment + evals + rewards.

    world = World("hci_envs/tasks/builtin.jsonl")
    task = world.next_task()
    obs = world.reset(task)                 # the task's start state, home files and setup steps
    ... agent acts through world.env ...
    world.score(task).value                 # the reward: the task's checker on the resulting world
    report = world.run(agent, report_dir="out")   # every task: reset, agent, score; JSON + Markdown + HTML

An agent is any callable ``agent(observation, context) -> action | list of actions | None`` (None: done).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import plugins
from ..errors import HciEnvsError
from ..protocol import Observation
from .scoring import Score, score
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


@dataclass
class TaskResult:
    task: str
    score: float
    success: bool
    steps: int
    seconds: float
    details: list[str] = field(default_factory=list)
    error: str | None = None
    screenshot: str | None = None
    episode: str | None = None
    video: str | None = None  # the recorded episode's video (World(record_dir=...) with PyAV installed)


@dataclass
class RunReport:
    results: list[TaskResult]

    def summary(self) -> dict[str, Any]:
        n = len(self.results) or 1
        return {
            "tasks": len(self.results),
            "success_rate": round(sum(r.success for r in self.results) / n, 4),
            "mean_score": round(sum(r.score for r in self.results) / n, 4),
            "mean_steps": round(sum(r.steps for r in self.results) / n, 2),
            "mean_seconds": round(sum(r.seconds for r in self.results) / n, 3),
            "errors": sum(1 for r in self.results if r.error),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "results": [asdict(r) for r in self.results]}


class World:
    def __init__(self, tasks: str | Path | Iterable[TaskSpec] = BUILTIN, env: Any = None, *,
                 env_name: str = "workstation", record_dir: str | Path | None = None,
                 record_video: bool | None = None) -> None:
        self.tasks = load_tasks(tasks) if isinstance(tasks, str | Path) else list(tasks)
        if not self.tasks:
            raise HciEnvsError("a world needs at least one task")
        if isinstance(tasks, str | Path):
            warn_if_readable_by_agents(Path(tasks))
        self._own_env = env is None
        self.env = env if env is not None else plugins.load_env_class(env_name)()
        self.record_dir = Path(record_dir) if record_dir else None
        self.record_video = record_video  # None: a video of each recorded episode if PyAV is installed
        self._next = 0
        self._templates = Path(tempfile.mkdtemp(prefix="hci-envs-tasks-"))
        self._agent_thread: ThreadPoolExecutor | None = None

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
    def start_state(self, task: TaskSpec) -> dict[str, Any]:
        """The task's start state with its home files as the home template and the placeholders filled."""
        state = task.start_state.model_dump()
        if task.home_files:
            # One folder per content, never rewritten: a spare desktop may be copying it in the background
            # while the next reset asks for it, and equal content keeps the start state (the spare's key) equal.
            digest = hashlib.sha256(json.dumps(task.home_files, sort_keys=True).encode()).hexdigest()[:16]
            template = self._templates / f"{task.id}-{digest}"
            if not template.exists():
                partial = Path(tempfile.mkdtemp(dir=self._templates, prefix=".partial-"))
                for relative, content in task.home_files.items():
                    target = partial / relative
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(content, encoding="utf-8")
                os.replace(partial, template)
            state["home_template"] = str(template)
        # {home} stays as it is: the desktop fills it in at launch with the home of the account that runs the
        # app (a spare desktop has a home of its own)
        fill = {"{python}": sys.executable}

        def filled(text: str) -> str:
            for key, value in fill.items():
                text = text.replace(key, value)
            return text

        for app in state["apps"]:
            command = app["command"]
            app["command"] = filled(command) if isinstance(command, str) else [filled(part) for part in command]
        return state

    def reset(self, task: TaskSpec) -> Observation:
        obs = self.env.reset(episode_id=task.id, start_state=self.start_state(task))
        for item in task.setup:
            self.env.perform(item)
        return obs if not task.setup else self.env.observe()

    def score(self, task: TaskSpec, settle: float = 0.3) -> Score:
        """Score the world once it has settled (apps catch up with the last input before they draw)."""
        if self.env.desktop is not None and settle:
            self.env.desktop.events.wait_settled(quiet=settle, timeout=5.0)
        return score(task.checker, self.env)

    # -- the runner ------------------------------------------------------------------------------------
    def run(self, agent: Agent, *, tasks: Iterable[TaskSpec] | None = None, report_dir: str | Path | None = None,
            progress: bool = True) -> RunReport:
        """Every task in turn: reset, the agent until it is done or a limit is reached, the checker. A task
        that fails (its reset, the agent, a step, the checker) is reported with its error and the run goes
        on; the reports are written even when the run is interrupted."""
        chosen = list(tasks) if tasks is not None else self.tasks
        out = Path(report_dir) if report_dir else None
        if out:
            (out / "screens").mkdir(parents=True, exist_ok=True)
        report = RunReport([])
        try:
            for n, task in enumerate(chosen, start=1):
                result = self._run_one(agent, task, out)
                report.results.append(result)
                if progress:
                    mark = "ok " if result.success else ("ERR" if result.error else "-- ")
                    print(f"[{n:>3}/{len(chosen)}] {mark} {task.id:<28} score {result.score:.2f}  "
                          f"{result.steps:>3} steps  {result.seconds:6.1f}s", file=sys.stderr, flush=True)
        finally:
            if out:
                write_reports(report, out)
        return report

    def _ask(self, agent: Agent, obs: Observation, context: AgentContext, seconds: float) -> Any:
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

    def _run_one(self, agent: Agent, task: TaskSpec, out: Path | None) -> TaskResult:
        started = time.monotonic()
        steps = 0
        recorder = None
        error = None
        ready = False
        try:
            obs = self.reset(task)
            ready = True
            if self.record_dir is not None:
                video = {} if self.record_video is None else {"video": self.record_video}
                recorder = plugins.load(plugins.RECORDERS, "episodes")(
                    self.env, None, self.record_dir, source="agent", name=task.id, task=task.id, **video).start()
            while steps < task.max_steps and not obs.done:
                remaining = task.time_limit - (time.monotonic() - started)
                if remaining <= 0:
                    break
                action = self._ask(agent, obs, AgentContext(task, steps, self.env), remaining)
                if action is None:
                    break
                obs = self.env.step(action)
                steps += 1
        except Exception as exc:  # noqa: BLE001 - any failure of one task is that task's result, not the run's
            error = _describe(exc) if ready else f"the task did not start: {_describe(exc)}"
        finally:
            recorded = recorder.stop("task ended") if recorder is not None else {}
        if not ready:  # nothing was done in this task's world: there is nothing to score
            result_score = Score(0.0, False, [])
        else:
            try:
                result_score = self.score(task)
            except Exception as exc:  # noqa: BLE001
                result_score, error = Score(0.0, False, []), error or f"scoring failed: {_describe(exc)}"
        screenshot = None
        if out is not None and self.env.desktop is not None:
            try:
                image = self.env.desktop.screen.capture(fmt="png", max_side=960)
                screenshot = f"screens/{task.id}.png"
                (out / screenshot).write_bytes(image.data)
            except HciEnvsError:
                screenshot = None
        return TaskResult(task.id, result_score.value, result_score.passed, steps,
                          round(time.monotonic() - started, 3), result_score.details, error, screenshot,
                          str(recorder.path) if recorder is not None else None, recorded.get("video"))

    def close(self) -> None:
        if self._agent_thread is not None:
            self._agent_thread.shutdown(wait=False)
        if self._own_env:
            self.env.close()
        shutil.rmtree(self._templates, ignore_errors=True)

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


def write_reports(report: RunReport, out: Path) -> None:
    """report.json, report.md and report.html (each with the final screenshot of every task)."""
    data = report.to_dict()
    (out / "report.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    summary = data["summary"]
    lines = ["# Task run", "", f"{summary['tasks']} tasks, success rate {summary['success_rate']:.0%}, "
             f"mean score {summary['mean_score']:.2f}, {summary['mean_steps']} steps and "
             f"{summary['mean_seconds']:.1f}s per task on average.", "",
             "| task | score | steps | seconds | details |", "|---|---|---|---|---|"]
    for r in report.results:
        details = "; ".join(r.details) + (f" ERROR {r.error}" if r.error else "")
        lines.append(f"| {r.task} | {r.score:.2f} | {r.steps} | {r.seconds:.1f} | {details.replace('|', '/')} |")
    lines.append("")
    for r in report.results:
        if r.screenshot or r.video:
            lines += [f"## {r.task}", ""]
        if r.screenshot:
            lines += [f"![final screen of {r.task}]({r.screenshot})", ""]
        if r.video:
            lines += [f"[video of the episode]({_link(r.video, out)})", ""]
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    rows = []
    for r in report.results:
        image = ""
        if r.screenshot and (out / r.screenshot).exists():
            encoded = base64.b64encode((out / r.screenshot).read_bytes()).decode()
            image = f'<img alt="final screen of {r.task}" width="480" src="data:image/png;base64,{encoded}">'
        if r.video:
            src = _escape(_link(r.video, out)).replace('"', "&quot;")
            image += (f'<br><video controls preload="metadata" width="480" src="{src}"></video>'
                      f'<br><a href="{src}">video of the episode</a>')
        status = "pass" if r.success else "fail"
        rows.append(f'<tr class="{status}"><td>{r.task}</td><td>{r.score:.2f}</td><td>{r.steps}</td>'
                    f"<td>{r.seconds:.1f}</td><td>{_escape('; '.join(r.details) + (r.error or ''))}</td>"
                    f"<td>{image}</td></tr>")
    html = (
        "<!doctype html><meta charset='utf-8'><title>Task run</title>"
        "<style>body{font-family:sans-serif}td{vertical-align:top;padding:4px}.pass td:nth-child(2){color:green}"
        ".fail td:nth-child(2){color:#b00}</style>"
        f"<h1>Task run</h1><p>{summary['tasks']} tasks, success rate {summary['success_rate']:.0%}, mean score "
        f"{summary['mean_score']:.2f}</p><table><tr><th>task</th><th>score</th><th>steps</th><th>seconds</th>"
        f"<th>details</th><th>final screen and video</th></tr>{''.join(rows)}</table>"
    )
    (out / "report.html").write_text(html, encoding="utf-8")


def _link(path: str, out: Path) -> str:
    """``path`` as a link from the reports in ``out``: relative, so the folders can be moved together."""
    import os
    from urllib.parse import quote

    try:
        relative = os.path.relpath(Path(path).resolve(), out.resolve())
    except ValueError:  # another drive
        relative = str(Path(path).resolve())
    return quote(relative)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
