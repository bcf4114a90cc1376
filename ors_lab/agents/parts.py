"""What an agent writes through, a part at a time: the ``Publisher`` a part or a turn publishes to
(an ``Episode``), and ``TextStream``, one text or reasoning part being streamed.

Kept apart from ``ors_lab.agents.turn`` (the decoding of an LLM's answer) so that an episode, which
every run builds, needs none of the wire formats until an agent reads an answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

from ors_lab.events import (
    AgentEvent,
    ReasoningDeltaEvent,
    ReasoningEndEvent,
    ReasoningStartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
)

__all__ = ["Publisher", "TextStream"]


class Publisher(Protocol):
    """What a turn publishes through: an episode (``ors_lab.agents.episode.Episode``)."""

    def publish(self, event: AgentEvent) -> None: ...

    def new_id(self, prefix: str) -> str: ...

    def record_usage(
        self,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        reasoning_tokens: int | None = None,
        cached_tokens: int | None = None,
        model: str | None = None,
    ) -> None: ...


class TextStream:
    """A text or reasoning part being streamed: ``write(delta)`` publishes one delta event."""

    _EVENTS: ClassVar[dict[str, tuple[Callable[..., AgentEvent], ...]]] = {
        "text": (TextStartEvent, TextDeltaEvent, TextEndEvent),
        "reasoning": (ReasoningStartEvent, ReasoningDeltaEvent, ReasoningEndEvent),
    }

    def __init__(self, episode: Publisher, kind: str, part_id: str) -> None:
        if kind not in self._EVENTS:
            raise ValueError(f"a part is text or reasoning, not {kind!r}")
        self._episode = episode
        self.kind = kind
        self.id = part_id
        self.parts: list[str] = []
        self._start, self._delta, self._end = self._EVENTS[kind]

    def start(self) -> None:
        """Begin the part (its ``-start`` event)."""
        self._episode.publish(self._start(id=self.id))

    def write(self, delta: str) -> None:
        """Stream ``delta`` (an empty string publishes nothing)."""
        if delta:
            self.parts.append(delta)
            self._episode.publish(self._delta(id=self.id, delta=delta))

    def close(self, metadata: Mapping[str, Any] | None = None) -> None:
        """End the part (its ``-end`` event, with what the provider said of it beyond its text, if anything)."""
        self._episode.publish(self._end(id=self.id, provider_metadata=metadata or None))

    @property
    def text(self) -> str:
        """Everything written so far."""
        return "".join(self.parts)
