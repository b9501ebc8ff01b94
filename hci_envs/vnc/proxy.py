"""The VNC proxy between viewers (a browser over WebSocket, or a native viewer over TCP) and a session's
x11vnc (on a Unix socket only this process can open).

The proxy speaks RFB on both sides. To the viewer it is the server: it authenticates (a URL token for the
browser, VNC authentication for native viewers) and assigns a role, view or control. To x11vnc it is a
client. In between it parses every message the viewer sends: view-only viewers' input is dropped, the input
of the controlling viewer goes through the human-control lock, and every human input message is stamped on
arrival and handed to the taps (the recorders). The other way, x11vnc's messages go to the viewer unchanged,
followed so that the proxy can put the desktop's name between two of them when it changes (a notice such as the
agent's request for a person, shown in the viewer's title: see :meth:`VncSession.set_notice`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from .server_messages import DESKTOP_NAME, PixelFormat, ServerStream, desktop_name_update
from .takeover import HumanControl
from .rfb import (
    INPUT_TYPES,
    KEY_EVENT,
    POINTER_EVENT,
    PROTOCOL_38,
    SECURITY_NONE,
    SET_DESKTOP_SIZE,
    SET_ENCODINGS,
    SET_PIXEL_FORMAT,
    VNC_AUTH_CHARS,
    ClientMessage,
    ClientMessageParser,
    RfbError,
    encodings_of,
    filter_encodings,
    new_challenge,
    new_password,
    vnc_response,
)

log = logging.getLogger(__name__)

Role = Literal["view", "control"]
_viewer_ids = itertools.count(1)


class Stream(Protocol):
    """A viewer connection, as bytes."""

    async def read(self, n: int) -> bytes: ...  # exactly n bytes, or raise EOFError
    async def read_some(self) -> bytes: ...  # at least one byte, or raise EOFError
    async def write(self, data: bytes) -> None: ...
    async def close(self) -> None: ...


class AsyncioStream:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def read(self, n: int) -> bytes:
        try:
            return await self.reader.readexactly(n)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise EOFError from exc

    async def read_some(self) -> bytes:
        try:
            data = await self.reader.read(65536)
        except ConnectionError as exc:
            raise EOFError from exc
        if not data:
            raise EOFError
        return data

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def close(self) -> None:
        try:
            self.writer.close()
            await self.writer.wait_closed()
        except Exception:
            pass

    async def drain_to_close(self, timeout: float = 2.0) -> None:
        """End our side and read until the peer closes its own: a server closes a client only after handling
        every message the client sent before the end."""
        try:
            self.writer.write_eof()
            async with asyncio.timeout(timeout):
                while await self.reader.read(65536):
                    pass
        except (OSError, TimeoutError):
            pass


class WebSocketStream:
    """An RFB byte stream over a Starlette WebSocket (binary frames)."""

    def __init__(self, ws: object) -> None:
        self.ws = ws
        self._buf = bytearray()

    async def _more(self) -> None:
        message = await self.ws.receive()  # type: ignore[attr-defined]
        if message["type"] == "websocket.disconnect":
            raise EOFError
        data = message.get("bytes")
        if data is None:
            text = message.get("text")
            data = text.encode("latin-1") if text else b""
        self._buf += data

    async def read(self, n: int) -> bytes:
        while len(self._buf) < n:
            await self._more()
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def read_some(self) -> bytes:
        while not self._buf:
            await self._more()
        out = bytes(self._buf)
        self._buf.clear()
        return out

    async def write(self, data: bytes) -> None:
        try:
            await self.ws.send_bytes(data)  # type: ignore[attr-defined]
        except Exception as exc:
            raise EOFError from exc

    async def close(self) -> None:
        try:
            await self.ws.close()  # type: ignore[attr-defined]
        except Exception:
            pass


@dataclass
class Viewer:
    id: str
    role: Role
    transport: str
    connected: float = field(default_factory=time.time)
    input_messages: int = 0
    dropped_messages: int = 0
    #: What this viewer has down now, from its own messages: the button numbers and the keysyms.
    buttons_down: frozenset[int] = frozenset()
    keys_down: set[int] = field(default_factory=set)

    def saw(self, message: ClientMessage) -> None:
        """Keep track of what the viewer holds, from an input message it sent on to the desktop."""
        if message.type == POINTER_EVENT:
            self.buttons_down = frozenset(n for n in range(1, 9) if message.mask & (1 << (n - 1)))
        elif message.type == KEY_EVENT:
            (self.keys_down.add if message.down else self.keys_down.discard)(message.keysym)

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "role": self.role, "transport": self.transport, "connected": self.connected,
                "input_messages": self.input_messages, "dropped_messages": self.dropped_messages}


#: A tap sees each human input message that reached the desktop: (viewer, message, monotonic arrival time).
Tap = Callable[[Viewer, ClientMessage, float], None]


class VncSession:
    """The VNC side of one session: its secrets, its viewers, the human-control lock and the taps."""

    def __init__(self, socket_path: Callable[[], Awaitable[Path]], *, takeover_timeout: float = 30.0,
                 on_human_input: Callable[[], None] | None = None,
                 release_input: Callable[..., None] | None = None,
                 buttons_delivered: Callable[[frozenset[int], frozenset[int]], None] | None = None) -> None:
        self._socket_path = socket_path
        self.view_password = new_password()
        self.control_password = new_password()
        # VNC authentication sees only the first characters: the roles must differ there too
        while self.control_password[:VNC_AUTH_CHARS] == self.view_password[:VNC_AUTH_CHARS]:
            self.control_password = new_password()
        self.control = HumanControl(takeover_timeout)
        self.viewers: dict[str, Viewer] = {}
        self.taps: list[Tap] = []
        #: Called with each viewer that has left, once what it held is released (the hand-over's person).
        self.departures: list[Callable[[Viewer], Any]] = []
        self.on_human_input = on_human_input or (lambda: None)
        # Releases every key and button X says is down (the desktop's Input.release_stray). A viewer that
        # leaves with Shift or a button held leaves it held in X, since x11vnc releases nothing; so whenever
        # the desktop changes hands, what the last person held is let go.
        self.release_input = release_input or (lambda: None)
        # Returns once X shows a viewer's press or release (the desktop's Input.buttons_delivered). A
        # window manager that focuses on a click holds the press in a synchronous grab, and x11vnc injects on
        # its own schedule, while keys go straight to the focused app: a person who clicks a field and types at
        # once would type into the field that had the focus. So nothing after a press or release goes on to
        # x11vnc until X shows it (each one: a press and its release leave the same mask as before).
        self.buttons_delivered = buttons_delivered or (lambda down, changed: None)
        self._input_from: str | None = None  # the viewer whose input reached the desktop last
        self._human_input_since_agent = False
        self._changing_hands = asyncio.Lock()  # a person's first input waits for the release before it
        # x11vnc skips a PointerEvent at the position it last injected, assuming the pointer is still
        # there. After the agent (or a reset) moves the real pointer, that assumption is wrong, and a
        # person's click at that very spot would land where the agent left the pointer.
        self._pointer_stale = True
        self._last_pointer: tuple[int, int] | None = None
        # each viewer's connection to x11vnc, with the loop that owns it (see desktop_replaced)
        self._upstreams: dict[str, tuple[asyncio.AbstractEventLoop, AsyncioStream]] = {}
        self._downstreams: dict[str, tuple[asyncio.AbstractEventLoop, _Downstream]] = {}
        self._notice: tuple[str, str, str] | None = None

    def set_notice(self, text: str | None, *, to_control: str = "", detail: str = "") -> None:
        """Show ``text`` (then, to control viewers, ``to_control``; then ``detail``) in every viewer's title,
        before the desktop's own name, from any thread; None shows the name alone again. Viewers that connect
        later get it in their ServerInit; viewers already connected get it as a DesktopName update, if they take
        those (TigerVNC, noVNC and most others do)."""
        self._notice = None if text is None else (_one_line(text), _one_line(to_control), _one_line(detail))
        for loop, downstream in list(self._downstreams.values()):
            loop.call_soon_threadsafe(lambda d=downstream: asyncio.ensure_future(d.announce()))

    def name_for(self, viewer: Viewer, base: str) -> str:
        """The desktop's name as ``viewer`` is shown it: the notice, if any, then x11vnc's own name."""
        if self._notice is None:
            return base
        text, to_control, detail = self._notice
        parts = [text, to_control if viewer.role == "control" else "", detail]
        return f"{' '.join(p for p in parts if p)} | {base}"

    def desktop_replaced(self) -> None:
        """The session runs on another desktop now (a reset swapped in its spare, or made a new one): end every
        viewer's relay, from any thread. Viewers reconnect (noVNC does so on its own) and reach the new one;
        the old display may live on as the next spare, which no viewer must see or drive."""
        for loop, upstream in list(self._upstreams.values()):
            loop.call_soon_threadsafe(upstream.writer.transport.abort)

    def agent_input_blocked(self) -> str | None:
        """The environment asks before each agent input action: refused while a person holds the desktop;
        otherwise the agent is about to move the pointer behind x11vnc's back."""
        reason = self.control.agent_blocked()
        if reason is None:
            self._pointer_stale = True
            if self._human_input_since_agent:  # handed back to the agent (disconnect, revoke, idle timeout)
                self._human_input_since_agent = False
                self._input_from = None
                self._release()
        return reason

    def _release(self, leaving: Viewer | None = None) -> None:
        """Release what is held; for a ``leaving`` viewer, once what it held has reached X (see
        Input.release_stray)."""
        try:
            if leaving is not None and (leaving.buttons_down or leaving.keys_down):
                self.release_input(expect_buttons=frozenset(b for b in leaving.buttons_down if b <= 5),
                                   expect_keys=len(leaving.keys_down))
            else:
                self.release_input()
        except Exception:  # the desktop may be closing; a stuck key is not worth failing the caller for
            log.warning("could not release the keys and buttons left held", exc_info=True)

    def pointer_moved_elsewhere(self) -> None:
        """Something other than a viewer moved the pointer (a reset)."""
        self._pointer_stale = True

    def _pointer_message(self, message: ClientMessage) -> bytes:
        position = (message.x, message.y)
        data = message.data
        if self._pointer_stale and position == self._last_pointer:
            nudge_x = message.x + 1 if message.x == 0 else message.x - 1
            data = struct.pack(">BBHH", 5, message.mask, nudge_x, message.y) + data
        self._pointer_stale = False
        self._last_pointer = position
        return data

    def role_for_token(self, token: str) -> Role | None:
        import hmac

        if hmac.compare_digest(token.encode(), self.control_password.encode()):
            return "control"
        if hmac.compare_digest(token.encode(), self.view_password.encode()):
            return "view"
        return None

    def role_for_response(self, challenge: bytes, response: bytes) -> Role | None:
        import hmac

        if hmac.compare_digest(vnc_response(self.control_password, challenge), response):
            return "control"
        if hmac.compare_digest(vnc_response(self.view_password, challenge), response):
            return "view"
        return None

    async def serve(self, viewer_stream: Stream, role: Role, transport: str) -> None:
        """Relay one viewer (already authenticated, its security handshake done) until either side ends."""
        viewer = Viewer(f"v{next(_viewer_ids)}", role, transport)
        try:
            path = await self._socket_path()
            reader, writer = await asyncio.open_unix_connection(str(path))
        except Exception as exc:
            log.warning("viewer %s: cannot reach x11vnc: %s", viewer.id, exc)
            await viewer_stream.close()
            return
        upstream = AsyncioStream(reader, writer)
        self.viewers[viewer.id] = viewer
        self._upstreams[viewer.id] = (asyncio.get_running_loop(), upstream)
        try:
            shared = await viewer_stream.read(1)  # ClientInit
            del shared  # every viewer shares the desktop
            server_init = await _upstream_handshake(upstream)
            downstream = _Downstream(self, viewer, server_init, viewer_stream)
            self._downstreams[viewer.id] = (asyncio.get_running_loop(), downstream)
            await viewer_stream.write(downstream.server_init())
            down = asyncio.create_task(downstream.relay(upstream))
            up = asyncio.create_task(self._relay_input(viewer, viewer_stream, upstream, downstream))
            done, pending = await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            if pending:  # let them end: the upstream reader is read again below, and only one may wait on it
                await asyncio.wait(pending)
            for task in done:
                exc = task.exception()
                if exc is not None and not isinstance(exc, EOFError | asyncio.CancelledError):
                    log.info("viewer %s disconnected: %s", viewer.id, exc)
        except (EOFError, RfbError, ConnectionError) as exc:
            log.info("viewer %s: %s", viewer.id, exc or "disconnected")
        finally:
            self.viewers.pop(viewer.id, None)
            self._upstreams.pop(viewer.id, None)
            self._downstreams.pop(viewer.id, None)
            self.control.viewer_left(viewer.id)
            if self._input_from == viewer.id:
                async with self._changing_hands:
                    await upstream.drain_to_close()  # x11vnc has read all the viewer sent: then release
                    await asyncio.to_thread(self._release, viewer)
                    if self._input_from == viewer.id:
                        self._input_from = None
            await upstream.close()
            await viewer_stream.close()
            for departure in list(self.departures):
                try:
                    departure(viewer)
                except Exception:
                    log.exception("a VNC departure hook failed")

    async def _relay_input(self, viewer: Viewer, source: Stream, upstream: Stream,
                           downstream: _Downstream) -> None:
        parser = ClientMessageParser()
        while True:
            chunk = await source.read_some()
            arrived = time.monotonic()
            out = []
            for message in parser.feed(chunk):
                if message.type == SET_ENCODINGS:
                    message = filter_encodings(message)
                    downstream.takes_names(DESKTOP_NAME in encodings_of(message))
                elif message.type == SET_PIXEL_FORMAT:
                    downstream.pixel_format_sent(message.data[4:20])
                elif message.type == SET_DESKTOP_SIZE:
                    continue  # the screen size belongs to the environment's state
                elif message.type in INPUT_TYPES:
                    viewer.input_messages += 1
                    acts = not (message.type == POINTER_EVENT and not message.mask and not viewer.buttons_down)
                    if viewer.role != "control" or not self.control.human_input(viewer.id, acts):
                        viewer.dropped_messages += 1
                        continue
                    if self._input_from != viewer.id:
                        async with self._changing_hands:  # after the last viewer's release, if it is leaving
                            if self._input_from is not None:  # one person takes over from another
                                await asyncio.to_thread(self._release)
                    self._input_from = viewer.id
                    self._human_input_since_agent = True
                    before = viewer.buttons_down
                    viewer.saw(message)
                    self.on_human_input()
                    for tap in list(self.taps):
                        try:
                            tap(viewer, message, arrived)
                        except Exception:
                            log.exception("a VNC tap failed")
                    if message.type == POINTER_EVENT:
                        out.append(self._pointer_message(message))
                        changed = frozenset(b for b in viewer.buttons_down ^ before if b <= 5)
                        if changed:  # nothing after a press or release until X shows it
                            await upstream.write(b"".join(out))
                            out = []
                            await asyncio.to_thread(self.buttons_delivered, viewer.buttons_down, changed)
                        continue
                out.append(message.data)
            if out:
                await upstream.write(b"".join(out))


