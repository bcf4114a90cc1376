"""What an agent is handed: an ``Episode`` on one task, and the ``Agent`` interface.

An agent's ``run(episode)`` reads ``episode.task``, ``episode.prompt`` and ``episode.tools``, calls
``await episode.call(name, input)`` until ``episode.done``, and says what it thinks on the way
with ``episode.text()`` / ``episode.reasoning()``, a turn at a time (``episode.block()``). Every
call publishes the agent events of ``ors_lab.events`` (tool input, tool output or error, reward),
so an agent publishes only what is its own: text, reasoning and tool-input deltas, its turns, and
the tokens its LLM used (``episode.usage``). ``episode.publish(event)`` publishes any agent event
with the episode's session and rollout filled in.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import httpx2

from ors_lab.agents.errors import REPORTED, error_event
from ors_lab.agents.parts import TextStream
from ors_lab.client import AsyncSession
from ors_lab.events import (
    AgentEvent,
    BlockEndEvent,
    BlockStartEvent,
    EventStream,
    RewardEvent,
    ToolInputAvailableEvent,
    ToolOutputAvailableEvent,
    ToolOutputErrorEvent,
    UsageEvent,
)
from ors_lab.protocol.errors import ORSError
from ors_lab.protocol.models import Block, Task, TextBlock, ToolResult, ToolSpec

if TYPE_CHECKING:
    import httpx

__all__ = [
    "CURRENT_EPISODE",
    "Agent",
    "Episode",
    "Step",
    "StepLimitReached",
    "TextStream",
    "Usage",
    "prompt_text",
]


CURRENT_EPISODE: ContextVar[Episode | None] = ContextVar("ors_lab_current_episode", default=None)
"""The episode the running code belongs to (the harness sets it around ``agent.run``): how the
agent's own HTTP traffic finds the stream and session it belongs to, live and in replay."""


class StepLimitReached(Exception):
    """``Episode.call`` was asked for a step beyond ``max_steps``; the harness ends the episode."""


@runtime_checkable
class Agent(Protocol):
    """Anything with ``async run(episode)``: it calls tools until ``episode.done`` or it gives up."""

    async def run(self, episode: Episode) -> None: ...


@dataclass(frozen=True, slots=True)
class Step:
    """One tool call of an episode and what came back (``reward``, ``ok``, ... are the result's)."""

    number: int
    tool: str
    input: Mapping[str, Any]
    result: ToolResult
    duration_s: float
    call: int

    @property
    def reward(self) -> float | None:
        return self.result.reward

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def finished(self) -> bool:
        return self.result.finished

    @property
    def error(self) -> str | None:
        return self.result.error


@dataclass
class Usage:
    """Tokens used so far: in, out, of them reasoning, and of the input, cached (None: never reported)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None

    NAMES = ("input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens")

    def add(self, event: UsageEvent) -> None:
        """Count one LLM call's usage."""
        for name in self.NAMES:
            value = getattr(event, name)
            if value is not None:
                setattr(self, name, (getattr(self, name) or 0) + value)

    @property
    def reported(self) -> bool:
        """True once any usage was counted."""
        return any(getattr(self, name) is not None for name in self.NAMES)


def prompt_text(blocks: list[Block]) -> str:
    """The prompt's text blocks joined by blank lines (images become ``[image]``)."""
    return "\n\n".join(b.text if isinstance(b, TextBlock) else "[image]" for b in blocks)


