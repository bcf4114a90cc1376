"""The OpenAI Responses API decoder: one streamed response, from its bytes to the pieces of one turn (no I/O).

    answer = ResponsesAnswer(content_type=response.headers.get("content-type"))
    for data in network_chunks:
        for piece in answer.feed(data):     # TextPiece (text, reasoning, refusal) and CallPiece, in order
            ...
        if answer.error: raise answer.error
    answer.close()                          # the end of the bytes: raises IncompleteStreamError if it was cut

The same interface and pieces as the chat-completions decoder (``ors_lab.agents.chat``), for the typed
events of ``POST /responses`` with ``stream: true``:

- SSE framing through the one SSE decoder (``ors_lab.protocol.sse``). Each event's data is one JSON
  object whose ``type`` says what it is (the ``event:`` line, when there is none); one that is not
  JSON is a ``MalformedChunkError``. ``data: [DONE]`` (which some gateways add) ends the reading, as
  the SDK does; it does not complete the answer. ``sequence_number`` is kept (``last_sequence``).
- ``response.created`` / ``response.in_progress``: the response's id and model.
- ``response.output_item.added`` / ``.done`` for ``message``, ``reasoning`` and ``function_call`` items;
  the done items are kept (``items``) to be sent back as the next request's input. A function call
  is a ``ToolCall`` whose id is the item's ``call_id`` (what ``function_call_output`` takes), not the
  item id.
- ``response.output_text.delta`` is text, ``response.refusal.delta`` a refusal,
  ``response.reasoning_summary_text.delta`` (and raw ``response.reasoning_text.delta``) reasoning;
  ``response.function_call_arguments.delta`` / ``.done`` the arguments of the call at its
  ``output_index``, else its ``item_id``: an item is found by its position first, because item ids can
  change mid-stream (GitHub Copilot's gateway gives every event a new one).
- ``response.completed`` completes the answer; ``response.incomplete`` completes it too, with its
  ``incomplete_details.reason`` (``max_output_tokens`` is finish reason ``length``, ``content_filter``
  ``content-filter``, any other ``other``), and its tool calls must not run; both carry the usage
  (input, output, of them reasoning, of the input cached).
- ``response.failed`` (its ``response.error``) and an ``error`` event (on HTTP 200) are
  ``ProviderReportedError`` with the provider's message and code; a body with a top-level ``error``
  object too.

A body that is one JSON ``response`` object (sent to a ``stream: true`` request) is read as one whole
turn. An answer is complete once ``response.completed`` or ``response.incomplete`` came; ``close()``
on one that is not raises ``IncompleteStreamError``. ``where()`` says how far it got.
"""

from __future__ import annotations

import json
from typing import Any

from ors_lab.agents.chat import (
    CallPiece,
    EndPiece,
    Piece,
    PieceKind,
    StreamedAnswer,
    TextPiece,
    ToolCall,
    _raise_error_object,
    shown,
)
from ors_lab.protocol.errors import (
    IncompleteStreamError,
    MalformedChunkError,
    ProviderReportedError,
)
from ors_lab.protocol.sse import ServerSentEvent

__all__ = ["INCOMPLETE_REASONS", "ResponsesAnswer", "usage_tokens"]

INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content-filter"}
"""``incomplete_details.reason`` by ors_lab's finish reason; any other is ``other``."""

_SHOWN = 200  # characters of an event an error quotes
_TEXT: dict[str, PieceKind] = {
    "response.output_text.delta": "text",
    "response.refusal.delta": "refusal",
    "response.reasoning_summary_text.delta": "reasoning",
    "response.reasoning_text.delta": "reasoning",
}


def usage_tokens(usage: Any) -> dict[str, int | None] | None:
    """A Responses ``usage`` object as ``Episode.record_usage`` takes it (None when there is none)."""
    if not isinstance(usage, dict):
        return None

    def number(value: Any) -> int | None:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    inputs, outputs = usage.get("input_tokens_details"), usage.get("output_tokens_details")
    return {
        "input_tokens": number(usage.get("input_tokens")),
        "output_tokens": number(usage.get("output_tokens")),
        "reasoning_tokens": number(outputs.get("reasoning_tokens")) if isinstance(outputs, dict) else None,
        "cached_tokens": number(inputs.get("cached_tokens")) if isinstance(inputs, dict) else None,
    }


