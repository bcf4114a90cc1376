"""``RayBackend``: one evaluation over the workers of a Ray cluster, with one trace and the same result.

    result = ol.evaluate(env, agent, rollouts=4, record="runs/x.parquet",
                         backend=ol.RayBackend(workers=8))

How a Ray run goes (``evaluate`` / ``aevaluate`` with ``backend=``; every other argument means what it
means in a local run, ``concurrency`` being each worker's limit of open sessions):

- Ray is imported only here, and only when a Ray run starts: ``import ors_lab`` never imports it.
  ``address=None`` starts a private single-machine cluster on the backend's first run, loopback only
  (``start_local``, the recipe of the project's Ray notes), kept until ``backend.close()``; ``"auto"`` or
  ``"ray://host:port"`` joins an existing cluster. A Ray already started in the process is used as
  it is (tests share one cluster per session this way).
- ``workers`` async actors, started by the backend's first run and kept for its later ones (a notebook
  evaluating again does not wait seconds for them; ``backend.close()``, its ``with`` block's end, or the
  backend dropped ends them). Each run ships its own job to them: each holds, for the run, its own
  client, its own copy of the agent (the agent is pickled once, before any work: an agent that does not
  pickle is an ``AgentNotShippableError``; or ``agent_factory`` is called by each worker) and its own
  limit of ``concurrency`` open sessions. A worker dead for good is replaced at the next run's start.
  Worker ``n`` talks to ``servers[n % len(servers)]`` (default: the environment's own server), so
  sessions are spread over several ORS servers worker by worker.
- Work is sharded by (task, rollout): the driver hands out shards of pairs from one queue, two
  shards in flight per worker so a worker never idles between them; a fast worker takes more.
- One trace, one writer: each worker streams its events back to the driver in batches (every
  ``flush_s`` seconds, an actor streaming generator), their clocks moved onto the driver's, and the
  driver publishes them on the run's stream. So the recorder, the result's rows, the dashboard, the
  feed and ``subscribe=`` see a Ray run as they see a local one, and the trace is written by one
  recorder (readable during the run, resumable after a crash). Each ``start`` row, and every row of
  its session, names its worker in the ``worker`` column. A worker numbers its exchanges apart from
  the driver's and the other workers' (``exchanges_apart``), so the trace replays; it asks each
  task's spec once for the run (``TaskSpecs``), and what its agents ask through their episodes'
  client is captured into its stream, as in a local run.
- A worker that dies (its process killed, its machine lost) is restarted by Ray (``restarts`` times
  at most); the episodes it had started and not reported finished get a failed ``episode`` row
  (``WorkerDiedError``) in the trace, are left out of the result, and go back into the queue with the
  pairs it had not started; what it reported finished is never run again. Their sessions (those
  whose ``start`` reached the driver) are deleted by the driver on the worker's server, which would
  otherwise hold them until it reaps them (900 s): ``DELETE_TIMEOUT`` seconds at most, a delete that
  fails logged. Every worker dead for good: ``WorkersLostError``.
- Ctrl-C or cancelling tells every worker to stop: each cancels its episodes, which delete their
  sessions, and sends its last events; then the run ends as a local one does (a worker that did not
  stop in time gets every actor killed; the next run starts new ones).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ors_lab.agents.episode import Agent
from ors_lab.agents.policy import Policy, as_agent
from ors_lab.client import AsyncClient, AsyncEnvironment
from ors_lab.client.aclient import DELETE_TIMEOUT, delete_session
from ors_lab.client.runner import CLEANUP_TIMEOUT
from ors_lab.client.tap import describe_error, exchanges_apart
from ors_lab.client.url import server_url
from ors_lab.evaluation.episode import Job, run_episode
from ors_lab.evaluation.specs import TaskSpecs
from ors_lab.events import EpisodeEvent, Event, EventStream, FinishEvent, StartEvent, wall_ns, wall_time
from ors_lab.protocol.errors import AgentNotShippableError, WorkersLostError
from ors_lab.replay.agent import AgentReplayTransport

__all__ = ["LOOPBACK_ENV", "LocalCluster", "RayBackend", "RayRun", "WorkerPool", "start_local"]

log = logging.getLogger("ors_lab.evaluation")

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

    Its workers (and the private cluster, if it started one) are kept from its first run to ``close()``
    (or the end of a ``with RayBackend(...) as backend:`` block, or the backend being dropped).

    ``address``: None for a private loopback cluster on this machine, started by the first run;
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
    pool: WorkerPool = field(init=False, repr=False, compare=False)
    """The workers, started by the first run and kept for the next ones until ``close()``."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be 1 or more, not {self.workers}")
        if self.cpus < 0:
            raise ValueError(f"cpus must be 0 or more, not {self.cpus}")
        if self.restarts < 0:
            raise ValueError(f"restarts must be 0 or more, not {self.restarts}")
        pool = WorkerPool()
        object.__setattr__(self, "pool", pool)
        weakref.finalize(self, pool.close)  # a backend dropped (or the interpreter ending) stops its workers

    def close(self) -> None:
        """Its workers killed, and the local cluster its first run started (if it did) stopped.
        A later run starts them again."""
        self.pool.close()

    def __enter__(self) -> RayBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- a loopback-only local cluster ---------------------------------------------------------------


