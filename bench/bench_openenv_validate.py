"""OpenEnv's validator on hci-envs: how long each level takes (issue: OpenEnv's validator and task API).

  * the static level of the checkout (a copy of its tracked files, hashed, its manifest parsed);
  * the URL checks of a running server (six HTTP requests), beside the server's own start (its floor: the
    server must be up before anything is asked);
  * every level of each image (the runtime level builds images/openenv/Dockerfile from the image, starts it as
    the validator does and plays the probe episode), beside a plain start of the same image until /health
    answers (the floor: what the runtime level cannot do without).

    .venv/bin/python bench/bench_openenv_validate.py [IMAGE ...]   # default: hci-envs/base and hci-envs/apps
"""

from __future__ import annotations

import sys
import time

from common import Report

from helpers import ServerProcess
from hci_envs.ops.openenv_check import validate
from hci_envs.providers import DockerProvider

IMAGES = ("hci-envs/base:latest", "hci-envs/apps:latest")


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return (time.perf_counter() - start) * 1000, result


def main() -> None:
    images = sys.argv[1:] or list(IMAGES)
    report = Report("openenv_validate")
    print("the checkout, static level:", flush=True)
    ms, (code, _, output) = timed(lambda: validate(level="static"))
    assert code == 0, output
    report.add("static level of the checkout", [ms])

    print("a running server, URL checks:", flush=True)
    server = ServerProcess("--size", "1280x800")
    started, _ = timed(lambda: server.start(60))
    try:
        ms, (code, _, output) = timed(lambda: validate(server.base_url))
        assert code == 0, output
    finally:
        server.stop()
    report.add("floor: the server started until /health", [started])
    report.add("URL checks of a running server", [ms])

    for image in images:
        print(f"{image}, every level:", flush=True)
        provider = DockerProvider(image, control_token="bench", agent_token="bench")
        start_ms, _ = timed(lambda: provider.start(timeout=120))  # noqa: B023 - called at once
        provider.stop()
        ms, (code, report_json, output) = timed(lambda: validate(image=image, level="semantic"))  # noqa: B023
        assert code == 0, output
        report.add(f"floor: {image} started until /health", [start_ms])
        report.add(f"every level of {image}", [ms])
        report.ratio(f"{image}: every level / its start", f"every level of {image}",
                     f"floor: {image} started until /health")
        skipped = sum(1 for r in report_json.get("results", []) if r.get("status") == "skip")
        report.value(f"{image}: checks skipped by the validator", skipped)
    report.save()


if __name__ == "__main__":
    main()
