"""Propose and accept on a server (the mode itself is :mod:`hci_envs.env.supervision`).

    GET  /supervision, /sessions/{id}/supervision     on or off, the proposal waiting now, the last decision
    POST /supervision, /sessions/{id}/supervision     {"on": true} turns it on (false: off)
                                                      {"decision": "accept", "proposal": 7}
                                                      {"decision": "edit", "proposal": 7, "action": {...}}
                                                      {"decision": "override", "proposal": 7}, later "done"

(control plane; the collection page has its own route, under its secret.) An override is a person's turn at
the desktop (persons_turn.py): VNC's control is theirs until they say done, and what they did is the agent's
answer.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio
from fastapi import APIRouter, Body, Depends, FastAPI
from pydantic import BaseModel, ConfigDict, Field

from ..env.supervision import DECISIONS
from ..errors import ConfigError
from .core import HciServer
from .deps import CONTROL, get_server, session_for
from .persons_turn import PersonsTurn
from .sessions import Session



class SupervisionSide:
    """One session's side of propose and accept: an override is the person's turn at the desktop."""

    def __init__(self, session: Session) -> None:
        self.supervision = session.env.supervision
        self.turn = PersonsTurn(session)
        self.vnc = session.vnc
        self.supervision.observers.append(self._on_change)
        session.vnc.departures.append(self._on_viewer_left)

    def _on_viewer_left(self, viewer: Any) -> None:
        """An override whose people have all gone (no control viewer left) is done, with what they did."""
        proposal = self.supervision.current()
        if proposal is None or not proposal.overriding:
            return
        if not any(v.role == "control" for v in self.vnc.viewers.values()):
            try:
                self.supervision.decide(proposal.id, "done", actions=self.turn.actions())
            except Exception:  # noqa: BLE001 - decided meanwhile
                pass

    def _on_change(self, event: str, proposal: Any) -> None:
        if event == "overriding":
            self.turn.begin()
        elif event in DECISIONS and self.turn.active:
            actions = self.turn.end()
            if event == "override" and not proposal.actions:  # ended without done (time, the mode turned off)
                proposal.actions = actions

    def run(self, command: SupervisionCommand) -> dict[str, Any]:
        if command.on is not None:
            self.supervision.turn(command.on)
        if command.decision is not None:
            if command.proposal is None:
                raise ConfigError("a decision names the proposal it is on (its id)", field="proposal")
            actions = self.turn.actions() if command.decision == "done" else None
            self.supervision.decide(command.proposal, command.decision, action=command.action,
                                    person=command.person, actions=actions)
        return self.supervision.status()


def attach_supervision(server: HciServer, session: Session) -> dict[str, Any]:
    """The per-session service: people can decide where the session has VNC (attached before this)."""
    if session.vnc is not None:
        session.supervision_side = SupervisionSide(session)
    return {}


class SupervisionCommand(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    on: bool | None = None
    decision: Literal["accept", "edit", "override", "done"] | None = None
    proposal: int | None = None
    #: The action to run instead (edit).
    action: dict[str, Any] | None = None
    #: Who decides (None: whoever overrode, for done; else "a person").
    person: str | None = Field(None, min_length=1, max_length=200)


async def run_command(session: Session, command: SupervisionCommand) -> dict[str, Any]:
    side = getattr(session, "supervision_side", None)
    if side is None:
        raise ConfigError("this server runs without VNC: no person can decide on the agent's actions here")
    if command.on is None and command.decision is None:
        raise ConfigError("say on (true or false), or a decision", field="on")
    return await anyio.to_thread.run_sync(side.run, command)


router = APIRouter()


@router.get("/supervision", dependencies=CONTROL)
async def get_supervision(server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """Whether a person decides on each of the default session's agent actions; the proposal waiting now."""
    return session_for(server, None).env.supervision.status()


@router.post("/supervision", dependencies=CONTROL)
async def post_supervision(command: SupervisionCommand = Body(...),
                           server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """Turn propose-and-accept on or off; accept, edit or override the proposal waiting now (then done)."""
    return await run_command(session_for(server, None), command)


@router.get("/sessions/{session_id}/supervision", dependencies=CONTROL)
async def get_session_supervision(session_id: str, server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return session_for(server, session_id).env.supervision.status()


@router.post("/sessions/{session_id}/supervision", dependencies=CONTROL)
async def post_session_supervision(session_id: str, command: SupervisionCommand = Body(...),
                                   server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return await run_command(session_for(server, session_id), command)


def install_supervision(app: FastAPI, server: HciServer) -> None:
    app.include_router(router)
    server.session_services.append(attach_supervision)