class Episode:
    """One episode of an evaluation: a live session on one task, for one rollout.

    ``task`` (the task's spec), ``prompt`` (blocks) and ``tools`` are read before the agent starts;
    ``steps`` grows with every call; ``done`` is true once a result said ``finished`` or
    ``max_steps`` calls were made. ``events`` is the run's stream; ``usage`` the tokens the agent
    reported so far. What the agent does through the session, its client, an environment got from
    that client or a session of it, is published on the run's stream too (the harness captures the
    episode into it: ``EventStream.capture``), so it is in the run's trace and replays.
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
        task: Task | None = None,
        llm_transport: Any = None,
    ) -> None:
        self.session = session
        self._task = task
        self.rollout = rollout
        self.prompt = prompt
        self.tools = tools
        self.max_steps = max_steps
        self.events = events
        self.steps: list[Step] = []
        self.finished = False
        self.finish_reason: str | None = None
        self.usage = Usage()
        self._ids = itertools.count(1)
        self._summaries: dict[str, str] = {}
        self.llm_transport = llm_transport
        self.llm_calls = 0  # the requests for a model's answer read through llm_client()
        self.llm_reported: list[Any] = []  # the HTTP answers whose errors llm_client() published
        self._llm_clients: list[Any] = []  # httpx2's AsyncClient and Client, and httpx's AsyncClient

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
        """The task's spec: as the environment gave it to the harness (``env.task(split, index)``, asked once per
        task of a run), or the session's when it was opened by spec. None against a replay of a trace recorded
        before evaluations asked for their tasks."""
        return self._task if self._task is not None else self.session.task

    @property
    def prompt_text(self) -> str:
        """The prompt's text (see ``prompt_text``)."""
        return prompt_text(self.prompt)

    @property
    def done(self) -> bool:
        """True once the episode finished or the step limit is used up."""
        return self.finished or (self.max_steps is not None and len(self.steps) >= self.max_steps)

    # -- the agent's own LLM client -------------------------------------------------------------

    def llm_client(self, **kwargs: Any) -> httpx2.AsyncClient:
        """The HTTP client to hand an official SDK as ``http_client=`` (``openai.AsyncOpenAI``,
        ``anthropic.AsyncAnthropic``, or anything built on them): its traffic goes into the run's trace,
        and the answers it reads in a known format (chat completions, Messages, Responses) are published
        as agent events, so the agent's own loop streams live and replays (``evaluate(..., llm_replay=)``)
        with no event code of its own (``ors_lab.agents.llm_client``). ``kwargs`` go to
        ``httpx2.AsyncClient`` (``timeout`` 600 s unless given); the episode closes the client when it ends."""
        from ors_lab.agents.llm_client import async_llm_client  # deferred: the wire formats' decoders

        client = async_llm_client(self, self.llm_transport, **kwargs)
        self._llm_clients.append(client)
        return client

    def llm_client_httpx(self, **kwargs: Any) -> httpx.AsyncClient:
        """``llm_client()`` as an ``httpx.AsyncClient``, for a framework still on httpx: the same recording.
        ``kwargs`` go to ``httpx.AsyncClient``."""
        import httpx  # deferred: httpx (ors_lab.agents.httpx_twin)

        from ors_lab.agents.httpx_twin import HttpxTransport
        from ors_lab.agents.llm_client import async_llm_client

        kwargs.setdefault("timeout", 600.0)
        inner = async_llm_client(self, self.llm_transport, follow_redirects=False)  # httpx follows them
        client = httpx.AsyncClient(transport=HttpxTransport(inner), **kwargs)
        self._llm_clients.append(client)
        return client

    def llm_client_sync(self, **kwargs: Any) -> httpx2.Client:
        """``llm_client()`` for a sync SDK client (``openai.OpenAI``, ``anthropic.Anthropic``): an
        ``httpx2.Client``; used from another thread, it hands its events to the episode's loop."""
        from ors_lab.agents.llm_client import sync_llm_client  # deferred: the wire formats' decoders

        client = sync_llm_client(self, self.llm_transport, **kwargs)
        self._llm_clients.append(client)
        return client

    async def aclose(self) -> None:
        """Close the LLM clients the episode made (the harness does, when the episode ends)."""
        clients, self._llm_clients = self._llm_clients, []
        for client in clients:
            if isinstance(client, httpx2.Client):
                client.close()
            else:
                await client.aclose()

    # -- what the agent does -------------------------------------------------------------------

    def publish(self, event: AgentEvent) -> None:
        """Publish an agent event of this episode; its session and rollout are filled in if unset."""
        if event.session_id is None:
            event.session_id = self.session.sid
        if event.rollout is None:
            event.rollout = self.rollout
        if isinstance(event, UsageEvent) and event.scope == "call":
            self.usage.add(event)
        self.events.publish(event)

    def new_id(self, prefix: str) -> str:
        """A fresh id for a text part, a reasoning part, a block or a tool call, unique in the episode."""
        return f"{prefix}-{next(self._ids)}"

    @contextmanager
    def block(self, name: str, *, block_type: str = "turn") -> Iterator[str]:
        """``with episode.block("turn 1") as block:`` one turn of the agent, between block-start and
        block-end (whose summary ``summarize(block, text)`` gives)."""
        block_id = self.new_id("block")
        self.publish(BlockStartEvent(block_id=block_id, block_name=name, block_type=block_type))
        try:
            yield block_id
        finally:
            self.publish(BlockEndEvent(block_id=block_id, summary=self._summaries.pop(block_id, None)))

    def summarize(self, block_id: str, summary: str) -> None:
        """The summary the block's ``block-end`` will carry (what the turn came to)."""
        self._summaries[block_id] = summary

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
        stream.start()
        return stream

    @contextmanager
    def _stream(self, kind: str) -> Iterator[TextStream]:
        stream = self.open_part(kind)
        try:
            yield stream
        finally:
            stream.close()

    def record_usage(
        self,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        reasoning_tokens: int | None = None,
        cached_tokens: int | None = None,
        model: str | None = None,
    ) -> None:
        """Publish the tokens one LLM call used (a ``usage`` event); the harness sums them per episode."""
        usage = UsageEvent(input_tokens=input_tokens, output_tokens=output_tokens, reasoning_tokens=reasoning_tokens,
                           cached_tokens=cached_tokens, model=model)  # fmt: skip
        self.publish(usage)

    async def call(
        self, name: str, input: Mapping[str, Any] | None = None, *, tool_call_id: str | None = None
    ) -> ToolResult:
        """Call a tool; publishes tool-input-available, then tool-output-available or -error, and reward.

        ``ok=False`` results are returned (the agent sees the error). Infrastructure failures raise
        after an ``error`` and a ``tool-output-error`` event. Raises ``StepLimitReached`` when the
        episode already made ``max_steps`` calls.
        """
        if self.max_steps is not None and len(self.steps) >= self.max_steps:
            raise StepLimitReached(f"the step limit ({self.max_steps}) is reached")
        tool_input = dict(input or {})
        call_id = tool_call_id or self.new_id("call")
        self.publish(ToolInputAvailableEvent(tool_call_id=call_id, tool_name=name, input=tool_input))
        started = time.monotonic()
        number = self.session.calls + 1
        try:
            result = await self.session.call(name, tool_input)
        except ORSError as exc:
            failure = error_event(exc, source="tool")
            failure.tool, failure.input, failure.call = name, tool_input, number
            self.publish(failure)
            self.publish(ToolOutputErrorEvent(tool_call_id=call_id, tool=name, input=tool_input, call=number,
                                              error=str(exc)))  # fmt: skip
            exc.add_note(REPORTED)
            raise
        step = Step(len(self.steps) + 1, name, tool_input, result, time.monotonic() - started, self.session.calls)
        self.steps.append(step)
        if result.ok:
            output = {"text": result.text, "blocks": [b.to_wire() for b in result.blocks], "metadata": result.metadata}
            self.publish(ToolOutputAvailableEvent(tool_call_id=call_id, tool=name, input=tool_input, call=step.call,
                                                  output=output))  # fmt: skip
        else:
            self.publish(ToolOutputErrorEvent(tool_call_id=call_id, tool=name, input=tool_input, call=step.call,
                                              error=result.error or "", reason=result.reason))  # fmt: skip
        if result.reward is not None:
            self.publish(RewardEvent(tool_call_id=call_id, tool=name, input=tool_input, call=step.call,
                                     reward=result.reward, finished=result.finished))  # fmt: skip
        if result.finished:
            self.finished = True
        return result
