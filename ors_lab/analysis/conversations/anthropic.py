"""Anthropic's Messages API (``POST .../messages``): a conversation as its ``system``, ``messages`` and ``tools``.

Written (``render``):

- the system prompt as ``system``;
- a user message's content as blocks: ``text`` (empty texts left out: the API refuses them) and
  ``image`` (``{"type": "base64", "media_type", "data"}``, or ``{"type": "url", "url"}``);
- an assistant message's blocks in order: reasoning that Anthropic signed as ``thinking`` with its
  ``signature``, redacted reasoning as ``redacted_thinking`` with its ``data`` (other reasoning is left
  out: the API takes back only its own), ``text``, and tool calls as ``tool_use`` with the input as one
  JSON object (``{}`` for none);
- the tools' outcomes as a user message of ``tool_result`` blocks (``content``: the outcome's text and
  image blocks, or its text when it has no block; a failed call's ``error: ...`` text with
  ``is_error``). User messages that follow each other are one (the API wants the roles to alternate);
- each tool as ``{"name", "description", "input_schema"}``.

Read (``read``): ``system`` as text or text blocks; user content as text or blocks (``text``,
``image``, ``tool_result``: outcomes, before the user's own parts); assistant content as text or
blocks (``thinking`` with its signature, ``redacted_thinking``, ``text``, ``tool_use``). Server tools'
blocks are left out: they are the API's own calls, not the conversation's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ors_lab.analysis.conversations.model import (
    Content,
    Dialogue,
    Image,
    Message,
    Part,
    Reasoning,
    Text,
    ToolOutcome,
    ToolUse,
    metadata_of,
    schema_of,
)
from ors_lab.protocol.models import ToolSpec

__all__ = ["MESSAGES", "PATH", "content", "join", "read", "render", "render_messages", "tool_result", "tools"]

PATH = "/messages"
"""How a request's path ends in this API."""
MESSAGES = "messages"
"""The request field that holds the conversation."""


