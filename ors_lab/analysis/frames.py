"""The DataFrames of a run, built from the trace's rows; every frame's columns and dtypes are declared here.

Each builder takes a ``Source`` of trace rows: a loaded ``Trace``, read where it lies (its
``select``/``scan`` read only the columns and row groups a frame asks for), or an Arrow table (the
rows an evaluation keeps in memory, ``EvalResult``), so a run's episodes are the same frame however
they are looked at. The work is Arrow's (``pyarrow.compute``, ``Table.group_by`` with its ordered
"first"/"last", hash lookups by ``index_in`` for joins that keep the left order), over whole
columns; Python runs once per task (the exact mean and stderr, pass@k) or per call (its output
text), never per row, and pandas only takes the finished tables. ``episodes`` (with ``tasks``,
``errors``, ``summary`` and the viewer's ``listing``) reads the few kinds of rows an episode is made
of in one pass, a piece at a time, each kind slimmed to what is taken of it (``_EpisodeRows``); their
session ids, layers and kinds stay the file's dictionaries (kinds matched by their few values, the ids
integer codes from each piece's dictionary, made strings once, in the finished frame).
All columns are Arrow-backed (``pd.ArrowDtype``): nullable integers and booleans stay what they
are, strings stay Arrow strings.

- ``events``: every row; ``calls``: one row per tool call (the ``http``, ``sse`` and ``call``
  rows that share a session and call number); ``sessions``: one row per session that opened;
- ``steps``: one row per tool call that returned a result, numbered within its episode;
- ``episodes``: one row per episode (a session that opened, or an evaluation's episode that
  failed before its session did): what an evaluation recorded of it in its ``episode`` row, or,
  for a session no evaluation ran, its steps reduced as ``ors_lab.analysis.reduce`` decides;
- ``tasks``: one row per task, its episodes aggregated (mean reward, stderr, pass@k, ...);
- ``errors``: the episodes that failed; ``summary``: the run in one row (a ``Summary``: a one-row
  frame that shows itself as a short vertical table, each line a column's name and value, so what
  it shows is what indexes it);
- ``transcripts``: one row per turn of the agent, its streamed deltas joined into reasoning, text
  and tool calls (``ors_lab.transcript`` joins them, for the trace viewer too);
- ``listing``: what the trace viewer lists, one row per episode, built without the per-call frames
  so that a trace of many thousands of episodes opens at once.
"""

from __future__ import annotations

import json
import math
from collections import Counter, deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple, Protocol, TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.reduce import Reduction, check_reduction, mean, pass_at_k, reduce_reward, stderr
from ors_lab.recording.parts import select_rows
from ors_lab.recording.schema import EPISODE_COLUMNS, SCHEMA, kind_mask
from ors_lab.stats import success_note
from ors_lab.transcript import STREAM_KINDS, join_stream, output_text

__all__ = [
    "CALLS_COLUMNS",
    "EPISODES_COLUMNS",
    "ERRORS_COLUMNS",
    "FRAMES",
    "SESSIONS_COLUMNS",
    "STEPS_COLUMNS",
    "SUMMARY_COLUMNS",
    "TASKS_COLUMNS",
    "TRANSCRIPTS_COLUMNS",
    "Rows",
    "Source",
    "Summary",
    "calls_frame",
    "episodes_frame",
    "error_types",
    "errors_frame",
    "events_frame",
    "finished_episodes",
    "listing_frame",
    "pass_columns",
    "sessions_frame",
    "steps_frame",
    "summary_frame",
    "tasks_frame",
    "threshold_note",
    "transcripts_frame",
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


def _typed(frame: pd.DataFrame | pa.Table, columns: Mapping[str, pa.DataType]) -> pd.DataFrame:
    """The frame with exactly the declared columns, in order, as Arrow-backed dtypes."""
    return _pandas(_table(frame, columns))


def _table(frame: pd.DataFrame | pa.Table, columns: Mapping[str, pa.DataType]) -> pa.Table:
    """The frame (or table) as an Arrow table of exactly the declared columns, in order (null where it has none)."""
    n = len(frame)
    if isinstance(frame, pa.Table):
        return pa.table({name: frame[name].cast(kind) if name in frame.column_names else pa.nulls(n, kind)
                         for name, kind in columns.items()})  # fmt: skip
    return pa.table({name: _arrow(frame[name], kind) if name in frame else pa.nulls(n, kind)
                     for name, kind in columns.items()})  # fmt: skip


def _arrow(values: pd.Series, kind: pa.DataType) -> pa.Array | pa.ChunkedArray:
    if isinstance(values.dtype, pd.ArrowDtype):
        return pa.chunked_array(values.array._pa_array).cast(kind)  # the Arrow data, without a round trip
    if values.dtype != object:  # numbers, booleans, times of numpy: NaN and NaT are null
        return pa.Array.from_pandas(values).cast(kind, safe=not pa.types.is_timestamp(kind))  # ns to us: truncated
    return pa.array([None if _missing(value) else value for value in values], type=kind)


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and value != value)


class Rows(Protocol):
    """Where a frame's rows come from besides an Arrow table: a ``Trace``, whose ``select`` reads only
    the columns (and row groups) asked for from the file."""

    def select(self, columns: Sequence[str], *, kinds: Sequence[str] | None = None) -> pa.Table: ...

    def scan(self, columns: Sequence[str], *, kinds: Sequence[str] | None = None) -> Iterator[pa.Table]: ...

    def _scan(self, columns: Sequence[str], kinds: Sequence[str] | None = None,
              encoded: Sequence[str] = ()) -> Iterator[pa.Table]: ...  # fmt: skip


