"""Shared pieces of the benchmarks: timing, percentiles, a results file, the test helpers on sys.path."""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
RESULTS = ROOT / "bench" / "results"


def pss_kib(pid: int) -> int:
    """A process's proportional set size in KiB (its share of pages it shares with others); 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def uss_kib(pid: int) -> int:
    """A process's unique set size in KiB (the pages only it maps): unlike PSS, it does not move when other
    processes start or stop sharing its libraries, so it is what a leak shows in; 0 if it is gone."""
    total = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    except OSError:
        return 0
    return total


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def measure(fn: Callable[[], Any], n: int, warmup: int = 3) -> list[float]:
    """Milliseconds of ``n`` calls of ``fn`` (after ``warmup`` calls)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50_ms": round(percentile(samples, 50), 3),
        "p95_ms": round(percentile(samples, 95), 3),
        "mean_ms": round(statistics.fmean(samples), 3) if samples else float("nan"),
    }


class Report:
    def __init__(self, name: str) -> None:
        self.name = name
        self.rows: dict[str, dict[str, Any]] = {}
        self.notes: dict[str, Any] = {"machine": platform.platform(), "python": platform.python_version()}

    def add(self, key: str, samples: list[float], **extra: Any) -> dict[str, Any]:
        row = {**summary(samples), **extra}
        self.rows[key] = row
        print(f"  {key:<52} p50 {row['p50_ms']:9.2f} ms   p95 {row['p95_ms']:9.2f} ms   (n={row['n']})", flush=True)
        return row

    def value(self, key: str, value: Any) -> None:
        self.notes[key] = value
        print(f"  {key:<52} {value}", flush=True)

    def ratio(self, key: str, baseline: str, ours: str) -> float:
        r = self.rows[baseline]["p50_ms"] / self.rows[ours]["p50_ms"]
        self.value(key, f"{r:.1f}x")
        return r

    def save(self) -> Path:
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / f"{self.name}.json"
        path.write_text(json.dumps({"rows": self.rows, "notes": self.notes}, indent=2))
        print(f"  results written to {path.relative_to(ROOT)}")
        return path
