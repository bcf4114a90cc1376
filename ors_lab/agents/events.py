"""Agent events: what an agent says and does, in the vocabulary of the agent stream seed.

Every event has a ``type`` and the seed's own field names (``id``, ``delta``, ``toolCallId``,
``toolName``, ``input``, ``output``, ``error``, ``finishReason``, ``errorType``, ``message``,
``source``, ``retryable``, ``retryAfter``), so ``event.to_wire()`` is exactly what an agent
platform would stream:

    start                          {messageId}
    text-start / -delta / -end     {id[, delta]}
    reasoning-start / -delta / -end  {id[, delta]}
    tool-input-start               {toolCallId, toolName}
    tool-input-delta               {toolCallId, inputTextDelta}
    tool-input-end                 {toolCallId}
    tool-input-available           {toolCallId, toolName, input}
    tool-output-available          {toolCallId, output}
    tool-output-error              {toolCallId, error}
    reward                         {toolCallId, reward, finished}     (ours: a tool result's reward)
    finish                         {finishReason}
    error                          {errorType, message, source, retryable[, retryAfter]}
    episode                        the episode's outcome (ours: written once, when it ends)

An ``EventStream`` hands each event to the recorder (layer ``agent``, with the typed columns
filled where the event has them) and to every subscriber, in order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ors_lab.recording.schema import AGENT_KINDS

__all__ = [
    "AGENT_EVENT_TYPES",
    "FINISH_REASONS",
    "AgentEvent",
    "EventStream",
    "Subscriber",
    "compact_json",
]

AGENT_EVENT_TYPES = AGENT_KINDS
FINISH_REASONS = ("stop", "tool-calls", "client-tool-calls", "length", "content-filter", "error", "other")
"""The seed's finish reasons. The harness says ``stop`` when the agent ended its turn (the episode
finished or the agent stopped), ``length`` when the step limit ended it, ``error`` when it failed."""


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """One agent event: its ``type``, its seed-shaped ``payload``, and where it happened."""

    type: str
    payload: Mapping[str, Any]
    session_id: str | None = None
    rollout: int | None = None
    t: float = field(default_factory=time.monotonic, compare=False)

    def to_wire(self) -> dict[str, Any]:
        """The event as the seed writes it: ``{"type": ..., **payload}``."""
        return {"type": self.type, **self.payload}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.payload.items())
        return f"AgentEvent({self.type!r}{', ' if fields else ''}{fields})"


Subscriber = Callable[[AgentEvent], None]


def compact_json(value: Any) -> str:
    """Compact JSON text (``{"a":1}``, UTF-8, not ASCII-escaped), as the trace's JSON columns hold it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


class EventStream:
    """Fans agent events out to a recorder (``emit``) and to subscribers (``subscribe``)."""

    def __init__(self, recorder: Any = None) -> None:
        self.recorder = recorder
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber(event)`` for every event from now on; returns the unsubscribe function."""
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber) if subscriber in self._subscribers else None

    def publish(self, event: AgentEvent, **columns: Any) -> None:
        """Record ``event`` (``columns`` are extra trace columns) and hand it to every subscriber."""
        if event.type not in AGENT_EVENT_TYPES:
            raise ValueError(f"unknown agent event type {event.type!r}; valid types: {', '.join(AGENT_EVENT_TYPES)}")
        if self.recorder is not None:
            fields = {"layer": "agent", "session_id": event.session_id, "rollout": event.rollout,
                      "data": compact_json(event.to_wire()), **_typed_columns(event.payload), **columns}  # fmt: skip
            self.recorder.emit(event.type, **fields)
        for subscriber in list(self._subscribers):
            subscriber(event)


def _typed_columns(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The trace's typed columns that an event's payload fills (docs/trace-format.md)."""
    columns: dict[str, Any] = {}
    if "toolName" in payload:
        columns["tool"] = payload["toolName"]
    if "input" in payload:
        columns["input"] = compact_json(payload["input"])
    if "reward" in payload:
        columns["reward"] = payload["reward"]
    if "finished" in payload:
        columns["finished"] = payload["finished"]
    if "error" in payload and isinstance(payload["error"], str):
        columns["error"] = payload["error"]
    if "message" in payload:
        columns["error"] = payload["message"]
    if "finishReason" in payload:
        columns["reason"] = payload["finishReason"]
    if "errorType" in payload:
        columns["reason"] = payload["errorType"]
    if isinstance(payload.get("retryAfter"), int | float):
        columns["backoff"] = float(payload["retryAfter"])
    return columns
