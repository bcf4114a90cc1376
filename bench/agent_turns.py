"""One LLM answer in each wire format, as its providers frame and chunk it: the material of ``bench/agents.py``.

``turn(fmt, size)`` is a list of SSE events (the bytes of each, in order) of one streamed answer in format
``fmt`` (``chat``: chat completions, ``messages``: Anthropic Messages, ``responses``: OpenAI Responses):

- ``typical``: text, then one tool call (the shape of the fixtures ``openai-gpt-4o-text-then-tool``,
  ``messages/claude-sonnet-4-sdk-tool-use-index-1`` and ``responses/openai-gpt-4o-parallel-function-calls``
  in ``tests/wild/streams``): the same text and call in every format;
- ``reasoning``: the same, after reasoning streamed in as many deltas as make the answer about 100 KB on
  the wire (``REASONING_BYTES``), like ``deepseek-reasoner-tool-call`` (chat, ``reasoning_content``),
  ``messages/claude-sonnet-4-aibridge-thinking-tool-index-1`` (a thinking block with its signature) and
  ``responses/openai-gpt-5-reasoning-summary`` (99 KB: 320 summary deltas).

Each event's JSON carries the fields the fixture's events carry, compact, non-ASCII as UTF-8. Deltas are
cut as the fixtures' providers cut them: OpenAI-style token pieces (whole words of at most 6 characters,
longer words in pieces; the fixtures' average 3-5 characters) for chat completions and Responses; Claude's
thinking and text in runs of whole words up to 32 characters, and its tool input in pieces of 10 (the
fixtures' 9-77 and 4-10). The short turn is 1.7 KB as Messages, 5.8 KB as chat completions (each token a
chunk of about 320 bytes) and 9.6 KB as Responses (whose first, second and last events carry the whole
response object). ``expected(fmt, size)`` is what a decoder must read in it.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

__all__ = ["FORMATS", "PATHS", "REASONING_BYTES", "SIZES", "Expected", "expected", "turn"]

FORMATS = ("chat", "messages", "responses")
SIZES = ("typical", "reasoning")
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}
REASONING_BYTES = 100_000

TEXT = "I’ll check the weather in Paris first."
TOOL = "get_weather"
ARGUMENTS = '{"city": "Paris"}'
_SENTENCES = (
    "The user asks whether to pack an umbrella for Paris tomorrow, so I need the forecast, not the climate.",
    "Rain in Paris is common in spring; still, the only honest answer comes from the tool’s data.",
    "I should call get_weather with the city and metric units, then read the precipitation chance.",
    "If the chance is above 40 %, I’ll suggest the umbrella; below 20 %, I’ll say it is not needed.",
    "Between those bounds the wind matters: an umbrella is useless in gusts over 50 km/h.",
)
CALL_ID = "call_NZa7xqfefoaMI2YYHowVXVlU"
MODEL = {"chat": "gpt-4o-2024-08-06", "messages": "claude-sonnet-4-20250514", "responses": "gpt-5-2025-08-07"}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def tokens(text: str) -> list[str]:
    """OpenAI-style token pieces: a word with its leading space, at most 6 characters a piece."""
    return re.findall(r"\s*\S{1,6}", text)


def runs(text: str, limit: int) -> list[str]:
    """Claude-style pieces: runs of whole words (each with its leading space) up to ``limit`` characters."""
    out: list[str] = []
    for word in re.findall(r"\s*\S+", text):
        if out and len(out[-1]) + len(word) <= limit:
            out[-1] += word
        else:
            out.append(word)
    return out


def _reasoning(pieces: int, cut: Any) -> list[str]:
    """The first ``pieces`` reasoning deltas (the sentences over and over, numbered, cut by ``cut``)."""
    out: list[str] = []
    n = 0
    while len(out) < pieces:
        n += 1
        sentence = f"{'' if n == 1 else ' '}({n}) {_SENTENCES[n % len(_SENTENCES)]}"
        out.extend(cut(sentence))
    return out[:pieces]


# -- chat completions: OpenAI's chunk (openai-gpt-4o-text-then-tool), reasoning as DeepSeek's reasoning_content


def _chat(reasoning: list[str]) -> list[bytes]:
    base = {"id": "chatcmpl-E6yvi7cuDcHZEHTMxcLDyf3CMKIO2", "object": "chat.completion.chunk", "created": 1785332890,
            "model": MODEL["chat"], "service_tier": "default", "system_fingerprint": "fp_627de6ad19"}  # fmt: skip
    events: list[bytes] = []

    def chunk(delta: dict[str, Any], finish: str | None = None, n: int = 0) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        obfuscation = "dOvUml6hFbjkxfWAnRU"[: 1 + (n * 7) % 15]
        events.append(f"data: {_json({**base, 'choices': [choice], 'obfuscation': obfuscation})}\n\n".encode())

    chunk({"role": "assistant", "content": "", "refusal": None})
    for n, piece in enumerate(reasoning):
        chunk({"content": None, "reasoning_content": piece}, n=n)
    for n, piece in enumerate(tokens(TEXT)):
        chunk({"content": piece}, n=n)
    head = {"index": 0, "id": CALL_ID, "type": "function", "function": {"name": TOOL, "arguments": ""}}
    chunk({"tool_calls": [head]})
    for n, piece in enumerate(re.findall(r".{1,4}", ARGUMENTS)):
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}, n=n)
    chunk({}, "tool_calls")
    details = {"reasoning_tokens": len(reasoning), "audio_tokens": 0, "accepted_prediction_tokens": 0,
               "rejected_prediction_tokens": 0}  # fmt: skip
    usage = {"prompt_tokens": 358, "completion_tokens": 21 + len(reasoning), "total_tokens": 379 + len(reasoning),
             "prompt_tokens_details": {"cached_tokens": 320, "audio_tokens": 0},
             "completion_tokens_details": details}  # fmt: skip
    events.append(f"data: {_json({**base, 'choices': [], 'usage': usage, 'obfuscation': 'C23hub'})}\n\n".encode())
    events.append(b"data: [DONE]\n\n")
    return events


# -- Anthropic Messages (claude-sonnet-4-sdk-tool-use-index-1; thinking as in claude-sonnet-4-aibridge-thinking-...)

SIGNATURE = ("Eu8BCkYICxgCKkBR++kFr7Za2JhF/9OCpjEc46/EcipL75RK+MEbxJ/VBJPWQTWrNGfwb5khWYJtKEpjjkH07cR/MQvThfb7t7Ck"
             "EgwU4pKwL7NuZXd1/wgaDILyd0bYMqQovWo3dyIw95Ny7yZPljNBDLsvMBdBr7w+RtbU+AlSftjBuBZHp0VzI54/W+9u6f7qfx0J"
             "XsVBKldqqOjFvewT8Xm6Qp/77g6/j0zBiuAQABj/6vS1qATjd8KSIFDg9G/tCtzwmV/T/egmzswWd5CBiAhW6lgJgEDRr+gRUrFSO"
             "B7o3hypW8FUnUrr1JtzzwMYAQ==")  # fmt: skip


def _messages(reasoning: list[str]) -> list[bytes]:
    events: list[bytes] = []

    def event(name: str, value: dict[str, Any]) -> None:
        events.append(f"event: {name}\ndata: {_json({'type': name, **value})}\n\n".encode())

    usage = {"input_tokens": 25, "cache_creation_input_tokens": 13, "cache_read_input_tokens": 320, "output_tokens": 1,
             "service_tier": "standard"}  # fmt: skip
    event("message_start", {"message": {"id": "msg_019Q1hrJbZG26Fb9BQhrkHEr", "type": "message", "role": "assistant",
                                        "model": MODEL["messages"], "content": [], "stop_reason": None,
                                        "stop_sequence": None, "usage": usage}})  # fmt: skip
    index = 0
    if reasoning:
        event("content_block_start", {"index": index, "content_block": {"type": "thinking", "thinking": ""}})
        for n, piece in enumerate(reasoning):
            if n == 1:
                event("ping", {})
            event("content_block_delta", {"index": index, "delta": {"type": "thinking_delta", "thinking": piece}})
        event("content_block_delta", {"index": index, "delta": {"type": "signature_delta", "signature": SIGNATURE}})
        event("content_block_stop", {"index": index})
        index += 1
    event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
    if not reasoning:
        event("ping", {})
    for piece in runs(TEXT, 32):
        event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": piece}})
    event("content_block_stop", {"index": index})
    index += 1
    use = {"type": "tool_use", "id": "toolu_01NRLabsLyVHZPKxbKvkfSMn", "name": TOOL, "caller": {"type": "direct"},
           "input": {}}  # fmt: skip
    event("content_block_start", {"index": index, "content_block": use})
    for piece in ["", *re.findall(r".{1,10}", ARGUMENTS)]:
        event("content_block_delta", {"index": index, "delta": {"type": "input_json_delta", "partial_json": piece}})
    event("content_block_stop", {"index": index})
    output = 40 + len(reasoning) * 8
    event("message_delta", {"delta": {"stop_reason": "tool_use", "stop_sequence": None},
                            "usage": {"output_tokens": output}})  # fmt: skip
    event("message_stop", {})
    return events


# -- OpenAI Responses (openai-gpt-4o-parallel-function-calls; the reasoning item as in openai-gpt-5-reasoning-summary)


def _responses(reasoning: list[str]) -> list[bytes]:
    events: list[bytes] = []
    sequence = iter(range(1 << 30))
    rid, rs, msg, fc = ("resp_0a1097cbfef27a8c00696afa23fb9c819693455c72eabd7718",
                        "rs_0a1097cbfef27a8c00696afa2459008196a08a4261aba00f56",
                        "msg_0a1097cbfef27a8c00696afa33407081969902b1b1da52f678",
                        "fc_0c3b09d20eedf2d30068f966bad8b88190af96d232f504ef1f")  # fmt: skip

    def event(name: str, value: dict[str, Any]) -> None:
        events.append(f"event: {name}\ndata: {_json({'type': name, **value, 'sequence_number': next(sequence)})}\n\n"
                      .encode())  # fmt: skip

    def response(status: str, output: list[Any], usage: Any) -> dict[str, Any]:
        tool = {"type": "function", "description": "The weather forecast of a city.", "name": TOOL,
                "parameters": {"properties": {"city": {"type": "string"}, "units": {"type": "string"}},
                               "required": ["city"], "additionalProperties": False, "type": "object"},
                "strict": False}  # fmt: skip
        return {"id": rid, "object": "response", "created_at": 1768618532, "status": status, "background": False,
                "completed_at": None if status == "in_progress" else 1768618547, "error": None,
                "frequency_penalty": 0.0, "incomplete_details": None, "instructions": None, "max_output_tokens": None,
                "max_tool_calls": None, "model": MODEL["responses"], "output": output, "parallel_tool_calls": True,
                "presence_penalty": 0.0, "previous_response_id": None, "prompt_cache_key": None,
                "prompt_cache_retention": None, "reasoning": {"effort": "medium", "summary": "detailed"},
                "safety_identifier": None, "service_tier": "auto", "store": True, "temperature": 1.0,
                "text": {"format": {"type": "text"}, "verbosity": "medium"}, "tool_choice": "auto", "tools": [tool],
                "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": None,
                "metadata": {}}  # fmt: skip

    event("response.created", {"response": response("in_progress", [], None)})
    event("response.in_progress", {"response": response("in_progress", [], None)})
    output: list[Any] = []
    if reasoning:
        at = len(output)
        added = {"item": {"id": rs, "type": "reasoning", "summary": []}, "output_index": at}
        event("response.output_item.added", added)
        part = {"item_id": rs, "output_index": at, "summary_index": 0}
        event("response.reasoning_summary_part.added", {**part, "part": {"type": "summary_text", "text": ""}})
        for n, piece in enumerate(reasoning):
            event("response.reasoning_summary_text.delta",
                  {"delta": piece, "item_id": rs, "obfuscation": "1XWsl7UoJgfQ6sD"[: 4 + n % 11], "output_index": at,
                   "summary_index": 0})  # fmt: skip
        summary = "".join(reasoning)
        event("response.reasoning_summary_text.done", {**part, "text": summary})
        event("response.reasoning_summary_part.done", {**part, "part": {"type": "summary_text", "text": summary}})
        item = {"id": rs, "type": "reasoning", "summary": [{"type": "summary_text", "text": summary}]}
        event("response.output_item.done", {"item": item, "output_index": at})
        output.append(item)
    at = len(output)
    event("response.output_item.added", {"item": {"id": msg, "type": "message", "status": "in_progress", "content": [],
                                                  "role": "assistant"}, "output_index": at})  # fmt: skip
    where = {"item_id": msg, "output_index": at, "content_index": 0}
    empty = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    event("response.content_part.added", {**where, "part": empty})
    for n, piece in enumerate(tokens(TEXT)):
        event("response.output_text.delta", {**where, "delta": piece, "logprobs": [],
                                              "obfuscation": "kxfWAnRUqJ"[: 3 + n % 7]})  # fmt: skip
    event("response.output_text.done", {**where, "text": TEXT, "logprobs": []})
    event("response.content_part.done", {**where, "part": {**empty, "text": TEXT}})
    item = {"id": msg, "type": "message", "status": "completed", "content": [{**empty, "text": TEXT}],
            "role": "assistant"}  # fmt: skip
    event("response.output_item.done", {"item": item, "output_index": at})
    output.append(item)
    at = len(output)
    call = {"id": fc, "type": "function_call", "status": "in_progress", "arguments": "", "call_id": CALL_ID,
            "name": TOOL}  # fmt: skip
    event("response.output_item.added", {"output_index": at, "item": call})
    for n, piece in enumerate(re.findall(r".{1,4}", ARGUMENTS)):
        event("response.function_call_arguments.delta", {"item_id": fc, "output_index": at, "delta": piece,
                                                          "obfuscation": "eMWlO7RB6LZnWas"[: 5 + n % 9]})  # fmt: skip
    event("response.function_call_arguments.done", {"item_id": fc, "output_index": at, "arguments": ARGUMENTS})
    call = {**call, "status": "completed", "arguments": ARGUMENTS}
    event("response.output_item.done", {"output_index": at, "item": call})
    output.append(call)
    usage = {"input_tokens": 358, "input_tokens_details": {"cached_tokens": 320},
             "output_tokens": 21 + len(reasoning), "output_tokens_details": {"reasoning_tokens": len(reasoning)},
             "total_tokens": 379 + len(reasoning)}  # fmt: skip
    event("response.completed", {"response": response("completed", output, usage)})
    return events


_FRAME = {"chat": _chat, "messages": _messages, "responses": _responses}
_CUT = {"chat": tokens, "messages": lambda text: runs(text, 32), "responses": tokens}


@cache
def _pieces(fmt: str, size: str) -> int:
    """How many reasoning deltas the answer has: none for a typical turn, else enough for ``REASONING_BYTES``."""
    if size == "typical":
        return 0
    n = 100
    while True:
        wire = sum(len(e) for e in _FRAME[fmt](_reasoning(n, _CUT[fmt])))
        if wire >= REASONING_BYTES:
            return n
        per = (wire - sum(len(e) for e in _FRAME[fmt]([]))) / n
        n += max(1, int((REASONING_BYTES - wire) / per))


@cache
def _turn(fmt: str, size: str) -> tuple[bytes, ...]:
    if fmt not in _FRAME or size not in SIZES:
        raise ValueError(f"unknown turn {fmt!r} {size!r}; formats: {', '.join(FORMATS)}; sizes: {', '.join(SIZES)}")
    return tuple(_FRAME[fmt](_reasoning(_pieces(fmt, size), _CUT[fmt])))


def turn(fmt: str, size: str) -> list[bytes]:
    """The answer's SSE events, each one's bytes (see the module docstring)."""
    return list(_turn(fmt, size))


class Expected:
    """What a decoder must read in ``turn(fmt, size)``: the text, the reasoning and the one tool call."""

    def __init__(self, fmt: str, size: str) -> None:
        self.reasoning = "".join(_reasoning(_pieces(fmt, size), _CUT[fmt]))
        self.text = TEXT
        self.tool = TOOL
        self.arguments = ARGUMENTS
        self.model = MODEL[fmt]


def expected(fmt: str, size: str) -> Expected:
    """What a decoder must read in ``turn(fmt, size)``."""
    return Expected(fmt, size)
