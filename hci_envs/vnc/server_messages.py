"""Where each message of x11vnc's stream to a viewer ends, so that the proxy can put a message of its own
between two of them: the desktop's name (RFB's DesktopName pseudo-encoding), which viewers show in their title.

The proxy forwards x11vnc's bytes unchanged; :class:`ServerStream` only follows them. It needs to understand
every message and every rectangle encoding that may come, so a viewer that asks for names gets its
SetEncodings cut down to the encodings followed here (:data:`FOLLOWED_ENCODINGS`, see
:func:`~hci_envs.vnc.rfb.filter_encodings`); those are the ones x11vnc, TigerVNC, noVNC and libvncclient use
anyway. Anything unexpected (an unknown message or encoding, a rectangle off the screen) makes the stream
``lost``: from then on it is forwarded as before, and nothing more is put into it.

RFC 6143 (sections 7.6, 7.7) and the RFB community's Tight and pseudo-encoding notes are the reference.
"""

from __future__ import annotations

import struct
from collections.abc import Generator
from dataclasses import dataclass

from ..errors import RfbError

# server-to-client message types
FRAMEBUFFER_UPDATE, SET_COLOUR_MAP_ENTRIES, BELL, SERVER_CUT_TEXT = 0, 1, 2, 3

# encodings (rectangles with pixels)
RAW, COPY_RECT, RRE, CORRE, HEXTILE, ZLIB, TIGHT, ZRLE, ZYWRLE = 0, 1, 2, 4, 5, 6, 7, 16, 17
# pseudo-encodings
RICH_CURSOR, X_CURSOR, DESKTOP_SIZE, LAST_RECT, POINTER_POS, DESKTOP_NAME = -239, -240, -223, -224, -232, -307
#: Pseudo-encodings that only tell the server a preference (JPEG quality, compression level): no data follows.
PREFERENCES = frozenset(range(-32, -22)) | frozenset(range(-256, -246))
#: What a viewer that asks for names may ask for: what :class:`ServerStream` follows.
FOLLOWED_ENCODINGS = frozenset({RAW, COPY_RECT, RRE, CORRE, HEXTILE, ZLIB, TIGHT, ZRLE, ZYWRLE, RICH_CURSOR,
                                X_CURSOR, DESKTOP_SIZE, LAST_RECT, POINTER_POS, DESKTOP_NAME}) | PREFERENCES
#: Data shorter than this is sent uncompressed in a Tight rectangle.
_TIGHT_MIN_TO_COMPRESS = 12

_READ, _SKIP, _END = 0, 1, 2
_Steps = Generator[tuple[int, int], bytes, None]


@dataclass(frozen=True)
class PixelFormat:
    """The part of RFB's PIXEL_FORMAT that says how many bytes a pixel takes on the wire."""

    bits_per_pixel: int
    depth: int
    true_colour: bool
    maxima: tuple[int, int, int]

    @classmethod
    def from_bytes(cls, data: bytes) -> PixelFormat:
        """From the 16 bytes of a ServerInit's or SetPixelFormat's PIXEL_FORMAT."""
        bpp, depth, _big_endian, true_colour, r, g, b = struct.unpack_from(">BBBBHHH", data)
        if bpp not in (8, 16, 32):
            raise RfbError(f"a pixel format of {bpp} bits per pixel")
        return cls(bpp, depth, bool(true_colour), (r, g, b))

    @property
    def pixel_bytes(self) -> int:
        return self.bits_per_pixel // 8

    @property
    def tight_pixel_bytes(self) -> int:
        """Tight sends 32-bit pixels of 8-bit colours as three bytes (its TPIXEL)."""
        return 3 if self.bits_per_pixel == 32 and self.depth == 24 and self.maxima == (255, 255, 255) \
            else self.pixel_bytes


def desktop_name_update(name: str) -> bytes:
    """A FramebufferUpdate with one DesktopName rectangle: the viewer's new title."""
    encoded = name.encode("utf-8")
    return struct.pack(">BxHHHHHiI", FRAMEBUFFER_UPDATE, 1, 0, 0, 0, 0, DESKTOP_NAME, len(encoded)) + encoded


