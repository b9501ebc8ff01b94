"""Desktop core benchmark (issue: desktop core), at 1280x800.

Ours: the official MCP client against `hci-envs serve`. Baseline: the method of the widely copied
computer-use demo, an `xdotool` subprocess per action with its default delays and, per screenshot, `scrot`,
then ImageMagick `convert`, then base64 (without the demo's fixed 2 s sleep), on an identical desktop.

    .venv/bin/python bench/bench_desktop.py [--quick]
"""

from __future__ import annotations

import argparse
import base64
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from common import Report, measure

from helpers import ANIMATE, McpClient, Probe, ServerProcess


def mixed_unicode(n: int, seed: int = 7) -> str:
    """Text like a multilingual form: mostly ASCII, with accents, Greek, Cyrillic, CJK and symbols."""
    rng = random.Random(seed)
    pools = [
        ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?@#$%&*()-_=+[]'\"/", 55),
        ("éèêëàâäôöûüçñßÉÀÖÜ", 10), ("αβγδεζηθλμπσφψω", 8), ("абвгдежзийклмнопрст", 8),
        ("".join(chr(0x4E00 + i * 37) for i in range(60)), 12), ("✓✗→←↑↓€£¥©®™°±×÷", 7),
    ]
    chars = []
    for _ in range(n):
        pool = rng.choices([p for p, _ in pools], weights=[w for _, w in pools])[0]
        chars.append(rng.choice(pool))
    return "".join(chars)


class Baseline:
    """The computer-use demo's way: a subprocess per action, files and base64 per screenshot."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.env = env
        self.shot = workdir / "shot.png"
        self._flip = 0

    def click(self, x: int, y: int) -> None:
        # `mousemove --sync` waits for the pointer to move, so alternate between two neighbouring pixels
        self._flip ^= 1
        subprocess.run(["xdotool", "mousemove", "--sync", str(x + self._flip), str(y), "click", "1"],
                       env=self.env, check=True)

    def screenshot(self) -> str:
        self.shot.unlink(missing_ok=True)
        subprocess.run(["scrot", "-p", str(self.shot)], env=self.env, check=True, capture_output=True)
        subprocess.run(["convert", str(self.shot), "-resize", "1280x800!", str(self.shot)], env=self.env, check=True)
        return base64.b64encode(self.shot.read_bytes()).decode()

    def type(self, text: str) -> None:
        for i in range(0, len(text), 50):  # the demo types in groups of 50 with a 12 ms delay
            subprocess.run(["xdotool", "type", "--delay", "12", "--", text[i:i + 50]], env=self.env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    n = 30 if args.quick else 200
    report = Report("desktop")
    tmp = Path(tempfile.mkdtemp(prefix="bench-desktop-"))
    probe = Probe(tmp)
    text = mixed_unicode(1000)

    print("ours: MCP (official client) -> hci-envs serve, probe app")
    with ServerProcess("--app", " ".join(f"'{c}'" for c in probe.command())) as server, \
            McpClient(f"{server.base_url}/mcp") as mcp:
        probe.wait_for(lambda s: s.get("ready"))
        x, y = probe.center("canvas")
        report.add("mcp screenshot jpeg q75, static screen (cached)",
                   measure(lambda: mcp.ok("screenshot", {"format": "jpeg", "quality": 75}), n))
        report.add("mcp screen_size (MCP round trip floor)", measure(lambda: mcp.ok("screen_size"), n))
        report.add("mcp click", measure(lambda: mcp.ok("click", {"x": x, "y": y}), n))
        report.add("mcp click + screenshot png", measure(
            lambda: (mcp.ok("click", {"x": x, "y": y}), mcp.ok("screenshot", {"format": "png"})), n))
        report.add("mcp click + screenshot jpeg q75", measure(
            lambda: (mcp.ok("click", {"x": x, "y": y}), mcp.ok("screenshot", {"format": "jpeg"})), n))
        ex, ey = probe.center("entry")

        def type_once() -> None:
            mcp.ok("click", {"x": ex, "y": ey})
            mcp.ok("key", {"keys": "ctrl+a"})
            mcp.ok("key", {"keys": "BackSpace"})
            probe.wait_for(lambda s: s["entry"] == "", timeout=30)
            import time

            start = time.perf_counter()
            result = mcp.ok("type_text", {"text": text, "mode": "keys"})
            typed.append((time.perf_counter() - start) * 1000)
            assert result.structured_content["chars"] == 1000

        typed: list[float] = []
        for _ in range(3 if args.quick else 10):
            type_once()
        probe.wait_for(lambda s: s["entry"] == text, timeout=60, what="the 1000 typed characters")
        report.add("mcp type_text 1000 mixed unicode chars (keys)", typed)
        auto = measure(lambda: mcp.ok("type_text", {"text": text}), 3 if args.quick else 10, warmup=1)
        report.add("mcp type_text 1000 mixed unicode chars (auto)", auto)

    print("ours: screen changing every frame (an animation), so every screenshot is new work")
    with ServerProcess("--app", f"'{sys.executable}' '{ANIMATE}' 1280 800") as server, \
            McpClient(f"{server.base_url}/mcp") as mcp:
        report.add("mcp screenshot jpeg q75, animating screen",
                   measure(lambda: mcp.ok("screenshot", {"format": "jpeg", "quality": 75}), n))
        report.add("mcp screenshot png, animating screen", measure(lambda: mcp.ok("screenshot", {"format": "png"}), n))
        report.add("mcp click + screenshot png, animating screen", measure(
            lambda: (mcp.ok("click", {"x": 100, "y": 100}), mcp.ok("screenshot", {"format": "png"})), n))

    print("in-process floor: grab + encode, animating screen")
    from hci_envs import AppState, StartState
    from hci_envs.desktop import Desktop

    with Desktop(StartState(apps=[AppState(command=[sys.executable, str(ANIMATE), "1280", "800"])])) as desktop:
        report.add("grab only (MIT-SHM)", measure(desktop.screen.grab, n))
        report.add("grab + jpeg q75", measure(lambda: desktop.screen.capture(fmt="jpeg", quality=75), n))
        report.add("grab + png", measure(lambda: desktop.screen.capture(fmt="png"), n))
        report.add("grab + webp q75", measure(lambda: desktop.screen.capture(fmt="webp", quality=75), n // 4))

    print("baseline: xdotool + scrot + convert + base64 subprocesses, same probe desktop")
    with Desktop(StartState(apps=[AppState(command=probe.command(), name="probe")])) as desktop:
        probe.wait_for(lambda s: s.get("ready"))
        base = Baseline(desktop.app_env(), tmp)
        nb = 10 if args.quick else 40
        x, y = probe.center("canvas")
        report.add("baseline screenshot (scrot+convert+base64)", measure(base.screenshot, nb))
        report.add("baseline click (xdotool)", measure(lambda: base.click(x, y), nb))
        report.add("baseline click + screenshot", measure(lambda: (base.click(x, y), base.screenshot()), nb))
        report.add("baseline type 1000 mixed unicode chars (xdotool type)",
                   measure(lambda: base.type(text), 1, warmup=0))

    print("ratios (baseline p50 / ours p50)")
    report.ratio("click + screenshot speed-up (png, static)", "baseline click + screenshot", "mcp click + screenshot png")
    report.ratio("click + screenshot speed-up (png, animating)", "baseline click + screenshot",
                 "mcp click + screenshot png, animating screen")
    report.ratio("type 1000 chars speed-up", "baseline type 1000 mixed unicode chars (xdotool type)",
                 "mcp type_text 1000 mixed unicode chars (keys)")
    report.save()


if __name__ == "__main__":
    main()
