"""DataFrames over a trace's declared columns. Every frame's columns and dtypes are declared here.

All columns are Arrow-backed (``pd.ArrowDtype``): nullable integers and booleans stay what they
are, strings stay Arrow strings, and converting a million-event trace costs about what pyarrow's
own ``to_pandas()`` does.

How steps reduce to an episode (one session is one episode):

- a *step* is a tool call that returned a result (``ok`` true or false); calls that raised
  (``call_error``) are counted as ``errors``, not steps;
- ``total_reward`` is the sum of the rewards the steps carried (steps with no reward add nothing;
  NA when no step carried one); ``final_reward`` is the reward of the last step that carried one;
- ``finished`` is true when any step returned ``finished=True``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "CALLS_COLUMNS",
    "EPISODES_COLUMNS",
    "SESSIONS_COLUMNS",
    "STEPS_COLUMNS",
    "calls_frame",
    "episodes_frame",
    "events_frame",
    "sessions_frame",
    "steps_frame",
]

_STR, _I64, _I32, _F64, _BOOL = pa.string(), pa.int64(), pa.int32(), pa.float64(), pa.bool_()
_WALL = pa.timestamp("us", tz="UTC")

CALLS_COLUMNS: dict[str, pa.DataType] = {
    "session_id": _STR,
    "call": _I32,
    "environment": _STR,
    "split": _STR,
    "task_index": _I64,
    "tool": _STR,
    "input": _STR,
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
    "session_id": _STR,
    "step": _I64,
    "call": _I32,
    "environment": _STR,
    "split": _STR,
    "task_index": _I64,
    "tool": _STR,
    "input": _STR,
    "ok": _BOOL,
    "reward": _F64,
    "finished": _BOOL,
    "error": _STR,
    "duration_ms": _F64,
}
EPISODES_COLUMNS: dict[str, pa.DataType] = {
    "session_id": _STR,
    "environment": _STR,
    "split": _STR,
    "task_index": _I64,
    "task": _STR,
    "steps": _I64,
    "errors": _I64,
    "total_reward": _F64,
    "final_reward": _F64,
    "finished": _BOOL,
    "duration_s": _F64,
}


def _typed(frame: pd.DataFrame, columns: dict[str, pa.DataType]) -> pd.DataFrame:
    """The frame with exactly the declared columns, in order, as Arrow-backed dtypes."""
    out = pd.DataFrame(index=range(len(frame)))
    for name, kind in columns.items():
        values = frame[name] if name in frame else pd.Series([None] * len(frame), dtype="object")
        out[name] = pd.Series(pa.array(_plain(values), type=kind, from_pandas=True), dtype=pd.ArrowDtype(kind))
    return out


def _plain(values: pd.Series) -> Any:
    if isinstance(values.dtype, pd.ArrowDtype):
        return values.array._pa_array  # the Arrow data, without a round trip through Python
    return [None if pd.isna(value) else value for value in values]


def events_frame(table: pa.Table) -> pd.DataFrame:
    """Every event, every schema column."""
    frame: pd.DataFrame = table.to_pandas(types_mapper=pd.ArrowDtype)
    return frame


def _rows(table: pa.Table, kinds: list[str], columns: list[str]) -> pd.DataFrame:
    mask = pc.is_in(table["kind"], value_set=pa.array(kinds))
    frame: pd.DataFrame = table.filter(mask).select(columns).to_pandas(types_mapper=pd.ArrowDtype)
    return frame


def calls_frame(table: pa.Table) -> pd.DataFrame:
    """One row per tool call, keyed by (session_id, call)."""
    call_rows = table.filter(pc.is_valid(table["call"]))
    keys = ["session_id", "call"]
    frame = call_rows.select(
        [
            *keys,
            "kind",
            "t_ns",
            "wall",
            "attempt",
            "ttfb_ns",
            "size",
            "environment",
            "split",
            "task_index",
            "tool",
            "input",
            "task_id",
            "ok",
            "reward",
            "finished",
            "error",
            "reason",
        ]
    ).to_pandas(types_mapper=pd.ArrowDtype)
    if frame.empty:
        return _typed(pd.DataFrame(), CALLS_COLUMNS)
    kind = frame["kind"]
    grouped = frame.groupby(keys, sort=False)
    base = grouped.agg(
        environment=("environment", "first"),
        split=("split", "first"),
        task_index=("task_index", "first"),
        tool=("tool", "first"),
        input=("input", "first"),
        start_ns=("t_ns", "min"),
        started=("wall", "min"),
        attempts=("attempt", "max"),
    )
    base["chunks"] = (kind == "chunk").groupby([frame[k] for k in keys], sort=False).sum()
    base["pings"] = (kind == "comment").groupby([frame[k] for k in keys], sort=False).sum()
    base["bytes"] = frame["size"].where(kind == "chunk").groupby([frame[k] for k in keys], sort=False).sum()
    responses = frame[kind == "response"].groupby(keys, sort=False)["ttfb_ns"].first()
    base["ttfb_ms"] = responses / 1e6
    ends = frame[kind.isin(["result", "call_error"])].drop_duplicates(keys, keep="last").set_index(keys)
    for name in ("task_id", "ok", "reward", "finished", "error", "reason"):
        base[name] = ends[name]
    base["outcome"] = ends["kind"]
    base["duration_ms"] = (ends["t_ns"] - base["start_ns"]) / 1e6
    return _typed(base.reset_index(), CALLS_COLUMNS)


def sessions_frame(table: pa.Table) -> pd.DataFrame:
    """One row per session that opened."""
    rows = _rows(
        table,
        ["open", "close", "ping", "result", "call_error"],
        ["session_id", "kind", "wall", "environment", "split", "task_index", "task"],
    )
    opened = rows[rows["kind"] == "open"].drop_duplicates("session_id").set_index("session_id")
    if opened.empty:
        return _typed(pd.DataFrame(), SESSIONS_COLUMNS)
    kind = rows["kind"]
    counts = {
        name: (kind.isin(kinds)).groupby(rows["session_id"], sort=False).sum()
        for name, kinds in (("calls", ["result", "call_error"]), ("errors", ["call_error"]), ("pings", ["ping"]))
    }
    closed = rows[kind == "close"].groupby("session_id", sort=False)["wall"].last()
    frame = opened[["environment", "split", "task_index", "task"]].copy()
    frame["opened"] = opened["wall"]
    frame["closed"] = closed
    frame["duration_s"] = (frame["closed"] - frame["opened"]).dt.total_seconds()
    for name, series in counts.items():
        frame[name] = series.reindex(frame.index, fill_value=0)
    return _typed(frame.reset_index(), SESSIONS_COLUMNS)


def steps_frame(calls: pd.DataFrame) -> pd.DataFrame:
    """Calls that returned a result, numbered 1, 2, ... within their session."""
    steps = calls[calls["outcome"] == "result"].sort_values(["session_id", "call"], kind="stable").copy()
    steps["step"] = steps.groupby("session_id", sort=False).cumcount() + 1
    return _typed(steps.reset_index(drop=True), STEPS_COLUMNS)


def episodes_frame(sessions: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per session, its steps reduced as the module docstring says."""
    frame = sessions.set_index("session_id")[["environment", "split", "task_index", "task", "errors", "duration_s"]]
    by_session = steps.groupby("session_id", sort=False)
    rewarded = steps[steps["reward"].notna()].groupby("session_id", sort=False)["reward"]
    frame = frame.assign(
        steps=by_session.size().reindex(frame.index, fill_value=0),
        total_reward=rewarded.sum().reindex(frame.index),
        final_reward=rewarded.last().reindex(frame.index),
        finished=by_session["finished"].any().reindex(frame.index, fill_value=False),
    )
    return _typed(frame.reset_index(), EPISODES_COLUMNS)
