"""Recording controls on the control plane: start, pause, resume, stop, status, per session.

The recorder itself lives in the ``recorders`` package, found through the ``hci_envs.recorders`` entry point.
Controls are never keys inside the VNC stream: a person at a viewer cannot start or stop a recording.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import anyio
from fastapi import Body, Depends, FastAPI, Request
from pydantic import BaseModel, ConfigDict

from .. import plugins
from ..errors import ConfigError, EnvironmentStateError
from .app import HciServer, bearer
from .sessions import Session


class RecordingCommand(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: Literal["start", "stop", "pause", "resume"]
    source: Literal["human", "agent", "both"] = "human"
    mask_text: bool = False
    name: str | None = None
    task: str | None = None


def install_recording(app: FastAPI, server: HciServer) -> None:
    from .control import check_control_token

    def require_control(request: Request) -> None:
        check_control_token(server, bearer(request.headers))

    guard = [Depends(require_control)]

    def session_for(session_id: str | None) -> Session:
        return server.sessions.get(session_id) if session_id else server.sessions.default()

    def status(session: Session) -> dict[str, Any]:
        recorder = getattr(session, "recorder", None)
        return recorder.status() if recorder is not None else {"state": "none"}

    async def command(session: Session, cmd: RecordingCommand) -> dict[str, Any]:
        recorder = getattr(session, "recorder", None)
        if cmd.command == "start":
            if recorder is not None and recorder.state in ("recording", "paused"):
                raise EnvironmentStateError(f"already recording into {recorder.path}; stop it first")
            if cmd.name is not None and ("/" in cmd.name or cmd.name.startswith(".")):
                raise ConfigError(f"invalid episode name {cmd.name!r}")
            await session.ensure_started()
            recorder_class = plugins.load(plugins.RECORDERS, "episodes")
            recorder = recorder_class(
                session.env, session.vnc, Path(server.config.episodes_dir), source=cmd.source,
                mask_text=cmd.mask_text, name=cmd.name, task=cmd.task,
            )
            await anyio.to_thread.run_sync(recorder.start)
            session.recorder = recorder
            return recorder.status()
        if recorder is None:
            raise EnvironmentStateError("nothing is being recorded in this session")
        if cmd.command == "pause":
            await anyio.to_thread.run_sync(recorder.pause)
        elif cmd.command == "resume":
            await anyio.to_thread.run_sync(recorder.resume)
        else:
            await anyio.to_thread.run_sync(recorder.stop)
        return recorder.status()

    @app.get("/recording", dependencies=guard)
    async def get_recording() -> dict[str, Any]:
        """The default session's recording: state, episode folder, counts."""
        return status(session_for(None))

    @app.post("/recording", dependencies=guard)
    async def post_recording(cmd: RecordingCommand = Body(...)) -> dict[str, Any]:
        """Start, pause, resume or stop recording the default session (human input, agent actions, or both)."""
        return await command(session_for(None), cmd)

    @app.get("/sessions/{session_id}/recording", dependencies=guard)
    async def get_session_recording(session_id: str) -> dict[str, Any]:
        return status(session_for(session_id))

    @app.post("/sessions/{session_id}/recording", dependencies=guard)
    async def post_session_recording(session_id: str, cmd: RecordingCommand = Body(...)) -> dict[str, Any]:
        return await command(session_for(session_id), cmd)
