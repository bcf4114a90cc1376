"""Where a frame's rows come from (``Source``: an Arrow table, or a ``Trace`` read where it lies), and the
Arrow work the builders share: typing a frame to its declared columns, first and last rows of groups,
lookups by session code."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.recording.reading import select_rows

__all__ = ["RowReader", "Source"]


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


class RowReader(Protocol):
    """Where a frame's rows come from besides an Arrow table: a ``Trace``, whose ``select`` reads only
    the columns (and row groups) asked for from the file."""

    def select(self, columns: Sequence[str], *, kinds: Sequence[str] | None = None) -> pa.Table: ...

    def scan(self, columns: Sequence[str], *, kinds: Sequence[str] | None = None) -> Iterator[pa.Table]: ...

    def _scan(self, columns: Sequence[str], kinds: Sequence[str] | None = None,
              encoded: Sequence[str] = ()) -> Iterator[pa.Table]: ...  # fmt: skip


Source: TypeAlias = pa.Table | RowReader
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


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


_SID = "_sid"
"""The column ``_coded`` adds: a row's session id as an integer code (what groups and joins are keyed by)."""


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
