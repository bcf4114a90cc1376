"""An independent reader of one Anthropic Messages stream, written from the API's documentation alone.

    reading = read_messages(Path("tests/wild/streams/messages/claude-3-opus-sdk-text.sse").read_bytes())
    reading.text, reading.finish_reason  # ("Hello there!", "stop")

A second implementation, kept small and plain, so that the suite can say what the agent's decoder must
have made of a provider's bytes; it imports nothing from ors_lab. It reads as the official SDK does:
an event with no ``event:`` line is skipped, ``ping`` is skipped, ``error`` is the error (its type
from the body), any other event is dispatched on its data's ``type``. An event the bytes end in the
middle of (no blank line after it) is dropped, as the SSE specification says.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MessagesReading", "read_messages"]

FINISH_NAMES = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool-calls", "refusal": "refusal",
                "pause_turn": "pause-turn", "stop_sequence": "stop-sequence"}  # fmt: skip


@dataclass
class MessagesReading:
    """What one answer said; ``error`` is the error event's ``error.type``, or "incomplete", or None."""

    reasoning: str = ""
    text: str = ""
    signatures: list[str] = field(default_factory=list)  # one per thinking block, in order
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"id", "name", "arguments", "index"}
    usage: dict[str, int | None] | None = None
    finish_reason: str | None = None
    error: str | None = None
    error_message: str | None = None
    pings: int = 0


def sse_events(data: bytes) -> list[tuple[str | None, str]]:
    """Each complete SSE event's (event name or None, data), in order."""
    events: list[tuple[str | None, str]] = []
    name: str | None = None
    lines: list[str] = []
    for line in re.split(r"\r\n|\r|\n", data.decode("utf-8")):
        if line == "":
            if lines:
                events.append((name, "\n".join(lines)))
            name, lines = None, []
        elif line.startswith(":"):
            continue
        else:
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "data":
                lines.append(value)
            elif key == "event":
                name = value
    return events


def read_messages(data: bytes) -> MessagesReading:
    """Read one answer's bytes."""
    reading = MessagesReading()
    usage: dict[str, int] = {}
    calls: dict[int, dict[str, Any]] = {}
    stopped = False
    for name, payload in sse_events(data):
        if name is None or stopped:
            continue
        if name == "ping":
            reading.pings += 1
            continue
        body = json.loads(payload)
        if name == "error":
            reading.error, reading.error_message = body["error"]["type"], body["error"]["message"]
            break
        kind = body["type"]
        if kind == "message_start":
            usage.update({k: v for k, v in body["message"].get("usage", {}).items() if isinstance(v, int)})
        elif kind == "content_block_start":
            block = body["content_block"]
            if block["type"] == "tool_use":
                calls[body["index"]] = {"id": block["id"], "name": block["name"], "arguments": "",
                                        "index": body["index"]}  # fmt: skip
                reading.tool_calls.append(calls[body["index"]])
            elif block["type"] == "thinking":
                reading.signatures.append("")
        elif kind == "content_block_delta":
            delta = body["delta"]
            if delta["type"] == "text_delta":
                reading.text += delta["text"]
            elif delta["type"] == "thinking_delta":
                reading.reasoning += delta["thinking"]
            elif delta["type"] == "signature_delta":
                reading.signatures[-1] += delta["signature"]
            elif delta["type"] == "input_json_delta":
                calls[body["index"]]["arguments"] += delta["partial_json"]
        elif kind == "message_delta":
            if body["delta"].get("stop_reason"):
                reading.finish_reason = FINISH_NAMES.get(body["delta"]["stop_reason"], "other")
            usage.update({k: v for k, v in (body.get("usage") or {}).items() if isinstance(v, int)})
        elif kind == "message_stop":
            stopped = True
    if usage:
        prompt = [usage[k] for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
                  if k in usage]  # fmt: skip
        reading.usage = {"input_tokens": sum(prompt) if prompt else None, "output_tokens": usage.get("output_tokens"),
                         "reasoning_tokens": None, "cached_tokens": usage.get("cache_read_input_tokens")}  # fmt: skip
    if reading.error is None and reading.finish_reason is None and not stopped:
        reading.error = "incomplete"
    return reading
