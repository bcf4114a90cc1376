"""The ORS data model, named in the protocol's own words, as small frozen dataclasses.

Every model converts from the server's JSON with ``from_wire`` and back with ``to_wire``; the
wire form is the compact JSON both reference servers send (see ``shared/ors-protocol.md``).
Each has a short ``repr``; in Jupyter the blocks, results, tasks, splits and tools show as the
display hook draws them (``ors_lab.display.bundle``: the notebook layer registers their HTML,
``ors_lab.viewer.blocks``), else as that ``repr``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ors_lab.display import bundle

__all__ = [
    "Block",
    "ImageBlock",
    "OtherBlock",
    "Split",
    "Task",
    "TextBlock",
    "ToolOutput",
    "ToolResult",
    "ToolSpec",
    "block_from_wire",
    "blocks_from_wire",
]

JSON: TypeAlias = Any


class WireFormatError(ValueError):
    """A JSON value does not have the shape the protocol gives it."""


class _Shown:
    """How a model shows itself when displayed: as the display hook draws it, else as its ``repr``."""

    __slots__ = ()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return bundle(self) or {"text/plain": repr(self)}

    def _repr_html_(self) -> str | None:
        drawn = bundle(self)
        return None if drawn is None else drawn.get("text/html")


def _require(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind):
        raise WireFormatError(f"{what}: expected {getattr(kind, '__name__', kind)}, got {value!r:.80}")
    return value


@dataclass(frozen=True, slots=True)
class TextBlock(_Shown):
    """A text block: ``{"text": ..., "detail": ..., "type": "text"}``."""

    text: str
    detail: JSON = None
    type: str = field(default="text", init=False)

    def to_wire(self) -> dict[str, JSON]:
        return {"text": self.text, "detail": self.detail, "type": "text"}

    def __repr__(self) -> str:
        text = self.text if len(self.text) <= 60 else f"{self.text[:57]}..."
        return f"TextBlock({text!r})" if len(self.text) <= 60 else f"TextBlock({text!r}, chars={len(self.text)})"


@dataclass(frozen=True, slots=True)
class ImageBlock(_Shown):
    """An image block: base64 ``data`` and its ``mimeType``."""

    data: str
    mime_type: str
    detail: JSON = None
    type: str = field(default="image", init=False)

    def to_wire(self) -> dict[str, JSON]:
        return {"data": self.data, "mimeType": self.mime_type, "detail": self.detail, "type": "image"}

    def __repr__(self) -> str:
        return f"ImageBlock({self.mime_type!r}, base64_chars={len(self.data)})"


@dataclass(frozen=True, slots=True)
class OtherBlock:
    """A block of a type this version does not model; its fields are kept as they came."""

    type: str
    fields: Mapping[str, JSON]

    def to_wire(self) -> dict[str, JSON]:
        return {**self.fields, "type": self.type}


Block: TypeAlias = TextBlock | ImageBlock | OtherBlock


def block_from_wire(value: JSON) -> Block:
    """One block from its JSON object."""
    _require(value, dict, "block")
    kind = value.get("type")
    if kind == "text":
        return TextBlock(text=_require(value.get("text"), str, "text block 'text'"), detail=value.get("detail"))
    if kind == "image":
        return ImageBlock(
            data=_require(value.get("data"), str, "image block 'data'"),
            mime_type=_require(value.get("mimeType"), str, "image block 'mimeType'"),
            detail=value.get("detail"),
        )
    _require(kind, str, "block 'type'")
    return OtherBlock(type=kind, fields={k: v for k, v in value.items() if k != "type"})


def blocks_from_wire(value: JSON) -> tuple[Block, ...]:
    """A list of blocks from JSON."""
    return tuple(block_from_wire(item) for item in _require(value, list, "blocks"))


def _text_of(blocks: Sequence[Block]) -> str:
    return "\n".join(block.text for block in blocks if isinstance(block, TextBlock))


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool returned: ``blocks``, ``metadata``, ``reward`` and ``finished``."""

    blocks: tuple[Block, ...] = ()
    metadata: JSON = None
    reward: float | None = None
    finished: bool = False

    @classmethod
    def from_wire(cls, value: JSON) -> ToolOutput:
        _require(value, dict, "output")
        reward = value.get("reward")
        if reward is not None:
            if isinstance(reward, bool):
                raise WireFormatError(f"output 'reward': expected a number, got {reward!r}")
            reward = float(_require(reward, (int, float), "output 'reward'"))
        return cls(
            blocks=blocks_from_wire(value.get("blocks", [])),
            metadata=value.get("metadata"),
            reward=reward,
            finished=bool(_require(value.get("finished", False), bool, "output 'finished'")),
        )

    def to_wire(self) -> dict[str, JSON]:
        return {
            "blocks": [block.to_wire() for block in self.blocks],
            "metadata": self.metadata,
            "reward": self.reward,
            "finished": self.finished,
        }


