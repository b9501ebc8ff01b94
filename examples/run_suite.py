"""Run an agent over the built-in task suite and write the reports.

    .venv/bin/python examples/run_suite.py                       # the scripted oracle over all tasks
    .venv/bin/python examples/run_suite.py --agent random --tasks form-contact game-goal --out out/random

The suite runs in the workstation environment (desktop + bash + python) on a local desktop, no Docker.
``report.json`` holds the scores; ``report.md`` and ``report.html`` show the final screen of every task.
An agent is any callable ``agent(observation, context)`` returning actions (or None when done): replace
OracleAgent with your model's policy.
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
    parser.add_argument("--out", default="suite-report", help="where the reports go")
    parser.add_argument("--record", help="also record every episode into this folder")
    args = parser.parse_args(argv)

    tasks = load_tasks(args.file)
    if args.tasks:
        known = {t.id: t for t in tasks}
        unknown = [t for t in args.tasks if t not in known]
        if unknown:
            parser.error(f"unknown task ids: {', '.join(unknown)} (known: {', '.join(known)})")
        tasks = [known[t] for t in args.tasks]
    with World(tasks, record_dir=args.record) as world:
        report = world.run(AGENTS[args.agent](), report_dir=args.out)
    summary = report.summary()
    print(f"{args.agent}: success rate {summary['success_rate']:.2f} over {summary['tasks']} tasks; "
          f"reports in {args.out}/report.md and report.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
