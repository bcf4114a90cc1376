"""The Anthropic Messages decoder: one streamed answer, from its bytes to the pieces of one turn (no I/O).

    answer = MessagesAnswer(content_type=response.headers.get("content-type"))
    for data in network_chunks:
        for piece in answer.feed(data):     # TextPiece (text, reasoning) and CallPiece, in order
            ...
        if answer.error: raise answer.error
    answer.close()                          # the end of the bytes: raises IncompleteStreamError if it was cut

The same interface and pieces as the chat-completions decoder (``ors_lab.agents.chat``), for
``POST /v1/messages`` with ``stream: true``, read as the official SDK reads it:

- SSE framing through the one SSE decoder (``ors_lab.protocol.sse``). An event with no ``event:``
  line (the decoder names it ``message``, as the SSE specification does) is ignored, data and all;
  ``event: ping`` is a heartbeat (counted in ``pings``); ``event: error`` is the provider's error
  on an HTTP 200, typed by its body's ``error.type`` (``overloaded_error``, ``api_error``, ...): a
  ``ProviderReportedError`` whose ``code`` is that type and whose ``status_code`` is the HTTP
  status the API gives the same error (``ERROR_STATUS``: 529 for ``overloaded_error``).
  Any other event is dispatched on its data's ``type``; a data that is not a JSON object is a ``MalformedChunkError``.
- ``message_start`` gives the model and the first usage; ``content_block_start`` /
  ``content_block_delta`` / ``content_block_stop`` build the answer's blocks, keyed by their
  ``index`` (which may start at 1): ``text`` (``text_delta``: text pieces), ``thinking``
  (``thinking_delta``: reasoning pieces; ``signature_delta``: the block's signature, kept apart
  from the reasoning text so that the block can be sent back), ``redacted_thinking`` (kept as
  sent), ``tool_use`` (``input_json_delta.partial_json``: a tool call's argument pieces; none at
  all is the input ``{}``). Blocks of other types (server tools, with their streamed input, and
  their results) are kept as their start said, for the next request; they are not tool calls.
- ``message_delta`` gives the ``stop_reason`` (``FINISH_REASONS``: ``end_turn``, ``max_tokens``,
  ``tool_use``, ``refusal``, ``pause_turn`` and ``stop_sequence`` are six distinct finish reasons)
  and usage, whose counts win over ``message_start``'s; ``message_stop`` ends the answer.
- ``usage``: ``input_tokens`` is the whole prompt (the uncached tokens plus
  ``cache_read_input_tokens`` plus ``cache_creation_input_tokens``); ``cached_tokens`` the cache
  reads; ``reasoning_tokens`` stays None (the API does not count thinking apart). The two cache
  counts are also ``cache_read_tokens`` and ``cache_creation_tokens``.

A body that is one JSON object (a whole ``message``, or an error object) is read as one whole
turn. An answer is complete once its ``stop_reason`` or ``message_stop`` came; ``close()`` on one
that is not raises ``IncompleteStreamError``, and its tool calls must not run. ``content()`` is
the assistant's content blocks, to send back in the next request (empty text blocks left out: the
API refuses them).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from ors_lab.agents.chat import (
    CallPiece,
    EndPiece,
    Piece,
    PieceKind,
    StreamedAnswer,
    TextPiece,
    ToolCall,
    shown,
    tool_input,
)
from ors_lab.protocol.errors import (
    IncompleteStreamError,
    MalformedChunkError,
    ProviderReportedError,
)
from ors_lab.protocol.sse import ServerSentEvent

__all__ = ["ERROR_STATUS", "FINISH_REASONS", "MessagesAnswer", "finish_reason"]

FINISH_REASONS = {
    "end_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool-calls",
    "refusal": "refusal",
    "pause_turn": "pause-turn",
    "stop_sequence": "stop-sequence",
    "model_context_window_exceeded": "length",
}
"""A ``stop_reason`` by ors_lab's name (``ors_lab.events.FINISH_REASONS``); any other is ``other``."""

ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status the Messages API answers with for each ``error.type``: an error in the stream is
classified as that status would be (``overloaded_error`` is ``provider_overloaded``, and retryable)."""

_SHOWN = 200  # characters of an event an error quotes


def finish_reason(raw: str | None) -> str:
    """ors_lab's finish reason for a ``stop_reason``: ``stop`` when none was said."""
    if raw is None:
        return "stop"
    return FINISH_REASONS.get(raw, "other")