@dataclass(frozen=True, slots=True)
class ToolResult(_Shown):
    """The outcome of one ``/call``: the tool's output when ``ok``, else the server's ``error``.

    ``ok=False`` is an ORS logic failure (unknown tool, invalid input, finished episode): data for
    the agent, not an exception. ``reason`` is set when the server gives one (openreward does).
    """

    ok: bool
    blocks: tuple[Block, ...] = ()
    reward: float | None = None
    finished: bool = False
    metadata: JSON = None
    error: str | None = None
    reason: str | None = None
    task_id: str | None = field(default=None, compare=False)

    @classmethod
    def from_wire(cls, value: JSON, *, task_id: str | None = None) -> ToolResult:
        """Build from a ``RunToolOutput`` JSON object (the payload of ``end``)."""
        _require(value, dict, "result")
        ok = _require(value.get("ok"), bool, "result 'ok'")
        if ok:
            output = ToolOutput.from_wire(value.get("output"))
            return cls(
                ok=True,
                blocks=output.blocks,
                reward=output.reward,
                finished=output.finished,
                metadata=output.metadata,
                task_id=task_id,
            )
        reason = value.get("reason")
        return cls(
            ok=False,
            error=_require(value.get("error"), str, "result 'error'"),
            reason=None if reason is None else str(reason),
            task_id=task_id,
        )

    @property
    def output(self) -> ToolOutput | None:
        """The tool's output, or None when the call failed (``ok=False``)."""
        if not self.ok:
            return None
        return ToolOutput(blocks=self.blocks, metadata=self.metadata, reward=self.reward, finished=self.finished)

    @property
    def text(self) -> str:
        """The text blocks joined by newlines (the error message when not ok)."""
        return _text_of(self.blocks) if self.ok else (self.error or "")

    def to_wire(self) -> dict[str, JSON]:
        if self.ok:
            return {"ok": True, "output": self.output.to_wire()}  # type: ignore[union-attr]
        wire: dict[str, JSON] = {"ok": False, "error": self.error}
        if self.reason is not None:
            wire["reason"] = self.reason
        return wire

    def __repr__(self) -> str:
        if not self.ok:
            reason = f", reason={self.reason!r}" if self.reason else ""
            error = self.error if self.error is None or len(self.error) <= 80 else f"{self.error[:77]}..."
            return f"ToolResult(ok=False, error={error!r}{reason})"
        return f"ToolResult(ok=True, reward={self.reward}, finished={self.finished}, blocks={len(self.blocks)})"


@dataclass(frozen=True, slots=True)
class Split(_Shown):
    """A split of an environment's tasks: ``name`` and ``type`` (train, validation or test)."""

    name: str
    type: str

    @classmethod
    def from_wire(cls, value: JSON) -> Split:
        _require(value, dict, "split")
        return cls(
            name=_require(value.get("name"), str, "split 'name'"),
            type=_require(value.get("type"), str, "split 'type'"),
        )

    def to_wire(self) -> dict[str, JSON]:
        return {"name": self.name, "type": self.type}


@dataclass(frozen=True, slots=True)
class Task(_Shown):
    """A task: the environment it belongs to and its JSON ``spec``."""

    environment: str
    spec: Mapping[str, JSON]

    @classmethod
    def from_wire(cls, value: JSON, environment: str) -> Task:
        """A task spec object as the server lists it; the environment comes from the request."""
        return cls(environment, _require(value, dict, "task"))

    def to_wire(self) -> dict[str, JSON]:
        return dict(self.spec)

    def __repr__(self) -> str:
        spec = repr(dict(self.spec))
        return f"Task({self.environment!r}, {spec if len(spec) <= 80 else spec[:77] + '...'})"


@dataclass(frozen=True, slots=True)
class ToolSpec(_Shown):
    """A tool as the server describes it: ``name``, ``description`` and JSON Schema ``input_schema``."""

    name: str
    description: str = ""
    input_schema: JSON = None

    @classmethod
    def from_wire(cls, value: JSON) -> ToolSpec:
        _require(value, dict, "tool")
        return cls(
            name=_require(value.get("name"), str, "tool 'name'"),
            description=str(value.get("description") or ""),
            input_schema=value.get("input_schema"),
        )

    def to_wire(self) -> dict[str, JSON]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def __repr__(self) -> str:
        params = sorted((self.input_schema or {}).get("properties", {}))
        return f"ToolSpec({self.name!r}, params={params})"
