"""The agent's stream rebuilt, the one joiner of its deltas: reasoning, text and tool calls, turn by turn.

An agent streams in the vocabulary of ``ors_lab.events``: ``reasoning-delta`` and ``text-delta``
pieces between their ``-start`` and ``-end``, a tool call's arguments as ``tool-input-delta``
pieces, its whole input (``tool-input-available``), its outcome (``tool-output-available`` or
``tool-output-error``) and its ``reward``, all named by the call's ``toolCallId``; ``block-start``
and ``block-end`` bracket one turn. ``AgentStream`` takes these events one at a time as wire dicts
(``event.to_wire()``, or a trace row's ``data`` parsed) and keeps ``parts``: one ``Part`` per
reasoning or text part, per tool call and per error, its pieces joined, in the order each began.
``turns()`` groups the parts by turn. ``take(event)`` is the same for a typed event
(``ors_lab.events``: read by its ``kind`` and fields, so this module imports nothing of ours).

It is pure bookkeeping, so the trace viewer's timeline, ``Trace.transcripts``, the run dashboard's
live panes and transcripts read the agent the same way::

    stream = AgentStream()
    for item in items:            # {"type": "text-delta", "id": "text-3", "delta": "The answer"}, ...
        stream.feed(item)
    [(turn.name, turn.text, [call.arguments for call in turn.tool_calls]) for turn in stream.turns()]

``join_deltas(events)`` is the same joining for a run's live feed: the deltas of one part that follow
each other in an episode become one event (``DELTA_FIELDS`` names their fields).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DELTA_FIELDS",
    "PART_KINDS",
    "STREAM_KINDS",
    "AgentStream",
    "Part",
    "Turn",
    "join_deltas",
    "join_stream",
    "output_text",
]

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
PART_KINDS = STREAM_KINDS[2:11]
"""The kinds that begin, extend or end a part from its pieces: reasoning, text, a tool call's streamed input."""
DELTA_FIELDS = {
    "text-delta": ("id", "delta", "delta"),
    "reasoning-delta": ("id", "delta", "delta"),
    "tool-input-delta": ("tool_call_id", "input_text_delta", "inputTextDelta"),
}
"""The delta kinds: the field naming the part, the field of the delta and its wire key (``join_deltas``)."""
_WIRE = {"block_name": "blockName", "block_id": "blockId", "id": "id", "delta": "delta", "tool_call_id": "toolCallId",
         "tool_name": "toolName", "input_text_delta": "inputTextDelta", "input": "input", "output": "output",
         "error": "error", "reason": "reason", "reward": "reward", "finished": "finished", "code": "code",
         "error_type": "errorType", "message": "message", "provider_metadata": "providerMetadata"}  # fmt: skip
"""A field of a typed event -> its key in the event's wire dict."""


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
    streamed: bool = False
    """A tool call whose input the agent streamed (an LLM's call, read from its answer), not only made."""
    metadata: Any = None
    """What the provider said of the part beyond its text (its end's ``providerMetadata``: a thinking block's
    signature, a Responses item's id), or None."""
    _chunks: list[str] = field(default_factory=list, repr=False)

    @property
    def text(self) -> str:
        """The joined deltas: the reasoning or text, a tool call's streamed arguments, an error's message."""
        if len(self._chunks) > 1:
            self._chunks[:] = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    @property
    def arguments(self) -> str:
        """A tool call's arguments as JSON text: as streamed when they were (nothing at all, when the model streamed
        none), else its whole input."""
        if self._chunks or self.streamed or self.input is None:
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


_TEXT_KINDS = frozenset(STREAM_KINDS[2:8])
_CALL_KINDS = frozenset((*STREAM_KINDS[8:14], "reward"))


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
        return self._step(item.get("type"), lambda name: item.get(_WIRE[name]), at)

    def take(self, event: Any, at: Any = None) -> Part | None:
        """``feed`` for a typed event (an ``ors_lab.events`` event, read by its ``kind`` and fields)."""
        return self._step(event.kind, lambda name: getattr(event, name, None), at)

    def _step(self, kind: Any, get: Callable[[str], Any], at: Any) -> Part | None:
        """One event of ``kind``, its fields by ``get(name)``: the one joiner of both entries."""
        if kind == "block-start":
            self._turns.append(Turn(len(self._turns) + 1, _str(get("block_name")), _str(get("block_id"))))
            self._in_block, self._loose = True, None
            return None
        if kind == "block-end":
            self._in_block = False
            return None
        if kind in _TEXT_KINDS:
            part_kind, _, step = str(kind).partition("-")
            key = (part_kind, str(get("id") or ""))
            part = self._open.get(key)
            if part is None or part.done:
                part = self._open[key] = self._new(part_kind, key[1], at)
            if step == "delta":
                self._piece(part, get("delta"))
            elif step == "end":
                part.done, part.metadata = True, get("provider_metadata")
            part.last = at
            return part
        if kind in _CALL_KINDS:
            part = self._call(str(get("tool_call_id") or ""), at)
            part.last = at
            if kind in ("tool-input-start", "tool-input-available") and get("tool_name") is not None:
                part.tool = str(get("tool_name"))
            if kind in ("tool-input-start", "tool-input-delta"):
                part.streamed = True
            if kind == "tool-input-delta":
                self._piece(part, get("input_text_delta"))
            elif kind == "tool-input-end":
                part.metadata = get("provider_metadata")
            elif kind == "tool-input-available":
                part.input = get("input")
            elif kind == "tool-output-available":
                part.output, part.done = get("output"), True
            elif kind == "tool-output-error":
                part.error, part.reason, part.done = str(get("error") or ""), _str(get("reason")), True
            elif kind == "reward":
                part.reward, part.finished = _float(get("reward")), bool(get("finished"))
            return part
        if kind == "error":
            part = self._new("error", str(get("code") or get("error_type") or "error"), at)
            part.error, part.reason, part.done = str(get("message") or ""), _str(get("error_type")), True
            self._piece(part, get("message"))
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


def join_deltas(events: Iterable[Any]) -> list[tuple[Any, list[str]]]:
    """Each event with the deltas joined onto it: the deltas of one part (``DELTA_FIELDS``) that follow each
    other in an episode (its ``session_id``) are the first one's, the later ones' pieces in a list beside it."""
    items: list[tuple[Any, list[str]]] = []
    last: dict[str | None, int] = {}  # session -> index of its latest item
    for event in events:
        spec = DELTA_FIELDS.get(event.kind)
        sid = event.session_id
        if spec is not None:
            at = last.get(sid)
            if at is not None:
                previous, more = items[at]
                if previous.kind == event.kind and getattr(previous, spec[0]) == getattr(event, spec[0]):
                    more.append(getattr(event, spec[1]))
                    continue
        last[sid] = len(items)
        items.append((event, []))
    return items


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
