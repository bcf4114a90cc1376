"""A recorded episode's conversation, cut before each of its requests to the model: what `Trace.conversations`
says the model was sent, to compare with what the server received."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc

import ors_lab as ol
from ors_lab.analysis.conversations.build import build

FIELDS = {"openai": ("messages", "tools"), "anthropic": ("system", "messages", "tools"),
          "responses": ("instructions", "input", "tools")}  # fmt: skip
"""The request fields a conversation gives, by format."""


def before_each_request(path: Path, format: str) -> list[dict[str, Any]]:
    """For each request the trace's one episode made to its model, in order: the episode's conversation (``format``'s
    request fields) as the trace says it was up to that request (its rows before it)."""
    trace = ol.load_trace(path)
    table = trace.table
    episodes = trace.episodes.astype(object).where(trace.episodes.notna(), None).to_dict("records")
    requests = table.filter(pc.and_(pc.equal(table["layer"], "agent"), pc.equal(table["kind"], "request")))
    out = []
    for seq in sorted(requests["seq"].to_pylist()):
        [conversation] = build(table.filter(pc.less(table["seq"], seq)), episodes, format=format)
        out.append(conversation.request())
    return out


def sent(request: dict[str, Any], format: str) -> dict[str, Any]:
    """The conversation fields of a request as the server received it."""
    return {name: request[name] for name in FIELDS[format] if name in request}
