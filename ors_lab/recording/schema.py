"""The trace schema: one declared Arrow schema, one row per timed event (the columns by name, the kinds, the
versions and the metadata keys are ``ors_lab.recording.columns``, with no Arrow).

``docs/trace-format.md`` describes every column; a test keeps the two in step. The file-level
metadata (``METADATA_*`` keys) records the schema version, the ors_lab version, the creation time,
the run id, the redacted server URLs, and whether the file is a part of an unfinished recording.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from ors_lab.events import AGENT_KINDS
from ors_lab.recording.columns import ADDED_COLUMNS, COLUMNS, EPISODE_COLUMNS, RECORD_SOURCE

__all__ = ["AGENT_KINDS", "SCHEMA", "episode_columns", "kind_mask", "upgrade"]

SCHEMA = pa.schema(
    [
        # where and when
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("t_ns", pa.int64(), nullable=False),
        pa.field("wall", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("layer", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        # which episode and call
        pa.field("session_id", pa.string()),
        pa.field("environment", pa.string()),
        pa.field("split", pa.string()),
        pa.field("task_index", pa.int64()),
        pa.field("task", pa.string()),
        pa.field("rollout", pa.int32()),
        pa.field("call", pa.int32()),
        pa.field("attempt", pa.int32()),
        pa.field("exchange", pa.int64()),
        pa.field("tool", pa.string()),
        pa.field("input", pa.string()),
        # HTTP
        pa.field("method", pa.string()),
        pa.field("url", pa.string()),
        pa.field("status", pa.int32()),
        pa.field("headers", pa.string()),
        pa.field("body", pa.large_binary()),
        pa.field("ttfb_ns", pa.int64()),
        pa.field("size", pa.int64()),
        # SSE
        pa.field("event", pa.string()),
        pa.field("data", pa.large_string()),
        pa.field("sse_id", pa.string()),
        pa.field("retry_ms", pa.int64()),
        pa.field("comment", pa.string()),
        # outcomes
        pa.field("task_id", pa.string()),
        pa.field("ok", pa.bool_()),
        pa.field("reward", pa.float64()),
        pa.field("finished", pa.bool_()),
        pa.field("error", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("backoff", pa.float64()),
        # tokens (usage and episode rows)
        pa.field("input_tokens", pa.int64()),
        pa.field("output_tokens", pa.int64()),
        pa.field("reasoning_tokens", pa.int64()),
        pa.field("cached_tokens", pa.int64()),
        # the episode (episode rows: its record's figures, typed; the record itself is in data)
        pa.field("total_reward", pa.float64()),
        pa.field("final_reward", pa.float64()),
        pa.field("success", pa.bool_()),
        pa.field("finish_reason", pa.string()),
        pa.field("duration_s", pa.float64()),
        pa.field("started", pa.float64()),
        pa.field("error_type", pa.string()),
        # who: the Ray worker that ran the row's session (null in a local run)
        pa.field("worker", pa.string()),
    ]
)


def upgrade(table: pa.Table, version: str, columns: Sequence[str] | None = None) -> pa.Table:
    """A table of trace schema ``version`` (one of ``READABLE_VERSIONS``) with this version's columns
    (or ``columns`` of them only: a projected read).

    The columns later versions added are null, but for the episode columns, read from the episode rows' records
    when ``table`` holds ``RECORD_SOURCE`` (``episode_columns``); the columns come in schema order (or the order of
    ``columns``), cast to their declared types (the table's metadata is kept). Raises ``ValueError``
    for what cannot be made so.
    """
    names = SCHEMA.names if columns is None else list(columns)
    records = None
    for added, added_names in ADDED_COLUMNS.items():
        if int(version) < int(added):
            for name in added_names:
                if name in names and name not in table.schema.names:
                    if name in EPISODE_COLUMNS and all(source in table.schema.names for source in RECORD_SOURCE):
                        records = episode_columns(table) if records is None else records
                        table = table.append_column(name, records[name])
                    else:
                        table = table.append_column(name, pa.nulls(table.num_rows, SCHEMA.field(name).type))
    missing = [name for name in names if name not in table.schema.names]
    if missing:
        raise ValueError(f"it lacks the trace columns {missing}")
    try:
        schema = pa.schema([SCHEMA.field(name) for name in names], metadata=table.schema.metadata)
        return table.select(names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"it has trace columns of the wrong types: {exc}") from exc


def episode_columns(table: pa.Table) -> pa.Table:
    """``EPISODE_COLUMNS`` of ``table``'s rows (which hold ``RECORD_SOURCE``), read from the records of its
    agent ``episode`` rows (null on every other row) by Arrow's JSON reader, where they lie: the records one
    after another in the data column's buffer (an object ends where the next begins, no line between them
    needed). ``ValueError`` for an episode row without a record, or a record that is not a JSON object."""
    is_episode = pc.and_(kind_mask(table["kind"], ["episode"]), kind_mask(table["layer"], ["agent"]))
    episode = np.asarray(pc.fill_null(is_episode, False).to_numpy(zero_copy_only=False), np.bool_)
    places = np.flatnonzero(episode)
    schema = pa.schema([SCHEMA.field(name) for name in EPISODE_COLUMNS])
    if not len(places):
        return pa.table([pa.nulls(table.num_rows, field.type) for field in schema], schema=schema)
    data = table["data"].take(pa.array(places)).combine_chunks().cast(pa.large_string())
    if data.null_count:
        raise ValueError("an episode row has no record in its data")
    offsets = np.frombuffer(data.buffers()[1], dtype=np.int64)[data.offset : data.offset + len(data) + 1]
    text = data.buffers()[2][int(offsets[0]) : int(offsets[-1])]
    options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore", newlines_in_values=True)
    blocks = pa_json.ReadOptions(block_size=max(1 << 20, 2 * int(np.diff(offsets).max())))  # a record in a block
    try:
        records = pa_json.read_json(pa.BufferReader(text), read_options=blocks, parse_options=options)
    except pa.ArrowInvalid as exc:
        raise ValueError(f"an episode row's record is not a JSON object: {exc}") from exc
    if records.num_rows != len(data):
        raise ValueError(f"{len(data)} episode rows hold {records.num_rows} records")
    at = np.zeros(table.num_rows, np.int64)
    at[places] = np.arange(len(places))
    spread = pa.array(at, mask=~episode)  # each row's record, null for none
    return pa.table([records[name].take(spread) for name in EPISODE_COLUMNS], schema=schema)


def kind_mask(kind: pa.ChunkedArray | pa.Array, kinds: Sequence[str]) -> pa.ChunkedArray:
    """True where ``kind`` (or ``layer``) is one of ``kinds``; a dictionary-encoded column (as a trace's is in the
    file) is matched by its dictionary, a few values, not row by row."""
    wanted = pa.array(list(kinds), pa.string())
    if not pa.types.is_dictionary(kind.type):
        return pc.is_in(kind, value_set=wanted)
    chunks = kind.chunks if isinstance(kind, pa.ChunkedArray) else [kind]
    masks = [pc.fill_null(pc.take(pc.is_in(chunk.dictionary, value_set=wanted), chunk.indices), False)
             for chunk in chunks]  # fmt: skip
    return pa.chunked_array(masks, pa.bool_())


if tuple(SCHEMA.names) != COLUMNS:  # one list of names, two places: kept in step
    raise RuntimeError(f"the trace schema's columns {SCHEMA.names} are not ors_lab.recording.columns.COLUMNS")
