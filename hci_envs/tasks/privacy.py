"""The answers stay with the server: the files that hold task answers cannot be read by agent accounts, wherever
hci-envs is installed (a checkout, a venv made with pip, the images).

Those files are the task files a server or a :class:`~hci_envs.tasks.World` is given (the built-in suite's
``builtin.jsonl`` by default, OSWorld's task files), and the real-application suite (``hci_envs/tasks/suite``:
its templates draw each task's data and checker from the seed). At start-up, :func:`keep_answers_private`
asks, as an agent account, which of them it can read; it makes those private to their owner (mode ``go-rwx``)
where this process may, and refuses to start, naming the command that fixes it, where it may not. The check is
the kernel's answer for the agent's uid, so it also sees a parent folder that already keeps them out.

Nothing in the agent's side needs these files: the apps it runs (``hci_envs.tasks.apps``) import neither the
suite nor a task file.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import ConfigError

log = logging.getLogger(__name__)

PACKAGE = Path(__file__).resolve().parent
#: What holds answers in the package itself.
SUITE = PACKAGE / "suite"
BUILTIN = PACKAGE / "builtin.jsonl"

#: Run as the agent: each path given that it can read (a file) or enter or list (a folder), one per line.
_PROBE = 'for f; do if [ -d "$f" ]; then { [ -r "$f" ] || [ -x "$f" ]; } && echo "$f"; ' \
         'elif [ -r "$f" ]; then echo "$f"; fi; done'


def answer_paths(task_files: Iterable[Path] = (), *, builtin: bool = False) -> list[Path]:
    """The paths that hold the answers of a server's or World's tasks: ``task_files`` (files or folders), the
    built-in task file with ``builtin``, and the real-application suite, which any server may draw a task from
    by its id; those that exist."""
    paths = [SUITE, *([BUILTIN] if builtin else []), *map(Path, task_files)]
    return [path.resolve() for path in paths if path.exists()]


def readable_by_agents(paths: Sequence[Path], account: object | None = None) -> list[Path]:
    """Which of ``paths`` an agent account can read (or, a folder, enter or list): asked as the account."""
    from ..sandbox.accounts import agent_accounts

    if not paths:
        return []
    agent = account if account is not None else next(iter(agent_accounts()), None)
    if agent is None:
        return []
    command = agent.command(["/bin/sh", "-c", _PROBE, "sh", *map(str, paths)])  # type: ignore[attr-defined]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"could not ask an agent account which task answers it can read: {exc}") from None
    seen = set(done.stdout.splitlines())
    return [path for path in paths if str(path) in seen]


def keep_answers_private(paths: Iterable[Path]) -> list[Path]:
    """Make ``paths`` unreadable by agent accounts where they are readable: returns the paths made private;
    raises ConfigError naming the fix where this process cannot."""
    readable = readable_by_agents(list(paths))
    changed = []
    for path in readable:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
            os.chmod(path, mode & 0o700)
            changed.append(path)
        except OSError:
            pass  # not this user's to change: said below
    still = readable_by_agents(readable)
    if still:
        owners = sorted({_owner(path) for path in still})
        listed = " ".join(str(path) for path in still)
        raise ConfigError(
            f"the agents' accounts can read task answers ({listed}), and this server ({_owner_of_self()}) cannot "
            f"make them private (owned by {', '.join(owners)}). As their owner, run: chmod -R go-rwx {listed}; "
            "or install hci-envs as the user that runs the server (in a venv of its own)")
    for path in changed:
        log.warning("made private to its owner (the agents' accounts could read task answers): %s", path)
    return changed


def _owner(path: Path) -> str:
    import pwd

    uid = path.stat().st_uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _owner_of_self() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return f"uid {os.geteuid()}"
