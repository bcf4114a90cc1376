"""``aevaluate`` / ``evaluate``: run an agent over tasks × rollouts, with a hard limit on open sessions.

    result = ol.evaluate(env, agent, split="test", rollouts=4, concurrency=32, record="runs/x.parquet")
    result.episodes; result.steps; result.tasks; result.errors; result.summary()

How a run goes:

- The pairs (task index, rollout) are worked through by ``concurrency`` workers, each holding at
  most one session, so never more than ``concurrency`` sessions are open.
- An episode: ``start`` event; open the session (split and index); read the prompt and the tools;
  ``agent.run(episode)``; close the session; ``finish`` event; one ``episode`` row holding the
  episode's outcome (``EpisodeRecord`` as JSON). The client retries infrastructure failures by its
  rules; what still fails (and agent exceptions, and the per-episode ``timeout``) ends that
  episode as failed, with its error, and the run goes on.
- ``record=PATH`` records everything (wire traffic, agent events, the agent's own HTTP traffic
  through ``recording_http_client``) into the trace at PATH. With ``resume=True`` and a trace
  already at PATH (finished, or the parts of a killed run), the pairs whose ``episode`` row is in
  it without an error are not run again: their records come from the trace, and the run appends
  to it. Failed episodes are run again.
- Ctrl-C or cancelling stops the workers, deletes their open sessions, closes the trace (valid,
  and resumable) and re-raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ors_lab.agents.episode import (
    CURRENT_EPISODE,
    REPORTED,
    Agent,
    Episode,
    StepLimitReached,
    error_payload,
)
from ors_lab.agents.events import AgentEvent, EventStream, Subscriber, compact_json
from ors_lab.agents.policy import Policy, as_agent
from ors_lab.client import AsyncEnvironment, Environment
from ors_lab.client.runner import Runner
from ors_lab.evaluation.progress import TextProgress
from ors_lab.evaluation.result import EpisodeRecord, EvalResult, Reduction, StepRecord, episode_records, reduce_reward
from ors_lab.protocol.errors import ORSError

if TYPE_CHECKING:
    from ors_lab.recording.recorder import Recorder

__all__ = ["aevaluate", "evaluate", "finished_records"]


async def aevaluate(
    env: AsyncEnvironment | Environment,
    agent: Agent | Policy,
    *,
    split: str = "test",
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
) -> EvalResult:
    """Evaluate ``agent`` on ``env``'s ``split``; see the module docstring. Returns an ``EvalResult``.

    ``tasks``: None for every task of the split, N for the first N, or a list of indices.
    ``rollouts``: episodes per task. ``concurrency``: open sessions at most. ``max_steps``: tool
    calls per episode at most (None: no limit). ``timeout``: seconds per episode. ``reward`` and
    ``success_threshold``: how steps reduce to an episode's reward and success (see
    ``ors_lab.evaluation.result``). ``subscribe``: called with every agent event.
    """
    aenv = _async_environment(env)
    if rollouts < 1:
        raise ValueError(f"rollouts must be 1 or more, not {rollouts}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be 1 or more, not {concurrency}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps must be 1 or more (or None), not {max_steps}")
    runner = as_agent(agent)
    client = aenv.client
    recorder, own_recorder, done = _open_recorder(record, resume, aenv.name, split)
    previous_recorder = client.recorder
    if recorder is not None:
        client.recorder = recorder  # from the first request: a replay of the trace needs them all
    events = EventStream(recorder)
    if subscribe is not None:
        events.subscribe(subscribe)
    meter: TextProgress | None = None
    workers: list[asyncio.Task[None]] = []
    started = time.monotonic()
    try:
        indices = await _task_indices(aenv, split, tasks)
        keys = {
            (index, rollout): (aenv.name, split, index, rollout) for index in indices for rollout in range(rollouts)
        }
        records = [done[key] for key in keys.values() if key in done]
        todo = deque(pair for pair, key in keys.items() if key not in done)
        resumed = len(records)
        if progress:
            meter = TextProgress(len(keys), label=f"eval {aenv.name}/{split}", done=resumed)

        async def work() -> None:
            while todo:
                index, rollout = todo.popleft()
                record_ = await _episode(aenv, runner, events, split, index, rollout, max_steps, timeout, reward,
                                         success_threshold)  # fmt: skip
                records.append(record_)
                if meter is not None:
                    meter.update(record_.reward, error=record_.error is not None)

        workers = [
            asyncio.create_task(work(), name=f"ors-lab eval worker {n}") for n in range(min(concurrency, len(todo)))
        ]
        await asyncio.gather(*workers)
    except BaseException:
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)  # each closes its session on the way out
        raise
    finally:
        client.recorder = previous_recorder
        if meter is not None:
            meter.close()
        if own_recorder and recorder is not None:
            await asyncio.to_thread(recorder.close)
    return EvalResult(
        records,
        environment=aenv.name,
        split=split,
        rollouts=rollouts,
        success_threshold=success_threshold,
        trace=None if recorder is None else str(recorder.path),
        elapsed_s=time.monotonic() - started,
        resumed=resumed,
    )


def evaluate(env: AsyncEnvironment | Environment, agent: Agent | Policy, **options: Any) -> EvalResult:
    """The sync twin of ``aevaluate`` (same arguments); works in scripts and inside Jupyter's loop.

    Ctrl-C stops it as cancelling ``aevaluate`` does: the runner waits for the sessions and the
    trace to be closed before re-raising.
    """
    if isinstance(env, Environment):
        return env._runner.run(aevaluate(env.aio, agent, **options))
    runner = Runner()
    try:
        return runner.run(aevaluate(env, agent, **options))
    finally:
        runner.close()


def _async_environment(env: AsyncEnvironment | Environment) -> AsyncEnvironment:
    if isinstance(env, AsyncEnvironment):
        return env
    if isinstance(env, Environment):
        if env._runner.nested:
            return env.aio  # the kernel's loop: the same loop this coroutine runs on
        raise TypeError("aevaluate takes an AsyncEnvironment; for a sync Environment call evaluate()")
    raise TypeError(f"env must be an Environment or AsyncEnvironment (client.environment(name)), not {env!r}")


async def _task_indices(env: AsyncEnvironment, split: str, tasks: int | Sequence[int] | None) -> list[int]:
    count = await env.num_tasks(split)
    if tasks is None:
        return list(range(count))
    if isinstance(tasks, bool):
        raise TypeError("tasks must be None, a number of tasks, or a list of task indices")
    if isinstance(tasks, int):
        if not 0 <= tasks <= count:
            raise ValueError(f"tasks={tasks}: split {split!r} of {env.name!r} has {count} tasks")
        return list(range(tasks))
    indices = [int(index) for index in tasks]
    bad = [index for index in indices if not 0 <= index < count]
    if bad:
        raise ValueError(f"task indices {bad} are outside split {split!r} of {env.name!r} (0..{count - 1})")
    if len(set(indices)) != len(indices):
        raise ValueError(f"task indices repeat: {indices}; use rollouts= to run a task more than once")
    return indices


def _open_recorder(
    record: Any, resume: bool, environment: str, split: str
) -> tuple[Recorder | None, bool, dict[tuple[str, str, int, int], EpisodeRecord]]:
    """The recorder to use, whether we opened it, and the episodes already done in its trace."""
    if record is None:
        return None, False, {}
    from ors_lab.recording.recorder import Recorder, parts_dir

    own = not isinstance(record, Recorder)  # the caller's may already hold episodes of this run
    if not own and resume:
        record.flush()  # its rows still in memory are episodes to skip too
    path = Path(record) if own else record.path
    exists = path.is_file() or parts_dir(path).is_dir()
    done = finished_records(path, environment, split) if exists and resume else {}
    return (Recorder(path, append=exists and resume) if own else record), own, done


def finished_records(
    path: str | os.PathLike[str], environment: str, split: str
) -> dict[tuple[str, str, int, int], EpisodeRecord]:
    """The episodes of ``environment``/``split`` a trace holds without an error, by (env, split, task, rollout)."""
    from ors_lab.recording.trace import load_trace

    return {
        record.key: record
        for record in episode_records(load_trace(path).table)
        if record.environment == environment and record.split == split and record.error is None
    }


async def _episode(
    env: AsyncEnvironment,
    agent: Agent,
    events: EventStream,
    split: str,
    index: int,
    rollout: int,
    max_steps: int | None,
    limit: float | None,
    reduction: Reduction,
    success_threshold: float,
) -> EpisodeRecord:
    """Run one (task, rollout) episode to its end; never raises but for cancellation."""
    session = env.session(split=split, index=index)
    where = {"environment": env.name, "split": split, "task_index": index}
    events.publish(AgentEvent("start", {"messageId": session.sid}, session_id=session.sid, rollout=rollout), **where)
    wall, started = time.time(), time.monotonic()
    episode: Episode | None = None
    error: BaseException | None = None
    token = None
    try:
        async with asyncio.timeout(limit), session:
            prompt = await session.prompt()
            tools = await session.tools()
            episode = Episode(session, rollout=rollout, prompt=prompt, tools=tools, max_steps=max_steps, events=events)
            token = CURRENT_EPISODE.set(episode)
            with contextlib.suppress(StepLimitReached):  # the limit ends the episode; not an error
                await agent.run(episode)
    except Exception as exc:  # the episode failed; the run goes on
        error = exc
        source = "environment" if isinstance(exc, ORSError) else "harness" if isinstance(exc, TimeoutError) else "agent"
        payload = error_payload(exc, source=source)
        if isinstance(exc, TimeoutError):
            payload["message"] = f"the episode took longer than its timeout of {limit} s"
        if REPORTED not in getattr(exc, "__notes__", ()):
            events.publish(AgentEvent("error", payload, session_id=session.sid, rollout=rollout), **where)
    finally:
        if token is not None:
            CURRENT_EPISODE.reset(token)
    steps = tuple(
        StepRecord(
            step=s.number,
            call=s.call,
            tool=s.tool,
            input=compact_json(s.input),
            ok=s.result.ok,
            reward=s.result.reward,
            finished=s.result.finished,
            error=s.result.error,
            duration_ms=s.duration_s * 1000,
        )
        for s in (episode.steps if episode is not None else ())
    )
    finished = episode is not None and episode.finished
    if error is not None:
        finish_reason = "error"
    elif not finished and episode is not None and episode.done:
        finish_reason = "length"
    else:
        finish_reason = (episode.finish_reason if episode is not None else None) or "stop"
    total, final, value = reduce_reward(steps, reduction)
    if error is not None:
        value = 0.0
    record = EpisodeRecord(
        environment=env.name,
        split=split,
        task_index=index,
        rollout=rollout,
        session_id=session.sid,
        reward=value,
        total_reward=total,
        final_reward=final,
        finished=finished,
        success=error is None and value >= success_threshold,
        finish_reason=finish_reason,
        duration_s=time.monotonic() - started,
        started=wall,
        error=None if error is None else f"timeout after {limit} s" if isinstance(error, TimeoutError) else str(error),
        error_type=None if error is None else type(error).__name__,
        steps=steps,
    )
    finish = AgentEvent("finish", {"finishReason": finish_reason}, session_id=session.sid, rollout=rollout)
    events.publish(finish, **where)
    events.publish(
        AgentEvent("episode", {"reward": value, "finished": finished}, session_id=session.sid, rollout=rollout),
        **where,
        ok=error is None,
        error=record.error,
        data=record.to_json(),
    )
    return record