def tools(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tools as Anthropic tools."""
    return [
        {
            "name": spec.name,
            "description": spec.description,
            "input_schema": schema_of(spec),
        }
        for spec in specs
    ]


def content(parts: Sequence[Content]) -> list[dict[str, Any]]:
    """Text and images as content blocks (empty texts left out)."""
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, Text):
            if part.text:
                out.append({"type": "text", "text": part.text})
        elif part.url is not None:
            out.append({"type": "image", "source": {"type": "url", "url": part.url}})
        else:
            source = {"type": "base64", "media_type": part.media_type or "image/png", "data": part.data or ""}
            out.append({"type": "image", "source": source})
    return out


def tool_result(outcome: ToolOutcome) -> dict[str, Any]:
    """A tool call's outcome as the ``tool_result`` block that answers it."""
    if outcome.is_error:
        return {"type": "tool_result", "tool_use_id": outcome.call_id, "content": outcome.text, "is_error": True}
    blocks: list[dict[str, Any]] | str = content(outcome.content) or outcome.text
    return {"type": "tool_result", "tool_use_id": outcome.call_id, "content": blocks}


def _assistant(parts: Sequence[Part]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, Reasoning):
            signature = metadata_of(part.metadata, "anthropic", "signature")
            redacted = metadata_of(part.metadata, "anthropic", "redactedData")
            if isinstance(signature, str):
                out.append({"type": "thinking", "thinking": part.text, "signature": signature})
            elif isinstance(redacted, str):
                out.append({"type": "redacted_thinking", "data": redacted})
        elif isinstance(part, Text):
            if part.text:
                out.append({"type": "text", "text": part.text})
        elif isinstance(part, ToolUse):
            out.append({"type": "tool_use", "id": part.id, "name": part.name, "input": part.input})
    return out


def render_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as the Messages API's (the system prompt is not among them); a message left with no block is
    left out."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            role, blocks = "assistant", _assistant(message.parts)
        elif message.role == "tool":
            role, blocks = "user", [tool_result(p) for p in message.parts if isinstance(p, ToolOutcome)]
        else:
            role, blocks = "user", content([p for p in message.parts if isinstance(p, Text | Image)])
        if blocks:
            out = join(out, [{"role": role, "content": blocks}])
    return out


def join(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages, then more; where the two meet, two messages of one role are one (the API wants the roles to
    alternate), a text content becoming a text block."""
    if not (first and second and first[-1].get("role") == second[0].get("role")):
        return first + second
    merged = {**first[-1], "content": [*_blocks(first[-1].get("content")), *_blocks(second[0].get("content"))]}
    return [*first[:-1], merged, *second[1:]]


def render(dialogue: Dialogue) -> dict[str, Any]:
    """The request's fields for ``dialogue``: ``system`` if any, ``messages``, and ``tools`` if any."""
    request: dict[str, Any] = {}
    if dialogue.system:
        request["system"] = dialogue.system
    request["messages"] = render_messages(dialogue.messages)
    if dialogue.tools:
        request["tools"] = tools(dialogue.tools)
    return request


# -- reading ------------------------------------------------------------------------------------------------


def _blocks(value: Any) -> list[dict[str, Any]]:
    """Content as blocks: a text is one text block."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    return [block for block in value if isinstance(block, dict)] if isinstance(value, list) else []


def _content(blocks: list[dict[str, Any]]) -> tuple[Content, ...]:
    out: list[Content] = []
    for block in blocks:
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            out.append(Text(block["text"]))
        elif block.get("type") == "image" and isinstance(block.get("source"), dict):
            source = block["source"]
            if source.get("type") == "url":
                out.append(Image(url=str(source.get("url") or "")))
            else:
                out.append(Image(source.get("media_type"), source.get("data")))
    return tuple(out)


def _user(blocks: list[dict[str, Any]]) -> list[Message]:
    outcomes = tuple(
        ToolOutcome(str(b.get("tool_use_id") or ""), _content(_blocks(b.get("content"))), b.get("is_error") is True)
        for b in blocks
        if b.get("type") == "tool_result"
    )
    said = _content([b for b in blocks if b.get("type") != "tool_result"])
    return [message for message in (Message("tool", outcomes), Message("user", said)) if message.parts]


def _assistant_parts(blocks: list[dict[str, Any]]) -> tuple[Part, ...]:
    out: list[Part] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "thinking":
            out.append(
                Reasoning(str(block.get("thinking") or ""), {"anthropic": {"signature": block.get("signature")}})
            )
        elif kind == "redacted_thinking":
            out.append(Reasoning("", {"anthropic": {"redactedData": block.get("data")}}))
        elif kind == "text" and isinstance(block.get("text"), str):
            out.append(Text(block["text"]))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {}, separators=(",", ":"), ensure_ascii=False)
            out.append(ToolUse(str(block.get("id") or ""), str(block.get("name") or ""), arguments))
    return tuple(out)


def read(request: dict[str, Any]) -> Dialogue:
    """A request's conversation: its system prompt, messages and tools."""
    system = request.get("system")
    if not isinstance(system, str):
        system = "\n\n".join(part.text for part in _content(_blocks(system)) if isinstance(part, Text)) or None
    messages: list[Message] = []
    for message in request.get("messages") or []:
        if not isinstance(message, dict):
            continue
        blocks = _blocks(message.get("content"))
        if message.get("role") == "assistant":
            messages.append(Message("assistant", _assistant_parts(blocks)))
        else:
            messages.extend(_user(blocks))
    specs = [
        ToolSpec(tool["name"], str(tool.get("description") or ""), tool.get("input_schema"))
        for tool in request.get("tools") or []
        if isinstance(tool, dict) and isinstance(tool.get("name"), str) and "input_schema" in tool
    ]
    return Dialogue(system or None, tuple(messages), tuple(specs))
