"""VNC benchmark (issue: VNC for humans), at 1280x800.

  * input latency: a PointerEvent sent by a viewer until the X server's pointer is there, through the proxy
    (its own process, TCP) versus straight into x11vnc's Unix socket;
  * frame updates per second a viewer receives while a window animates, through the proxy and straight, and
    the proxy's CPU time for them: with a viewer that takes the desktop's name (DesktopName) the proxy follows
    every message of x11vnc's to it (hci_envs.vnc.server_messages) and, while a notice changes twice a second,
    puts name updates between them.

    .venv/bin/python bench/bench_vnc.py [--quick]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, Report

from helpers import ANIMATE
from rfb_client import RfbClient, _SocketIO


def latency(client: RfbClient, desktop, n: int) -> list[float]:
    """Move the pointer to alternating spots; time until XQueryPointer reports it."""
    samples = []
    for i in range(n + 5):
        x, y = (200 + (i % 2) * 300, 300 + (i % 3) * 50)
        start = time.perf_counter()
        client.pointer(x, y)
        while desktop.input.pointer() != (x, y):
            if time.perf_counter() - start > 2:
                raise TimeoutError("the pointer did not move")
        if i >= 5:
            samples.append((time.perf_counter() - start) * 1000)
        time.sleep(0.01)
    return samples


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 50 if args.quick else 300
    seconds = 3 if args.quick else 10
    report = Report("vnc")
    from hci_envs import AppState, StartState
    from hci_envs.desktop import Desktop

    with Desktop(StartState(apps=[AppState(command=[sys.executable, str(ANIMATE), "1280", "800"])])) as desktop:
        sock_path = desktop.vnc_socket()
        port_file = Path(tempfile.mkdtemp()) / "port"
        proxy = subprocess.Popen([sys.executable, str(ROOT / "bench" / "proxy_process.py"), str(sock_path),
                                  str(port_file)])
        try:
            while not port_file.exists() or not port_file.read_text():
                time.sleep(0.05)
            port, password = port_file.read_text().split()

            def direct() -> RfbClient:
                s = socket.socket(socket.AF_UNIX)
                s.connect(str(sock_path))
                return RfbClient(_SocketIO(s), None)

            def proxied() -> RfbClient:
                return RfbClient.tcp(int(port), password)

            def proxied_with_names() -> RfbClient:
                return RfbClient.tcp(int(port), password, names=True)

            print("input latency: PointerEvent until the X pointer is there")
            for name, make in (("straight to x11vnc", direct), ("through the proxy", proxied)):
                client = make()
                report.add(f"pointer latency, {name}", latency(client, desktop, n))
                client.close()
            direct_p50 = report.rows["pointer latency, straight to x11vnc"]["p50_ms"]
            proxy_p50 = report.rows["pointer latency, through the proxy"]["p50_ms"]
            report.value("proxy overhead at p50", f"{proxy_p50 - direct_p50:+.2f} ms")
            print("frame updates per second while a 1280x800 window animates (~60 fps), raw encoding")
            for name, make in (("straight to x11vnc", direct), ("through the proxy", proxied),
                               ("through the proxy, names on", proxied_with_names)):
                client = make()
                cpu = _cpu_seconds(proxy.pid)
                rate = client.updates_per_second(seconds)
                report.value(f"updates/s, {name}", f"{rate:.1f}")
                if make is not direct:
                    report.value(f"proxy CPU ms per update, {name}",
                                 f"{(_cpu_seconds(proxy.pid) - cpu) * 1000 / max(1.0, rate * seconds):.3f}")
                client.close()
        finally:
            proxy.terminate()
            proxy.wait(5)
    report.save()


if __name__ == "__main__":
    main()
