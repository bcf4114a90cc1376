"""An independent reader of one OpenAI Responses API stream, written from the API's event reference alone.

    reading = read_response(Path("tests/wild/streams/responses/openai-gpt-4o-refusal.sse").read_bytes())
    reading.refusal, reading.finish_reason  # ("I'm sorry, I can't assist with that.", "refusal")

It is a second implementation of what ``ors_lab.agents.responses`` must make of a stream, kept small and
plain (it imports nothing from ors_lab), so that the suite can say what the agent must have read:
text from ``response.output_text.delta``, reasoning from ``response.reasoning_summary_text.delta``, a
refusal from ``response.refusal.delta``; function calls from the ``function_call`` items, by their
``output_index`` (item ids are not trusted: a gateway rotates them), named by their ``call_id``, with
the arguments of their deltas (or of ``.done`` when none came); the usage of the response's last
``response.completed`` / ``response.incomplete``; ``response.failed`` and ``error`` as provider errors.
An SSE event that the bytes end in the middle of is dropped, as the SSE specification says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.wild.reading import sse_data

__all__ = ["ResponseReading", "read_response"]

INCOMPLETE_NAMES = {"max_output_tokens": "length", "content_filter": "content-filter"}


@dataclass
class ResponseReading:
    """What one response said; ``error`` is "provider", "incomplete" or None."""

    reasoning: str = ""
    text: str = ""
    refusal: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"id": call_id, "name", "arguments"}
    usage: dict[str, int | None] | None = None
    finish_reason: str | None = None
    incomplete_reason: str | None = None
    error: str | None = None
    error_message: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)  # the output items as done, in output order


def read_response(data: bytes) -> ResponseReading:
    """One Responses stream's bytes, read as the API's event reference describes them."""
    reading = ResponseReading()
    calls: dict[int, dict[str, Any]] = {}
    items: dict[int, dict[str, Any]] = {}
    ended: str | None = None
    for text in sse_data(data):
        if text == "[DONE]":
            break
        event = json.loads(text)
        kind = event.get("type")
        if kind == "response.output_text.delta":
            reading.text += event["delta"]
        elif kind == "response.reasoning_summary_text.delta":
            reading.reasoning += event["delta"]
        elif kind == "response.refusal.delta":
            reading.refusal += event["delta"]
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item, index = event["item"], event["output_index"]
            if kind.endswith(".done"):
                items[index] = item
            if item.get("type") == "function_call":
                call = calls.setdefault(index, {"id": item.get("call_id"), "name": item.get("name"), "arguments": ""})
                if kind.endswith(".done") and not call["arguments"]:
                    call["arguments"] = item.get("arguments") or ""
        elif kind == "response.function_call_arguments.delta":
            calls[event["output_index"]]["arguments"] += event["delta"]
        elif kind == "response.function_call_arguments.done":
            call = calls[event["output_index"]]
            call["arguments"] = call["arguments"] or event.get("arguments") or ""
        elif kind in ("response.completed", "response.incomplete"):
            ended = kind
            response = event["response"]
            usage = response.get("usage")
            if usage:
                outputs, inputs = usage.get("output_tokens_details") or {}, usage.get("input_tokens_details") or {}
                reading.usage = {"input_tokens": usage.get("input_tokens"), "output_tokens": usage.get("output_tokens"),
                                 "reasoning_tokens": outputs.get("reasoning_tokens"),
                                 "cached_tokens": inputs.get("cached_tokens")}  # fmt: skip
            if kind == "response.incomplete":
                reading.incomplete_reason = (response.get("incomplete_details") or {}).get("reason")
        elif kind == "response.failed":
            reading.error, reading.error_message = "provider", event["response"]["error"]["message"]
            break
        elif kind == "error":
            reading.error, reading.error_message = "provider", event["message"]
            break
    reading.tool_calls = [calls[i] for i in sorted(calls)]
    reading.items = [items[i] for i in sorted(items)]
    if reading.error is None and ended is None:
        reading.error, reading.error_message = "incomplete", "incomplete stream"
    if reading.refusal:
        reading.finish_reason = "refusal"
    elif ended == "response.incomplete":
        reading.finish_reason = INCOMPLETE_NAMES.get(reading.incomplete_reason or "", "other")
    elif ended is not None:
        reading.finish_reason = "tool-calls" if reading.tool_calls else "stop"
    return reading
