"""Each episode's conversation, from a trace's rows (``Trace.conversations``).

An episode whose agent asked a model for answers in a known API (its ``agent``-layer requests to
``.../chat/completions``, ``.../messages`` or ``.../responses``) has for conversation what the model
was last sent, as it was sent (its last such request's system prompt, messages and tools, byte for
byte), then what it answered and what its tools gave back after it: the agent events that the one
decoder of its API made of the answer (``ors_lab.agents``), joined by the one joiner
(``ors_lab.transcript``). An episode with no such request (a policy's) has the prompt the
environment gave (its ``/prompt`` answer) as the user's message, then its turns: what the agent said
and the tool calls it made, each with what came back, and the session's tools (its ``/task_tools``
answer).

Given in the API the request was sent to, the conversation is the request's own messages and the
answer in that API's shape; in another API's, the request is read and written again in that one's
(``Dialogue``: what each API cannot take back is left out, as each format's module says).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.conversations import formats
from ors_lab.analysis.conversations.model import (
    Content,
    Dialogue,
    Message,
    Part,
    Reasoning,
    Text,
    ToolOutcome,
    ToolUse,
    content_of,
    failed,
)
from ors_lab.analysis.frames.source import Source, _select
from ors_lab.protocol.answers import prompt_blocks, tool_specs
from ors_lab.protocol.models import blocks_from_wire
from ors_lab.transcript import STREAM_KINDS, AgentStream
from ors_lab.transcript import Part as Said

__all__ = ["Conversation", "build"]

_EPISODE = ("environment", "split", "task_index", "rollout", "session_id", "reward", "finished", "success",
            "finish_reason", "error")  # fmt: skip
"""What a conversation says of its episode, from the episodes frame."""
_SENT_ONLY = ("stream", "stream_options")
"""Request fields that say how the answer is sent, not what is asked: left out of ``params``."""


@dataclass(frozen=True)
class Conversation:
    """One episode's conversation in one LLM API's shape, with its reward (see ``ors_lab.analysis.conversations``).

    ``messages`` are the API's messages (chat completions, Messages) or input items (Responses);
    ``system`` its system prompt (Messages' ``system``, Responses' ``instructions``; chat completions
    holds it in its first message); ``tools`` its tool definitions. ``request()`` is what to send back:
    ``client.messages.create(**conv.params, **conv.request())``; ``params`` are the rest of the request
    the conversation was recorded from (``model``, ``max_tokens``, ``thinking``, ...; empty when it was
    given in another API or no model was asked).
    """

    format: str
    messages: list[dict[str, Any]]
    system: str | list[Any] | None
    tools: list[dict[str, Any]]
    reward: float | None
    environment: str | None = None
    split: str | None = None
    task_index: int | None = None
    rollout: int | None = None
    session_id: str | None = None
    finished: bool | None = None
    success: bool | None = None
    finish_reason: str | None = None
    error: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        where = f"{self.environment}/{self.split}[{self.task_index}] rollout {self.rollout}"
        return f"Conversation({self.format!r}, {where}, messages={len(self.messages)}, reward={self.reward})"

    def request(self) -> dict[str, Any]:
        """The conversation as the API's request fields: its system prompt (if any), messages and tools (if any)."""
        return formats.request_fields(self.format, self.system, self.messages, self.tools)

    def to_json(self) -> dict[str, Any]:
        """One JSON object: ``request()``, then ``reward`` and ``metadata`` (the episode, the request's ``params``):
        a line of ``ors-lab export``."""
        metadata = {name: getattr(self, name) for name in _EPISODE if name != "reward"}
        metadata["format"] = self.format
        if self.params:
            metadata["params"] = self.params
        return {**self.request(), "reward": self.reward, "metadata": metadata}


def build(
    source: Source, episodes: Iterable[Mapping[str, Any]], *, format: str, min_reward: float | None = None
) -> list[Conversation]:
    """The conversations of ``episodes`` (records with the episodes frame's columns), in their order, in
    ``format``'s shape; those with a reward below ``min_reward`` (or none) left out."""
    formats.check(format)
    chosen = [e for e in episodes if min_reward is None or (e.get("reward") is not None and e["reward"] >= min_reward)]
    sessions = {str(e["session_id"]) for e in chosen if e.get("session_id") is not None}
    if not sessions:
        return []
    requests, said = _agent_rows(source, sessions)
    without = sessions - set(requests)
    prompts, session_tools = _ors_answers(source, without) if without else ({}, {})
    out = []
    for episode in chosen:
        sid = str(episode.get("session_id"))
        request = requests.get(sid)
        events = said.get(sid, [])
        if request is not None:
            tail = _messages(_stream(item for seq, item in events if seq > request.seq))
            fields, params = formats.continued(format, request.format, request.body, tail)
        else:
            base = Dialogue(None, (Message("user", prompts.get(sid, ())),), session_tools.get(sid, ()))
            fields, params = formats.rendered(format, base.then(_messages(_stream(item for _, item in events)))), {}
        known = {name: episode.get(name) for name in _EPISODE}
        out.append(Conversation(format, fields["messages"], fields.get("system"), fields.get("tools", []),
                                params=params, **known))  # fmt: skip
    return out


