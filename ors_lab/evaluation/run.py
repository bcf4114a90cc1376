"""``aevaluate`` / ``evaluate``: run an agent over tasks × rollouts, with a hard limit on open sessions.

    result = ol.evaluate(env, agent, split="test", rollouts=4, concurrency=32, record="runs/x.parquet")
    result.episodes; result.steps; result.tasks; result.errors; result.summary()

How a run goes:

- The split: ``split=`` when given; else the environment's only split (``SplitRequiredError``, a
  ``ValueError`` naming them, when it has several), found before anything else is made.
- The run has an event stream of its own, forwarding to the environment's (so a recorder on the
  caller's client sees the run too): its requests, sessions and agent events are published there.
  The recorder (``record=``), the progress view, the rows the result is built from and the
  caller's ``subscribe=`` are its subscribers. The caller's client and environment are never
  changed: two evaluations on one client at once each record into their own trace.
- Everything the run does against the environment is on that stream, so its trace replays and a
  replay of it can be explored (``ors_lab.evaluation.specs``): once per run, the server's
  environments and the environment's splits and tools; each task's spec (``Episode.task``), asked
  by the first of its episodes, shared by its other rollouts; and whatever an agent does through
  the objects of the client it is handed (its session, the session's client, an environment got
  from it, a session of its own), each episode being captured into the run's stream
  (``EventStream.capture``).
- The pairs (task index, rollout) are worked through by ``concurrency`` workers, each holding at
  most one session, so never more than ``concurrency`` sessions are open. Their requests share the
  client's connections (``AsyncClient(connections=...)``, 512 by default; the run leaves that bound
  as it is, so the client's file descriptors stay below it): a worker has at most one request in
  flight, so with ``concurrency`` above the bound, tool calls beyond it at once wait for a free
  connection. Raise the client's ``connections`` when its tools run long.
- An episode: ``start`` event; its task's spec; open the session (split and index); read the
  prompt and the tools; ``agent.run(episode)``; close the session; ``finish`` event; the episode's
  token ``usage`` if its agent reported any; one ``episode`` event holding its outcome. The client
  retries infrastructure failures by its rules; what still fails (and agent exceptions, and the
  per-episode ``timeout``) ends that episode as failed, with its error, and the run goes on.
- ``record=PATH`` records everything (wire traffic, agent events, the agent's own HTTP traffic
  through ``recording_http_client``) into the trace at PATH. With ``resume=True`` and a trace
  already at PATH (finished, or the parts of a killed run), the pairs whose ``episode`` row is in
  it without an error are not run again: their rows come from the trace, and the run appends
  to it. Failed episodes are run again.
- Ctrl-C or cancelling stops the workers (each is cancelled once), deletes their open sessions
  (a delete is not cut short by more cancels, and takes ``DELETE_TIMEOUT`` = 10 s at most),
  closes the trace (valid, and resumable), keeps the partial result and re-raises: ``evaluate``
  raises ``EvaluationInterrupted`` (a ``KeyboardInterrupt``) whose ``.result`` is the partial
  ``EvalResult``, with a one-line message; a cancelled ``aevaluate`` raises ``CancelledError``.
  Either way ``last_result()`` gives the partial result.
- ``progress=True`` shows the run through the display hook (``ors_lab.display``), as
  ``ors_lab.notebook`` draws it (``ol.live_views()``): the dashboard (``RunState``) in a notebook,
  updated at most 10 times a second and left with its final state and a static summary when the
  run ends, however it ends; the progress line elsewhere; nothing when live views are ``"off"``.
  It is an inline subscriber doing a little bookkeeping per event; if it fails, it is detached (or
  never shown) and the run goes on.
- ``baseline=`` (a trace's path, a ``Trace`` or an ``EvalResult``) compares the run with it as its tasks
  end (``ors_lab.evaluation.baseline``): read and checked before anything else is made, published once
  as a ``baseline`` event before the first episode, so the dashboard shows the running paired delta,
  the live feed and the trace carry it; ``result.comparison`` is the final ``Comparison``.
- ``feed=PORT`` (or a ``Feed``) serves the run's events on 127.0.0.1 as Server-Sent Events while it
  runs (``ors_lab.feed``, ``docs/feed.md``), for ``ol.watch`` and ``ors-lab watch`` anywhere else: a
  port is taken before anything else (0: a free one; a port in use is an ``OSError``), its URL is
  said on stderr when the run shows its progress and is the result's ``feed_url``; the run's
  ``end`` event is sent however it ends, and a feed made from a port is closed with the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ors_lab import display
from ors_lab.agents.episode import Agent
from ors_lab.agents.policy import Policy, as_agent
from ors_lab.analysis.reduce import Reduction, check_reduction
from ors_lab.client import AsyncEnvironment, Environment, Runner
from ors_lab.client.runner import CLEANUP_TIMEOUT
from ors_lab.client.shielding import outlast_cancel
from ors_lab.display import Live
from ors_lab.evaluation.episode import Job, client_options, run_episode
from ors_lab.evaluation.result import EvalResult
from ors_lab.evaluation.rows import RecordedRows, ResultRows, of_sessions, slim
from ors_lab.evaluation.specs import TaskSpecs, describe, the_split
from ors_lab.events import AGENT_KINDS, CloseEvent, EpisodeEvent, Event, EventStream, Subscriber
from ors_lab.protocol.errors import TraceExistsError, TraceFormatError
from ors_lab.recording.parts import part_files, parts_dir
from ors_lab.recording.recorder import Recorder
from ors_lab.viewer.run import RunState

if TYPE_CHECKING:
    import pyarrow as pa

    from ors_lab.analysis.runs import Run
    from ors_lab.analysis.trace import Trace
    from ors_lab.evaluation.baseline import Baseline
    from ors_lab.evaluation.ray import RayBackend, RayRun
    from ors_lab.feed.server import Feed
    from ors_lab.replay.agent import AgentReplayTransport

# What a run needs only when it is asked for is imported then (each import below, in a function, says what): Ray, a
# feed's server, a baseline's and a resumed trace's reading, an LLM replay, pyarrow and pandas. A fresh process's
# first evaluate() reaches its first episode without them: pandas and pyarrow alone take most of a second to import.

__all__ = ["EvaluationInterrupted", "aevaluate", "discard_unstarted", "evaluate", "last_result", "trace_exists"]

Key = tuple[str, str, int, int]
log = logging.getLogger("ors_lab.evaluation")

_last: EvalResult | None = None


def last_result() -> EvalResult | None:
    """The result of the latest ``evaluate`` / ``aevaluate`` of this process to end, finished or
    interrupted (then partial: the episodes that ended before the interrupt); None before any."""
    return _last


class EvaluationInterrupted(KeyboardInterrupt):
    """``evaluate`` was interrupted (Ctrl-C, the notebook's stop button); ``result`` is the partial
    ``EvalResult`` (None if the cleanup did not end in time). ``except KeyboardInterrupt`` catches it.

    In IPython and Jupyter it shows as its one-line message, without a traceback.
    """

    def __init__(self, message: str, result: EvalResult | None) -> None:
        super().__init__(message)
        self.result = result

    def __reduce__(self) -> tuple[type[EvaluationInterrupted], tuple[str, EvalResult | None]]:
        return (type(self), (str(self), self.result))

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of a traceback through the library: the message alone."""
        return [f"{type(self).__name__}: {self}"]


async def aevaluate(
    env: AsyncEnvironment | Environment,
    agent: Agent | Policy,
    *,
    split: str | None = None,
    tasks: int | Sequence[int] | None = None,
    rollouts: int = 1,
    concurrency: int = 8,
    max_steps: int | None = 50,
    timeout: float | None = None,  # noqa: ASYNC109  # the per-episode limit, named as the issue and DESIGN name it
    record: str | os.PathLike[str] | Recorder | None = None,
    resume: bool = True,
    progress: bool = True,
    reward: Reduction = "sum",
    success_threshold: float = 1.0,
    subscribe: Subscriber | None = None,
    feed: int | Feed | None = None,
    backend: RayBackend | None = None,
    llm_replay: str | os.PathLike[str] | Trace | AgentReplayTransport | None = None,
    baseline: str | os.PathLike[str] | Trace | EvalResult | None = None,
) -> EvalResult:
    """Evaluate ``agent`` on ``env``'s ``split``; see the module docstring. Returns an ``EvalResult``.

    ``split``: the split to run; None for the environment's only split (``SplitRequiredError``, a
    ``ValueError`` naming its splits, if it has several). ``tasks``: None for every task of the
    split, N for the first N, or a list of indices. ``rollouts``: episodes per task.
    ``concurrency``: open sessions at most. ``max_steps``: tool calls per episode at most (None: no
    limit). ``timeout``: seconds per episode. ``record``: a trace path, or a ``Recorder`` the
    caller keeps open. ``resume``: continue an existing trace. ``progress``: show the run live (a
    dashboard in a notebook, a line elsewhere). ``reward`` and ``success_threshold``: how steps
    reduce to an episode's reward and success (``ors_lab.analysis.reduce``). ``subscribe``: called
    with every agent event of the run (``ors_lab.events``), inline. ``feed``: serve the run's
    events live on 127.0.0.1, on this port (0: a free one) or through this ``Feed``
    (``docs/feed.md``). ``backend``: None to run here, or a ``RayBackend`` to run on Ray workers
    (``ors_lab.evaluation.ray``; ``concurrency`` is then per worker). ``llm_replay``: a trace (its path,
    a ``Trace`` or an ``AgentReplayTransport``) every episode's ``llm_client()`` answers from, offline: the
    LLM traffic an agent's own SDK client made when the trace was recorded (``ors_lab.agents.llm_client``).
    ``baseline``: a run to compare this one with as its tasks end (a trace's path, a ``Trace`` or an
    ``EvalResult``; ``ors_lab.evaluation.baseline``): the dashboard, the live feed and the trace carry the
    running paired delta, and the result's ``comparison`` is the final ``Comparison``.

    Cancelled, it stops its episodes, deletes their sessions and closes the trace before raising
    ``CancelledError``; ``last_result()`` then holds the partial result.
    """
    __tracebackhide__ = True
    return await _evaluate(
        env,
        agent,
        _Options(split, tasks, rollouts, concurrency, max_steps, timeout, record, resume, progress, reward,
                 success_threshold, subscribe, feed, backend, llm_replay, baseline),
        _Ending(),
    )  # fmt: skip


@dataclass(frozen=True)
class _Options:
    split: str | None  # None: the environment's only split (``the_split``), resolved before the run
    tasks: int | Sequence[int] | None
    rollouts: int
    concurrency: int
    max_steps: int | None
    timeout: float | None
    record: str | os.PathLike[str] | Recorder | None
    resume: bool
    progress: bool
    reward: Reduction
    success_threshold: float
    subscribe: Subscriber | None
    feed: int | Feed | None = None
    backend: RayBackend | None = None
    llm_replay: str | os.PathLike[str] | Trace | AgentReplayTransport | None = None
    baseline: Any = None  # a trace's path, a Trace or an EvalResult (read by _evaluate)


async def _evaluate(
    env: AsyncEnvironment | Environment, agent: Agent | Policy, o: _Options, ending: _Ending
) -> EvalResult:
    """``aevaluate``'s work; ``ending`` follows how far it got (for ``evaluate``'s message if interrupted).
    On Ray, the workers are started (the agent checked and shipped) before anything else, and stopped last."""
    __tracebackhide__ = True
    ending.started = True
    aenv = _async_environment(env)
    if o.rollouts < 1:
        raise ValueError(f"rollouts must be 1 or more, not {o.rollouts}")
    if o.concurrency < 1:
        raise ValueError(f"concurrency must be 1 or more, not {o.concurrency}")
    if o.max_steps is not None and o.max_steps < 1:
        raise ValueError(f"max_steps must be 1 or more (or None), not {o.max_steps}")
    check_reduction(o.reward)
    if o.backend is not None:
        from ors_lab.evaluation.ray import RayBackend, RayRun  # deferred: a run on Ray (see above)

        if not isinstance(o.backend, RayBackend):
            raise TypeError(f"backend takes None or an ors_lab.RayBackend, not {o.backend!r}")
    split = await the_split(aenv, o.split)
    o = dataclasses.replace(o, split=split)
    versus = None
    if o.baseline is not None:
        from ors_lab.evaluation.baseline import read_baseline  # deferred: reading a run (see above)

        versus = read_baseline(o.baseline, aenv.name, split)  # a baseline it cannot compare with fails here, at once
    if o.backend is None:
        return await _run(aenv, agent, o, ending, None, versus)
    job = Job(aenv.name, split, o.max_steps, o.timeout, o.reward, o.success_threshold, _agent_name(agent),
              o.concurrency, o.backend.flush_s, client_options(aenv.client), _replay_path(o.llm_replay))  # fmt: skip
    ray_run = RayRun(o.backend, aenv, agent, job)
    try:
        ray_run.start()
        return await _run(aenv, agent, o, ending, ray_run, versus)
    finally:
        ray_run.close()


async def _run(
    aenv: AsyncEnvironment,
    agent: Agent | Policy,
    o: _Options,
    ending: _Ending,
    ray_run: RayRun | None,
    versus: Baseline | None = None,
) -> EvalResult:
    """The run itself, its episodes here or on ``ray_run``'s workers (``versus``: its baseline, told to its
    subscribers before its first episode)."""
    __tracebackhide__ = True
    assert o.split is not None  # resolved by _evaluate
    split = o.split
    runner = as_agent(agent)
    agent_name = _agent_name(agent)
    llm = _llm_transport(o.llm_replay) if ray_run is None else None
    events = EventStream(parent=aenv.events)
    run_env = AsyncEnvironment(aenv.client, aenv.name, events=events)
    feed = _open_feed(o.feed)  # its port first: a port in use fails the run before it makes anything
    try:
        recorder, own_recorder, done, resumed_rows, created = _open_recorder(o.record, o.resume, aenv.name, split)
    except BaseException:
        if feed is not None and feed is not o.feed:
            feed.close()
        raise
    if feed is not None and o.progress:
        print(f"eval {aenv.name}/{split}: live feed at {feed.url}", file=sys.stderr, flush=True)
    fed = False
    # the result's rows: taken from the tables the recorder writes, else made here
    rows: RecordedRows | ResultRows = RecordedRows(recorder) if recorder is not None else ResultRows()
    # the result's rows and the trace are required subscribers: an event they cannot take fails its episode
    subscriptions = [
        events.subscribe(rows, kinds=rows.KINDS, required=True),
        events.subscribe(ending, kinds=ending.KINDS),
    ]
    progress: tuple[RunState, Live] | None = None  # the run's view state and its live view
    workers: list[asyncio.Task[None]] = []
    resumed: list[str] = []
    started = time.monotonic()
    stopped_by: BaseException | None = None
    try:
        if recorder is not None:
            # from the first request: a replay needs them all
            subscriptions.append(events.subscribe(recorder, required=True))
        if o.subscribe is not None:
            subscriptions.append(events.subscribe(o.subscribe, kinds=AGENT_KINDS))
        await describe(run_env, events)
        keys = {pair: (aenv.name, split, *pair) for pair in await _episodes(run_env, split, o.tasks, o.rollouts)}
        ending.total = len(keys)
        resumed = [done[key] for key in keys.values() if key in done]
        todo = deque(pair for pair, key in keys.items() if key not in done)
        specs = TaskSpecs(run_env, split)
        specs.expect(index for index, _ in todo)
        records = _episode_records(resumed_rows, set(resumed)) if resumed else []
        if feed is not None:
            fed = _begin_feed(feed, events, aenv.name, split, list(keys), agent_name, records)
        if o.progress:
            progress = _show_progress(events, aenv.name, split, list(keys), agent_name, records, o.success_threshold)
        if versus is not None:  # the dashboard, the feed and the trace take it before any episode ends
            events.publish(versus.event)

        async def work() -> None:
            while todo:
                index, rollout = todo.popleft()
                await run_episode(run_env, runner, split, index, rollout, o.max_steps, o.timeout, o.reward,
                                  o.success_threshold, agent_name, specs=specs, llm_transport=llm)  # fmt: skip

        if ray_run is not None:  # its workers' events published on the run's stream, as a local run's are
            ray_run.attach(events.publish, rows.forget)
            workers = [asyncio.create_task(ray_run.run(list(todo)), name="ors-lab eval on ray")] if todo else []
        else:
            workers = [
                asyncio.create_task(work(), name=f"ors-lab eval worker {n}")
                for n in range(min(o.concurrency, len(todo)))
            ]
        if workers:  # not gather: cancelling this task must not cancel the workers behind _stop's back
            await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
            for worker in workers:
                if worker.done() and not worker.cancelled() and worker.exception() is not None:
                    raise worker.exception()  # type: ignore[misc]  # a bug: the episodes never raise
    except BaseException as exc:  # cancelled (Ctrl-C), or a bug
        stopped_by = exc
        with contextlib.suppress(asyncio.CancelledError):  # cancelled again meanwhile: it is re-raised below anyway
            await outlast_cancel(_stop(workers))  # each closes its session on the way out
    for subscription in subscriptions:
        subscription.close()
    if progress is not None:
        _end_progress(*progress, stopped_by)
    if fed:
        assert feed is not None
        _end_feed(feed, stopped_by)
    try:
        return await _finish(rows, resumed_rows, resumed, aenv.name, o, recorder, own_recorder, created, started,
                             agent_name, stopped_by, ending, feed, versus)  # fmt: skip
    finally:
        if feed is not None and feed is not o.feed:  # it waits a moment for a reader cut off just before the end
            await outlast_cancel(asyncio.to_thread(feed.close))


async def _finish(
    rows: RecordedRows | ResultRows,
    resumed_rows: pa.Table | None,
    resumed: list[str],
    environment: str,
    o: _Options,
    recorder: Recorder | None,
    own_recorder: bool,
    created: bool,
    started: float,
    agent_name: str,
    stopped_by: BaseException | None,
    ending: _Ending,
    feed: Feed | None,
    versus: Baseline | None = None,
) -> EvalResult:
    """The end of ``_evaluate``: the trace closed, the result made; the run's interrupt or failure raised again."""
    __tracebackhide__ = True
    global _last
    feed_url = feed.url if feed is not None else None
    if recorder is not None:  # every row of the run written, and handed to its reader; never left half-done
        try:
            await outlast_cancel(asyncio.to_thread(recorder.close if own_recorder else recorder.flush))
        except asyncio.CancelledError as exc:  # cancelled as the run ended: it ends as an interrupted run
            stopped_by = stopped_by or exc
        except Exception:
            if stopped_by is None:
                raise
            log.exception("ors_lab: closing the trace of an interrupted evaluation failed")
    if created and isinstance(stopped_by, Exception):  # failed, not interrupted: an empty trace is no use to keep
        assert recorder is not None
        await asyncio.to_thread(discard_unstarted, recorder.path)
    against = None if versus is None else versus.run
    if stopped_by is None:
        _last = _result(rows, resumed_rows, resumed, environment, o, recorder, started, agent_name, feed_url, against)
        return _last
    try:
        _last = ending.result = _result(rows, resumed_rows, resumed, environment, o, recorder, started, agent_name,
                                        feed_url, against)  # fmt: skip
    except Exception:  # the interrupt is what is reported; the trace still holds it all
        log.exception("ors_lab: the partial result of an interrupted evaluation could not be built")
    ending.cleaned = True
    raise stopped_by


def _show_progress(
    events: EventStream,
    environment: str,
    split: str,
    keys: list[tuple[int, int]],
    agent: str,
    records: list[dict[str, Any]],
    success_threshold: float | None = None,
) -> tuple[RunState, Live] | None:
    """The run's view state and its live view, subscribed and shown through the display hook
    (``ors_lab.display``); None when live views are off, or if it failed to show."""
    try:
        state = RunState(environment, split, keys, agent=agent, resumed=records, success_threshold=success_threshold)
    except Exception:  # the run matters more than its view
        log.exception("ors_lab: the evaluation's live view could not be shown; the run goes on without it")
        return None
    view = display.live(state, events)
    return None if view is None else (state, view)


def _status(stopped_by: BaseException | None) -> str:
    """How a run ended: ``finished``, ``interrupted`` (Ctrl-C, cancelled) or ``failed``."""
    if stopped_by is None:
        return "finished"
    return "interrupted" if isinstance(stopped_by, KeyboardInterrupt | asyncio.CancelledError) else "failed"


def _end_progress(state: RunState, view: Live, stopped_by: BaseException | None) -> None:
    """Leave the view with the run's final state, however the run ended."""
    try:
        state.end(_status(stopped_by))  # the workers are done
        view.close()
    except Exception:
        log.exception("ors_lab: the evaluation's live view could not be closed")


def _open_feed(feed: int | Feed | None) -> Feed | None:
    """The run's feed: the caller's, or one started on the port given (closed with the run)."""
    if feed is None:
        return None
    from ors_lab.feed.server import Feed  # deferred: a feed's server (see above)

    if isinstance(feed, Feed):
        return feed
    if isinstance(feed, bool) or not isinstance(feed, int):
        raise TypeError(f"feed takes a port number (0: a free one) or an ors_lab.Feed, not {feed!r}")
    return Feed(feed).start()


def _begin_feed(
    feed: Feed,
    events: EventStream,
    environment: str,
    split: str,
    keys: list[tuple[int, int]],
    agent: str,
    records: list[dict[str, Any]],
) -> bool:
    """Send the run on its feed from now on; False if the feed failed (the run goes on without it)."""
    try:
        feed.begin(events, environment=environment, split=split, keys=keys, agent=agent, resumed=records)
    except Exception:  # the run matters more than its feed
        log.exception("ors_lab: the evaluation's live feed could not begin; the run goes on without it")
        return False
    return True


def _end_feed(feed: Feed, stopped_by: BaseException | None) -> None:
    """The run's last events and its ``end`` on its feed, however it ended."""
    try:
        feed.end(_status(stopped_by))
    except Exception:
        log.exception("ors_lab: the evaluation's live feed could not send its end")


def _agent_name(agent: Agent | Policy) -> str:
    """How the dashboard names the agent: its class and model when it has one, else its name or repr."""
    model = getattr(agent, "model", None)
    if isinstance(model, str):
        return f"{type(agent).__name__}({model})"
    name = getattr(agent, "__qualname__", None)
    if isinstance(name, str):
        return name
    text = repr(agent)
    return text if len(text) <= 60 else type(agent).__name__


def _episode_records(table: pa.Table | None, sessions: set[str]) -> list[dict[str, Any]]:
    """The outcomes (``episode`` rows' records) of the resumed sessions, as the trace holds them."""
    if table is None or not sessions:
        return []
    import pyarrow as pa  # deferred: a resumed trace's rows (see above)
    import pyarrow.compute as pc

    mask = pc.and_(
        pc.and_(pc.equal(table["kind"], "episode"), pc.equal(table["layer"], "agent")),
        pc.is_in(table["session_id"], value_set=pa.array(sorted(sessions), pa.string())),
    )
    records: list[dict[str, Any]] = [json.loads(data) for data in table.filter(mask)["data"].to_pylist()]
    return records


async def _stop(workers: list[asyncio.Task[None]]) -> None:
    """Cancel each worker once and wait for all of them to end (their sessions deleted)."""
    for worker in workers:
        worker.cancel()
    if workers:
        await asyncio.wait(workers)
    for worker in workers:
        if not worker.cancelled():
            worker.exception()  # retrieved: the interrupt is what is reported


def _result(
    rows: RecordedRows | ResultRows,
    resumed_rows: pa.Table | None,
    resumed: list[str],
    environment: str,
    o: _Options,
    recorder: Recorder | None,
    started: float,
    agent: str,
    feed_url: str | None = None,
    baseline: Run | None = None,
) -> EvalResult:
    table = rows.table()
    if resumed_rows is not None:
        import pyarrow as pa  # deferred: a resumed trace's rows (see above)

        table = pa.concat_tables([slim(of_sessions(resumed_rows, set(resumed))), table])
    assert o.split is not None  # resolved by _evaluate
    return EvalResult(
        table,
        environment=environment,
        split=o.split,
        rollouts=o.rollouts,
        reward=o.reward,
        success_threshold=o.success_threshold,
        trace=None if recorder is None else str(recorder.path),
        elapsed_s=time.monotonic() - started,
        resumed=len(resumed),
        agent=agent,
        feed_url=feed_url,
        baseline=baseline,
    )


class _Ending:
    """How a run ended, for the message of an interrupt: episodes ended, deletes that failed."""

    KINDS = ("episode", "close")

    def __init__(self) -> None:
        self.started = self.cleaned = False
        self.total: int | None = None
        self.episodes = 0
        self.unclosed = 0
        self.result: EvalResult | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, EpisodeEvent):
            self.episodes += 1
        elif isinstance(event, CloseEvent) and not event.ok:
            self.unclosed += 1

    def message(self) -> str:
        total = "" if self.total is None else f" of {self.total}"
        if not self.started:
            return "evaluate interrupted before it started: no session was opened"
        if not self.cleaned:
            return (f"evaluate interrupted after {self.episodes}{total} episodes; its cleanup did not end "
                    f"within {CLEANUP_TIMEOUT:g} s and goes on in the background")  # fmt: skip
        closed = (
            "all sessions closed"
            if not self.unclosed
            else f"{self.unclosed} sessions could not be deleted (the server reaps them after 900 s)"
        )
        where = f", trace {self.result.trace}" if self.result is not None and self.result.trace else ""
        return (f"evaluate interrupted: {self.episodes}{total} episodes ended, {closed}{where}; "
                "the partial result is ors_lab.last_result()")  # fmt: skip


