"""Synthetic runs: the events a client and an evaluation publish for episodes whose rewards are given,
recorded into a real trace (an ``EventStream`` with a ``Recorder`` subscribed), to check the frames
against numbers known in advance."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import ors_lab as ol
from ors_lab.analysis.reduce import reduce_reward
from ors_lab.events import (
    CallErrorEvent,
    CloseEvent,
    EpisodeEvent,
    Event,
    EventStream,
    FinishEvent,
    OpenEvent,
    RequestEvent,
    ResultEvent,
    StartEvent,
)

URL = "http://127.0.0.1:9/"


@dataclass
class Episode:
    """One episode to publish: its task, rollout, step rewards (None: a step without one), and what ended it."""

    task_index: int
    rollout: int | None
    rewards: Sequence[float | None]
    finished: bool = True
    error: str | None = None
    crashes: int = 0  # calls that raised, before the steps
    environment: str = "lab"
    split: str = "test"
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)


def events(episode: Episode, *, evaluated: bool = True) -> list[Event]:
    """What the client (and, when ``evaluated``, the harness) publishes for ``episode``."""
    sid, env = episode.session_id, episode.environment
    out: list[Event] = []
    if evaluated:
        out.append(StartEvent(session_id=sid, rollout=episode.rollout, message_id=sid, environment=env,
                              split=episode.split, task_index=episode.task_index))  # fmt: skip
    create = {"env_name": env, "split": episode.split, "index": episode.task_index}
    out.append(RequestEvent(session_id=sid, method="POST", url=URL + "create", body=json.dumps(create).encode()))
    out.append(OpenEvent(session_id=sid, environment=env, split=episode.split, task_index=episode.task_index))
    call = 0
    for _ in range(episode.crashes):
        call += 1
        out.append(RequestEvent(session_id=sid, call=call, attempt=1, method="POST", url=f"{URL}{env}/call",
                                body=b'{"name":"crash","input":{}}'))  # fmt: skip
        out.append(CallErrorEvent(session_id=sid, call=call, error="ToolError: boom"))
    for number, reward in enumerate(episode.rewards, 1):
        call += 1
        body = json.dumps({"name": "step", "input": {"value": number}}).encode()
        out.append(RequestEvent(session_id=sid, call=call, attempt=1, method="POST", url=f"{URL}{env}/call", body=body))
        last = number == len(episode.rewards)
        out.append(ResultEvent(session_id=sid, call=call, task_id=f"t{call}", ok=True, reward=reward,
                               finished=episode.finished and last))  # fmt: skip
    out.append(CloseEvent(session_id=sid))
    if evaluated:
        total, final, value = reduce_reward([SimpleNamespace(reward=r) for r in episode.rewards])
        value = 0.0 if episode.error else value
        reason = "error" if episode.error else "stop"
        out.append(FinishEvent(session_id=sid, rollout=episode.rollout, finish_reason=reason))
        out.append(EpisodeEvent(session_id=sid, rollout=episode.rollout, environment=env, split=episode.split,
                                task_index=episode.task_index, reward=value, total_reward=total, final_reward=final,
                                finished=episode.finished, success=episode.error is None and value >= 1.0,
                                finish_reason=reason, steps=len(episode.rewards), started=time.time(),
                                duration_s=0.5, error=episode.error,
                                error_type=None if episode.error is None else "ToolError"))  # fmt: skip
    return out


def record(path: Path, episodes: Sequence[Episode], *, evaluated: bool = True) -> ol.Trace:
    """The episodes' events recorded into the trace at ``path``, loaded."""
    stream = EventStream()
    with ol.Recorder(path) as recorder:
        stream.subscribe(recorder)
        for episode in episodes:
            for event in events(episode, evaluated=evaluated):
                stream.publish(event)
    return ol.load_trace(path)
