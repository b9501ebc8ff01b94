"""The collection page: a web page for the people who record demonstrations, on the server's own port.

    {base}/collect/{session}/{secret}/        the page (``collect_url`` in the session's state)
    {base}/collect/{session}/{secret}/api/... what it calls

The secret is the session's VNC **control** secret (the one in ``vnc_url``). Every route lives under the
secret-bearing prefix and goes through the page's guard (:mod:`.collect_guard`).

The page shows the task's instruction, the live desktop (noVNC's RFB module from ``/vnc/``), record, pause,
resume, stop and discard, the actions as the recorder writes them to ``actions.jsonl``, and the session's
episodes (those recorded in this session since it was made, from the page, the CLI or the control plane;
never other sessions'), each with its video and a "replay and verify" button: the desktop is reset to the
episode's start (its task's world when the task is in the server's suite), the actions are replayed into it
while people's input is ignored, and the page shows every step's screen match, the final one, and the task's
check when there is a task.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import anyio
from fastapi import APIRouter, Body, Depends, FastAPI, Query
from fastapi.responses import FileResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from .. import plugins
from ..errors import ConfigError, EnvironmentStateError, EpisodeNotFoundError, HciEnvsError, TaskNotFoundError
from . import recording_routes
from .collect_guard import episode_path, page_session
from .core import HciServer
from .deps import get_server
from .handover_routes import HandoverCommand
from .handover_routes import run_command as run_handover
from .sessions import Session
from .supervision_routes import SupervisionCommand
from .supervision_routes import run_command as run_supervision
from .vnc_routes import control_status

log = logging.getLogger(__name__)

PREFIX = "/collect/{session_id}/{secret}"
#: The page's own files (served from the package: no build step, nothing from elsewhere).
ASSETS = {"collect.js": "text/javascript", "collect.css": "text/css"}
#: What the page's HTML may load: its own origin only; frames of it nowhere.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; media-src 'self'; "
        "img-src 'self' data: blob:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "Referrer-Policy": "no-referrer",  # the URL holds the secret
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}


@dataclass
class CollectState:
    """What the page keeps per session: the replay under way, and the last report of each episode."""

    replaying: str | None = None
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)


def collect_state(session: Session) -> CollectState:
    if session.collect is None:
        session.collect = CollectState()
    return session.collect


def collect_url(server: HciServer, session: Session) -> str:
    return f"{server.config.base_url()}/collect/{session.id}/{session.vnc.control_password}/"


def attach_collect(server: HciServer, session: Session) -> dict[str, Any]:
    """The per-session service: the page's URL in the session's state (needs the VNC side, attached first)."""
    if session.vnc is None:
        return {}
    collect_state(session)
    return {"collect_url": collect_url(server, session)}


# -- episodes -------------------------------------------------------------------------------------------------
def list_episodes(session: Session) -> list[dict[str, Any]]:
    """This session's episodes, newest first, as the page lists them."""
    summarize_episode = plugins.load(plugins.RECORDERS, "summarize_episode")
    state = collect_state(session)
    recorder = session.recorder
    out = []
    for path in reversed(session.episodes):
        summary = summarize_episode(path)
        if summary is None:
            continue  # deleted, or not written yet
        if recorder is not None and recorder.path == path:  # being written: the recorder knows better
            live = recorder.status()
            summary.update(state=live["state"], actions=live["actions"], frames=live["frames"])
        summary["replay"] = state.reports.get(path.name)
        out.append(summary)
    return out


def current_task(server: HciServer, session: Session) -> dict[str, Any] | None:
    """The session's task (it was reset into one), else the task the recording names."""
    task = session.env.tasks.task
    if task is not None:
        return {"id": task.id, "instruction": task.instruction}
    recorder = session.recorder
    if recorder is not None and recorder.state in ("recording", "paused") and recorder.task:
        try:
            known = server.task_suite.tasks().get(recorder.task)
        except HciEnvsError:
            known = None
        return {"id": recorder.task, "instruction": known.instruction if known is not None else None}
    return None


