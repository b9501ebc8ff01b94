"""What native VNC viewers show of a hand-over: the agent's request, then who holds the desktop, in the viewer's
title (hci_envs.vnc.server_messages follows x11vnc's stream so that the proxy can put DesktopName updates in it).
Real TigerVNC viewers, one per encoding, watch a desktop that never stops animating: each one's title follows the
hand-over, and each one keeps decoding the animation, so no update was put in the middle of one of x11vnc's."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import need_programs
from helpers import ANIMATE, McpClient, ServerProcess, wait_until
from PIL import Image, ImageChops
from rfb_client import RfbClient

from hci_envs.vnc.server_messages import (
    DESKTOP_NAME,
    HEXTILE,
    RAW,
    TIGHT,
    ZRLE,
    PixelFormat,
    ServerStream,
    desktop_name_update,
)

#: TigerVNC's names of the encodings each viewer prefers (with automatic selection off, it keeps to it).
ENCODINGS = ("Tight", "ZRLE", "Hextile", "Raw")


class NativeViewer:
    """xtigervncviewer on an Xvfb display of its own, whose window title and screen the test reads."""

    def __init__(self, port: int, password: str, encoding: str, workdir: Path) -> None:
        self.xvfb = subprocess.Popen(["Xvfb", "-displayfd", "1", "-screen", "0", "900x600x24", "-nolisten", "tcp"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.display = f":{self.xvfb.stdout.readline().decode().strip()}"
        passwd = workdir / f"passwd-{encoding}"
        subprocess.run(["x11vnc", "-storepasswd", password[:8], str(passwd)], check=True, capture_output=True)
        self.log = workdir / f"viewer-{encoding}.log"
        with open(self.log, "wb") as log:
            self.viewer = subprocess.Popen(
                ["xtigervncviewer", "-passwd", str(passwd), f"-PreferredEncoding={encoding}", "-AutoSelect=0",
                 "-FullColor=1", f"127.0.0.1::{port}"], env={**os.environ, "DISPLAY": self.display},
                stdout=log, stderr=log)

    def _x(self, *argv: str) -> str:
        return subprocess.run(argv, env={**os.environ, "DISPLAY": self.display}, capture_output=True, text=True,
                              timeout=30).stdout

    def title(self) -> str:
        ids = self._x("xdotool", "search", "--name", "TigerVNC").split()
        return self._x("xdotool", "getwindowname", ids[-1]).strip() if ids else ""

    def screen(self) -> Image.Image:
        import io

        data = subprocess.run(["import", "-display", self.display, "-window", "root", "png:-"],
                              capture_output=True, timeout=30).stdout
        return Image.open(io.BytesIO(data)).convert("RGB")

    def close(self) -> None:
        for proc in (self.viewer, self.xvfb):
            proc.kill()
            proc.wait(10)


def _animates(viewer: NativeViewer) -> bool:
    """The viewer's picture of the desktop changes (the animation's frames keep coming and decoding)."""
    first = viewer.screen()
    return wait_until(lambda: ImageChops.difference(first, viewer.screen()).getbbox() is not None, timeout=10)


@pytest.mark.x11
def test_native_viewers_titles_show_the_request_and_who_holds_the_desktop(x11, tmp_path):
    need_programs("x11vnc", "xtigervncviewer", "xdotool", "import")
    animation = " ".join(f"'{c}'" for c in (sys.executable, str(ANIMATE), "640", "400", "16"))
    with ServerProcess("--env", "assisted-desktop", "--app", animation, "--vnc-port", "0", "--no-spare",
                       "--human-answer-within", "300") as server, server.http() as http:
        assert http.post("/reset", json={}).status_code == 200
        state = http.get("/state").json()
        port, secrets = state["vnc_native_port"], state["vnc_secrets"]
        viewers = {encoding: NativeViewer(port, secrets["view" if encoding == "Raw" else "control"], encoding,
                                          tmp_path) for encoding in ENCODINGS}
        try:
            assert wait_until(lambda: all(v.title() for v in viewers.values()), timeout=60), \
                {e: v.log.read_text() for e, v in viewers.items()}
            plain = {e: v.title() for e, v in viewers.items()}
            assert not any("agent" in t for t in plain.values()), plain
            with McpClient(f"{server.base_url}/mcp") as mcp:
                mcp.ok("mouse_move", {"x": 700, "y": 500})
                mcp.ok("ask_human", {"reason": "the dialog\nwants a folder"})

                def titles_say(text: str) -> bool:
                    return all(text in v.title() for v in viewers.values())

                assert wait_until(lambda: titles_say("The agent asks for a person: the dialog wants a folder"),
                                  timeout=20), {e: v.title() for e, v in viewers.items()}
                hint = "(a key or a click here takes the desktop)"
                assert all((hint in v.title()) == (e != "Raw") for e, v in viewers.items())  # Raw's is a view
                assert titles_say("- its last actions: mouse_move(700, 500) | ")
                # a viewer that comes now is told in its ServerInit
                late = RfbClient.tcp(port, secrets["control"])
                assert late.name.startswith("The agent asks for a person") and hint in late.name
                late.close()
                http.post("/human", json={"command": "accept", "person": "ana"}).raise_for_status()
                assert wait_until(lambda: titles_say("ana has the desktop for the agent"), timeout=20)
                for encoding, viewer in viewers.items():  # still decoding x11vnc's updates, in every encoding
                    assert _animates(viewer), (encoding, viewer.log.read_text())
                http.post("/human", json={"command": "hand_back", "note": "done"}).raise_for_status()
                assert wait_until(lambda: {e: v.title() for e, v in viewers.items()} == plain, timeout=20)
                for n in range(12):  # many more names, each put among the animation's updates
                    mcp.ok("ask_human", {"reason": f"again {n}"})
                    http.post("/human", json={"command": "accept", "person": "bo"}).raise_for_status()
                    time.sleep(0.05)
                    http.post("/human", json={"command": "hand_back"}).raise_for_status()
                assert wait_until(lambda: {e: v.title() for e, v in viewers.items()} == plain, timeout=20)
            for encoding, viewer in viewers.items():
                assert viewer.viewer.poll() is None and _animates(viewer), (encoding, viewer.log.read_text())
        finally:
            for viewer in viewers.values():
                viewer.close()


# -- following the stream ----------------------------------------------------------------------------------------
FORMAT = PixelFormat(32, 24, True, (255, 255, 255))


def _rect(x: int, y: int, w: int, h: int, encoding: int) -> bytes:
    return struct.pack(">HHHHi", x, y, w, h, encoding)


def _update(*rects: bytes, count: int | None = None) -> bytes:
    return struct.pack(">BxH", 0, len(rects) if count is None else count) + b"".join(rects)


def _ends(stream: ServerStream, data: bytes, step: int) -> list[int]:
    """Feed ``data`` in pieces of ``step`` bytes; the offsets in ``data`` where messages ended."""
    ends = []
    for at in range(0, len(data), step):
        ends += [at + end for end in stream.feed(data[at:at + step])]
    return ends


@pytest.mark.fake
@pytest.mark.parametrize("step", [1, 3, 7, 4096])
def test_each_message_is_followed_to_its_end_in_any_pieces(step):
    messages = [
        _update(_rect(0, 0, 2, 2, RAW) + bytes(16)),
        # tight: a fill, a two-colour palette (rows of bits), a copy with compressed data, and JPEG
        _update(_rect(0, 0, 4, 4, TIGHT) + b"\x80" + bytes(3),
                _rect(0, 0, 9, 2, TIGHT) + b"\x40\x01\x01" + bytes(6) + bytes(4),
                _rect(0, 0, 10, 10, TIGHT) + b"\x00" + b"\x82\x01" + bytes(130),
                _rect(0, 0, 10, 10, TIGHT) + b"\x90" + b"\x05" + bytes(5)),
        # hextile: a raw tile, then a tile with a background and two coloured subrects (a 20x16 rectangle)
        _update(_rect(0, 0, 20, 16, HEXTILE) + b"\x01" + bytes(16 * 16 * 4)
                + b"\x1a" + bytes(4) + b"\x02" + bytes(2 * 6)),
        _update(_rect(0, 0, 8, 8, ZRLE) + struct.pack(">I", 9) + bytes(9),
                _rect(0, 0, 0, 0, -224), count=0xFFFF),  # as many as come before a LastRect
        bytes([2]),  # bell
        struct.pack(">BxxxI", 3, 5) + b"hello",  # the clipboard
        struct.pack(">BxHH", 1, 0, 2) + bytes(12),  # colour map entries
        _update(_rect(0, 0, 3, 2, -239) + bytes(3 * 2 * 4 + 2)),  # a cursor
        desktop_name_update("ünïcode"),
        _update(_rect(0, 0, 800, 600, -223)),  # the screen grows
        _update(_rect(700, 500, 100, 100, 1) + bytes(4)),  # copy rect on the bigger screen
    ]
    data = b"".join(messages)
    stream = ServerStream(640, 400, FORMAT)
    expected, at = [], 0
    for message in messages:
        at += len(message)
        expected.append(at)
    assert _ends(stream, data, step) == expected and stream.lost is None
    assert stream.at_boundary and (stream.width, stream.height) == (800, 600)


@pytest.mark.fake
def test_what_cannot_be_followed_is_lost_and_no_boundary_is_claimed():
    stream = ServerStream(640, 400, FORMAT)
    assert stream.feed(_update(_rect(0, 0, 1, 1, 8) + bytes(8))) == [] and "encoding 8" in stream.lost
    assert not stream.at_boundary and stream.feed(bytes([2])) == []
    off = ServerStream(640, 400, FORMAT)
    assert off.feed(_update(_rect(600, 0, 50, 1, RAW))) == [] and "off a 640x400 screen" in off.lost
    unknown = ServerStream(640, 400, FORMAT)
    assert unknown.feed(bytes([9])) == [] and "message type 9" in unknown.lost


@pytest.mark.fake
def test_a_new_pixel_format_counts_from_the_next_message():
    stream = ServerStream(640, 400, FORMAT)
    half = _update(_rect(0, 0, 2, 1, RAW) + bytes(8))
    assert stream.feed(half[:6]) == []
    stream.pixel_format_sent(PixelFormat(16, 16, True, (31, 63, 31)))
    assert stream.feed(half[6:]) == [len(half) - 6]  # the update under way keeps 4 bytes a pixel
    after = _update(_rect(0, 0, 2, 1, RAW) + bytes(4))  # 2 bytes a pixel now
    assert stream.feed(after) == [len(after)] and stream.lost is None


@pytest.mark.fake
def test_a_viewer_asking_for_names_keeps_only_encodings_that_can_be_followed():
    from hci_envs.vnc.rfb import ClientMessage, encodings_of, filter_encodings

    asked = (TIGHT, 8, ZRLE, -258, DESKTOP_NAME, -24, -314, -1063131698)
    message = ClientMessage(2, struct.pack(f">BxH{len(asked)}i", 2, len(asked), *asked))
    assert encodings_of(filter_encodings(message)) == (TIGHT, ZRLE, DESKTOP_NAME, -24)
    without = tuple(e for e in asked if e != DESKTOP_NAME)
    plain = ClientMessage(2, struct.pack(f">BxH{len(without)}i", 2, len(without), *without))
    assert encodings_of(filter_encodings(plain)) == (TIGHT, 8, ZRLE, -24, -314)
