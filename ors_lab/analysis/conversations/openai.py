"""Chat completions (``POST .../chat/completions``): a conversation as its ``messages`` and ``tools``.

Written (``render``):

- the system prompt as the first message, ``{"role": "system", "content": ...}``;
- a user message's content as its text when it is one text, else as parts (``text``, and ``image_url``
  with the image's URL, a ``data:`` URL for its bytes);
- an assistant message as ``content`` (its texts joined; None when it has none) and ``tool_calls``
  (``{"id", "type": "function", "function": {"name", "arguments"}}``, the arguments as the model wrote
  them). Reasoning is left out: chat completions takes none back;
- each tool outcome as a ``tool`` message, ``{"role": "tool", "tool_call_id", "content"}``, its text
  (a failed call's ``error: ...``);
- each tool as ``{"type": "function", "function": {"name", "description", "parameters"}}``.

Read (``read``): ``system`` and ``developer`` messages are the system prompt (joined by blank lines);
``user`` content as text or parts (``text``, ``image_url``); an assistant's ``content``,
``reasoning_content`` (or ``reasoning``: as reasoning), and ``tool_calls``; ``tool`` messages as
outcomes, those that follow each other in one message of outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ors_lab.analysis.conversations.model import (
    Content,
    Dialogue,
    Image,
    Message,
    Reasoning,
    Text,
    ToolOutcome,
    ToolUse,
    schema_of,
)
from ors_lab.protocol.models import ToolSpec

__all__ = ["MESSAGES", "PATH", "join", "read", "render", "render_messages", "tool_message", "tools"]

PATH = "/chat/completions"
"""How a request's path ends in this API."""
MESSAGES = "messages"
"""The request field that holds the conversation."""


def tools(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tools as function tools."""
    return [
        {
            "type": "function",
            "function": {"name": spec.name, "description": spec.description, "parameters": schema_of(spec)},
        }
        for spec in specs
    ]


def tool_message(outcome: ToolOutcome) -> dict[str, Any]:
    """A tool call's outcome as the ``tool`` message that answers it."""
    return {"role": "tool", "tool_call_id": outcome.call_id, "content": outcome.text}


def _content(parts: Sequence[Content]) -> str | list[dict[str, Any]]:
    if len(parts) == 1 and isinstance(parts[0], Text):
        return parts[0].text
    return [
        {"type": "text", "text": part.text}
        if isinstance(part, Text)
        else {"type": "image_url", "image_url": {"url": part.data_url}}
        for part in parts
    ]


def render_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as chat completions' messages (the system prompt is not among them)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            out.extend(tool_message(part) for part in message.parts if isinstance(part, ToolOutcome))
        elif message.role == "user":
            out.append({"role": "user", "content": _content([p for p in message.parts if isinstance(p, Text | Image)])})
        else:
            texts = [part.text for part in message.parts if isinstance(part, Text)]
            said: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
            calls = [part for part in message.parts if isinstance(part, ToolUse)]
            if calls:
                said["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in calls
                ]
            out.append(said)
    return out


def join(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages, then more."""
    return first + second


def render(dialogue: Dialogue) -> dict[str, Any]:
    """The request's fields for ``dialogue``: ``messages`` (the system prompt first), and ``tools`` if any."""
    messages = [{"role": "system", "content": dialogue.system}] if dialogue.system else []
    request: dict[str, Any] = {"messages": messages + render_messages(dialogue.messages)}
    if dialogue.tools:
        request["tools"] = tools(dialogue.tools)
    return request


# -- reading ------------------------------------------------------------------------------------------------


def _text(content: Any) -> str:
    """A message's content as text: the text itself, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _parts(content: Any) -> tuple[Content, ...]:
    if isinstance(content, str):
        return (Text(content),)
    out: list[Content] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            out.append(Text(part["text"]))
        elif part.get("type") == "image_url":
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if isinstance(url, str):
                out.append(Image.from_url(url))
    return tuple(out)


def _assistant(message: dict[str, Any]) -> Message:
    parts: list[Any] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        parts.append(Reasoning(reasoning))
    text = _text(message.get("content"))
    if text:
        parts.append(Text(text))
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            arguments = function.get("arguments")
            parts.append(ToolUse(str(call.get("id") or ""), str(function.get("name") or ""),
                                 arguments if isinstance(arguments, str) else ""))  # fmt: skip
    return Message("assistant", tuple(parts))


def read(request: dict[str, Any]) -> Dialogue:
    """A request's conversation: its messages, system prompt and function tools."""
    system: list[str] = []
    messages: list[Message] = []
    for message in request.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text(message.get("content")))
        elif role == "user":
            messages.append(Message("user", _parts(message.get("content"))))
        elif role == "assistant":
            messages.append(_assistant(message))
        elif role == "tool":
            outcome = ToolOutcome(str(message.get("tool_call_id") or ""), (Text(_text(message.get("content"))),))
            if messages and messages[-1].role == "tool":
                messages[-1] = Message("tool", (*messages[-1].parts, outcome))
            else:
                messages.append(Message("tool", (outcome,)))
    specs = []
    for tool in request.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            specs.append(ToolSpec(function["name"], str(function.get("description") or ""), function.get("parameters")))
    return Dialogue("\n\n".join(system) or None, tuple(messages), tuple(specs))