class LocalCluster:
    """A Ray cluster this process started on this machine, loopback only; ``close()`` stops it
    (``ray.shutdown()``, never ``ray stop``) and removes its temp folder."""

    def __init__(self, temp_dir: str) -> None:
        self.temp_dir = temp_dir

    def close(self) -> None:
        import ray  # optional and heavy: imported only when a Ray run starts

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
    import ray  # optional and heavy: imported only when a Ray run starts

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
        import ray  # optional and heavy: imported only when a Ray run starts

        if ray.is_initialized():
            return None
    if address is None:
        return start_local()
    import ray  # optional and heavy: imported only when a Ray run starts

    ray.init(address=address, log_to_driver=False)
    return None


# -- the worker ----------------------------------------------------------------------------------


@dataclass
class _Shipped:
    """One run as a worker holds it: its client (on the server the worker was given), agent, limit of open
    sessions, the specs of its tasks (each asked once by the worker, kept for the run: later shards may hold
    more of its rollouts), and the episodes it has going."""

    job: Job
    client: AsyncClient
    agent: Agent
    limit: asyncio.Semaphore
    specs: TaskSpecs
    llm: AgentReplayTransport | None = None
    episodes: set[asyncio.Task[None]] = field(default_factory=set)


class _Worker:
    """An actor running episodes, for each run its backend is given.

    ``begin(run, ...)`` takes a run's job, server and agent (each run ships its own, so one actor serves
    run after run); ``run(run, pairs)`` is a streaming generator: it yields ``(clock offset, events)``
    batches as the episodes go, the last one when they have all ended. ``stop(run)`` cancels the run's
    episodes (each deletes its session) and returns once they have ended; ``end(run)`` forgets it.
    """

    def __init__(self, name: str) -> None:  # in each process the actor runs in (again after a restart)
        self.name = name
        self.runs: dict[str, _Shipped] = {}
        exchanges_apart()  # its exchanges go into the driver's trace: numbered apart from the driver's and the others'

    async def begin(self, run: str, url: str, job: Job, agent: Any, factory: Any) -> None:
        if run in self.runs:  # told again after a restart, by each of its feeders: once is enough
            return
        client = AsyncClient(url, **job.client)
        # the specs asked on the client's stream: each on the stream of the episode asking, which captures it
        self.runs[run] = _Shipped(job, client, as_agent(factory() if factory else agent),
                                  asyncio.Semaphore(job.concurrency),
                                  TaskSpecs(client.environment(job.environment), job.split),
                                  AgentReplayTransport(job.llm_replay) if job.llm_replay else None)  # fmt: skip

    async def run(self, run: str, pairs: list[tuple[int, int]]) -> AsyncIterator[tuple[int, list[Event]]]:
        shipped = self.runs[run]
        buffer: list[Event] = []
        events = EventStream(parent=shipped.client.events)  # so that what an episode does on the client is captured
        events.subscribe(buffer.append, required=True)
        env = AsyncEnvironment(shipped.client, shipped.job.environment, events=events)
        job, limit, agent, specs, llm = shipped.job, shipped.limit, shipped.agent, shipped.specs, shipped.llm

        async def one(index: int, rollout: int) -> None:
            async with limit:
                await run_episode(env, agent, job.split, index, rollout, job.max_steps, job.timeout, job.reward,
                                  job.success_threshold, job.agent_name, worker=self.name, specs=specs,
                                  llm_transport=llm)  # fmt: skip

        pending = {asyncio.create_task(one(index, rollout)) for index, rollout in pairs}
        shipped.episodes |= pending
        offset = wall_ns(0)
        try:
            while pending:
                _, pending = await asyncio.wait(pending, timeout=job.flush_s)
                if buffer:
                    batch = buffer[:]
                    buffer.clear()
                    yield offset, batch
        finally:
            shipped.episodes -= pending
        if buffer:
            yield offset, buffer[:]

    async def stop(self, run: str) -> None:
        shipped = self.runs.get(run)
        episodes = list(shipped.episodes) if shipped is not None else []
        for task in episodes:
            task.cancel()
        if episodes:
            await asyncio.wait(episodes)

    async def end(self, run: str) -> None:
        await self.stop(run)
        shipped = self.runs.pop(run, None)
        if shipped is not None:
            await shipped.client.aclose()

    def running(self) -> int:
        """How many episodes it has going, over every run."""
        return sum(len(shipped.episodes) for shipped in self.runs.values())

    def pid(self) -> int:
        return os.getpid()


