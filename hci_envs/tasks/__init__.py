"""Tasks and worlds: GUI tasks with start states and checkers, a runner with reports, the built-in suite.

    from hci_envs.tasks import World, OracleAgent
    with World() as world:                       # the built-in suite, in the workstation environment
        report = world.run(OracleAgent(), report_dir="out")
"""

from .agents import NoopAgent, OracleAgent, RandomAgent
from .reports import RunReport, TaskResult, write_reports
from .scoring import Score, score
from .spec import TaskFormatError, TaskSpec, load_tasks, parse_task
from .world import BUILTIN, AgentContext, World

__all__ = [
    "BUILTIN", "AgentContext", "NoopAgent", "OracleAgent", "RandomAgent", "RunReport", "Score", "TaskFormatError",
    "TaskResult", "TaskSpec", "World", "load_tasks", "parse_task", "score", "write_reports",
]
