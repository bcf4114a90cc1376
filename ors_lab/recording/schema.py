"""The trace schema: one declared Arrow schema, one row per timed event.

``docs/trace-format.md`` describes every column; a test keeps the two in step. The file-level
metadata (``METADATA_*`` keys) records the schema version, the ors_lab version, the creation time,
the run id, the redacted server URLs, and whether the file is a part of an unfinished recording.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from ors_lab.events import AGENT_KINDS, EVENT_TYPES, AgentEvent

__all__ = ["ADDED_COLUMNS", "AGENT_KINDS", "COLUMNS", "KIND_LAYER", "LAYERS", "SCHEMA", "SCHEMA_VERSION", "upgrade"]

SCHEMA_VERSION = "5"  # 2: the exchange column; 3: the rollout column; 4: the token columns; 5: worker
READABLE_VERSIONS = ("2", "3", "4", "5")

METADATA_SCHEMA_VERSION = b"ors_lab.schema_version"
METADATA_VERSION = b"ors_lab.version"
METADATA_CREATED = b"ors_lab.created"
METADATA_SERVERS = b"ors_lab.servers"
METADATA_RUN_ID = b"ors_lab.run_id"
METADATA_PARTIAL = b"ors_lab.partial"

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
        # who: the Ray worker that ran the row's session (null in a local run)
        pa.field("worker", pa.string()),
    ]
)

ADDED_COLUMNS = {
    "3": ("rollout",),
    "4": ("input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens"),
    "5": ("worker",),
}
"""The columns each schema version added: an older trace reads with them null."""


def upgrade(table: pa.Table, version: str, columns: Sequence[str] | None = None) -> pa.Table:
    """A table of trace schema ``version`` (one of ``READABLE_VERSIONS``) with this version's columns
    (or ``columns`` of them only: a projected read).

    The columns later versions added are null; the columns come in schema order (or the order of
    ``columns``), cast to their declared types (the table's metadata is kept). Raises ``ValueError``
    for what cannot be made so.
    """
    names = SCHEMA.names if columns is None else list(columns)
    for added, added_names in ADDED_COLUMNS.items():
        if int(version) < int(added):
            for name in added_names:
                if name in names and name not in table.schema.names:
                    table = table.append_column(name, pa.nulls(table.num_rows, SCHEMA.field(name).type))
    missing = [name for name in names if name not in table.schema.names]
    if missing:
        raise ValueError(f"it lacks the trace columns {missing}")
    try:
        schema = pa.schema([SCHEMA.field(name) for name in names], metadata=table.schema.metadata)
        return table.select(names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"it has trace columns of the wrong types: {exc}") from exc


COLUMNS = tuple(SCHEMA.names)

LAYERS = ("http", "sse", "call", "session", "agent")

KIND_LAYER = {kind: cls.LAYER for kind, cls in EVENT_TYPES.items() if not issubclass(cls, AgentEvent)}
"""Every kind of row the client and the proxy write, and its layer. The agent kinds (``AGENT_KINDS``,
from ``ors_lab.events``) and any kind a writer names itself use layer "agent"."""
