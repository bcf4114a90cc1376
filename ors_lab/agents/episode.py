"""What an agent is handed: an ``Episode`` on one task, and the ``Agent`` interface.

An agent's ``run(episode)`` reads ``episode.prompt`` and ``episode.tools``, calls
``await episode.call(name, input)`` until ``episode.done``, and says what it thinks on the way
with ``episode.text()`` / ``episode.reasoning()``. Every call emits the agent events of
``ors_lab.agents.events`` (tool input, tool output or error, reward), so an agent only streams
what is its own: text, reasoning and tool-input deltas.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ors_lab.agents.events import AgentEvent, EventStream, compact_json
from ors_lab.client import AsyncSession
from ors_lab.protocol.errors import ORSError
from ors_lab.protocol.models import Block, Task, TextBlock, ToolResult, ToolSpec

__all__ = [
    "CURRENT_EPISODE",
    "Agent",
    "Episode",
    "Step",
    "StepLimitReached",
    "TextStream",
    "error_payload",
    "prompt_text",
]


CURRENT_EPISODE: ContextVar[Episode | None] = ContextVar("ors_lab_current_episode", default=None)
"""The episode the running code belongs to (the harness sets it around ``agent.run``): how the
agent's own HTTP traffic finds the recorder and session it belongs to, live and in replay."""


REPORTED = "ors_lab: reported as an agent error event"
"""The note on an exception whose ``error`` event was already emitted (so the harness does not repeat it)."""


class StepLimitReached(Exception):
    """``Episode.call`` was asked for a step beyond ``max_steps``; the harness ends the episode."""


@runtime_checkable
class Agent(Protocol):
    """Anything with ``async run(episode)``: it calls tools until ``episode.done`` or it gives up."""

    async def run(self, episode: Episode) -> None: ...


@dataclass(frozen=True, slots=True)
class Step:
    """One tool call of an episode and what came back."""

    number: int
    tool: str
    input: Mapping[str, Any]
    result: ToolResult
    duration_s: float
    call: int


def prompt_text(blocks: list[Block]) -> str:
    """The prompt's text blocks joined by blank lines (images become ``[image]``)."""
    return "\n\n".join(b.text if isinstance(b, TextBlock) else "[image]" for b in blocks)


def error_payload(exc: BaseException, *, source: str) -> dict[str, Any]:
    """The seed's structured error for an exception: errorType, message, source, retryable, retryAfter.

    ``retryable`` and ``retryAfter`` come from the HTTP answer behind the exception when it has one
    (our ``ServerError``, the openai SDK's ``APIStatusError``): 429, 502, 503 and 504 are retryable,
    and ``Retry-After`` (seconds) is passed on.
    """
    from ors_lab.protocol.errors import EnvironmentStartingError

    status = getattr(exc, "status_code", None)
    payload: dict[str, Any] = {
        "errorType": type(exc).__name__,
        "message": str(exc) or type(exc).__name__,
        "source": source,
        "retryable": status in (429, 502, 503, 504) or isinstance(exc, EnvironmentStartingError),
    }
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    retry_after = headers.get("retry-after") if headers is not None else None
    try:
        if retry_after is not None:
            payload["retryAfter"] = float(retry_after)
    except ValueError:  # an HTTP date: keep the text
        payload["retryAfter"] = retry_after
    return payload


class TextStream:
    """A text or reasoning part being streamed: ``write(delta)`` emits one delta event."""

    def __init__(self, episode: Episode, kind: str, part_id: str) -> None:
        self._episode = episode
        self.kind = kind
        self.id = part_id
        self.parts: list[str] = []

    def write(self, delta: str) -> None:
        """Stream ``delta`` (an empty string emits nothing)."""
        if delta:
            self.parts.append(delta)
            self._episode.emit(f"{self.kind}-delta", id=self.id, delta=delta)

    def close(self) -> None:
        """End the part (its ``-end`` event)."""
        self._episode.emit(f"{self.kind}-end", id=self.id)

    @property
    def text(self) -> str:
        """Everything written so far."""
        return "".join(self.parts)


