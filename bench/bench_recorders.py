"""Recorder benchmark (issue: recorders).

  * the tap's cost per input event (raw line written and flushed, reducer fed), against the proxy untapped;
  * input events per second a recording sustains without losing one (target >= 1,000/s), sent through the
    real proxy by a VNC client;
  * replay lateness p50 / p99 of a recorded demonstration.

    .venv/bin/python bench/bench_recorders.py [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx
from common import Report

from helpers import Probe, ServerProcess
from rfb_client import RfbClient


def flood(state: dict, count: int, rate: float) -> float:
    """Send ``count`` PointerEvents at about ``rate`` per second; return the rate achieved."""
    client = RfbClient.tcp(state["vnc_native_port"], state["vnc_secrets"]["control"])
    start = time.perf_counter()
    for i in range(count):
        client.pointer(100 + i % 900, 100 + (i // 900) % 600)
        ahead = (i + 1) / rate - (time.perf_counter() - start)
        if ahead > 0:
            time.sleep(ahead)
    elapsed = time.perf_counter() - start
    time.sleep(1.0)
    client.close()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    report = Report("recorders")
    tmp = Path(tempfile.mkdtemp(prefix="bench-rec-"))

    print("tap cost per event, in-process (raw write + flush + reducer)")
    from hci_envs.vnc.rfb import ClientMessage

    from hci_envs.recorders.recorder import Recorder
    from hci_envs.traits import DesktopEnv

    class Taps:
        taps: list = []

    class Viewer:
        id = "bench"

    with DesktopEnv(start_state={"apps": [{"command": ["xterm"]}]}) as env:
        env.reset()
        recorder = Recorder(env, Taps(), tmp / "tapcost").start()
        n = 20_000 if not args.quick else 5_000
        messages = [ClientMessage(5, b"", mask=0, x=100 + i % 500, y=200) for i in range(n)]
        start = time.perf_counter()
        for m in messages:
            recorder.on_human(Viewer(), m, time.monotonic())
        per_event = (time.perf_counter() - start) / n * 1e6
        recorder.stop()
        report.value("tap cost per input event", f"{per_event:.1f} us (untapped: 0 us; the proxy forwards in "
                                                 "the same loop iteration)")

    probe = Probe(tmp)
    with ServerProcess("--app", " ".join(f"'{c}'" for c in probe.command()), "--vnc-port", "0",
                       "--episodes-dir", str(tmp / "episodes")) as server:
        probe.wait_for(lambda s: s.get("ready"))
        state = httpx.get(server.base_url + "/state").json()
        print("sustained input rate while recording, through the proxy (no event may be lost)")
        for rate in ((1000, 2000) if args.quick else (1000, 2000, 4000)):
            count = rate * (2 if args.quick else 5)
            path = httpx.post(server.base_url + "/recording", json={"command": "start"}).json()["path"]
            achieved = flood(state, count, rate)
            httpx.post(server.base_url + "/recording", json={"command": "stop"}, timeout=60)
            from hci_envs.recorders import load_episode

            recorded = len(load_episode(path).raw)
            report.value(f"{rate}/s asked: achieved, recorded/sent",
                         f"{achieved:.0f}/s, {recorded}/{count}{'' if recorded == count else '  LOST EVENTS'}")

        print("replay lateness of a recorded demonstration")
        httpx.post(server.base_url + "/reset", json={}, timeout=60)
        probe.wait_for(lambda s: s.get("ready"))
        path = httpx.post(server.base_url + "/recording", json={"command": "start", "name": "demo"}).json()["path"]
        client = RfbClient.tcp(state["vnc_native_port"], state["vnc_secrets"]["control"])
        ex, ey = probe.center("entry")
        bx, by = probe.center("button")
        for round_ in range(3 if args.quick else 10):
            client.click(bx, by)
            time.sleep(0.3)
            client.click(ex, ey)
            time.sleep(0.2)
            for ch in f"round {round_} ":
                client.tap(ord(ch))
                time.sleep(0.03)
            client.tap(0xFF0D)
            time.sleep(0.3)
        client.close()
        httpx.post(server.base_url + "/recording", json={"command": "stop"}, timeout=60)

    from hci_envs.recorders import replay_episode

    replay_probe = Probe(tmp / "replay")
    (tmp / "replay").mkdir()
    from hci_envs.recorders import load_episode

    start_state = dict(load_episode(path).meta["start_state"])
    start_state["apps"] = [replay_probe.app()]
    result = replay_episode(path, start_state=start_state)
    summary = result.summary()
    report.add("replay lateness", [s.lateness_ms for s in result.steps])
    report.value("replay lateness p50 / p99", f"{summary['lateness_p50_ms']} ms / {summary['lateness_p99_ms']} ms")
    report.value("replay screen match: mean / final", f"{summary['mean_match']} / {summary['final_match']}")
    report.save()


if __name__ == "__main__":
    main()
