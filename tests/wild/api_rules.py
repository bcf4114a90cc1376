"""What the three LLM APIs refuse in a conversation, as their documentation states it, and a local server that
refuses it: where a conversation that ors_lab exports is sent back through the official SDKs
(tests/analysis/test_conversations.py). It imports nothing from ors_lab but the ASGI serving.

The rules (each a 400 from the API when broken):

- chat completions: roles are system, developer, user, assistant, tool; an assistant message has content or
  tool calls, each call an id, type ``function``, a name and arguments as text; the tool calls of an assistant
  message are each answered by a ``tool`` message right after it (and a ``tool`` message answers a call of the
  assistant message before it); parts are ``text`` and ``image_url``; tools are function tools with a name.
- Messages: the first message is the user's; content is text or blocks; user blocks are text, image and
  tool_result, the tool_result blocks first; assistant blocks are text, thinking (with its signature),
  redacted_thinking (with its data) and tool_use (id, name, input object); no text block is empty; each
  tool_use is answered by a tool_result in the next message, and a tool_result answers a tool_use of the
  message before it; tools have a name and an ``input_schema`` object; ``system`` is text or text blocks.
- Responses: ``input`` is text or items; a message item's role is user, assistant, system or developer, its
  parts ``input_text`` / ``input_image`` (user) or ``output_text`` (assistant); a reasoning item has an id and a
  summary of ``summary_text`` parts; a function call has a ``call_id``, a name and arguments as text; a
  ``function_call_output`` answers an earlier function call's ``call_id`` with text; tools are flat function
  tools with a name.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import Any, Self

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ors_lab.asgi import serve_app

MODEL = "rules-model"


class Refused(ValueError):
    """A conversation the API refuses."""


def _check(ok: bool, why: str) -> None:
    if not ok:
        raise Refused(why)


def _text(value: Any) -> bool:
    return isinstance(value, str)


def chat_rules(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    _check(isinstance(messages, list) and bool(messages), "messages must be a non-empty list")
    waiting: list[str] = []  # the tool calls of the last assistant message not yet answered
    for i, message in enumerate(messages):
        role = message.get("role")
        _check(role in ("system", "developer", "user", "assistant", "tool"), f"messages[{i}]: unknown role {role!r}")
        if role != "tool":
            _check(not waiting, f"messages[{i}]: tool calls {waiting} are not answered by tool messages")
        content = message.get("content")
        if role == "assistant":
            calls = message.get("tool_calls") or []
            _check(content is not None or bool(calls), f"messages[{i}]: an assistant message needs content or calls")
            for call in calls:
                function = call.get("function") or {}
                _check(_text(call.get("id")) and bool(call["id"]) and call.get("type") == "function"
                       and _text(function.get("name")) and _text(function.get("arguments")),
                       f"messages[{i}]: a malformed tool call {call}")  # fmt: skip
            waiting = [call["id"] for call in calls]
        elif role == "tool":
            _check(message.get("tool_call_id") in waiting, f"messages[{i}]: answers no call awaiting an answer")
            waiting.remove(message["tool_call_id"])
            _check(_text(content) or isinstance(content, list), f"messages[{i}]: tool content must be text or parts")
        else:
            _check(_text(content) or isinstance(content, list), f"messages[{i}]: content must be text or parts")
        if isinstance(content, list):
            for part in content:
                kind = part.get("type")
                url = (part.get("image_url") or {}).get("url") if kind == "image_url" else None
                good = (kind == "text" and _text(part.get("text"))) or _text(url)
                _check(good, f"messages[{i}]: a bad part {kind!r}")
    for tool in body.get("tools") or []:
        _check(tool.get("type") == "function" and _text((tool.get("function") or {}).get("name")), f"bad tool {tool}")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if _text(content):
        _check(bool(content), f"{where}: empty text content")
        return [{"type": "text", "text": content}]
    _check(isinstance(content, list) and bool(content), f"{where}: content must be text or a non-empty list")
    return list(content)


def messages_rules(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    _check(isinstance(messages, list) and bool(messages), "messages must be a non-empty list")
    _check(messages[0].get("role") == "user", "the first message must be the user's")
    system = body.get("system")
    _check(system is None or _text(system) or all(b.get("type") == "text" for b in system), "bad system")
    uses: set[str] = set()  # the tool_use ids of the message before
    for i, message in enumerate(messages):
        role, blocks = message.get("role"), _blocks(message.get("content"), f"messages[{i}]")
        _check(role in ("user", "assistant"), f"messages[{i}]: unknown role {role!r}")
        answered = {b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"}
        _check(uses <= answered, f"messages[{i}]: tool_use ids {sorted(uses - answered)} have no tool_result")
        _check(answered <= uses, f"messages[{i}]: tool_result for {sorted(answered - uses)} answers no tool_use")
        kinds = [b.get("type") for b in blocks]
        if role == "user":
            results = kinds.count("tool_result")
            _check(kinds[:results] == ["tool_result"] * results, f"messages[{i}]: tool_result blocks must come first")
            allowed = {"text", "image", "tool_result"}
        else:
            allowed = {"text", "thinking", "redacted_thinking", "tool_use"}
        uses = set()
        for block in blocks:
            kind = block.get("type")
            _check(kind in allowed, f"messages[{i}]: a {role} message cannot hold a {kind!r} block")
            if kind == "text":
                _check(_text(block.get("text")) and bool(block["text"]), f"messages[{i}]: an empty text block")
            elif kind == "thinking":
                _check(_text(block.get("thinking")) and _text(block.get("signature")) and bool(block["signature"]),
                       f"messages[{i}]: a thinking block needs its signature")  # fmt: skip
            elif kind == "redacted_thinking":
                _check(_text(block.get("data")), f"messages[{i}]: a redacted_thinking block needs its data")
            elif kind == "tool_use":
                _check(_text(block.get("id")) and _text(block.get("name")) and isinstance(block.get("input"), dict),
                       f"messages[{i}]: a malformed tool_use {block}")  # fmt: skip
                uses.add(block["id"])
            elif kind == "image":
                source = block.get("source") or {}
                _check(source.get("type") in ("base64", "url"), f"messages[{i}]: a bad image source")
            elif kind == "tool_result":
                inner = block.get("content")
                _check(inner is None or _text(inner) or isinstance(inner, list), f"messages[{i}]: a bad tool_result")
    _check(not uses, f"the last message's tool_use ids {sorted(uses)} have no tool_result")
    for tool in body.get("tools") or []:
        _check(_text(tool.get("name")) and isinstance(tool.get("input_schema"), dict), f"bad tool {tool}")


def responses_rules(body: dict[str, Any]) -> None:
    given = body.get("input")
    _check(_text(given) or isinstance(given, list), "input must be text or a list of items")
    calls: set[str] = set()
    for i, item in enumerate(given if isinstance(given, list) else []):
        kind = item.get("type", "message")
        if kind == "message":
            role, content = item.get("role"), item.get("content")
            _check(role in ("user", "assistant", "system", "developer"), f"input[{i}]: unknown role {role!r}")
            _check(_text(content) or isinstance(content, list), f"input[{i}]: content must be text or parts")
            wanted = {"output_text", "refusal"} if role == "assistant" else {"input_text", "input_image"}
            for part in content if isinstance(content, list) else []:
                _check(part.get("type") in wanted, f"input[{i}]: a {role} message cannot hold {part.get('type')!r}")
        elif kind == "reasoning":
            _check(_text(item.get("id")) and isinstance(item.get("summary"), list), f"input[{i}]: a reasoning item "
                   "needs its id and summary")  # fmt: skip
            _check(all(s.get("type") == "summary_text" for s in item["summary"]), f"input[{i}]: a bad summary")
        elif kind == "function_call":
            _check(_text(item.get("call_id")) and _text(item.get("name")) and _text(item.get("arguments")),
                   f"input[{i}]: a malformed function_call")  # fmt: skip
            calls.add(item["call_id"])
        elif kind == "function_call_output":
            _check(item.get("call_id") in calls, f"input[{i}]: answers no function_call ({item.get('call_id')})")
            _check(_text(item.get("output")) or isinstance(item.get("output"), list), f"input[{i}]: a bad output")
        else:
            raise Refused(f"input[{i}]: unknown item type {kind!r}")
    for tool in body.get("tools") or []:
        _check(tool.get("type") == "function" and _text(tool.get("name")), f"bad tool {tool}")


_ANSWERS: dict[str, Any] = {
    "chat": {"id": "chatcmpl-rules", "object": "chat.completion", "created": 0, "model": MODEL,
             "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
    "messages": {"id": "msg_rules", "type": "message", "role": "assistant", "model": MODEL,
                 "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None,
                 "usage": {"input_tokens": 1, "output_tokens": 1}},
    "responses": {"id": "resp_rules", "object": "response", "created_at": 0, "status": "completed", "model": MODEL,
                  "output": [{"type": "message", "id": "msg_rules", "status": "completed", "role": "assistant",
                              "content": [{"type": "output_text", "text": "ok", "annotations": []}]}],
                  "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                  "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                            "input_tokens_details": {"cached_tokens": 0},
                            "output_tokens_details": {"reasoning_tokens": 0}}},
}  # fmt: skip
_RULES = {"chat": chat_rules, "messages": messages_rules, "responses": responses_rules}


class RulesServer:
    """``POST /v1/chat/completions``, ``/v1/messages`` and ``/v1/responses`` on 127.0.0.1: a 400 naming the broken
    rule, else a short whole answer. ``accepted`` keeps the bodies it took, by API."""

    def __init__(self) -> None:
        self.accepted: dict[str, list[dict[str, Any]]] = {name: [] for name in _RULES}
        paths = {"chat": "chat/completions", "messages": "messages", "responses": "responses"}
        routes = [Route(f"/v1/{path}", self._route(name), methods=["POST"]) for name, path in paths.items()]
        self._stack = ExitStack()
        self._app = Starlette(routes=routes)
        self.url = ""

    def _route(self, name: str) -> Any:
        async def handle(request: Request) -> JSONResponse:
            body = json.loads(await request.body())
            try:
                _RULES[name](body)
            except Refused as exc:
                error = {"type": "invalid_request_error", "message": str(exc)}
                return JSONResponse({"type": "error", "error": error}, status_code=400)
            self.accepted[name].append(body)
            return JSONResponse(_ANSWERS[name])

        return handle

    def __enter__(self) -> Self:
        self.url = self._stack.enter_context(serve_app(self._app))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