def evaluate(
    env: AsyncEnvironment | Environment,
    agent: Agent | Policy,
    *,
    split: str | None = None,
    tasks: int | Sequence[int] | None = None,
    rollouts: int = 1,
    concurrency: int = 8,
    max_steps: int | None = 50,
    timeout: float | None = None,
    record: str | os.PathLike[str] | Recorder | None = None,
    resume: bool = True,
    progress: bool = True,
    reward: Reduction = "sum",
    success_threshold: float = 1.0,
    subscribe: Subscriber | None = None,
    feed: int | Feed | None = None,
    backend: RayBackend | None = None,
    llm_replay: str | os.PathLike[str] | Trace | AgentReplayTransport | None = None,
    baseline: str | os.PathLike[str] | Trace | EvalResult | None = None,
) -> EvalResult:
    """The sync twin of ``aevaluate`` (the same arguments); works in scripts and inside Jupyter's loop.

    Ctrl-C (or the notebook's stop button) stops it as cancelling ``aevaluate`` does: the sessions
    are deleted and the trace closed before it raises ``EvaluationInterrupted``, a
    ``KeyboardInterrupt`` with a one-line message whose ``.result`` is the partial ``EvalResult``
    (also ``last_result()``).
    """
    __tracebackhide__ = True
    options = _Options(split, tasks, rollouts, concurrency, max_steps, timeout, record, resume, progress, reward,
                       success_threshold, subscribe, feed, backend, llm_replay, baseline)  # fmt: skip
    ending = _Ending()
    run = _evaluate(env.aio if isinstance(env, Environment) else env, agent, options, ending)
    runner = env.runner if isinstance(env, Environment) else Runner()
    try:
        return runner.run(run)
    except KeyboardInterrupt:
        raise EvaluationInterrupted(ending.message(), ending.result) from None
    finally:
        if not isinstance(env, Environment):
            runner.close()