class _Downstream:
    """x11vnc's messages to one viewer, forwarded as they come, with a DesktopName update put between two of
    them whenever the name the viewer should see (:meth:`VncSession.name_for`) is not the one it was shown."""

    def __init__(self, session: VncSession, viewer: Viewer, server_init: bytes, sink: Stream) -> None:
        self.session, self.viewer, self.sink = session, viewer, sink
        self._header = server_init[:24]
        self._base = server_init[24:].decode("utf-8", "replace")
        width, height = struct.unpack_from(">HH", server_init)
        try:
            self.stream = ServerStream(width, height, PixelFormat.from_bytes(server_init[4:20]))
        except RfbError as exc:
            self.stream = ServerStream(width, height, PixelFormat(32, 24, True, (255, 255, 255)))
            self.stream.lost = str(exc)
        self._names = False  # the viewer takes DesktopName updates
        self._shown = ""
        self._lock = asyncio.Lock()  # one writer to the viewer at a time: the relay or an announcement

    def server_init(self) -> bytes:
        """x11vnc's ServerInit, with the name this viewer should see."""
        self._shown = self.session.name_for(self.viewer, self._base)
        name = self._shown.encode("utf-8")
        return self._header[:20] + struct.pack(">I", len(name)) + name

    def takes_names(self, yes: bool) -> None:
        """The viewer's SetEncodings says whether it takes DesktopName updates. One whose first does not is
        never followed (no cost for it; a later change of mind keeps the title it has)."""
        if not yes and not self._names and self.stream.lost is None:
            self.stream.lost = "the viewer takes no DesktopName updates"
        self._names = yes and self.stream.lost is None
        if self._names:
            asyncio.ensure_future(self.announce())  # a notice that came between the ServerInit and now

    def pixel_format_sent(self, data: bytes) -> None:
        try:
            self.stream.pixel_format_sent(PixelFormat.from_bytes(data))
        except RfbError as exc:  # x11vnc will refuse it too; only the names stop
            self.stream.lost = str(exc)

    def _update(self) -> bytes:
        """The DesktopName update due, if one is (and marks it shown)."""
        if not self._names:
            return b""
        wanted = self.session.name_for(self.viewer, self._base)
        if wanted == self._shown:
            return b""
        self._shown = wanted
        return desktop_name_update(wanted)

    async def announce(self) -> None:
        """Send the name now if no message of x11vnc's is half sent; else the relay sends it after that one."""
        async with self._lock:
            if self.stream.at_boundary:
                update = self._update()
                if update:
                    await self.sink.write(update)

    async def relay(self, source: Stream) -> None:
        while True:
            data = await source.read_some()
            async with self._lock:
                ends = self.stream.feed(data)
                update = self._update() if ends else b""
                if update:  # after the last message that ended in this chunk
                    cut = ends[-1]
                    data = data[:cut] + update + data[cut:]
                await self.sink.write(data)
                if self.stream.lost is not None and self._names:
                    log.info("viewer %s: x11vnc's stream cannot be followed (%s): its title stays as it is",
                             self.viewer.id, self.stream.lost)
                    self._names = False


