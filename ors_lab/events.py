"""Typed events, and the stream they flow through.

Everything ors_lab sees happen is one small typed record, published on an ``EventStream``: the
ORS client publishes its wire traffic and session steps, the agents and the harness publish what
the agent says and does, the recording proxy publishes what passes through it. Everything that
watches subscribes: the recorder, the evaluation's progress, the notebook widgets, a live feed.
There is one type per kind of ``docs/trace-format.md``::

    wire, layer http       RequestEvent, ResponseEvent, ChunkEvent, DisconnectEvent, RetryEvent
    wire, layer sse        SSEEvent, CommentEvent
    call                   ResultEvent, CallErrorEvent
    session                OpenEvent, PingEvent, CloseEvent
    agent                  the agent stream vocabulary, ``to_wire()`` giving the seed's JSON:
      start                StartEvent              {messageId}
      block-start / -end   BlockStartEvent, BlockEndEvent   {blockId, blockName, blockType, ...} / {blockId, summary}
      text-start/-delta/-end           TextStartEvent, TextDeltaEvent, TextEndEvent           {id[, delta]}
      reasoning-start/-delta/-end      ReasoningStartEvent, ReasoningDeltaEvent, ReasoningEndEvent
      tool-input-start     ToolInputStartEvent     {toolCallId, toolName}
      tool-input-delta     ToolInputDeltaEvent     {toolCallId, inputTextDelta}
      tool-input-end       ToolInputEndEvent       {toolCallId}
      tool-input-available ToolInputAvailableEvent {toolCallId, toolName, input}
      tool-output-available  ToolOutputAvailableEvent  {toolCallId, output}
      tool-output-error    ToolOutputErrorEvent    {toolCallId, error[, reason]}
      reward               RewardEvent             {toolCallId, reward, finished}       (ours)
      usage                UsageEvent              {inputTokens, outputTokens, reasoningTokens,
                                                    cachedInputTokens, scope[, model]}
      finish               FinishEvent             {finishReason}
      error                ErrorEvent              {errorType, message, source, retryable[, retryAfter, code]}
      episode              EpisodeEvent            the episode's outcome (ours: the last event of an episode)

Fields are the trace's column names where a column holds them (``session_id``, ``call``,
``status``, ``data``, ...), and the seed's names in snake case otherwise. ``agent_event(kind,
wire, ...)`` is ``to_wire()`` backwards: a trace's agent rows made events again. ``full_wire(event)``
is ``to_wire()`` with the fields it leaves out (the session, the rollout, ...) in camel case, as a
live feed sends any event (``docs/feed.md``); ``event_from_wire`` reads it back. Every event carries
``t_ns``, the monotonic clock when it was made; ``wall_time(t_ns)`` turns it into the wall clock,
the same way in every subscriber. Events are handed to every subscriber as they are: treat them as
read-only.

An ``EventStream`` delivers each event to its subscribers in the order published, then to its
parent stream (a run's stream forwards to its client's). A subscriber is either called inline, in
the publishing thread (cheap; for the recorder and counters), or from a thread of its own through a
bounded buffer (``buffer=``: a slow subscriber then drops the oldest events instead of slowing the
run). A subscriber that raises is detached, its error logged and kept on its ``Subscription``; the
client, the agent and the other subscribers go on. Subscribers can be added and removed at any time.

``with stream.capture():`` makes ``stream`` the one the running code publishes on in place of the
streams it forwards to (``routed()``): in that block, and in the tasks started from it, an object of
the client that would publish on the client's stream (the client itself, an environment got from
it, their sessions) publishes on ``stream``, which forwards it on. An evaluation captures each
episode so, and its trace holds whatever its agent does through any object of the client it was
handed; two runs at once on one client each capture their own episodes (a ``ContextVar``).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

from ors_lab.protocol.errors import EventNotRecordedError

__all__ = [
    "AGENT_KINDS",
    "EVENT_TYPES",
    "FINISH_REASONS",
    "AgentEvent",
    "BlockEndEvent",
    "BlockStartEvent",
    "CallErrorEvent",
    "ChunkEvent",
    "CloseEvent",
    "CommentEvent",
    "DisconnectEvent",
    "EpisodeEvent",
    "ErrorEvent",
    "Event",
    "EventStream",
    "FinishEvent",
    "OpenEvent",
    "PingEvent",
    "ReasoningDeltaEvent",
    "ReasoningEndEvent",
    "ReasoningStartEvent",
    "RequestEvent",
    "ResponseEvent",
    "ResultEvent",
    "RetryEvent",
    "RewardEvent",
    "SSEEvent",
    "StartEvent",
    "Subscriber",
    "Subscription",
    "TextDeltaEvent",
    "TextEndEvent",
    "TextStartEvent",
    "ToolInputAvailableEvent",
    "ToolInputDeltaEvent",
    "ToolInputEndEvent",
    "ToolInputStartEvent",
    "ToolOutputAvailableEvent",
    "ToolOutputErrorEvent",
    "UsageEvent",
    "WireEvent",
    "agent_event",
    "compact_json",
    "event_from_wire",
    "full_wire",
    "strict_json",
    "wall_ns",
    "wall_time",
]

log = logging.getLogger("ors_lab.events")

_WALL0_NS = time.time_ns()
_MONO0_NS = time.monotonic_ns()


def wall_ns(t_ns: int) -> int:
    """The wall clock (nanoseconds since the epoch) of an event made at monotonic ``t_ns``.

    One anchor per process, so every subscriber gives an event the same wall time.
    """
    return _WALL0_NS + (t_ns - _MONO0_NS)


def wall_time(t_ns: int) -> float:
    """``wall_ns(t_ns)`` in seconds."""
    return wall_ns(t_ns) / 1e9


def _clock() -> int:
    return time.monotonic_ns()


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)
_str = json.encoder.encode_basestring  # C: a string as JSON, not ASCII-escaped


def compact_json(value: Any) -> str:
    """``value`` as compact JSON text (``{"a":1}``, UTF-8, not ASCII-escaped), as traces and feeds hold it."""
    return _ENCODER.encode(value)


_STRICT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=str)


def strict_json(value: Any) -> str:
    """``value`` as compact JSON text any JSON parser reads (a browser's, a live feed's reader): as
    ``compact_json``, but a float that is not finite (NaN, infinity) is ``null``."""
    try:
        return _STRICT.encode(value)
    except ValueError:
        return _STRICT.encode(_finite(value))


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def _num(value: float | int | bool) -> str:
    """A number (or bool) as ``compact_json`` writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return _ENCODER.encode(value)
    return repr(value)


