"""Recording controls on the control plane: start, pause, resume, stop, status, per session.

The recorder itself lives in the ``recorders`` package, found through the ``hci_envs.recorders`` entry point.
Controls are never keys inside the VNC stream: a person at a viewer cannot start or stop a recording.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Literal

import anyio
from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel, ConfigDict, Field

from .. import plugins
from ..errors import ConfigError, EnvironmentStateError
from .core import HciServer
from .deps import CONTROL, get_server, session_for
from .sessions import Session


class RecordingCommand(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: Literal["start", "stop", "pause", "resume"]
    source: Literal["human", "agent", "both"] = "human"
    mask_text: bool = False
    name: str | None = None
    task: str | None = None
    # the episode's video, written when it stops: None = if the server has PyAV, True = required (an error
    # naming the `video` extra without it), False = none
    video: bool | None = None
    video_fps: float = Field(0.0, ge=0, le=30, description="a continuous capture at this rate (0: none)")
    video_codec: Literal["h264", "vp9"] | None = None
    accessibility: bool = Field(False, description="each frame with the accessibility tree read right after it")
    review: bool = Field(False, description="the episode waits for its demonstrator's review (trim, verdict, "
                                            "submit) before a dataset export takes it")
    wait: bool = Field(True, description="stop: answer once the episode is written, its video included (false: "
                                         "at once, with the state 'stopping' until GET says 'stopped')")


router = APIRouter(dependencies=CONTROL)


def status(session: Session) -> dict[str, Any]:
    recorder = getattr(session, "recorder", None)
    return recorder.status() if recorder is not None else {"state": "none"}


async def command(server: HciServer, session: Session, cmd: RecordingCommand) -> dict[str, Any]:
    recorder = getattr(session, "recorder", None)
    if not cmd.wait and cmd.command != "stop":
        raise ConfigError(f"'wait' is for the stop command: {cmd.command} answers at once", field="wait")
    if cmd.command == "start":
        if recorder is not None and recorder.state in ("recording", "paused"):
            raise EnvironmentStateError(f"already recording into {recorder.path}; stop it first")
        if getattr(session.collect, "replaying", None):  # the collection page is replaying an episode
            raise EnvironmentStateError("an episode is being replayed into this session; wait for it to end")
        if cmd.name is not None and ("/" in cmd.name or cmd.name.startswith(".")):
            raise ConfigError(f"invalid episode name {cmd.name!r}")
        await session.ensure_started()
        recorder_class = plugins.load(plugins.RECORDERS, "episodes")
        # only what was asked for: a recorder plugin without video keeps working for requests without it
        options = {k: v for k, v in (("video", cmd.video), ("video_fps", cmd.video_fps or None),
                                     ("video_codec", cmd.video_codec), ("accessibility", cmd.accessibility or None),
                                     ("review", cmd.review or None))
                   if v is not None}
        # off the event loop: it finishes episodes a killed server left open and may import PyAV
        recorder = await anyio.to_thread.run_sync(lambda: recorder_class(
            session.env, session.vnc, Path(server.config.episodes_dir), source=cmd.source,
            mask_text=cmd.mask_text, name=cmd.name, task=cmd.task,
            **options,
        ))
        await anyio.to_thread.run_sync(recorder.start)
        session.recorder = recorder
        session.episodes.append(recorder.path)
        return recorder.status()
    if recorder is None:
        raise EnvironmentStateError("nothing is being recorded in this session")
    if cmd.command == "pause":
        await anyio.to_thread.run_sync(recorder.pause)
    elif cmd.command == "resume":
        await anyio.to_thread.run_sync(recorder.resume)
    else:
        # encodes the episode's video: never on the event loop (without wait, on the recorder's own thread; a
        # recorder plugin whose stop cannot return early answers once it is done)
        early = not cmd.wait and "wait" in inspect.signature(recorder.stop).parameters
        answer = await anyio.to_thread.run_sync(lambda: recorder.stop(wait=False) if early else recorder.stop())
        if isinstance(answer, dict):  # the state as the stop left it ("stopping" until the thread is done)
            return answer
    return recorder.status()


@router.get("/recording")
async def get_recording(server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """The default session's recording: state, episode folder, counts."""
    return status(session_for(server, None))


@router.post("/recording")
async def post_recording(cmd: RecordingCommand = Body(...), server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """Start, pause, resume or stop recording the default session (human input, agent actions, or both)."""
    return await command(server, session_for(server, None), cmd)


@router.get("/sessions/{session_id}/recording")
async def get_session_recording(session_id: str, server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return status(session_for(server, session_id))


@router.post("/sessions/{session_id}/recording")
async def post_session_recording(session_id: str, cmd: RecordingCommand = Body(...),
                                 server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return await command(server, session_for(server, session_id), cmd)
