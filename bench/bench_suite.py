"""The real-application suite: its wall time with 1, 2 and 3 desktops at once, and what a random agent scores.

  * the scripted oracle over one seed of every template, on 1, 2 and 3 sessions (the ratio to one session is
    what running desktops side by side buys on this machine);
  * the random agent (15 random clicks, keys and texts per task) over the same tasks: its mean score, against
    the suite's bound of 0.02, and the do-nothing agent's (which must be 0);
  * per app: the oracle's mean seconds per task on one session.

    .venv/bin/python bench/bench_suite.py [--seed 0] [--sessions 1 2 3] [--apps calc writer ...]
"""

from __future__ import annotations

import argparse
import time

from common import Report

from hci_envs.tasks import NoopAgent, OracleAgent, RandomAgent, World
from hci_envs.tasks.suite import suite


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sessions", type=int, nargs="*", default=[1, 2, 3])
    parser.add_argument("--apps", nargs="*", help="only these apps' templates")
    args = parser.parse_args()
    report = Report("suite")
    tasks = suite(seeds=[args.seed], apps=tuple(args.apps) if args.apps else None)
    report.value("tasks", len(tasks))
    walls: dict[int, float] = {}
    for sessions in args.sessions:
        with World(tasks, sessions=sessions) as world:
            world.run(NoopAgent(), progress=False)  # every desktop up once before the clock starts
            start = time.monotonic()
            result = world.run(OracleAgent(), progress=False)
            walls[sessions] = time.monotonic() - start
            summary = result.summary()
            report.value(f"oracle, {sessions} session(s): wall time", f"{walls[sessions]:.1f} s "
                         f"(success rate {summary['success_rate']:.2f}, {summary['mean_seconds']:.1f} s per task)")
            if sessions == args.sessions[0]:
                for app, s in result.by("app").items():
                    report.value(f"oracle per task, {app}", f"{s['mean_seconds']:.1f} s ({s['tasks']} tasks)")
                noop = world.run(NoopAgent(), progress=False).summary()
                random = world.run(RandomAgent(seed=args.seed, steps=15), progress=False)
                report.value("do-nothing agent: mean score", f"{noop['mean_score']:.4f}")
                report.value("random agent: mean score (bound 0.02)", f"{random.summary()['mean_score']:.4f}")
                scored = [f"{r.task} {r.score:.2f}" for r in random.results if r.score > 0]
                report.value("random agent: tasks with any score", ", ".join(scored) or "none")
    first = args.sessions[0]
    for sessions, wall in walls.items():
        if sessions != first:
            report.value(f"wall time {sessions} sessions / {first}", f"{wall / walls[first]:.2f}x")
    report.save()


if __name__ == "__main__":
    main()