def _llm_transport(
    llm_replay: str | os.PathLike[str] | Trace | AgentReplayTransport | None,
) -> AgentReplayTransport | None:
    """What the episodes' ``llm_client()`` sends through: None (the wire), or the replay of ``llm_replay``."""
    if llm_replay is None:
        return None
    from ors_lab.analysis.trace import Trace  # deferred: an LLM replay (see above)
    from ors_lab.replay.agent import AgentReplayTransport

    if isinstance(llm_replay, AgentReplayTransport):
        return llm_replay
    if isinstance(llm_replay, Trace | str | os.PathLike):
        return AgentReplayTransport(llm_replay)
    raise TypeError(f"llm_replay takes a trace (a path, a Trace or an AgentReplayTransport), not {llm_replay!r}")


def _replay_path(llm_replay: str | os.PathLike[str] | Trace | AgentReplayTransport | None) -> str | None:
    """The trace a Ray run's workers each open for ``llm_replay``: its path (a transport or a Trace is not shipped)."""
    if llm_replay is None:
        return None
    from ors_lab.analysis.trace import Trace  # deferred: an LLM replay (see above)

    if isinstance(llm_replay, str | os.PathLike):
        return os.fspath(llm_replay)
    if isinstance(llm_replay, Trace):
        return os.fspath(llm_replay.path)
    raise TypeError("on Ray, llm_replay takes a trace's path or a Trace (each worker opens the trace itself)")


