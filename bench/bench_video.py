"""Episode video benchmark (issue: episode video): what the videos cost a desktop, beside what recording
already costs it.

For each desktop (mousepad with an agent typing and clicking; an app that never stops animating, with the
same agent), an agent episode is recorded at one action every ``--pace`` seconds with the continuous capture
at its default rate (2 fps), and then:

  * capture: CPU seconds the recorder's frame thread spent capturing the episode's stable frames (PNG), per
    minute of episode: the baseline, what every recording already costs;
  * step video: CPU seconds to encode the episode's step video (H.264, and VP9 for comparison), per minute of
    episode, and its ratio to the capture;
  * continuous capture: CPU seconds its thread spent (grab, draw, encode), per minute, and its ratio;
  * sizes per minute: the PNG frames, the step video, the continuous capture.

    .venv/bin/python bench/bench_video.py [--quick] [--seconds 60] [--pace 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import Report
from helpers import ANIMATE

TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu(name: str) -> float:
    """CPU seconds of this process's live thread called ``name`` (from /proc: it is not ours to time)."""
    for thread in threading.enumerate():
        if thread.name == name and thread.native_id is not None:
            fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
    raise LookupError(name)


def process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def agent_actions(n: int) -> dict:
    """An agent working in an editor: clicks in the text, words typed, a new line, a selection."""
    cycle = [
        {"type": "click", "x": 420 + (n * 37) % 400, "y": 260 + (n * 53) % 300},
        {"type": "type_text", "text": f"step {n}: the quick brown fox "},
        {"type": "key", "keys": "Return"},
        {"type": "type_text", "text": "jumps over the lazy dog"},
        {"type": "key", "keys": "shift+Home"},
    ]
    return cycle[n % len(cycle)]


def record(report: Report, label: str, apps: list, seconds: float, pace: float, root: Path) -> None:
    from hci_envs.recorders import Recorder
    from hci_envs.recorders.video import DEFAULT_CONTINUOUS_FPS, write_video
    from hci_envs.traits import DesktopEnv

    env = DesktopEnv(start_state={"apps": apps})
    try:
        env.reset()
        recorder = Recorder(env, None, root, source="agent", name=label, video_fps=DEFAULT_CONTINUOUS_FPS).start()
        started = time.monotonic()
        n = 0
        while time.monotonic() - started < seconds:
            env.step(agent_actions(n))
            n += 1
            time.sleep(max(0.0, started + n * pace - time.monotonic()))
        capture_cpu = thread_cpu("recorder-frames")
        minutes = recorder.now() / 60
        status = recorder.stop()
        continuous_cpu = recorder._continuous.cpu_seconds
    finally:
        env.close()
    path = Path(status["path"])
    timings = {}
    for codec in ("vp9", "h264"):  # h264 last: the episode keeps the default
        before, wall = process_cpu(), time.perf_counter()
        video = write_video(path, codec=codec)
        timings[codec] = (process_cpu() - before, time.perf_counter() - wall, video.stat().st_size)
    frames_bytes = sum(p.stat().st_size for p in (path / "frames").glob("*.png"))
    continuous_bytes = (path / "continuous.mp4").stat().st_size

    def per_min(x: float) -> float:
        return x / minutes

    print(f"{label}: {minutes * 60:.0f} s episode, {n} steps, {status['frames']} frames captured")
    report.value(f"{label}: capture (baseline)", f"{per_min(capture_cpu):.2f} CPU s/min "
                                                 f"({per_min(capture_cpu) / 60:.1%} of a core)")
    for codec, (cpu, wall, size) in timings.items():
        report.value(f"{label}: step video {codec}",
                     f"{per_min(cpu):.2f} CPU s/min, {cpu / max(capture_cpu, 1e-3):.2f}x the capture "
                     f"(wall {wall:.2f} s at stop), {per_min(size) / 1e6:.2f} MB/min")
    report.value(f"{label}: continuous capture at {DEFAULT_CONTINUOUS_FPS:g} fps",
                 f"{per_min(continuous_cpu):.2f} CPU s/min ({per_min(continuous_cpu) / 60:.1%} of a core), "
                 f"{continuous_cpu / max(capture_cpu, 1e-3):.2f}x the capture, "
                 f"{per_min(continuous_bytes) / 1e6:.2f} MB/min")
    report.value(f"{label}: PNG frames on disk", f"{per_min(frames_bytes) / 1e6:.2f} MB/min")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="20-second episodes")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each episode")
    parser.add_argument("--pace", type=float, default=2.0, help="seconds between the agent's actions")
    args = parser.parse_args()
    seconds = 20.0 if args.quick else args.seconds
    print("command:", shlex.join([sys.executable, *sys.argv]))
    report = Report("video")
    report.value("command", shlex.join(["bench/bench_video.py", *sys.argv[1:]]))
    import av  # noqa: F401 - imported before anything is timed
    from hci_envs.recorders.video import pick_codec

    for codec in ("vp9", "h264"):  # both encoders load before anything is timed
        pick_codec(codec)
    root = Path(tempfile.mkdtemp(prefix="bench-video-"))
    record(report, "mousepad", [{"command": ["mousepad", "note.txt"], "timeout": 60}], seconds, args.pace, root)
    record(report, "animation", [{"command": [sys.executable, str(ANIMATE), "600", "400"]}], seconds, args.pace,
           root)
    report.save()


if __name__ == "__main__":
    main()
