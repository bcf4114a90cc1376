"""The trace schema: one declared Arrow schema, one row per timed event.

``docs/trace-format.md`` describes every column; a test keeps the two in step. The file-level
metadata (``METADATA_*`` keys) records the schema version, the ors_lab version, the creation time,
the run id, the redacted server URLs, and whether the file is a part of an unfinished recording.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["AGENT_KINDS", "COLUMNS", "KIND_LAYER", "LAYERS", "SCHEMA", "SCHEMA_VERSION"]

SCHEMA_VERSION = "3"  # 2: the exchange column; 3: the rollout column
READABLE_VERSIONS = ("2", "3")  # a version 2 trace reads with a null rollout column

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
    ]
)

COLUMNS = tuple(SCHEMA.names)

LAYERS = ("http", "sse", "call", "session", "agent")

KIND_LAYER = {
    "request": "http",
    "response": "http",
    "chunk": "http",
    "disconnect": "http",
    "retry": "http",
    "event": "sse",
    "comment": "sse",
    "result": "call",
    "call_error": "call",
    "open": "session",
    "ping": "session",
    "close": "session",
}
"""Every kind of row the client and the proxy write, and its layer. Agent rows use layer "agent"."""

AGENT_KINDS = (
    "start", "text-start", "text-delta", "text-end", "reasoning-start", "reasoning-delta", "reasoning-end",
    "tool-input-start", "tool-input-delta", "tool-input-end", "tool-input-available", "tool-output-available",
    "tool-output-error", "reward", "finish", "error", "episode",
)  # fmt: skip
"""The agent events (``ors_lab.agents.events``) and the harness's ``episode`` row, all in layer "agent"."""
