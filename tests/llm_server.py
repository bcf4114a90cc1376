"""A real OpenAI-compatible chat-completions server on 127.0.0.1, scripted, for the agent tests.

    with LLMServer({"What is 2 + 2?": "4"}) as llm:
        agent = OpenAIAgent(llm.model, base_url=llm.url + "/v1", api_key=llm.api_key)

It is a Starlette app served by uvicorn in a background thread (``ors_lab.asgi.serve_app``) on a
free loopback port. ``POST /v1/chat/completions`` with ``"stream": true`` streams
``chat.completion.chunk`` objects as OpenAI does: ``data: {json}`` lines ending in a blank line, the
role delta first, then ``reasoning_content`` deltas (as vLLM and DeepSeek servers send them),
content deltas in several pieces, ``tool_calls`` deltas (the first with ``id``, ``type`` and
``function.name``, the later ones with pieces of ``function.arguments``), a last chunk with the
``finish_reason``, a usage chunk (``choices: []``, ``usage_of``: a token per piece streamed, the
reasoning ones among them, and 42 prompt tokens, 32 of them cached) when
``stream_options.include_usage`` asks for it or ``usage=True``, and ``data: [DONE]``.

What it says is scripted and deterministic:

- a turn with no ``tool`` message yet: it finds the question of ``answers`` in the user prompt,
  reasons about it, says it will answer, and calls ``submit`` with ``{"answer": ...}`` (arguments
  in 3 or more deltas), finish reason ``tool_calls``;
- a turn after a tool result: a short text, finish reason ``stop``.

``mode`` changes that (``modes`` per question, over the default ``mode``): ``"text"`` answers in
text only (no tool call, ``stop``); ``"malformed"`` sends tool-call arguments that are not JSON;
``"error"`` answers with ``error_status`` and an OpenAI error body (``retry-after-ms: 10`` on 429);
``"cut"`` drops the connection in the middle of the reasoning; ``"parts"`` streams the reasoning and
the text as lists of content parts, as Mistral does (``[{"type": "thinking", "thinking": [{"type":
"text", "text": ...}]}]`` and ``[{"type": "text", "text": ...}]``), then calls ``submit`` as ``"tool"`` does.

Each request is checked as a real provider would: ``Authorization: Bearer <api_key>`` (401
otherwise), the ``model`` (404), ``stream: true`` (400: this server only streams) and ``tools``
given as function tools (400). ``POST /v1/messages`` is Anthropic's Messages API saying the same
script, streamed as Anthropic streams it (a thinking block with its signature, a text block, a
``tool_use`` block; ``end_turn`` after ``tool_result`` blocks), with the key in ``x-api-key`` or as
a bearer token (SDK 2.16 sends that). ``requests`` keeps every request that arrived (headers and JSON
body) and ``streamed`` what each streamed answer said (reasoning, text, tool-call arguments).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Self

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ors_lab.asgi import serve_app

__all__ = [
    "API_KEY",
    "CACHED_TOKENS",
    "MODEL",
    "PROMPT_TOKENS",
    "Cut",
    "LLMServer",
    "Seen",
    "Streamed",
    "serve_llm",
    "usage_of",
]

MODEL = "test-model"
API_KEY = "sk-test-0123456789abcdefSECRET"
CREATED = 1_767_225_600  # a fixed `created` time: the stream is the same on every run
MODES = ("tool", "text", "malformed", "error", "cut", "parts")
AFTER_TOOL = ["Submitted", ".", " Done", "."]
NO_ANSWER = ["I do not know", " this one", "."]


@dataclass(frozen=True)
class Seen:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: Any  # the JSON body (None if it was not JSON)


@dataclass
class Streamed:
    """What one streamed answer said, piece by piece."""

    question: str | None = None
    reasoning: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    tool_call_id: str | None = None
    finish_reason: str | None = None


def pieces(text: str, size: int) -> list[str]:
    """``text`` cut into pieces of ``size`` characters (the last may be shorter)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def words(text: str) -> list[str]:
    """``text`` cut before each space, as tokenisers tend to: ``["The", " answer", " is"]``."""
    out: list[str] = []
    for index, word in enumerate(text.split(" ")):
        out.append(word if index == 0 else " " + word)
    return out


