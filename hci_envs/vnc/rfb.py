"""The parts of the RFB (VNC) protocol the proxy needs: handshakes, VNC authentication, and a parser of the
client-to-server message stream.

The proxy must understand every message a viewer sends: it drops input from view-only viewers, hands human
input to the recorders, and must know where each message ends to do either. So it also removes from the
viewer's SetEncodings the extensions whose client messages it does not parse (QEMU key events, xvp,
desktop resizing, the extended clipboard); viewers then fall back to the core messages. The other direction,
x11vnc's messages to the viewer, is followed by :mod:`hci_envs.vnc.server_messages`.

RFC 6143 is the reference.
"""

from __future__ import annotations

import secrets
import struct
from dataclasses import dataclass
from typing import Any

from ..errors import RfbError
from .server_messages import DESKTOP_NAME, FOLLOWED_ENCODINGS

PROTOCOL_38 = b"RFB 003.008\n"
SECURITY_NONE = 1
SECURITY_VNC = 2

SET_PIXEL_FORMAT = 0
SET_ENCODINGS = 2
FRAMEBUFFER_UPDATE_REQUEST = 3
KEY_EVENT = 4
POINTER_EVENT = 5
CLIENT_CUT_TEXT = 6
ENABLE_CONTINUOUS_UPDATES = 150
CLIENT_FENCE = 248
SET_DESKTOP_SIZE = 251

INPUT_TYPES = frozenset({KEY_EVENT, POINTER_EVENT, CLIENT_CUT_TEXT})
MESSAGE_NAMES = {
    SET_PIXEL_FORMAT: "SetPixelFormat", SET_ENCODINGS: "SetEncodings",
    FRAMEBUFFER_UPDATE_REQUEST: "FramebufferUpdateRequest", KEY_EVENT: "KeyEvent", POINTER_EVENT: "PointerEvent",
    CLIENT_CUT_TEXT: "ClientCutText", ENABLE_CONTINUOUS_UPDATES: "EnableContinuousUpdates",
    CLIENT_FENCE: "ClientFence", SET_DESKTOP_SIZE: "SetDesktopSize",
}

#: Pseudo-encodings whose client messages the proxy does not parse or does not allow.
_REFUSED_ENCODINGS = frozenset({
    -258,  # QEMU extended key event (message 255)
    -259,  # QEMU audio
    -305,  # gii (message 253)
    -308,  # ExtendedDesktopSize (lets the viewer resize the screen with SetDesktopSize)
    -309,  # xvp (message 250)
    -1063131698,  # extended clipboard (0xC0A1E5CE, ClientCutText with a negative length)
})
#: Longest clipboard a viewer may send.
MAX_CUT_TEXT = 16 * 1024 * 1024


@dataclass(frozen=True)
class ClientMessage:
    """One client-to-server message: its type, the bytes to forward, and the decoded fields of the input
    messages (``down``/``keysym`` for KeyEvent, ``mask``/``x``/``y`` for PointerEvent, ``text`` for
    ClientCutText). The same record is what a recording stores and reads back (``raw/input.jsonl``): there it
    also has its index ``i`` and arrival time ``t`` (seconds), and no bytes."""

    type: int
    data: bytes = b""
    down: bool = False
    keysym: int = 0
    mask: int = 0
    x: int = 0
    y: int = 0
    text: str = ""
    i: int = -1
    t: float = 0.0

    @property
    def msg(self) -> str:
        """The message's RFB name (``KeyEvent``, ``PointerEvent``, ...)."""
        return MESSAGE_NAMES.get(self.type, str(self.type))

    def to_dict(self) -> dict[str, object]:
        if self.type == KEY_EVENT:
            return {"msg": "KeyEvent", "down": self.down, "keysym": self.keysym}
        if self.type == POINTER_EVENT:
            return {"msg": "PointerEvent", "mask": self.mask, "x": self.x, "y": self.y}
        if self.type == CLIENT_CUT_TEXT:
            return {"msg": "ClientCutText", "text": self.text}
        return {"msg": self.msg}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClientMessage:
        """A recorded message (``{"i", "t", "msg", ...}``) back as a message, without its bytes."""
        kind = _TYPES_BY_NAME.get(str(data["msg"]))
        if kind is None:
            raise RfbError(f"unknown RFB message {data['msg']!r}")
        return cls(kind, b"", down=bool(data.get("down", False)), keysym=int(data.get("keysym", 0)),
                   mask=int(data.get("mask", 0)), x=int(data.get("x", 0)), y=int(data.get("y", 0)),
                   text=str(data.get("text", "")), i=int(data.get("i", -1)), t=float(data.get("t", 0.0)))


_TYPES_BY_NAME = {name: kind for kind, name in MESSAGE_NAMES.items()}


