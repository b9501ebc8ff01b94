"""Episode videos: the frames an episode captured, with the pointer and the action drawn on them, encoded with
PyAV (``pip install 'hci-envs[video]'``).

    EPISODE/video.mp4         the step video: every step's screen before and after it, marked (see overlay.py)
    EPISODE/continuous.mp4    optional: the screen as it was, at a low rate, while the episode was recorded

meta.json says what is there: ``"video": {"file", "codec", "frames", "fps", "width", "height", "duration",
"continuous"?: {...the same keys, "t0"}}``; a failed encoding leaves ``"video_error"`` instead, and the
episode as it was.

**The step video** shows each step's stable frame before it and after it, each for as long as it lasted in
the episode, but at least ``min_frame_s`` (readable) and at most ``max_frame_s`` (an idle minute is not a
minute of video). Frames have their own times (variable frame rate), so a screen shown for two seconds is one
encoded frame, not sixty; ``fps`` in meta.json is the average.

**Codec.** H.264 (libx264, High profile, yuv420p, BT.709) in MP4 with the index at the front, which PyAV's
wheels from PyPI ship and every browser plays, Debian's chromium included; VP9 (libvpx) in WebM where the
installed PyAV has no libx264 (a build against a system FFmpeg without it). Encoders run on one thread: a
machine runs many desktops, and one episode's encoding should not take every core from the others.
"""

from __future__ import annotations

import fractions
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hci_envs.errors import ConfigError, EnvironmentStateError, VideoError, require

from .overlay import Mark, action_label, action_point, draw_mark
from .store import Episode, is_being_written, load_episode, write_json_atomic

log = logging.getLogger(__name__)

#: The name of the step video, without its extension (which depends on the codec).
STEP_VIDEO = "video"
#: The name of the continuous capture's video, without its extension.
CONTINUOUS_VIDEO = "continuous"
#: The default rate of the continuous capture, frames per second, when it is asked for without one.
DEFAULT_CONTINUOUS_FPS = 2.0
MIN_FRAME_S = 0.4
MAX_FRAME_S = 2.0
_TIME_BASE = fractions.Fraction(1, 1000)  # frame times in milliseconds


@dataclass(frozen=True)
class Codec:
    name: str  # what meta.json says: "h264" or "vp9"
    encoder: str  # FFmpeg's encoder
    extension: str  # the container, by file extension
    container: str  # FFmpeg's muxer

    def options(self, *, live: bool) -> dict[str, str]:
        """Encoder options: a good picture of text and UI at a low CPU cost. ``live``: written while the
        episode is recorded, frame by frame, so no look-ahead and no frame reordering."""
        if self.name == "h264":
            options = {"preset": "veryfast", "crf": "23", "profile": "high"}
            if live:
                options.update(tune="zerolatency")
            return options
        return {"deadline": "realtime", "cpu-used": "8", "crf": "34", "b": "0", "row-mt": "0", "lag-in-frames": "0"}

    def container_options(self, *, live: bool) -> dict[str, str]:
        if self.extension != "mp4":
            return {}
        # live: fragments, so that a recorder killed mid-episode leaves a file that plays up to its last fragment;
        # otherwise the index at the front, so that a page can play it before it has all of it
        return {"movflags": "frag_keyframe+empty_moov+default_base_moof"} if live else {"movflags": "+faststart"}


CODECS = {"h264": Codec("h264", "libx264", "mp4", "mp4"), "vp9": Codec("vp9", "libvpx-vp9", "webm", "webm")}


def _av() -> Any:
    return require("av", "video", "writing an episode's video")


def video_available() -> bool:
    """Whether PyAV is installed (episode videos are on by default then)."""
    try:
        _av()
    except ImportError:
        return False
    return True


def pick_codec(name: str | None = None) -> Codec:
    """``name`` ("h264" or "vp9"), or the first of them that the installed PyAV can encode."""
    av = _av()
    if name is not None and name not in CODECS:
        raise ConfigError(f"unknown video codec {name!r}: use one of {', '.join(CODECS)}", field="codec")
    for codec in [CODECS[name]] if name else CODECS.values():
        try:
            av.codec.Codec(codec.encoder, "w")
            return codec
        except Exception:  # noqa: BLE001 - PyAV's UnknownCodecError and its variants
            continue
    wanted = name or " or ".join(CODECS)
    raise VideoError(f"the installed PyAV (FFmpeg {av.library_versions.get('libavcodec')}) cannot encode {wanted}; "
                     f"the PyAV wheels from PyPI can: pip install 'hci-envs[video]'")