def _error(status: int, message: str, kind: str, code: str | None = None, **headers: str) -> JSONResponse:
    """An OpenAI error body."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _anthropic_error(status: int, kind: str, message: str) -> JSONResponse:
    """An Anthropic error body."""
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status)


class Cut(Exception):
    """Raised inside a streamed answer to drop the connection (uvicorn ends it without the last chunk)."""


class LLMServer:
    """The scripted chat-completions server: ``url``, ``requests``, ``streamed``; see the module docstring."""

    def __init__(
        self,
        answers: Mapping[str, str],
        *,
        model: str = MODEL,
        api_key: str = API_KEY,
        mode: str = "tool",
        modes: Mapping[str, str] | None = None,
        error_status: int = 500,
        usage: bool = False,
    ) -> None:
        for name in (mode, *(modes or {}).values()):
            if name not in MODES:
                raise ValueError(f"unknown mode {name!r}; valid modes: {', '.join(MODES)}")
        self.answers = dict(answers)
        self.model = model
        self.api_key = api_key
        self.mode = mode
        self.modes = dict(modes or {})
        self.error_status = error_status
        self.usage = usage
        self.requests: list[Seen] = []
        self.streamed: list[Streamed] = []
        self.url = ""
        self._lock = threading.Lock()
        self._stack = ExitStack()
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._completions, methods=["POST"]),
                                     Route("/v1/messages", self._messages, methods=["POST"])])  # fmt: skip

    def __enter__(self) -> Self:
        self.url = self._stack.enter_context(serve_app(self.app, quiet=(Cut,)))
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving (the port is closed afterwards)."""
        self._stack.close()

    def chat_requests(self) -> list[dict[str, Any]]:
        """The JSON bodies of the requests that arrived, in order."""
        with self._lock:
            return [seen.body for seen in self.requests]

    # -- the endpoint --------------------------------------------------------------------------------

    async def _seen(self, request: Request) -> Any:
        """The request's JSON body (None if it is not JSON), kept in ``requests``."""
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        with self._lock:
            self.requests.append(Seen(request.url.path, dict(request.headers), body))
        return body

    async def _completions(self, request: Request) -> Response:
        body = await self._seen(request)
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        if not isinstance(body, dict):
            return _error(400, "The request body is not a JSON object.", "invalid_request_error")
        if body.get("model") != self.model:
            message = f"The model `{body.get('model')}` does not exist or you do not have access to it."
            return _error(404, message, "invalid_request_error", "model_not_found")
        if body.get("stream") is not True:
            return _error(400, "This test server only streams: send stream: true.", "invalid_request_error")
        problem = _tools_problem(body.get("tools"))
        if problem is not None:
            return _error(400, problem, "invalid_request_error")
        messages = body.get("messages") or []
        question = self._question(messages)
        mode = self.modes.get(question or "", self.mode)
        if mode == "error":
            extra = {"retry-after-ms": "10"} if self.error_status == 429 else {}
            return _error(self.error_status, f"scripted failure ({self.error_status})", "server_error", **extra)
        streamed = self._script(messages, question, mode)
        with self._lock:
            self.streamed.append(streamed)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) or self.usage
        chunks = self._sse(streamed, _seed(messages), include_usage, cut=mode == "cut", parts=mode == "parts")
        return StreamingResponse(chunks, media_type="text/event-stream")

    async def _messages(self, request: Request) -> Response:
        """Anthropic's Messages API, streamed, saying what ``_script`` says (see the module docstring)."""
        body = await self._seen(request)
        if self.api_key not in (request.headers.get("x-api-key"), request.headers.get("authorization", "")[7:]):
            return _anthropic_error(401, "authentication_error", "invalid x-api-key")
        if not isinstance(body, dict) or body.get("model") != self.model:
            return _anthropic_error(404, "not_found_error", f"model: {body.get('model') if body else None}")
        if body.get("stream") is not True:
            return _anthropic_error(400, "invalid_request_error", "This test server only streams: send stream: true.")
        tools = body.get("tools")
        if not isinstance(tools, list) or not any(isinstance(t, dict) and t.get("name") == "submit" for t in tools):
            return _anthropic_error(400, "invalid_request_error", "This test server answers with the `submit` tool.")
        messages = body.get("messages") or []
        last = messages[-1].get("content") if messages and isinstance(messages[-1], dict) else None
        followed = isinstance(last, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last)
        question = self._question(messages)
        if followed:
            streamed = Streamed(question, text=list(AFTER_TOOL), finish_reason="stop")
        else:
            streamed = self._script([], question, self.modes.get(question or "", self.mode))
        with self._lock:
            self.streamed.append(streamed)
        return StreamingResponse(self._message_events(streamed, _seed(messages)), media_type="text/event-stream")

    async def _message_events(self, streamed: Streamed, seed: str) -> AsyncIterator[bytes]:
        """The answer as Anthropic streams it: a thinking block with its signature, a text block, a tool_use block."""

        def event(name: str, value: dict[str, Any]) -> bytes:
            return f"event: {name}\ndata: {json.dumps({'type': name, **value})}\n\n".encode()

        usage = {"input_tokens": PROMPT_TOKENS - CACHED_TOKENS, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": CACHED_TOKENS, "output_tokens": 1}  # fmt: skip
        message = {"id": f"msg_{seed}", "type": "message", "role": "assistant", "model": self.model, "content": [],
                   "stop_reason": None, "stop_sequence": None, "usage": usage}  # fmt: skip
        yield event("message_start", {"message": message})
        yield event("ping", {})
        blocks: list[tuple[dict[str, Any], str, str, list[str]]] = []
        if streamed.reasoning:
            blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, "thinking_delta", "thinking",
                           streamed.reasoning))  # fmt: skip
        if streamed.text:
            blocks.append(({"type": "text", "text": ""}, "text_delta", "text", streamed.text))
        if streamed.tool_call_id is not None:
            use = {"type": "tool_use", "id": streamed.tool_call_id.replace("call_", "toolu_"), "name": "submit",
                   "input": {}}  # fmt: skip
            blocks.append((use, "input_json_delta", "partial_json", streamed.arguments))
        for index, (start, kind, field_name, deltas) in enumerate(blocks):
            yield event("content_block_start", {"index": index, "content_block": start})
            for delta in deltas:
                yield event("content_block_delta", {"index": index, "delta": {"type": kind, field_name: delta}})
                await asyncio.sleep(0)
            if start["type"] == "thinking":
                signature = "sig-" + hashlib.sha256("".join(deltas).encode()).hexdigest()[:32]
                yield event("content_block_delta", {"index": index, "delta": {"type": "signature_delta",
                                                                              "signature": signature}})  # fmt: skip
            yield event("content_block_stop", {"index": index})
        stop = "tool_use" if streamed.finish_reason == "tool_calls" else "end_turn"
        output = usage_of(streamed)["completion_tokens"]
        yield event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": output}})  # fmt: skip
        yield event("message_stop", {})

    def _question(self, messages: list[dict[str, Any]]) -> str | None:
        """The question of ``answers`` the user asked (the longest one found in the prompt)."""
        prompt = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        found = [q for q in self.answers if q in prompt]
        return max(found, key=len) if found else None

    def _script(self, messages: list[dict[str, Any]], question: str | None, mode: str) -> Streamed:
        """What to say to this conversation (see the module docstring)."""
        if any(m.get("role") == "tool" for m in messages):
            return Streamed(question, text=list(AFTER_TOOL), finish_reason="stop")
        if question is None:
            return Streamed(text=list(NO_ANSWER), finish_reason="stop")
        answer = self.answers[question]
        reasoning = words(f"The question is: {question} I know this one: the answer is {answer}.")
        if mode == "text":
            return Streamed(question, reasoning, words(f"The answer is {answer}."), finish_reason="stop")
        arguments = json.dumps({"answer": answer})
        if mode == "malformed":
            arguments = arguments[:-1] + ", oops"  # no closing brace: not JSON
        return Streamed(
            question,
            reasoning=reasoning,
            text=words(f"I will submit {answer}."),
            arguments=pieces(arguments, 5),
            tool_call_id="call_" + hashlib.sha256(question.encode()).hexdigest()[:16],
            finish_reason="tool_calls",
        )

    async def _sse(
        self, streamed: Streamed, seed: str, include_usage: bool, *, cut: bool, parts: bool = False
    ) -> AsyncIterator[bytes]:
        """The answer as OpenAI streams it (``cut``: only the first half of the reasoning, then hang up;
        ``parts``: reasoning and text as Mistral's content parts)."""
        base = {"id": f"chatcmpl-{seed}", "object": "chat.completion.chunk", "created": CREATED, "model": self.model,
                "system_fingerprint": "fp_ors_lab_test"}  # fmt: skip

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            value = {**base, "choices": [choice]}
            if include_usage:
                value["usage"] = None
            return b"data: " + json.dumps(value).encode() + b"\n\n"

        yield chunk({"role": "assistant", "content": "", "refusal": None})
        for index, delta in enumerate(streamed.reasoning):
            if cut and index == len(streamed.reasoning) // 2:
                raise Cut("the scripted model hangs up in the middle of its reasoning")
            thinking = [{"type": "thinking", "thinking": [{"type": "text", "text": delta}]}]
            yield chunk({"content": thinking} if parts else {"reasoning_content": delta})
            await asyncio.sleep(0)
        for delta in streamed.text:
            yield chunk({"content": [{"type": "text", "text": delta}] if parts else delta})
            await asyncio.sleep(0)
        if streamed.tool_call_id is not None:
            head = {"index": 0, "id": streamed.tool_call_id, "type": "function",
                    "function": {"name": "submit", "arguments": ""}}  # fmt: skip
            yield chunk({"tool_calls": [head]})
            for delta in streamed.arguments:
                yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": delta}}]})
                await asyncio.sleep(0)
        yield chunk({}, streamed.finish_reason)
        if include_usage:
            usage = usage_of(streamed)
            yield b"data: " + json.dumps({**base, "choices": [], "usage": usage}).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"


