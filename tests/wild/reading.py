"""An independent reader of one chat-completions answer, written from the contract alone.

    reading = read_answer(Path("tests/wild/streams/openai-gpt-4o-refusal.sse").read_bytes())
    reading.refusal, reading.finish_reason  # ("I'm very sorry, ...", "refusal")

It is a second implementation of /work/shared's chat-contract ("How ors_lab reads a
chat-completions answer"), kept small and plain so that the suite can say what the agent's decoder
must have made of a provider's bytes. It imports nothing from ors_lab.

Two readings the contract leaves open, taken here: an empty tool-call `id` ("" as Qwen sends on
its continuation deltas) is no id; an empty `finish_reason` is none. An SSE event that the bytes
end in the middle of (no blank line after it) is dropped, as the SSE specification says.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Reading", "read_answer"]

FINISH_NAMES = {"stop": "stop", "tool_calls": "tool-calls", "function_call": "tool-calls", "length": "length",
                "content_filter": "content-filter"}  # fmt: skip


@dataclass
class Reading:
    """What one answer said, by the contract; ``error`` is "malformed", "provider", "incomplete" or None."""

    reasoning: str = ""
    text: str = ""
    refusal: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"id": str | None, "name", "arguments"}
    usage: dict[str, int | None] | None = None
    finish_reason: str | None = None
    error: str | None = None
    error_message: str | None = None
    other_choices: int = 0


def sse_data(data: bytes) -> list[str]:
    """The data of each complete SSE event, in order (comments and other fields skipped)."""
    events: list[str] = []
    lines: list[str] = []
    # the last piece of the split has no line end after it: an unended line, or "" after the last line end
    for line in re.split(r"\r\n|\r|\n", data.decode("utf-8"))[:-1]:
        if line == "":
            if lines:
                events.append("\n".join(lines))
            lines = []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            if name == "data":
                lines.append(value[1:] if value.startswith(" ") else value)
    return events  # a last event without its blank line is not complete: dropped


def _texts(parts: list[Any]) -> list[str]:
    """The text of each `{"type": "text", "text": s}` part."""
    texts = (p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == "text")
    return [t for t in texts if isinstance(t, str)]


class _Reader:
    def __init__(self) -> None:
        self.reading = Reading()
        self.calls: list[dict[str, Any]] = []
        self.by_id: dict[str, dict[str, Any]] = {}
        self.by_index: dict[int, dict[str, Any]] = {}
        self.others: set[Any] = set()
        self.finish: str | None = None
        self.usage: Any = None
        self.groq_usage: Any = None

    def provider_error(self, value: dict[str, Any]) -> bool:
        """True (and the error noted) when ``value`` is an error object."""
        if "error" in value:
            error = value["error"]
            message = error.get("message") if isinstance(error, dict) else error
        elif value.get("object") == "error":
            message = value.get("message")
        else:
            return False
        self.reading.error, self.reading.error_message = "provider", str(message)
        return True

    def content(self, content: Any) -> None:
        if isinstance(content, str):
            self.reading.text += content
            return
        for part in content if isinstance(content, list) else ():
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text":
                self.reading.text += "".join(_texts([part]))
            elif part.get("type") == "thinking":
                thinking = part.get("thinking")
                if isinstance(thinking, str):
                    self.reading.reasoning += thinking
                elif isinstance(thinking, list):
                    self.reading.reasoning += "".join(_texts(thinking))

    def message(self, delta: dict[str, Any]) -> None:
        """One delta (or a whole message): content, reasoning, refusal, tool calls."""
        self.content(delta.get("content"))
        if isinstance(delta.get("reasoning_content"), str):
            self.reading.reasoning += delta["reasoning_content"]
        elif isinstance(delta.get("reasoning"), str):
            self.reading.reasoning += delta["reasoning"]
        if isinstance(delta.get("refusal"), str):
            self.reading.refusal += delta["refusal"]
        for item in delta.get("tool_calls") or ():
            if isinstance(item, dict):
                self.tool_delta(item)

    def tool_delta(self, item: dict[str, Any]) -> None:
        call_id = item.get("id") or None
        index = item.get("index")
        if call_id is not None and call_id in self.by_id:
            call = self.by_id[call_id]
        elif call_id is None and index is not None and index in self.by_index:
            call = self.by_index[index]
        elif call_id is None and index is None and self.calls:
            call = self.calls[-1]
        else:
            call = {"id": call_id, "name": "", "arguments": ""}
            self.calls.append(call)
            if call_id is not None:
                self.by_id[call_id] = call
            if index is not None:
                self.by_index[index] = call
        function = item.get("function") or {}
        if not call["name"] and isinstance(function.get("name"), str):
            call["name"] = function["name"]
        if isinstance(function.get("arguments"), str):
            call["arguments"] += function["arguments"]

    def choices(self, choices: Any, key: str) -> None:
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict):
                continue
            index = choice.get("index")
            if index is not None and index != 0:
                self.others.add(index)
                continue
            if isinstance(choice.get(key), dict):
                self.message(choice[key])
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def done(self, complete: bool) -> Reading:
        reading = self.reading
        reading.tool_calls = self.calls
        reading.other_choices = len(self.others)
        usage = self.usage if self.usage is not None else self.groq_usage
        if isinstance(usage, dict):
            completion = usage.get("completion_tokens_details") or {}
            prompt = usage.get("prompt_tokens_details") or {}
            reading.usage = {"input_tokens": usage.get("prompt_tokens"),
                             "output_tokens": usage.get("completion_tokens"),
                             "reasoning_tokens": completion.get("reasoning_tokens"),
                             "cached_tokens": prompt.get("cached_tokens")}  # fmt: skip
        if reading.refusal:
            reading.finish_reason = "refusal"
        elif self.finish is not None:
            reading.finish_reason = FINISH_NAMES.get(self.finish, "other")
        if reading.error is None and not complete:
            reading.error, reading.error_message = "incomplete", "incomplete stream"
        return reading


def read_answer(data: bytes) -> Reading:
    """One answer's bytes (an SSE stream, or one whole ``chat.completion`` JSON object), read by the contract."""
    reader = _Reader()
    if data.lstrip().startswith(b"{"):
        whole = json.loads(data)
        if not reader.provider_error(whole):
            reader.usage = whole.get("usage")
            reader.choices(whole.get("choices"), "message")
        return reader.done(complete=True)
    complete = False
    for number, text in enumerate(sse_data(data), start=1):
        if text == "[DONE]":
            complete = True
            break
        try:
            chunk = json.loads(text)
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict):
            reader.reading.error = "malformed"
            reader.reading.error_message = f"malformed chunk {number}: {text[:200]}"
            break
        if reader.provider_error(chunk):
            break
        if chunk.get("usage") is not None:
            reader.usage = chunk["usage"]
        groq = chunk.get("x_groq")
        if isinstance(groq, dict) and groq.get("usage") is not None:
            reader.groq_usage = groq["usage"]
        reader.choices(chunk.get("choices"), "delta")
    complete = complete or reader.finish is not None
    return reader.done(complete)