class VideoEncoder:
    """Frames (PIL images, or BGRX rows as the screen gives them) with their own times into one video file.

    The file is written under a temporary name and renamed when closed (``live``: written in place, so that
    what a killed process leaves is there to play)."""

    def __init__(self, path: Path, size: tuple[int, int], codec: Codec, *, live: bool = False,
                 nominal_fps: float = 2.0) -> None:
        av = _av()
        self.av = av
        self.path = path
        self.codec = codec
        self.live = live
        # 4:2:0 needs even sizes: an odd screen gets one black row or column more
        self.size = (size[0] + size[0] % 2, size[1] + size[1] % 2)
        self.screen = size
        self._target = path if live else path.with_name(f".{path.name}.tmp")
        self._container = av.open(str(self._target), "w", format=codec.container,
                                  options=codec.container_options(live=live))
        try:
            stream = self._container.add_stream(codec.encoder, options=codec.options(live=live))
            stream.width, stream.height = self.size
            stream.pix_fmt = "yuv420p"
            stream.time_base = _TIME_BASE
            context = stream.codec_context
            context.time_base = _TIME_BASE
            context.framerate = fractions.Fraction(nominal_fps).limit_denominator(1000)
            context.thread_count = 1
            # a keyframe every ~30 frames: seeking in a page decodes little, and screens compress well between
            context.gop_size = 30
            context.colorspace, context.color_primaries, context.color_trc, context.color_range = 1, 1, 1, 1
        except Exception:
            self._container.close()
            raise
        self._stream = stream
        self._reformatter = av.video.reformatter.VideoReformatter()
        self._last_pts = -1
        self._last_frame: Any = None
        self.frames = 0
        self.first_t: float | None = None
        self.last_t = 0.0

    def _frame(self, image: Any) -> Any:
        av = self.av
        if isinstance(image, tuple):  # (BGRX bytes, width, height): the screen's own rows
            data, width, height = image
            import numpy as np

            array = np.frombuffer(data, dtype=np.uint8).reshape(height, width, 4)
            frame = av.VideoFrame.from_ndarray(array, format="bgra")  # X is taken for alpha, then dropped
        else:
            frame = av.VideoFrame.from_image(image)
        if (frame.width, frame.height) != self.size:
            frame = self._pad(frame)
        reformatter = av.video.reformatter
        return self._reformatter.reformat(frame, format="yuv420p", dst_colorspace=reformatter.Colorspace.ITU709,
                                          dst_color_range=reformatter.ColorRange.MPEG, threads=1)

    def _pad(self, frame: Any) -> Any:
        from PIL import Image

        padded = Image.new("RGB", self.size)
        padded.paste(frame.to_image(), (0, 0))
        return self.av.VideoFrame.from_image(padded)

    def add(self, image: Any, t: float) -> None:
        """A frame shown from ``t`` seconds on. The video starts at the first frame's ``t`` (``first_t``):
        its time is ``t - first_t``. Times must grow; a frame at a time already taken is dropped."""
        if self.first_t is None:
            self.first_t = t
        pts = round((t - self.first_t) * 1000)
        if pts <= self._last_pts:
            return
        frame = self._frame(image)
        self._send(frame, pts)
        self._last_frame = frame
        self.last_t = t

    def _send(self, frame: Any, pts: int) -> None:
        frame.pts = pts
        frame.time_base = _TIME_BASE
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self._last_pts = pts
        self.frames += 1

    def close(self, end_t: float | None = None) -> dict[str, Any]:
        """Finish the file; the last frame lasts until ``end_t`` (a repeat of it marks the end). Returns what
        meta.json says of it."""
        try:
            end = None if end_t is None or self.first_t is None else round((end_t - self.first_t) * 1000)
            if end is not None and self._last_frame is not None and end > self._last_pts:
                self._send(self._last_frame, end)
                self.last_t = end_t
            for packet in self._stream.encode(None):
                self._container.mux(packet)
        finally:
            self._container.close()
        if not self.live:
            os.replace(self._target, self.path)
        return self.info()

    def abort(self) -> None:
        try:
            self._container.close()
        except Exception:  # noqa: BLE001 - the file is being thrown away
            pass
        if not self.live:
            self._target.unlink(missing_ok=True)

    def info(self) -> dict[str, Any]:
        duration = max(0.0, self.last_t - (self.first_t or 0.0))
        return {"file": self.path.name, "codec": self.codec.name, "frames": self.frames,
                "fps": round(self.frames / duration, 3) if duration > 0 else None,
                "width": self.size[0], "height": self.size[1], "duration": round(duration, 3)}


