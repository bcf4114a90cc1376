"""The event records: one small typed dataclass per kind of ``docs/trace-format.md`` (see ``ors_lab.events``),
and the monotonic clock they are stamped with."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ors_lab.events.encoding import _wired

__all__ = [
    "AGENT_KINDS",
    "ERROR_SOURCES",
    "ERROR_TYPES",
    "EVENT_TYPES",
    "FINISH_REASONS",
    "USAGE_SCOPES",
    "AgentEvent",
    "BaselineEvent",
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
    "wall_ns",
    "wall_time",
]


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
    WIRE: ClassVar[tuple[str, ...]] = ()
    """The fields ``to_wire()`` holds after its ``type``, in this order, each under its wire key (its name
    in camel case, or the seed's where ``_WIRE_NAMES`` says); a name ending in ``?`` is left out when None.
    The other fields (the session, the rollout, a tool call's ``tool`` and ``call``, ...) are the context
    the trace's columns hold. Each type's ``to_wire`` and ``to_json`` are made from it, once
    (``ors_lab.events.encoding``)."""
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
        """The event as an agent platform streams it: ``{"type": ..., ...}``, its ``WIRE`` fields."""
        return _wired(type(self)).to_wire(self)

    def to_json(self) -> str:
        """``to_wire()`` as compact JSON text (what a trace's ``data`` and a live feed hold).

        Written straight from the fields, several times faster than encoding the dict;
        ``compact_json(event.to_wire())`` is always the same text.
        """
        return _wired(type(self)).to_json(self)


@dataclass(slots=True, kw_only=True)
class StartEvent(AgentEvent):
    """An episode starts (before its session opens); ``message_id`` is the session id."""

    kind: ClassVar[str] = "start"
    TEXT: ClassVar[tuple[str, ...]] = ("message_id",)
    WIRE: ClassVar[tuple[str, ...]] = ("message_id",)
    message_id: str
    environment: str | None = None
    split: str | None = None
    task_index: int | None = None
    worker: str | None = None
    """The Ray worker running the episode (``ors_lab.evaluation.ray``); None in a local run."""


@dataclass(slots=True, kw_only=True)
class BlockStartEvent(AgentEvent):
    """One turn of the agent begins: its reasoning, text and tool calls until the matching block-end."""

    kind: ClassVar[str] = "block-start"
    TEXT: ClassVar[tuple[str, ...]] = ("block_id", "block_name", "block_type")
    WIRE: ClassVar[tuple[str, ...]] = ("block_id", "block_name", "block_type", "display", "thread")
    block_id: str
    block_name: str
    block_type: str = "turn"
    display: str = "stream"
    thread: str = "main"


@dataclass(slots=True, kw_only=True)
class BlockEndEvent(AgentEvent):
    """The turn ends."""

    kind: ClassVar[str] = "block-end"
    TEXT: ClassVar[tuple[str, ...]] = ("block_id",)
    WIRE: ClassVar[tuple[str, ...]] = ("block_id", "summary?")
    block_id: str
    summary: str | None = None


@dataclass(slots=True, kw_only=True)
class _PartEvent(AgentEvent):
    TEXT: ClassVar[tuple[str, ...]] = ("id",)
    WIRE: ClassVar[tuple[str, ...]] = ("id",)
    id: str


@dataclass(slots=True, kw_only=True)
class _DeltaEvent(AgentEvent):
    TEXT: ClassVar[tuple[str, ...]] = ("id", "delta")
    WIRE: ClassVar[tuple[str, ...]] = ("id", "delta")
    id: str
    delta: str


@dataclass(slots=True, kw_only=True)
class TextStartEvent(_PartEvent):
    """A part of the agent's answer text begins."""

    kind: ClassVar[str] = "text-start"


@dataclass(slots=True, kw_only=True)
class TextDeltaEvent(_DeltaEvent):
    """A piece of the agent's answer text."""

    kind: ClassVar[str] = "text-delta"


@dataclass(slots=True, kw_only=True)
class _PartEndEvent(_PartEvent):
    WIRE: ClassVar[tuple[str, ...]] = ("id", "provider_metadata?")
    provider_metadata: Mapping[str, Any] | None = None
    """What the provider said of the part beyond its text, by provider (``{"anthropic": {"signature": ...}}``,
    ``{"openai": {"itemId": ...}}``): kept so that the part can be sent back to it (``Trace.conversations``)."""


@dataclass(slots=True, kw_only=True)
class TextEndEvent(_PartEndEvent):
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
class ReasoningEndEvent(_PartEndEvent):
    """A part of the agent's reasoning ends."""

    kind: ClassVar[str] = "reasoning-end"


@dataclass(slots=True, kw_only=True)
class ToolInputStartEvent(AgentEvent):
    """The agent starts streaming a tool call's input (an LLM's argument deltas follow)."""

    kind: ClassVar[str] = "tool-input-start"
    TEXT: ClassVar[tuple[str, ...]] = ("tool_call_id", "tool_name")
    WIRE: ClassVar[tuple[str, ...]] = ("tool_call_id", "tool_name", "title?")
    tool_call_id: str
    tool_name: str
    title: str | None = None


@dataclass(slots=True, kw_only=True)
class ToolInputDeltaEvent(AgentEvent):
    """A piece of a tool call's input, as text."""

    kind: ClassVar[str] = "tool-input-delta"
    TEXT: ClassVar[tuple[str, ...]] = ("tool_call_id", "input_text_delta")
    WIRE: ClassVar[tuple[str, ...]] = ("tool_call_id", "input_text_delta")
    tool_call_id: str
    input_text_delta: str


@dataclass(slots=True, kw_only=True)
class ToolInputEndEvent(AgentEvent):
    """A tool call's streamed input is complete."""

    kind: ClassVar[str] = "tool-input-end"
    TEXT: ClassVar[tuple[str, ...]] = ("tool_call_id",)
    WIRE: ClassVar[tuple[str, ...]] = ("tool_call_id", "provider_metadata?")
    tool_call_id: str
    provider_metadata: Mapping[str, Any] | None = None
    """What the provider said of the call beyond its name and input (the Responses API's item id)."""


@dataclass(slots=True, kw_only=True)
class ToolInputAvailableEvent(AgentEvent):
    """A tool call about to be made, with its whole input."""

    kind: ClassVar[str] = "tool-input-available"
    TEXT: ClassVar[tuple[str, ...]] = ("tool_call_id", "tool_name")
    WIRE: ClassVar[tuple[str, ...]] = ("tool_call_id", "tool_name", "input")
    tool_call_id: str
    tool_name: str
    input: Mapping[str, Any]


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
    WIRE: ClassVar[tuple[str, ...]] = ("tool_call_id", "output")
    output: Any


@dataclass(slots=True, kw_only=True)
class ToolOutputErrorEvent(_CallOutcomeEvent):
    """A tool result with ``ok`` false, a call that raised, or arguments the agent could not parse."""

    kind: ClassVar[str] = "tool-output-error"
    WIRE: ClassVar[tuple[str, ...]] = ("tool_call_id", "error", "reason?")
    error: str
    reason: str | None = None


@dataclass(slots=True, kw_only=True)
class RewardEvent(_CallOutcomeEvent):
    """A tool result that carried a reward."""

    kind: ClassVar[str] = "reward"
    WIRE: ClassVar[tuple[str, ...]] = ("tool_call_id", "reward", "finished")
    reward: float
    finished: bool


USAGE_SCOPES = ("call", "episode")


@dataclass(slots=True, kw_only=True)
class UsageEvent(AgentEvent):
    """Tokens an LLM call used (``scope="call"``), or an episode's totals after its finish (``"episode"``)."""

    kind: ClassVar[str] = "usage"
    WIRE: ClassVar[tuple[str, ...]] = ("input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens", "scope",
                                       "model?")  # fmt: skip
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    scope: str = "call"
    model: str | None = None


FINISH_REASONS = ("stop", "tool-calls", "client-tool-calls", "length", "content-filter", "error", "other", "refusal",
                  "max-steps", "pause-turn", "stop-sequence")  # fmt: skip
"""The seed's finish reasons, and four of ours. The harness says ``stop`` when the agent ended its turn
(the episode finished or the agent stopped), ``max-steps`` (ours) when its step limit ended it,
``error`` when it failed; an LLM agent passes on its model's last answer: ``length`` when the model
ran out of tokens, ``content-filter``, ``refusal`` (ours) when the model refused, and Anthropic's
``pause-turn`` (a long server-tool turn paused) and ``stop-sequence`` (one of the request's stop
sequences ended it), ours too."""


@dataclass(slots=True, kw_only=True)
class FinishEvent(AgentEvent):
    """The episode's agent stream ends, for ``finish_reason`` (one of ``FINISH_REASONS``)."""

    kind: ClassVar[str] = "finish"
    TEXT: ClassVar[tuple[str, ...]] = ("finish_reason",)
    WIRE: ClassVar[tuple[str, ...]] = ("finish_reason",)
    finish_reason: str


ERROR_TYPES = ("rate_limit_error", "authentication_error", "provider_error", "provider_overloaded", "tool_error",
               "internal_error")  # fmt: skip
"""The seed's error types."""
ERROR_SOURCES = ("platform", "provider", "tool")
"""The seed's error sources: the harness or the agent's own code, the LLM provider, the environment."""


@dataclass(slots=True, kw_only=True)
class ErrorEvent(AgentEvent):
    """A structured error, as the seed gives it; ``code`` is the exception's type name, or a provider's
    code (``ANTHROPIC_429``); ``provider`` the provider's details when it failed (``{"name":
    "anthropic", "statusCode": 429, "requestId": "req_..."}``).

    ``tool``, ``input`` and ``call`` say which tool call failed, when one did.
    """

    kind: ClassVar[str] = "error"
    TEXT: ClassVar[tuple[str, ...]] = ("error_type", "message", "source")
    WIRE: ClassVar[tuple[str, ...]] = ("error_type", "message", "source", "retryable", "retry_after?", "code?",
                                       "provider?")  # fmt: skip
    error_type: str
    message: str
    source: str
    retryable: bool = False
    retry_after: float | str | None = None
    code: str | None = None
    provider: Mapping[str, Any] | None = None
    tool: str | None = None
    input: Mapping[str, Any] | None = None
    call: int | None = None


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
    WIRE: ClassVar[tuple[str, ...]] = ("reward", "finished", "success", "finish_reason", "steps", "error", "error_type")

    def record(self) -> dict[str, Any]:
        """The outcome as the trace's ``episode`` row holds it in ``data`` (snake-case keys)."""
        return {name: getattr(self, name) for name in self.RECORD}


@dataclass(slots=True, kw_only=True)
class BaselineEvent(AgentEvent):
    """The baseline a run is compared with (``evaluate(..., baseline=...)``), published once before its episodes:
    the baseline's ``name`` and its per-task scores on the run's ``environment`` and ``split``, ``tasks``: one
    ``[task_index, [reward of each rollout...], successes]`` each. What the dashboard, a watcher of the run's
    live feed and the run's report compare the run's tasks with, as they end."""

    kind: ClassVar[str] = "baseline"
    TEXT: ClassVar[tuple[str, ...]] = ("name",)
    WIRE: ClassVar[tuple[str, ...]] = ("name", "environment", "split", "tasks")
    name: str
    environment: str
    split: str
    tasks: list[Any]


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        RequestEvent, ResponseEvent, ChunkEvent, DisconnectEvent, RetryEvent, SSEEvent, CommentEvent, ResultEvent,
        CallErrorEvent, OpenEvent, PingEvent, CloseEvent, StartEvent, BlockStartEvent, BlockEndEvent, TextStartEvent,
        TextDeltaEvent, TextEndEvent, ReasoningStartEvent, ReasoningDeltaEvent, ReasoningEndEvent,
        ToolInputStartEvent, ToolInputDeltaEvent, ToolInputEndEvent, ToolInputAvailableEvent,
        ToolOutputAvailableEvent, ToolOutputErrorEvent, RewardEvent, UsageEvent, FinishEvent, ErrorEvent,
        EpisodeEvent, BaselineEvent,
    )
}  # fmt: skip
"""Every kind, and its event type."""
AGENT_KINDS = tuple(kind for kind, cls in EVENT_TYPES.items() if issubclass(cls, AgentEvent))
"""The kinds of the agent stream vocabulary (layer ``agent``)."""


for _type in EVENT_TYPES.values():  # each agent event type's own to_wire and to_json, made once
    if issubclass(_type, AgentEvent):
        _type.to_wire, _type.to_json = _wired(_type)  # type: ignore[method-assign, assignment]