PROMPT_TOKENS = 42
CACHED_TOKENS = 32


def usage_of(streamed: Streamed) -> dict[str, Any]:
    """The usage the scripted model reports for an answer: a token per streamed piece, 42 prompt tokens (32 cached)."""
    reasoning = len(streamed.reasoning)
    completion = reasoning + len(streamed.text) + len(streamed.arguments)
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": completion,
        "total_tokens": PROMPT_TOKENS + completion,
        "completion_tokens_details": {"reasoning_tokens": reasoning},
        "prompt_tokens_details": {"cached_tokens": CACHED_TOKENS},
    }


def _tools_problem(tools: Any) -> str | None:
    """Why ``tools`` are not function tools (None when they are)."""
    if not isinstance(tools, list) or not tools:
        return "This test server needs `tools`: a non-empty list of function tools."
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            return f"tools[{index}] is not a function tool: {tool!r}"
        if not isinstance(function.get("name"), str) or not isinstance(function.get("parameters"), dict):
            return f"tools[{index}].function needs a name and JSON-schema parameters: {function!r}"
    if not any(tool["function"]["name"] == "submit" for tool in tools):
        return "This test server answers with the `submit` tool, and it was not offered."
    return None


def _seed(messages: list[dict[str, Any]]) -> str:
    """A completion id that depends only on the conversation."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:24]


def serve_llm(answers: Mapping[str, str], **options: Any) -> Iterator[LLMServer]:
    """A started ``LLMServer`` for a fixture (``yield from serve_llm(...)``); stopped afterwards."""
    with LLMServer(answers, **options) as server:
        yield server
