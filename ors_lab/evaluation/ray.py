"""``RayBackend``: one evaluation over the workers of a Ray cluster, with one trace and the same result.

    result = ol.evaluate(env, agent, rollouts=4, record="runs/x.parquet",
                         backend=ol.RayBackend(workers=8))

How a Ray run goes (``evaluate`` / ``aevaluate`` with ``backend=``; every other argument means what it
means in a local run, ``concurrency`` being each worker's limit of open sessions):

- Ray is imported only here, and only when a Ray run starts: ``import ors_lab`` never imports it.
  ``address=None`` starts a private single-machine cluster for the run, loopback only
  (``start_local``, the recipe of the project's Ray notes), and stops it after; ``"auto"`` or
  ``"ray://host:port"`` joins an existing cluster. A Ray already started in the process is used as
  it is (tests share one cluster per session this way).
- ``workers`` async actors each hold their own client, their own copy of the agent (the agent is
  pickled once, before any work: an agent that does not pickle is an ``AgentNotShippableError``; or
  ``agent_factory`` is called by each worker) and their own limit of ``concurrency`` open sessions.
  Worker ``n`` talks to ``servers[n % len(servers)]`` (default: the environment's own server), so
  sessions are spread over several ORS servers worker by worker.
- Work is sharded by (task, rollout): the driver hands out shards of pairs from one queue, two
  shards in flight per worker so a worker never idles between them; a fast worker takes more.
- One trace, one writer: each worker streams its events back to the driver in batches (every
  ``flush_s`` seconds, an actor streaming generator), their clocks moved onto the driver's, and the
  driver publishes them on the run's stream. So the recorder, the result's rows, the dashboard, the
  feed and ``subscribe=`` see a Ray run as they see a local one, and the trace is written by one
  recorder (readable during the run, resumable after a crash). Each ``start`` row, and every row of
  its session, names its worker in the ``worker`` column.
- A worker that dies (its process killed, its machine lost) is restarted by Ray (``restarts`` times
  at most); the episodes it had started and not reported finished get a failed ``episode`` row
  (``WorkerDiedError``) in the trace, are left out of the result, and go back into the queue with the
  pairs it had not started; what it reported finished is never run again. Every worker dead for
  good: ``WorkersLostError``.
- Ctrl-C or cancelling tells every worker to stop: each cancels its episodes, which delete their
  sessions, and sends its last events; then the actors are killed and the run ends as a local one does.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ors_lab.agents.policy import Policy, as_agent
from ors_lab.client import AsyncClient, AsyncEnvironment
from ors_lab.client.runner import CLEANUP_TIMEOUT
from ors_lab.events import EpisodeEvent, Event, EventStream, FinishEvent, StartEvent, wall_ns, wall_time
from ors_lab.protocol.errors import AgentNotShippableError, WorkersLostError

if TYPE_CHECKING:
    from ors_lab.agents.episode import Agent

__all__ = ["LOOPBACK_ENV", "Job", "LocalCluster", "RayBackend", "RayRun", "client_options", "start_local"]

LOOPBACK_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # single-node mode: node IP 127.0.0.1, every listener on loopback
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "token",  # with the token given here, nothing is written to ~/.ray
}
"""What a local cluster needs in the process environment before Ray is first imported."""

OBJECT_STORE = 256 * 1024**2
REVIVE_S = 60.0
"""How long a dead worker may take to come back (Ray restarting its actor) before its shards go to the others."""


@dataclass(frozen=True)
class RayBackend:
    """Run an evaluation on Ray (see the module docstring).

    ``address``: None for a private loopback cluster on this machine, started and stopped with the run;
    ``"auto"`` or ``"ray://host:port"`` for an existing cluster. ``workers``: actors running episodes.
    ``cpus``: Ray CPUs each worker reserves (fractions for IO-bound agents). ``servers``: ORS server URLs
    to spread the workers over (default: the environment's). ``shard``: pairs per unit of work (0: chosen
    from the run's size). ``restarts``: how often a dead worker is restarted. ``flush_s``: how often a
    worker sends its events. ``agent_factory``: called by each worker to make its agent, for an agent
    that cannot be pickled (the agent passed to ``evaluate`` then only names the run).
    """

    address: str | None = None
    workers: int = 1
    cpus: float = 1.0
    servers: Sequence[str] = ()
    shard: int = 0
    restarts: int = 3
    flush_s: float = 0.1
    agent_factory: Callable[[], Agent | Policy] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    """More ``ray.remote`` options for the worker actors (resources, a ``runtime_env``, ...)."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be 1 or more, not {self.workers}")
        if self.cpus < 0:
            raise ValueError(f"cpus must be 0 or more, not {self.cpus}")
        if self.restarts < 0:
            raise ValueError(f"restarts must be 0 or more, not {self.restarts}")