Source: TypeAlias = pa.Table | Rows
"""A trace's rows: a table in memory (an evaluation's), or a ``Trace`` read where it lies."""


def _select(source: Source, columns: Sequence[str], kinds: Sequence[str] | None = None,
            *, agent: bool | None = None) -> pa.Table:  # fmt: skip
    """The rows of ``kinds`` (all when None; of the agent layer, or not of it, or both) with ``columns``."""
    read = list(columns) if agent is None or "layer" in columns else [*columns, "layer"]
    table = select_rows(source, read, kinds) if isinstance(source, pa.Table) else source.select(read, kinds=kinds)
    if agent is not None:
        layer = pc.equal(table["layer"], "agent")
        table = table.filter(layer if agent else pc.invert(layer))
    return table.select(list(columns))


def _pieces(source: Source, columns: Sequence[str], kinds: Sequence[str] | None = None,
            encoded: Sequence[str] = ()) -> Iterator[pa.Table]:  # fmt: skip
    """The rows of ``kinds`` with ``columns``, a piece at a time (a trace's few row groups; a table whole); the
    ``encoded`` columns as the file holds them (dictionary-encoded) where it does."""
    if isinstance(source, pa.Table):
        yield select_rows(source, columns, kinds)
    else:
        yield from source._scan(columns, kinds, encoded)


def _pandas(table: pa.Table) -> pd.DataFrame:
    frame: pd.DataFrame = table.to_pandas(types_mapper=pd.ArrowDtype)
    return frame


def _numbered(table: pa.Table) -> pa.Table:
    """The table with ``_row``: each row's place in it (what "first" and "last" are taken by)."""
    return table.append_column("_row", pa.array(np.arange(table.num_rows, dtype=np.int64)))


def _ends(table: pa.Table, keys: list[str], last: bool = True) -> pa.Table:
    """The last (or first) row of each group of ``keys``, in the order of those rows in ``table``."""
    if keys == [_SID]:  # integer codes: by numpy, without hashing
        return table.take(_coded_ends(_codes(table[_SID]), last))
    if keys == [_SID, "call"] and not table["call"].null_count:  # codes and call numbers: by numpy's unique
        return table.take(_paired_ends(_codes(table[_SID]), _codes(table["call"]), last))
    which = "max" if last else "min"
    places = pa.table({**{key: table[key] for key in keys}, "_at": np.arange(table.num_rows, dtype=np.int64)})
    picked = places.group_by(keys, use_threads=False).aggregate([("_at", which)])[f"_at_{which}"]
    return table.take(np.sort(picked.to_numpy()))


def events_frame(table: pa.Table) -> pd.DataFrame:
    """Every event, every schema column."""
    return _pandas(table)


# -- calls and sessions: the wire's view ---------------------------------------------------------------

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


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def sessions_frame(source: Source) -> pd.DataFrame:
    """One row per session that opened."""
    return _typed(_pandas(_sessions(_episode_rows(source, outcomes=False)[0])), SESSIONS_COLUMNS)


def _sessions(rows: _EpisodeRows) -> pa.Table:
    """The sessions frame as an Arrow table, with ``_sid``: each session's first ``open`` row, its confirmed
    close, its counts (of ``rows`` made ``_coded``)."""
    opened = _ends(rows.opens, [_SID], last=False)
    ids = opened[_SID]
    kind, counted, at = rows.counts["kind"], _codes(rows.counts[_SID]), _codes(ids)
    size = int(max(counted.max(initial=-1), at.max(initial=-1))) + 1
    counts = {name: np.bincount(counted[pc.is_in(kind, value_set=pa.array(list(of))).to_numpy(zero_copy_only=False)],
                                minlength=size)[at] for name, of in _COUNTED.items()}  # fmt: skip
    closed = _at(ids, _ends(rows.closes, [_SID]), _SID)["wall"]
    seconds = pc.divide(pc.cast(pc.subtract(closed, opened["wall"]), pa.int64()), 1e6)  # as pandas' total_seconds
    where = {name: opened[name] for name in ("session_id", "environment", "split", "task_index", "task", _SID)}
    return _table(pa.table({**where, "opened": opened["wall"], "closed": closed, "duration_s": seconds,
                            **counts}),
                  {**SESSIONS_COLUMNS, _SID: _I64})  # fmt: skip


def _at(keys: pa.Array | pa.ChunkedArray, table: pa.Table, key: str = "session_id") -> pa.Table:
    """The rows of ``table`` (whose ``key`` is unique) for each of ``keys``, in their order; null rows for the
    keys it lacks (a join that keeps the left order, by Arrow's hash lookup)."""
    if key == _SID:  # integer codes: a lookup array, without hashing
        return table.take(_coded_at(_codes(keys), _codes(table[_SID])))
    return table.take(pc.index_in(keys, value_set=table[key].combine_chunks()))


