"""The wire's view: ``events`` (every row), ``calls`` (one row per tool call) and ``sessions``."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.frames.columns import _STR, CALLS_COLUMNS, SESSIONS_COLUMNS
from ors_lab.analysis.frames.episode_rows import _episode_rows, _sessions
from ors_lab.analysis.frames.source import Source, _ends, _json, _numbered, _pandas, _select, _typed
from ors_lab.transcript import output_text

__all__ = ["calls_frame", "events_frame", "sessions_frame"]


def events_frame(table: pa.Table) -> pd.DataFrame:
    """Every event, every schema column."""
    return _pandas(table)


_CALL_ROWS = ["session_id", "call", "layer", "kind", "t_ns", "wall", "attempt", "ttfb_ns", "size", "environment",
              "split", "task_index", "tool", "input", "task_id", "ok", "reward", "finished", "error",
              "reason"]  # fmt: skip
_FIRST = ("environment", "split", "task_index", "tool", "input")
_END = ("task_id", "ok", "reward", "finished", "error", "reason")


def calls_frame(source: Source, *, outputs: bool = True) -> pd.DataFrame:
    """One row per tool call, keyed by (session_id, call): the ORS rows that carry a call number, grouped
    by Arrow. ``outputs=False`` leaves the output out (and the stream rows it is read from unread)."""
    keys = ["session_id", "call"]
    rows = _select(source, [*_CALL_ROWS, *(["event", "data"] if outputs else [])])
    rows = _numbered(rows.filter(pc.and_(pc.and_(pc.is_valid(rows["call"]), pc.is_valid(rows["session_id"])),
                                         pc.not_equal(rows["layer"], "agent"))))  # fmt: skip
    if not rows.num_rows:
        return _typed(pd.DataFrame(), CALLS_COLUMNS)
    kind = rows["kind"]
    chunk = pc.equal(kind, "chunk")
    counted = pa.table({**{name: rows[name] for name in [*keys, "_row", "t_ns", "wall", "attempt", *_FIRST]},
                        "chunks": pc.cast(chunk, pa.int64()), "pings": pc.cast(pc.equal(kind, "comment"), pa.int64()),
                        "bytes": pc.fill_null(pc.if_else(chunk, rows["size"], 0), 0)})  # fmt: skip
    base = counted.group_by(keys, use_threads=False).aggregate(
        [
            ("_row", "min"),
            ("t_ns", "min"),
            ("wall", "min"),
            ("attempt", "max"),
            ("chunks", "sum"),
            ("pings", "sum"),
            ("bytes", "sum"),
            *((name, "first") for name in _FIRST),
        ]
    )
    responses = rows.filter(pc.equal(kind, "response")).select([*keys, "ttfb_ns"])
    ttfb = responses.group_by(keys, use_threads=False).aggregate([("ttfb_ns", "first")])
    ends = _ends(rows.filter(pc.is_in(kind, value_set=pa.array(["result", "call_error"]))), keys)
    ends = ends.select([*keys, *_END, "kind", "t_ns"]).rename_columns([*keys, *_END, "outcome", "end_ns"])
    calls = base.join(ttfb, keys, join_type="left outer").join(ends, keys, join_type="left outer")
    if outputs:
        calls = calls.join(_outputs(rows, keys), keys, join_type="left outer")
    calls = calls.sort_by("_row_min")  # the calls in the order they began (a join keeps no order)
    columns = {name: calls[name] for name in calls.column_names}
    columns.update({"start_ns": calls["t_ns_min"], "started": calls["wall_min"], "attempts": calls["attempt_max"],
                    "chunks": calls["chunks_sum"], "pings": calls["pings_sum"], "bytes": calls["bytes_sum"],
                    **{name: calls[f"{name}_first"] for name in _FIRST},
                    "ttfb_ms": pc.divide(calls["ttfb_ns_first"], 1e6),
                    "duration_ms": pc.divide(pc.subtract(calls["end_ns"], calls["t_ns_min"]), 1e6)})  # fmt: skip
    return _typed(pa.table(columns), CALLS_COLUMNS)


def _outputs(rows: pa.Table, keys: list[str]) -> pa.Table:
    """Each call's ``output`` as text: the ``chunk`` and ``end`` events of its last stream joined (the
    result's JSON), read by ``output_text``; null for a failed result or a stream that never ended."""
    wanted = pc.and_(pc.equal(rows["kind"], "event"), pc.is_in(rows["event"], value_set=pa.array(["chunk", "end"])))
    events = rows.filter(pc.and_(pc.fill_null(wanted, False), pc.is_valid(rows["attempt"])))
    events = events.set_column(events.schema.get_field_index("data"), "data", pc.fill_null(events["data"], ""))
    streams = events.group_by([*keys, "attempt"], use_threads=False).aggregate([("data", "list"), ("_row", "min")])
    streams = streams.take(pc.sort_indices(streams["_row_min"]))  # the streams in the order they began
    joined = pc.binary_join(streams["data_list"], pa.scalar("", pa.large_string()))
    last = _ends(streams.select(keys).append_column("payload", joined), keys)
    texts = [output_text(_json(payload)) for payload in last["payload"].to_pylist()]
    return last.select(keys).append_column("output", pa.array(texts, _STR))


def sessions_frame(source: Source) -> pd.DataFrame:
    """One row per session that opened."""
    return _typed(_pandas(_sessions(_episode_rows(source, outcomes=False)[0])), SESSIONS_COLUMNS)