# -- the workers a backend keeps between runs ----------------------------------------------------


class WorkerPool:
    """A ``RayBackend``'s worker actors: made by its first run, reused by the next ones, each run shipping
    its own job and agent to them. An actor dead for good is replaced at the next run's start; a cluster
    that ended (``ray.shutdown()``) takes its actors with it, and the next run makes new ones.

    ``pids[n]``: the processes worker ``n`` has run in (one more each time Ray restarts it). Runs started
    at once from several threads share it: one of them makes the actors (or starts the cluster), the
    others wait for it and use them.
    """

    def __init__(self) -> None:
        self.actors: list[Any] = []
        self.pids: list[set[int]] = []
        self.cluster: LocalCluster | None = None
        self.owner: tuple[str, str] | None = None  # the (job, node) of the Ray connection the actors belong to
        self._lock = threading.RLock()  # one thread at a time connects, makes, replaces or kills actors

    def ready(self, backend: RayBackend) -> list[Any]:
        """Ray connected (or a local cluster started) and ``backend.workers`` actors made, if they were not."""
        with self._lock:
            started = _connect(backend.address)  # Ray up: nothing to do; else a cluster joined, or started here
            if started is not None:
                self.cluster = started
            if self.owner != _connection():
                self.actors, self.pids = [], []
            self.owner = _connection()
            while len(self.actors) < backend.workers:
                self.actors.append(self._make(backend, len(self.actors)))
                self.pids.append(set())
            return self.actors

    def replace(self, backend: RayBackend, n: int) -> Any:
        """Worker ``n`` dead for good: a new actor in its place."""
        with self._lock:
            self._kill(self.actors[n])
            self.actors[n], self.pids[n] = self._make(backend, n), set()
            return self.actors[n]

    def _make(self, backend: RayBackend, n: int) -> Any:
        import ray  # optional and heavy: imported only when a Ray run starts

        actor = ray.remote(_Worker).options(
            num_cpus=backend.cpus, max_restarts=backend.restarts, max_concurrency=1000, **backend.options
        )
        return actor.remote(f"w{n}")

    def _kill(self, actor: Any) -> None:
        import ray  # optional and heavy: imported only when a Ray run starts

        with contextlib.suppress(Exception):
            ray.kill(actor)

    def discard(self) -> None:
        """Every actor killed (the next run makes new ones); the cluster, if the pool started it, kept."""
        with self._lock:
            if self.actors and "ray" in sys.modules and _connection() == self.owner:
                for actor in self.actors:
                    self._kill(actor)
            self.actors, self.pids = [], []

    def close(self) -> None:
        """Every actor killed, and the local cluster the pool started (if it did) stopped."""
        with self._lock:
            self.discard()
            if self.cluster is not None:
                self.cluster.close()
                self.cluster = None


def _connection() -> tuple[str, str] | None:
    """Which Ray connection this process has (its job and node), None if none."""
    import ray  # optional and heavy: imported only when a Ray run starts

    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    return context.get_job_id(), context.get_node_id()


# -- the driver ----------------------------------------------------------------------------------


