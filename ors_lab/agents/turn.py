"""One LLM answer turned into agent events as its bytes arrive: the one mapping from a wire format's
pieces to ``text-*``, ``reasoning-*``, ``tool-input-*`` and ``usage`` events.

``Turn`` is shared by the three agents (``OpenAIAgent``, ``OpenAIResponsesAgent``, ``AnthropicAgent``)
and by ``Episode.llm_client()``, which reads the answers of any agent's own SDK calls through it:
the same bytes give the same events whoever sent the request. ``decoder_for(path)`` names the wire
format of a request by its path (``ors_lab.analysis.conversations.formats``): ``.../chat/completions``
(``ChatAnswer``), ``.../messages`` (``MessagesAnswer``), ``.../responses`` (``ResponsesAnswer``). ``run_tool``
runs one of the model's tool calls and says what goes back to it, as ``ors_lab.analysis.conversations`` writes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ors_lab.agents.chat import Answer, ChatAnswer, EndPiece, Piece, TextPiece, ToolCall, tool_input
from ors_lab.agents.messages import MessagesAnswer
from ors_lab.agents.parts import Publisher, TextStream
from ors_lab.agents.responses import ResponsesAnswer
from ors_lab.analysis.conversations import ToolOutcome, failed, formats, outcome_of
from ors_lab.events import (
    ToolInputDeltaEvent,
    ToolInputEndEvent,
    ToolInputStartEvent,
    ToolOutputErrorEvent,
)
from ors_lab.protocol.models import ToolResult

__all__ = ["DECODERS", "Turn", "decoder_for", "run_tool"]


DECODERS: dict[str, tuple[str, type[ChatAnswer | MessagesAnswer | ResponsesAnswer]]] = {
    "openai": ("openai", ChatAnswer),
    "anthropic": ("anthropic", MessagesAnswer),
    "responses": ("openai", ResponsesAnswer),
}
"""Each wire format (``ors_lab.analysis.conversations.FORMATS``): the provider that speaks it, and its decoder."""


def decoder_for(method: str, path: str) -> tuple[str, type[ChatAnswer | MessagesAnswer | ResponsesAnswer]] | None:
    """The provider and decoder of a request that asks for a model's answer in a known format; else None."""
    known = formats.of(method, path)
    return None if known is None else DECODERS[known]


class Turn:
    """One answer's pieces turned into agent events as they arrive; ``decoder`` makes the answer's
    decoder (``ChatAnswer``, or another wire format's with the same interface)."""

    def __init__(self, episode: Publisher, decoder: Callable[..., Answer] = ChatAnswer) -> None:
        self.episode = episode
        self._new_id = lambda: episode.new_id("call")
        self._decoder = decoder
        self.answer: Answer = decoder(new_id=self._new_id)
        self.parts: dict[str, TextStream] = {}  # the open text, reasoning or refusal part (one at a time)
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.started: list[ToolCall] = []

    def begin(self, content_type: str | None) -> None:
        """The answer's headers came: its content type says whether it is a stream or one JSON object."""
        self.answer = self._decoder(content_type=content_type, new_id=self._new_id)

    def _part(self, kind: str) -> TextStream:
        """The open part of ``kind``, opening it (and closing the other) when needed."""
        part = self.parts.get(kind)
        if part is None:
            self._close()
            event_kind = "reasoning" if kind == "reasoning" else "text"
            part = self.parts[kind] = TextStream(self.episode, event_kind, self.episode.new_id(kind))
            part.start()
        return part

    def _close(self) -> None:
        for part in self.parts.values():
            part.close()
        self.parts.clear()

    def _end(self, piece: EndPiece) -> None:
        """A part ends with the provider's metadata: the open part of its kind (a text's, or a refusal's), or a
        part of its own when none is open (a redacted thinking block has no text)."""
        kinds = ("text", "refusal") if piece.kind == "text" else ("reasoning",)
        open_kind = next((kind for kind in kinds if kind in self.parts), None)
        part = self.parts.pop(open_kind) if open_kind is not None else None
        if part is None:
            self._close()
            part = TextStream(self.episode, piece.kind, self.episode.new_id(piece.kind))
            part.start()
        part.close(piece.metadata)

    def take(self, pieces: list[Piece]) -> None:
        for piece in pieces:
            if isinstance(piece, TextPiece):
                if piece.kind == "text":
                    self.content.append(piece.text)
                elif piece.kind == "refusal":
                    self.refusal.append(piece.text)
                self._part(piece.kind).write(piece.text)
                continue
            if isinstance(piece, EndPiece):
                self._end(piece)
                continue
            self._close()
            call = piece.call
            if piece.started:
                self.started.append(call)
                self.episode.publish(ToolInputStartEvent(tool_call_id=call.id, tool_name=call.name))
            if piece.arguments:
                self.episode.publish(ToolInputDeltaEvent(tool_call_id=call.id, input_text_delta=piece.arguments))

    def feed(self, data: bytes) -> None:
        """Some of the answer's bytes; raises what the decoder found wrong, after the pieces before it."""
        self.take(self.answer.feed(data))
        if self.answer.error is not None:
            raise self.answer.error

    def close(self) -> None:
        """The answer's bytes ended; raises ``IncompleteStreamError`` if it was cut short."""
        self.take(self.answer.close())

    def end(self, model: str | None) -> None:
        """The turn is over, however it ended: parts and tool inputs closed, usage counted."""
        self._close()
        for call in self.started:
            self.episode.publish(ToolInputEndEvent(tool_call_id=call.id, provider_metadata=call.metadata or None))
        self.started = []
        usage = self.answer.usage
        if usage is not None:
            self.episode.record_usage(**usage, model=model)

    def summary(self) -> str:
        """The turn's block-end summary (the answer's: its finish reason and what else it says)."""
        return self.answer.summary()

    def message(self) -> dict[str, Any]:
        """The chat-completions assistant message to send back in the next turn."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.answer.calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.text}}
                for c in self.answer.calls
            ]
        return message


class ToolCaller(Publisher, Protocol):
    """What runs a turn's tool calls: an episode (``ors_lab.agents.episode.Episode``)."""

    async def call(self, name: str, input: Mapping[str, Any] | None = None, *,
                   tool_call_id: str | None = None) -> ToolResult: ...  # fmt: skip


async def run_tool(episode: ToolCaller, call: ToolCall) -> ToolOutcome:
    """Run one tool call of the model's: what goes back to it (the result's blocks, or its error). A call whose
    arguments are not one JSON object is never run: the model is told why (a ``tool-output-error`` says it too)."""
    try:
        arguments = tool_input(call)
    except ValueError as exc:
        message = str(exc)
        episode.publish(ToolOutputErrorEvent(tool_call_id=call.id, tool=call.name, error=message))
        return failed(call.id, message)
    result = await episode.call(call.name, arguments, tool_call_id=call.id)
    return outcome_of(call.id, result)
