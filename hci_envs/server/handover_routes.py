"""The person's side of the agent's hand-over (``ask_human``; the bookkeeping is :mod:`hci_envs.env.handover`).

    GET  /human, /sessions/{id}/human                    the hand-over: status, reason, the agent's last actions
    POST /human, /sessions/{id}/human                    {"command": "accept", "person": "ana"}
                                                         {"command": "hand_back", "note": "saved it"}

(control plane; the collection page has its own route, under its secret.) A person also accepts by simply
using the desktop: the first key or click of a control viewer while the agent waits takes it, in that viewer's
name, and the hand-over goes back when that viewer leaves. While a person holds it, the desktop is theirs
(VNC's control is forced to people, the agent refused); their input is kept and, when they hand back, reduced
to canonical actions for the agent's report.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Literal

import anyio
from fastapi import APIRouter, Body, Depends, FastAPI
from pydantic import BaseModel, ConfigDict, Field

from ..env.handover import MAX_TEXT, HandoverRecord
from ..errors import ConfigError
from ..vnc.rfb import POINTER_EVENT
from .core import HciServer
from .deps import CONTROL, get_server, session_for
from .persons_turn import PersonsTurn
from .sessions import Session

log = logging.getLogger(__name__)

#: What ``state().human`` says of where people answer.
WHERE = "a person at a control viewer of this session (VNC or the collection page)"


class PersonSide:
    """One session's person side: a person's turn follows the hand-over (see persons_turn.py)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.handover = session.env.handover
        self.turn = PersonsTurn(session)
        self._lock = threading.Lock()
        self._viewer: str | None = None  # the viewer that took it by its input (it hands back by leaving)
        self.handover.observers.append(self._on_change)
        session.vnc.taps.insert(0, self._on_input)  # before the turn's tap: the input that takes it is its first
        session.vnc.departures.append(self._on_viewer_left)

    def _on_change(self, event: str, record: HandoverRecord) -> None:
        self._show(event, record)
        if event == "accepted":
            self.turn.begin()
        elif event in ("handed_back", "hold_time_over", "unanswered", "cancelled"):
            actions = self.turn.end()
            if event == "hold_time_over" and not record.actions:  # what they did before their time ran out
                record.actions = actions
            with self._lock:
                self._viewer = None

    def _show(self, event: str, record: HandoverRecord) -> None:
        """Every viewer's title says what is asked of people (native viewers have nothing else to show it in)."""
        if event == "requested":
            last = [a.get("action", "") for a in record.recent_actions[-3:]]
            self.session.vnc.set_notice(f"The agent asks for a person: {record.reason}",
                                        to_control="(a key or a click here takes the desktop)",
                                        detail=f"- its last actions: {'; '.join(last)}" if last else "")
        elif event == "accepted":
            self.session.vnc.set_notice(f"{record.person} has the desktop for the agent: {record.reason}")
        else:
            self.session.vnc.set_notice(None)

    def _on_input(self, viewer: Any, message: Any, arrived: float) -> None:
        """A VNC tap (on the proxy's loop): the first input that acts (not a pointer passing over the view), while
        the agent waits, takes the desktop."""
        if (message.type != POINTER_EVENT or message.mask) and self.handover.current == "requested":
            try:
                self.handover.accept(f"viewer {viewer.id}", at=arrived)
                with self._lock:
                    self._viewer = viewer.id
            except Exception as exc:  # another person took it meanwhile: theirs
                log.info("viewer %s could not take the hand-over: %s", viewer.id, exc)

    def _on_viewer_left(self, viewer: Any) -> None:
        with self._lock:
            took_it = self._viewer == viewer.id
        if took_it and self.handover.current == "held":
            try:
                self.hand_back("", leaving=True)
            except Exception as exc:  # noqa: BLE001 - handed back meanwhile
                log.info("viewer %s left; the hand-over had ended: %s", viewer.id, exc)

    def accept(self, person: str) -> dict[str, Any]:
        self.handover.accept(person)
        return self.handover.status()

    def hand_back(self, note: str, *, leaving: bool = False) -> dict[str, Any]:
        actions = self.turn.actions()
        self.handover.hand_back(note or ("" if not leaving else "(the person's viewer left)"), actions)
        return self.handover.status()


def attach_handover(server: HciServer, session: Session) -> dict[str, Any]:
    """The per-session service: people can answer where the session has VNC (attached before this)."""
    if session.vnc is None:
        return {}
    session.handover_side = PersonSide(session)
    session.env.hooks.people = WHERE
    return {}


def person_side(session: Session) -> PersonSide:
    side = getattr(session, "handover_side", None)
    if side is None:
        raise ConfigError("this server runs without VNC: no person can take a hand-over here")
    return side


class HandoverCommand(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: Literal["accept", "hand_back"]
    #: Who accepts (shown to the agent and kept in the episode).
    person: str = Field("a person", min_length=1, max_length=200)
    #: For the agent, with the hand back.
    note: str = Field("", max_length=MAX_TEXT)


async def run_command(session: Session, command: HandoverCommand) -> dict[str, Any]:
    side = person_side(session)
    if command.command == "accept":
        return await anyio.to_thread.run_sync(side.accept, command.person)
    return await anyio.to_thread.run_sync(side.hand_back, command.note)


router = APIRouter()


@router.get("/human", dependencies=CONTROL)
async def get_human(server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """The default session's hand-over: none, requested (reason, the agent's last actions), held, handed back."""
    return session_for(server, None).env.handover.status()


@router.post("/human", dependencies=CONTROL)
async def post_human(command: HandoverCommand = Body(...), server: HciServer = Depends(get_server)) -> dict[str, Any]:
    """Accept the agent's request (one person wins; the next is told who), or hand the desktop back with a note."""
    return await run_command(session_for(server, None), command)


@router.get("/sessions/{session_id}/human", dependencies=CONTROL)
async def get_session_human(session_id: str, server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return session_for(server, session_id).env.handover.status()


@router.post("/sessions/{session_id}/human", dependencies=CONTROL)
async def post_session_human(session_id: str, command: HandoverCommand = Body(...),
                             server: HciServer = Depends(get_server)) -> dict[str, Any]:
    return await run_command(session_for(server, session_id), command)


def install_handover(app: FastAPI, server: HciServer) -> None:
    """The routes, and the person side of every session (after VNC, which it needs)."""
    app.include_router(router)
    server.session_services.append(attach_handover)
