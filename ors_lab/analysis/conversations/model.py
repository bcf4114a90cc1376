"""A conversation in no API's shape: what a model was told and answered, and what its tools returned.

Each LLM API's module (``openai``: chat completions, ``anthropic``: Messages, ``responses``: the
Responses API) reads its requests into a ``Dialogue`` and writes one back in its own shape, so that an
episode recorded through one API can be given in another's. The parts keep what an API needs to take
a conversation back: a reasoning part keeps the provider's metadata (an Anthropic thinking block's
signature, a Responses reasoning item's id), a tool call its id and its arguments as the model wrote
them. A part an API has no place for is left out when it is written in that API's shape (documented
per module: chat completions takes no reasoning back, Messages no reasoning that Anthropic did not
sign, Responses no reasoning item it did not make).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from ors_lab.protocol.models import Block, ImageBlock, TextBlock, ToolResult, ToolSpec

__all__ = [
    "Content",
    "Dialogue",
    "Image",
    "Message",
    "Part",
    "Reasoning",
    "Text",
    "ToolOutcome",
    "ToolUse",
    "content_of",
    "failed",
    "metadata_of",
    "outcome_of",
    "schema_of",
]


@dataclass(frozen=True, slots=True)
class Text:
    """Text, as said or shown; ``metadata``, what the provider said of an answer's text beyond it (the Responses API's
    message item id), as the ``providerMetadata`` of its ``text-end`` event."""

    text: str
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Image:
    """An image: base64 ``data`` of type ``media_type``, or one given by ``url``."""

    media_type: str | None = None
    data: str | None = None
    url: str | None = None

    @classmethod
    def from_url(cls, url: str) -> Image:
        """An image from its URL: a base64 ``data:`` URL's type and bytes, or the URL."""
        head, comma, data = url.partition(",")
        if url.startswith("data:") and comma and head.endswith(";base64"):
            return cls(head.removeprefix("data:").removesuffix(";base64") or None, data)
        return cls(url=url)

    @property
    def data_url(self) -> str:
        """The image as one URL: its own, or a ``data:`` URL of its bytes."""
        return self.url if self.url is not None else f"data:{self.media_type or 'image/png'};base64,{self.data or ''}"


Content: TypeAlias = Text | Image


@dataclass(frozen=True, slots=True)
class Reasoning:
    """The model's reasoning (a summary of it, for the APIs that give only that); ``metadata``: what its provider
    said of it beyond its text, by provider, as the ``providerMetadata`` of its ``reasoning-end`` event."""

    text: str
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A tool call the model asked for: its id, the tool's name, its arguments as the model wrote them (JSON text)."""

    id: str
    name: str
    arguments: str
    metadata: Mapping[str, Any] | None = None

    @property
    def input(self) -> dict[str, Any]:
        """The arguments as one JSON object: ``{}`` for none at all or for text that is not one."""
        if not self.arguments.strip():
            return {}
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a tool call gave back to the model: its content, and whether the call failed."""

    call_id: str
    content: tuple[Content, ...]
    is_error: bool = False

    @property
    def text(self) -> str:
        """The text of its content, joined by newlines (images left out), as ``ToolResult.text`` joins it."""
        return "\n".join(part.text for part in self.content if isinstance(part, Text))


Part: TypeAlias = Text | Image | Reasoning | ToolUse | ToolOutcome


@dataclass(frozen=True, slots=True)
class Message:
    """One message: the user's (text and images), the assistant's (reasoning, text, tool calls) or the
    tools' (``ToolOutcome`` parts, one per call answered)."""

    role: Literal["user", "assistant", "tool"]
    parts: tuple[Part, ...]


@dataclass(frozen=True, slots=True)
class Dialogue:
    """A whole conversation: the system prompt, the messages in order, and the tools the model was offered."""

    system: str | None
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()

    def then(self, messages: Sequence[Message]) -> Dialogue:
        """The dialogue with ``messages`` after its own."""
        return Dialogue(self.system, (*self.messages, *messages), self.tools)


def content_of(blocks: Sequence[Block]) -> tuple[Content, ...]:
    """ORS blocks as content: text as text, images as images, another block as a text naming its type (an
    empty text is kept: ``ToolOutcome.text`` joins the texts as ``ToolResult.text`` does; an API that takes no
    empty text leaves it out)."""
    out: list[Content] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            out.append(Text(block.text))
        elif isinstance(block, ImageBlock):
            out.append(Image(block.mime_type, block.data))
        else:
            out.append(Text(f"[{block.type} block]"))
    return tuple(out)


def failed(call_id: str, message: str) -> ToolOutcome:
    """A call that failed, or was never made (its arguments unreadable): the model is told ``error: message``."""
    return ToolOutcome(call_id, (Text(f"error: {message}"),), is_error=True)


def outcome_of(call_id: str, result: ToolResult) -> ToolOutcome:
    """What a tool call's result gives back to the model: its blocks, or its error."""
    if not result.ok:
        return failed(call_id, result.text)
    return ToolOutcome(call_id, content_of(result.blocks))


def metadata_of(metadata: Any, provider: str, key: str) -> Any:
    """``metadata[provider][key]``, or None (provider metadata as events hold it: any JSON)."""
    said = metadata.get(provider) if isinstance(metadata, Mapping) else None
    return said.get(key) if isinstance(said, Mapping) else None


def schema_of(spec: ToolSpec) -> dict[str, Any]:
    """A tool's input schema, as the APIs take it: a JSON object (``{"type": "object"}`` when it has none)."""
    return spec.input_schema if isinstance(spec.input_schema, dict) else {"type": "object"}