@dataclass
class Block:
    """One content block of the answer, at its ``index``: its type, text (or thinking), signature and call."""

    index: int
    type: str
    text: list[str] = field(default_factory=list)
    signature: list[str] = field(default_factory=list)
    call: ToolCall | None = None
    start: dict[str, Any] = field(default_factory=dict)  # the block as content_block_start gave it
    stopped: bool = False

    def to_wire(self) -> dict[str, Any]:
        """The block as the next request sends it back."""
        if self.type == "text":
            return {"type": "text", "text": "".join(self.text)}
        if self.type == "thinking":
            return {"type": "thinking", "thinking": "".join(self.text), "signature": "".join(self.signature)}
        if self.type == "tool_use" and self.call is not None:
            try:
                arguments = tool_input(self.call)
            except ValueError:
                arguments = {}
            return {"type": "tool_use", "id": self.call.id, "name": self.call.name, "input": arguments}
        whole = dict(self.start)
        if self.text and "input" in whole:  # a server tool's input, streamed
            with contextlib.suppress(ValueError):  # not JSON: the start's input goes back
                whole["input"] = json.loads("".join(self.text))
        return whole


class MessagesAnswer(StreamedAnswer):
    """One Messages answer being decoded; see the module docstring.

    After ``feed`` check ``error``: a bad event stops the answer there, ``feed`` returning the pieces
    before it; every later ``feed`` raises it. ``close()`` ends the bytes.
    """

    _unit = "event"

    def __init__(self, *, content_type: str | None = None, new_id: Any = None) -> None:
        super().__init__(content_type)
        self._new_id = new_id or (lambda: f"call-{len(self.calls) + 1}")
        self.blocks: dict[int, Block] = {}
        self.calls: list[ToolCall] = []
        self.raw_finish: str | None = None
        self.stop_sequence: str | None = None
        self._usage: dict[str, Any] = {}
        self.model: str | None = None
        self.message_id: str | None = None
        self.stopped = False  # message_stop came
        self.pings = 0
        self.other_choices: set[int] = set()  # none: a Messages answer has one (for the chat decoder's readers)

    # -- what the answer says ----------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        """True once the ``stop_reason`` or ``message_stop`` came."""
        return self.stopped or self.raw_finish is not None

    @property
    def finish_reason(self) -> str:
        """ors_lab's finish reason for the answer (``finish_reason()``)."""
        return finish_reason(self.raw_finish)

    @property
    def refused(self) -> bool:
        return self.raw_finish == "refusal"

    @property
    def usage(self) -> dict[str, int | None] | None:
        """The answer's tokens as ``Episode.record_usage`` takes them; None if no usage came."""
        if not self._usage:
            return None
        read, creation = self.cache_read_tokens, self.cache_creation_tokens
        uncached = _number(self._usage.get("input_tokens"))
        parts = [n for n in (uncached, read, creation) if n is not None]
        return {
            "input_tokens": sum(parts) if parts else None,
            "output_tokens": _number(self._usage.get("output_tokens")),
            "reasoning_tokens": None,
            "cached_tokens": read,
        }

    @property
    def cache_read_tokens(self) -> int | None:
        return _number(self._usage.get("cache_read_input_tokens"))

    @property
    def cache_creation_tokens(self) -> int | None:
        return _number(self._usage.get("cache_creation_input_tokens"))

    def content(self) -> list[dict[str, Any]]:
        """The assistant's content blocks in index order, as the next request sends them back."""
        blocks = [self.blocks[i].to_wire() for i in sorted(self.blocks)]
        return [b for b in blocks if not (b["type"] == "text" and not b["text"])]  # the API refuses empty text blocks

    def where(self) -> str:
        """How far the answer got: bytes and events received, the last event, a block left open."""
        said = f"{self.chunks} events received ({self.data_bytes} bytes of event data)"
        if self.last is not None:
            said += f"; the last event: {shown(self.last)}"
        open_blocks = [b for b in self.blocks.values() if not b.stopped]
        if open_blocks and not self.complete:
            block = open_blocks[-1]
            what = f"tool call {block.call.id} ({block.call.name})" if block.call is not None else f"{block.type} block"
            said += f"; {what} at index {block.index} was open"
        return said

    # -- reading -----------------------------------------------------------------------------------

    def _take(self, event: ServerSentEvent, pieces: list[Piece]) -> None:
        if event.event in (None, "message") or self.stopped:
            return  # comments, events with no `event:` line (the SDK ignores them), anything after message_stop
        if event.event == "ping":
            self.pings += 1
            return
        if event.event == "error":
            _raise_error(self._object(event.data))
        if event.data:
            self._event(self._object(event.data), pieces)

    def close(self) -> list[Piece]:
        """The end of the bytes: the pieces of a whole-JSON answer; ``IncompleteStreamError`` for an
        answer that ended before its ``stop_reason`` and ``message_stop`` (its tool calls must not run)."""
        if self.error is not None:
            raise self.error
        pieces: list[Piece] = []
        if self._json:
            whole = self._object(self._body_text())
            if whole.get("type") == "error":
                _raise_error(whole)
            self._whole(whole, pieces)
        if not self.complete:
            raise IncompleteStreamError(
                f"incomplete stream: the answer ended with no stop_reason and no message_stop; {self.where()}"
            )
        return pieces

    def _event(self, event: dict[str, Any], pieces: list[Piece]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                self._message(message)
        elif kind == "content_block_start":
            block = event.get("content_block")
            index = _number(event.get("index"))
            if isinstance(block, dict) and index is not None:
                self._start(index, block, pieces)
        elif kind == "content_block_delta":
            delta = event.get("delta")
            index = _number(event.get("index"))
            if isinstance(delta, dict) and index is not None:
                self._delta(index, delta, pieces)
        elif kind == "content_block_stop":
            index = _number(event.get("index"))
            if index is not None and index in self.blocks:
                self._stop(self.blocks[index], pieces)
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict):
                if isinstance(delta.get("stop_reason"), str):
                    self.raw_finish = delta["stop_reason"]
                if isinstance(delta.get("stop_sequence"), str):
                    self.stop_sequence = delta["stop_sequence"]
            self._count(event.get("usage"))
        elif kind == "message_stop":
            self.stopped = True
        # any other type (a new one): ignored, as the SDK's accumulator does

    def _message(self, message: dict[str, Any]) -> None:
        if isinstance(message.get("model"), str):
            self.model = message["model"]
        if isinstance(message.get("id"), str):
            self.message_id = message["id"]
        self._count(message.get("usage"))

    def _count(self, usage: Any) -> None:
        """Usage counts: each one given (not None) replaces the one before (message_delta's win)."""
        if isinstance(usage, dict):
            for name, value in usage.items():
                if _number(value) is not None:
                    self._usage[name] = value

    def _start(self, index: int, start: dict[str, Any], pieces: list[Piece]) -> None:
        kind = str(start.get("type"))
        block = self.blocks[index] = Block(index, kind, start=start)
        if kind == "text":
            self._text(block, "text", start.get("text"), pieces)
        elif kind == "thinking":
            self._text(block, "reasoning", start.get("thinking"), pieces)
            if isinstance(start.get("signature"), str):
                block.signature.append(start["signature"])
        elif kind == "redacted_thinking" and isinstance(start.get("data"), str):  # no text: its data goes back
            pieces.append(EndPiece("reasoning", {"anthropic": {"redactedData": start["data"]}}))
        elif kind == "tool_use":
            given = start.get("id")
            call = ToolCall(id=given if isinstance(given, str) and given else self._new_id(), name="", index=index)
            if isinstance(start.get("name"), str):
                call.name = start["name"]
            block.call = call
            self.calls.append(call)
            pieces.append(CallPiece(call, True, ""))  # its input comes in input_json_delta pieces

    def _delta(self, index: int, delta: dict[str, Any], pieces: list[Piece]) -> None:
        block = self.blocks.get(index)
        if block is None:  # a delta with no start: a block of the delta's kind, opened here
            kind = {"text_delta": "text", "thinking_delta": "thinking"}.get(str(delta.get("type")))
            if kind is None:
                return
            block = self.blocks[index] = Block(index, kind, start={"type": kind})
        kind = delta.get("type")
        if kind == "text_delta":
            self._text(block, "text", delta.get("text"), pieces)
        elif kind == "thinking_delta":
            self._text(block, "reasoning", delta.get("thinking"), pieces)
        elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
            block.signature.append(delta["signature"])
        elif kind == "input_json_delta":
            partial = delta.get("partial_json")
            if not isinstance(partial, str) or not partial:
                return
            if block.call is not None:
                block.call.arguments.append(partial)
                pieces.append(CallPiece(block.call, False, partial))
            else:  # a server tool's input (server_tool_use, mcp_tool_use): kept for the next request, not run here
                block.text.append(partial)

    def _stop(self, block: Block, pieces: list[Piece]) -> None:
        """A block ends: a thinking block's part ends with its signature (not reasoning text: it goes back with it)."""
        block.stopped = True
        if block.type == "thinking" and block.signature:
            pieces.append(EndPiece("reasoning", {"anthropic": {"signature": "".join(block.signature)}}))

    def _text(self, block: Block, kind: PieceKind, text: Any, pieces: list[Piece]) -> None:
        if isinstance(text, str) and text:
            block.text.append(text)
            pieces.append(TextPiece(kind, text))

    def _whole(self, whole: dict[str, Any], pieces: list[Piece]) -> None:
        """A whole ``message``: its content blocks, stop reason and usage."""
        content = whole.get("content")
        if whole.get("type") != "message" or not isinstance(content, list):
            raise MalformedChunkError(
                f"the answer is one JSON object that is not a message: {(self.last or '')[:_SHOWN]}",
                chunk=(self.last or "")[:_SHOWN],
            )
        self._message(whole)
        for index, block in enumerate(content):
            if isinstance(block, dict):
                self._start(index, block, pieces)
                self._stop(self.blocks[index], pieces)
                call, given = self.blocks[index].call, block.get("input")
                if call is not None and isinstance(given, dict) and given:  # a whole message has the whole input
                    arguments = json.dumps(given, separators=(",", ":"))
                    call.arguments.append(arguments)
                    pieces.append(CallPiece(call, False, arguments))
        self.raw_finish = str(whole.get("stop_reason") or "end_turn")


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _raise_error(body: dict[str, Any]) -> None:
    """``ProviderReportedError`` for an error event's data: typed by ``error.type``, not by the HTTP status."""
    error = body.get("error")
    if isinstance(error, dict):
        kind = error.get("type")
        message = error.get("message") or json.dumps(error)[:_SHOWN]
    else:
        kind, message = None, json.dumps(body)[:_SHOWN]
    kind = kind if isinstance(kind, str) else None
    exc = ProviderReportedError(f"the provider sent an error in the answer: {kind or 'error'}: {message}", code=kind)
    exc.status_code = ERROR_STATUS.get(kind or "")
    raise exc
