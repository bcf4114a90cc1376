"""Reading traces back: ``load_trace(path)`` → ``Trace`` with its DataFrames.

A trace is plain Parquet, readable by DuckDB, Polars or pandas without ors_lab (the parts of an
unfinished one are Arrow IPC files, see ``recorder``); this module adds
the checks (schema version, columns) and the derived tables: ``events`` (one row per event),
``calls`` (one per tool call), ``sessions``, ``steps`` and ``episodes`` (one per session). Their
columns and dtypes are declared in ``ors_lab.recording.frames``.
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
from ors_lab.recording.recorder import PART_GLOB, part_format, parts_dir, read_part
from ors_lab.recording.schema import (
    METADATA_CREATED,
    METADATA_RUN_ID,
    METADATA_SCHEMA_VERSION,
    METADATA_SERVERS,
    METADATA_VERSION,
    READABLE_VERSIONS,
    SCHEMA,
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
        from ors_lab.recording.frames import events_frame

        return events_frame(self.table)

    @cached_property
    def calls(self) -> pd.DataFrame:
        """One row per tool call: tool, input, ok, reward, finished, timings, chunks, pings, bytes."""
        from ors_lab.recording.frames import calls_frame

        return calls_frame(self.table)

    @cached_property
    def sessions(self) -> pd.DataFrame:
        """One row per session: environment, task, open and close times, calls, pings."""
        from ors_lab.recording.frames import sessions_frame

        return sessions_frame(self.table)

    @cached_property
    def steps(self) -> pd.DataFrame:
        """One row per completed tool call, numbered within its episode, with reward and finished."""
        from ors_lab.recording.frames import steps_frame

        return steps_frame(self.calls)

    @cached_property
    def episodes(self) -> pd.DataFrame:
        """One row per session: total and final reward, finished, steps, duration."""
        from ors_lab.recording.frames import episodes_frame

        return episodes_frame(self.sessions, self.steps)


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
    """A trace file, or (``part=True``) one part of an unfinished trace, checked and cast to the schema."""
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
    if version.decode() == "2":  # version 3 added the rollout column
        table = table.append_column("rollout", pa.nulls(table.num_rows, pa.int32()))
    missing = [name for name in SCHEMA.names if name not in table.schema.names]
    if missing:
        raise TraceFormatError(f"{path} lacks the trace columns {missing}")
    try:
        return table.select(SCHEMA.names).cast(SCHEMA.with_metadata(table.schema.metadata))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise TraceFormatError(f"{path} has trace columns of the wrong types: {exc}") from exc