# -- the step video ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shot:
    """One frame of the step video: a recorded frame, what is drawn on it, and for how long it is shown."""

    frame: str
    mark: Mark | None
    seconds: float


def _clamp(seconds: float, low: float, high: float) -> float:
    return min(max(seconds, low), high)


def step_shots(episode: Episode, *, min_frame_s: float = MIN_FRAME_S,
               max_frame_s: float = MAX_FRAME_S) -> Iterator[Shot]:
    """The step video's frames: for each step its frame before (marked) and after (marked), timed by the
    episode, within ``[min_frame_s, max_frame_s]`` each."""
    actions = episode.actions
    frames = sorted(p.name for p in (episode.path / "frames").glob("*.png"))
    if not actions:  # nothing was done: the screens it went through
        yield from (Shot(name, Mark("no actions"), min_frame_s) for name in frames)
        return
    pointer = None
    shown = None
    for n, record in enumerate(actions):
        action = record["action"]
        moved = tuple(tuple(p) for p in record.get("pre_move") or [])
        point = action_point(action)
        if point is None and moved:
            point = moved[-1]
        if point is not None:
            pointer = point
        mark = Mark(action_label(action), pointer, action, moved, f"{n + 1}/{len(actions)}")
        before = record.get("frame_before") or shown
        after = record.get("frame_after") or before
        next_start = actions[n + 1]["t_start"] if n + 1 < len(actions) else record["t_end"] + max_frame_s
        if before is not None:
            yield Shot(before, mark, _clamp(record["t_end"] - record["t_start"], min_frame_s, max_frame_s))
        if after is not None:
            yield Shot(after, mark, _clamp(next_start - record["t_end"], min_frame_s, max_frame_s))
            shown = after
    if frames and shown is not None and frames[-1] > shown:  # the screen the episode ended on, after its last step
        yield Shot(frames[-1], Mark("end"), min_frame_s)


class _FrameCache:
    """Decoded frames: consecutive shots mostly show the same few files."""

    def __init__(self, folder: Path, keep: int = 3) -> None:
        self.folder = folder
        self.keep = keep
        self._images: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        from PIL import Image

        image = self._images.pop(name, None)
        if image is None:
            try:
                with Image.open(self.folder / name) as opened:
                    image = opened.convert("RGB")
            except Exception as exc:  # noqa: BLE001 - whatever a damaged PNG makes Pillow raise
                raise VideoError(f"{self.folder / name}: cannot read the frame ({exc})", file=name) from None
        self._images[name] = image
        while len(self._images) > self.keep:
            self._images.pop(next(iter(self._images)))
        return image


def video_files(path: Path) -> list[Path]:
    """The episode's video files (either codec's), as they are on disk."""
    return [path / f"{stem}.{codec.extension}" for stem in (STEP_VIDEO, CONTINUOUS_VIDEO)
            for codec in CODECS.values() if (path / f"{stem}.{codec.extension}").exists()]


