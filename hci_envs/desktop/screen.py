"""Screen capture over MIT-SHM on one persistent X connection (python-mss's XShmGetImage backend)."""

from __future__ import annotations

import base64
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import DesktopDiedError, MissingDependencyError
from .allocator import keep_frame_buffers_mapped
from .encode import MIME, Frame, ImageFormat, downscale, encode


@dataclass(frozen=True)
class EncodedImage:
    """An encoded screenshot and the geometry a caller needs to map its pixels back to the screen.

    ``scale`` is image pixels per screen pixel: a point (u, v) in the image is the screen point
    (left + u / scale, top + v / scale).
    """

    data: bytes
    format: ImageFormat
    width: int
    height: int
    scale: float
    left: int = 0
    top: int = 0

    @property
    def mime_type(self) -> str:
        return MIME[self.format]

    def base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")

    def info(self) -> dict[str, object]:
        return {
            "width": self.width,
            "height": self.height,
            "scale": self.scale,
            "format": self.format,
            "mime_type": self.mime_type,
            "left": self.left,
            "top": self.top,
        }


def scaled_size(width: int, height: int, scale: float | None, max_side: int | None) -> tuple[int, int, float]:
    """The output size for a capture of ``width`` x ``height`` and the scale actually applied."""
    if max_side is not None and max(width, height) > max_side:
        scale = max_side / max(width, height)
    if scale is None or scale >= 1:
        return width, height, 1.0
    out_w = max(1, math.floor(width * scale + 0.5))
    out_h = max(1, math.floor(height * scale + 0.5))
    return out_w, out_h, scale


class Screen:
    """Grabs frames of one X display. Thread-safe; the connection and the shared memory live as long as it."""

    def __init__(self, display: str) -> None:
        try:
            import mss
        except ImportError as exc:  # pragma: no cover - part of the server extra
            raise MissingDependencyError(
                "screen capture needs python-mss: pip install 'hci-envs[server]'"
            ) from exc
        keep_frame_buffers_mapped()
        self._display = display
        self._lock = threading.Lock()
        self._mss = mss.MSS(display=display)
        self._mss_cursor: object | None = None
        monitor = self._mss.monitors[0]
        self.width: int = monitor["width"]
        self.height: int = monitor["height"]

    @property
    def uses_shared_memory(self) -> bool:
        impl = getattr(self._mss, "_impl", None)
        status = getattr(impl, "shm_status", None)
        return status is not None and status.name != "UNAVAILABLE"

    def grab(self, left: int = 0, top: int = 0, width: int | None = None, height: int | None = None,
             *, cursor: bool = False) -> Frame:
        box = {
            "left": left,
            "top": top,
            "width": self.width - left if width is None else width,
            "height": self.height - top if height is None else height,
        }
        with self._lock:
            grabber = self._mss
            if cursor:
                if self._mss_cursor is None:
                    import mss

                    self._mss_cursor = mss.MSS(display=self._display, with_cursor=True)
                grabber = self._mss_cursor  # type: ignore[assignment]
            try:
                shot = grabber.grab(box)  # type: ignore[attr-defined]
            except Exception as exc:
                raise DesktopDiedError(f"cannot read the screen of display {self._display}: {exc}") from exc
        return Frame(shot.raw, shot.width, shot.height)

    def capture(
        self,
        *,
        region: tuple[int, int, int, int] | None = None,
        scale: float | None = None,
        max_side: int | None = None,
        fmt: ImageFormat = "png",
        quality: int | None = None,
        cursor: bool = False,
        overlay: Callable[[Frame], Frame] | None = None,
    ) -> EncodedImage:
        """Grab, downscale, draw ``overlay`` (set-of-marks) on the downscaled frame, encode."""
        left, top, width, height = region if region is not None else (0, 0, self.width, self.height)
        frame = self.grab(left, top, width, height, cursor=cursor)
        out_w, out_h, applied = scaled_size(frame.width, frame.height, scale, max_side)
        frame = downscale(frame, out_w, out_h)
        if overlay is not None:
            frame = overlay(frame)
        return EncodedImage(encode(frame, fmt, quality), fmt, frame.width, frame.height, applied, left, top)

    def close(self) -> None:
        with self._lock:
            for grabber in (self._mss, self._mss_cursor):
                if grabber is not None:
                    try:
                        grabber.close()  # type: ignore[attr-defined]
                    except Exception:
                        pass
            self._mss_cursor = None