# -- the events ----------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class Event:
    """Base of every event: its ``kind`` and ``layer`` (docs/trace-format.md), session and time."""

    kind: ClassVar[str] = ""
    LAYER: ClassVar[str] = ""
    session_id: str | None = None
    t_ns: int = field(default_factory=_clock, repr=False, compare=False)

    @property
    def layer(self) -> str:
        """The trace layer the event belongs to: ``http``, ``sse``, ``call``, ``session`` or ``agent``."""
        return self.LAYER


@dataclass(slots=True, kw_only=True)
class WireEvent(Event):
    """An HTTP exchange's event. ``agent=True`` marks the agent's own traffic (its LLM's): layer ``agent``."""

    LAYER: ClassVar[str] = "http"
    rollout: int | None = None
    call: int | None = None
    attempt: int | None = None
    exchange: int | None = None
    agent: bool = False

    @property
    def layer(self) -> str:
        return "agent" if self.agent else self.LAYER


@dataclass(slots=True, kw_only=True)
class RequestEvent(WireEvent):
    """An HTTP request sent (each attempt of it). ``headers``: ``httpx2.Headers``, a mapping or pairs."""

    kind: ClassVar[str] = "request"
    method: str
    url: str
    headers: Any = field(default=None, repr=False)
    body: bytes | None = field(default=None, repr=False)


@dataclass(slots=True, kw_only=True)
class ResponseEvent(WireEvent):
    """An HTTP response's head; ``body`` is the whole body of a response that is not a stream."""

    kind: ClassVar[str] = "response"
    status: int
    headers: Any = field(default=None, repr=False)
    ttfb_ns: int | None = None
    body: bytes | None = field(default=None, repr=False)


@dataclass(slots=True, kw_only=True)
class ChunkEvent(WireEvent):
    """A network chunk of a streamed response body, ``size`` bytes."""

    kind: ClassVar[str] = "chunk"
    size: int


@dataclass(slots=True, kw_only=True)
class DisconnectEvent(WireEvent):
    """A request or stream that broke before its end: ``error`` is ``ExceptionType: message``."""

    kind: ClassVar[str] = "disconnect"
    error: str


@dataclass(slots=True, kw_only=True)
class RetryEvent(WireEvent):
    """A decision to try a request again: ``reason`` (a status, an exception type, ``resume``), ``backoff`` s."""

    kind: ClassVar[str] = "retry"
    reason: str
    backoff: float
    task_id: str | None = None


@dataclass(slots=True, kw_only=True)
class SSEEvent(WireEvent):
    """A Server-Sent Event as decoded (``event`` is ``message`` when the server named none)."""

    kind: ClassVar[str] = "event"
    LAYER: ClassVar[str] = "sse"
    event: str
    data: str
    sse_id: str | None = None
    retry_ms: int | None = None


@dataclass(slots=True, kw_only=True)
class CommentEvent(WireEvent):
    """An SSE comment line (the servers' ``: ping`` keep-alives): its text after the colon."""

    kind: ClassVar[str] = "comment"
    LAYER: ClassVar[str] = "sse"
    comment: str


@dataclass(slots=True, kw_only=True)
class ResultEvent(Event):
    """A tool call that returned a result (``ok`` true or false)."""

    kind: ClassVar[str] = "result"
    LAYER: ClassVar[str] = "call"
    call: int
    task_id: str | None
    ok: bool
    reward: float | None
    finished: bool
    error: str | None = None
    reason: str | None = None


