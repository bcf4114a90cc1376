"""Traces for tests, written as the client writes them: typed events handed to the recorder.

A test builds the events of ``ors_lab.events`` (``OpenEvent``, ``RequestEvent``, ``SSEEvent``,
``CommentEvent``, ...) and ``record`` hands them to the recorder the way an ``EventStream`` does
to its subscriber (``Recorder.record``), so the rows are made by the recorder's own path, context
joined as for a live run. The helpers below make the shapes tests repeat. Tests about
``Recorder.emit`` itself (rows written by hand) call ``emit``.
"""

from __future__ import annotations

from typing import Any

from ors_lab.events import (
    ChunkEvent,
    CloseEvent,
    CommentEvent,
    EpisodeEvent,
    Event,
    OpenEvent,
    RequestEvent,
    ResponseEvent,
    SSEEvent,
)
from ors_lab.recording import Recorder

__all__ = ["close", "comment", "episode", "exchange", "open_", "record", "sse"]


def record(rec: Recorder, *events: Event) -> None:
    """Hand ``events`` to ``rec`` in order, as a stream hands them to its subscriber."""
    for event in events:
        rec.record(event)


def comment(rec: Recorder, text: str, **context: Any) -> None:
    """Record one comment row (a stream's ``: text``), with the wire context given (``session_id``, ``call``...)."""
    rec.record(CommentEvent(comment=text, **context))


def open_(rec: Recorder, session_id: str, environment: str, split: str, task_index: int, **fields: Any) -> None:
    """Record a session's ``open`` row."""
    rec.record(OpenEvent(session_id=session_id, environment=environment, split=split, task_index=task_index,
                         **fields))  # fmt: skip


def exchange(
    rec: Recorder,
    method: str,
    url: str,
    status: int,
    *,
    request_headers: Any = None,
    body: bytes | None = None,
    headers: Any = None,
    response_body: bytes | None = None,
    ttfb_ns: int | None = None,
    **context: Any,
) -> None:
    """Record one HTTP exchange: its request row, then its response's (same wire context)."""
    rec.record(RequestEvent(method=method, url=url, headers=request_headers, body=body, **context))
    rec.record(ResponseEvent(status=status, headers=headers, ttfb_ns=ttfb_ns, body=response_body, **context))


def sse(rec: Recorder, event: str, data: str, *, size: int | None = None, **context: Any) -> None:
    """Record one SSE event row, after its network chunk's row when ``size`` is given."""
    if size is not None:
        rec.record(ChunkEvent(size=size, **context))
    rec.record(SSEEvent(event=event, data=data, **context))


def episode(rec: Recorder, **fields: Any) -> None:
    """Record an episode's outcome row; the fields an evaluation always fills default to a plain success."""
    defaults: dict[str, Any] = {"environment": "lab", "split": "test", "task_index": 0, "reward": 1.0,
                                "total_reward": 1.0, "final_reward": 1.0, "finished": True, "success": True,
                                "finish_reason": "finished", "steps": 1, "started": 0.0, "duration_s": 0.0}  # fmt: skip
    rec.record(EpisodeEvent(**(defaults | fields)))


def close(rec: Recorder, session_id: str, **fields: Any) -> None:
    """Record a session's ``close`` row."""
    rec.record(CloseEvent(session_id=session_id, **fields))
