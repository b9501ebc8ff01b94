"""DesktopPool: warm desktops across a Ray cluster, claimed by trainers and given back.

    with DesktopPool(address="auto", env="workstation", size=64, spares=8) as pool:
        env = pool.claim()              # a PooledEnv: an HciEnvClient with .node_id, .mcp_url, .agent_token
        env.reset(); env.step({"type": "click", "x": 10, "y": 10})
        pool.release(env)               # back to the pool, reset in the background

``size`` desktops can be claimed at once; ``spares`` more are kept, so that the pool always runs
``size + spares`` desktops and a claim finds one reset and ready while released ones are being reset. Each
desktop is a Ray actor (:class:`~hci_envs.cluster.host.DesktopHost`) holding one unit of the custom resource
``hci_desktop`` (so a node started with ``--resources='{"hci_desktop": 8}'`` hosts eight), spread over the nodes
that offer it. The trainer talks to each desktop directly (its server listens on its node's address, with a
control and an agent token the pool makes per desktop); Ray carries only the desktop's life: start, health,
stop, and the news of its death.

Everything slow happens on the pool's own event loop, in a thread: actors starting, warm-up and release
resets (``POST /reset`` with the desktop's control token), death watches and probes. A claim only takes a
ready desktop and opens a WebSocket to it.

Loss: every desktop has a call pending on its actor (``until_stopped``) that fails when the actor dies with its
node. The pool then ends the claim on it (a blocked call returns at once with
:class:`~hci_envs.errors.DesktopLostError`), kills what is left of the actor, and starts a replacement, which
Ray places on the nodes that remain. A claim's broken connection is judged the same way: a probe of the actor,
bounded by ``probe_timeout``.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import (
    ConfigError,
    DesktopLostError,
    EnvironmentStateError,
    HciEnvsError,
    NoDesktopReadyError,
    PoolError,
    ProviderError,
    require,
)
from .claims import AsyncPooledEnv, Claim, PooledEnv
from .host import DesktopHost

#: The custom Ray resource a node offers one unit of per desktop it can host.
RESOURCE = "hci_desktop"

STARTING, READY, CLAIMED, RESETTING, GONE = "starting", "ready", "claimed", "resetting", "gone"
#: Seconds a closing pool gives each desktop's server to stop before its actor is killed.
STOP_GRACE = 30.0


def _token() -> str:
    import secrets

    return secrets.token_urlsafe(24)


@dataclass(eq=False)
class PooledDesktop:
    """The pool's record of one desktop (its actor, where it listens, its tokens, what it is doing)."""

    number: int
    actor: Any
    control_token: str
    agent_token: str
    status: str = STARTING
    node_id: str = ""
    base_url: str = ""
    mcp_url: str = ""
    actor_pid: int = 0
    claim: Claim | None = None
    gone_reason: str = ""

    def lost_error(self) -> DesktopLostError:
        where = f" on node {self.node_id}" if self.node_id else ""
        return DesktopLostError(
            f"desktop {self.number}{where} is lost ({self.gone_reason}); the pool is replacing it: claim another",
            node_id=self.node_id, desktop=self.number, reason=self.gone_reason)


