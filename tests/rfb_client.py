"""A small RFB (VNC) client for tests and benchmarks: handshake, raw-encoded frames, input events.

Deliberately separate from the proxy's own code, so a test does not check the proxy against itself: the
DES of VNC authentication comes from the `cryptography` package directly here.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any


def _des_response(password: str, challenge: bytes) -> bytes:
    from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
    from cryptography.hazmat.primitives.ciphers import Cipher, modes

    key = bytes(int(f"{b:08b}"[::-1], 2) for b in password.encode()[:8].ljust(8, b"\0"))
    enc = Cipher(TripleDES(key * 3), modes.ECB()).encryptor()
    return enc.update(challenge) + enc.finalize()


class _SocketIO:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("connection closed")
            buf += chunk
        return bytes(buf)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()


class _WebSocketIO:
    def __init__(self, url: str) -> None:
        from websockets.sync.client import connect

        self.ws = connect(url, max_size=2**26, proxy=None).__enter__()
        self.buf = bytearray()

    def recv_exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            message = self.ws.recv(timeout=30)
            self.buf += message if isinstance(message, bytes) else message.encode("latin-1")
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def send(self, data: bytes) -> None:
        self.ws.send(data)

    def close(self) -> None:
        self.ws.close()


class RfbClient:
    """Connect with ``RfbClient.tcp(port, password)`` or ``RfbClient.websocket(url)``."""

    def __init__(self, io: Any, password: str | None, *, names: bool = False) -> None:
        self.io = io
        version = io.recv_exact(12)
        assert version.startswith(b"RFB "), version
        io.send(b"RFB 003.008\n")
        (count,) = io.recv_exact(1)
        if count == 0:
            (length,) = struct.unpack(">I", io.recv_exact(4))
            raise ConnectionRefusedError(io.recv_exact(length).decode())
        types = io.recv_exact(count)
        if 2 in types and password is not None:
            io.send(b"\x02")
            io.send(_des_response(password, io.recv_exact(16)))
        else:
            io.send(bytes([types[0]]))
        (result,) = struct.unpack(">I", io.recv_exact(4))
        if result != 0:
            (length,) = struct.unpack(">I", io.recv_exact(4))
            raise PermissionError(io.recv_exact(length).decode())
        io.send(b"\x01")
        header = io.recv_exact(24)
        self.width, self.height = struct.unpack_from(">HH", header, 0)
        (name_len,) = struct.unpack_from(">I", header, 20)
        self.name = io.recv_exact(name_len).decode(errors="replace")
        # 32 bits per pixel, little endian, true colour, BGRX: raw rectangles are then easy to read
        io.send(struct.pack(">BxxxBBBBHHHBBBxxx", 0, 32, 24, 0, 1, 255, 255, 255, 16, 8, 0))
        # SetEncodings: raw only, and with ``names`` the desktop's name when it changes (DesktopName)
        io.send(struct.pack(">BxHii", 2, 2, 0, -307) if names else struct.pack(">BxHi", 2, 1, 0))
        self.frame = bytearray(self.width * self.height * 4)

    @classmethod
    def tcp(cls, port: int, password: str | None, host: str = "127.0.0.1", *, names: bool = False) -> RfbClient:
        sock = socket.create_connection((host, port), timeout=30)
        return cls(_SocketIO(sock), password, names=names)

    @classmethod
    def websocket(cls, url: str) -> RfbClient:
        return cls(_WebSocketIO(url), None)

    # -- input ----------------------------------------------------------------------------------------
    def pointer(self, x: int, y: int, mask: int = 0) -> None:
        self.io.send(struct.pack(">BBHH", 5, mask, x, y))

    def click(self, x: int, y: int, button: int = 1) -> None:
        bit = 1 << (button - 1)
        self.pointer(x, y, 0)
        self.pointer(x, y, bit)
        self.pointer(x, y, 0)

    def key(self, keysym: int, down: bool) -> None:
        self.io.send(struct.pack(">BBxxI", 4, int(down), keysym))

    def tap(self, keysym: int) -> None:
        self.key(keysym, True)
        self.key(keysym, False)

    def cut_text(self, text: str) -> None:
        data = text.encode("latin-1")
        self.io.send(struct.pack(">BxxxI", 6, len(data)) + data)

    # -- frames ---------------------------------------------------------------------------------------
    def request(self, incremental: bool = True) -> None:
        self.io.send(struct.pack(">BBHHHH", 3, int(incremental), 0, 0, self.width, self.height))

    def read_update(self) -> int:
        """Read server messages until one FramebufferUpdate is complete; return its rectangle count."""
        while True:
            (kind,) = self.io.recv_exact(1)
            if kind == 0:
                (count,) = struct.unpack(">xH", self.io.recv_exact(3))
                rects = 0
                for _ in range(count):
                    x, y, w, h, enc = struct.unpack(">HHHHi", self.io.recv_exact(12))
                    if enc == 0:
                        data = self.io.recv_exact(w * h * 4)
                        for row in range(h):
                            start = ((y + row) * self.width + x) * 4
                            self.frame[start:start + w * 4] = data[row * w * 4:(row + 1) * w * 4]
                        rects += 1
                    elif enc == -223:  # desktop size
                        self.width, self.height = w, h
                        self.frame = bytearray(w * h * 4)
                    elif enc == -224:  # last rect
                        break
                    elif enc == -307:  # the desktop's name
                        (length,) = struct.unpack(">I", self.io.recv_exact(4))
                        self.name = self.io.recv_exact(length).decode(errors="replace")
                    else:
                        raise AssertionError(f"unexpected encoding {enc}")
                return rects
            if kind == 2:  # bell
                continue
            if kind == 3:  # server cut text
                (length,) = struct.unpack(">xxxI", self.io.recv_exact(7))
                self.io.recv_exact(length)
                continue
            raise AssertionError(f"unexpected server message {kind}")

    def full_frame(self) -> Any:
        """Request and read a complete frame; return it as a Pillow RGB image."""
        from PIL import Image

        self.request(incremental=False)
        self.read_update()
        return Image.frombuffer("RGB", (self.width, self.height), bytes(self.frame), "raw", "BGRX", 0, 1)

    def updates_per_second(self, seconds: float) -> float:
        count, deadline = 0, time.monotonic() + seconds
        self.request(incremental=False)
        while time.monotonic() < deadline:
            if self.read_update():
                count += 1
            self.request(incremental=True)
        return count / seconds

    def close(self) -> None:
        self.io.close()