def _codes(codes: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``_SID`` codes as a numpy array."""
    return np.asarray(codes.to_numpy(), dtype=np.int64)


def _coded_ends(codes: np.ndarray, last: bool) -> np.ndarray:
    """The places of each code's last (or first) occurrence in ``codes``, ascending."""
    n = len(codes)
    if not n:
        return np.zeros(0, np.int64)
    places = np.full(int(codes.max()) + 1, -1 if last else n, np.int64)
    (np.maximum if last else np.minimum).at(places, codes, np.arange(n, dtype=np.int64))
    chosen = np.zeros(n, np.bool_)
    chosen[places[(places >= 0) & (places < n)]] = True
    return np.flatnonzero(chosen)


def _paired_ends(codes: np.ndarray, calls: np.ndarray, last: bool) -> np.ndarray:
    """The places of each (code, call)'s last (or first) occurrence, ascending."""
    if not len(codes):
        return np.zeros(0, np.int64)
    low = calls.min()
    pairs = codes * (int(calls.max() - low) + 1) + (calls - low)  # one integer a pair (codes < 2^31, calls < 2^32)
    if int(pairs.max()) < 4 * len(pairs) + 1024:  # few calls a session: a lookup array of the pairs
        return _coded_ends(pairs, last)
    _, places = np.unique(pairs[::-1] if last else pairs, return_index=True)
    return np.sort(len(pairs) - 1 - places if last else places)


def _coded_at(keys: np.ndarray, codes: np.ndarray) -> pa.Array:
    """For each of ``keys``, its place in ``codes`` (each code there once), null where it is not."""
    size = int(max(keys.max(initial=-1), codes.max(initial=-1))) + 1
    places = np.full(size, -1, np.int64)
    places[codes] = np.arange(len(codes), dtype=np.int64)
    found = places[keys]
    return pa.array(found, mask=found < 0)


# -- steps, episodes, tasks: the run's view ------------------------------------------------------------


def _rollouts(rows: _EpisodeRows) -> pa.Table:
    """``_sid`` -> rollout (a table), from the evaluation's ``start`` and ``episode`` rows: the last given."""
    return _ends(rows.rollouts, [_SID])


def steps_frame(source: Source, calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Calls that returned a result, numbered 1, 2, ... within their session, with their rollout, in
    (environment, split, task, rollout) order, as the episodes."""
    calls = calls_frame(source, outputs=False) if calls is None else calls
    steps = calls[calls["outcome"] == "result"].copy()
    steps["order"] = pd.factorize(steps["session_id"])[0]  # sessions in the order they began
    rows, _, (codes,) = _episode_rows(source, _arrow(steps["session_id"], _STR), outcomes=False)
    rollouts = _at(codes, _rollouts(rows), _SID)["rollout"]
    steps["rollout"] = pd.arrays.ArrowExtensionArray(rollouts.cast(_I64))
    steps = _typed(steps, {**STEPS_COLUMNS, "order": _I64})
    steps = steps.sort_values(["environment", "split", "task_index", "rollout", "order", "call"], kind="stable",
                              na_position="last")  # fmt: skip
    steps["step"] = steps.groupby("order", sort=False).cumcount() + 1
    return _typed(steps.drop(columns="order").reset_index(drop=True), STEPS_COLUMNS)


def _step_counts(rows: _EpisodeRows) -> pa.Table:
    """_sid -> its ``steps`` (calls whose last ``result`` or ``call_error`` row is a result), from those
    rows alone."""
    ends = rows.ends.filter(pc.and_(pc.is_valid(rows.ends["call"]), pc.is_valid(rows.ends["session_id"])))
    ends = _ends(ends, [_SID, "call"])
    return _counted(ends.filter(pc.equal(ends["kind"], "result"))[_SID])


def _counted(sessions: pa.ChunkedArray | pa.Array) -> pa.Table:
    """_sid -> how many times it is in ``sessions`` (``steps``)."""
    counts = np.bincount(_codes(sessions))
    present = np.flatnonzero(counts)
    return pa.table({_SID: pa.array(present), "steps": pa.array(counts[present])})


def _outcomes(rows: _EpisodeRows) -> pa.Table:
    """The last ``episode`` row of each session (a table): its typed columns, the record's figures among them."""
    return _ends(rows.outcomes, [_SID])


class _Step(NamedTuple):
    """A step as a reduction function sees it."""

    tool: str
    input: str
    ok: bool
    reward: float | None
    finished: bool
    error: str | None


_EPISODE_KINDS = ["open", "close", "ping", "result", "call_error", "start", "episode"]
_OUTCOME_ROWS = ["session_id", "environment", "split", "task_index", "rollout", "reward", "finished", "error", *TOKENS,
                 *EPISODE_COLUMNS]  # fmt: skip
_COUNTED = {"calls": ("result", "call_error"), "errors": ("call_error",), "pings": ("ping",)}
_COUNTED_KINDS = sorted({kind for kinds in _COUNTED.values() for kind in kinds})


class _EpisodeRows(NamedTuple):
    """The rows an episode is made of (sessions, results, the evaluation's start and episode rows: a small
    part of a trace), read in one pass, each kind kept with only what the frames take of it."""

    opens: pa.Table  # session_id, wall, environment, split, task_index, task: the ORS open rows
    closes: pa.Table  # session_id, wall: the ORS close rows that were not refused (ok false: the delete failed)
    counts: pa.Table  # session_id, kind: the ORS rows counted (``_COUNTED``)
    ends: pa.Table  # session_id, call, kind, reward, finished: the ORS result and call_error rows
    rollouts: pa.Table  # session_id, rollout: the agent's start and episode rows that name one
    outcomes: pa.Table  # the agent's episode rows: their typed columns (``EPISODE_COLUMNS``: the record's figures)


_ENCODED = ["session_id", "layer", "kind", "environment", "split", "task"]
"""The columns ``_episode_rows`` reads as the file holds them, dictionary-encoded (never decoded row by row): the
strings made plain only in the rows kept of each kind."""


def _episode_rows(source: Source, *more: pa.Array | pa.ChunkedArray,
                  outcomes: bool = True) -> tuple[_EpisodeRows, pa.Array, list[pa.Array]]:  # fmt: skip
    """``_EpisodeRows`` of ``source``, a piece at a time (so that no more than a piece of the rows read is held
    whole), ``_coded`` with the session ids of ``more``; ``outcomes=False`` leaves the episode rows' figures
    unread. ``_ENCODED`` are read dictionary-encoded: kinds matched by their few values, and each piece's
    session ids kept as indices into its dictionary, the dictionaries made one code each at the end."""
    columns = ["session_id", "layer", "kind", "wall", "environment", "split", "task_index", "task", "rollout", "call",
               "ok", "reward", "finished", *(["error", *TOKENS, *EPISODE_COLUMNS] if outcomes else [])]  # fmt: skip
    kept: dict[str, list[pa.Table]] = {name: [] for name in _EpisodeRows._fields}
    dictionaries: list[pa.Array] = []

    def keep(split: Future[tuple[dict[str, pa.Table], pa.Array]]) -> None:
        tables, dictionary = split.result()
        offset = sum(map(len, dictionaries))  # this piece's indices, after those of the pieces before
        for name, table in tables.items():
            kept[name].append(table.set_column(0, "session_id", pc.add(table["session_id"].cast(_I64), offset)))
        dictionaries.append(dictionary)

    with ThreadPoolExecutor(max_workers=1) as splitter:  # a piece is split while the next is read (both free the GIL)
        pending: deque[Future[tuple[dict[str, pa.Table], pa.Array]]] = deque()
        for piece in _pieces(source, columns, _EPISODE_KINDS, _ENCODED):
            pending.append(splitter.submit(_split, piece, outcomes))
            if len(pending) > 1:  # one piece read ahead at most
                keep(pending.popleft())
        for split in pending:
            keep(split)
    rows = _EpisodeRows(*(pa.concat_tables(tables).combine_chunks() if tables else _EMPTY[name].empty_table()
                          for name, tables in kept.items()))  # fmt: skip  # one chunk: Arrow's take is slow over many
    return _coded(rows, dictionaries, *more)


def _split(piece: pa.Table, outcomes: bool) -> tuple[dict[str, pa.Table], pa.Array]:
    """One piece of the episode rows, split by kind into ``_EpisodeRows``' tables (each mask made once, each
    table taking only its own columns), their ``session_id`` the index into the piece's dictionary of ids
    (returned beside them)."""
    ids = piece["session_id"]
    ids = (ids if pa.types.is_dictionary(ids.type) else pc.dictionary_encode(ids)).combine_chunks()  # one dictionary
    piece = piece.set_column(piece.schema.get_field_index("session_id"), "session_id", ids.indices)
    kind, agent = piece["kind"], kind_mask(piece["layer"], ["agent"])
    mine = pc.and_(pc.invert(agent), pc.is_valid(piece["session_id"]))
    refused = pc.fill_null(pc.equal(piece["ok"], False), False)  # a close whose delete failed

    def rows(mask: pa.ChunkedArray, names: Sequence[str]) -> pa.Table:
        table = piece.select(list(names)).filter(mask)
        for name in names[1:]:  # the session ids stay indices
            if pa.types.is_dictionary(table.schema.field(name).type):
                table = table.set_column(names.index(name), name, table[name].cast(_STR))
        return table

    return {
        "opens": rows(pc.and_(mine, kind_mask(kind, ["open"])), _EMPTY["opens"].names),
        "closes": rows(pc.and_(pc.and_(mine, kind_mask(kind, ["close"])), pc.invert(refused)), ["session_id", "wall"]),
        "counts": rows(pc.and_(mine, kind_mask(kind, _COUNTED_KINDS)), ["session_id", "kind"]),
        "ends": rows(pc.and_(pc.invert(agent), kind_mask(kind, ["result", "call_error"])), _EMPTY["ends"].names),
        "rollouts": rows(pc.and_(pc.and_(agent, kind_mask(kind, ["start", "episode"])),
                                 pc.is_valid(piece["rollout"])), ["session_id", "rollout"]),
        "outcomes": rows(pc.and_(agent, kind_mask(kind, ["episode"])), _OUTCOME_ROWS)
        if outcomes else _EMPTY["outcomes"].empty_table(),
    }, ids.dictionary  # fmt: skip


_SID = "_sid"
"""The column ``_coded`` adds: a row's session id as an integer code (what groups and joins are keyed by)."""


def _coded(rows: _EpisodeRows, dictionaries: list[pa.Array],
           *more: pa.Array | pa.ChunkedArray) -> tuple[_EpisodeRows, pa.Array, list[pa.Array]]:  # fmt: skip
    """``rows`` (their ``session_id`` indices into ``dictionaries``, one after another) with ``_SID`` in each table:
    every session id (of ``rows`` and of ``more``) an integer code, so that groups and joins by session
    hash integers, not strings (a null id a code of its own: a group, and a match, as Arrow's group_by
    and index_in take it), and ``session_id`` the id again (dictionary-encoded by the codes); the ids
    (code -> id), and the codes of ``more``."""
    offset, places = sum(map(len, dictionaries)), []
    for ids in more:
        encoded = pc.dictionary_encode(ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids)
        places.append(pc.add(encoded.indices.cast(_I64), offset))
        dictionaries, offset = [*dictionaries, encoded.dictionary], offset + len(encoded.dictionary)
    every = pc.dictionary_encode(pa.concat_arrays([d.cast(_STR) for d in dictionaries]) if dictionaries
                                 else pa.array([], _STR))  # fmt: skip  # each id once, whichever pieces hold it
    null = len(every.dictionary)  # the code of a null id
    code_of = np.append(np.asarray(every.indices.to_numpy(zero_copy_only=False), np.int64), null)
    names = pa.concat_arrays([every.dictionary, pa.nulls(1, _STR)])

    def codes(indices: pa.Array | pa.ChunkedArray) -> np.ndarray:
        return code_of[np.asarray(pc.fill_null(indices, offset).to_numpy(zero_copy_only=False), np.int64)]

    def coded(table: pa.Table) -> pa.Table:
        local = table["session_id"]
        sid = codes(local)
        ids = pa.DictionaryArray.from_arrays(pa.array(sid.astype(np.int32), mask=~_valid(local)), names)
        return table.set_column(0, "session_id", ids).append_column(_SID, pa.array(sid))

    return _EpisodeRows(*map(coded, rows)), names, [pa.array(codes(part)) for part in places]


def _valid(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.is_valid(values).to_numpy(zero_copy_only=False), np.bool_)


def _fields(*names: str) -> pa.Schema:
    return pa.schema([SCHEMA.field(name) for name in names])


_EMPTY = {
    "opens": _fields("session_id", "wall", "environment", "split", "task_index", "task"),
    "closes": _fields("session_id", "wall"),
    "counts": _fields("session_id", "kind"),
    "ends": _fields("session_id", "call", "kind", "reward", "finished"),
    "rollouts": _fields("session_id", "rollout"),
    "outcomes": _fields(*_OUTCOME_ROWS),
}
_EMPTY = {name: schema.set(0, pa.field("session_id", _I64)) for name, schema in _EMPTY.items()}
"""The schema of each of ``_EpisodeRows``' tables as read (for a trace without such rows): ``session_id`` an index."""


def episodes_frame(
    source: Source,
    *,
    reward: Reduction = "sum",
    success_threshold: float = 1.0,
    steps: pd.DataFrame | None = None,
    sessions: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per episode, in (environment, split, task, rollout) order; see the module docstring.

    ``reward`` and ``success_threshold`` reduce the sessions no evaluation ran (an evaluation's
    episodes keep the reward and success it recorded). Built by Arrow from the rows an episode is
    made of, read in one pass; an evaluation's episodes need no steps frame (their steps are
    counted from the ``result`` and ``call_error`` rows alone).
    """
    check_reduction(reward)
    given = _table(sessions, SESSIONS_COLUMNS) if sessions is not None else None
    counted = [] if steps is None else [_arrow(steps["session_id"], _STR)]
    rows, names, codes = _episode_rows(source, *([] if given is None else [given["session_id"]]), *counted)
    opened = _sessions(rows) if given is None else given.append_column(_SID, codes[0])
    outcomes = _outcomes(rows)
    ids, sid = _episode_ids(opened, outcomes, names)
    if not len(ids):
        return _typed(pd.DataFrame(), EPISODES_COLUMNS)
    known = _at(sid, opened.select(["environment", "split", "task_index", "task", "errors", _SID]), _SID)
    counts = _step_counts(rows) if steps is None else _counted(codes[-1])
    frame = pa.table({
        "session_id": ids, **{name: known[name] for name in ("environment", "split", "task_index", "task")},
        "errors": pc.fill_null(known["errors"], 0), "steps": pc.fill_null(_at(sid, counts, _SID)["steps"], 0),
        "order": np.arange(len(ids), dtype=np.int64), _SID: sid,
    })  # fmt: skip
    recorded = pc.is_in(sid, value_set=outcomes[_SID].combine_chunks())
    parts = []
    if not pc.all(recorded).as_py():  # sessions no evaluation ran: their steps reduced here
        steps = steps_frame(source) if steps is None else steps
        bare = _pandas(_plain(frame.filter(pc.invert(recorded)))).set_index("session_id")
        reduced = _reduced(bare, steps, _pandas(opened).set_index("session_id"), _rollouts(rows), reward,
                           success_threshold)  # fmt: skip
        parts.append(_table(reduced.reset_index(), _ORDERED_EPISODES))
    if pc.any(recorded).as_py():  # an evaluation's episodes: what its episode row recorded
        parts.append(_recorded(frame.filter(recorded), outcomes, (
            "rollout", "reward", "total_reward", "final_reward", "finished", "success", "finish_reason", "duration_s",
            "error", "error_type", *TOKENS)))  # fmt: skip
    return _typed(_in_order(parts, _ORDERED_EPISODES), EPISODES_COLUMNS)


_IDS = pa.dictionary(pa.int32(), _STR)
"""Session ids while the episodes are put together: indices into ``_coded``'s names, decoded once, at the end."""
_ORDERED_EPISODES = {**EPISODES_COLUMNS, "session_id": _IDS, "order": _I64}


def _plain(table: pa.Table) -> pa.Table:
    """``table`` with its session ids plain strings."""
    return table.set_column(table.schema.get_field_index("session_id"), "session_id", table["session_id"].cast(_STR))


def _reduced(bare: pd.DataFrame, steps: pd.DataFrame, opened: pd.DataFrame, rollouts: pa.Table, reward: Reduction,
             success_threshold: float) -> pd.DataFrame:  # fmt: skip
    """Sessions no evaluation ran, their steps reduced (``reduce_reward``: a reduction may be any function)."""
    wanted = set(bare.index)
    by_session = steps[steps["session_id"].isin(wanted)].groupby("session_id", sort=False)
    reduced = {sid: reduce_reward(_steps(group), reward) for sid, group in by_session}
    values = [reduced.get(sid) or reduce_reward([], reward) for sid in bare.index]
    bare["total_reward"], bare["final_reward"], bare["reward"] = (list(c) for c in zip(*values, strict=True))
    bare["success"] = [value >= success_threshold for _, _, value in values]
    bare["finished"] = by_session["finished"].any().reindex(bare.index, fill_value=False)
    bare["rollout"] = _pandas(_at(_arrow(bare[_SID], _I64), rollouts, _SID))["rollout"].to_numpy()
    bare["started"] = opened["opened"].reindex(bare.index)
    bare["duration_s"] = opened["duration_s"].reindex(bare.index)
    return bare


def _episode_ids(opened: pa.Table, outcomes: pa.Table, names: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The episodes' session ids (those that opened, then those only an episode row names; each once) and
    their codes (``_SID``; ``names``: code -> id); the ids ``_IDS``, the codes' indices into ``names``."""
    sid = pc.unique(pa.concat_arrays([opened[_SID].combine_chunks(), outcomes[_SID].combine_chunks()]))
    return pa.DictionaryArray.from_arrays(sid.cast(pa.int32()), names), sid


def _recorded(frame: pa.Table, outcomes: pa.Table, names: Sequence[str]) -> pa.Table:
    """An evaluation's episodes as their ``episode`` rows recorded them: ``names`` and the start taken from there
    (where, the row's where it says, else the session's); both tables ``_coded``."""
    outcome = _at(frame[_SID], outcomes.select(list(dict.fromkeys(["environment", "split", "task_index", "started",
                                                                   *names, _SID]))), _SID)  # fmt: skip
    mine = {name: frame[name] for name in frame.column_names if name != _SID}
    for name in ("environment", "split", "task_index"):
        mine[name] = pc.coalesce(outcome[name], frame[name])
    started = outcome["started"].to_numpy(zero_copy_only=False) * 1e6  # seconds since the epoch, null as NaN
    mine["started"] = pa.Array.from_pandas(pd.to_datetime(started, unit="us", utc=True)).cast(_WALL, safe=False)
    for name in names:
        mine[name] = outcome[name]
    return pa.table(mine)


def _in_order(parts: list[pa.Table], columns: Mapping[str, pa.DataType]) -> pa.Table:
    """The parts as one table in the episodes' order (environment, split, task, rollout, then as recorded)."""
    if len(parts) > 1 and "session_id" in columns:  # ids of dictionaries that differ (a null in one): plain
        columns = {**columns, "session_id": _STR}
    together = pa.concat_tables([_table(part, columns) for part in parts])
    keys = ["environment", "split", "task_index", "rollout", "order"]
    return together.sort_by([(key, "ascending", "at_end") for key in keys]).drop_columns(["order"])


def _steps(group: pd.DataFrame) -> list[_Step]:
    rows: list[tuple[Any, ...]] = list(group[list(_Step._fields)].itertuples(index=False))
    return [_Step._make(None if _missing(value) else value for value in values) for values in rows]


_TASK_KEYS = ["environment", "split", "task_index", "task"]


def _aggregates(episodes: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Per group of ``keys`` (in the order the groups first appear; all the episodes one group when there
    are no keys), grouped by Arrow: episodes, mean reward and its standard error (exact sums, over
    each group's rewards), success, finished, steps, errors, tokens, and ``_successes``."""
    names = list(dict.fromkeys([*keys, "reward", "success", "finished", "steps", "error", *TOKENS]))
    table = pa.table({name: _arrow(episodes[name], EPISODES_COLUMNS[name]) for name in names})
    table = _numbered(table.append_column("_all", pa.array(np.zeros(len(episodes), dtype=np.int8))))
    for name in ("success", "finished"):
        table = table.append_column(f"_{name}", pc.cast(pc.fill_null(table[name], False), pa.int64()))
    grouped = table.group_by(list(keys) or ["_all"], use_threads=False).aggregate(
        [
            ("_row", "min"),
            ("reward", "list"),
            ("reward", "count", pc.CountOptions("all")),
            ("_success", "sum"),
            ("_finished", "sum"),
            ("steps", "sum"),
            ("error", "count"),
            *((name, "sum") for name in TOKENS),
        ]
    )
    grouped = grouped.take(pc.sort_indices(grouped["_row_min"]))
    n = grouped["reward_count"].to_numpy()
    rewards = grouped["reward_list"].to_pylist()
    out = _pandas(grouped.select(list(keys))) if keys else pd.DataFrame(index=pd.RangeIndex(len(n)))
    out["episodes"] = n
    out["mean_reward"] = [mean([float(r) for r in values]) for values in rewards]
    out["stderr"] = [stderr([float(r) for r in values]) for values in rewards]
    for name in ("success", "finished"):
        out[f"{name}_rate"] = grouped[f"_{name}_sum"].to_numpy() / n
    out["mean_steps"] = grouped["steps_sum"].to_numpy(zero_copy_only=False) / n
    out["errors"] = grouped["error_count"].to_numpy()
    for name in TOKENS:
        out[name] = pd.Series(grouped[f"{name}_sum"].to_numpy(zero_copy_only=False), dtype="object").where(
            grouped[f"{name}_sum"].is_valid().to_numpy(zero_copy_only=False), None)  # fmt: skip
    out["_successes"] = grouped["_success_sum"].to_numpy()
    return out


def default_ks(episodes: pd.DataFrame) -> list[int]:
    """1, and the number of rollouts per task (the largest rollout number + 1, else the most episodes a task has)."""
    if episodes.empty:
        return [1]
    rollouts = episodes["rollout"].dropna()
    k = int(rollouts.max()) + 1 if len(rollouts) else int(episodes.groupby(["environment", "split", "task_index"],
                                                                            dropna=False).size().max())  # fmt: skip
    return sorted({1, k})


def tasks_frame(episodes: pd.DataFrame, ks: Sequence[int] | None = None) -> pd.DataFrame:
    """One row per task (environment, split, task index or spec): its episodes aggregated, and pass@k."""
    ks = default_ks(episodes) if ks is None else ks
    tasks = _aggregates(episodes, _TASK_KEYS)
    for k in ks:
        tasks[f"pass@{k}"] = [pass_at_k(int(n), int(c), k) for n, c in zip(tasks["episodes"], tasks["_successes"],
                                                                             strict=True)]  # fmt: skip
    return _typed(tasks, {**TASKS_COLUMNS, **pass_columns(ks)})


def errors_frame(episodes: pd.DataFrame) -> pd.DataFrame:
    """One row per episode that failed, with the error's type and message."""
    return _typed(episodes[episodes["error"].notna()].reset_index(drop=True), ERRORS_COLUMNS)


class Summary(pd.DataFrame):
    """A run's summary: a one-row DataFrame (columns and dtypes declared in ``SUMMARY_COLUMNS``) that
    shows itself as a short vertical table, one line per figure, so that nothing is clipped.

    It is a DataFrame in every other way: ``summary()["mean_reward"]``, ``summary().iloc[0]``.
    What it shows is what indexes it: each line is a column's name and its value (numbers to 4
    significant digits; tokens no agent reported, and the error types and note when there are none,
    left out), with no header of its own, so every name shown is a ``summary()[name]``.
    ``vertical()`` is that table as a plain frame of its own (one ``value`` column indexed by the
    names). Whatever is derived from it (a selection, a copy) is a plain DataFrame.
    """

    @property
    def _constructor(self) -> type[pd.DataFrame]:
        return pd.DataFrame

    def vertical(self) -> pd.DataFrame:
        """The figures, one row each: a ``value`` column of text, indexed by the figure's name (the column's)."""
        if len(self) != 1:
            return pd.DataFrame(self).T
        shown: dict[str, str] = {}
        for name, value in pd.DataFrame(self).iloc[0].items():
            if name in (*TOKENS, "error_types", "note") and _missing(value):
                continue  # tokens no agent reported; the types of errors there were not; nothing to note
            shown[str(name)] = _shown(value)
        return pd.DataFrame({"value": shown})

    def __repr__(self) -> str:
        return self.vertical().to_string(header=len(self) != 1)

    def _repr_html_(self) -> str | None:
        with pd.option_context("display.max_colwidth", None):  # the note is a sentence: shown whole
            return self.vertical().to_html(header=len(self) != 1, notebook=True)


def _shown(value: Any) -> str:
    if _missing(value):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def error_types(episodes: pd.DataFrame) -> str | None:
    """The failed episodes' error types with their counts, the most common first
    (``"ReplayMismatchError ×10, TimeoutError ×2"``); None when none failed."""
    failed = episodes[episodes["error"].notna()]
    if failed.empty:
        return None
    counts = Counter("error" if _missing(kind) else str(kind) for kind in failed["error_type"])
    return ", ".join(f"{kind} ×{count}" for kind, count in counts.most_common())


def threshold_note(episodes: pd.DataFrame, success_threshold: float | None = None) -> str | None:
    """Why success and pass@k are 0 though rewards are positive, naming ``success_threshold=``
    (``ors_lab.stats.success_note``: the given threshold, else its default); None when not so."""
    if episodes.empty:
        return None
    clean = episodes[episodes["error"].isna()]
    rewards = [float(value) for value in clean["reward"] if not _missing(value)]
    successes = int(episodes["success"].fillna(False).astype(bool).sum())
    return success_note(len(episodes), successes, rewards, success_threshold)


def summary_frame(episodes: pd.DataFrame, ks: Sequence[int] | None = None, *,
                  success_threshold: float | None = None) -> Summary:  # fmt: skip
    """The run in one row: episodes, tasks, mean reward and its stderr, success rate, pass@k (mean over tasks),
    and a ``note`` when no episode succeeded though rewards are positive (``threshold_note``: the
    evaluation's ``success_threshold`` when given)."""
    ks = default_ks(episodes) if ks is None else ks
    tasks = tasks_frame(episodes, ks)
    row: dict[str, Any] = {
        "environments": ", ".join(map(str, episodes["environment"].dropna().unique())),
        "splits": ", ".join(map(str, episodes["split"].dropna().unique())),
        "tasks": len(tasks),
        **_overall(episodes),
    }
    row["error_types"] = error_types(episodes)
    row["note"] = threshold_note(episodes, success_threshold)
    for k in ks:
        known = tasks[f"pass@{k}"].dropna()
        row[f"pass@{k}"] = mean([float(v) for v in known]) if len(known) else None
    return Summary(_typed(pd.DataFrame([row]), {**SUMMARY_COLUMNS, **pass_columns(ks)}))


def _overall(episodes: pd.DataFrame) -> dict[str, Any]:
    """``_aggregates`` of all the episodes in one group (no episodes: none, no mean, no rates)."""
    if episodes.empty:
        return {"episodes": 0, "errors": 0}
    row = _aggregates(episodes, []).drop(columns="_successes").iloc[0]
    return {str(name): value for name, value in row.items()}


# -- the agent's own view: transcripts -----------------------------------------------------------------


def transcripts_frame(source: Source, episodes: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per turn of the agent in each episode: its reasoning, text and tool calls, the deltas
    joined (``ors_lab.transcript``), in the order of ``episodes`` (the listing's when not
    given: the same episodes, in the same order), then by turn."""
    rows = _select(source, ["session_id", "data"], STREAM_KINDS, agent=True)
    rows = rows.filter(pc.and_(pc.is_valid(rows["session_id"]), pc.is_valid(rows["data"])))
    items: dict[str, list[Any]] = {}
    for session_id, data in zip(rows["session_id"].to_pylist(), rows["data"].to_pylist(), strict=True):
        item = _json(data)
        if isinstance(item, dict):
            items.setdefault(session_id, []).append(item)
    if not items:
        return _typed(pd.DataFrame(), TRANSCRIPTS_COLUMNS)
    keys = ["environment", "split", "task_index", "rollout"]
    episodes = listing_frame(source) if episodes is None else episodes
    known = episodes.drop_duplicates("session_id").set_index("session_id")[keys]
    where_of = {str(sid): record for sid, record in zip(known.index, known.to_dict("records"), strict=True)}
    order = [sid for sid in dict.fromkeys(episodes["session_id"]) if sid in items]
    order += [sid for sid in items if sid not in where_of]
    out = []
    for session_id in order:
        where = where_of.get(session_id, {})
        for turn in join_stream(items[session_id]).turns():
            calls = turn.tool_calls
            rewards = [call.reward for call in calls if call.reward is not None]
            out.append({**where, "session_id": session_id, "turn": turn.number, "block": turn.name,
                        "reasoning": turn.reasoning or None, "text": turn.text or None,
                        "tool_calls": "\n".join(call.describe() for call in calls) or None, "calls": len(calls),
                        "reward": math.fsum(rewards) if rewards else None,
                        "error": "\n".join(turn.errors) or None})  # fmt: skip
    return _typed(pd.DataFrame(out), TRANSCRIPTS_COLUMNS)


# -- the trace viewer's list ---------------------------------------------------------------------------


def listing_frame(source: Source) -> pd.DataFrame:
    """One row per episode (as ``episodes``: the same episodes, in the same order, with the same
    values) with what the trace viewer lists, built from the ``open``, ``close``, ``result``,
    ``call_error``, ``start`` and ``episode`` rows by Arrow alone, without the per-call frames.

    A session no evaluation ran takes the sum of its rewards (``episodes``' default reduction)."""
    rows, names, _ = _episode_rows(source)  # one pass over the trace; the rest is small
    opened, outcomes = _sessions(rows), _outcomes(rows)
    ids, sid = _episode_ids(opened, outcomes, names)
    if not len(ids):
        return _typed(pd.DataFrame(), LISTING_COLUMNS)
    where = ["environment", "split", "task_index", "errors", "duration_s", "opened", _SID]
    known = _at(sid, opened.select(where), _SID)
    results = rows.ends.filter(pc.equal(rows.ends["kind"], "result")).select([_SID, "reward", "finished"])
    per = _at(sid, results.group_by(_SID).aggregate(
        [("reward", "sum"), ("reward", "count"), ("finished", "any"), (_SID, "count")]), _SID)  # fmt: skip
    rewarded = pc.fill_null(pc.greater(per["reward_count"], 0), False)
    frame = pa.table({
        "session_id": ids, **{name: known[name] for name in ("environment", "split", "task_index")},
        "steps": pc.fill_null(per[f"{_SID}_count"], 0), "errors": pc.fill_null(known["errors"], 0),
        "reward": pc.if_else(rewarded, per["reward_sum"], 0.0), "finished": pc.fill_null(per["finished_any"], False),
        "rollout": _at(sid, _rollouts(rows), _SID)["rollout"], "duration_s": known["duration_s"],
        "started": known["opened"], "error": pa.nulls(len(ids), _STR), "order": np.arange(len(ids), dtype=np.int64),
        _SID: sid,
    })  # fmt: skip
    recorded = pc.is_in(sid, value_set=outcomes[_SID].combine_chunks())
    parts = [frame.filter(pc.invert(recorded))]
    if pc.any(recorded).as_py():  # an evaluation's episodes: what its episode row recorded
        parts.append(
            _recorded(frame.filter(recorded), outcomes, ("rollout", "reward", "finished", "duration_s", "error"))
        )
    return _typed(_in_order(parts, {**LISTING_COLUMNS, "session_id": _IDS, "order": _I64}), LISTING_COLUMNS)


def finished_episodes(source: Source) -> dict[tuple[str, str, int, int], str]:
    """The episodes an evaluation finished without an error: (environment, split, task, rollout) -> session id."""
    rows = _select(
        source, ["environment", "split", "task_index", "rollout", "session_id", "ok"], ["episode"], agent=True
    )
    rows = rows.filter(pc.fill_null(rows["ok"], False))
    keys = zip(*(rows[name].to_pylist() for name in ("environment", "split", "task_index", "rollout")), strict=True)
    return dict(zip(keys, rows["session_id"].to_pylist(), strict=True))
