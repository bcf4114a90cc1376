"""The three LLM APIs a conversation is given in, by name: ``openai`` (chat completions), ``anthropic`` (Messages),
``responses`` (the Responses API); which one a request was sent to; and a recorded request continued in any of them."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ors_lab.analysis.conversations import anthropic, openai, responses
from ors_lab.analysis.conversations.model import Dialogue, Message

__all__ = ["FORMATS", "check", "continued", "of", "rendered", "request_fields"]

FORMATS: dict[str, ModuleType] = {"openai": openai, "anthropic": anthropic, "responses": responses}
"""Each API's module: how its requests' paths end (``PATH``), the field of its conversation (``MESSAGES``), and its
``read``, ``render``, ``render_messages``, ``join`` and ``tools``."""
SYSTEM = {"openai": None, "anthropic": "system", "responses": "instructions"}
"""The request field of each API's system prompt (chat completions holds it among the messages)."""
_SENT_ONLY = ("stream", "stream_options")
"""Request fields that say how the answer is sent, not what is asked: not among a conversation's ``params``."""


def check(format: str) -> None:
    """A ``ValueError`` naming the formats, for a name that is not one."""
    if format not in FORMATS:
        raise ValueError(f"unknown conversation format {format!r}; the formats: {', '.join(map(repr, FORMATS))}")


def of(method: str | None, path: str) -> str | None:
    """The API a request asks a model's answer of (``POST`` to a path ending as that API's do), else None."""
    if method != "POST":
        return None
    return next((name for name, module in FORMATS.items() if path.endswith(module.PATH)), None)


def _fields(format: str, request: dict[str, Any]) -> dict[str, Any]:
    """A request's system prompt, messages and tools, under the names ``system``, ``messages`` and ``tools``."""
    fields: dict[str, Any] = {"messages": request.get(FORMATS[format].MESSAGES)}
    if format == "responses" and isinstance(fields["messages"], str):  # one text is one user message
        fields["messages"] = [{"role": "user", "content": fields["messages"]}]
    system = SYSTEM[format]
    if system is not None and request.get(system) is not None:
        fields["system"] = request[system]
    if request.get("tools"):
        fields["tools"] = request["tools"]
    return fields


def request_fields(format: str, system: Any, messages: list[Any], tools: list[Any]) -> dict[str, Any]:
    """A conversation's fields under the API's own names (``_fields`` undone)."""
    request: dict[str, Any] = {}
    name = SYSTEM[format]
    if name is not None and system:
        request[name] = system
    request[FORMATS[format].MESSAGES] = messages
    if tools:
        request["tools"] = tools
    return request


def rendered(format: str, dialogue: Dialogue) -> dict[str, Any]:
    """``dialogue`` written in ``format``, under the names ``_fields`` gives."""
    return _fields(format, FORMATS[format].render(dialogue))


def continued(
    format: str, recorded: str, request: dict[str, Any], tail: list[Message]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A recorded request to ``recorded``'s API, then ``tail``, in ``format``: the request's own fields, byte for
    byte, when it is the same API (and the rest of the request as ``params``), else the request read and written
    again (with no ``params``: they are another API's)."""
    if recorded != format:
        return rendered(format, FORMATS[recorded].read(request).then(tail)), {}
    module = FORMATS[format]
    fields = _fields(format, request)
    fields["messages"] = module.join(list(fields["messages"] or []), module.render_messages(tail))
    params = {k: v for k, v in request.items() if k not in (module.MESSAGES, SYSTEM[format], "tools", *_SENT_ONLY)}
    return fields, params
