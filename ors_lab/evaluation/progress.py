"""A text progress line for evaluations: count, rate, running mean reward, errors.

It is a subscriber of the run's ``episode`` events. On a terminal the line rewrites itself in
place (at most ``10`` times a second); anywhere else (a notebook without widgets, a CI log) a new
line is printed every ``interval`` seconds, and once at the end.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from ors_lab.events import EpisodeEvent, Event

__all__ = ["TextProgress"]


class TextProgress:
    """A subscriber of a run's ``episode`` events (or call ``update``); ``close()`` prints the final line."""

    def __init__(
        self, total: int, *, label: str, done: int = 0, stream: TextIO | None = None, interval: float = 10.0
    ) -> None:
        self.total = total
        self.label = label
        self.resumed = done
        self.done = done
        self.errors = 0
        self.reward_sum = 0.0
        self.rewarded = 0
        self.stream = stream if stream is not None else sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = 0.1 if self.live else interval
        self.started = time.monotonic()
        self._last_shown = self.started
        self._width = 0

    def __call__(self, event: Event) -> None:
        """Count an ``episode`` event (other events are ignored)."""
        if isinstance(event, EpisodeEvent):
            self.update(event.reward, error=event.error is not None)

    def update(self, reward: float, *, error: bool) -> None:
        """Count one finished episode."""
        self.done += 1
        self.reward_sum += reward
        self.rewarded += 1
        self.errors += error
        now = time.monotonic()
        if now - self._last_shown >= self.interval:
            self._show(self.line())
            self._last_shown = now

    def line(self) -> str:
        """The progress line as it stands."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        ran = self.done - self.resumed
        mean = f"{self.reward_sum / self.rewarded:.3f}" if self.rewarded else "-"
        resumed = f" ({self.resumed} resumed)" if self.resumed else ""
        return (
            f"{self.label}: {self.done}/{self.total} episodes{resumed}  {ran / elapsed:.1f}/s  "
            f"mean reward {mean}  errors {self.errors}"
        )

    def _show(self, text: str) -> None:
        if self.live:
            pad = max(self._width - len(text), 0)
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Print the final line."""
        self._show(self.line())
        if self.live:
            self.stream.write("\n")
            self.stream.flush()