def _async_environment(env: AsyncEnvironment | Environment) -> AsyncEnvironment:
    if isinstance(env, AsyncEnvironment):
        return env
    if isinstance(env, Environment):
        if env.runner.nested:
            return env.aio  # the kernel's loop: the same loop this coroutine runs on
        raise TypeError("aevaluate takes an AsyncEnvironment; for a sync Environment call evaluate()")
    raise TypeError(f"env must be an Environment or AsyncEnvironment (client.environment(name)), not {env!r}")


async def _episodes(
    env: AsyncEnvironment, split: str, tasks: int | Sequence[int] | None, rollouts: int
) -> list[tuple[int, int]]:
    """The run's (task index, rollout) pairs, in order: for ``tasks=None`` what ``env.episodes`` says
    (every task; against a replay, the episodes its trace holds), else each task named, ``rollouts`` times."""
    __tracebackhide__ = True
    if tasks is None:
        return await env.episodes(split, rollouts)
    return [(index, rollout) for index in await _task_indices(env, split, tasks) for rollout in range(rollouts)]


async def _task_indices(env: AsyncEnvironment, split: str, tasks: int | Sequence[int]) -> list[int]:
    __tracebackhide__ = True
    if isinstance(tasks, bool):
        raise TypeError("tasks must be None, a number of tasks, or a list of task indices")
    count = await env.num_tasks(split)
    if isinstance(tasks, int):
        if not 0 <= tasks <= count:
            raise ValueError(f"tasks={tasks}: split {split!r} of {env.name!r} has {count} tasks")
        return list(range(tasks))
    indices = [int(index) for index in tasks]
    bad = [index for index in indices if not 0 <= index < count]
    if bad:
        span = f" (0 to {count - 1})" if count else ""
        raise ValueError(
            f"task indices {bad} are outside split {split!r} of {env.name!r}, which has {count} tasks{span}"
        )
    if len(set(indices)) != len(indices):
        raise ValueError(f"task indices repeat: {indices}; use rollouts= to run a task more than once")
    return indices


