"""The agent's stream rebuilt, the one joiner of its deltas: reasoning, text and tool calls, turn by turn.

An agent streams in the vocabulary of ``ors_lab.events``: ``reasoning-delta`` and ``text-delta``
pieces between their ``-start`` and ``-end``, a tool call's arguments as ``tool-input-delta``
pieces, its whole input (``tool-input-available``), its outcome (``tool-output-available`` or
``tool-output-error``) and its ``reward``, all named by the call's ``toolCallId``; ``block-start``
and ``block-end`` bracket one turn. ``AgentStream`` takes these events one at a time as wire dicts
(``event.to_wire()``, or a trace row's ``data`` parsed) and keeps ``parts``: one ``Part`` per
reasoning or text part, per tool call and per error, its pieces joined, in the order each began.
``turns()`` groups the parts by turn.

It is pure bookkeeping over dicts, so the trace viewer's timeline, ``Trace.transcripts`` and any
live view read the agent the same way::

    stream = AgentStream()
    for item in items:            # {"type": "text-delta", "id": "text-3", "delta": "The answer"}, ...
        stream.feed(item)
    [(turn.name, turn.text, [call.arguments for call in turn.tool_calls]) for turn in stream.turns()]
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["STREAM_KINDS", "AgentStream", "Part", "Turn", "join_stream", "output_text"]

STREAM_KINDS = (
    "block-start",
    "block-end",
    "reasoning-start",
    "reasoning-delta",
    "reasoning-end",
    "text-start",
    "text-delta",
    "text-end",
    "tool-input-start",
    "tool-input-delta",
    "tool-input-end",
    "tool-input-available",
    "tool-output-available",
    "tool-output-error",
    "reward",
    "error",
)
"""The agent kinds ``AgentStream`` reads; it ignores any other (``start``, ``usage``, ``finish``, ...)."""


@dataclass(slots=True)
class Part:
    """One reasoning or text part, tool call or error of the agent's stream, its pieces joined.

    ``kind`` is ``reasoning``, ``text``, ``tool-call`` or ``error``. ``turn`` is the number of the
    turn it came in (1, 2, ...). ``first`` and ``last`` are the positions (``at``) of the first and
    last events that made it; ``pieces`` counts its deltas.
    """

    kind: str
    id: str
    turn: int
    first: Any = None
    last: Any = None
    pieces: int = 0
    done: bool = False
    tool: str | None = None
    input: Any = None
    output: Any = None
    error: str | None = None
    reason: str | None = None
    reward: float | None = None
    finished: bool | None = None
    _chunks: list[str] = field(default_factory=list, repr=False)

    @property
    def text(self) -> str:
        """The joined deltas: the reasoning or text, a tool call's streamed arguments, an error's message."""
        if len(self._chunks) > 1:
            self._chunks[:] = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    @property
    def arguments(self) -> str:
        """A tool call's arguments as JSON text: as streamed when they were, else its whole input."""
        if self._chunks or self.input is None:
            return self.text
        return json.dumps(self.input, ensure_ascii=False, separators=(",", ":"), default=str)

    def describe(self) -> str:
        """One line: ``tool(arguments)`` for a tool call, the text otherwise."""
        return f"{self.tool or '?'}({self.arguments})" if self.kind == "tool-call" else self.text


@dataclass(slots=True)
class Turn:
    """One turn of the agent (a ``block``), or the parts it streamed between turns (``name`` None)."""

    number: int
    name: str | None = None
    id: str | None = None
    parts: list[Part] = field(default_factory=list)

    def _joined(self, kind: str) -> str:
        return "\n\n".join(part.text for part in self.parts if part.kind == kind)

    @property
    def reasoning(self) -> str:
        """Its reasoning parts, joined by blank lines."""
        return self._joined("reasoning")

    @property
    def text(self) -> str:
        """Its text parts, joined by blank lines."""
        return self._joined("text")

    @property
    def tool_calls(self) -> list[Part]:
        """Its tool calls, in order."""
        return [part for part in self.parts if part.kind == "tool-call"]

    @property
    def errors(self) -> list[str]:
        """Its errors and failed tool calls' errors."""
        return [part.error or part.text for part in self.parts if part.error is not None or part.kind == "error"]


