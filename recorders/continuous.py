"""The continuous capture: the screen at a low rate (``video_fps``, 2 is a good rate) while an episode is
recorded, for episodes where what happens between steps matters (an animation, a progress bar, a page
loading).

It is encoded as it is captured, on a thread of its own, into ``EPISODE/continuous.mp4`` (``.webm`` with VP9):
no frame is kept on disk, and the stop costs only the encoder's flush. Its time runs with the recording's
clock from ``t0`` (meta.json): a step's ``t_start`` is at ``t_start - t0`` in this video. A tick whose screen
has not changed (no X damage, the pointer where it was, the same label) captures nothing: the frame before it
lasts longer, so an idle screen costs neither CPU nor bytes. Frames show the real pointer (the X cursor's own
image) and, for a short while after each action, its label and marks. Paused time captures nothing; the last
frame before the pause lasts through it. The MP4 is fragmented at each keyframe, so a recorder killed
mid-episode leaves a file that plays up to its last fragment (at most ``gop_size`` changed frames are lost).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .overlay import Mark, draw_mark
from .video import CONTINUOUS_VIDEO, Codec, VideoEncoder

log = logging.getLogger(__name__)

#: How long an action's label stays on the continuous capture after the action, in seconds.
LABEL_SECONDS = 1.5


class ContinuousCapture:
    """Captures ``desktop``'s screen ``fps`` times a second while ``active()`` says so."""

    def __init__(self, desktop: Any, folder: Path, fps: float, codec: Codec, *, clock: Callable[[], float],
                 active: Callable[[], bool], mark: Callable[[float], Mark | None]) -> None:
        self.desktop = desktop
        self.fps = fps
        self.clock = clock
        self.active = active
        self.mark = mark
        self.path = folder / f"{CONTINUOUS_VIDEO}.{codec.extension}"
        size = (desktop.screen.width, desktop.screen.height)
        self._encoder = VideoEncoder(self.path, size, codec, live=True, nominal_fps=fps)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recorder-video", daemon=True)
        self.error: str | None = None
        #: CPU seconds this capture's thread has spent (grabbing, drawing, encoding): the benchmark reads it
        self.cpu_seconds = 0.0

    def start(self) -> ContinuousCapture:
        self._thread.start()
        return self

    def _run(self) -> None:
        period = 1.0 / self.fps
        due = self.clock()
        last: tuple[Any, ...] | None = None
        while not self._stop.is_set():
            if self._stop.wait(max(0.0, due - self.clock())):
                break
            now = self.clock()
            due = max(due + period, now)  # behind (a slow grab, a busy machine): skip ticks, never burst
            if not self.active():
                continue
            started = time.thread_time()
            try:
                last = self._tick(now, last)
            except Exception as exc:  # the desktop went away (a reset), the disk filled: stop capturing
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("the continuous capture stopped: %s", self.error)
                break
            finally:
                self.cpu_seconds += time.thread_time() - started

    def _tick(self, now: float, last: tuple[Any, ...] | None) -> tuple[Any, ...]:
        desktop = self.desktop
        mark = self.mark(now)
        state = (desktop.events.damage_generation(), desktop.input.pointer(), mark)
        if state == last and self._encoder.frames:
            return state  # nothing changed: the previous frame lasts longer
        frame = desktop.screen.grab(cursor=True)
        if mark is None:
            self._encoder.add((frame.data, frame.width, frame.height), now)
        else:
            self._encoder.add(draw_mark(frame.to_pil(), mark), now)
        return state

    def stop(self, end_t: float) -> dict[str, Any] | None:
        """Stop and finish the file; what meta.json says of it (None if it has no frame)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        try:
            info = self._encoder.close(end_t=end_t)
        except Exception as exc:  # noqa: BLE001 - the step video and the episode do not depend on this file
            self.error = self.error or f"{type(exc).__name__}: {exc}"
            log.warning("cannot finish the continuous capture %s: %s", self.path, exc)
            return None
        if not info["frames"]:
            self.path.unlink(missing_ok=True)
            return None
        # its time 0 is t0 on the recording's clock: a step's t_start is at t_start - t0 in this video
        return {**info, "fps": self.fps, "t0": round(self._encoder.first_t or 0.0, 3),
                **({"error": self.error} if self.error else {})}


__all__ = ["ContinuousCapture", "LABEL_SECONDS"]
