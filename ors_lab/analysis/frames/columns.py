"""Every frame's columns and dtypes, declared: what each builder of ``ors_lab.analysis.frames`` gives."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

__all__ = [
    "CALLS_COLUMNS",
    "EPISODES_COLUMNS",
    "ERRORS_COLUMNS",
    "FRAMES",
    "LISTING_COLUMNS",
    "SESSIONS_COLUMNS",
    "STEPS_COLUMNS",
    "SUMMARY_COLUMNS",
    "TASKS_COLUMNS",
    "TOKENS",
    "TRANSCRIPTS_COLUMNS",
    "pass_columns",
]


_STR, _I64, _I32, _F64, _BOOL = pa.string(), pa.int64(), pa.int32(), pa.float64(), pa.bool_()
_WALL = pa.timestamp("us", tz="UTC")
TOKENS = ("input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens")

CALLS_COLUMNS: dict[str, pa.DataType] = {
    "session_id": _STR,
    "call": _I32,
    "environment": _STR,
    "split": _STR,
    "task_index": _I64,
    "tool": _STR,
    "input": _STR,
    "output": _STR,
    "task_id": _STR,
    "outcome": _STR,  # "result" or "call_error"
    "ok": _BOOL,
    "reward": _F64,
    "finished": _BOOL,
    "error": _STR,
    "reason": _STR,
    "started": _WALL,
    "ttfb_ms": _F64,
    "duration_ms": _F64,
    "chunks": _I64,
    "pings": _I64,
    "bytes": _I64,
    "attempts": _I32,
}
SESSIONS_COLUMNS: dict[str, pa.DataType] = {
    "session_id": _STR,
    "environment": _STR,
    "split": _STR,
    "task_index": _I64,
    "task": _STR,
    "opened": _WALL,
    "closed": _WALL,
    "duration_s": _F64,
    "calls": _I64,
    "errors": _I64,
    "pings": _I64,
}
STEPS_COLUMNS: dict[str, pa.DataType] = {
    "environment": _STR,
    "split": _STR,
    "task_index": _I64,
    "rollout": _I64,
    "session_id": _STR,
    "step": _I64,
    "call": _I32,
    "tool": _STR,
    "input": _STR,
    "ok": _BOOL,
    "reward": _F64,
    "finished": _BOOL,
    "error": _STR,
    "reason": _STR,
    "duration_ms": _F64,
}
EPISODES_COLUMNS: dict[str, pa.DataType] = {
    "environment": _STR,
    "split": _STR,
    "task_index": _I64,
    "task": _STR,
    "rollout": _I64,
    "session_id": _STR,
    "reward": _F64,
    "total_reward": _F64,
    "final_reward": _F64,
    "finished": _BOOL,
    "success": _BOOL,
    "steps": _I64,
    "errors": _I64,
    "finish_reason": _STR,
    "duration_s": _F64,
    "started": _WALL,
    "error": _STR,
    "error_type": _STR,
    **dict.fromkeys(TOKENS, _I64),
}
TASKS_COLUMNS: dict[str, pa.DataType] = {
    "environment": _STR,
    "split": _STR,
    "task_index": _I64,
    "task": _STR,
    "episodes": _I64,
    "mean_reward": _F64,
    "stderr": _F64,
    "success_rate": _F64,
    "finished_rate": _F64,
    "mean_steps": _F64,
    "errors": _I64,
    **dict.fromkeys(TOKENS, _I64),
}
"""Then one ``pass@k`` column (double) per k of ``pass_columns``."""
ERRORS_COLUMNS: dict[str, pa.DataType] = {
    "environment": _STR,
    "split": _STR,
    "task_index": _I64,
    "rollout": _I64,
    "session_id": _STR,
    "error_type": _STR,
    "error": _STR,
    "steps": _I64,
}
SUMMARY_COLUMNS: dict[str, pa.DataType] = {
    "environments": _STR,
    "splits": _STR,
    "episodes": _I64,
    "tasks": _I64,
    "mean_reward": _F64,
    "stderr": _F64,
    "success_rate": _F64,
    "finished_rate": _F64,
    "mean_steps": _F64,
    "errors": _I64,
    "error_types": _STR,
    "note": _STR,
    **dict.fromkeys(TOKENS, _I64),
}
"""Then one ``pass@k`` column (double) per k of ``pass_columns``: the mean over the tasks."""
TRANSCRIPTS_COLUMNS: dict[str, pa.DataType] = {
    "environment": _STR,
    "split": _STR,
    "task_index": _I64,
    "rollout": _I64,
    "session_id": _STR,
    "turn": _I64,
    "block": _STR,
    "reasoning": _STR,
    "text": _STR,
    "tool_calls": _STR,
    "calls": _I64,
    "reward": _F64,
    "error": _STR,
}
LISTING_COLUMNS: dict[str, pa.DataType] = {
    "session_id": _STR,
    "environment": _STR,
    "split": _STR,
    "task_index": _I64,
    "rollout": _I64,
    "reward": _F64,
    "finished": _BOOL,
    "steps": _I64,
    "errors": _I64,
    "duration_s": _F64,
    "started": _WALL,
    "error": _STR,
}
"""The trace viewer's list (not a documented frame: the viewer's own; its values are the episodes')."""
FRAMES = {
    "calls": CALLS_COLUMNS,
    "sessions": SESSIONS_COLUMNS,
    "steps": STEPS_COLUMNS,
    "episodes": EPISODES_COLUMNS,
    "tasks": TASKS_COLUMNS,
    "errors": ERRORS_COLUMNS,
    "summary": SUMMARY_COLUMNS,
    "transcripts": TRANSCRIPTS_COLUMNS,
}
"""Every derived frame's declared columns (``docs/trace-format.md`` documents them; a test keeps both in step)."""


def pass_columns(ks: Sequence[int]) -> dict[str, pa.DataType]:
    """The ``pass@k`` columns for ``ks``."""
    return {f"pass@{k}": _F64 for k in ks}
