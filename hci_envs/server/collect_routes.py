"""The collection page: a web page for the people who record demonstrations, on the server's own port.

    {base}/collect/{session}/{secret}/        the page (``collect_url`` in the session's state)
    {base}/collect/{session}/{secret}/api/... what it calls

The secret is the session's VNC **control** secret (the one in ``vnc_url``): it already grants control of that
one desktop, and nothing more; the server-wide control token is never needed or accepted here. Every route
lives under the secret-bearing prefix and is checked like the VNC WebSocket: an unknown session and a wrong
secret (the view-only one included) get the same answer after the same delay, the secret is compared in
constant time, and the server's Host/Origin guard runs first. A request that changes something must also
come from the page's own origin (Origin, when a browser sends one, and Sec-Fetch-Site) and carry JSON, so a
page of another site cannot drive the desktop even if it learnt the URL.

The page shows the task's instruction, the live desktop (noVNC's RFB module from ``/vnc/``), record, pause,
resume, stop and discard, the actions as the recorder writes them to ``actions.jsonl``, and the session's
episodes (those recorded in this session since it was made, from the page, the CLI or the control plane;
never other sessions'), each with its video and a "replay and verify" button: the desktop is reset to the
episode's start (its task's world when the task is in the server's suite), the actions are replayed into it
while people's input is ignored, and the page shows every step's screen match, the final one, and the task's
check when there is a task.
"""

from __future__ import annotations

import hmac
import json
import logging
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import anyio
from fastapi import APIRouter, Body, Depends, FastAPI, Query, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict

from .. import plugins
from ..errors import (
    AuthError,
    ConfigError,
    EnvironmentStateError,
    EpisodeNameError,
    EpisodeNotFoundError,
    ForeignOriginError,
    HciEnvsError,
    SessionNotFoundError,
    TaskNotFoundError,
)
from . import recording_routes
from .core import HciServer
from .deps import get_server
from .sessions import Session
from .vnc_routes import REFUSAL_DELAY, control_status

log = logging.getLogger(__name__)

PREFIX = "/collect/{session_id}/{secret}"
#: The page's own files (served from the package: no build step, nothing from elsewhere).
ASSETS = {"collect.js": "text/javascript", "collect.css": "text/css"}
VIDEO_TYPES = {".mp4": "video/mp4", ".webm": "video/webm"}
#: Most bytes of actions.jsonl one poll returns (the page asks again for the rest).
MAX_ACTIONS_BYTES = 256 * 1024
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


# -- who may call ---------------------------------------------------------------------------------------------
async def page_session(request: Request, session_id: str, secret: str,
                       server: HciServer = Depends(get_server)) -> Session:
    """The session the path names, if the path's secret is its VNC control secret; the same refusal, after the
    same delay, for an unknown session and a wrong secret. Requests that change something must come from the
    page's own origin."""
    try:
        session = server.sessions.get(session_id)
    except SessionNotFoundError:
        session = None
    vnc = session.vnc if session is not None else None
    expected = vnc.control_password if vnc is not None else "-" * 32
    if not hmac.compare_digest(secret.encode(), expected.encode()) or session is None:
        await anyio.sleep(REFUSAL_DELAY)  # slow down guessing
        raise AuthError("wrong session or secret")
    if request.method not in ("GET", "HEAD"):
        check_same_origin(request, server)
    return session


def _origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def check_same_origin(request: Request, server: HciServer) -> None:
    """Cross-site request forgery: a browser says where a request comes from (Origin on every POST and DELETE,
    Sec-Fetch-Site in current browsers); it must be this page's origin, as the browser reached it (the Host it
    sent) or as the server is published (``--public-url``). Clients that are no browser send neither. JSON is
    required too, which a form of another site cannot send without a preflight."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise ForeignOriginError(f"refused: a request from another site ({site})")
    origin = request.headers.get("origin")
    if origin is not None:
        host = request.headers.get("host", "").lower()
        allowed = {f"http://{host}", f"https://{host}", _origin_of(server.config.base_url())}
        if origin.lower() not in allowed:
            raise ForeignOriginError("refused: this page's API answers only the page's own origin")
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if request.method == "POST" and kind != "application/json":
        raise ConfigError("send the request's body as application/json", field="content-type")


# -- episodes -------------------------------------------------------------------------------------------------
def check_episode_name(name: str) -> None:
    if (not name or len(name) > 255 or name.startswith(".") or any(c in name for c in "/\\\0")
            or not name.isprintable()):
        raise EpisodeNameError(f"invalid episode name {name!r}: a folder name, not a path", name=name)


def episode_path(session: Session, name: str) -> Path:
    """The folder of this session's episode ``name``; never a path outside the session's own episodes."""
    check_episode_name(name)
    for path in session.episodes:
        if path.name == name:
            return path
    raise EpisodeNotFoundError(f"no episode {name!r} in this session", name=name)


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def video_file(path: Path, meta: dict[str, Any] | None) -> Path | None:
    """The episode's video, as meta.json names it (``"video": {"file": NAME}``, a path inside the folder), if
    it is a regular file of a known type inside the episode folder."""
    video = (meta or {}).get("video")
    name = video.get("file") if isinstance(video, dict) else None
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name or "\0" in name:
        return None
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts) or Path(name).suffix.lower() not in VIDEO_TYPES:
        return None
    target = path.joinpath(*parts)
    try:
        if target.is_symlink() or not target.is_file():
            return None
        target.resolve().relative_to(path.resolve())
    except (OSError, ValueError):
        return None
    return target


def list_episodes(session: Session) -> list[dict[str, Any]]:
    """This session's episodes, newest first, as the page lists them."""
    state = collect_state(session)
    recorder = session.recorder
    out = []
    for path in reversed(session.episodes):
        meta = _read_meta(path)
        if meta is None:
            continue  # deleted, or not written yet
        counts = meta.get("counts") or {}
        if recorder is not None and recorder.path == path:  # being written: the recorder knows better
            live = recorder.status()
            meta["state"], counts = live["state"], {"actions": live["actions"], "frames": live["frames"]}
        video = video_file(path, meta)
        out.append({
            "name": path.name,
            "task": meta.get("task"),
            "state": meta.get("state"),
            "started": (meta.get("clock_origin") or {}).get("wall"),
            "ended": meta.get("ended"),
            "actions": counts.get("actions"),
            "frames": counts.get("frames"),
            "screen": meta.get("screen"),
            "video": {"file": video.name, "type": VIDEO_TYPES[video.suffix.lower()]} if video else None,
            "replay": state.reports.get(path.name),
        })
    return out