@dataclass(slots=True, kw_only=True)
class CallErrorEvent(Event):
    """A tool call that raised instead of returning: ``error`` is ``ExceptionType: message``."""

    kind: ClassVar[str] = "call_error"
    LAYER: ClassVar[str] = "call"
    call: int
    error: str
    task_id: str | None = None


@dataclass(slots=True, kw_only=True)
class OpenEvent(Event):
    """A session created on the server, on a task given by split and index or by its spec."""

    kind: ClassVar[str] = "open"
    LAYER: ClassVar[str] = "session"
    environment: str | None = None
    split: str | None = None
    task_index: int | None = None
    task: Mapping[str, Any] | None = None


@dataclass(slots=True, kw_only=True)
class PingEvent(Event):
    """A keep-alive ping the server accepted."""

    kind: ClassVar[str] = "ping"
    LAYER: ClassVar[str] = "session"


@dataclass(slots=True, kw_only=True)
class CloseEvent(Event):
    """A session closed, after its ``/delete``.

    ``ok``: True once the server confirmed the delete (or answered that it no longer knew the
    session); False when the delete still failed after its retries, ``error`` saying why: the
    server may then still hold the session, until it reaps it (after 900 s without a ping).
    """

    kind: ClassVar[str] = "close"
    LAYER: ClassVar[str] = "session"
    ok: bool = True
    error: str | None = None


# -- the agent stream vocabulary ------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class AgentEvent(Event):
    """An event of the agent stream vocabulary; ``to_wire()`` is the seed's JSON, ``type`` its type."""

    LAYER: ClassVar[str] = "agent"
    TEXT: ClassVar[tuple[str, ...]] = ()
    """The fields that must be text: checked when the event is made, so a wrong value fails its maker
    (the agent's code), never a subscriber such as the recorder later."""
    rollout: int | None = None

    def __post_init__(self) -> None:
        for name in self.TEXT:
            value = getattr(self, name)
            if type(value) is not str:
                shown = repr(value)
                raise TypeError(f"{type(self).__name__}.{name} must be a str, not {type(value).__name__}: "
                                f"{shown[:200]}{'...' if len(shown) > 200 else ''}")  # fmt: skip

    @property
    def type(self) -> str:
        """The seed's event type (the same as ``kind``)."""
        return self.kind

    def to_wire(self) -> dict[str, Any]:
        """The event as an agent platform streams it: ``{"type": ..., ...}``."""
        return {"type": self.kind}

    def to_json(self) -> str:
        """``to_wire()`` as compact JSON text (what a trace's ``data`` and a live feed hold).

        The frequent kinds write it straight from their fields, several times faster than
        encoding the dict; ``compact_json(event.to_wire())`` is always the same text.
        """
        return _ENCODER.encode(self.to_wire())


@dataclass(slots=True, kw_only=True)
class StartEvent(AgentEvent):
    """An episode starts (before its session opens); ``message_id`` is the session id."""

    kind: ClassVar[str] = "start"
    TEXT: ClassVar[tuple[str, ...]] = ("message_id",)
    message_id: str
    environment: str | None = None
    split: str | None = None
    task_index: int | None = None
    worker: str | None = None
    """The Ray worker running the episode (``ors_lab.evaluation.ray``); None in a local run."""

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.kind, "messageId": self.message_id}

    def to_json(self) -> str:
        return '{"type":"start","messageId":' + _str(self.message_id) + "}"


@dataclass(slots=True, kw_only=True)
class BlockStartEvent(AgentEvent):
    """One turn of the agent begins: its reasoning, text and tool calls until the matching block-end."""

    kind: ClassVar[str] = "block-start"
    TEXT: ClassVar[tuple[str, ...]] = ("block_id", "block_name", "block_type")
    block_id: str
    block_name: str
    block_type: str = "turn"
    display: str = "stream"
    thread: str = "main"

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.kind, "blockId": self.block_id, "blockName": self.block_name,
                "blockType": self.block_type, "display": self.display, "thread": self.thread}  # fmt: skip

    def to_json(self) -> str:
        return (f'{{"type":"block-start","blockId":{_str(self.block_id)},"blockName":{_str(self.block_name)},'
                f'"blockType":{_str(self.block_type)},"display":{_str(self.display)},'
                f'"thread":{_str(self.thread)}}}')  # fmt: skip


@dataclass(slots=True, kw_only=True)
class BlockEndEvent(AgentEvent):
    """The turn ends."""

    kind: ClassVar[str] = "block-end"
    TEXT: ClassVar[tuple[str, ...]] = ("block_id",)
    block_id: str
    summary: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire = {"type": self.kind, "blockId": self.block_id}
        if self.summary is not None:
            wire["summary"] = self.summary
        return wire

    def to_json(self) -> str:
        summary = "" if self.summary is None else ',"summary":' + _str(self.summary)
        return '{"type":"block-end","blockId":' + _str(self.block_id) + summary + "}"


@dataclass(slots=True, kw_only=True)
class _PartEvent(AgentEvent):
    TEXT: ClassVar[tuple[str, ...]] = ("id",)
    id: str

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.kind, "id": self.id}

    def to_json(self) -> str:
        return '{"type":"' + self.kind + '","id":' + _str(self.id) + "}"


