"""Forking an environment: environments whose desktops are live copies of its desktop at one moment.

The desktop does the copying (:meth:`hci_envs.fork.ForkableDesktop.fork`); this gives each copy to an
environment of its own (made like the source, so with an agent account and a home of its own) and carries
over what the environment knows of the episode: the start state, the task (so each copy can be scored on its
own), the step count, the seed, and the processes its tools keep between calls (the persistent shell, the
python tool's interpreter, CodeAct's worker), which each copy's tools go on with. Each copy's episode gets an id
of its own. The control plane forks; no tool of the agent's can (a fork is not in the action vocabulary).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

from ..errors import ConfigError, ForkError

#: The most copies one fork makes (the desktop's own bound).
MAX_COPIES = 16


def check_count(n: object) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_COPIES:
        raise ConfigError(f"n must be a whole number of copies from 1 to {MAX_COPIES}, not {n!r}", field="n")
    return n


def fork_into(source: Any, targets: list[Any]) -> None:
    """Give each of ``targets`` (new environments, not started, made like ``source``) a live copy of
    ``source``'s desktop and its episode. All or nothing: on failure no target has a desktop."""
    check_count(len(targets))
    desktop = source.desktop
    if desktop is None or not source.episode.started:
        raise ForkError("the environment has no desktop to fork yet: reset it first", reason="unavailable")
    if not callable(getattr(desktop, "fork", None)):
        raise ForkError("this environment's desktop cannot be forked: run it with desktop='forkable' (serve "
                        "--desktop forkable)", reason="unavailable")
    for target in targets:
        if target.desktop is not None or target.episode.started:
            raise ForkError("a fork goes into environments that have not started", reason="unavailable")
    lasting = Lasting.of(source)
    for target in targets:  # room for the source's home, whatever its episode's disk limit is
        target.homes.restore(None, disk=source.homes.disk)
    copies = desktop.fork(len(targets), accounts=[t.account for t in targets] if source.account else None,
                          homes=[str(t.homes.path) for t in targets])
    try:
        for target, copy in zip(targets, copies):
            adopt(target, source, copy, lasting)
    except BaseException:  # all or nothing: no target keeps a copy (the one that failed half way neither)
        for target in targets:
            target.desktop = None
        for copy in copies:
            copy.close()
        raise


@dataclasses.dataclass
class Lasting:
    """The processes an environment's tools keep between calls, as a fork or checkpoint carries them: the
    traits' (:meth:`~hci_envs.tools.trait.Trait.lasting_state`) and CodeAct's worker."""

    traits: dict[str, Any]
    code: dict[str, Any] | None

    @classmethod
    def of(cls, env: Any) -> Lasting:
        return cls(env.lasting_state(), env.code.lasting_state())

    def resume(self, env: Any, desktop: Any) -> None:
        env.resume_lasting(self.traits, desktop)
        env.code.resume(self.code, desktop, env.home)


def adopt(target: Any, source: Any, desktop: Any, lasting: Lasting) -> None:
    """Make ``desktop`` (a copy of ``source``'s) the desktop of ``target``'s running episode, its tools going on
    with the processes ``lasting`` names."""
    with target._lock:
        target.declared_state = source.declared_state
        target.desktop = desktop
        target.executor.use(desktop)
        target.tasks.task, target.tasks.own_start_state = source.tasks.task, source.tasks.own_start_state
        episode = dataclasses.replace(source.episode, id=str(uuid.uuid4()), pristine=False, closed=False,
                                      last_used=time.monotonic())  # new: an idle source's copies are not idle
        target.episode = episode
        target.on_session_start(desktop)
        lasting.resume(target, desktop)
        target.hooks.notify("desktop")
        target.hooks.notify("reset")


# -- checkpoints: a moment to return to ---------------------------------------------------------------------
#: The most checkpoints one environment keeps (each holds its desktop's memory on disk).
MAX_CHECKPOINTS = 8


