"""The rows an episode is made of (``_EpisodeRows``), read in one pass, a piece at a time, their session ids
made integer codes; the sessions, step counts and outcomes taken from them, and the episodes put
together from their parts (shared by ``episodes``, ``sessions``, ``steps`` and the viewer's ``listing``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.frames.columns import _I64, _STR, _WALL, SESSIONS_COLUMNS, TOKENS
from ors_lab.analysis.frames.source import _SID, Source, _at, _coded_pieces, _codes, _ends, _table
from ors_lab.recording.columns import EPISODE_COLUMNS
from ors_lab.recording.schema import SCHEMA, kind_mask

__all__: list[str] = []


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


def _rollouts(rows: _EpisodeRows) -> pa.Table:
    """``_sid`` -> rollout (a table), from the evaluation's ``start`` and ``episode`` rows: the last given."""
    return _ends(rows.rollouts, [_SID])


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
    """``_EpisodeRows`` of ``source``, a piece at a time (``_coded_pieces``: so that no more than a piece of the rows
    read is held whole), ``_coded`` with the session ids of ``more``; ``outcomes=False`` leaves the episode rows'
    figures unread. ``_ENCODED`` are read dictionary-encoded: kinds matched by their few values, and each piece's
    session ids kept as indices into its dictionary, the dictionaries made one code each at the end."""
    columns = ["session_id", "layer", "kind", "wall", "environment", "split", "task_index", "task", "rollout", "call",
               "ok", "reward", "finished", *(["error", *TOKENS, *EPISODE_COLUMNS] if outcomes else [])]  # fmt: skip
    split = partial(_split, outcomes=outcomes)
    tables, names, codes = _coded_pieces(source, columns, _EPISODE_KINDS, _ENCODED, split, _EMPTY, *more)
    # one chunk each: Arrow's take is slow over many
    return _EpisodeRows(**{name: table.combine_chunks() for name, table in tables.items()}), names, codes


def _split(piece: pa.Table, first: int, outcomes: bool) -> dict[str, pa.Table]:
    """One piece of the episode rows (its ``session_id`` indices into its dictionary of ids), split by kind into
    ``_EpisodeRows``' tables (each mask made once, each table taking only its own columns)."""
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
    }  # fmt: skip


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


_IDS = pa.dictionary(pa.int32(), _STR)
"""Session ids while the episodes are put together: indices into ``_coded``'s names, decoded once, at the end."""


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