@dataclass(slots=True, kw_only=True)
class _DeltaEvent(AgentEvent):
    TEXT: ClassVar[tuple[str, ...]] = ("id", "delta")
    id: str
    delta: str

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.kind, "id": self.id, "delta": self.delta}

    def to_json(self) -> str:
        return '{"type":"' + self.kind + '","id":' + _str(self.id) + ',"delta":' + _str(self.delta) + "}"


@dataclass(slots=True, kw_only=True)
class TextStartEvent(_PartEvent):
    """A part of the agent's answer text begins."""

    kind: ClassVar[str] = "text-start"


@dataclass(slots=True, kw_only=True)
class TextDeltaEvent(_DeltaEvent):
    """A piece of the agent's answer text."""

    kind: ClassVar[str] = "text-delta"


@dataclass(slots=True, kw_only=True)
class TextEndEvent(_PartEvent):
    """A part of the agent's answer text ends."""

    kind: ClassVar[str] = "text-end"


@dataclass(slots=True, kw_only=True)
class ReasoningStartEvent(_PartEvent):
    """A part of the agent's reasoning begins."""

    kind: ClassVar[str] = "reasoning-start"


@dataclass(slots=True, kw_only=True)
class ReasoningDeltaEvent(_DeltaEvent):
    """A piece of the agent's reasoning."""

    kind: ClassVar[str] = "reasoning-delta"


@dataclass(slots=True, kw_only=True)
class ReasoningEndEvent(_PartEvent):
    """A part of the agent's reasoning ends."""

    kind: ClassVar[str] = "reasoning-end"


@dataclass(slots=True, kw_only=True)
class ToolInputStartEvent(AgentEvent):
    """The agent starts streaming a tool call's input (an LLM's argument deltas follow)."""

    kind: ClassVar[str] = "tool-input-start"
    TEXT: ClassVar[tuple[str, ...]] = ("tool_call_id", "tool_name")
    tool_call_id: str
    tool_name: str
    title: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire = {"type": self.kind, "toolCallId": self.tool_call_id, "toolName": self.tool_name}
        if self.title is not None:
            wire["title"] = self.title
        return wire

    def to_json(self) -> str:
        title = "" if self.title is None else ',"title":' + _str(self.title)
        return ('{"type":"tool-input-start","toolCallId":' + _str(self.tool_call_id) + ',"toolName":'
                + _str(self.tool_name) + title + "}")  # fmt: skip


@dataclass(slots=True, kw_only=True)
class ToolInputDeltaEvent(AgentEvent):
    """A piece of a tool call's input, as text."""

    kind: ClassVar[str] = "tool-input-delta"
    TEXT: ClassVar[tuple[str, ...]] = ("tool_call_id", "input_text_delta")
    tool_call_id: str
    input_text_delta: str

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.kind, "toolCallId": self.tool_call_id, "inputTextDelta": self.input_text_delta}

    def to_json(self) -> str:
        return ('{"type":"tool-input-delta","toolCallId":' + _str(self.tool_call_id) + ',"inputTextDelta":'
                + _str(self.input_text_delta) + "}")  # fmt: skip


@dataclass(slots=True, kw_only=True)
class ToolInputEndEvent(AgentEvent):
    """A tool call's streamed input is complete."""

    kind: ClassVar[str] = "tool-input-end"
    TEXT: ClassVar[tuple[str, ...]] = ("tool_call_id",)
    tool_call_id: str

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.kind, "toolCallId": self.tool_call_id}

    def to_json(self) -> str:
        return '{"type":"tool-input-end","toolCallId":' + _str(self.tool_call_id) + "}"


@dataclass(slots=True, kw_only=True)
class ToolInputAvailableEvent(AgentEvent):
    """A tool call about to be made, with its whole input."""

    kind: ClassVar[str] = "tool-input-available"
    TEXT: ClassVar[tuple[str, ...]] = ("tool_call_id", "tool_name")
    tool_call_id: str
    tool_name: str
    input: Mapping[str, Any]

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.kind, "toolCallId": self.tool_call_id, "toolName": self.tool_name, "input": self.input}

    def to_json(self) -> str:
        return ('{"type":"tool-input-available","toolCallId":' + _str(self.tool_call_id) + ',"toolName":'
                + _str(self.tool_name) + ',"input":' + _ENCODER.encode(self.input) + "}")  # fmt: skip


@dataclass(slots=True, kw_only=True)
class _CallOutcomeEvent(AgentEvent):
    """An event about a tool call that was made: ``tool``, ``input`` and ``call`` say which."""

    tool_call_id: str
    tool: str | None = None
    input: Mapping[str, Any] | None = None
    call: int | None = None


@dataclass(slots=True, kw_only=True)
class ToolOutputAvailableEvent(_CallOutcomeEvent):
    """A tool result with ``ok`` true: ``output`` holds its text, blocks and metadata."""

    kind: ClassVar[str] = "tool-output-available"
    output: Any

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.kind, "toolCallId": self.tool_call_id, "output": self.output}