@dataclasses.dataclass
class Checkpoint:
    """An environment at one moment: its desktop's (a :class:`~hci_envs.fork.forkable.Moment`) and its episode's."""

    moment: Any
    episode: Any
    declared_state: Any
    task: Any
    own_start_state: Any
    lasting: Lasting


class Checkpoints:
    """One environment's checkpoints by name, on disk in a folder of the server's own (removed with them)."""

    def __init__(self) -> None:
        self._root: Any = None
        self._kept: dict[str, Checkpoint] = {}

    def take(self, env: Any, name: str) -> dict[str, Any]:
        from ..sandbox.homes import check_snapshot_name
        from ..sandbox.watchdog import temporary_dir

        check_snapshot_name(name)
        desktop = env.desktop
        if desktop is None or not callable(getattr(desktop, "checkpoint", None)):
            raise ForkError("this environment's desktop cannot be checkpointed: run it with desktop='forkable'",
                            reason="unavailable")
        if name not in self._kept and len(self._kept) >= MAX_CHECKPOINTS:
            raise ConfigError(f"an environment keeps at most {MAX_CHECKPOINTS} checkpoints; taking one again under "
                              f"a name replaces it ({', '.join(sorted(self._kept))})", field="name")
        if self._root is None:
            self._root = temporary_dir("hci-envs-checkpoints-")
        lasting = Lasting.of(env)
        folder = self._root / f"{name}.{uuid.uuid4().hex[:8]}"
        try:
            moment = desktop.checkpoint(folder)
        except BaseException:
            _remove(folder)
            raise
        self.drop(name)
        self._kept[name] = Checkpoint(moment, dataclasses.replace(env.episode), env.declared_state, env.tasks.task,
                                      env.tasks.own_start_state, lasting)
        return {"name": name, "seconds": round(moment.dump.seconds, 3),
                "frozen_seconds": round(moment.dump.frozen_seconds, 3), "bytes": moment.dump.size}

    def get(self, name: str) -> Checkpoint:
        if name not in self._kept:
            raise ConfigError(f"no checkpoint named {name!r}; known: {', '.join(sorted(self._kept)) or 'none'}",
                              field="checkpoint")
        return self._kept[name]

    def names(self) -> list[str]:
        return sorted(self._kept)

    def drop(self, name: str) -> None:
        kept = self._kept.pop(name, None)
        if kept is not None:
            _remove(kept.moment.dump.images.parent)

    def close(self) -> None:
        from ..sandbox.watchdog import remove_temporary_dir

        self._kept.clear()
        if self._root is not None:
            remove_temporary_dir(self._root)
            self._root = None


def _remove(folder: Any) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def return_to(env: Any, checkpoint: Checkpoint, seed: int | None, episode_id: str | None) -> None:
    """Make ``env``'s desktop the one of ``checkpoint`` again (a new desktop restored from it, with the
    environment's own account and home; the home as it was then) and its episode the checkpoint's, under a new
    id. The environment's lock is held and its agent's processes are to end here."""
    from ..fork import ForkableDesktop

    old = env.desktop
    settings = {"max_processes": old.max_processes, "limits": old.server_limits, "network": old.network,
                "dpi": old.dpi, "start_timeout": old.start_timeout} if old is not None else {}
    env.desktop = None
    if old is not None:
        old.close()  # every process of the agent ends before its home is touched
    env.homes.restore(checkpoint.moment.home)
    desktop = ForkableDesktop.restored(checkpoint.moment, home=str(env.homes.path), account=env.account, **settings)
    env.desktop = desktop
    env.executor.use(desktop)
    env.declared_state = checkpoint.declared_state
    env.tasks.task, env.tasks.own_start_state = checkpoint.task, checkpoint.own_start_state
    env.episode = dataclasses.replace(checkpoint.episode, id=episode_id or str(uuid.uuid4()), seed=seed,
                                      pristine=False, closed=False, active=True, last_used=time.monotonic())
    env.on_session_start(desktop)
    checkpoint.lasting.resume(env, desktop)
    env.hooks.notify("desktop")
    env.hooks.notify("reset")
