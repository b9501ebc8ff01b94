"""The collection page's guard: who may call the page's routes, and which episodes a call may name.

The secret in the page's path is the session's VNC **control** secret (the one in ``vnc_url``): it already
grants control of that one desktop, and nothing more; the server-wide control token is never needed or
accepted here. It is checked like the VNC WebSocket: an unknown session and a wrong secret (the view-only one
included) get the same answer after the same delay, and the secret is compared in constant time (the server's
Host/Origin guard runs first). A request that changes something must also come from the page's own origin
(Origin, when a browser sends one, and Sec-Fetch-Site) and carry JSON, so a page of another site cannot drive
the desktop even if it learnt the URL. A session's secret opens that session's episodes only.
"""

from __future__ import annotations

import hmac
from pathlib import Path
from urllib.parse import urlsplit

import anyio
from fastapi import Depends, Request

from ..errors import (
    AuthError,
    ConfigError,
    EpisodeNameError,
    EpisodeNotFoundError,
    ForeignOriginError,
    SessionNotFoundError,
)
from .core import HciServer
from .deps import get_server
from .sessions import Session
from .vnc_routes import REFUSAL_DELAY


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