# -- the trace's rows ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Request:
    seq: int
    format: str
    body: dict[str, Any]


def _agent_rows(
    source: Source, sessions: set[str]
) -> tuple[dict[str, _Request], dict[str, list[tuple[int, dict[str, Any]]]]]:
    """Per session: its last request to a model in a known API, and its agent events (seq, wire form) in order."""
    rows = _select(source, ["seq", "session_id", "kind", "method", "url", "body", "data"],
                   ["request", *STREAM_KINDS], agent=True)  # fmt: skip
    rows = rows.filter(pc.is_in(rows["session_id"], value_set=pa.array(sorted(sessions))))
    rows = rows.take(pc.sort_indices(rows["seq"]))
    requests: dict[str, _Request] = {}
    said: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    columns = [rows[name].to_pylist() for name in ("seq", "session_id", "kind", "method", "url", "body", "data")]
    for seq, sid, kind, method, url, body, data in zip(*columns, strict=True):
        if kind == "request":
            known = formats.of(method, urlsplit(url or "").path)
            request = _json(body)
            if known is not None and isinstance(request, dict):
                requests[sid] = _Request(seq, known, request)
            continue
        item = _json(data)
        if isinstance(item, dict):
            said.setdefault(sid, []).append((seq, item))
    return requests, said


def _ors_answers(source: Source, sessions: set[str]) -> tuple[dict[str, tuple[Content, ...]], dict[str, Any]]:
    """Per session: the prompt's content and the tools, from its answered ``/prompt`` and ``/task_tools``."""
    rows = _select(source, ["run_id", "exchange", "session_id", "kind", "url", "status", "body"],
                   ["request", "response"], agent=False)  # fmt: skip
    asked: dict[tuple[Any, Any], tuple[str, str]] = {}
    answers: dict[tuple[Any, Any], Any] = {}
    columns = [rows[n].to_pylist() for n in ("run_id", "exchange", "session_id", "kind", "url", "status", "body")]
    for run, exchange, sid, kind, url, status, body in zip(*columns, strict=True):
        if kind == "request":
            path = urlsplit(url or "").path
            if sid in sessions and path.endswith(("/prompt", "/task_tools")):
                asked[(run, exchange)] = (sid, "prompt" if path.endswith("/prompt") else "tools")
        elif status == 200:
            answers[(run, exchange)] = body
    prompts: dict[str, tuple[Content, ...]] = {}
    tools: dict[str, Any] = {}
    for key, (sid, what) in asked.items():
        value = _json(answers.get(key))
        try:
            if what == "prompt":
                prompts[sid] = content_of(prompt_blocks(value))
            else:
                tools[sid] = tuple(tool_specs(value))
        except (TypeError, ValueError):  # an answer the client refused too: the episode has none
            continue
    return prompts, tools


def _json(value: Any) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


# -- the agent's events as messages -------------------------------------------------------------------------


def _stream(items: Iterable[dict[str, Any]]) -> AgentStream:
    stream = AgentStream()
    for index, item in enumerate(items):
        stream.feed(item, index)
    return stream


def _outcome(part: Said) -> ToolOutcome | None:
    """What the call gave back to the model, as the agents write it; None when it came to nothing."""
    if part.error is not None:
        return failed(part.id, part.error)
    output = part.output
    if not isinstance(output, Mapping):
        return None
    try:
        blocks = blocks_from_wire(output.get("blocks"))
    except (TypeError, ValueError):
        text = output.get("text")
        return ToolOutcome(part.id, (Text(text),) if isinstance(text, str) else ())
    return ToolOutcome(part.id, content_of(blocks))


def _messages(stream: AgentStream) -> list[Message]:
    """The agent's turns as messages: each turn's reasoning, text and tool calls one assistant message, the
    outcomes of its calls one message after it. A call the harness made outside any turn under an id of its
    own answers the earliest unanswered call of the model to the same tool (an agent that did not pass the
    model's id to ``episode.call``)."""
    out: list[Message] = []
    unanswered: list[ToolUse] = []
    for turn in stream.turns():
        said: list[Part] = []
        outcomes: list[ToolOutcome] = []
        for part in turn.parts:
            if part.kind == "reasoning":
                said.append(Reasoning(part.text, part.metadata))
            elif part.kind == "text":
                said.append(Text(part.text, part.metadata))
            elif part.kind == "tool-call":
                outcome = _outcome(part)
                model = next((u for u in unanswered if u.name == part.tool), None) if not part.streamed else None
                if turn.name is None and model is not None and outcome is not None:
                    unanswered.remove(model)
                    outcomes.append(ToolOutcome(model.id, outcome.content, outcome.is_error))
                    continue
                use = ToolUse(part.id, part.tool or "", part.arguments, part.metadata)
                said.append(use)
                if outcome is None:
                    unanswered.append(use)
                else:
                    outcomes.append(outcome)
        if said:
            out.append(Message("assistant", tuple(said)))
        if outcomes:
            if not said and out and out[-1].role == "tool":
                out[-1] = Message("tool", (*out[-1].parts, *outcomes))
            else:
                out.append(Message("tool", tuple(outcomes)))
    return out