def write_video(episode_dir: str | Path, *, codec: str | None = None, min_frame_s: float = MIN_FRAME_S,
                max_frame_s: float = MAX_FRAME_S, progress: Callable[[int], None] | None = None) -> Path:
    """Encode an episode's step video into its folder (``video.mp4``, or ``video.webm`` with VP9) and record
    it in meta.json under ``"video"``. Returns the video's path.

    Raises :class:`EpisodeFormatError` for an unreadable episode, :class:`EnvironmentStateError` for one still
    being recorded, :class:`VideoError` when there is nothing to encode or the encoding fails, and
    :class:`MissingDependencyError` (naming the ``video`` extra) without PyAV. The episode is left as it
    was by any of them: the video is written under a temporary name and only then put in place."""
    if not 0 < min_frame_s <= max_frame_s:
        raise VideoError(f"need 0 < min_frame_s <= max_frame_s, got {min_frame_s} and {max_frame_s}")
    chosen = pick_codec(codec)
    path = Path(episode_dir)
    if is_being_written(path / "raw" / "input.jsonl"):
        raise EnvironmentStateError(f"{path} is still being recorded; its video is written when it stops")
    episode = load_episode(path)
    shots = list(step_shots(episode, min_frame_s=min_frame_s, max_frame_s=max_frame_s))
    if not shots:
        raise VideoError(f"{path}: the episode has no frames to make a video of")
    out = path / f"{STEP_VIDEO}.{chosen.extension}"
    cache = _FrameCache(path / "frames")
    first = cache.get(shots[0].frame)
    try:
        encoder = VideoEncoder(out, first.size, chosen, nominal_fps=1 / min_frame_s)
    except Exception as exc:  # noqa: BLE001 - the folder is not writable, the disk is full
        raise VideoError(f"{path}: cannot write {out.name}: {type(exc).__name__}: {exc}") from exc
    try:
        t = 0.0
        for n, shot in enumerate(shots):
            image = cache.get(shot.frame)
            if image.size != first.size:
                raise VideoError(f"{path}: frame {shot.frame} is {image.size[0]}x{image.size[1]}, the others "
                                 f"{first.size[0]}x{first.size[1]}", file=shot.frame)
            encoder.add(draw_mark(image.copy(), shot.mark) if shot.mark else image, t)
            t += shot.seconds
            if progress is not None:
                progress(n)
        info = encoder.close(end_t=t)
    except VideoError:
        encoder.abort()
        raise
    except Exception as exc:  # noqa: BLE001 - the encoder's and the disk's errors, as the episode's
        encoder.abort()
        raise VideoError(f"{path}: encoding the video failed: {type(exc).__name__}: {exc}") from exc
    except BaseException:
        encoder.abort()
        raise
    for stale in video_files(path):  # the other codec's step video, from an earlier encoding
        if stale.name.startswith(STEP_VIDEO + ".") and stale != out:
            stale.unlink()
    update_video_meta(path, info)
    return out


def describe_video(path: Path) -> dict[str, Any]:
    """What meta.json says of a video file, read from the file (its packets, not its pixels)."""
    av = _av()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        times = [float(p.pts * p.time_base) for p in container.demux(stream) if p.pts is not None]
        name = {"libx264": "h264", "libvpx-vp9": "vp9"}.get(stream.codec_context.name, stream.codec_context.name)
        duration = (max(times) - min(times)) if times else 0.0
        return {"file": path.name, "codec": name, "frames": len(times),
                "fps": round(len(times) / duration, 3) if duration > 0 else None,
                "width": stream.codec_context.width, "height": stream.codec_context.height,
                "duration": round(duration, 3)}


def update_video_meta(path: Path, info: dict[str, Any]) -> None:
    """Put the step video's description into meta.json, with the continuous capture's if it is there."""
    meta_path = path / "meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    old = meta.get("video") if isinstance(meta.get("video"), dict) else {}
    continuous = old.get("continuous")
    if continuous is None or not (path / str(continuous.get("file"))).exists():
        found = [p for p in video_files(path) if p.name.startswith(CONTINUOUS_VIDEO + ".")]
        continuous = None
        if found:  # a recording killed before it could say (recovered episodes), or an older meta.json
            try:
                continuous = {**describe_video(found[0]), "t0": 0.0}
            except Exception as exc:  # noqa: BLE001 - an unreadable capture must not cost the step video
                log.warning("cannot read the continuous capture %s: %s", found[0], exc)
    meta["video"] = {**info, **({"continuous": continuous} if continuous else {})}
    meta.pop("video_error", None)
    write_json_atomic(meta_path, meta)


def note_video_error(path: Path, message: str) -> None:
    """Say in meta.json why the episode has no (new) video; the episode stays valid without one."""
    meta_path = path / "meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        meta["video_error"] = {"message": message, "at": datetime.now(timezone.utc).isoformat()}
        write_json_atomic(meta_path, meta)
    except (OSError, ValueError) as exc:
        log.warning("cannot note the video error in %s: %s", meta_path, exc)


__all__ = ["CODECS", "Codec", "VideoEncoder", "describe_video", "pick_codec", "step_shots", "video_available",
           "write_video"]
