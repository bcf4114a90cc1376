"""The wire's view: ``events`` (every row), ``calls`` (one row per tool call) and ``sessions``."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.frames.columns import _I32, _I64, _STR, CALLS_COLUMNS, SESSIONS_COLUMNS
from ors_lab.analysis.frames.episode_rows import _episode_rows, _sessions
from ors_lab.analysis.frames.source import _SID, Source, _coded_pieces, _ends, _json, _pandas, _typed
from ors_lab.recording.schema import kind_mask
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
_ENCODED = ["session_id", "layer", "kind", "environment", "split", "tool", "input", "event", "reason"]
"""The columns read as the file holds them, dictionary-encoded: made plain strings only in the rows of calls."""
_BASE = {"_row": "min", "t_ns": "min", "wall": "min", "attempt": "max", "chunks": "sum", "pings": "sum",
         "bytes": "sum", **dict.fromkeys(_FIRST, "first")}  # fmt: skip
"""What the rows of a call are reduced to: each column by an aggregation that reduces its own results alike (the
least of the least, the sum of sums, the first of the firsts), so that pieces are reduced, then their results."""
_BATCH = 65_536  # outputs read into Python at a time


def _fields(names: Mapping[str, pa.DataType]) -> pa.Schema:
    return pa.schema([("session_id", _I64), ("call", _I32), *names.items()])


_PARTS = {
    "base": _fields({"_row": _I64, "t_ns": _I64, "wall": CALLS_COLUMNS["started"], "attempt": _I32, "chunks": _I64,
                     "pings": _I64, "bytes": _I64, **{name: CALLS_COLUMNS[name] for name in _FIRST}}),
    "ttfb": _fields({"ttfb_ns": _I64}),
    "ends": _fields({**{name: CALLS_COLUMNS[name] for name in _END}, "kind": _STR, "t_ns": _I64}),
    "streams": _fields({"attempt": _I32, "_row": _I64, "data": pa.large_string()}),
}  # fmt: skip
"""What each piece of the rows gives (``_partial``): its calls reduced (``base``), the first response's time to
first byte, the last result or call_error row, the chunk and end events of the calls' streams; ``session_id`` the
piece's indices of the ids (``_coded_pieces``)."""


def calls_frame(source: Source, *, outputs: bool = True) -> pd.DataFrame:
    """One row per tool call, keyed by (session_id, call): the ORS rows that carry a call number, grouped
    by Arrow. ``outputs=False`` leaves the output out (and the stream rows it is read from unread).

    The rows are read a piece at a time (a trace's few row groups; a table whole), each piece's calls reduced
    as it is read, so that no more than a piece of the rows is held whole; a call whose rows lie in more than
    one piece is reduced again from its pieces' results. Calls are keyed by their session's integer code."""
    read = [*_CALL_ROWS, *(["event", "data"] if outputs else [])]
    parts, names, _ = _coded_pieces(source, read, None, _ENCODED, partial(_partial, outputs=outputs), _PARTS)
    if not parts["base"].num_rows:
        return _typed(pd.DataFrame(), CALLS_COLUMNS)
    # each part let go once used (``pop``): what is held at once is the calls, not their pieces' results
    texts = _outputs(parts.pop("streams")) if outputs else None
    calls = _merged(parts.pop("base"), _BASE).sort_by("_row")  # the calls in the order they began
    ttfb = _paired_at(calls, _merged(parts.pop("ttfb"), {"ttfb_ns": "first"}))["ttfb_ns"]
    ends = _paired_at(calls, _ends(parts.pop("ends"), [_SID, "call"]))
    columns = {name: calls[name] for name in calls.column_names}
    columns.update({name: ends[name] for name in _END})
    columns.update({"session_id": names.take(calls[_SID]), "outcome": ends["kind"], "start_ns": calls["t_ns"],
                    "started": calls["wall"], "attempts": calls["attempt"], "ttfb_ms": pc.divide(ttfb, 1e6),
                    "duration_ms": pc.divide(pc.subtract(ends["t_ns"], calls["t_ns"]), 1e6)})  # fmt: skip
    if texts is not None:
        columns["output"] = _paired_at(calls, texts)["output"]
    return _typed(pa.table(columns), CALLS_COLUMNS)