def _one_line(text: str, limit: int = 160) -> str:
    """A title's text: one line, no control characters, at most ``limit`` characters."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


async def _upstream_handshake(upstream: Stream) -> bytes:
    """Log in to x11vnc (security None over its private socket); return its ServerInit."""
    version = await upstream.read(12)
    if not version.startswith(b"RFB "):
        raise RfbError(f"x11vnc answered {version!r}")
    await upstream.write(PROTOCOL_38)
    (count,) = await upstream.read(1)
    if count == 0:
        (length,) = struct.unpack(">I", await upstream.read(4))
        raise RfbError(f"x11vnc refused: {(await upstream.read(length)).decode(errors='replace')}")
    types = await upstream.read(count)
    if SECURITY_NONE not in types:
        raise RfbError(f"x11vnc offers no security type None ({list(types)})")
    await upstream.write(bytes([SECURITY_NONE]))
    (result,) = struct.unpack(">I", await upstream.read(4))
    if result != 0:
        raise RfbError("x11vnc refused the connection")
    await upstream.write(b"\x01")  # ClientInit: shared
    header = await upstream.read(24)
    (name_length,) = struct.unpack_from(">I", header, 20)
    return header + await upstream.read(name_length)


async def viewer_handshake(stream: Stream, security: int) -> tuple[bytes | None, bytes | None]:
    """The server side of the RFB handshake up to the security result.

    With ``SECURITY_VNC`` returns ``(challenge, response)`` for the caller to check (then call
    :func:`finish_security`); with ``SECURITY_NONE`` the handshake is complete and returns ``(None, None)``.
    """
    await stream.write(PROTOCOL_38)
    version = await stream.read(12)
    if not version.startswith(b"RFB 003."):
        raise RfbError(f"not a VNC viewer: {version!r}")
    minor = int(version[8:11] or b"0")
    if minor < 7:  # 3.3: the server picks the security type
        await stream.write(struct.pack(">I", security))
    else:
        await stream.write(bytes([1, security]))
        (chosen,) = await stream.read(1)
        if chosen != security:
            raise RfbError(f"viewer chose security type {chosen}, offered {security}")
    if security == SECURITY_NONE:
        if minor >= 8:
            await stream.write(struct.pack(">I", 0))
        return None, None
    challenge = new_challenge()
    await stream.write(challenge)
    response = await stream.read(16)
    return challenge, response


async def finish_security(stream: Stream, ok: bool, reason: str = "authentication failed") -> None:
    if ok:
        await stream.write(struct.pack(">I", 0))
    else:
        encoded = reason.encode()
        await stream.write(struct.pack(">II", 1, len(encoded)) + encoded)


__all__ = [
    "AsyncioStream", "Role", "Tap", "Viewer", "VncSession", "WebSocketStream", "finish_security",
    "new_password", "viewer_handshake",
]