# -- a loopback-only local cluster ---------------------------------------------------------------


class LocalCluster:
    """A Ray cluster this process started on this machine, loopback only; ``close()`` stops it
    (``ray.shutdown()``, never ``ray stop``) and removes its temp folder."""

    def __init__(self, temp_dir: str) -> None:
        self.temp_dir = temp_dir

    def close(self) -> None:
        import ray

        ray.shutdown()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_local(cpus: int | None = None) -> LocalCluster:
    """Start a Ray cluster on this machine that listens on 127.0.0.1 only, probes nothing outside it and
    writes nothing to the home folder: the environment set before Ray is imported, a private short temp
    folder, ``HOME`` pointed at a folder holding ``ray_bootstrap_config.yaml`` while the daemons start
    (their cloud-metadata probe is skipped then) and given back to the workers, no dashboard.

    ``RuntimeError`` if Ray was imported before without these settings (it has read its environment).
    """
    if "ray" in sys.modules and any(os.environ.get(name) != value for name, value in LOOPBACK_ENV.items()):
        raise RuntimeError(
            "Ray was imported before ors_lab could make it loopback-only; start the local cluster "
            "(ors_lab.evaluation.ray.start_local, or RayBackend(address=None)) before importing ray"
        )
    _loopback_env()
    import ray

    temp_dir = tempfile.mkdtemp(prefix="ray_")  # short: AF_UNIX socket paths end at 107 bytes
    home = Path(temp_dir, "home")
    home.mkdir()
    (home / "ray_bootstrap_config.yaml").write_text("{}\n")
    real_home = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        ray.init(
            address="local",
            num_cpus=cpus if cpus is not None else os.cpu_count(),
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=OBJECT_STORE,
            _temp_dir=temp_dir,
            runtime_env={"env_vars": _worker_env(real_home)},
        )
    except BaseException:  # a start that timed out (a loaded machine) leaves no daemon nor folder behind
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    finally:
        if real_home is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = real_home
    return LocalCluster(temp_dir)


def _loopback_env() -> None:
    """``LOOPBACK_ENV`` and a random auth token in this process's environment (before Ray is imported)."""
    os.environ.update(LOOPBACK_ENV)
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))
    # workers at the driver's priority, as a local run's episodes are (Ray's default, 15, makes them
    # yield to every other process of the machine: on a busy machine a CPU-bound agent barely runs)
    os.environ.setdefault("RAY_worker_niceness", "0")


def _worker_env(real_home: str | None) -> dict[str, str]:
    """The workers' environment: the real home folder, and this process's own import paths (the
    agent's module, a test's policies, must import there as here; installed packages are there anyway)."""
    installed = (sys.prefix, sys.base_prefix)
    paths = [path or os.getcwd() for path in sys.path if not path.startswith(installed) or not path]
    env = {"PYTHONPATH": os.pathsep.join(paths)}
    if real_home is not None:
        env["HOME"] = real_home
    return env


def _connect(address: str | None) -> LocalCluster | None:
    """Ray ready in this process: as it is, a cluster joined, or a local one started (returned, to stop)."""
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            return None
    if address is None:
        return start_local()
    import ray

    ray.init(address=address, log_to_driver=False)
    return None


# -- the worker ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """What every worker of a run needs to know, sent once with each actor."""

    environment: str
    split: str
    max_steps: int | None
    timeout: float | None
    reward: Any
    success_threshold: float
    agent_name: str
    concurrency: int
    flush_s: float
    client: dict[str, Any]


class _Worker:
    """An actor running episodes: its own client, agent and limit of open sessions.

    ``run(pairs)`` is a streaming generator: it yields ``(clock offset, events)`` batches as the
    episodes go, the last one when they have all ended. ``stop()`` cancels every episode (each
    deletes its session) and returns once they have ended.
    """

    def __init__(self, name: str, url: str, job: Job, agent: Any, factory: Any) -> None:
        self.name, self.url, self.job = name, url, job
        self.agent = as_agent(factory() if factory is not None else agent)
        self.client: AsyncClient | None = None
        self.limit: asyncio.Semaphore | None = None
        self.episodes: set[asyncio.Task[None]] = set()

    async def run(self, pairs: list[tuple[int, int]]) -> AsyncIterator[tuple[int, list[Event]]]:
        from ors_lab.evaluation.run import _episode

        if self.client is None:  # made in the actor's loop
            self.client = AsyncClient(self.url, **self.job.client)
            self.limit = asyncio.Semaphore(self.job.concurrency)
        assert self.limit is not None
        buffer: list[Event] = []
        events = EventStream()
        events.subscribe(buffer.append)
        env = AsyncEnvironment(self.client, self.job.environment, events=events)
        job, limit, agent = self.job, self.limit, self.agent

        async def one(index: int, rollout: int) -> None:
            async with limit:
                await _episode(env, agent, job.split, index, rollout, job.max_steps, job.timeout, job.reward,
                               job.success_threshold, job.agent_name, worker=self.name)  # fmt: skip

        pending = {asyncio.create_task(one(index, rollout)) for index, rollout in pairs}
        self.episodes |= pending
        offset = wall_ns(0)
        try:
            while pending:
                _, pending = await asyncio.wait(pending, timeout=job.flush_s)
                if buffer:
                    batch = buffer[:]
                    buffer.clear()
                    yield offset, batch
        finally:
            self.episodes -= pending
        if buffer:
            yield offset, buffer[:]

    async def stop(self) -> None:
        episodes = list(self.episodes)
        for task in episodes:
            task.cancel()
        if episodes:
            await asyncio.wait(episodes)

    def pid(self) -> int:
        return os.getpid()