def _partial(piece: pa.Table, first: int, outputs: bool) -> dict[str, pa.Table]:
    """The calls of one piece of the rows (a session id and a call number, not the agent's), reduced as far as the
    piece alone allows (``_PARTS``); ``_row`` each row's place in the source (``first``: the rows before the piece)."""
    mine = pc.and_(pc.and_(pc.is_valid(piece["call"]), pc.is_valid(piece["session_id"])),
                   pc.invert(kind_mask(piece["layer"], ["agent"])))  # fmt: skip
    places = np.flatnonzero(np.asarray(pc.fill_null(mine, False).to_numpy(zero_copy_only=False), np.bool_))
    rows = piece.take(places)  # the strings made plain in these rows only
    rows = pa.table({name: rows[name].cast(_STR) if name != "session_id" and pa.types.is_dictionary(rows[name].type)
                     else rows[name] for name in rows.column_names} | {"_row": pa.array(places + first)})  # fmt: skip
    kind = rows["kind"]
    chunk = pc.equal(kind, "chunk")
    counted = pa.table({**{name: rows[name] for name in ["session_id", "call", "_row", "t_ns", "wall", "attempt",
                                                          *_FIRST]},
                        "chunks": pc.cast(chunk, _I64), "pings": pc.cast(pc.equal(kind, "comment"), _I64),
                        "bytes": pc.fill_null(pc.if_else(chunk, rows["size"], 0), 0)})  # fmt: skip
    responses = rows.filter(pc.equal(kind, "response"))
    ends = _ends(rows.filter(pc.is_in(kind, value_set=pa.array(["result", "call_error"]))), ["session_id", "call"])
    streams = _PARTS["streams"].empty_table()
    if outputs:
        wanted = pc.and_(pc.equal(kind, "event"), pc.is_in(rows["event"], value_set=pa.array(["chunk", "end"])))
        events = rows.filter(pc.and_(pc.fill_null(wanted, False), pc.is_valid(rows["attempt"])))
        streams = events.set_column(events.schema.get_field_index("data"), "data", pc.fill_null(events["data"], ""))
    return {
        "base": _reduced(counted, _BASE, "session_id"),
        "ttfb": _reduced(responses, {"ttfb_ns": "first"}, "session_id"),
        "ends": ends.select(_PARTS["ends"].names),
        "streams": streams.select(_PARTS["streams"].names),
    }


def _reduced(table: pa.Table, how: Mapping[str, str], session: str = _SID) -> pa.Table:
    """``table`` grouped by call (``session`` and ``call``), each column of ``how`` aggregated as it says and named as
    it was."""
    grouped = table.group_by([session, "call"], use_threads=False).aggregate(list(how.items()))
    return pa.table({session: grouped[session], "call": grouped["call"],
                     **{name: grouped[f"{name}_{op}"] for name, op in how.items()}})  # fmt: skip


def _merged(table: pa.Table, how: Mapping[str, str]) -> pa.Table:
    """``table`` (the pieces' results) with each call in one row: the few calls whose rows lie in more than one piece
    ``_reduced`` again (by ``how``), the others as they are."""
    table = table.select([_SID, "call", *how])
    _, inverse, counts = np.unique(_pairs(table).to_numpy(), return_inverse=True, return_counts=True)
    repeated = pa.array(counts[inverse] > 1)
    if not pc.any(repeated).as_py():
        return table
    return pa.concat_tables([table.filter(pc.invert(repeated)), _reduced(table.filter(repeated), how)])


def _paired_at(calls: pa.Table, table: pa.Table) -> pa.Table:
    """The rows of ``table`` (one per call) for each of ``calls``, in their order; null rows for calls it lacks."""
    return table.take(pc.index_in(_pairs(calls), value_set=_pairs(table)))


def _pairs(table: pa.Table) -> pa.Array:
    """Each row's call as one integer: its session's code and its call number (an int32) side by side."""
    codes, calls = (np.asarray(table[name].to_numpy(), np.int64) for name in (_SID, "call"))
    return pa.array(codes * 2**32 + calls)


def _outputs(events: pa.Table) -> pa.Table:
    """Each call's ``output`` as text: the ``chunk`` and ``end`` events of its last stream (the one that began last)
    joined (the result's JSON), read by ``output_text``; null for a failed result or a stream that never ended.

    Only the last streams' events are taken, each call's together in their order, and joined where they lie (a
    list over them, made without a copy): their data copied twice, whatever the number of streams."""
    streams = events.group_by([_SID, "call", "attempt"], use_threads=False).aggregate([("_row", "min")])
    last = _ends(streams.sort_by("_row_min"), [_SID, "call"])  # each call's stream that began last
    pairs = _pairs(events)
    attempt = last["attempt"].take(pc.index_in(pairs, value_set=_pairs(last)))
    mine = np.flatnonzero(np.asarray(pc.equal(events["attempt"], attempt).to_numpy(zero_copy_only=False), np.bool_))
    pairs = pairs.to_numpy()[mine]
    order = np.lexsort((events["_row"].to_numpy()[mine], pairs))  # by call, then as they came
    rows = events.select([_SID, "call", "data"]).take(mine[order])
    keys = rows.select([_SID, "call"])
    starts = np.flatnonzero(np.diff(pairs[order], prepend=pairs[order][:1] - 1))  # where each call's events begin
    lists = pa.LargeListArray.from_arrays(np.append(starts, len(order)), rows["data"].combine_chunks())
    del events, rows  # the data is in the lists now
    payloads = pc.binary_join(lists, pa.scalar("", pa.large_string()))
    texts = [pa.array([output_text(_json(text)) for text in payloads.slice(start, _BATCH).to_pylist()], _STR)
             for start in range(0, len(payloads), _BATCH)]  # fmt: skip  # a batch of Python strings at a time
    return keys.take(starts).append_column("output", pa.chunked_array(texts, _STR))


def sessions_frame(source: Source) -> pd.DataFrame:
    """One row per session that opened."""
    return _typed(_pandas(_sessions(_episode_rows(source, outcomes=False)[0])), SESSIONS_COLUMNS)