class DesktopPool:
    """Desktops as Ray actors on the nodes that offer ``hci_desktop``; see the module's docstring.

    ``address``: the Ray cluster, as ``ray.init`` takes it (``"auto"``: the one this machine belongs to); ignored
    when Ray is already initialised in this process (inside a Ray job). ``env``: the environment each desktop
    serves (a name, ``module:Class``), or ``image``: a Docker image to run through the Docker provider on the
    node instead. ``screen_size=(width, height)`` sets a local desktop's screen (``size`` is the pool's). Other
    keyword arguments are the provider's: ``hci-envs serve`` options for local desktops (``apps=[...]``,
    ``observation_format="jpeg"``, ``settle=False``), DockerProvider options for images (``mem_limit``, ...).

    Timeouts (seconds): ``claim_timeout`` for a claim with no desktop ready; ``start_timeout`` for the pool's
    first ``size + spares`` desktops to be ready; ``desktop_timeout`` for one desktop's server to become
    healthy; ``step_timeout`` for one reply of a claimed desktop; ``probe_timeout`` for an actor to answer
    whether its desktop still runs (and for a claim's WebSocket handshake).
    """

    def __init__(self, address: str | None = "auto", env: str = "desktop", *, size: int, spares: int = 0,
                 image: str | None = None, screen_size: tuple[int, int] | None = None, claim_timeout: float = 60.0,
                 start_timeout: float = 300.0, desktop_timeout: float = 120.0, step_timeout: float = 120.0,
                 probe_timeout: float = 10.0, **options: Any) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ConfigError(f"size must be a whole number of desktops, at least 1 (not {size!r})")
        if not isinstance(spares, int) or isinstance(spares, bool) or spares < 0:
            raise ConfigError(f"spares must be a whole number of desktops, 0 or more (not {spares!r})")
        for name, value in (("claim_timeout", claim_timeout), ("start_timeout", start_timeout),
                            ("desktop_timeout", desktop_timeout), ("step_timeout", step_timeout),
                            ("probe_timeout", probe_timeout)):
            if not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds (not {value!r})")
        if screen_size is not None:
            if image is not None:
                raise ConfigError("screen_size is for local desktops: an image's screen is set by its own command")
            options["size"] = screen_size
        self.size, self.spares = size, spares
        self.env, self.image, self.options = env, image, options
        self.claim_timeout, self.start_timeout, self.desktop_timeout = claim_timeout, start_timeout, desktop_timeout
        self.step_timeout, self.probe_timeout = step_timeout, probe_timeout
        self._ray = require("ray", "ray", "DesktopPool (desktops across a Ray cluster)")
        self._owns_ray = False
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._desktops: list[PooledDesktop] = []
        self._ready: deque[PooledDesktop] = deque()
        self._claimed = 0
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._numbers = itertools.count(1)
        self._closed = False
        self._filling = True
        #: The first desktop that failed to start while the pool filled (raised from the constructor), and
        #: the latest failure since a desktop last became ready (told by a claim that times out).
        self._fill_failure: HciEnvsError | None = None
        self._last_failure: str | None = None
        self._failures_in_a_row = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hci-envs-pool", daemon=True)
        self._http: httpx.AsyncClient | None = None
        if not self._ray.is_initialized():
            try:
                self._ray.init(address=address)
            except ConnectionError as exc:
                raise PoolError(
                    f"no Ray cluster at {address!r} ({exc}). Start one: `ray start --head "
                    f"--resources='{{\"{RESOURCE}\": 4}}'` (see docs/cluster.md)") from None
            self._owns_ray = True
        self._host = self._ray.remote(DesktopHost)
        self._thread.start()
        atexit.register(_close_at_exit, weakref.ref(self))
        try:
            for _ in range(size + spares):
                self._spawn(self._add_desktop())
            self._wait_until_filled()
        except BaseException:
            self.close()
            raise

    # -- the public face ---------------------------------------------------------------------------------
    def claim(self, timeout: float | None = None) -> PooledEnv:
        """A ready desktop, connected; waits up to ``timeout`` (default ``claim_timeout``) seconds for one, then
        raises :class:`NoDesktopReadyError`."""
        deadline = self._deadline(timeout)
        while True:
            with self._changed:
                while (desktop := self._take(PooledEnv)) is None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise self._none_ready(timeout)
                    self._changed.wait(remaining)
            env = desktop.claim
            assert isinstance(env, PooledEnv)
            try:
                return env.connect()
            except HciEnvsError as exc:
                self._refused(desktop, exc)
            except BaseException:  # interrupted while connecting: the desktop goes back, not astray
                self.release(env)
                raise

    async def claim_async(self, timeout: float | None = None) -> AsyncPooledEnv:
        """The asyncio twin of :meth:`claim`: an :class:`AsyncPooledEnv`, without blocking the event loop."""
        loop = asyncio.get_running_loop()
        deadline = self._deadline(timeout)
        while True:
            with self._lock:
                desktop = self._take(AsyncPooledEnv)
                remaining = deadline - time.monotonic()
                if desktop is None:
                    if remaining <= 0:
                        raise self._none_ready(timeout)
                    woken: asyncio.Future[None] = loop.create_future()
                    self._waiters.append((loop, woken))
            if desktop is None:
                try:
                    await asyncio.wait_for(woken, remaining)
                except TimeoutError:
                    pass
                continue
            env = desktop.claim
            assert isinstance(env, AsyncPooledEnv)
            try:
                return await env.connect()
            except HciEnvsError as exc:
                self._refused(desktop, exc)
            except BaseException:  # cancelled while connecting: the desktop goes back, not astray
                self.release(env)
                raise

    def release(self, env: Claim) -> None:
        """Give a claimed desktop back: the claim ends (its calls raise), the desktop is reset in the background
        and joins the ready ones. Releasing a desktop already released or lost does nothing."""
        desktop = self._lent(env)
        with self._changed:
            if desktop.claim is not env:
                return
            desktop.claim = None
            desktop.status = RESETTING
            self._claimed -= 1
            self._notify()  # a claim waiting because `size` were out may go now
            closed = self._closed
        env._end(EnvironmentStateError("this desktop was released to its pool; claim another"))
        if not closed:
            self._spawn(self._reset(desktop))

    async def reset_all(self, envs: Iterable[Claim], *, return_exceptions: bool = False,
                        **options: Any) -> list[Any]:
        """Reset claimed desktops concurrently (``reset`` options apply to each); their results in order. With
        ``return_exceptions``, a desktop that fails (lost, say) gives its exception in its place."""
        envs = list(envs)
        for env in envs:
            self._lent(env)

        async def reset(env: Claim) -> Any:
            if isinstance(env, AsyncPooledEnv):
                return await env.reset(**options)
            return await asyncio.to_thread(env.reset, **options)  # type: ignore[attr-defined]

        return list(await asyncio.gather(*(reset(env) for env in envs), return_exceptions=return_exceptions))

    def status(self) -> dict[str, Any]:
        """How many desktops are starting, ready, claimed and resetting, and how many run on each node."""
        with self._lock:
            return self._status()

    def close(self) -> None:
        """End every claim, stop every desktop (servers, containers) and kill their actors; idempotent."""
        with self._changed:
            if self._closed:
                return
            self._closed = True
            desktops, claims = list(self._desktops), []
            for desktop in desktops:
                if desktop.claim is not None:
                    claims.append(desktop.claim)
                    desktop.claim = None
                desktop.status, desktop.gone_reason = GONE, "the pool was closed"
            self._ready.clear()
            self._claimed = 0
            self._notify()
        for env in claims:
            env._end(EnvironmentStateError("the desktop's pool was closed"))
        if self._thread.is_alive():
            done = asyncio.run_coroutine_threadsafe(self._shut_down(desktops), self._loop)
            try:
                done.result(timeout=60)
            except Exception:  # noqa: BLE001 - closing goes on; the actors' owner (this process) ends them at exit
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
        if self._owns_ray:
            self._ray.shutdown()

    def __enter__(self) -> DesktopPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        s = self.status()
        return (f"<DesktopPool size={self.size} spares={self.spares} ready={s['ready']} claimed={s['claimed']} "
                f"resetting={s['resetting']} starting={s['starting']}>")

    # -- claims (under the lock) -------------------------------------------------------------------------
    def _deadline(self, timeout: float | None) -> float:
        if timeout is None:
            timeout = self.claim_timeout
        if not isinstance(timeout, int | float) or isinstance(timeout, bool):
            raise ConfigError(f"a claim's timeout is a number of seconds (not {timeout!r})")
        return time.monotonic() + timeout

    def _take(self, kind: type[Claim]) -> PooledDesktop | None:
        """A ready desktop, now claimed by a new, unconnected client of ``kind``; None if none may be taken."""
        if self._closed:
            raise EnvironmentStateError("the pool is closed")
        if self._claimed >= self.size or not self._ready:
            return None
        desktop = self._ready.popleft()
        desktop.status = CLAIMED
        desktop.claim = kind(self, desktop)  # type: ignore[call-arg]
        self._claimed += 1
        return desktop

    def _status(self) -> dict[str, Any]:
        live = [d for d in self._desktops if d.status != GONE]
        counts = Counter(d.status for d in live)
        return {"size": self.size, "spares": self.spares,
                **{s: counts.get(s, 0) for s in (STARTING, READY, CLAIMED, RESETTING)},
                "nodes": dict(Counter(d.node_id for d in live if d.node_id))}

    def _notify(self) -> None:
        self._changed.notify_all()
        waiters, self._waiters = self._waiters, []
        for loop, woken in waiters:
            try:
                loop.call_soon_threadsafe(_wake, woken)
            except RuntimeError:  # that loop is closed: nobody waits there any more
                pass

    def _none_ready(self, timeout: float | None) -> NoDesktopReadyError:
        s = self._status()
        why = (f"all {self.size} claimable desktops are claimed" if s[CLAIMED] >= self.size else
               f"{s[RESETTING]} resetting, {s[STARTING]} starting")
        failure = f"; the last failure: {self._last_failure}" if self._last_failure else ""
        return NoDesktopReadyError(
            f"no desktop ready within {self.claim_timeout if timeout is None else timeout:g}s ({why}; pool size "
            f"{self.size}, spares {self.spares}){failure}", **{k: v for k, v in s.items() if k != "nodes"})

    def _refused(self, desktop: PooledDesktop, exc: HciEnvsError) -> None:
        """A claimed desktop whose WebSocket could not be opened is not handed out; it is replaced."""
        with self._lock:
            self._last_failure = f"desktop {desktop.number} refused a claim's connection: {_gist(exc)}"
        self._lose(desktop, f"its server refused the claim's connection: {_gist(exc)}")

    def _lent(self, env: Any) -> PooledDesktop:
        if not isinstance(env, Claim) or env._pool is not self:
            raise PoolError(f"{env!r} is not a desktop claimed from this pool")
        return env._desktop

    # -- judging a broken claim ---------------------------------------------------------------------------
    def _judge(self, desktop: PooledDesktop, exc: HciEnvsError) -> HciEnvsError:
        """What a claim's broken connection means: the desktop's loss (DesktopLostError) if its actor is gone,
        its server stopped or its server no longer answers, else ``exc`` as it was. Takes at most about twice
        ``probe_timeout``."""
        if desktop.status == GONE or self._closed or not self._thread.is_alive():
            return self._gone_error(desktop)
        check = asyncio.run_coroutine_threadsafe(self._check_serving(desktop), self._loop)
        try:
            check.result(2 * self.probe_timeout + 5)
        except Exception:  # noqa: BLE001 - the check itself did not run: that desktop cannot be vouched for
            self._lose(desktop, "the pool could not probe it")
        return self._gone_error(desktop) if desktop.status == GONE else exc

    async def _judge_async(self, desktop: PooledDesktop, exc: HciEnvsError) -> HciEnvsError:
        if desktop.status == GONE or self._closed or not self._thread.is_alive():
            return self._gone_error(desktop)
        check = asyncio.run_coroutine_threadsafe(self._check_serving(desktop), self._loop)
        try:
            await asyncio.wait_for(asyncio.wrap_future(check), 2 * self.probe_timeout + 5)
        except Exception:  # noqa: BLE001 - the check itself did not run: that desktop cannot be vouched for
            self._lose(desktop, "the pool could not probe it")
        return self._gone_error(desktop) if desktop.status == GONE else exc

    async def _check_serving(self, desktop: PooledDesktop) -> None:
        """Lose a claimed desktop whose actor is gone or whose server does not answer ``/health`` within
        ``probe_timeout``. Ray's node health checks usually tell first; this does not depend on them: a
        server that is stopped while its actor still answers would otherwise stay claimed, and be lent again."""
        if not await self._probe(desktop):
            return
        try:
            response = await self._client().get(f"{desktop.base_url}/health", timeout=self.probe_timeout)
            answered = response.status_code == 200
        except httpx.HTTPError:
            answered = False
        if not answered:
            self._lose(desktop, f"its server did not answer /health within {self.probe_timeout:g}s")

    def _gone_error(self, desktop: PooledDesktop) -> HciEnvsError:
        if self._closed:
            return EnvironmentStateError("the desktop's pool was closed")
        return desktop.lost_error()

    # -- the pool's loop: desktops come and go -----------------------------------------------------------
    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` on the pool's loop (from any thread), keeping a reference until it ends."""

        def start() -> None:
            task = self._loop.create_task(work)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        try:
            self._loop.call_soon_threadsafe(start)
        except RuntimeError:  # the loop has stopped: the pool is closed
            work.close()

    def _client(self) -> httpx.AsyncClient:
        """The pool's HTTP client to the desktops' control planes (made on the pool's loop, used only there)."""
        if self._http is None:
            self._http = httpx.AsyncClient(trust_env=False)
        return self._http

    def _await(self, ref: Any) -> asyncio.Future[Any]:
        """A Ray ObjectRef as an asyncio future of the pool's loop."""
        return asyncio.wrap_future(ref.future())

    async def _add_desktop(self, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        with self._lock:
            if self._closed:
                return
            desktop = PooledDesktop(next(self._numbers), None, _token(), _token())
            desktop.actor = self._host.options(
                num_cpus=0, resources={RESOURCE: 1}, scheduling_strategy="SPREAD", max_restarts=0,
                # start, alive and stop must run while until_stopped blocks one thread for the actor's life
                max_concurrency=4,
            ).remote(self.env, self.image, self.options, desktop.control_token, desktop.agent_token)
            self._desktops.append(desktop)
        self._spawn(self._watch(desktop, self._await(desktop.actor.until_stopped.remote())))
        try:
            # No timeout of ours: an actor waits here until Ray can place it (a replacement may wait for a node
            # to join); once placed, start() keeps to desktop_timeout.
            info = await self._await(desktop.actor.start.remote(self.desktop_timeout))
        except Exception as exc:  # noqa: BLE001 - whatever it was, this desktop will not serve
            if isinstance(exc, self._ray.exceptions.RayActorError):
                self._lose(desktop, f"its actor died while it started ({type(exc).__name__})")
            else:
                self._start_failed(desktop, exc)
            return
        desktop.node_id, desktop.base_url, desktop.mcp_url = info["node_id"], info["base_url"], info["mcp_url"]
        desktop.actor_pid = info["actor_pid"]
        await self._reset(desktop)

    async def _reset(self, desktop: PooledDesktop) -> None:
        """Reset a desktop nobody holds and make it ready; one that fails to reset is replaced."""
        with self._lock:
            if desktop.status == GONE:
                return
            desktop.status = RESETTING
        try:
            response = await self._client().post(
                f"{desktop.base_url}/reset", json={}, timeout=self.desktop_timeout,
                headers={"Authorization": f"Bearer {desktop.control_token}"})
            failure = None if response.status_code == 200 else f"HTTP {response.status_code}: {response.text[:300]}"
        except httpx.HTTPError as exc:
            failure = f"{type(exc).__name__}: {exc}"
        if failure is not None:
            if await self._probe(desktop):
                self._lose(desktop, f"its reset failed ({failure})")
            return
        with self._changed:
            if desktop.status != RESETTING:
                return
            desktop.status = READY
            self._ready.append(desktop)
            self._failures_in_a_row, self._last_failure = 0, None
            self._notify()

    async def _watch(self, desktop: PooledDesktop, stopped: asyncio.Future[Any]) -> None:
        """Wait for the desktop's actor to end; if that was not the pool's doing, the desktop is lost."""
        while True:
            try:
                await stopped
                return  # stopped by the pool
            except asyncio.CancelledError:
                raise
            except self._ray.exceptions.ActorUnavailableError:
                # unreachable for now, perhaps only for a moment: the probe decides
                if not await self._probe(desktop):
                    return
                stopped = self._await(desktop.actor.until_stopped.remote())
            except Exception as exc:  # noqa: BLE001 - the actor died: with its node, or killed
                self._lose(desktop, f"its actor died ({type(exc).__name__}: {_gist(exc)})")
                return

    async def _probe(self, desktop: PooledDesktop) -> bool:
        """Whether the desktop's actor answers within ``probe_timeout`` that its server runs; if not, the desktop
        is lost (and replaced)."""
        if desktop.status == GONE:
            return False
        try:
            alive = await asyncio.wait_for(self._await(desktop.actor.alive.remote()), self.probe_timeout)
            reason = "its server is no longer running"
        except TimeoutError:
            alive, reason = False, f"its actor did not answer within {self.probe_timeout:g}s"
        except Exception as exc:  # noqa: BLE001 - dead, unreachable, or raising: not a desktop to trust
            alive, reason = False, f"its actor is gone ({type(exc).__name__})"
        if not alive:
            self._lose(desktop, reason)
        return bool(alive)

    def _start_failed(self, desktop: PooledDesktop, exc: BaseException) -> None:
        exc = getattr(exc, "cause", None) or exc  # Ray's wrapper of what the actor raised: the error itself
        cause = exc if isinstance(exc, HciEnvsError) else ProviderError(f"{type(exc).__name__}: {_gist(exc)}")
        with self._changed:
            if self._filling and self._fill_failure is None:
                self._fill_failure = cause
            self._last_failure = f"desktop {desktop.number} did not start: {_gist(cause)}"
            self._failures_in_a_row += 1
            self._notify()
        self._lose(desktop, f"it did not start: {_gist(cause)}")

    def _lose(self, desktop: PooledDesktop, reason: str) -> None:
        """The desktop is gone (from any thread): end its claim, dispose of its actor, start a replacement."""
        with self._changed:
            if desktop.status == GONE:
                return
            was, desktop.status, desktop.gone_reason = desktop.status, GONE, reason
            if desktop in self._ready:
                self._ready.remove(desktop)
            claim, desktop.claim = desktop.claim, None
            if was == CLAIMED:
                self._claimed -= 1
            self._notify()
        if claim is not None:
            claim._end(desktop.lost_error())
        self._spawn(self._replace(desktop))

    async def _replace(self, desktop: PooledDesktop) -> None:
        # The replacement starts at once: Ray places it wherever a unit of hci_desktop is free, which is
        # already true when the node is gone, and true once the old actor is killed when it is not.
        self._spawn(self._forget(desktop))
        with self._lock:
            if self._closed:
                return
            # a desktop that cannot start (a bad option, a node without Xvfb) is retried ever more slowly
            delay = min(30.0, 0.5 * 2 ** (self._failures_in_a_row - 1)) if self._failures_in_a_row else 0.0
        await self._add_desktop(delay)

    async def _forget(self, desktop: PooledDesktop) -> None:
        await self._dispose(desktop, self.probe_timeout)
        with self._lock:
            if desktop in self._desktops:
                self._desktops.remove(desktop)

    async def _dispose(self, desktop: PooledDesktop, grace: float) -> None:
        """Stop the desktop's server (waiting at most ``grace`` seconds: a lost node does not answer) and kill
        its actor. A desktop that never started is only killed: its actor may not even be placed."""
        if desktop.base_url:
            try:
                await asyncio.wait_for(self._await(desktop.actor.stop.remote()), grace)
            except Exception:  # noqa: BLE001 - dead or silent: killing the actor ends a local server all the same
                pass
        try:
            self._ray.kill(desktop.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def _wait_until_filled(self) -> None:
        wanted = self.size + self.spares
        deadline = time.monotonic() + self.start_timeout
        with self._changed:
            while len(self._ready) < wanted:
                failure = self._fill_failure
                if failure is not None:
                    raise PoolError(f"a desktop of the pool did not start: {failure}") from failure
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    offered = self._ray.cluster_resources().get(RESOURCE, 0)
                    raise PoolError(
                        f"only {len(self._ready)} of {wanted} desktops (size {self.size} + spares {self.spares}) were "
                        f"ready within {self.start_timeout:g}s; the cluster offers {offered:g} {RESOURCE}. Start "
                        f"nodes with --resources='{{\"{RESOURCE}\": N}}' (see docs/cluster.md)",
                        ready=len(self._ready), wanted=wanted, offered=offered)
                self._changed.wait(remaining)
            self._filling = False

    async def _shut_down(self, desktops: list[PooledDesktop]) -> None:
        for task in list(self._tasks):
            if task is not asyncio.current_task():
                task.cancel()
        await asyncio.gather(*(self._dispose(d, STOP_GRACE) for d in desktops), return_exceptions=True)
        if self._http is not None:
            await self._http.aclose()


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


def _gist(exc: BaseException) -> str:
    """An error in one line: its first, and its last where there are more (a server's output ends with why)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    return lines[0][:300] if len(lines) == 1 else f"{lines[0][:200]} ... {lines[-1][:300]}"


def _close_at_exit(ref: weakref.ReferenceType[DesktopPool]) -> None:
    pool = ref()
    if pool is not None:
        pool.close()
