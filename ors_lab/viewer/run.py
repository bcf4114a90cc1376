"""The evaluation dashboard's state: a run's progress, rewards, grid and live episodes, built from its events.

``RunState`` is what the notebook's dashboard, ``ors-lab watch``, the HTML report and ``ors-lab eval``'s
progress line draw. It is made with the run's plan (``ors_lab.feed.plan.RunPlan``: environment, split,
agent, the (task, rollout) pairs; ``RunState.of(plan)``) and the outcomes resumed from a trace, and is
fed the agent events an evaluation publishes. Its parts, one module each:

- folding the events (``ors_lab.viewer.run_fold.RunFold``): the outcomes, the running figures (the
  mean reward with its standard error, pass@1 and pass@rollouts, per task, ``ors_lab.stats``, the
  same code as ``EvalResult``'s frames, so the last figures are equal), tokens, the errors, a note
  when no episode succeeded though rewards are positive (``ors_lab.stats.success_note``), the grid,
  the live episodes (their deltas joined by ``ors_lab.transcript``, the one joiner) and the finished
  episodes' transcripts, handed once to the front end through ``inbox()`` because a kernel busy with
  the evaluation does not answer clicks;
- what is drawn of it (``ors_lab.viewer.run_view``): ``snapshot()`` (the front end's JSON,
  ``static/run.js``), ``text()`` (the progress line), ``request()`` (a transcript);
- its static summary (``ors_lab.viewer.run_summary``): ``html()``, which ``EvalResult`` draws itself
  with too (``run_summary_html``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from ors_lab.viewer import run_view
from ors_lab.viewer.run_fold import (
    FOLD_KINDS,
    INBOX_PER_SEND,
    KEEP_TRANSCRIPTS,
    MAX_PARTS,
    PART_CHARS,
    SERIES_POINTS,
    RunFold,
)
from ors_lab.viewer.run_summary import MAX_ERRORS, RunSummary, run_summary_html
from ors_lab.viewer.run_view import GRID_CELLS, MAX_PANES, PANE_CHARS, PANE_PARTS
from ors_lab.viewer.state import ViewState

__all__ = [
    "GRID_CELLS",
    "INBOX_PER_SEND",
    "KEEP_TRANSCRIPTS",
    "MAX_ERRORS",
    "MAX_PANES",
    "MAX_PARTS",
    "PANE_CHARS",
    "PANE_PARTS",
    "PART_CHARS",
    "SERIES_POINTS",
    "RunState",
]


class RunState(RunFold, ViewState):
    """An evaluation as its dashboard shows it: a ``RunFold`` (see ``ors_lab.viewer.run_fold``), drawn."""

    name: ClassVar[str] = "run"
    kinds: ClassVar[Iterable[str] | None] = FOLD_KINDS

    def __repr__(self) -> str:
        return f"RunState({self.text()!r})"

    def done(self) -> bool:
        return self.ended is not None

    def snapshot(self) -> dict[str, Any]:
        return run_view.snapshot(self)

    def inbox(self) -> list[Any]:
        items = list(self._pending)
        self._pending.clear()
        return items

    def request(self, message: dict[str, Any]) -> dict[str, Any] | None:
        return run_view.request(self, message)

    def text(self) -> str:
        return run_view.text(self)

    def summary(self) -> RunSummary:
        """The figures of the static summary."""
        return run_view.summary(self)

    def html(self) -> str:
        return run_summary_html(self.summary())