class Episode:
    """One episode of an evaluation: a live session on one task, for one rollout.

    ``prompt`` (blocks) and ``tools`` are read before the agent starts; ``steps`` grows with every
    call; ``done`` is true once a result said ``finished`` or ``max_steps`` calls were made.
    """

    def __init__(
        self,
        session: AsyncSession,
        *,
        rollout: int,
        prompt: list[Block],
        tools: list[ToolSpec],
        max_steps: int | None,
        events: EventStream,
    ) -> None:
        self.session = session
        self.rollout = rollout
        self.prompt = prompt
        self.tools = tools
        self.max_steps = max_steps
        self.events = events
        self.steps: list[Step] = []
        self.finished = False
        self.finish_reason: str | None = None
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        where = f"{self.split}[{self.index}]" if self.index is not None else repr(self.task)
        return f"Episode({self.environment!r}, {where}, rollout={self.rollout}, steps={len(self.steps)})"

    # -- what the agent reads ------------------------------------------------------------------

    @property
    def environment(self) -> str:
        return self.session.environment

    @property
    def split(self) -> str | None:
        return self.session.split

    @property
    def index(self) -> int | None:
        return self.session.index

    @property
    def task(self) -> Task | None:
        """The task's spec when the session was opened by spec (the harness opens by split and index)."""
        return self.session.task

    @property
    def prompt_text(self) -> str:
        """The prompt's text (see ``prompt_text``)."""
        return prompt_text(self.prompt)

    @property
    def done(self) -> bool:
        """True once the episode finished or the step limit is used up."""
        return self.finished or (self.max_steps is not None and len(self.steps) >= self.max_steps)

    # -- what the agent does -------------------------------------------------------------------

    def emit(self, type: str, /, **payload: Any) -> None:
        """Emit one agent event of this episode (see ``ors_lab.agents.events``)."""
        self._emit_for_call(type, {}, **payload)

    def _emit_for_call(self, type: str, columns: dict[str, Any], /, **payload: Any) -> None:
        """An event about one tool call: its rows carry the call's tool, input and number too."""
        self.events.publish(AgentEvent(type, payload, session_id=self.session.sid, rollout=self.rollout), **columns)

    def new_id(self, prefix: str) -> str:
        """A fresh id for a text part, a reasoning part or a tool call, unique in the episode."""
        return f"{prefix}-{next(self._ids)}"

    @contextmanager
    def text(self) -> Iterator[TextStream]:
        """``with episode.text() as out: out.write("...")``: text-start, text-delta*, text-end."""
        with self._stream("text") as stream:
            yield stream

    @contextmanager
    def reasoning(self) -> Iterator[TextStream]:
        """``with episode.reasoning() as out: out.write("...")``: reasoning-start, -delta*, -end."""
        with self._stream("reasoning") as stream:
            yield stream

    def open_part(self, kind: str) -> TextStream:
        """Start a ``text`` or ``reasoning`` part (its ``-start`` event); ``close()`` it when done."""
        stream = TextStream(self, kind, self.new_id(kind))
        self.emit(f"{kind}-start", id=stream.id)
        return stream

    @contextmanager
    def _stream(self, kind: str) -> Iterator[TextStream]:
        stream = self.open_part(kind)
        try:
            yield stream
        finally:
            stream.close()

    async def call(
        self, name: str, input: Mapping[str, Any] | None = None, *, tool_call_id: str | None = None
    ) -> ToolResult:
        """Call a tool; emits tool-input-available, then tool-output-available or -error, and reward.

        ``ok=False`` results are returned (the agent sees the error). Infrastructure failures raise
        after an ``error`` and a ``tool-output-error`` event. Raises ``StepLimitReached`` when the
        episode already made ``max_steps`` calls.
        """
        if self.max_steps is not None and len(self.steps) >= self.max_steps:
            raise StepLimitReached(f"the step limit ({self.max_steps}) is reached")
        tool_input = dict(input or {})
        call_id = tool_call_id or self.new_id("call")
        self.emit("tool-input-available", toolCallId=call_id, toolName=name, input=tool_input)
        started = time.monotonic()
        columns: dict[str, Any] = {"tool": name, "input": compact_json(tool_input), "call": self.session.calls + 1}
        try:
            result = await self.session.call(name, tool_input)
        except ORSError as exc:
            self._emit_for_call("error", columns, **error_payload(exc, source="environment"))
            self._emit_for_call("tool-output-error", columns, toolCallId=call_id, error=str(exc))
            exc.add_note(REPORTED)
            raise
        step = Step(len(self.steps) + 1, name, tool_input, result, time.monotonic() - started, self.session.calls)
        self.steps.append(step)
        if result.ok:
            output = {"text": result.text, "blocks": [b.to_wire() for b in result.blocks], "metadata": result.metadata}
            self._emit_for_call("tool-output-available", columns, toolCallId=call_id, output=output)
        else:
            self._emit_for_call("tool-output-error", columns, toolCallId=call_id, error=result.error or "",
                                reason=result.reason)  # fmt: skip
        if result.reward is not None:
            self._emit_for_call("reward", columns, toolCallId=call_id, reward=result.reward, finished=result.finished)
        if result.finished:
            self.finished = True
        return result
