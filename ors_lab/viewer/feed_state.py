"""``FeedState``: the dashboard of a run watched through its live feed, rebuilt from the feed's events.

The feed's events are the run's own (``full_wire``), so a watcher decodes them (``event_from_wire``)
and feeds them to a ``RunState``, the dashboard's state the notebook draws: the same figures, grid,
panes and transcripts, made by the same code. What a watcher joining late needs comes first, as
events too (``docs/feed.md``): ``snapshot`` (or ``reset``, when events were lost), the run's plan
(``run``), its outcomes so far (``episode``), the events of its running episodes, then
``snapshot-end``. A ``run`` event starts a new ``RunState``; ``end`` ends it with the run's status
and time.

The times are the run's: the dashboard's clock starts when the run started (``elapsedS`` of the
snapshot), and an episode counts at the time it ended in the run (``started`` + ``durationS``), whether
caught up from a snapshot or read live however late the feed (drained every ``INTERVAL``) or a loaded
machine brought it, so its rate and its mean reward over time are the run's own.

No I/O here: ``take(kind, data)`` is one event of the feed, ``ors_lab.feed.FeedReader`` reads them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from ors_lab.events import EpisodeEvent, event_from_wire
from ors_lab.feed.plan import RunPlan
from ors_lab.html import card, styled
from ors_lab.viewer.run import RunState
from ors_lab.viewer.state import ViewState

__all__ = ["FeedState"]

_RUN_EVENTS = frozenset(RunState.kinds or ()) | {"result"}


class FeedState(ViewState):
    """The dashboard of the run behind a feed (``run``: its ``RunState``, None before a run began).

    ``take(kind, data)`` applies one feed event and says whether what is shown changed; the drawing
    (``snapshot``, ``text``, ``html``, ``inbox``, ``request``) is the ``RunState``'s. ``status``
    says where the watcher is (``connecting``, ``live``, ``reconnecting``, ``ended``, ``lost``), set
    by its reader; ``resets`` counts the snapshots that replaced lost events.
    """

    name: ClassVar[str] = "run"

    def __init__(self, url: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self.run: RunState | None = None
        self.status = "connecting"
        self.error: str | None = None
        self.resets = 0
        self.events = 0
        self.last_id = ""
        self._clock = clock
        self._pinned: float | None = None
        self._catching_up = False
        self._elapsed: float | None = None  # the run's elapsed time when the snapshot was taken
        self._started_at: float | None = None  # the run's start, by its wall clock
        self._run_id: str | None = None

    def __repr__(self) -> str:
        return f"FeedState({self.text()!r})"

    def clock(self) -> float:
        """The dashboard's clock: this process's, or pinned at the time the episode being applied ended in the run."""
        return self._pinned if self._pinned is not None else self._clock()

    # -- the feed's events ------------------------------------------------------------------------

    def take(self, kind: str, data: Mapping[str, Any]) -> bool:
        """Apply one event of the feed (its SSE ``event`` name, its JSON ``data``); True if the dashboard changed."""
        self.events += 1
        if kind in ("snapshot", "reset"):
            self._catching_up = True
            self._elapsed = _number(data.get("elapsedS"))
            self.resets += kind == "reset"
            self.run = None
            return True
        if kind == "snapshot-end":
            self._catching_up = False
            return False
        if kind == "run":
            return self._begin(data)
        run = self.run
        if run is None:
            return False
        if kind == "end":
            self._at(run.started + (_number(data.get("elapsedS")) or run.elapsed()))
            try:
                run.end(str(data.get("status") or "finished"))
            finally:
                self._pinned = None
            return True
        if kind not in _RUN_EVENTS:  # progress, and what a later version may add
            return False
        event = event_from_wire(kind, data)
        if isinstance(event, EpisodeEvent):
            if data.get("resumed"):
                run.resume([event.record()])
                return True
            if self._started_at is not None:  # at the time it ended in the run, however late the feed brought it
                self._at(run.started + event.started + event.duration_s - self._started_at)
        try:
            return run.apply(event)
        finally:
            self._pinned = None

    def _begin(self, data: Mapping[str, Any]) -> bool:
        run = RunState.of(RunPlan.from_wire(data), clock=self.clock)
        if self._run_id is not None:
            run.id = self._run_id  # the front end keeps its store of transcripts under it
        self._run_id = run.id
        if self._catching_up and self._elapsed is not None:
            run.started = self._clock() - self._elapsed
        self._started_at = _number(data.get("startedAt"))
        self.run = run
        return True

    def _at(self, when: float) -> None:
        """Pin the clock at ``when`` (not later than now) for the event being applied."""
        self._pinned = min(when, self._clock())

    # -- drawing ----------------------------------------------------------------------------------

    def done(self) -> bool:
        return self.status in ("ended", "lost", "closed")

    def snapshot(self) -> dict[str, Any]:
        return self.run.snapshot() if self.run is not None else {}

    def inbox(self) -> list[Any]:
        return self.run.inbox() if self.run is not None else []

    def request(self, message: dict[str, Any]) -> dict[str, Any] | None:
        return self.run.request(message) if self.run is not None else None

    def text(self) -> str:
        if self.run is not None:
            line = self.run.text()
            if self.status in ("live", "ended"):
                return line
            said = f": {self.error}" if self.status == "lost" and self.error else ""
            return f"{line}  [feed {self.status}{said}]"
        return f"watching {self.url}: {self.status}" + ("" if self.error is None else f" ({self.error})")

    def html(self) -> str:
        if self.run is not None:
            return self.run.html()
        return styled(card(f"watching {self.url}", [("feed", self.status), ("error", self.error or "-")]))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None