@dataclass(slots=True, kw_only=True)
class ToolOutputErrorEvent(_CallOutcomeEvent):
    """A tool result with ``ok`` false, a call that raised, or arguments the agent could not parse."""

    kind: ClassVar[str] = "tool-output-error"
    error: str
    reason: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire = {"type": self.kind, "toolCallId": self.tool_call_id, "error": self.error}
        if self.reason is not None:
            wire["reason"] = self.reason
        return wire


@dataclass(slots=True, kw_only=True)
class RewardEvent(_CallOutcomeEvent):
    """A tool result that carried a reward."""

    kind: ClassVar[str] = "reward"
    reward: float
    finished: bool

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.kind, "toolCallId": self.tool_call_id, "reward": self.reward, "finished": self.finished}

    def to_json(self) -> str:
        return ('{"type":"reward","toolCallId":' + _str(self.tool_call_id) + ',"reward":' + _num(self.reward)
                + ',"finished":' + _num(self.finished) + "}")  # fmt: skip


USAGE_SCOPES = ("call", "episode")


@dataclass(slots=True, kw_only=True)
class UsageEvent(AgentEvent):
    """Tokens an LLM call used (``scope="call"``), or an episode's totals after its finish (``"episode"``)."""

    kind: ClassVar[str] = "usage"
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    scope: str = "call"
    model: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"type": self.kind, "inputTokens": self.input_tokens,
                                "outputTokens": self.output_tokens, "reasoningTokens": self.reasoning_tokens,
                                "cachedInputTokens": self.cached_tokens, "scope": self.scope}  # fmt: skip
        if self.model is not None:
            wire["model"] = self.model
        return wire


FINISH_REASONS = ("stop", "tool-calls", "client-tool-calls", "length", "content-filter", "error", "other", "refusal",
                  "max-steps")  # fmt: skip
"""The seed's finish reasons, and two of ours. The harness says ``stop`` when the agent ended its turn
(the episode finished or the agent stopped), ``max-steps`` (ours) when its step limit ended it,
``error`` when it failed; an LLM agent passes on its model's last answer: ``length`` when the model
ran out of tokens, ``content-filter``, ``refusal`` (ours) when the model refused."""


@dataclass(slots=True, kw_only=True)
class FinishEvent(AgentEvent):
    """The episode's agent stream ends, for ``finish_reason`` (one of ``FINISH_REASONS``)."""

    kind: ClassVar[str] = "finish"
    TEXT: ClassVar[tuple[str, ...]] = ("finish_reason",)
    finish_reason: str

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.kind, "finishReason": self.finish_reason}

    def to_json(self) -> str:
        return '{"type":"finish","finishReason":' + _str(self.finish_reason) + "}"


ERROR_TYPES = ("rate_limit_error", "authentication_error", "provider_error", "provider_overloaded", "tool_error",
               "internal_error")  # fmt: skip
"""The seed's error types."""
ERROR_SOURCES = ("platform", "provider", "tool")
"""The seed's error sources: the harness or the agent's own code, the LLM provider, the environment."""


@dataclass(slots=True, kw_only=True)
class ErrorEvent(AgentEvent):
    """A structured error, as the seed gives it; ``code`` is the exception's type name.

    ``tool``, ``input`` and ``call`` say which tool call failed, when one did.
    """

    kind: ClassVar[str] = "error"
    TEXT: ClassVar[tuple[str, ...]] = ("error_type", "message", "source")
    error_type: str
    message: str
    source: str
    retryable: bool = False
    retry_after: float | str | None = None
    code: str | None = None
    tool: str | None = None
    input: Mapping[str, Any] | None = None
    call: int | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"type": self.kind, "errorType": self.error_type, "message": self.message,
                                "source": self.source, "retryable": self.retryable}  # fmt: skip
        if self.retry_after is not None:
            wire["retryAfter"] = self.retry_after
        if self.code is not None:
            wire["code"] = self.code
        return wire


