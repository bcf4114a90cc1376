"""The chat-completions decoder: one provider answer, from its bytes to the pieces of one turn (no I/O).

    answer = ChatAnswer(content_type=response.headers.get("content-type"))
    for data in network_chunks:
        for piece in answer.feed(data):     # TextPiece (text, reasoning, refusal) and CallPiece, in order
            ...
        if answer.error: raise answer.error
    answer.close()                          # the end of the bytes: raises IncompleteStreamError if it was cut

It reads what OpenAI-compatible servers really send, not only what OpenAI documents:

- SSE framing through the one SSE decoder (``ors_lab.protocol.sse``: LF, CRLF or CR, comments kept
  apart); ``data: [DONE]`` ends the answer. A body that is one JSON object instead (a whole
  ``chat.completion`` sent to a ``stream: true`` request) is read as one whole turn.
- Each event's data is one JSON object ("chunk"). One that is not is a ``MalformedChunkError``
  naming the chunk; an error object (a top-level ``error``, as OpenAI, OpenRouter, Groq and LiteLLM
  send it, or vLLM's ``"object": "error"``) is a ``ProviderReportedError`` with its message and code.
- Only choice 0 is read (a choice without ``index`` is choice 0); other choices (``n > 1``) are
  counted in ``other_choices``. A choice with no ``delta`` (Azure's content-filter chunks) gives only
  its ``finish_reason``.
- ``delta.content`` is text, or a list of content parts: ``text`` parts are text, ``thinking`` parts
  (Mistral) reasoning. ``delta.reasoning_content`` (DeepSeek, vLLM, Qwen, Kimi), else
  ``delta.reasoning`` (OpenRouter, Groq), is reasoning; ``delta.refusal`` a refusal.
- Tool-call deltas are placed by their ``id`` first: an id not seen before starts a new call (also at
  an index already used), a known id continues its call; a delta without id goes to the latest call
  opened at its ``index``, or without index to the latest call opened.
- The finish reason is choice 0's last; the usage the last top-level ``usage`` (else Groq's
  ``x_groq.usage``).

An answer is complete once a finish reason or ``[DONE]`` came; ``close()`` on one that is not raises
``IncompleteStreamError``, and its tool calls must not run. ``where()`` says how far an answer got
(bytes, chunks, the last chunk, an open tool call), for the message of a cut connection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ors_lab.protocol.errors import (
    IncompleteStreamError,
    MalformedChunkError,
    MalformedStreamError,
    ProviderReportedError,
    ProviderStreamError,
)
from ors_lab.protocol.sse import ServerSentEvent, SSEDecoder

__all__ = [
    "FINISH_REASONS",
    "Answer",
    "CallPiece",
    "ChatAnswer",
    "EndPiece",
    "TextPiece",
    "ToolCall",
    "finish_reason",
    "tool_input",
]

FINISH_REASONS = {
    "stop": "stop",
    "end_turn": "stop",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "length": "length",
    "content_filter": "content-filter",
}
"""A provider's ``finish_reason`` by ors_lab's name (``ors_lab.events.FINISH_REASONS``); any other is ``other``."""

PieceKind = Literal["text", "reasoning", "refusal"]
_SHOWN = 200  # characters of a chunk an error quotes


def finish_reason(raw: str | None, *, refusal: bool = False) -> str:
    """ors_lab's finish reason for a provider's: ``refusal`` when the model refused, ``stop`` when none was said."""
    if refusal:
        return "refusal"
    if raw is None:
        return "stop"
    return FINISH_REASONS.get(raw, "other")


@dataclass
class ToolCall:
    """One tool call of the answer: its id (the provider's, else one made up), name and argument pieces."""

    id: str
    name: str
    index: int | None
    arguments: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    """What the provider said of the call beyond its name and arguments, by provider (the Responses API's item
    id: ``{"openai": {"itemId": "fc_..."}}``), published with its ``tool-input-end``."""

    @property
    def text(self) -> str:
        """The arguments as streamed, joined."""
        return "".join(self.arguments)


def tool_input(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as the tool's input: exactly one JSON object (nothing at all is ``{}``);
    ``ValueError`` saying why otherwise, so the call is never run on arguments that are not."""
    text = call.text
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"the arguments are not one JSON value ({exc}): {text[:_SHOWN]}") from None
    if not isinstance(value, dict):
        raise ValueError(f"the arguments must be a JSON object, not {text[:_SHOWN]}")
    return value


@dataclass(frozen=True, slots=True)
class TextPiece:
    """A piece of the answer's text, reasoning or refusal."""

    kind: PieceKind
    text: str


@dataclass(frozen=True, slots=True)
class CallPiece:
    """A tool-call delta: ``started`` on the first delta of ``call``; ``arguments``, this delta's piece."""

    call: ToolCall
    started: bool
    arguments: str


@dataclass(frozen=True, slots=True)
class EndPiece:
    """The end of a reasoning or text part, with what the provider said of it beyond its text (``metadata``, by
    provider: an Anthropic thinking block's signature, a Responses item's id), kept so that the part can be sent
    back. A part with no text but its metadata (Anthropic's redacted thinking) is one ``EndPiece`` alone."""

    kind: Literal["text", "reasoning"]
    metadata: dict[str, Any]


Piece = TextPiece | CallPiece | EndPiece


class Answer(Protocol):
    """What a wire format's decoder of one answer offers (``ChatAnswer``; ``ResponsesAnswer`` of
    ``ors_lab.agents.responses``; ``MessagesAnswer`` of ``ors_lab.agents.messages``): bytes in, pieces out,
    and what the answer came to."""

    @property
    def calls(self) -> list[ToolCall]: ...

    @property
    def usage(self) -> dict[str, int | None] | None: ...

    @property
    def other_choices(self) -> set[int]: ...

    @property
    def error(self) -> ProviderStreamError | ProviderReportedError | None: ...

    @property
    def finish_reason(self) -> str: ...

    def feed(self, data: bytes) -> list[Piece]: ...

    def close(self) -> list[Piece]: ...

    def where(self) -> str: ...

    def summary(self) -> str: ...


class StreamedAnswer:
    """What every wire format's decoder does alike (``ChatAnswer``, ``ResponsesAnswer``, ``MessagesAnswer``):
    the bytes are one JSON answer (by their content type, else their first byte) or an event stream read
    by the one SSE decoder, and the first bad event stops the answer, ``error`` holding why. A format
    reads each event in ``_take`` and says how far it got in ``where``."""

    _unit = "chunk"
    """What an error calls one event of the format."""

    def __init__(self, content_type: str | None) -> None:
        self._json = content_type is not None and "json" in content_type.lower()
        self._sniffed = self._json
        self._sse = SSEDecoder()
        self._body: list[bytes] = []
        self.error: ProviderStreamError | ProviderReportedError | None = None
        self.chunks = 0  # events read (or 1: a whole-JSON answer)
        self.data_bytes = 0
        self.last: str | None = None  # the last event's data, as sent

    def where(self) -> str:
        raise NotImplementedError

    @property
    def finish_reason(self) -> str:
        raise NotImplementedError

    def summary(self) -> str:
        """What the answer came to, as its block-end says: its finish reason (a format adds what else it knows)."""
        return f"finish: {self.finish_reason}"

    def _take(self, event: ServerSentEvent, pieces: list[Piece]) -> None:
        """Read one event of the stream, appending the pieces it completes."""
        raise NotImplementedError

    def feed(self, data: bytes) -> list[Piece]:
        """The pieces ``data`` completes, in order (see the class docstring for ``error``)."""
        if self.error is not None:
            raise self.error
        if not self._sniffed:
            head = data.lstrip()
            if head:
                self._sniffed = True
                self._json = head[:1] == b"{"
        if self._json:
            self._body.append(data)
            return []
        pieces: list[Piece] = []
        try:
            items = self._sse.feed(data)
        except MalformedStreamError as exc:  # a line past the SSE bound: the provider's bytes, not our code
            self.error = ProviderStreamError(f"the answer is not a readable event stream ({exc}); {self.where()}")
            return pieces
        for item in items:
            if not isinstance(item, ServerSentEvent):
                continue
            try:
                self._take(item, pieces)
            except (ProviderStreamError, ProviderReportedError) as exc:
                self.error = exc
                return pieces
        if self._sse.error is not None:
            self.error = ProviderStreamError(f"the answer is not a readable event stream ({self._sse.error})")
        return pieces

    def _body_text(self) -> str:
        """A whole-JSON answer's text, once its bytes ended."""
        return b"".join(self._body).decode("utf-8", "replace")

    def _object(self, data: str) -> dict[str, Any]:
        """An event's data (or the whole answer) as the JSON object it must be, counted; else
        ``MalformedChunkError``."""
        self.chunks += 1
        self.data_bytes += len(data.encode())
        self.last = data
        try:
            value = json.loads(data)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise MalformedChunkError(
                f"malformed {self._unit} {self.chunks} of the answer (not a JSON object): {data[:_SHOWN]}",
                chunk=data[:_SHOWN],
            )
        return value


def shown(text: str) -> str:
    """An event's data as an error quotes it: whole up to ``_SHOWN`` characters, else its two ends."""
    return text if len(text) <= _SHOWN else f"{text[:80]} ... {text[-(_SHOWN - 80) :]}"


class ChatAnswer(StreamedAnswer):
    """One chat-completions answer being decoded; see the module docstring.

    After ``feed`` check ``error``: a bad chunk stops the answer there, ``feed`` returning the pieces
    before it; every later ``feed`` raises it. ``close()`` ends the bytes.
    """

    def __init__(self, *, content_type: str | None = None, new_id: Any = None) -> None:
        super().__init__(content_type)
        self._new_id = new_id or (lambda: f"call-{len(self.calls) + 1}")
        self.calls: list[ToolCall] = []
        self._by_id: dict[str, ToolCall] = {}
        self._by_index: dict[int, ToolCall] = {}
        self.raw_finish: str | None = None
        self.usage: dict[str, int | None] | None = None
        self.model: str | None = None
        self.refused = False
        self.done = False  # [DONE] came
        self.other_choices: set[int] = set()

    # -- what the answer says ----------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        """True once ``[DONE]`` or a finish reason came."""
        return self.done or self.raw_finish is not None

    @property
    def finish_reason(self) -> str:
        """ors_lab's finish reason for the answer (``finish_reason()``)."""
        return finish_reason(self.raw_finish, refusal=self.refused)

    def summary(self) -> str:
        """The finish reason, and the other choices that came and were ignored."""
        said = super().summary()
        others = len(self.other_choices)
        if others:
            said += f"; {others} other choice{'s' if others > 1 else ''} came and {'were' if others > 1 else 'was'} "
            said += "ignored (only choice 0 is read)"
        return said

    def where(self) -> str:
        """How far the answer got: bytes and chunks received, the last chunk, a tool call left open."""
        said = f"{self.chunks} chunks received ({self.data_bytes} bytes of chunk data)"
        if self.last is not None:
            said += f"; the last chunk: {shown(self.last)}"
        if self.calls and not self.complete:
            call = self.calls[-1]
            said += f"; tool call {call.id} ({call.name or 'no name yet'}) was open"
        return said

    # -- reading -----------------------------------------------------------------------------------

    def _take(self, event: ServerSentEvent, pieces: list[Piece]) -> None:
        if self.done:
            return
        if event.data == "[DONE]":
            self.done = True
        elif event.data or event.event is not None:
            self._chunk(self._parse(event.data), pieces)

    def close(self) -> list[Piece]:
        """The end of the bytes: the pieces of a whole-JSON answer; ``IncompleteStreamError`` for an
        answer that ended before its finish reason and ``[DONE]`` (its tool calls must not run)."""
        if self.error is not None:
            raise self.error
        pieces: list[Piece] = []
        if self._json:
            whole = self._parse(self._body_text())
            self._whole(whole, pieces)
        if not self.complete:
            raise IncompleteStreamError(
                f"incomplete stream: the answer ended with no finish_reason and no [DONE]; {self.where()}"
            )
        return pieces

    def _parse(self, data: str) -> dict[str, Any]:
        value = self._object(data)
        _raise_error_object(value)
        if isinstance(value.get("model"), str):
            self.model = value["model"]
        return value

    def _chunk(self, chunk: dict[str, Any], pieces: list[Piece]) -> None:
        self._usage(chunk)
        for choice in _choices(chunk):
            if not self._first(choice):
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._message(delta, pieces)
            if choice.get("finish_reason"):
                self.raw_finish = str(choice["finish_reason"])

    def _whole(self, whole: dict[str, Any], pieces: list[Piece]) -> None:
        """A whole ``chat.completion``: its choice 0's message, finish reason and usage."""
        self._usage(whole)
        for choice in _choices(whole):
            if not self._first(choice):
                continue
            message = choice.get("message") or choice.get("delta")
            if isinstance(message, dict):
                self._message(message, pieces)
            self.raw_finish = str(choice.get("finish_reason") or "stop")
        if self.raw_finish is None:
            raise MalformedChunkError(
                f"the answer is one JSON object with no choices: {self.last and self.last[:_SHOWN]!r}",
                chunk=(self.last or "")[:_SHOWN],
            )

    def _first(self, choice: dict[str, Any]) -> bool:
        index = choice.get("index", 0)
        if index in (0, None):
            return True
        self.other_choices.add(index if isinstance(index, int) else -1)
        return False

    def _usage(self, chunk: dict[str, Any]) -> None:
        usage = chunk.get("usage")
        if not isinstance(usage, dict):
            groq = chunk.get("x_groq")
            usage = groq.get("usage") if isinstance(groq, dict) else None
        if isinstance(usage, dict):
            self.usage = _tokens(usage)

    def _message(self, delta: dict[str, Any], pieces: list[Piece]) -> None:
        reasoning = delta.get("reasoning_content")
        if not isinstance(reasoning, str) or not reasoning:
            reasoning = delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            self._text("reasoning", reasoning, pieces)
        content = delta.get("content")
        if isinstance(content, str):
            self._text("text", content, pieces)
        elif isinstance(content, list):
            for part in content:
                self._part(part, pieces)
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self.refused = True
            self._text("refusal", refusal, pieces)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict):
                    self._call(call, pieces)

    def _part(self, part: Any, pieces: list[Piece]) -> None:
        if not isinstance(part, dict):
            return
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            self._text("text", part["text"], pieces)
        elif kind == "thinking":
            thinking = part.get("thinking")
            if isinstance(thinking, str):
                self._text("reasoning", thinking, pieces)
            elif isinstance(thinking, list):
                for inner in thinking:
                    if isinstance(inner, dict) and isinstance(inner.get("text"), str):
                        self._text("reasoning", inner["text"], pieces)

    def _text(self, kind: PieceKind, text: str, pieces: list[Piece]) -> None:
        if text:
            pieces.append(TextPiece(kind, text))

    def _call(self, delta: dict[str, Any], pieces: list[Piece]) -> None:
        given = delta.get("id")
        call_id = given if isinstance(given, str) and given else None
        index = delta.get("index")
        index = index if isinstance(index, int) and not isinstance(index, bool) else None
        function = delta.get("function")
        function = function if isinstance(function, dict) else {}
        name = function.get("name")
        arguments = function.get("arguments")
        if not isinstance(arguments, str):  # some servers send the arguments as an object
            arguments = "" if arguments is None else json.dumps(arguments, separators=(",", ":"))
        if call_id is not None:
            call = self._by_id.get(call_id)
        elif index is not None:
            call = self._by_index.get(index)
        else:
            call = self.calls[-1] if self.calls else None
        started = call is None
        if call is None:
            call = ToolCall(id=call_id or self._new_id(), name="", index=index)
            self.calls.append(call)
            self._by_id[call.id] = call
            if index is not None:
                self._by_index[index] = call
        if not call.name and isinstance(name, str) and name:
            call.name = name
        if arguments:
            call.arguments.append(arguments)
        pieces.append(CallPiece(call, started, arguments))


def _choices(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    choices = chunk.get("choices")
    return [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


def _raise_error_object(chunk: dict[str, Any]) -> None:
    """``ProviderReportedError`` for a chunk that is an error object, in any of the shapes servers send."""
    error = chunk.get("error")
    if chunk.get("object") == "error":  # vLLM
        error = chunk
    if error is None or error is False:
        return
    if isinstance(error, dict):
        message = error.get("message") or error.get("detail") or json.dumps(error)[:_SHOWN]
        code = error.get("code") if error.get("code") is not None else error.get("type")
        metadata = error.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("raw"), str):  # OpenRouter: the upstream's words
            message = f"{message}: {metadata['raw'][:_SHOWN]}"
    else:
        message, code = str(error), None
    raise ProviderReportedError(f"the provider sent an error in the answer: {message}", code=code)


def _tokens(usage: dict[str, Any]) -> dict[str, int | None]:
    def number(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    completion = usage.get("completion_tokens_details")
    prompt = usage.get("prompt_tokens_details")
    return {
        "input_tokens": number(usage.get("prompt_tokens")),
        "output_tokens": number(usage.get("completion_tokens")),
        "reasoning_tokens": number(completion.get("reasoning_tokens")) if isinstance(completion, dict) else None,
        "cached_tokens": number(prompt.get("cached_tokens")) if isinstance(prompt, dict) else None,
    }