class RayRun:
    """One evaluation's work on Ray: the backend's workers, the queue of pairs, the events brought back.

    ``publish`` takes each event the workers send (on the driver's clock); ``lost`` each session of
    an episode a dead worker had not finished (its failure already published).
    """

    def __init__(self, backend: RayBackend, env: AsyncEnvironment, agent: Agent | Policy, job: Job) -> None:
        self.backend, self.env, self.agent, self.job = backend, env, agent, job
        self.publish: Callable[[Event], None] = _unattached
        self.lost: Callable[[str], None] = _unattached
        self.pool = backend.pool
        self.id = secrets.token_hex(8)  # the run's name on the workers
        self.shipped: Any = None  # the agent in Ray's object store, sent to each worker by reference
        self.todo: deque[tuple[int, int]] = deque()
        self.stopping = False
        self.stuck = False  # a worker did not stop in time: the actors are killed at the end

    def attach(self, publish: Callable[[Event], None], lost: Callable[[str], None]) -> None:
        """Where the workers' events go, and whom a lost session is told to."""
        self.publish, self.lost = publish, lost

    def start(self) -> None:
        """Ray connected (or started), the agent checked and shipped, the backend's actors ready."""
        if self.backend.address is None and "ray" not in sys.modules:
            _loopback_env()  # before the first import of Ray, which checking the agent makes
        _check_shippable(self.agent, self.backend)
        self.pool.ready(self.backend)
        import ray  # optional and heavy: imported only when a Ray run starts

        self.shipped = ray.put(None if self.backend.agent_factory is not None else self.agent)

    async def _begin(self, n: int, replace: bool = True) -> None:
        """Worker ``n`` told about this run (its server, job and agent). At the run's start (``replace``),
        one dead for good (killed between runs, or restarted too often) is replaced by a new one first."""
        from ray.exceptions import RayActorError  # Ray: only when a Ray run starts

        for attempt in range(2 if replace else 1):
            actor = self.pool.actors[n]
            try:
                self.pool.pids[n].add(await actor.pid.remote())  # up and answering before the first shard
                await actor.begin.remote(self.id, self._server(n), self.job, self.shipped,
                                         self.backend.agent_factory)  # fmt: skip
                return
            except RayActorError:
                if attempt or not replace:
                    raise
                self.pool.replace(self.backend, n)

    def _server(self, n: int) -> str:
        """The ORS server worker ``n`` talks to."""
        servers = list(self.backend.servers) or [self.env.client.base_url]
        return servers[n % len(servers)]

    async def run(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Run ``pairs`` to their end on the workers; cancelled, stop every worker first."""
        self.todo = deque(pairs)
        await asyncio.gather(*(self._begin(n) for n in range(self.backend.workers)))
        feeders = [
            asyncio.create_task(self._feed(n), name=f"ors-lab ray feeder {n}")
            for _ in range(2)  # two shards in flight per worker: no idle gap between them
            for n in range(self.backend.workers)  # the first shards one per worker
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
        stops = [actor.stop.remote(self.id) for actor in self.pool.actors]
        try:
            await asyncio.wait_for(asyncio.gather(*stops, return_exceptions=True), CLEANUP_TIMEOUT)
        except Exception:
            self.stuck = True
        _, late = await asyncio.wait(feeders, timeout=CLEANUP_TIMEOUT)
        self.stuck |= bool(late)
        for feeder in late:
            feeder.cancel()
        for feeder in feeders:
            if feeder.done() and not feeder.cancelled():
                feeder.exception()  # retrieved: the interrupt is what is reported

    def _shard(self) -> list[tuple[int, int]]:
        size = self.backend.shard or max(1, min(4 * self.job.concurrency,
                                                 math.ceil(len(self.todo) / (2 * len(self.pool.actors)))))  # fmt: skip
        return [self.todo.popleft() for _ in range(min(size, len(self.todo)))]

    async def _feed(self, n: int) -> None:
        """Hand shards to worker ``n`` until the queue is empty (or the worker is dead for good)."""
        from ray.exceptions import RayActorError  # Ray: only when a Ray run starts

        while self.todo and not self.stopping:
            shard = self._shard()
            started: dict[tuple[int, int], tuple[str, int]] = {}
            ended: set[tuple[int, int]] = set()
            try:
                async for ref in self.pool.actors[n].run.options(num_returns="streaming").remote(self.id, shard):
                    offset, batch = await ref
                    self._take(offset, batch, started, ended)
            except RayActorError as exc:
                await self._lose(n, shard, started, ended, exc)
                if not await self._revived(n):
                    return

    async def _revived(self, n: int) -> bool:
        """Whether worker ``n``, dead, is back (Ray restarts it, ``restarts`` times at most) and told about
        this run again: it answers within ``REVIVE_S``, and has not been restarted more often than allowed."""
        from ray.exceptions import RayActorError  # Ray: only when a Ray run starts

        deadline = time.monotonic() + REVIVE_S
        while time.monotonic() < deadline and not self.stopping:
            try:
                pid = await self.pool.actors[n].pid.remote()
            except RayActorError:
                await asyncio.sleep(0.2)
                continue
            self.pool.pids[n].add(pid)
            if len(self.pool.pids[n]) > self.backend.restarts + 1:
                return False
            try:
                await self._begin(n, replace=False)
            except RayActorError:
                continue
            return True
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

    async def _lose(
        self,
        n: int,
        shard: list[tuple[int, int]],
        started: dict[tuple[int, int], tuple[str, int]],
        ended: set[tuple[int, int]],
        exc: BaseException,
    ) -> None:
        """Worker ``n`` died running ``shard``: every pair it did not finish back in the queue (in front: they
        were due first), the sessions of its unfinished episodes deleted, those episodes recorded as failed."""
        reason = f"the Ray worker running it died: {type(exc).__name__}"
        lost = [(pair, *started[pair]) for pair in shard if pair in started and pair not in ended]
        if not self.stopping:
            self.todo.extendleft(reversed([pair for pair in shard if pair not in ended]))
        await self._delete(n, [sid for _, sid, _ in lost])  # before their outcome, as a local episode's close
        for (index, rollout), sid, t_ns in lost:
            self.publish(FinishEvent(session_id=sid, rollout=rollout, finish_reason="error"))
            job, lasted = self.job, (time.monotonic_ns() - t_ns) / 1e9
            self.publish(EpisodeEvent(session_id=sid, rollout=rollout, environment=job.environment, split=job.split,
                                      task_index=index, reward=0.0, finished=False, success=False,
                                      finish_reason="error", error=reason, error_type="WorkerDiedError",
                                      agent=job.agent_name, total_reward=0.0, final_reward=None, steps=0,
                                      started=wall_time(t_ns), duration_s=lasted))  # fmt: skip
            self.lost(sid)

    async def _delete(self, n: int, sids: list[str]) -> None:
        """The sessions dead worker ``n`` had open, deleted on its server (all at once, ``DELETE_TIMEOUT`` seconds
        at most), each exchange and ``close`` event on the run's stream; a delete that failed is logged."""
        if not sids:
            return
        url = self._server(n)
        events = EventStream()
        events.subscribe(self.publish)
        async with contextlib.AsyncExitStack() as stack:
            client = self.env.client
            if server_url(url) != client.base_url:  # another server: a client of its own, as the worker had
                client = await stack.enter_async_context(AsyncClient(url, **self.job.client))
            env = AsyncEnvironment(client, self.job.environment, events=events)
            done = await asyncio.gather(*(delete_session(env, sid, bound=DELETE_TIMEOUT) for sid in sids),
                                        return_exceptions=True)  # fmt: skip
        for sid, outcome in zip(sids, done, strict=True):
            if isinstance(outcome, BaseException):
                log.warning("ors_lab: session %s of a Ray worker that died could not be deleted (the server reaps it "
                            "after 900 s): %s", sid, describe_error(outcome))  # fmt: skip

    def close(self) -> None:
        """The run forgotten by the workers, which stay for the backend's next run; all of them killed if one
        did not stop in time."""
        if self.stuck:
            self.pool.discard()
        for actor in self.pool.actors:
            with contextlib.suppress(Exception):
                actor.end.remote(self.id)


def _unattached(_: Any) -> None:
    raise RuntimeError("RayRun.attach() was not called before run()")


def _check_shippable(agent: Agent | Policy, backend: RayBackend) -> None:
    """``AgentNotShippableError`` unless the agent (or the factory making it) pickles as Ray pickles it:
    checked before any work, with the reason it does not."""
    from ray import cloudpickle  # by value, as Ray sends it (a notebook's function, a lambda); Ray: optional

    subject, what = (backend.agent_factory, "agent_factory") if backend.agent_factory is not None else (agent, "agent")
    try:
        cloudpickle.dumps(subject)  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise AgentNotShippableError(
            f"the {what} {type(subject).__name__} cannot be sent to Ray workers: it does not pickle "
            f"({type(exc).__name__}: {exc}); pass a picklable agent, or RayBackend(agent_factory=...) "
            "that makes one in each worker"
        ) from exc