@dataclass(slots=True, kw_only=True)
class EpisodeEvent(AgentEvent):
    """An episode's outcome, published last: what ``evaluate`` records and resumes from.

    ``reward`` is reduced from the steps as the evaluation asked (``reward=``); ``success`` is
    ``reward >= success_threshold`` without an error; ``started`` is the wall clock at its start.
    """

    kind: ClassVar[str] = "episode"
    environment: str
    split: str
    task_index: int
    reward: float
    total_reward: float | None
    final_reward: float | None
    finished: bool
    success: bool
    finish_reason: str
    steps: int
    started: float
    duration_s: float
    error: str | None = None
    error_type: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    agent: str | None = None
    """How the run names its agent (its class and model, or its name): what the dashboard and a report show."""

    RECORD: ClassVar[tuple[str, ...]] = (
        "environment", "split", "task_index", "rollout", "session_id", "reward", "total_reward", "final_reward",
        "finished", "success", "finish_reason", "steps", "duration_s", "started", "error", "error_type",
        "input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens", "agent",
    )  # fmt: skip

    def record(self) -> dict[str, Any]:
        """The outcome as the trace's ``episode`` row holds it in ``data`` (snake-case keys)."""
        return {name: getattr(self, name) for name in self.RECORD}

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "reward": self.reward,
            "finished": self.finished,
            "success": self.success,
            "finishReason": self.finish_reason,
            "steps": self.steps,
            "error": self.error,
            "errorType": self.error_type,
        }


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        RequestEvent, ResponseEvent, ChunkEvent, DisconnectEvent, RetryEvent, SSEEvent, CommentEvent, ResultEvent,
        CallErrorEvent, OpenEvent, PingEvent, CloseEvent, StartEvent, BlockStartEvent, BlockEndEvent, TextStartEvent,
        TextDeltaEvent, TextEndEvent, ReasoningStartEvent, ReasoningDeltaEvent, ReasoningEndEvent,
        ToolInputStartEvent, ToolInputDeltaEvent, ToolInputEndEvent, ToolInputAvailableEvent,
        ToolOutputAvailableEvent, ToolOutputErrorEvent, RewardEvent, UsageEvent, FinishEvent, ErrorEvent,
        EpisodeEvent,
    )
}  # fmt: skip
"""Every kind, and its event type."""
AGENT_KINDS = tuple(kind for kind, cls in EVENT_TYPES.items() if issubclass(cls, AgentEvent))
"""The kinds of the agent stream vocabulary (layer ``agent``)."""

_WIRE_NAMES = {"cachedInputTokens": "cached_tokens"}
"""The seed's names that are not the field's name in camel case."""
_ORDERED_FIELDS: dict[str, tuple[str, ...]] = {
    kind: tuple(f.name for f in fields(cls) if f.name != "t_ns") for kind, cls in EVENT_TYPES.items()
}
_FIELDS: dict[str, frozenset[str]] = {kind: frozenset(names) for kind, names in _ORDERED_FIELDS.items()}
_REQUIRED: dict[str, frozenset[str]] = {
    kind: frozenset(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)
    for kind, cls in EVENT_TYPES.items()
}


_EXTRA: dict[tuple[str, tuple[str, ...]], tuple[tuple[str, str, bool], ...]] = {}
"""Per kind and wire keys: the fields ``full_wire`` adds (name, wire key, whether the event always has it)."""


def _snake(key: str) -> str:
    """The field a wire key names: ``toolCallId`` -> ``tool_call_id`` (``cachedInputTokens``: ``cached_tokens``)."""
    return _WIRE_NAMES.get(key) or "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


