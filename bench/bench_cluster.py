"""Cluster benchmark (issue: hci_envs.cluster on Ray).

  * claim from the warm pool, p50 (target at most 100 ms), beside its floor measured in the same run: opening
    the WebSocket of a claim by hand to the same, equally idle desktops (a claim is that handshake plus the
    pool's bookkeeping);
  * aggregate steps/s of N desktops driven concurrently through the pool on a two-node local Ray cluster
    (``ray.cluster_utils.Cluster``, N/2 desktops per node), against the same N desktops as sessions of one
    ``hci-envs serve``: the ratio says what the cluster layer costs (or saves: one server is one process).

Every desktop runs xterm; a step types one character and observes a JPEG screenshot, without the settle wait
(which would make both sides wait on timers rather than work). The head and both nodes bind 127.0.0.1.

    .venv/bin/python bench/bench_cluster.py [--desktops N] [--steps K] [--claims M]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import httpx
from common import Report

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported: the nodes take 127.0.0.1

import ray
from ray.cluster_utils import Cluster

from hci_envs import AsyncHciEnvClient, HciEnvClient
from hci_envs.cluster import DesktopPool
from hci_envs.providers import LocalProvider

DESKTOP = {"env": "desktop", "apps": ["xterm"], "observation_format": "jpeg", "settle": False}


def step_action(i: int) -> dict:
    return {"type": "type_text", "text": "ab"[i % 2]}


async def drive(envs: list, steps: int) -> float:
    """Steps per second of every env stepping at once (after a reset each, outside the clock); closes them."""
    await asyncio.gather(*(env.reset() for env in envs))

    async def run(env) -> None:
        for i in range(steps):
            await env.step(step_action(i))

    try:
        start = time.perf_counter()
        await asyncio.gather(*(run(env) for env in envs))
        return len(envs) * steps / (time.perf_counter() - start)
    finally:
        for env in envs:
            await env.close()


def bench_claims(pool: DesktopPool, total: int, claims: int, report: Report) -> None:
    """Claims in rounds: every desktop reset, ready and idle, then claimed one after the other (timed), then
    all released (which resets them); the floor opens the same WebSockets by hand in rounds of its own, after
    resetting the desktops the same way."""

    def all_ready() -> None:
        deadline = time.monotonic() + 120
        while pool.status()["ready"] < total and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the resets' last work (apps drawing) is over too

    samples: list[float] = []
    desktops: list[tuple[str, str]] = []
    while len(samples) < claims:
        all_ready()
        envs = []
        for _ in range(min(total, claims - len(samples))):
            start = time.perf_counter()
            envs.append(pool.claim())
            samples.append((time.perf_counter() - start) * 1000)
        desktops = desktops or [(env.base_url, env.control_token) for env in envs]
        for env in envs:
            pool.release(env)
    report.add("claim from the warm pool (connected)", samples)

    floor: list[float] = []
    while len(floor) < claims:
        all_ready()
        for base_url, token in desktops:  # reset as a release does, so that each round starts alike
            httpx.post(f"{base_url}/reset", json={}, headers={"Authorization": f"Bearer {token}"},
                       timeout=120).raise_for_status()
        time.sleep(0.5)
        for base_url, token in desktops[:claims - len(floor)]:
            start = time.perf_counter()
            by_hand = HciEnvClient(base_url, control_token=token, session_id="default").connect()
            floor.append((time.perf_counter() - start) * 1000)
            by_hand._drop()
    floor_p50 = report.add("floor: the same WebSocket opened by hand", floor)["p50_ms"]
    claim_p50 = report.rows["claim from the warm pool (connected)"]["p50_ms"]
    report.value("claim p50 / floor p50", f"{claim_p50 / floor_p50:.2f}x")
    report.value("claim p50 within the 100 ms target", str(claim_p50 <= 100))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--desktops", type=int, default=16, help="N desktops (N/2 per node; default 16)")
    parser.add_argument("--steps", type=int, default=30, help="steps per desktop in the throughput runs")
    parser.add_argument("--claims", type=int, default=50, help="claims timed")
    args = parser.parse_args()
    n = args.desktops - args.desktops % 2
    report = Report("cluster")
    report.value("desktops", n)

    print(f"a two-node local Ray cluster, {n // 2} desktops per node")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1",
                                                            "include_dashboard": False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1, resources={"hci_desktop": n // 2}, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        started = time.perf_counter()
        with DesktopPool(size=n, spares=0, start_timeout=900, **DESKTOP) as pool:
            report.value("pool start (all desktops ready)", f"{time.perf_counter() - started:.1f} s")
            report.value("desktops per node", sorted(pool.status()["nodes"].values()))
            bench_claims(pool, n, args.claims, report)

            async def through_the_pool() -> float:
                return await drive(await asyncio.gather(*(pool.claim_async() for _ in range(n))), args.steps)

            pooled = asyncio.run(through_the_pool())
    finally:
        ray.shutdown()
        cluster.shutdown()
    report.value(f"steps/s, {n} desktops through the pool", f"{pooled:.1f}")

    print(f"the same {n} desktops as sessions of one hci-envs serve")
    # the lazy default session counts among the sessions but never starts a desktop
    # without spares, as the pool's desktops run: the same number of desktops on both sides
    server = LocalProvider(max_sessions=n + 1, lazy_default_session=True, spare=False, **DESKTOP)
    base_url = server.start(timeout=120)
    try:
        async def one_server() -> float:
            envs = [AsyncHciEnvClient(base_url, timeout=600) for _ in range(n)]
            for env in envs:  # one at a time: each connection starts a desktop
                await env.connect()
            return await drive(envs, args.steps)

        single = asyncio.run(one_server())
    finally:
        server.stop()
    report.value(f"steps/s, {n} desktops on one hci-envs serve", f"{single:.1f}")
    report.value("pool / one server (steps/s)", f"{pooled / single:.2f}x")
    report.save()


if __name__ == "__main__":
    main()
