"""Reading traces back: ``load_trace(path)`` -> ``Trace``, with the run's DataFrames.

A trace is plain Parquet, readable by DuckDB, Polars or pandas without ors_lab (the parts of an
unfinished one are Arrow IPC files, see ``ors_lab.recording``); this module adds the checks
(schema version, columns) and the frames of ``ors_lab.analysis.frames``: ``events``, ``calls``,
``sessions``, ``steps``, ``episodes``, ``tasks``, ``errors``, ``transcripts`` and ``summary()``.

Whatever is wrong with a trace is a ``TraceFormatError`` naming the file and what is wrong, never
another exception and never a crash: every file is read whole and validated before use (no memory
map), its ``ors_lab.*`` metadata is checked (UTF-8, a readable schema version, servers as a JSON
list), and a frame its rows cannot make (an ``episode`` row whose record is not JSON) is one too.

A damaged part of an unfinished trace, or a damaged row group of a compacted one, is refused by
default: the error names every bad file, and nothing is silently lost. ``load_trace(path,
skip_bad_parts=True)`` reads the rest, and the trace says what it left out: ``trace.skipped``
(file, or file and row group -> what is wrong) and ``trace.metadata["skipped"]``; it is logged too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ors_lab.protocol.errors import TraceFormatError, TraceNotFoundError
from ors_lab.recording.parts import check_metadata, part_files, parts_dir, read_checked
from ors_lab.recording.schema import (
    METADATA_CREATED,
    METADATA_RUN_ID,
    METADATA_SCHEMA_VERSION,
    METADATA_SERVERS,
    METADATA_VERSION,
    SCHEMA,
    SCHEMA_VERSION,
    upgrade,
)

if TYPE_CHECKING:
    import pandas as pd

    from ors_lab.analysis.frames import Summary
    from ors_lab.analysis.report import Report
    from ors_lab.notebook.trace import TraceState
    from ors_lab.notebook.view import LiveView

__all__ = ["Trace", "load_trace"]

log = logging.getLogger("ors_lab.analysis")


class Trace:
    """A loaded trace: the Arrow ``table``, its ``metadata``, and DataFrames built on demand.

    ``partial`` is True when the trace was read from the parts a crashed recorder left behind.
    ``skipped`` names what ``load_trace(..., skip_bad_parts=True)`` left out (file -> what is wrong).
    """

    def __init__(self, table: pa.Table, *, path: Path, partial: bool, skipped: dict[str, str] | None = None) -> None:
        self.table = table
        self.path = path
        self.partial = partial
        self.skipped = dict(skipped or {})
        self._listing: pd.DataFrame | None = None  # the viewer's list, made on first view
        checked = check_metadata(path, table.schema.metadata)
        self.metadata: dict[str, Any] = {
            "schema_version": checked.get(METADATA_SCHEMA_VERSION.decode(), ""),
            "ors_lab_version": checked.get(METADATA_VERSION.decode(), ""),
            "created": checked.get(METADATA_CREATED.decode(), ""),
            "servers": checked[METADATA_SERVERS.decode()],
            "run_id": checked.get(METADATA_RUN_ID.decode(), ""),
            "partial": partial,
            "skipped": list(self.skipped),
        }

    def __repr__(self) -> str:
        partial = ", partial" if self.partial else ""
        return f"Trace({str(self.path)!r}, events={self.table.num_rows}{partial})"

    def __len__(self) -> int:
        return int(self.table.num_rows)

    # -- showing itself -------------------------------------------------------------------------------

    def view(self, *, page_size: int | None = None) -> LiveView:
        """The trace viewer (``ors_lab.notebook.trace``): its episodes a page at a time, and any
        episode's timeline on a click. Display it (a cell ending with it) or call ``.show()``."""
        from ors_lab.notebook.view import LiveView

        return LiveView(self._state(page_size))

    def _state(self, page_size: int | None = None) -> TraceState:
        from ors_lab.analysis.frames import listing_frame
        from ors_lab.notebook.trace import PAGE_SIZE, TraceState

        if self._listing is None:
            self._listing = self._frame("listing", lambda: listing_frame(self.table))
        listing = self._listing
        title = "Trace (partial)" if self.partial else "Trace"
        return TraceState(self.table, listing, path=str(self.path), title=title, page_size=page_size or PAGE_SIZE)

    def to_html(self, path: str | os.PathLike[str], *, timelines: int | None = None) -> Report:
        """Write the run's report to ``path``: one self-contained HTML file to share (no network, no
        kernel): the summary, each evaluation's dashboard and per-task table, and the episodes with
        their timelines and transcripts (at most ``timelines`` of them, by default 2,000, the failed
        ones first; the page says when it holds fewer than all). See ``ors_lab.analysis.report``."""
        from ors_lab.analysis.report import TIMELINES, write_report

        return write_report(self, path, timelines=TIMELINES if timelines is None else timelines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """In a notebook with live views: the viewer (its widget, and its static summary for a saved
        notebook); else the summary card."""
        from ors_lab.notebook.settings import resolve

        if resolve() == "widgets":
            return self.view()._repr_mimebundle_(include, exclude)
        return {"text/html": self._repr_html_(), "text/plain": repr(self)}

    def _repr_html_(self) -> str:
        """The summary card (episodes, mean reward, errors, environments, duration; the path last), the
        reward histogram and the first episodes."""
        return self._state().html()

    @cached_property
    def events(self) -> pd.DataFrame:
        """One row per event, every column of the schema (Arrow-backed dtypes)."""
        from ors_lab.analysis.frames import events_frame

        return self._frame("events", lambda: events_frame(self.table))

    @cached_property
    def calls(self) -> pd.DataFrame:
        """One row per tool call: tool, input, ok, reward, finished, timings, chunks, pings, bytes."""
        from ors_lab.analysis.frames import calls_frame

        return self._frame("calls", lambda: calls_frame(self.table))

    @cached_property
    def sessions(self) -> pd.DataFrame:
        """One row per session: environment, task, open and close times, calls, pings."""
        from ors_lab.analysis.frames import sessions_frame

        return self._frame("sessions", lambda: sessions_frame(self.table))

    @cached_property
    def steps(self) -> pd.DataFrame:
        """One row per tool call that returned a result, numbered within its episode."""
        from ors_lab.analysis.frames import steps_frame

        calls = self.calls
        return self._frame("steps", lambda: steps_frame(self.table, calls))

    @cached_property
    def episodes(self) -> pd.DataFrame:
        """One row per episode: reward, total and final reward, finished, success, steps, error, tokens."""
        from ors_lab.analysis.frames import episodes_frame

        steps, sessions = self.steps, self.sessions
        return self._frame("episodes", lambda: episodes_frame(self.table, steps=steps, sessions=sessions))

    @cached_property
    def tasks(self) -> pd.DataFrame:
        """One row per task: episodes, mean reward and its stderr, success rate, pass@k, tokens."""
        from ors_lab.analysis.frames import tasks_frame

        episodes = self.episodes
        return self._frame("tasks", lambda: tasks_frame(episodes))

    @cached_property
    def errors(self) -> pd.DataFrame:
        """One row per episode that failed."""
        from ors_lab.analysis.frames import errors_frame

        episodes = self.episodes
        return self._frame("errors", lambda: errors_frame(episodes))

    @cached_property
    def transcripts(self) -> pd.DataFrame:
        """One row per turn of the agent: its reasoning, text and tool calls (the deltas joined), reward, errors."""
        from ors_lab.analysis.frames import transcripts_frame

        episodes = self.__dict__.get("episodes")  # when made already; else the cheaper listing of the same episodes
        return self._frame("transcripts", lambda: transcripts_frame(self.table, episodes))

    def summary(self) -> Summary:
        """The trace's episodes in one row, shown as a short vertical table: mean reward and its stderr,
        success rate, pass@k, errors."""
        from ors_lab.analysis.frames import Summary, summary_frame

        episodes = self.episodes
        return Summary(self._frame("summary", lambda: summary_frame(episodes)))

    def _frame(self, name: str, build: Callable[[], pd.DataFrame]) -> pd.DataFrame:
        """``build()``, with what the trace's rows cannot make (a record that is not JSON, a value of the
        wrong kind in a hand-edited trace) a ``TraceFormatError`` naming the trace and the frame."""
        try:
            return build()
        except TraceFormatError:
            raise
        except (pa.ArrowException, ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as exc:
            raise TraceFormatError(f"{self.path}: its rows do not make the {name} frame: {exc}") from exc


def load_trace(path: str | os.PathLike[str], *, skip_bad_parts: bool = False) -> Trace:
    """Read the trace at ``path``: the compacted file, or the parts of an unfinished recording.

    ``TraceFormatError`` for anything wrong with it, naming the file and what is wrong. A damaged
    part (or row group of a compacted trace) is refused unless ``skip_bad_parts=True``: then the
    rest is read, and ``trace.skipped`` names what was left out.
    """
    __tracebackhide__ = True
    path = Path(path)
    if not path.name:
        raise TraceNotFoundError(
            f"no trace at {str(path)!r}: a trace is a file, named like run.parquet", path=str(path)
        )
    parts = parts_dir(path)
    skipped: dict[str, str] = {}
    if path.is_file():
        table, partial = _read_compacted(path, skipped if skip_bad_parts else None), False
    elif parts.is_dir():
        tables, bad = [], []
        for file in part_files(parts):
            try:
                tables.append(_read(file, part=True))
            except TraceFormatError as exc:
                bad.append(exc)
                skipped[str(file)] = exc.message
        if bad and not skip_bad_parts:
            more = f" (and {len(bad) - 1} more bad part(s): {', '.join(list(skipped)[1:])})" if len(bad) > 1 else ""
            raise TraceFormatError(f"{bad[0].message}{more}") from bad[0]
        # each part's metadata is the running one (servers seen so far): the last part's is whole
        table = (
            pa.concat_tables(tables).replace_schema_metadata(tables[-1].schema.metadata)
            if tables
            else SCHEMA.empty_table().replace_schema_metadata({METADATA_SCHEMA_VERSION: SCHEMA_VERSION.encode()})
        )
        partial = True
    else:
        raise TraceNotFoundError(f"no trace at {path}", path=str(path))
    if skipped:
        log.warning("ors_lab: %s loaded without %s", path, "; ".join(f"{k} ({v})" for k, v in skipped.items()))
    return Trace(table, path=path, partial=partial, skipped=skipped)


def _read(path: Path, *, part: bool = False) -> pa.Table:
    """A trace file, or (``part=True``) one part of an unfinished trace, checked and made this schema version."""
    return read_checked(path, part=part)


def _checked(path: Path, table: pa.Table, kind: str) -> pa.Table:
    metadata = check_metadata(path, table.schema.metadata, kind)
    try:
        return upgrade(table, metadata[METADATA_SCHEMA_VERSION.decode()])
    except ValueError as exc:
        raise TraceFormatError(f"{path} {exc}") from exc


def _read_compacted(path: Path, skipped: dict[str, str] | None) -> pa.Table:
    """A compacted trace; with ``skipped`` (skip_bad_parts), a damaged one is read row group by row group,
    the bad ones left out and named in ``skipped``."""
    try:
        return _read(path)
    except TraceFormatError:
        if skipped is None:
            raise
    try:
        file = pq.ParquetFile(path)
        metadata = file.schema_arrow.metadata
        check_metadata(path, metadata)
        groups = file.num_row_groups
    except TraceFormatError:
        raise
    except Exception as exc:  # the footer itself is damaged: nothing can be read
        raise TraceFormatError(f"{path} is not a readable Parquet file: {exc}") from exc
    tables = []
    for index in range(groups):
        try:
            group = file.read_row_group(index)
            group.validate(full=True)
            tables.append(_checked(path, group.replace_schema_metadata(metadata), "Parquet"))
        except Exception as exc:  # whatever a damaged row group makes the reader raise
            skipped[f"{path} row group {index}"] = f"{path} row group {index} is not readable: {exc}"
    if not tables:
        raise TraceFormatError(f"{path}: no row group of it is readable ({next(iter(skipped.values()), '')})")
    return pa.concat_tables(tables)
