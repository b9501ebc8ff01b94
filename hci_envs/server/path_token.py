"""The control token as a secret path prefix, for clients that take a base URL and nothing else.

OpenEnv's ``from_docker_image`` builds its client as ``cls(base_url=..., provider=...)``: no headers, and it
only ever appends paths to that URL (``/ws``, ``/mcp``, ``/health``, ``/reset``...; MCPToolClient even drops
the query string of ``/mcp``). So the one place a secret survives is the path:
``http://127.0.0.1:PORT/t/<control token>`` is a base URL, and ``.../t/<token>/ws`` is ``/ws`` with that
token. Our Docker provider hands OpenEnv such a URL.

What this keeps:

* **The same credential, nothing weaker.** The prefix is accepted only as the control token itself,
  compared in constant time; the request then goes on as if it carried ``Authorization: Bearer`` with it
  (the header it had is replaced), through every check a header-borne token goes through. A wrong prefix is
  refused with 401 before any route runs; a server without a control token refuses every prefix. Requests
  without the prefix are untouched: tokenless ones are refused as before.
* **Not an ambient credential.** Browsers never attach a path on their own, unlike cookies or HTTP Basic
  credentials (which is why the token does not travel as URL user info): a page of another site cannot
  forge a request that carries it, so the Origin check being off on a server with tokens stays safe.
* **Never logged by the server.** The scope's ``path`` and ``raw_path`` are rewritten *in place*: uvicorn's
  access log reads the very scope dict it handed the app, so it shows the route, never the token (a wrong
  prefix is logged as ``/t/redacted``). What is logged before the app runs (the WebSocket handshake's
  request line, at debug level) goes through :class:`RedactPathTokens`, which ``serve`` puts on every
  handler.
"""

from __future__ import annotations

import hmac
import logging
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import AuthError
from .deps import error_response

PREFIX = "/t/"
REDACTED = "redacted"  # plain letters: the access log percent-encodes the path


def split_token(path: str) -> tuple[str, str] | None:
    """``(token, rest)`` of a path under the prefix (``rest`` starts with "/"), else None."""
    if not path.startswith(PREFIX):
        return None
    token, slash, rest = path[len(PREFIX):].partition("/")
    return token, slash + rest if slash else "/"


def _rewrite(scope: Scope, rest: str, authorization: bytes | None) -> None:
    """Drop the prefix from the scope, in place (see the module: the access log reads this dict)."""
    scope["path"] = rest
    scope["raw_path"] = rest.encode("utf-8")
    headers = [(k, v) for k, v in scope.get("headers", []) if k != b"authorization"]
    if authorization is not None:
        headers.append((b"authorization", authorization))
    scope["headers"] = headers


class PathToken:
    """ASGI middleware: a request under ``/t/<token>/`` is the same request with the control token as its
    bearer token, or is refused (see the module)."""

    def __init__(self, app: ASGIApp, control_token: str | None) -> None:
        self.app = app
        self.token = control_token.encode() if control_token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = split_token(scope["path"]) if scope["type"] in ("http", "websocket") else None
        if found is None:
            await self.app(scope, receive, send)
            return
        presented, rest = found
        if self.token is not None and hmac.compare_digest(presented.encode(), self.token):
            _rewrite(scope, rest, b"Bearer " + self.token)
            await self.app(scope, receive, send)
            return
        _rewrite(scope, PREFIX + REDACTED + rest, None)
        why = "wrong token in the path" if self.token else "this server has no control token to put in a path"
        if scope["type"] == "http":
            await error_response(AuthError(why))(scope, receive, send)
        else:  # refused before the handshake: the client sees HTTP 403
            await send({"type": "websocket.close", "code": 1008, "reason": why})


class RedactPathTokens(logging.Filter):
    """Takes whatever follows ``/t/`` out of a log record (a request line logged before the app could
    rewrite it)."""

    PATTERN = re.compile(r"/t/[^/\s?#\"']+")

    def filter(self, record: logging.LogRecord) -> bool:
        # the message and its arguments each, not the formatted text: formatters (uvicorn's access log)
        # unpack the arguments themselves
        record.msg = self._redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(self._redact(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: self._redact(v) for k, v in record.args.items()}
        return True

    def _redact(self, value: object) -> object:
        if isinstance(value, str) and PREFIX in value:
            return self.PATTERN.sub(PREFIX + REDACTED, value)
        return value


def redact_logs(names: tuple[str, ...] = ("", "uvicorn", "uvicorn.error", "uvicorn.access")) -> None:
    """Put :class:`RedactPathTokens` on every handler of these loggers (once uvicorn has configured them)."""
    for name in names:
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, RedactPathTokens) for f in handler.filters):
                handler.addFilter(RedactPathTokens())