class ResponsesAnswer(StreamedAnswer):
    """One Responses API answer being decoded; see the module docstring.

    After ``feed`` check ``error``: a bad event stops the answer there, ``feed`` returning the pieces
    before it; every later ``feed`` raises it. ``close()`` ends the bytes.
    """

    _unit = "event"

    def __init__(self, *, content_type: str | None = None, new_id: Any = None) -> None:
        super().__init__(content_type)
        self._new_id = new_id or (lambda: f"call-{len(self.calls) + 1}")
        self.calls: list[ToolCall] = []
        self._by_index: dict[int, ToolCall] = {}
        self._by_item: dict[str, ToolCall] = {}
        self._items: dict[int, dict[str, Any]] = {}
        self.raw_finish: str | None = None  # "completed" or "incomplete"
        self.incomplete_reason: str | None = None
        self.usage: dict[str, int | None] | None = None
        self.model: str | None = None
        self.response_id: str | None = None
        self.refused = False
        self.done = False  # [DONE] came
        self.other_choices: set[int] = set()  # a response has one output: always empty (the chat decoder's field)
        self.last_type: str | None = None
        self.last_sequence: int | None = None

    # -- what the answer says ----------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        """True once ``response.completed`` or ``response.incomplete`` came."""
        return self.raw_finish is not None

    @property
    def incomplete(self) -> bool:
        """True when the response ended ``incomplete`` (its tool calls must not run)."""
        return self.raw_finish == "incomplete"

    @property
    def finish_reason(self) -> str:
        """ors_lab's finish reason: ``refusal``, ``length`` / ``content-filter`` / ``other`` for an
        incomplete response, ``tool-calls`` when it called tools, else ``stop``."""
        if self.refused:
            return "refusal"
        if self.incomplete:
            return INCOMPLETE_REASONS.get(self.incomplete_reason or "", "other")
        return "tool-calls" if self.calls else "stop"

    @property
    def items(self) -> list[dict[str, Any]]:
        """The response's output items as they were done, in output order: the next request's input."""
        return [self._items[i] for i in sorted(self._items)]

    def summary(self) -> str:
        """The finish reason, and an incomplete response's reason."""
        said = super().summary()
        if self.incomplete:
            said += f" (incomplete: {self.incomplete_reason or 'no reason given'})"
        return said

    def where(self) -> str:
        """How far the answer got: bytes and events received, the last event, a tool call left open."""
        said = f"{self.chunks} events received ({self.data_bytes} bytes of event data)"
        if self.last_sequence is not None:
            said += f", up to sequence_number {self.last_sequence}"
        if self.last is not None:
            said += f"; the last event: {shown(self.last)}"
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
            self._event(self._parse(event.data), event.event, pieces)

    def close(self) -> list[Piece]:
        """The end of the bytes: the pieces of a whole-JSON answer; ``IncompleteStreamError`` for an
        answer that ended before ``response.completed`` or ``response.incomplete`` (its calls must not run)."""
        if self.error is not None:
            raise self.error
        pieces: list[Piece] = []
        if self._json:
            whole = self._parse(self._body_text())
            self._whole(whole.get("response", whole), pieces)
        if not self.complete:
            raise IncompleteStreamError(
                f"incomplete stream: the response ended with no response.completed or response.incomplete; "
                f"{self.where()}"
            )
        return pieces

    def _parse(self, data: str) -> dict[str, Any]:
        value = self._object(data)
        sequence = value.get("sequence_number")
        if isinstance(sequence, int) and not isinstance(sequence, bool):
            self.last_sequence = sequence
        return value

    def _event(self, event: dict[str, Any], name: str | None, pieces: list[Piece]) -> None:
        kind = event.get("type")
        if not isinstance(kind, str):  # a gateway's error object has no type
            _raise_error_object(event)
            kind = name
        self.last_type = kind
        if kind in _TEXT:
            delta = event.get("delta")
            if isinstance(delta, str) and delta:
                if kind == "response.refusal.delta":
                    self.refused = True
                pieces.append(TextPiece(_TEXT[kind], delta))
        elif kind == "response.function_call_arguments.delta":
            call = self._call_of(event)
            delta = event.get("delta")
            if call is not None and isinstance(delta, str) and delta:
                call.arguments.append(delta)
                pieces.append(CallPiece(call, False, delta))
        elif kind == "response.function_call_arguments.done":
            call = self._call_of(event)
            if call is not None and not call.arguments:  # no deltas came: the whole arguments now
                self._arguments(call, event.get("arguments"), pieces)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            self._item(event, kind.endswith(".done"), pieces)
        elif kind in ("response.created", "response.in_progress"):
            self._response(event.get("response"))
        elif kind in ("response.completed", "response.incomplete"):
            response = event.get("response")
            self._response(response)
            self.raw_finish = kind.removeprefix("response.")
            if isinstance(response, dict):
                self._finish(response)
        elif kind == "response.failed":
            response = event.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            error = error if isinstance(error, dict) else {}
            message = error.get("message") or "the response failed"
            raise ProviderReportedError(f"the provider failed the response: {message}", code=error.get("code"))
        elif kind == "error":
            inner = event.get("error")
            error = inner if isinstance(inner, dict) else event
            message = error.get("message") or json.dumps(error)[:_SHOWN]
            code = error.get("code") if error.get("code") is not None else error.get("type")
            raise ProviderReportedError(f"the provider sent an error in the answer: {message}", code=code)

    def _response(self, response: Any) -> None:
        if isinstance(response, dict):
            if isinstance(response.get("id"), str):
                self.response_id = response["id"]
            if isinstance(response.get("model"), str):
                self.model = response["model"]

    def _finish(self, response: dict[str, Any]) -> None:
        usage = usage_tokens(response.get("usage"))
        if usage is not None:
            self.usage = usage
        details = response.get("incomplete_details")
        if isinstance(details, dict) and isinstance(details.get("reason"), str):
            self.incomplete_reason = details["reason"]
        output = response.get("output")
        if isinstance(output, list):  # an item whose .done never came: as the response has it
            for index, item in enumerate(output):
                if isinstance(item, dict) and index not in self._items:
                    self._items[index] = item

    def _item(self, event: dict[str, Any], done: bool, pieces: list[Piece]) -> None:
        item = event.get("item")
        if not isinstance(item, dict):
            return
        index = event.get("output_index")
        index = index if isinstance(index, int) and not isinstance(index, bool) else len(self._items)
        if done:
            self._items[index] = item
            self._ended(item, pieces)
        if item.get("type") != "function_call":
            return
        call = self._by_index.get(index)
        if call is None:  # .added opens the call (or .done, when no .added came)
            given = item.get("call_id")
            call = ToolCall(id=given if isinstance(given, str) and given else self._new_id(), name="", index=index)
            self.calls.append(call)
            self._by_index[index] = call
            pieces.append(CallPiece(call, True, ""))
        if isinstance(item.get("id"), str):
            self._by_item[item["id"]] = call
        if not call.name and isinstance(item.get("name"), str):
            call.name = item["name"]
        if done and isinstance(item.get("id"), str):
            call.metadata = {"openai": {"itemId": item["id"]}}
        if not call.arguments:
            self._arguments(call, item.get("arguments"), pieces)

    @staticmethod
    def _ended(item: dict[str, Any], pieces: list[Piece]) -> None:
        """A reasoning or message item is done: its part ends with the item's id (and a reasoning item's
        encrypted content), so that the item can be sent back."""
        kind, item_id = item.get("type"), item.get("id")
        if not isinstance(item_id, str):
            return
        if kind == "reasoning":
            said: dict[str, Any] = {"itemId": item_id}
            if isinstance(item.get("encrypted_content"), str):
                said["reasoningEncryptedContent"] = item["encrypted_content"]
            pieces.append(EndPiece("reasoning", {"openai": said}))
        elif kind == "message" and item.get("content"):
            pieces.append(EndPiece("text", {"openai": {"itemId": item_id}}))

    def _call_of(self, event: dict[str, Any]) -> ToolCall | None:
        """The call an arguments event belongs to: at its output_index, else by its item_id; the latest only for
        an event that names neither (one that names an unknown item belongs to no call yet: its ``.done`` opens it)."""
        index = event.get("output_index")
        if isinstance(index, int) and index in self._by_index:
            return self._by_index[index]
        item_id = event.get("item_id")
        if isinstance(item_id, str) and item_id in self._by_item:
            return self._by_item[item_id]
        named = isinstance(index, int) or isinstance(item_id, str)
        return self.calls[-1] if self.calls and not named else None

    def _arguments(self, call: ToolCall, arguments: Any, pieces: list[Piece]) -> None:
        if not isinstance(arguments, str):  # some servers send the arguments as an object
            arguments = "" if arguments is None else json.dumps(arguments, separators=(",", ":"))
        if arguments:
            call.arguments.append(arguments)
            pieces.append(CallPiece(call, False, arguments))

    def _whole(self, response: Any, pieces: list[Piece]) -> None:
        """A whole ``response`` object: its output items' text, reasoning, refusal and calls, and its end."""
        if not isinstance(response, dict):
            raise MalformedChunkError(f"the answer is one JSON value, not a response: {(self.last or '')[:_SHOWN]}",
                                      chunk=(self.last or "")[:_SHOWN])  # fmt: skip
        _raise_error_object(response)
        self._response(response)
        output = response.get("output")
        for index, item in enumerate(output if isinstance(output, list) else []):
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "reasoning":
                for part in item.get("summary") or []:
                    if isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"]:
                        pieces.append(TextPiece("reasoning", part["text"]))
            elif kind == "message":
                for part in item.get("content") or []:
                    if not isinstance(part, dict):
                        continue
                    if part.get("type") == "refusal" and isinstance(part.get("refusal"), str) and part["refusal"]:
                        self.refused = True
                        pieces.append(TextPiece("refusal", part["refusal"]))
                    elif isinstance(part.get("text"), str) and part["text"]:
                        pieces.append(TextPiece("text", part["text"]))
            self._item({"item": item, "output_index": index}, True, pieces)
        status = response.get("status")
        self.raw_finish = "incomplete" if status == "incomplete" else "completed"
        if status == "failed":
            given = response.get("error")
            error = given if isinstance(given, dict) else {}
            raise ProviderReportedError(f"the provider failed the response: {error.get('message') or status}",
                                        code=error.get("code"))  # fmt: skip
        self._finish(response)
