"""Image encoders for screen frames: PNG (fast path), JPEG (libjpeg-turbo) and WebP.

Frames arrive as BGRX rows straight from the X server. JPEG is encoded from them without a colour conversion
(simplejpeg takes BGRX). PNG is written here: unfiltered rows compressed by ISA-L deflate, which on screen
content is an order of magnitude faster than a general-purpose PNG writer at a similar size. WebP goes
through Pillow.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass
from typing import Literal

import numpy as np
from PIL import Image

from ..errors import InvalidActionError

try:  # ISA-L's deflate; plain zlib is correct but about four times slower on screen content
    from isal import isal_zlib as _deflate

    _DEFLATE_LEVEL = 1
except ImportError:  # pragma: no cover - isal ships wheels for the platforms we support
    _deflate = zlib  # type: ignore[assignment]
    _DEFLATE_LEVEL = 1

ImageFormat = Literal["png", "jpeg", "webp"]
MIME = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
DEFAULT_QUALITY = 75


@dataclass(frozen=True)
class Frame:
    """Pixels of a screen area: ``height`` rows of ``width`` BGRX pixels (4 bytes each)."""

    data: bytes | bytearray | memoryview
    width: int
    height: int

    def array(self) -> np.ndarray:
        """A (height, width, 4) uint8 view on the pixels, channels B, G, R, X."""
        return np.frombuffer(self.data, dtype=np.uint8).reshape(self.height, self.width, 4)

    def to_pil(self) -> Image.Image:
        return Image.frombuffer("RGB", (self.width, self.height), self.data, "raw", "BGRX", 0, 1)

    @classmethod
    def from_pil(cls, image: Image.Image) -> Frame:
        rgbx = image.convert("RGB").tobytes("raw", "BGRX")
        return cls(rgbx, image.width, image.height)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def encode_png(frame: Frame) -> bytes:
    rgb = Image.frombuffer("RGB", (frame.width, frame.height), frame.data, "raw", "BGRX", 0, 1)
    rows = np.empty((frame.height, frame.width * 3 + 1), dtype=np.uint8)
    rows[:, 0] = 0  # PNG filter type "None" for every row
    rows[:, 1:] = np.frombuffer(rgb.tobytes(), dtype=np.uint8).reshape(frame.height, frame.width * 3)
    header = struct.pack(">IIBBBBB", frame.width, frame.height, 8, 2, 0, 0, 0)
    return b"".join(
        (
            b"\x89PNG\r\n\x1a\n",
            _png_chunk(b"IHDR", header),
            _png_chunk(b"IDAT", _deflate.compress(rows, _DEFLATE_LEVEL)),
            _png_chunk(b"IEND", b""),
        )
    )


def encode_jpeg(frame: Frame, quality: int = DEFAULT_QUALITY) -> bytes:
    try:
        import simplejpeg
    except ImportError:
        out = io.BytesIO()
        frame.to_pil().save(out, "JPEG", quality=quality)
        return out.getvalue()
    return simplejpeg.encode_jpeg(frame.array(), quality=quality, colorspace="BGRX", colorsubsampling="420")


def encode_webp(frame: Frame, quality: int = DEFAULT_QUALITY) -> bytes:
    out = io.BytesIO()
    frame.to_pil().save(out, "WEBP", quality=quality, method=0)
    return out.getvalue()


def encode(frame: Frame, fmt: ImageFormat, quality: int | None = None) -> bytes:
    if fmt == "png":
        return encode_png(frame)
    if fmt == "jpeg":
        return encode_jpeg(frame, quality or DEFAULT_QUALITY)
    if fmt == "webp":
        return encode_webp(frame, quality or DEFAULT_QUALITY)
    raise InvalidActionError(f"unknown image format {fmt!r}; expected png, jpeg or webp", field="format")


def downscale(frame: Frame, width: int, height: int) -> Frame:
    """Shrink a frame; exact integer factors use a box average, which is several times faster."""
    if (width, height) == (frame.width, frame.height):
        return frame
    image = Image.frombuffer("RGBX", (frame.width, frame.height), frame.data, "raw", "RGBX", 0, 1)
    fx, fy = frame.width / width, frame.height / height
    if fx == fy and fx.is_integer():
        small = image.reduce(int(fx))
    else:
        small = image.resize((width, height), Image.Resampling.BILINEAR)
    return Frame(small.tobytes(), small.width, small.height)


def decode(data: bytes) -> Image.Image:
    """Decode an encoded screenshot (any of the three formats) into a Pillow image."""
    image = Image.open(io.BytesIO(data))
    image.load()
    return image