class ClientMessageParser:
    """Splits the viewer's byte stream into messages. ``feed(bytes)`` returns the complete ones."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[ClientMessage]:
        self._buf += data
        out = []
        while self._buf:
            size = self._size()
            if size is None or len(self._buf) < size:
                break
            raw = bytes(self._buf[:size])
            del self._buf[:size]
            out.append(_decode(raw))
        return out

    def _size(self) -> int | None:
        b = self._buf
        kind = b[0]
        if kind == SET_PIXEL_FORMAT:
            return 20
        if kind == SET_ENCODINGS:
            return None if len(b) < 4 else 4 + 4 * struct.unpack_from(">H", b, 2)[0]
        if kind == FRAMEBUFFER_UPDATE_REQUEST:
            return 10
        if kind == KEY_EVENT:
            return 8
        if kind == POINTER_EVENT:
            return 6
        if kind == CLIENT_CUT_TEXT:
            if len(b) < 8:
                return None
            (length,) = struct.unpack_from(">i", b, 4)
            if length < 0 or length > MAX_CUT_TEXT:
                raise RfbError(f"viewer sent a clipboard of {length} bytes")
            return 8 + length
        if kind == ENABLE_CONTINUOUS_UPDATES:
            return 10
        if kind == CLIENT_FENCE:
            return None if len(b) < 9 else 9 + b[8]
        if kind == SET_DESKTOP_SIZE:
            return None if len(b) < 8 else 8 + 16 * b[6]
        raise RfbError(f"viewer sent an unsupported message type {kind}")


def _decode(raw: bytes) -> ClientMessage:
    kind = raw[0]
    if kind == KEY_EVENT:
        down, keysym = struct.unpack_from(">BxxI", raw, 1)
        return ClientMessage(kind, raw, down=bool(down), keysym=keysym)
    if kind == POINTER_EVENT:
        mask, x, y = struct.unpack_from(">BHH", raw, 1)
        return ClientMessage(kind, raw, mask=mask, x=x, y=y)
    if kind == CLIENT_CUT_TEXT:
        return ClientMessage(kind, raw, text=raw[8:].decode("latin-1"))
    return ClientMessage(kind, raw)


def encodings_of(message: ClientMessage) -> tuple[int, ...]:
    """The encodings a SetEncodings message lists, in the viewer's order of preference."""
    (count,) = struct.unpack_from(">H", message.data, 2)
    return struct.unpack_from(f">{count}i", message.data, 4)


def filter_encodings(message: ClientMessage) -> ClientMessage:
    """Drop the pseudo-encodings whose client messages the proxy does not handle. A viewer that asks for the
    desktop's name (DesktopName), which the proxy sends itself between x11vnc's messages, keeps only the
    encodings whose messages the proxy can follow (:mod:`hci_envs.vnc.server_messages`)."""
    kept = [e for e in encodings_of(message) if e not in _REFUSED_ENCODINGS]
    if DESKTOP_NAME in kept:
        kept = [e for e in kept if e in FOLLOWED_ENCODINGS]
    data = struct.pack(f">BxH{len(kept)}i", SET_ENCODINGS, len(kept), *kept)
    return ClientMessage(SET_ENCODINGS, data)


# -- VNC authentication -------------------------------------------------------------------------------------
def _des_key(password: str) -> bytes:
    key = password.encode("latin-1")[:8].ljust(8, b"\0")
    # VNC uses the password's bytes with their bit order reversed as the DES key.
    return bytes(int(f"{b:08b}"[::-1], 2) for b in key)


def vnc_response(password: str, challenge: bytes) -> bytes:
    """The 16-byte answer a viewer gives to ``challenge`` with ``password`` (DES, as RFC 6143 7.2.2)."""
    from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
    from cryptography.hazmat.primitives.ciphers import Cipher, modes

    key = _des_key(password)
    encryptor = Cipher(TripleDES(key * 3), modes.ECB()).encryptor()  # K1=K2=K3: single DES
    return encryptor.update(challenge) + encryptor.finalize()


def new_challenge() -> bytes:
    return secrets.token_bytes(16)


#: Characters of a VNC secret: 32 from a 57-letter alphabet, about 187 bits.
SECRET_LENGTH = 32
#: VNC authentication (DES, RFC 6143 7.2.2) reads only this many characters of a password.
VNC_AUTH_CHARS = 8


def new_password() -> str:
    """A random VNC secret: 32 characters (about 187 bits) for the browser URL; native viewers' VNC
    authentication can use only the first 8 of them (the protocol's limit)."""
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789"
    return "".join(secrets.choice(alphabet) for _ in range(SECRET_LENGTH))


def server_init_size(header: bytes) -> int:
    """Bytes still to read of a ServerInit whose first 24 bytes are ``header`` (the desktop name)."""
    (name_length,) = struct.unpack_from(">I", header, 20)
    return name_length
