"""Reading traces back: ``load_trace(path)`` -> ``Trace``, with the run's DataFrames.

A trace is plain Parquet, readable by DuckDB, Polars or pandas without ors_lab (the parts of an
unfinished one are Arrow IPC files, see ``ors_lab.recording``); this module adds the checks
(schema version, columns) and the frames of ``ors_lab.analysis.frames``: ``events``, ``calls``,
``sessions``, ``steps``, ``episodes``, ``tasks``, ``errors`` and ``summary()``.
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ors_lab.protocol.errors import TraceFormatError
from ors_lab.recording.parts import PART_GLOB, part_format, parts_dir, read_part
from ors_lab.recording.schema import (
    METADATA_CREATED,
    METADATA_RUN_ID,
    METADATA_SCHEMA_VERSION,
    METADATA_SERVERS,
    METADATA_VERSION,
    READABLE_VERSIONS,
    SCHEMA,
    upgrade,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Trace", "load_trace"]


class Trace:
    """A loaded trace: the Arrow ``table``, its ``metadata``, and DataFrames built on demand.

    ``partial`` is True when the trace was read from the parts a crashed recorder left behind.
    """

    def __init__(self, table: pa.Table, *, path: Path, partial: bool) -> None:
        self.table = table
        self.path = path
        self.partial = partial
        raw = table.schema.metadata or {}
        self.metadata: dict[str, Any] = {
            "schema_version": raw.get(METADATA_SCHEMA_VERSION, b"").decode(),
            "ors_lab_version": raw.get(METADATA_VERSION, b"").decode(),
            "created": raw.get(METADATA_CREATED, b"").decode(),
            "servers": json.loads(raw.get(METADATA_SERVERS, b"[]")),
            "run_id": raw.get(METADATA_RUN_ID, b"").decode(),
            "partial": partial,
        }

    def __repr__(self) -> str:
        partial = ", partial" if self.partial else ""
        return f"Trace({str(self.path)!r}, events={self.table.num_rows}{partial})"

    def __len__(self) -> int:
        return int(self.table.num_rows)

    @cached_property
    def events(self) -> pd.DataFrame:
        """One row per event, every column of the schema (Arrow-backed dtypes)."""
        from ors_lab.analysis.frames import events_frame

        return events_frame(self.table)

    @cached_property
    def calls(self) -> pd.DataFrame:
        """One row per tool call: tool, input, ok, reward, finished, timings, chunks, pings, bytes."""
        from ors_lab.analysis.frames import calls_frame

        return calls_frame(self.table)

    @cached_property
    def sessions(self) -> pd.DataFrame:
        """One row per session: environment, task, open and close times, calls, pings."""
        from ors_lab.analysis.frames import sessions_frame

        return sessions_frame(self.table)

    @cached_property
    def steps(self) -> pd.DataFrame:
        """One row per tool call that returned a result, numbered within its episode."""
        from ors_lab.analysis.frames import steps_frame

        return steps_frame(self.table, self.calls)

    @cached_property
    def episodes(self) -> pd.DataFrame:
        """One row per episode: reward, total and final reward, finished, success, steps, error, tokens."""
        from ors_lab.analysis.frames import episodes_frame

        return episodes_frame(self.table, steps=self.steps, sessions=self.sessions)

    @cached_property
    def tasks(self) -> pd.DataFrame:
        """One row per task: episodes, mean reward and its stderr, success rate, pass@k, tokens."""
        from ors_lab.analysis.frames import tasks_frame

        return tasks_frame(self.episodes)

    @cached_property
    def errors(self) -> pd.DataFrame:
        """One row per episode that failed."""
        from ors_lab.analysis.frames import errors_frame

        return errors_frame(self.episodes)

    def summary(self) -> pd.DataFrame:
        """The trace's episodes in one row: mean reward and its stderr, success rate, pass@k, errors."""
        from ors_lab.analysis.frames import summary_frame

        return summary_frame(self.episodes)


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read the trace at ``path``: the compacted file, or the parts of an unfinished recording."""
    path = Path(path)
    if not path.name:
        raise TraceFormatError(f"no trace at {str(path)!r}: a trace is a file, named like run.parquet")
    parts = parts_dir(path)
    if path.is_file():
        table, partial = _read(path), False
    elif parts.is_dir():
        files = sorted(parts.glob(PART_GLOB))
        tables = [_read(file, part=True) for file in files]
        # each part's metadata is the running one (servers seen so far): the last part's is whole
        table = (
            pa.concat_tables(tables).replace_schema_metadata(tables[-1].schema.metadata)
            if tables
            else (SCHEMA.empty_table())
        )
        partial = True
    else:
        raise TraceFormatError(f"no trace at {path} (and no parts of one in {parts})")
    return Trace(table, path=path, partial=partial)


def _read(path: Path, *, part: bool = False) -> pa.Table:
    """A trace file, or (``part=True``) one part of an unfinished trace, checked and made this schema version."""
    kind = part_format(path) if part else "Parquet"
    try:
        table = read_part(path) if part else pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceFormatError(f"{path} is not a readable {kind} file: {exc}") from exc
    version = (table.schema.metadata or {}).get(METADATA_SCHEMA_VERSION)
    if version is None:
        raise TraceFormatError(f"{path} is {kind} but not an ors_lab trace (no schema version in its metadata)")
    if version.decode() not in READABLE_VERSIONS:
        raise TraceFormatError(
            f"{path} has trace schema version {version.decode()}; this ors_lab reads versions "
            f"{', '.join(READABLE_VERSIONS)}"
        )
    try:
        return upgrade(table, version.decode())
    except ValueError as exc:
        raise TraceFormatError(f"{path} {exc}") from exc
