"""The Responses API (``POST .../responses``): a conversation as its ``instructions``, ``input`` items and ``tools``.

Written (``render``), statelessly (every item sent again, no ``previous_response_id``):

- the system prompt as ``instructions``;
- a user message as ``{"role": "user", "content": ...}``: its text when it is one text, else parts
  (``input_text``, ``input_image`` with the image's URL);
- an assistant message as the items the API gave: reasoning it made as a ``reasoning`` item (its
  ``id``, its text as one ``summary_text``, its ``encrypted_content`` when it was asked for; other
  reasoning is left out: the API takes back only its own items), text as a ``message`` item
  (``output_text``), tool calls as ``function_call`` items (``call_id``, ``name``, ``arguments``; the
  item's ``id`` when it is known);
- each tool outcome as a ``function_call_output`` item, keyed by the call's ``call_id`` (not its item
  id), its text as ``output``;
- each tool flat, as this API takes them: ``{"type": "function", "name", "description", "parameters",
  "strict": false}``.

Read (``read``): ``instructions`` and ``system`` / ``developer`` messages as the system prompt; ``input``
as one text or items: messages (``input_text``, ``output_text``, ``input_image`` parts), ``reasoning``
items (their summary's texts joined by blank lines, their id and encrypted content kept),
``function_call`` and ``function_call_output`` items.
"""

from __future__ import annotations

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

__all__ = ["MESSAGES", "PATH", "function_call_output", "join", "read", "render", "render_messages", "tools"]

PATH = "/responses"
"""How a request's path ends in this API."""
MESSAGES = "input"
"""The request field that holds the conversation."""


def tools(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tools as the Responses API's function tools (flat, not strict)."""
    return [
        {
            "type": "function",
            "name": spec.name,
            "description": spec.description,
            "parameters": schema_of(spec),
            "strict": False,
        }
        for spec in specs
    ]


def function_call_output(outcome: ToolOutcome) -> dict[str, Any]:
    """A tool call's outcome as the item that answers it (keyed by the call's ``call_id``)."""
    return {"type": "function_call_output", "call_id": outcome.call_id, "output": outcome.text}


def _user(parts: Sequence[Content]) -> dict[str, Any]:
    if len(parts) == 1 and isinstance(parts[0], Text):
        return {"role": "user", "content": parts[0].text}
    return {"role": "user", "content": [
        {"type": "input_text", "text": part.text}
        if isinstance(part, Text)
        else {"type": "input_image", "image_url": part.data_url}
        for part in parts
    ]}  # fmt: skip


def _assistant(parts: Sequence[Part]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in parts:
        item_id = metadata_of(getattr(part, "metadata", None), "openai", "itemId")
        if isinstance(part, Reasoning):
            if not isinstance(item_id, str):
                continue
            summary = [{"type": "summary_text", "text": part.text}] if part.text else []
            item: dict[str, Any] = {"type": "reasoning", "id": item_id, "summary": summary}
            encrypted = metadata_of(part.metadata, "openai", "reasoningEncryptedContent")
            if isinstance(encrypted, str):
                item["encrypted_content"] = encrypted
            out.append(item)
        elif isinstance(part, Text):
            text = {"type": "output_text", "text": part.text, "annotations": []}
            message: dict[str, Any] = {"type": "message", "role": "assistant", "content": [text]}
            if isinstance(item_id, str):
                message.update(id=item_id, status="completed")
            out.append(message)
        elif isinstance(part, ToolUse):
            call: dict[str, Any] = {"type": "function_call", "call_id": part.id, "name": part.name,
                                    "arguments": part.arguments}  # fmt: skip
            if isinstance(item_id, str):
                call.update(id=item_id, status="completed")
            out.append(call)
    return out


def render_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as the Responses API's input items (the instructions are not among them)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            out.extend(function_call_output(part) for part in message.parts if isinstance(part, ToolOutcome))
        elif message.role == "user":
            out.append(_user([p for p in message.parts if isinstance(p, Text | Image)]))
        else:
            out.extend(_assistant(message.parts))
    return out


def join(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages, then more."""
    return first + second


def render(dialogue: Dialogue) -> dict[str, Any]:
    """The request's fields for ``dialogue``: ``instructions`` if any, ``input``, and ``tools`` if any."""
    request: dict[str, Any] = {}
    if dialogue.system:
        request["instructions"] = dialogue.system
    request["input"] = render_messages(dialogue.messages)
    if dialogue.tools:
        request["tools"] = tools(dialogue.tools)
    return request


# -- reading ------------------------------------------------------------------------------------------------


def _parts(content: Any) -> tuple[Content, ...]:
    if isinstance(content, str):
        return (Text(content),)
    out: list[Content] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            out.append(Text(part["text"]))
        elif part.get("type") == "input_image" and isinstance(part.get("image_url"), str):
            out.append(Image.from_url(part["image_url"]))
    return tuple(out)


def _item(item: dict[str, Any]) -> tuple[str, Part | tuple[Content, ...]] | None:
    """An input item as (the role of the message it belongs to, its part or parts)."""
    kind = item.get("type", "message")
    item_id = item.get("id")
    openai = {"itemId": item_id} if isinstance(item_id, str) else None
    if kind == "message":
        role = item.get("role")
        if role in ("system", "developer"):
            return "system", _parts(item.get("content"))
        if role != "assistant":
            return "user", _parts(item.get("content"))
        texts = [part.text for part in _parts(item.get("content")) if isinstance(part, Text)]
        return "assistant", Text("".join(texts), {"openai": openai} if openai else None)
    if kind == "reasoning":
        summary = [s.get("text", "") for s in item.get("summary") or [] if isinstance(s, dict)]
        said = dict(openai or {})
        if isinstance(item.get("encrypted_content"), str):
            said["reasoningEncryptedContent"] = item["encrypted_content"]
        return "assistant", Reasoning("\n\n".join(summary), {"openai": said} if said else None)
    if kind == "function_call":
        arguments = item.get("arguments")
        text = arguments if isinstance(arguments, str) else ""
        metadata = {"openai": openai} if openai else None
        return "assistant", ToolUse(str(item.get("call_id") or ""), str(item.get("name") or ""), text, metadata)
    if kind == "function_call_output":
        output = item.get("output")
        return "tool", ToolOutcome(str(item.get("call_id") or ""), _parts(output) if output is not None else ())
    return None


def read(request: dict[str, Any]) -> Dialogue:
    """A request's conversation: its instructions, input items and function tools."""
    system = [request["instructions"]] if isinstance(request.get("instructions"), str) else []
    given = request.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else given if isinstance(given, list) else []
    messages: list[Message] = []
    for item in items:
        read_item = _item(item) if isinstance(item, dict) else None
        if read_item is None:
            continue
        role, parts = read_item
        if role == "system":
            system.extend(part.text for part in parts if isinstance(part, Text))  # type: ignore[union-attr]
            continue
        new = parts if isinstance(parts, tuple) else (parts,)
        if messages and messages[-1].role == role and role != "user":  # one assistant turn, one set of outcomes
            messages[-1] = Message(messages[-1].role, (*messages[-1].parts, *new))
        else:
            messages.append(Message(role, new))  # type: ignore[arg-type]
    specs = [
        ToolSpec(tool["name"], str(tool.get("description") or ""), tool.get("parameters"))
        for tool in request.get("tools") or []
        if isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("name"), str)
    ]
    return Dialogue("\n\n".join(system) or None, tuple(messages), tuple(specs))