class ServerStream:
    """Follows a server's messages, fed as they arrive; :attr:`at_boundary` says whether a message of one's own
    may go in now. Starts right after the ServerInit (``width``, ``height`` and its pixel format)."""

    def __init__(self, width: int, height: int, pixel_format: PixelFormat) -> None:
        self.width, self.height = width, height
        self.format = pixel_format
        self._next_format: PixelFormat | None = None
        #: Why the stream could not be followed, once it could not.
        self.lost: str | None = None
        self._buffer = bytearray()
        self._steps = self._messages()
        self._want = next(self._steps)
        self._fresh = True  # no byte of the next message seen yet

    @property
    def at_boundary(self) -> bool:
        return self.lost is None and self._fresh

    def pixel_format_sent(self, pixel_format: PixelFormat) -> None:
        """The viewer asked for another pixel format: messages that begin from now on use it. (A viewer changes
        its format only while it waits for no update, since it could not read one in flight either.)"""
        self._next_format = pixel_format

    def feed(self, data: bytes) -> list[int]:
        """Follow ``data``; return the offsets in it at which a message ends (none once lost)."""
        ends: list[int] = []
        if self.lost is not None:
            return ends
        pos, size = 0, len(data)
        try:
            while pos < size:
                kind, n = self._want
                self._fresh = False
                if kind == _SKIP:
                    take = min(n, size - pos)
                    pos += take
                    if take < n:
                        self._want = (_SKIP, n - take)
                        break
                    self._want = self._steps.send(b"")
                else:
                    take = min(n - len(self._buffer), size - pos)
                    self._buffer += data[pos:pos + take]
                    pos += take
                    if len(self._buffer) < n:
                        break
                    got = bytes(self._buffer)
                    self._buffer.clear()
                    self._want = self._steps.send(got)
                while self._want[0] == _END or self._want == (_SKIP, 0):
                    if self._want[0] == _END:
                        ends.append(pos)
                        self._fresh = True
                    self._want = next(self._steps)
        except RfbError as exc:
            self.lost = str(exc)
            return []
        return ends

    # -- the messages, as a generator of what to read next ------------------------------------------------
    def _messages(self) -> _Steps:
        while True:
            if self._next_format is not None:
                self.format, self._next_format = self._next_format, None
            (kind,) = yield _READ, 1
            if kind == FRAMEBUFFER_UPDATE:
                yield from self._update()
            elif kind == SET_COLOUR_MAP_ENTRIES:
                _first, count = struct.unpack(">xHH", (yield _READ, 5))
                yield _SKIP, 6 * count
            elif kind == SERVER_CUT_TEXT:
                (length,) = struct.unpack(">xxxi", (yield _READ, 7))
                if length < 0:
                    raise RfbError("an extended clipboard message, which viewers asking for names do not get")
                yield _SKIP, length
            elif kind != BELL:
                raise RfbError(f"server message type {kind}")
            yield _END, 0

    def _update(self) -> _Steps:
        (count,) = struct.unpack(">xH", (yield _READ, 3))
        done = 0
        while count == 0xFFFF or done < count:  # 0xFFFF: as many as come before a LastRect
            x, y, w, h, encoding = struct.unpack(">HHHHi", (yield _READ, 12))
            done += 1
            if encoding == LAST_RECT:
                return
            yield from self._rectangle(x, y, w, h, encoding)

    def _rectangle(self, x: int, y: int, w: int, h: int, encoding: int) -> _Steps:
        bpp = self.format.pixel_bytes
        if encoding >= 0 and (x + w > self.width or y + h > self.height):
            raise RfbError(f"a rectangle {w}x{h}+{x}+{y} off a {self.width}x{self.height} screen")
        if encoding == RAW:
            yield _SKIP, w * h * bpp
        elif encoding == COPY_RECT:
            yield _SKIP, 4
        elif encoding in (RRE, CORRE):
            (subrects,) = struct.unpack(">I", (yield _READ, 4))
            yield _SKIP, bpp + subrects * (bpp + (8 if encoding == RRE else 4))
        elif encoding == HEXTILE:
            yield from self._hextile(x, y, w, h, bpp)
        elif encoding in (ZLIB, ZRLE, ZYWRLE):
            (length,) = struct.unpack(">I", (yield _READ, 4))
            yield _SKIP, length
        elif encoding == TIGHT:
            yield from self._tight(w, h)
        elif encoding == RICH_CURSOR:
            yield _SKIP, w * h * bpp + (w + 7) // 8 * h
        elif encoding == X_CURSOR:
            yield _SKIP, (6 + 2 * ((w + 7) // 8) * h) if w and h else 0
        elif encoding == DESKTOP_SIZE:
            self.width, self.height = w, h
        elif encoding == DESKTOP_NAME:
            (length,) = struct.unpack(">I", (yield _READ, 4))
            yield _SKIP, length
        elif encoding != POINTER_POS:
            raise RfbError(f"rectangle encoding {encoding}")

    @staticmethod
    def _hextile(x: int, y: int, w: int, h: int, bpp: int) -> _Steps:
        for top in range(y, y + h, 16):
            for left in range(x, x + w, 16):
                (sub,) = yield _READ, 1
                if sub & 1:  # raw tile
                    yield _SKIP, min(16, x + w - left) * min(16, y + h - top) * bpp
                    continue
                yield _SKIP, bpp * (bool(sub & 2) + bool(sub & 4))  # background, foreground
                if sub & 8:  # any subrects
                    (subrects,) = yield _READ, 1
                    yield _SKIP, subrects * ((bpp if sub & 16 else 0) + 2)

    def _tight(self, w: int, h: int) -> _Steps:
        pixel = self.format.tight_pixel_bytes
        (control,) = yield _READ, 1
        method = control >> 4
        if method == 0x8:  # fill
            yield _SKIP, pixel
            return
        if method in (0x9, 0xA):  # JPEG, PNG
            yield _SKIP, (yield from _compact_length())
            return
        if method > 0xA:
            raise RfbError(f"Tight compression control {control:#x}")
        row = w * pixel
        if method & 0x4:  # an explicit filter
            (flt,) = yield _READ, 1
            if flt == 1:  # palette
                (last,) = yield _READ, 1
                yield _SKIP, (last + 1) * pixel
                row = (w + 7) // 8 if last == 1 else w
            elif flt not in (0, 2):  # copy, gradient
                raise RfbError(f"Tight filter {flt}")
        size = row * h
        yield _SKIP, size if size < _TIGHT_MIN_TO_COMPRESS else (yield from _compact_length())


def _compact_length() -> Generator[tuple[int, int], bytes, int]:
    """Tight's length: 1 to 3 bytes, 7 bits each, the high bit saying another follows."""
    length, shift = 0, 0
    for _ in range(3):
        (byte,) = yield _READ, 1
        length |= (byte & (0x7F if shift < 14 else 0xFF)) << shift
        if not byte & 0x80 or shift == 14:
            break
        shift += 7
    return length