def page_state(server: HciServer, session: Session, episode: str | None, cursor: int) -> dict[str, Any]:
    """Everything the page shows that changes: the recording, the new actions, the task, the replay."""
    recorder = session.recorder
    status = recording_routes.status(session)
    name = recorder.path.name if recorder is not None and recorder.path.is_dir() else None
    status["episode"] = name
    items: list[dict[str, Any]] = []
    restart = False
    if name is not None:
        read_actions = plugins.load(plugins.RECORDERS, "read_actions")
        if episode != name:
            cursor = 0  # a new episode: its actions from the start
        try:
            items, cursor = read_actions(recorder.path, cursor)
        except ConfigError:  # the file was written again (a review trimmed it): the page lists it anew
            items, cursor = read_actions(recorder.path, 0)
            restart = True
    return {
        "session": session.id,
        "recording": status,
        "actions": {"episode": name, "cursor": cursor, "items": items, "restart": restart},
        "task": current_task(server, session),
        "replaying": collect_state(session).replaying,
        "control": control_status(session),
        "human": session.env.handover.status(),
        "supervision": session.env.supervision.status(),
        "screen": {"width": session.env.declared_state.width, "height": session.env.declared_state.height},
        "episodes": [p.name for p in reversed(session.episodes) if p.is_dir()],
    }


async def delete_episode(server: HciServer, session: Session, path: Path) -> None:
    """Delete the episode's folder, and forget it in the session."""
    delete_folder = plugins.load(plugins.RECORDERS, "delete_episode")
    await anyio.to_thread.run_sync(delete_folder, Path(server.config.episodes_dir), path)
    session.episodes[:] = [p for p in session.episodes if p != path]
    collect_state(session).reports.pop(path.name, None)
    if session.recorder is not None and session.recorder.path == path:
        session.recorder = None


def _recording(session: Session) -> bool:
    return session.recorder is not None and session.recorder.state in ("recording", "paused")


def _episode_state(session: Session, path: Path) -> str:
    """The recorder's state of the episode at ``path`` (recording, paused, stopping) if it is the session's
    latest recording, else "stopped"."""
    recorder = session.recorder
    return recorder.status()["state"] if recorder is not None and recorder.path == path else "stopped"


# -- routes ---------------------------------------------------------------------------------------------------
router = APIRouter(include_in_schema=False)


class RecordingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: Literal["start", "pause", "resume", "stop", "discard"]
    mask_text: bool = False


class TaskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: A task id of the server's suite; None: back to the session's own start state.
    task: str | None


def _page_file(name: str) -> bytes:
    return resources.files(__package__).joinpath("collect_page", name).read_bytes()


@router.get(PREFIX)
async def page_without_slash(secret: str, session: Session = Depends(page_session)) -> Response:
    # relative, so that it holds behind a proxy that serves the server under a path of its own
    return RedirectResponse(f"{secret}/", headers={"Referrer-Policy": "no-referrer"})


