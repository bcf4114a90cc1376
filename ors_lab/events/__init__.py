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
      baseline             BaselineEvent           the run's baseline: its per-task scores (ours: once, before
                                                    the episodes of a run evaluated with a baseline)

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

from ors_lab.events.encoding import compact_json, strict_json
from ors_lab.events.records import (
    AGENT_KINDS,
    ERROR_SOURCES,
    ERROR_TYPES,
    EVENT_TYPES,
    FINISH_REASONS,
    USAGE_SCOPES,
    AgentEvent,
    BaselineEvent,
    BlockEndEvent,
    BlockStartEvent,
    CallErrorEvent,
    ChunkEvent,
    CloseEvent,
    CommentEvent,
    DisconnectEvent,
    EpisodeEvent,
    ErrorEvent,
    Event,
    FinishEvent,
    OpenEvent,
    PingEvent,
    ReasoningDeltaEvent,
    ReasoningEndEvent,
    ReasoningStartEvent,
    RequestEvent,
    ResponseEvent,
    ResultEvent,
    RetryEvent,
    RewardEvent,
    SSEEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ToolInputAvailableEvent,
    ToolInputDeltaEvent,
    ToolInputEndEvent,
    ToolInputStartEvent,
    ToolOutputAvailableEvent,
    ToolOutputErrorEvent,
    UsageEvent,
    WireEvent,
    wall_ns,
    wall_time,
)
from ors_lab.events.stream import DEFAULT_BUFFER, BufferedSubscription, EventStream, Subscriber, Subscription
from ors_lab.events.wire import agent_event, event_from_wire, full_wire

__all__ = [
    "AGENT_KINDS",
    "DEFAULT_BUFFER",
    "ERROR_SOURCES",
    "ERROR_TYPES",
    "EVENT_TYPES",
    "FINISH_REASONS",
    "USAGE_SCOPES",
    "AgentEvent",
    "BaselineEvent",
    "BlockEndEvent",
    "BlockStartEvent",
    "BufferedSubscription",
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