def read_actions(path: Path, cursor: int) -> tuple[list[dict[str, Any]], int]:
    """Complete lines of ``path`` from byte ``cursor`` on (at most MAX_ACTIONS_BYTES), and the next cursor."""
    try:
        with open(path, "rb") as f:
            if cursor > 0:
                f.seek(cursor - 1)
                if f.read(1) != b"\n":
                    raise ConfigError("cursor: not the start of a line of this episode's actions", field="cursor")
            data = f.read(MAX_ACTIONS_BYTES)
    except FileNotFoundError:
        return [], 0
    end = data.rfind(b"\n") + 1
    actions = []
    for line in data[:end].splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            actions.append(record)
    return actions, cursor + end


def current_task(server: HciServer, session: Session) -> dict[str, Any] | None:
    """The session's task (it was reset into one), else the task the recording names."""
    if session.task is not None and session.task.task is not None:
        task = session.task.task
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
    if name is not None:
        if episode != name:
            cursor = 0  # a new episode: its actions from the start
        items, cursor = read_actions(recorder.path / "actions.jsonl", cursor)
    return {
        "session": session.id,
        "recording": status,
        "actions": {"episode": name, "cursor": cursor, "items": items},
        "task": current_task(server, session),
        "replaying": collect_state(session).replaying,
        "control": control_status(session),
        "screen": {"width": session.env.declared_state.width, "height": session.env.declared_state.height},
        "episodes": [p.name for p in reversed(session.episodes) if p.is_dir()],
    }


async def delete_episode(server: HciServer, session: Session, path: Path) -> None:
    root = Path(server.config.episodes_dir).resolve()
    if path.is_symlink() or path.parent.resolve() != root:
        raise EpisodeNotFoundError(f"{path.name!r} is not in the server's episodes folder", name=path.name)
    await anyio.to_thread.run_sync(lambda: shutil.rmtree(path, ignore_errors=False) if path.exists() else None)
    session.episodes[:] = [p for p in session.episodes if p != path]
    collect_state(session).reports.pop(path.name, None)
    if session.recorder is not None and session.recorder.path == path:
        session.recorder = None


def _recording(session: Session) -> bool:
    return session.recorder is not None and session.recorder.state in ("recording", "paused")


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
        command = recording_routes.RecordingCommand(command="start", mask_text=request.mask_text,
                                                    task=task["id"] if task else None)
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


@router.get(PREFIX + "/api/episodes")
async def get_episodes(session: Session = Depends(page_session)) -> Response:
    """This session's episodes, newest first: task, counts, video, the last replay's report."""
    return _json({"episodes": await anyio.to_thread.run_sync(list_episodes, session)})


@router.get(PREFIX + "/api/episodes/{name}/video")
async def get_video(name: str, session: Session = Depends(page_session)) -> Response:
    """The episode's video file (Range requests answered, so a browser can seek)."""
    path = episode_path(session, name)

    def find() -> Path | None:
        return video_file(path, _read_meta(path))

    video = await anyio.to_thread.run_sync(find)
    if video is None:
        raise EpisodeNotFoundError(f"episode {name!r} has no video", name=name)
    return FileResponse(video, media_type=VIDEO_TYPES[video.suffix.lower()],
                        headers={"Cache-Control": "no-store"}, content_disposition_type="inline")


@router.delete(PREFIX + "/api/episodes/{name}")
async def delete(name: str, session: Session = Depends(page_session),
                 server: HciServer = Depends(get_server)) -> Response:
    """Delete one of this session's episodes (not while it is being recorded or replayed)."""
    path = episode_path(session, name)
    if _recording(session) and session.recorder.path == path:
        raise EnvironmentStateError("this episode is being recorded: stop or discard it")
    if collect_state(session).replaying == name:
        raise EnvironmentStateError("this episode is being replayed")
    await delete_episode(server, session, path)
    return _json({"deleted": name})


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
