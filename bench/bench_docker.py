"""Docker benchmark (issue: images and the Docker provider).

  * container cold start until /health answers with a running desktop (docker run included);
  * the size of hci-envs/base (target <= 600 MB) and the Debian base it is built on;
  * idle memory per container (docker stats);
  * one full episode (reset + 20 steps, JPEG observations) in a container versus the local provider;
  * hci-envs/apps (the real-application suite's image): its size, its cold start to healthy beside the base's,
    and its first reset into a task of each real app (LibreOffice Calc and Writer, chromium, the file manager),
    beside the same reset on this machine's own apps (the local provider, same tasks).

    .venv/bin/python bench/bench_docker.py [--quick]
"""

from __future__ import annotations

import argparse
import time

from common import Report

from hci_envs import HciEnvClient
from hci_envs.providers import DockerProvider, LocalProvider

IMAGE = "hci-envs/base:latest"
APPS_IMAGE = "hci-envs/apps:latest"
#: One task per real app of the suite, for the apps image's resets.
#: The first template of these apps, at seed 0 (a reset into each is timed).
APP_TASK_APPS = ("calc", "writer", "browser", "files")


def episode(env: HciEnvClient) -> float:
    start = time.perf_counter()
    env.reset()
    for i in range(20):
        env.step({"type": "click", "x": 100 + 10 * i, "y": 100})
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 3 if args.quick else 10
    report = Report("docker")
    import docker

    client = docker.from_env()
    for tag in (IMAGE, "hci-envs/base-os:bookworm", "hci-envs/editor:latest", APPS_IMAGE):
        try:
            report.value(f"image size {tag}", f"{client.images.get(tag).attrs['Size'] / 1e6:.0f} MB")
        except docker.errors.ImageNotFound:
            report.value(f"image size {tag}", "not built")

    print("cold start: docker run until /health reports the desktop up")
    starts = []
    for _ in range(n):
        provider = DockerProvider(IMAGE)
        started = time.perf_counter()
        provider.start()
        starts.append((time.perf_counter() - started) * 1000)
        provider.stop()
    report.add("container cold start to healthy", starts)

    print("idle memory per container")
    providers = [DockerProvider(IMAGE) for _ in range(3)]
    try:
        for p in providers:
            p.start()
        time.sleep(10)
        usages = []
        for p in providers:
            stats = p.container.stats(stream=False)
            usages.append(stats["memory_stats"]["usage"] - stats["memory_stats"].get("stats", {}).get("inactive_file", 0))
        report.value("idle memory per container", f"{sum(usages) / len(usages) / 2**20:.0f} MiB")
    finally:
        for p in providers:
            p.stop()

    print("one episode (reset + 20 click steps, JPEG observations)")
    options = {"observation_format": "jpeg"}
    with HciEnvClient.from_docker_image(IMAGE, env_vars={"HCI_ENVS_OBSERVATION_FORMAT": "jpeg"}) as env:
        report.add("episode in a container", [episode(env) for _ in range(n)])
    with HciEnvClient.from_provider(LocalProvider(**options)) as env:
        report.add("episode with the local provider", [episode(env) for _ in range(n)])
    report.ratio("container / local (p50)", "episode in a container", "episode with the local provider")

    print("hci-envs/apps: cold start, and a reset into a task of each real app")
    starts = []
    for _ in range(n):
        provider = DockerProvider(APPS_IMAGE, mem_limit="3g")
        started = time.perf_counter()
        provider.start()
        starts.append((time.perf_counter() - started) * 1000)
        provider.stop()
    report.add("apps image: container cold start to healthy", starts)
    report.ratio("apps / base cold start (p50)", "apps image: container cold start to healthy",
                 "container cold start to healthy")
    local = LocalProvider("workstation", tasks="apps")
    with HciEnvClient.from_docker_image(APPS_IMAGE, mem_limit="3g") as inside, \
            HciEnvClient.from_provider(local) as here:
        from hci_envs.tasks.suite import templates

        app_tasks = [next(f"{t.id}.0" for t in templates().values() if t.app == app) for app in APP_TASK_APPS]
        for task in app_tasks:
            for env, where in ((inside, "in the apps image"), (here, "locally")):
                samples = []
                for _ in range(max(2, n // 2)):
                    started = time.perf_counter()
                    env.reset(task=task)
                    samples.append((time.perf_counter() - started) * 1000)
                report.add(f"reset into {task} {where}", samples)
    report.save()


if __name__ == "__main__":
    main()