def _camel(name: str) -> str:
    """A field's name as a wire key: ``tool_call_id`` -> ``toolCallId``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def full_wire(event: Event) -> dict[str, Any]:
    """The event as a live feed sends it: ``to_wire()`` (an agent event's; ``{"type": kind}`` for
    the others), then every field the wire form leaves out (``sessionId``, ``rollout``, a start's
    ``environment``, ``split`` and ``taskIndex``, a tool output's ``tool`` and ``call``, an
    episode's whole record, ...), named in camel case; ``t_ns`` is left out, and so are fields
    that are None and have a default. ``event_from_wire(kind, full_wire(e))`` equals ``e``.
    """
    wire = event.to_wire() if isinstance(event, AgentEvent) else {"type": event.kind}
    shape = (event.kind, tuple(wire))
    extra = _EXTRA.get(shape)
    if extra is None:  # once per kind and set of wire keys: a handful in all
        covered = {_snake(key) for key in wire}
        needed = _REQUIRED[event.kind]
        extra = _EXTRA[shape] = tuple(
            (name, _camel(name), name in needed) for name in _ORDERED_FIELDS[event.kind] if name not in covered
        )
    for name, key, always in extra:
        value = getattr(event, name)
        if value is not None or always:
            wire[key] = value
    return wire


def event_from_wire(kind: str, wire: Mapping[str, Any], **context: Any) -> Event:
    """The event of ``kind`` (any kind of ``EVENT_TYPES``) back from a wire form: ``full_wire()``, or
    an agent event's ``to_wire()`` with ``context``, as ``agent_event`` takes them. An unknown kind
    is a ``ValueError``; a wire form lacking a field its type needs, a ``TypeError``.
    """
    cls = EVENT_TYPES.get(kind)
    if cls is None:
        raise ValueError(f"not an event kind: {kind!r}; the kinds: {', '.join(EVENT_TYPES)}")
    names = _FIELDS[kind]
    values = {name: value for name, value in context.items() if value is not None and (name in names or name == "t_ns")}
    for key, value in wire.items():
        name = _snake(key)
        if name in names:
            values[name] = value
    return cls(**values)


def agent_event(kind: str, wire: Mapping[str, Any], **context: Any) -> AgentEvent:
    """The agent event of ``kind`` back from its ``wire`` form: ``to_wire()`` (camel case), or for an
    ``episode`` its ``record()`` (snake case), as a trace's ``data`` or a live feed holds it.

    ``context`` gives what the wire form leaves out (``session_id``, ``rollout``, ``t_ns``; a tool
    call's ``tool`` and ``call``; a start's ``environment``, ``split`` and ``task_index``: the
    trace's columns); a None in it is left out, and a key the event does not have is ignored.
    ``agent_event(e.kind, e.to_wire(), session_id=e.session_id, ...)`` equals ``e``. A kind that is
    not of the agent vocabulary is a ``ValueError``; a wire form lacking a field its type needs, a
    ``TypeError``.
    """
    cls = EVENT_TYPES.get(kind)
    if cls is None or not issubclass(cls, AgentEvent):
        raise ValueError(f"not an agent event kind: {kind!r}; the agent kinds: {', '.join(AGENT_KINDS)}")
    event = event_from_wire(kind, wire, **context)
    assert isinstance(event, AgentEvent)
    return event


# -- the stream ----------------------------------------------------------------------------------

Subscriber = Callable[[Any], object]
"""Called with one event (inline, or buffered), or with a list of events (buffered with ``every=``)."""

DEFAULT_BUFFER = 10_000


class Subscription:
    """One subscriber's place on a stream: ``close()`` (or ``with``) removes it.

    ``error`` is the exception that detached it, if one did; ``dropped`` counts the events a
    buffered subscriber lost because its buffer was full (the oldest go first).
    """

    required = False
    """A required subscriber (the recorder) is never detached: its failure is the publisher's."""

    def __init__(self, stream: EventStream, subscriber: Subscriber, kinds: Iterable[str] | None) -> None:
        self.stream = stream
        self.subscriber = subscriber
        self.kinds = None if kinds is None else frozenset(kinds)
        self.error: BaseException | None = None
        self.dropped = 0
        self.closed = False

    def __repr__(self) -> str:
        name = getattr(self.subscriber, "__qualname__", None) or repr(self.subscriber)
        state = "closed" if self.closed else "error" if self.error is not None else "active"
        return f"{type(self).__name__}({name}, {state})"

    def wants(self, event: Event) -> bool:
        """True when this subscription takes ``event`` (its kind is among ``kinds``, or no kinds were given)."""
        return self.kinds is None or event.kind in self.kinds

    def deliver(self, event: Event) -> None:
        """Hand ``event`` to the subscriber now (inline subscriptions)."""
        self.subscriber(event)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event published so far was handed over; True if it was (inline: always)."""
        return True

    def close(self) -> None:
        """Stop receiving events (safe to call twice)."""
        if not self.closed:
            self.closed = True
            self.stream._remove(self)

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        log.error("ors_lab: event subscriber %r raised and was detached", self.subscriber, exc_info=exc)
        self.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BufferedSubscription(Subscription):
    """A subscriber called from a thread of its own, through a buffer of at most ``maxlen`` events.

    Publishing only appends to the buffer: a slow subscriber never slows the publisher; when its
    buffer is full the oldest events are dropped (``dropped`` counts them). With ``every=S`` the
    subscriber is called with the list of events gathered, at most once every ``S`` seconds.
    """

    def __init__(
        self,
        stream: EventStream,
        subscriber: Subscriber,
        kinds: Iterable[str] | None,
        *,
        maxlen: int,
        every: float | None,
    ) -> None:
        super().__init__(stream, subscriber, kinds)
        if maxlen < 1:
            raise ValueError(f"buffer must hold at least 1 event, not {maxlen!r}")
        if every is not None and not every > 0:
            raise ValueError(f"every is in seconds and must be above 0, not {every!r}")
        self.every = every
        self._queue: deque[Event] = deque(maxlen=maxlen)
        self._cond = threading.Condition()
        self._published = 0
        self._handed = 0
        self._thread = threading.Thread(target=self._run, name=f"ors-lab events {self!r}", daemon=True)
        self._thread.start()

    def deliver(self, event: Event) -> None:
        with self._cond:
            queue = self._queue
            if len(queue) == queue.maxlen:
                self.dropped += 1
            queue.append(event)
            self._published += 1
            if len(queue) == 1:
                self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._published
            while self._handed + self.dropped < target and self._thread.is_alive():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return self._handed + self.dropped >= target

    def close(self) -> None:
        """Stop receiving events; what is buffered is still handed over, then the thread ends."""
        if self.closed:
            return
        super().close()
        with self._cond:
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self.closed:
                    self._cond.wait()
                if not self._queue:
                    return
                if self.every is None:
                    batch: list[Event] = [self._queue.popleft()]
                else:
                    batch = list(self._queue)
                    self._queue.clear()
            try:
                if self.every is None:
                    self.subscriber(batch[0])
                else:
                    self.subscriber(batch)
            except Exception as exc:
                self.error = exc
                log.error("ors_lab: event subscriber %r raised and was detached", self.subscriber, exc_info=exc)
                self.stream._remove(self)
                self.closed = True
            with self._cond:
                self._handed += len(batch)
                self._cond.notify_all()
                if self.error is not None:
                    self._queue.clear()
                    return
            if self.every is not None:
                time.sleep(self.every)


def _not_recorded(event: Event, subscription: Subscription, exc: Exception) -> EventNotRecordedError:
    name = getattr(subscription.subscriber, "__qualname__", None) or type(subscription.subscriber).__name__
    error = EventNotRecordedError(
        f"the {event.kind} event ({type(event).__name__}) could not be taken by {name}, which the run "
        f"cannot do without ({type(exc).__name__}: {exc}); the episode fails, and the trace keeps what came before",
        kind=event.kind,
        session_id=event.session_id,
    )
    error.__cause__ = exc
    return error


_CAPTURING: ContextVar[EventStream | None] = ContextVar("ors_lab_capturing_stream", default=None)
"""The stream the running code captures into (``EventStream.capture``), if any."""


class EventStream:
    """An ordered stream of events: ``subscribe`` to it, ``publish`` on it (see the module docstring).

    ``parent``: a stream that sees every event of this one after its own subscribers (a run's stream
    forwards to its client's, so the client's recorder sees the run too).
    """

    def __init__(self, parent: EventStream | None = None) -> None:
        self.parent = parent
        self._subscriptions: tuple[Subscription, ...] = ()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EventStream({len(self._subscriptions)} subscribers{', with a parent' if self.parent else ''})"

    @contextmanager
    def capture(self) -> Iterator[EventStream]:
        """In this block (and the tasks started from it), what would be published on a stream this one forwards
        to is published here instead (``routed``), and so reaches that stream too, after this one's subscribers."""
        token = _CAPTURING.set(self)
        try:
            yield self
        finally:
            _CAPTURING.reset(token)

    def routed(self) -> EventStream:
        """Where to publish what is meant for this stream: the stream the running code captures into
        (``capture``) when it forwards here, else this one."""
        capturing = _CAPTURING.get()
        if capturing is None or capturing is self:
            return self
        stream = capturing.parent
        while stream is not None:
            if stream is self:
                return capturing
            stream = stream.parent
        return self

    @property
    def active(self) -> bool:
        """True when anyone listens, here or up the chain of parents (publishers skip work otherwise)."""
        stream: EventStream | None = self
        while stream is not None:
            if stream._subscriptions:
                return True
            stream = stream.parent
        return False

    def subscribe(
        self,
        subscriber: Subscriber,
        *,
        kinds: Iterable[str] | None = None,
        buffer: int | None = None,
        every: float | None = None,
        required: bool = False,
    ) -> Subscription:
        """Call ``subscriber`` with every event from now on (only ``kinds``, if given).

        Inline by default: called in the publishing thread, so it must be quick. With ``buffer=N``
        (or ``every=S``, which implies a buffer) it is called from a thread of its own through a
        buffer of N events (default 10,000); ``every=S`` hands it lists of the events gathered, at
        most once every S seconds. Returns the ``Subscription``; ``close()`` it to unsubscribe.

        ``required=True`` (inline only: what the run cannot do without, such as its recorder and the
        rows of its result) keeps the subscriber attached whatever it raises: the event still goes to
        every other subscriber, then ``publish`` raises ``EventNotRecordedError`` naming the event, so
        the code that published it (an episode) fails instead of the event being lost without a word.
        """
        if required and (buffer is not None or every is not None):
            raise ValueError("a required subscriber is called inline: it takes no buffer= or every=")
        if kinds is not None:
            kinds = list(kinds)
            unknown = sorted(set(kinds) - set(EVENT_TYPES))
            if unknown:
                raise ValueError(f"unknown event kinds {unknown}; valid kinds: {', '.join(EVENT_TYPES)}")
        subscription: Subscription
        if buffer is None and every is None:
            subscription = Subscription(self, subscriber, kinds)
        else:
            subscription = BufferedSubscription(
                self, subscriber, kinds, maxlen=DEFAULT_BUFFER if buffer is None else buffer, every=every
            )
        subscription.required = required
        with self._lock:
            self._subscriptions = (*self._subscriptions, subscription)
        return subscription

    def _remove(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscriptions = tuple(s for s in self._subscriptions if s is not subscription)

    def publish(self, event: Event) -> None:
        """Hand ``event`` to every subscriber, in the order they subscribed, then to the parent stream.

        Raises ``EventNotRecordedError`` (after every subscriber had the event) when a required one failed on it."""
        stream: EventStream | None = self
        failed: tuple[Subscription, Exception] | None = None
        while stream is not None:
            for subscription in stream._subscriptions:
                if subscription.kinds is None or event.kind in subscription.kinds:
                    try:
                        subscription.deliver(event)
                    except Exception as exc:  # a subscriber's failure is its own, never the publisher's ...
                        if subscription.required:  # ... but for one the run cannot do without
                            failed = failed or (subscription, exc)
                        else:
                            subscription._fail(exc)
            stream = stream.parent
        if failed is not None:
            raise _not_recorded(event, *failed)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the buffered subscribers here and up the chain took every event published so far."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stream: EventStream | None = self
        while stream is not None:
            for subscription in stream._subscriptions:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not subscription.flush(left):
                    return False
            stream = stream.parent
        return True
