"""Run an agent over a task suite and write the reports.

    .venv/bin/python examples/run_suite.py                       # the scripted oracle over the built-in suite
    .venv/bin/python examples/run_suite.py --agent random --tasks form-contact game-goal --out out/random
    .venv/bin/python examples/run_suite.py --suite apps --seeds 5 --sessions 3   # the real-application suite
    .venv/bin/python examples/run_suite.py --suite apps --apps calc writer --agent noop

The suite runs in the workstation environment (desktop + bash + python) on local desktops, no Docker.
``report.json`` holds the scores (per task, per app, per template); ``report.md`` and ``report.html`` show the
final screen of every task, and for a failed one the accessibility tree of its last observation. An agent is
any callable ``agent(observation, context)`` returning actions (or None when done): replace OracleAgent with
your model's policy.
"""

from __future__ import annotations

import argparse
import sys

from hci_envs.tasks import BUILTIN, NoopAgent, OracleAgent, RandomAgent, World, load_tasks

AGENTS = {"oracle": OracleAgent, "random": lambda: RandomAgent(seed=0, steps=15), "noop": NoopAgent}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", choices=sorted(AGENTS), default="oracle")
    parser.add_argument("--tasks", nargs="*", help="task ids (default: every task in the file)")
    parser.add_argument("--file", default=str(BUILTIN), help="a JSONL or YAML task file, or a datasets folder")
    parser.add_argument("--suite", choices=("builtin", "apps"), default="builtin",
                        help="apps: the real-application suite (its templates at --seeds); builtin: --file")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 of each template (--suite apps)")
    parser.add_argument("--apps", nargs="*", help="only the templates of these apps (--suite apps)")
    parser.add_argument("--sessions", type=int, default=1, help="desktops running tasks at once")
    parser.add_argument("--out", default="suite-report", help="where the reports go")
    parser.add_argument("--record", help="also record every episode into this folder")
    args = parser.parse_args(argv)

    if args.suite == "apps":
        from hci_envs.tasks.suite import suite

        tasks = suite(seeds=range(args.seeds), apps=tuple(args.apps) if args.apps else None)
    else:
        tasks = load_tasks(args.file)
    if args.tasks:
        known = {t.id: t for t in tasks}
        unknown = [t for t in args.tasks if t not in known]
        if unknown:
            parser.error(f"unknown task ids: {', '.join(unknown)} (known: {', '.join(known)})")
        tasks = [known[t] for t in args.tasks]
    with World(tasks, record_dir=args.record, sessions=args.sessions) as world:
        report = world.run(AGENTS[args.agent](), report_dir=args.out)
    summary = report.summary()
    print(f"{args.agent}: success rate {summary['success_rate']:.2f} over {summary['tasks']} tasks; "
          f"reports in {args.out}/report.md and report.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
