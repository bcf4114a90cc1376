"""The trace's columns and kinds by name, with no Arrow: what taking rows needs (``ors_lab.recording.rows``), so that
a recorder takes its first rows before pyarrow is imported. ``ors_lab.recording.schema`` declares their Arrow
types (``SCHEMA``, whose names are ``COLUMNS``, in order: it checks so when it is imported)."""

from __future__ import annotations

from ors_lab.events import EVENT_TYPES, AgentEvent

__all__ = [
    "ADDED_COLUMNS",
    "COLUMNS",
    "EPISODE_COLUMNS",
    "KIND_LAYER",
    "LAYERS",
    "METADATA_CREATED",
    "METADATA_PARTIAL",
    "METADATA_RUN_ID",
    "METADATA_SCHEMA_VERSION",
    "METADATA_SERVERS",
    "METADATA_VERSION",
    "READABLE_VERSIONS",
    "RECORD_SOURCE",
    "SCHEMA_VERSION",
]

SCHEMA_VERSION = "6"  # 2: exchange; 3: rollout; 4: the token columns; 5: worker; 6: the episode columns
READABLE_VERSIONS = ("2", "3", "4", "5", "6")

METADATA_SCHEMA_VERSION = b"ors_lab.schema_version"
METADATA_VERSION = b"ors_lab.version"
METADATA_CREATED = b"ors_lab.created"
METADATA_SERVERS = b"ors_lab.servers"
METADATA_RUN_ID = b"ors_lab.run_id"
METADATA_PARTIAL = b"ors_lab.partial"

COLUMNS = (
    "run_id", "seq", "t_ns", "wall", "layer", "kind",  # where and when
    "session_id", "environment", "split", "task_index", "task", "rollout", "call", "attempt", "exchange", "tool",
    "input",  # whose
    "method", "url", "status", "headers", "body", "ttfb_ns", "size",  # http
    "event", "data", "sse_id", "retry_ms", "comment",  # sse
    "task_id", "ok", "reward", "finished", "error", "reason", "backoff",  # call and session outcomes
    "input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens",  # an agent's tokens
    "total_reward", "final_reward", "success", "finish_reason", "duration_s", "started", "error_type",  # episodes
    "worker",  # the Ray worker that ran the row's session
)  # fmt: skip
"""Every column of a trace, in order."""

ADDED_COLUMNS = {
    "3": ("rollout",),
    "4": ("input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens"),
    "5": ("worker",),
    "6": ("total_reward", "final_reward", "success", "finish_reason", "duration_s", "started", "error_type"),
}
"""The columns each schema version added: an older trace reads with them null, but for the episode columns
(``EPISODE_COLUMNS``), which are read from its episode rows' records."""
EPISODE_COLUMNS = ADDED_COLUMNS["6"]
"""An ``episode`` row's figures beside its reward, finished, error and tokens: its record's (``data``), typed."""
RECORD_SOURCE = ("kind", "layer", "data")
"""The columns a trace older than version 6 needs to give its episode columns (``upgrade``)."""

LAYERS = ("http", "sse", "call", "session", "agent")

KIND_LAYER = {kind: cls.LAYER for kind, cls in EVENT_TYPES.items() if not issubclass(cls, AgentEvent)}
"""Every kind of row the client and the proxy write, and its layer. The agent kinds (``AGENT_KINDS``,
from ``ors_lab.events``) and any kind a writer names itself use layer "agent"."""
