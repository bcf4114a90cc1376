"""Where a frame's rows come from (``Source``: an Arrow table, or a ``Trace`` read where it lies), and the
Arrow work the builders share: reading a source a piece at a time with its session ids made integer codes,
typing a frame to its declared columns, first and last rows of groups, lookups by session code."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.frames.columns import _I64, _STR
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


Split: TypeAlias = Callable[[pa.Table, int], dict[str, pa.Table]]
"""What ``_coded_pieces`` makes of a piece: ``split(piece, first)`` -> tables whose first column is ``session_id``."""


Coded: TypeAlias = tuple[dict[str, pa.Table], pa.Array, list[pa.Array]]
"""Tables with ``_SID``, the ids (code -> id), and the codes of more ids (what ``_coded`` gives)."""


def _coded_pieces(
    source: Source,
    columns: Sequence[str],
    kinds: Sequence[str] | None,
    encoded: Sequence[str],
    split: Split,
    empty: Mapping[str, pa.Schema],
    *more: pa.Array | pa.ChunkedArray,
) -> Coded:
    """What ``split`` makes of each piece of ``source``'s rows (of ``kinds``, with ``columns``; ``encoded`` read as
    the file holds them, dictionary-encoded), so that no more than a piece of the rows read is held whole: each
    name's tables of every piece one after another (a chunk a piece), ``_coded`` with the session ids of ``more``, and
    the ids.

    ``split(piece, first)`` gets the piece with its ``session_id`` the indices into its dictionary of ids (``first``:
    how many rows the pieces before it held), and gives tables whose first column is such indices (``empty``: the
    schema of each, for a source without rows). A piece is split on a thread of its own while the next is read
    (both free the GIL)."""
    kept: dict[str, list[pa.Table]] = {name: [] for name in empty}
    dictionaries: list[pa.Array] = []

    def keep(done: Future[tuple[dict[str, pa.Table], pa.Array]]) -> None:
        tables, dictionary = done.result()
        offset = sum(map(len, dictionaries))  # this piece's indices, after those of the pieces before
        for name, table in tables.items():
            kept[name].append(table.set_column(0, "session_id", pc.add(table["session_id"].cast(_I64), offset)))
        dictionaries.append(dictionary)

    with ThreadPoolExecutor(max_workers=1) as splitter:
        pending: deque[Future[tuple[dict[str, pa.Table], pa.Array]]] = deque()
        first = 0
        for piece in _pieces(source, columns, kinds, encoded):
            pending.append(splitter.submit(_indexed, piece, first, split))
            first += piece.num_rows
            if len(pending) > 1:  # one piece read ahead at most
                keep(pending.popleft())
        for done in pending:
            keep(done)
    tables = {name: pa.concat_tables(tables) if tables else empty[name].empty_table() for name, tables in kept.items()}
    return _coded(tables, dictionaries, *more)


def _indexed(piece: pa.Table, first: int, split: Split) -> tuple[dict[str, pa.Table], pa.Array]:
    """``split`` of ``piece`` with its ``session_id`` the indices into its dictionary of ids (returned beside)."""
    ids = piece["session_id"]
    ids = (ids if pa.types.is_dictionary(ids.type) else pc.dictionary_encode(ids)).combine_chunks()  # one dictionary
    return split(piece.set_column(piece.schema.get_field_index("session_id"), "session_id", ids.indices), first), \
        ids.dictionary  # fmt: skip


def _coded(tables: dict[str, pa.Table], dictionaries: list[pa.Array], *more: pa.Array | pa.ChunkedArray) -> Coded:
    """``tables`` (their ``session_id`` indices into ``dictionaries``, one after another) with ``_SID`` in each:
    every session id (of ``tables`` and of ``more``) an integer code, so that groups and joins by session
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

    return {name: coded(table) for name, table in tables.items()}, names, [pa.array(codes(part)) for part in places]


def _valid(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.is_valid(values).to_numpy(zero_copy_only=False), np.bool_)


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
