"""One episode of an evaluation, and what a Ray worker is told of its run: shared by the local run
(``ors_lab.evaluation.run``) and the Ray workers (``ors_lab.evaluation.ray``), which both run episodes
through ``run_episode``.

- ``run_episode``: one (task, rollout) episode from its ``start`` event to its ``episode`` event (its
  outcome), as the module docstring of ``ors_lab.evaluation.run`` tells.
- ``Job``: what every worker of a Ray run needs to know of it.
- ``client_options``: what a worker's client takes over from the caller's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

from ors_lab.agents.episode import CURRENT_EPISODE, Agent, Episode, StepLimitReached
from ors_lab.agents.errors import error_event, replay_mismatch, reported
from ors_lab.analysis.reduce import Reduction, reduce_reward
from ors_lab.client import AsyncClient, AsyncEnvironment
from ors_lab.evaluation.specs import TaskSpecs
from ors_lab.events import EpisodeEvent, FinishEvent, StartEvent, UsageEvent
from ors_lab.protocol.errors import ORSError

__all__ = ["Job", "client_options", "run_episode"]


@dataclass(frozen=True)
class Job:
    """What every worker of a run needs to know, sent once with each actor (``split``: the one the run resolved)."""

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
    llm_replay: str | None = None  # the trace the episodes' llm_client() answers from (each worker opens it)


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


async def run_episode(
    env: AsyncEnvironment,
    agent: Agent,
    split: str,
    index: int,
    rollout: int,
    max_steps: int | None,
    limit: float | None,
    reduction: Reduction,
    success_threshold: float,
    agent_name: str | None = None,
    worker: str | None = None,
    *,
    specs: TaskSpecs | None = None,
    llm_transport: Any = None,
) -> None:
    """Run one (task, rollout) episode to its end, publishing its events; never raises but for cancellation.
    ``agent_name`` goes into its outcome, so its trace names the agent; ``worker`` (a Ray run's) into its start.
    ``specs`` gives the episode its task's spec; ``llm_transport`` is what its ``llm_client()`` sends through
    (None: the wire; the run's ``llm_replay``: an ``AgentReplayTransport``). Everything done in the episode
    through the objects of ``env``'s client is published on ``env``'s stream (captured: ``EventStream.capture``)."""
    events = env.events
    session = env.session(split=split, index=index, view=False, rollout=rollout)  # the run's view shows it
    sid = session.sid
    events.publish(StartEvent(session_id=sid, rollout=rollout, message_id=sid, environment=env.name, split=split,
                              task_index=index, worker=worker))  # fmt: skip
    wall, started = time.time(), time.monotonic()
    episode: Episode | None = None
    error: BaseException | None = None
    token = None
    try:
        with events.capture():
            async with asyncio.timeout(limit):
                task = await specs.get(index) if specs is not None else None
                async with session:
                    prompt = await session.prompt()
                    tools = await session.tools()
                    episode = Episode(session, rollout=rollout, prompt=prompt, tools=tools, max_steps=max_steps,
                                      events=events, task=task, llm_transport=llm_transport)  # fmt: skip
                    token = CURRENT_EPISODE.set(episode)
                    try:
                        with contextlib.suppress(StepLimitReached):  # the limit ends the episode; not an error
                            await agent.run(episode)
                    finally:
                        await episode.aclose()  # the LLM clients it made
    except Exception as exc:  # the episode failed; the run goes on
        error = replay_mismatch(exc) or exc  # a replay's unmatched LLM request, whatever the SDK made of it
        if not reported(exc, episode.llm_reported if episode is not None else []):
            failure = error_event(error, source="tool" if isinstance(error, ORSError) else "platform")
            if isinstance(exc, TimeoutError):
                failure.message = f"the episode took longer than its timeout of {limit} s"
            failure.session_id, failure.rollout = sid, rollout
            events.publish(failure)
    finally:
        if token is not None:
            CURRENT_EPISODE.reset(token)
    steps = episode.steps if episode is not None else []
    finished = episode is not None and episode.finished
    if error is not None:
        finish_reason = "error"
    elif not finished and episode is not None and episode.done:
        finish_reason = "max-steps"
    else:
        finish_reason = (episode.finish_reason if episode is not None else None) or "stop"
    total, final, value = reduce_reward(steps, reduction)
    if error is not None:
        value = 0.0
    events.publish(FinishEvent(session_id=sid, rollout=rollout, finish_reason=finish_reason))
    usage = episode.usage if episode is not None else None
    if usage is not None and usage.reported:
        events.publish(UsageEvent(session_id=sid, rollout=rollout, scope="episode", input_tokens=usage.input_tokens,
                                  output_tokens=usage.output_tokens, reasoning_tokens=usage.reasoning_tokens,
                                  cached_tokens=usage.cached_tokens))  # fmt: skip
    events.publish(
        EpisodeEvent(
            session_id=sid,
            rollout=rollout,
            environment=env.name,
            split=split,
            task_index=index,
            reward=value,
            total_reward=total,
            final_reward=final,
            finished=finished,
            success=error is None and value >= success_threshold,
            finish_reason=finish_reason,
            steps=len(steps),
            started=wall,
            duration_s=time.monotonic() - started,
            error=None
            if error is None
            else f"timeout after {limit} s"
            if isinstance(error, TimeoutError)
            else str(error),
            error_type=None if error is None else type(error).__name__,
            input_tokens=None if usage is None else usage.input_tokens,
            output_tokens=None if usage is None else usage.output_tokens,
            reasoning_tokens=None if usage is None else usage.reasoning_tokens,
            cached_tokens=None if usage is None else usage.cached_tokens,
            agent=agent_name,
        )
    )
