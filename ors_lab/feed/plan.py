"""``RunPlan``: what a run evaluates, declared once for its feed's ``run`` event and its dashboard.

An evaluation's plan is its environment and split, its agent, its label and its (task index,
rollout) pairs in order. The feed sends it as its ``run`` event (``docs/feed.md``) and a watcher
reads it back (``RunPlan.from_wire``); the dashboard's state (``ors_lab.viewer.run.RunState``) is
made from it, in the run's process or a watcher's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["RunPlan"]


@dataclass(frozen=True, slots=True, init=False)
class RunPlan:
    """A run's plan: ``keys`` are its (task index, rollout) pairs in order; ``label`` is ``eval ENV/SPLIT``
    unless given."""

    environment: str
    split: str
    keys: tuple[tuple[int, int], ...]
    agent: str | None
    label: str

    def __init__(
        self,
        environment: str,
        split: str,
        keys: Iterable[tuple[int, int]],
        agent: str | None = None,
        label: str | None = None,
    ) -> None:
        object.__setattr__(self, "environment", environment)
        object.__setattr__(self, "split", split)
        object.__setattr__(self, "keys", tuple(keys))
        object.__setattr__(self, "agent", agent)
        object.__setattr__(self, "label", label if label is not None else f"eval {environment}/{split}")

    @property
    def total(self) -> int:
        """The episodes planned."""
        return len(self.keys)

    def wire(self, *, started_at: float, resumed: int) -> dict[str, Any]:
        """The feed's ``run`` event: the plan, when the run started (``time.time()``), the outcomes resumed."""
        return {
            "type": "run",
            "environment": self.environment,
            "split": self.split,
            "agent": self.agent,
            "label": self.label,
            "total": self.total,
            "keys": [[int(task), int(rollout)] for task, rollout in self.keys],
            "startedAt": started_at,
            "resumed": resumed,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> RunPlan:
        """The plan of a feed's ``run`` event."""
        keys = [(int(task), int(rollout)) for task, rollout in data.get("keys") or []]
        return cls(str(data.get("environment")), str(data.get("split")), keys, data.get("agent"), data.get("label"))
