"""The three ways a test's ORS traffic runs: replayed, recorded, or replayed with new episodes recorded.

Each is a context manager yielding what the ``ors_replay`` fixture hands the test. A recording is
written to a hidden temporary trace next to the final one and moved into place at teardown only if
it closed cleanly and the test passed, so a failed run never replaces (or creates) a trace.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pytest

from ors_lab.protocol.errors import TraceFormatError
from ors_lab.pytest_plugin.settings import Problem, ReplaySettings

if TYPE_CHECKING:  # loading the plugin imports nothing heavy: the recorder is imported when a test asks for it
    from ors_lab.recording.recorder import Recorder

__all__ = ["OPENERS", "Outcome", "ReplayFixture"]


class ReplayFixture:
    """What ``ors_replay`` yields: the ``url`` to point a client at, ``mode``, ``trace_path``, ``unplayed()``.

    ``mode`` is ``"replay"`` (the trace answers; in ``new_episodes`` mode what it lacks goes
    upstream) or ``"record"`` (a recording proxy in front of the upstream); ``record_mode`` is the
    session's ``--ors-record-mode``.
    """

    def __init__(
        self,
        url: str,
        mode: Literal["replay", "record"],
        trace_path: Path,
        record_mode: str,
        unplayed: Callable[[], list[str]] | None = None,
    ) -> None:
        self.url = url
        self.mode = mode
        self.trace_path = trace_path
        self.record_mode = record_mode
        self._unplayed = unplayed

    def __repr__(self) -> str:
        return f"ReplayFixture(mode={self.mode!r}, trace={str(self.trace_path)!r}, url={self.url or None!r})"

    def unplayed(self) -> list[str]:
        """The recorded requests not asked for so far (always empty while recording)."""
        return self._unplayed() if self._unplayed is not None else []


@dataclass
class Outcome:
    """What a run leaves for the terminal summary: requests never asked for, traces written or not."""

    passed: Callable[[], bool]
    unplayed: list[str] = field(default_factory=list)
    recorded: list[str] = field(default_factory=list)


def _temporary(path: Path, what: str) -> Path:
    return path.with_name(f".{path.stem}.{what}-{uuid.uuid4().hex[:8]}.parquet")


@contextlib.contextmanager
def replaying(settings: ReplaySettings, outcome: Outcome) -> Iterator[ReplayFixture]:
    from ors_lab.replay.serve import ReplayServer  # pandas, pyarrow: only when a test asks for it

    try:
        server = ReplayServer(settings.trace_path, speed=settings.speed, faults=settings.faults,
                              allow_repeats=settings.allow_repeats)  # fmt: skip
    except TraceFormatError as exc:
        raise Problem(f"ors_replay: cannot replay {settings.shown_path}: {exc}; record it again with "
                      "--ors-record-mode=all") from None  # fmt: skip
    with server:
        yield ReplayFixture(server.url, "replay", settings.trace_path, settings.record_mode, server.unplayed)
        outcome.unplayed = server.unplayed()


@contextlib.contextmanager
def recording(settings: ReplaySettings, outcome: Outcome) -> Iterator[ReplayFixture]:
    from ors_lab.recording.recorder import Recorder  # pyarrow: as above
    from ors_lab.replay.proxy import serve_proxy  # pyarrow, starlette: only when a test records

    assert settings.upstream is not None
    temporary = _temporary(settings.trace_path, "recording")
    recorder = Recorder(temporary)
    served = False
    try:
        with serve_proxy(settings.upstream, recorder) as url:
            yield ReplayFixture(url, "record", settings.trace_path, settings.record_mode)
        served = True
    finally:
        _close(recorder, settings, keep=served)
    _install(settings, outcome, temporary, f"recorded {settings.shown_path} from {settings.upstream}")


@contextlib.contextmanager
def new_episodes(settings: ReplaySettings, outcome: Outcome) -> Iterator[ReplayFixture]:
    # pandas, pyarrow, starlette: only when a test records new episodes
    from ors_lab.analysis.trace import load_trace
    from ors_lab.recording.merge import write_appended
    from ors_lab.recording.recorder import Recorder
    from ors_lab.replay.forward import ForwardingReplay

    assert settings.upstream is not None
    try:
        old = load_trace(settings.trace_path)
        replay = ForwardingReplay(old, settings.upstream, speed=settings.speed, faults=settings.faults,
                                  allow_repeats=settings.allow_repeats)  # fmt: skip
    except TraceFormatError as exc:
        raise Problem(f"ors_replay: cannot replay {settings.shown_path}: {exc}; record it again with "
                      "--ors-record-mode=all") from None  # fmt: skip
    temporary = _temporary(settings.trace_path, "new-episodes")
    recorder = Recorder(temporary)
    replay.proxy.events.subscribe(recorder)
    served = False
    try:
        with replay:
            yield ReplayFixture(replay.url, "replay", settings.trace_path, settings.record_mode, replay.unplayed)
            outcome.unplayed = replay.unplayed()
        served = True
    finally:
        _close(recorder, settings, keep=served and replay.forwarded > 0)
    if replay.forwarded:
        if outcome.passed():
            merged = _temporary(settings.trace_path, "merged")
            write_appended(old.table, load_trace(temporary).table, merged)
            temporary.unlink()
            temporary = merged
        what = f"appended {replay.forwarded} request(s) from {settings.upstream} to {settings.shown_path}"
        _install(settings, outcome, temporary, what)


OPENERS = {"replay": replaying, "record": recording, "new_episodes": new_episodes}


def _close(recorder: Recorder, settings: ReplaySettings, *, keep: bool) -> None:
    """Close the recorder; its temporary trace is removed unless ``keep`` (and kept only if it closed)."""
    try:
        recorder.close()
    except RuntimeError as exc:
        recorder.path.unlink(missing_ok=True)
        pytest.fail(f"ors_replay: the recording for {settings.shown_path} failed ({exc}); the trace is unchanged",
                    pytrace=False)  # fmt: skip
    if not keep:
        recorder.path.unlink(missing_ok=True)


def _install(settings: ReplaySettings, outcome: Outcome, temporary: Path, what: str) -> None:
    if not outcome.passed():
        temporary.unlink(missing_ok=True)
        outcome.recorded.append(
            f"{settings.nodeid}: not saved (the test did not pass); {settings.shown_path} is unchanged"
        )
        return
    os.replace(temporary, settings.trace_path)
    outcome.recorded.append(f"{settings.nodeid}: {what}")