class AgentStream:
    """An agent's stream, rebuilt as it is fed: see the module docstring."""

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self._open: dict[tuple[str, str], Part] = {}  # (kind, id) -> its part, for reasoning and text
        self._calls: dict[str, Part] = {}  # toolCallId -> its part
        self._turns: list[Turn] = []
        self._in_block = False
        self._loose: Turn | None = None  # the turn of the parts streamed since the last block ended

    def feed(self, item: Mapping[str, Any], at: Any = None) -> Part | None:
        """Take one event (its wire dict) seen at position ``at``; return the part it made or changed."""
        kind = item.get("type")
        if kind == "block-start":
            self._turns.append(Turn(len(self._turns) + 1, _str(item.get("blockName")), _str(item.get("blockId"))))
            self._in_block, self._loose = True, None
            return None
        if kind == "block-end":
            self._in_block = False
            return None
        if kind in ("reasoning-start", "reasoning-delta", "reasoning-end", "text-start", "text-delta", "text-end"):
            part_kind, _, step = str(kind).partition("-")
            key = (part_kind, str(item.get("id") or ""))
            part = self._open.get(key)
            if part is None or part.done:
                part = self._open[key] = self._new(part_kind, key[1], at)
            if step == "delta":
                self._piece(part, item.get("delta"))
            elif step == "end":
                part.done = True
            part.last = at
            return part
        if kind in ("tool-input-start", "tool-input-delta", "tool-input-end", "tool-input-available",
                    "tool-output-available", "tool-output-error", "reward"):  # fmt: skip
            part = self._call(str(item.get("toolCallId") or ""), at)
            part.last = at
            if kind in ("tool-input-start", "tool-input-available") and item.get("toolName") is not None:
                part.tool = str(item["toolName"])
            if kind == "tool-input-delta":
                self._piece(part, item.get("inputTextDelta"))
            elif kind == "tool-input-available":
                part.input = item.get("input")
            elif kind == "tool-output-available":
                part.output, part.done = item.get("output"), True
            elif kind == "tool-output-error":
                part.error, part.reason, part.done = str(item.get("error") or ""), _str(item.get("reason")), True
            elif kind == "reward":
                part.reward, part.finished = _float(item.get("reward")), bool(item.get("finished"))
            return part
        if kind == "error":
            part = self._new("error", str(item.get("code") or item.get("errorType") or "error"), at)
            part.error, part.reason, part.done = str(item.get("message") or ""), _str(item.get("errorType")), True
            self._piece(part, item.get("message"))
            part.last = at
            return part
        return None

    def turns(self) -> list[Turn]:
        """The turns with at least one part, in order."""
        return [turn for turn in self._turns if turn.parts]

    def _turn(self) -> Turn:
        if self._in_block:
            return self._turns[-1]
        if self._loose is None:  # parts outside any block: a turn of their own, unnamed
            self._loose = Turn(len(self._turns) + 1)
            self._turns.append(self._loose)
        return self._loose

    def _new(self, kind: str, id: str, at: Any) -> Part:
        turn = self._turn()
        part = Part(kind, id, turn.number, first=at, last=at)
        turn.parts.append(part)
        self.parts.append(part)
        return part

    def _call(self, call_id: str, at: Any) -> Part:
        part = self._calls.get(call_id)
        if part is None:
            part = self._calls[call_id] = self._new("tool-call", call_id, at)
        return part

    @staticmethod
    def _piece(part: Part, text: Any) -> None:
        if text is not None:
            part._chunks.append(str(text))
            part.pieces += 1


def join_stream(items: Iterable[Mapping[str, Any]]) -> AgentStream:
    """An ``AgentStream`` fed ``items`` in order (their positions as ``at``)."""
    stream = AgentStream()
    for index, item in enumerate(items):
        stream.feed(item, index)
    return stream


def output_text(value: Any) -> str | None:
    """A tool's output as a person reads it: its text blocks joined by newlines, an image as
    ``[image/png image]``, another block as ``[its-type block]``.

    ``value`` is a ``/call`` result as its stream ends (``{"ok": true, "output": {"blocks": ...}}``),
    the output in it, or an agent's ``tool-output-available`` output; None for a failed result or
    anything else.
    """
    if not isinstance(value, Mapping):
        return None
    if "ok" in value:
        if value.get("ok") is not True:
            return None
        value = value.get("output")
        if not isinstance(value, Mapping):
            return None
    blocks = value.get("blocks")
    if not isinstance(blocks, list):
        text = value.get("text")
        return text if isinstance(text, str) else None
    lines = []
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            lines.append(block["text"])
        elif kind == "image":
            lines.append(f"[{block.get('mimeType') or 'an'} image]")
        else:
            lines.append(f"[{kind} block]")
    return "\n".join(lines)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _float(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None