# -- the driver ----------------------------------------------------------------------------------


class RayRun:
    """One evaluation's work on Ray: the actors, the queue of pairs, the events brought back.

    ``publish`` takes each event the workers send (on the driver's clock); ``lost`` each session of
    an episode a dead worker had not finished (its failure already published).
    """

    def __init__(self, backend: RayBackend, env: AsyncEnvironment, agent: Agent | Policy, job: Job) -> None:
        self.backend, self.env, self.agent, self.job = backend, env, agent, job
        self.publish: Callable[[Event], None] = _unattached
        self.lost: Callable[[str], None] = _unattached
        self.cluster: LocalCluster | None = None
        self.actors: list[Any] = []
        self.todo: deque[tuple[int, int]] = deque()
        self.stopping = False
        self.pids: dict[int, set[int]] = {}  # id(actor) -> the processes it has run in (one more each restart)

    def attach(self, publish: Callable[[Event], None], lost: Callable[[str], None]) -> None:
        """Where the workers' events go, and whom a lost session is told to."""
        self.publish, self.lost = publish, lost

    def start(self) -> None:
        """Ray connected (or started), the agent checked and shipped, the actors created."""
        if self.backend.address is None and "ray" not in sys.modules:
            _loopback_env()  # before the first import of Ray, which checking the agent makes
        _check_shippable(self.agent, self.backend)
        self.cluster = _connect(self.backend.address)
        import ray

        agent = None if self.backend.agent_factory is not None else self.agent  # sent with each actor, inline
        servers = list(self.backend.servers) or [self.env.client.base_url]
        actor = ray.remote(_Worker).options(
            num_cpus=self.backend.cpus,
            max_restarts=self.backend.restarts,
            max_concurrency=1000,
            **self.backend.options,
        )
        self.actors = [
            actor.remote(f"w{n}", servers[n % len(servers)], self.job, agent, self.backend.agent_factory)
            for n in range(self.backend.workers)
        ]

    async def run(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Run ``pairs`` to their end on the workers; cancelled, stop every worker first."""
        self.todo = deque(pairs)
        for actor, pid in zip(self.actors, await asyncio.gather(*(a.pid.remote() for a in self.actors)), strict=True):
            self.pids[id(actor)] = {pid}  # each worker up and answering before the first shard
        feeders = [
            asyncio.create_task(self._feed(actor), name=f"ors-lab ray feeder {n}")
            for _ in range(2)  # two shards in flight per worker: no idle gap between them
            for n, actor in enumerate(self.actors)  # the first shards one per worker
        ]
        try:  # not gather: cancelling this task must not cancel the feeders before the workers stop
            await asyncio.wait(feeders)
        except BaseException:
            await self._stop(feeders)
            raise
        for feeder in feeders:
            if feeder.exception() is not None:
                raise feeder.exception()  # type: ignore[misc]
        if self.todo:
            raise WorkersLostError(
                f"every Ray worker died more than {self.backend.restarts} times; {len(self.todo)} episodes "
                "were not run (resume=True runs them)"
            )

    async def _stop(self, feeders: list[asyncio.Task[None]]) -> None:
        """Every worker told to stop (its episodes cancelled, their sessions deleted, its last events sent)."""
        self.stopping = True
        self.todo.clear()
        stops = [actor.stop.remote() for actor in self.actors]
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*stops, return_exceptions=True), CLEANUP_TIMEOUT)
        _, late = await asyncio.wait(feeders, timeout=CLEANUP_TIMEOUT)
        for feeder in late:
            feeder.cancel()
        for feeder in feeders:
            if feeder.done() and not feeder.cancelled():
                feeder.exception()  # retrieved: the interrupt is what is reported

    def _shard(self) -> list[tuple[int, int]]:
        size = self.backend.shard or max(1, min(4 * self.job.concurrency,
                                                 math.ceil(len(self.todo) / (2 * len(self.actors)))))  # fmt: skip
        return [self.todo.popleft() for _ in range(min(size, len(self.todo)))]

    async def _feed(self, actor: Any) -> None:
        """Hand shards to one worker until the queue is empty (or the worker is dead for good)."""
        from ray.exceptions import RayActorError

        while self.todo and not self.stopping:
            shard = self._shard()
            started: dict[tuple[int, int], tuple[str, int]] = {}
            ended: set[tuple[int, int]] = set()
            try:
                async for ref in actor.run.options(num_returns="streaming").remote(shard):
                    offset, batch = await ref
                    self._take(offset, batch, started, ended)
            except RayActorError as exc:
                self._lose(shard, started, ended, exc)
                if not await self._revived(actor):
                    return

    async def _revived(self, actor: Any) -> bool:
        """Whether a worker that died is back (Ray restarts it, ``restarts`` times at most): it answers
        within ``REVIVE_S``, and has not been restarted more often than allowed."""
        from ray.exceptions import RayActorError

        deadline = time.monotonic() + REVIVE_S
        while time.monotonic() < deadline and not self.stopping:
            try:
                pid = await actor.pid.remote()
            except RayActorError:
                await asyncio.sleep(0.2)
                continue
            pids = self.pids.setdefault(id(actor), set())
            pids.add(pid)
            return len(pids) <= self.backend.restarts + 1
        return False

    def _take(
        self,
        offset: int,
        batch: list[Event],
        started: dict[tuple[int, int], tuple[str, int]],
        ended: set[tuple[int, int]],
    ) -> None:
        shift = offset - wall_ns(0)  # the worker's monotonic clock onto this process's
        for event in batch:
            event.t_ns += shift
            if isinstance(event, StartEvent):
                started[(event.task_index, event.rollout)] = (event.session_id, event.t_ns)  # type: ignore[index,assignment]
            elif isinstance(event, EpisodeEvent):
                ended.add((event.task_index, event.rollout))  # type: ignore[arg-type]
            self.publish(event)

    def _lose(
        self,
        shard: list[tuple[int, int]],
        started: dict[tuple[int, int], tuple[str, int]],
        ended: set[tuple[int, int]],
        exc: BaseException,
    ) -> None:
        """A worker died running ``shard``: its unfinished episodes recorded as failed, every pair it
        did not finish back in the queue (in front: they were due first)."""
        reason = f"the Ray worker running it died: {type(exc).__name__}"
        for index, rollout in shard:
            if (index, rollout) in ended or (index, rollout) not in started:
                continue
            sid, t_ns = started[(index, rollout)]
            self.publish(FinishEvent(session_id=sid, rollout=rollout, finish_reason="error"))
            job, lasted = self.job, (time.monotonic_ns() - t_ns) / 1e9
            self.publish(EpisodeEvent(session_id=sid, rollout=rollout, environment=job.environment, split=job.split,
                                      task_index=index, reward=0.0, finished=False, success=False,
                                      finish_reason="error", error=reason, error_type="WorkerDiedError",
                                      agent=job.agent_name, total_reward=0.0, final_reward=None, steps=0,
                                      started=wall_time(t_ns), duration_s=lasted))  # fmt: skip
            self.lost(sid)
        if not self.stopping:
            self.todo.extendleft(reversed([pair for pair in shard if pair not in ended]))

    def close(self) -> None:
        """The actors killed; a local cluster this run started, stopped."""
        import ray

        for actor in self.actors:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        self.actors = []
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None


def _unattached(_: Any) -> None:
    raise RuntimeError("RayRun.attach() was not called before run()")


def _check_shippable(agent: Agent | Policy, backend: RayBackend) -> None:
    """``AgentNotShippableError`` unless the agent (or the factory making it) pickles as Ray pickles it:
    checked before any work, with the reason it does not."""
    from ray import cloudpickle  # by value, as Ray sends it: a notebook's function, a lambda

    subject, what = (backend.agent_factory, "agent_factory") if backend.agent_factory is not None else (agent, "agent")
    try:
        cloudpickle.dumps(subject)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise AgentNotShippableError(
            f"the {what} {type(subject).__name__} cannot be sent to Ray workers: it does not pickle "
            f"({type(exc).__name__}: {exc}); pass a picklable agent, or RayBackend(agent_factory=...) "
            "that makes one in each worker"
        ) from exc


def client_options(client: AsyncClient) -> dict[str, Any]:
    """What a worker's client takes over from the caller's (its URL aside)."""
    return {
        "retry": client.retry,
        "heartbeat_timeout": client.heartbeat_timeout,
        "max_result_bytes": client.max_result_bytes,
        "max_line_bytes": client.max_line_bytes,
        "call_timeout": client.call_timeout,
        "request_timeout": client.request_timeout,
        "ping_interval": client.ping_interval,
    }