@router.get(PREFIX + "/")
async def page(session: Session = Depends(page_session)) -> Response:
    html = await anyio.to_thread.run_sync(_page_file, "index.html")
    return Response(html, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


@router.get(PREFIX + "/assets/{name}")
async def asset(name: str, session: Session = Depends(page_session)) -> Response:
    if name not in ASSETS:
        return Response(status_code=404)
    data = await anyio.to_thread.run_sync(_page_file, name)
    return Response(data, media_type=f"{ASSETS[name]}; charset=utf-8", headers=PAGE_HEADERS)


@router.get(PREFIX + "/api/state")
async def get_state(episode: str | None = Query(None, max_length=300), cursor: int = Query(0, ge=0),
                    session: Session = Depends(page_session), server: HciServer = Depends(get_server)) -> Response:
    """The recording, the actions written since ``cursor`` in ``episode``, the task, the replay under way."""
    state = await anyio.to_thread.run_sync(page_state, server, session, episode, cursor)
    return _json(state)


@router.get(PREFIX + "/api/tasks")
async def get_tasks(session: Session = Depends(page_session), server: HciServer = Depends(get_server)) -> Response:
    """The server's task suite (id and instruction), for the collector to pick one."""
    try:
        tasks = await anyio.to_thread.run_sync(server.task_suite.tasks)
    except HciEnvsError as exc:
        return _json({"tasks": [], "error": exc.message})
    return _json({"tasks": [{"id": t.id, "instruction": t.instruction} for t in tasks.values()]})


@router.post(PREFIX + "/api/task")
async def post_task(request: TaskRequest = Body(...), session: Session = Depends(page_session),
                    server: HciServer = Depends(get_server)) -> Response:
    """Reset the desktop into a task of the server's suite (or, with null, back to the session's own start)."""
    if _recording(session):
        raise EnvironmentStateError("stop the recording first: a reset would end it")
    if collect_state(session).replaying:
        raise EnvironmentStateError("a replay is running; wait for it to end")
    if request.task is not None:
        tasks = await anyio.to_thread.run_sync(server.task_suite.tasks)
        if request.task not in tasks:  # ids only: a whole task spec is the control plane's to send
            raise TaskNotFoundError(f"no task {request.task!r} in the server's suite", task=request.task)
    await server.reset_session(session, {"task": request.task} if request.task is not None else {})
    return _json({"task": current_task(server, session)})


@router.post(PREFIX + "/api/recording")
async def post_recording(request: RecordingRequest = Body(...), session: Session = Depends(page_session),
                         server: HciServer = Depends(get_server)) -> Response:
    """Record (noting the session's task), pause, resume, stop; discard stops and deletes the episode."""
    state = collect_state(session)
    if request.command == "start":
        if state.replaying:
            raise EnvironmentStateError("a replay is running; wait for it to end")
        task = current_task(server, session)
        # the demonstrator reviews the episode (trim, verdict) and submits it before any dataset holds it
        command = recording_routes.RecordingCommand(command="start", mask_text=request.mask_text,
                                                    task=task["id"] if task else None, review=True)
        return _json(await recording_routes.command(server, session, command))
    if request.command == "discard":
        recorder = session.recorder
        if recorder is None or not _recording(session):
            raise EnvironmentStateError("nothing is being recorded in this session")
        await anyio.to_thread.run_sync(recorder.stop, "discarded")
        await delete_episode(server, session, recorder.path)
        return _json({"state": "none", "discarded": recorder.path.name})
    command = recording_routes.RecordingCommand(command=request.command)
    return _json(await recording_routes.command(server, session, command))


@router.post(PREFIX + "/api/supervision")
async def post_supervision(command: SupervisionCommand = Body(...),
                           session: Session = Depends(page_session)) -> Response:
    """Turn propose-and-accept on or off; accept, edit or override the agent's proposed action (then done)."""
    return _json(await run_supervision(session, command))


@router.get(PREFIX + "/api/human")
async def get_human(session: Session = Depends(page_session)) -> Response:
    """The agent's hand-over (what the noVNC page's banner shows to control viewers)."""
    return _json(session.env.handover.status())


@router.post(PREFIX + "/api/human")
async def post_human(command: HandoverCommand = Body(...), session: Session = Depends(page_session)) -> Response:
    """Take the desktop the agent asked a person for, or hand it back with a note for the agent."""
    return _json(await run_handover(session, command))


@router.get(PREFIX + "/api/episodes")
async def get_episodes(session: Session = Depends(page_session)) -> Response:
    """This session's episodes, newest first: task, counts, video, the last replay's report."""
    return _json({"episodes": await anyio.to_thread.run_sync(list_episodes, session)})


@router.get(PREFIX + "/api/episodes/{name}/actions")
async def get_actions(name: str, session: Session = Depends(page_session)) -> Response:
    """The episode's steps, as recorded (what a demonstrator trims)."""
    items, _ = await anyio.to_thread.run_sync(plugins.load(plugins.RECORDERS, "read_actions"),
                                              episode_path(session, name), 0)
    return _json({"items": items})


@router.get(PREFIX + "/api/episodes/{name}/video")
async def get_video(name: str, session: Session = Depends(page_session)) -> Response:
    """The episode's video file (Range requests answered, so a browser can seek)."""
    path = episode_path(session, name)
    found = await anyio.to_thread.run_sync(plugins.load(plugins.RECORDERS, "find_video"), path)
    if found is None:
        raise EpisodeNotFoundError(f"episode {name!r} has no video", name=name)
    video, media_type = found
    return FileResponse(video, media_type=media_type,
                        headers={"Cache-Control": "no-store"}, content_disposition_type="inline")


@router.delete(PREFIX + "/api/episodes/{name}")
async def delete(name: str, session: Session = Depends(page_session),
                 server: HciServer = Depends(get_server)) -> Response:
    """Delete one of this session's episodes (not while it is being recorded or replayed)."""
    path = episode_path(session, name)
    state = _episode_state(session, path)
    if state in ("recording", "paused"):
        raise EnvironmentStateError("this episode is being recorded: stop or discard it")
    if state == "stopping":
        raise EnvironmentStateError("this episode is still being written (its video): delete it once it has stopped")
    if collect_state(session).replaying == name:
        raise EnvironmentStateError("this episode is being replayed")
    await delete_episode(server, session, path)
    return _json({"deleted": name})


class SubmitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    #: The first and last steps kept (indexes); the others are deleted.
    first: int
    last: int
    success: bool
    comment: str = Field("", max_length=4000)


@router.post(PREFIX + "/api/episodes/{name}/submit")
async def post_submit(name: str, request: SubmitRequest = Body(...),
                      session: Session = Depends(page_session)) -> Response:
    """Trim the episode to the steps kept (the rest is deleted), note whether it succeeded, and submit it: only
    then does a dataset export take it."""
    path = episode_path(session, name)
    state = _episode_state(session, path)
    if state != "stopped":  # recording, or stopping: the recorder writes the last frame, meta.json and the video
        raise EnvironmentStateError(f"this episode is {state}: submit it once it has stopped")
    if collect_state(session).replaying == name:
        raise EnvironmentStateError("this episode is being replayed")
    submit = plugins.load(plugins.RECORDERS, "submit_episode")
    review = await anyio.to_thread.run_sync(lambda: submit(path, first=request.first, last=request.last,
                                                           success=request.success, comment=request.comment))
    collect_state(session).reports.pop(name, None)  # a replay's report was of the steps before the trim
    return _json({"episode": name, "review": review})


@router.post(PREFIX + "/api/episodes/{name}/replay")
async def post_replay(name: str, session: Session = Depends(page_session),
                      server: HciServer = Depends(get_server)) -> Response:
    """Reset the desktop to the episode's start, replay its actions into it while people's input is ignored,
    and answer how each step's screen, and the last, matched the recording (and the task's check)."""
    return _json(await replay(server, session, episode_path(session, name)))


async def replay(server: HciServer, session: Session, path: Path) -> dict[str, Any]:
    state = collect_state(session)
    if _recording(session):
        raise EnvironmentStateError("stop the recording first: a replay resets the desktop")
    if state.replaying:
        raise EnvironmentStateError(f"episode {state.replaying!r} is being replayed; wait for it to end")
    state.replaying = path.name
    control = session.vnc.control
    forced = control.status().forced
    control.revoke()  # the desktop is the replay's: people's input is dropped until it ends
    try:
        load_episode = plugins.load(plugins.RECORDERS, "load_episode")
        replay_episode = plugins.load(plugins.RECORDERS, "replay")
        episode = await anyio.to_thread.run_sync(load_episode, path)
        task = episode.meta.get("task")
        tasks = await anyio.to_thread.run_sync(server.task_suite.tasks) if task else {}
        if task in tasks:  # the task's world: start state, home files and setup steps
            await server.reset_session(session, {"task": task})
        else:
            start = episode.meta.get("start_state")
            await server.reset_session(session, {"start_state": start} if start else {})
        report = await session.run_control(replay_episode, episode, env=session.env, reset=False)
        result = report.to_dict()
        result["episode"] = path.name
        result["screen"] = episode.meta.get("screen")
        if task in tasks:
            score = await server.score_session(session)
            result["check"] = {"task": score["task"], "score": score["score"], "success": score["success"]}
    finally:
        {None: control.auto, "human": control.grant, "agent": control.revoke}[forced]()
        state.replaying = None
    state.reports[path.name] = result
    return result


def _json(data: Any) -> Response:
    return Response(json.dumps(data, ensure_ascii=False), media_type="application/json",
                    headers={"Cache-Control": "no-store"})


def install_collect(app: FastAPI, server: HciServer) -> None:
    """The page's routes, and its URL in every session's state (after the VNC side, which it needs)."""
    app.include_router(router)
    server.session_services.append(attach_collect)