def _open_recorder(
    record: str | os.PathLike[str] | Recorder | None, resume: bool, environment: str, split: str
) -> tuple[Recorder | None, bool, dict[Key, str], pa.Table | None, bool]:
    """The recorder to use, whether we opened it, the episodes its trace holds finished (key -> session
    id), the trace's rows (None when there is nothing to resume), and whether we created the trace."""
    __tracebackhide__ = True
    if record is None:
        return None, False, {}, None, False
    own = not isinstance(record, Recorder)  # the caller's may already hold episodes of this run
    if not own and resume:
        assert isinstance(record, Recorder)
        record.flush()  # its rows still in memory are episodes to skip too
    path = Path(record) if not isinstance(record, Recorder) else record.path
    exists = trace_exists(path)
    table = None
    done: dict[Key, str] = {}
    if exists and resume:
        from ors_lab.analysis.frames import finished_episodes  # deferred: a resumed trace's reading (see above)
        from ors_lab.analysis.trace import load_trace

        table = load_trace(path).table
        done = {key: sid for key, sid in finished_episodes(table).items() if key[:2] == (environment, split)}
    if isinstance(record, Recorder):
        return record, own, done, table, False
    try:
        recorder = Recorder(path, append=exists and resume)
    except TraceExistsError:  # in the caller's terms: evaluate's keywords, not the Recorder's
        raise TraceExistsError(
            f"{path} already holds a trace; pass resume=True to continue it, "
            "record=ol.Recorder(path, overwrite=True) to replace it, or choose another path",
            path=str(path),
        ) from None
    return recorder, own, done, table, not exists


def trace_exists(path: Path) -> bool:
    """Whether a trace is at ``path``: its file, or the parts of an unfinished recording (a parts folder with no
    part in it, as a recorder just made leaves it, holds no trace)."""
    return path.is_file() or bool(part_files(parts_dir(path)))


def discard_unstarted(path: str | os.PathLike[str]) -> bool:
    """Remove the closed trace at ``path`` (with its parts) if it holds no session: what a run that failed
    before its first episode (an unknown environment or split, a server down) leaves. Only for a trace the run
    created; a trace with any session, or one that cannot be read, stays. True when it was removed."""
    import pyarrow as pa  # deferred: reading the trace (see above)
    import pyarrow.compute as pc

    from ors_lab.analysis.trace import load_trace

    path = Path(path)
    try:
        kinds = load_trace(path).select(["kind"])["kind"]  # that column only
    except TraceFormatError:
        return False
    if pc.any(pc.is_in(kinds, value_set=pa.array(["start", "open"], pa.string()))).as_py():
        return False
    path.unlink(missing_ok=True)
    shutil.rmtree(parts_dir(path), ignore_errors=True)
    return True
