"""A trace read back as the HTTP exchanges it recorded, ready to be served again.

Each request row, its response row and the chunk, event and comment rows that share its
``exchange`` number become one ``Exchange``: what was asked (method, path, body, tool and input)
and what came back (status, headers, body, or the SSE items grouped by the network chunk that
delivered them, each with its delay after the response head).

The index is built from the trace's columns with Arrow and numpy, never row by row in Python: the
rows of one exchange are grouped by (run, exchange number), one compact table keeps one row per
exchange (sorted by session, then by ``seq``) and another one row per SSE item, so that a session's
exchanges and items are two slices. The string columns the recorder writes dictionary-encoded (kinds, ids,
methods, URLs, headers, event names) are read as dictionaries and kept so, each with the values it uses: a
response's headers take 4 bytes, not their text. ``Exchange`` objects are made when they are asked for (a
session when it is claimed, a stateless answer when it is played), and kept, with their ``played``
counts, from then on. Load time and memory grow linearly with the trace (``bench/scale_replay.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.trace import DICTIONARY_READ, Trace
from ors_lab.protocol.errors import TraceFormatError
from ors_lab.recording.redact import REDACTED
from ors_lab.recording.schema import SCHEMA

__all__ = ["EpisodeKey", "Exchange", "Item", "Recording", "give_back", "matches", "recorded_episodes"]

COLUMNS = [
    "run_id", "layer", "seq", "t_ns", "kind", "session_id", "call", "attempt", "exchange", "method", "url", "status",
    "headers", "body", "event", "data", "sse_id", "retry_ms", "comment", "environment", "split", "task_index",
    "rollout", "error",
]  # fmt: skip

KINDS = ["request", "response", "chunk", "event", "comment"]
REQUEST, RESPONSE, CHUNK, EVENT, COMMENT = range(len(KINDS))

# a JSON object whose values are all texts, as RE2 matches it (a sufficient test: what fails it is parsed in Python)
_TEXT = r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"'
_SPACE = r"[ \t\n\r]*"
_PAIR = f"{_TEXT}{_SPACE}:{_SPACE}{_TEXT}{_SPACE}"
KEEP = pa.system_memory_pool()
"""Where the index's arrays live: not in the pool the trace and the scratch arrays were built in, so that
``give_back`` can return those whole."""
HEADERS_PATTERN = f"^{_SPACE}\\{{{_SPACE}(?:{_PAIR}(?:,{_SPACE}{_PAIR})*)?\\}}{_SPACE}$"


KINDS_READ = ("request", "response", "chunk", "event", "comment", "disconnect", "episode")
"""The kinds of row replay reads: the exchanges (with their SSE items and cuts) and the episodes."""
ENCODED = [name for name in COLUMNS if name in DICTIONARY_READ]
"""The columns replay reads dictionary-encoded: the string columns the recorder writes so (``run_id``, ``kind``,
``session_id``, ``method``, ``url``, ``headers``, ``event``, ...), a few values repeated row after row."""


def _columns(trace: Trace) -> pa.Table:
    """The columns replay reads, the one place it reads a trace: only those columns and only the rows of
    ``KINDS_READ`` come from the file, and the ``ENCODED`` columns as the file holds them, dictionary-encoded
    (decoding every value to a string, and checking it, took most of the load); those read plain (the parts of
    an unfinished trace, a trace read whole) are encoded here. One dictionary a column for the whole trace."""
    pieces = list(trace._scan(COLUMNS, KINDS_READ, ENCODED))
    table = pa.concat_tables(pieces) if pieces else pa.schema([SCHEMA.field(name) for name in COLUMNS]).empty_table()
    for name in ENCODED:
        if not pa.types.is_dictionary(table.schema.field(name).type):
            table = table.set_column(table.schema.get_field_index(name), name, pc.dictionary_encode(table[name]))
    return table.unify_dictionaries()


@dataclass(slots=True)
class Item:
    """One SSE event or comment as it went out."""

    kind: str  # "event" or "comment"
    event: str = ""
    data: str = ""
    sse_id: str | None = None
    retry_ms: int | None = None
    comment: str = ""
    seq: int = 0

    def wire(self, data: str | None = None) -> bytes:
        """The item framed as both reference servers frame it (CRLF line ends)."""
        if self.kind == "comment":
            return f":{self.comment}\r\n\r\n".encode()
        lines = [f"event: {self.event}"]
        if self.sse_id:
            lines.append(f"id: {self.sse_id}")
        if self.retry_ms is not None:
            lines.append(f"retry: {self.retry_ms}")
        lines.extend(f"data: {line}" for line in (self.data if data is None else data).split("\n"))
        return ("\r\n".join(lines) + "\r\n\r\n").encode()


@dataclass(slots=True)
class Exchange:
    """One recorded request and what answered it."""

    exchange: int
    seq: int
    session_id: str | None
    method: str
    path: str
    body: bytes
    call: int | None = None
    attempt: int | None = None
    tool: str | None = None
    tool_input: Any = None
    task_id_sent: str | None = None
    request_ns: int = 0
    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    response_body: bytes | None = None
    head_ns: int = 0
    chunks: list[tuple[int, list[Item]]] = field(default_factory=list)
    played: int = 0
    row: int = field(default=-1, compare=False, repr=False)  # its place in the ``Recording``

    @property
    def sse(self) -> bool:
        return any(k == "content-type" and v.startswith("text/event-stream") for k, v in self.headers)

    @property
    def items(self) -> list[Item]:
        return [item for _, items in self.chunks for item in items]

    @property
    def task_id(self) -> str | None:
        """The server-made task id this stream announced."""
        return next((i.data for i in self.items if i.kind == "event" and i.event == "task_id"), None)

    @property
    def complete(self) -> bool:
        """True when the stream reached ``end`` or ``error`` (or when it was not a stream)."""
        if not self.sse:
            return True
        return any(i.kind == "event" and i.event in ("end", "error") for i in self.items)

    def describe(self) -> str:
        what = f"{self.method} {self.path}"
        if self.tool is not None:
            what += f" {self.tool}({json.dumps(self.tool_input, separators=(',', ':'))})"
        where = f"session {self.session_id}" if self.session_id else "no session"
        return f"#{self.exchange} {what} [{where}, seq {self.seq}]"


class Recording:
    """The exchanges of a trace, indexed: sessions (recorded id → exchanges in order) and stateless ones.

    ``agent=False`` takes the ORS exchanges; ``agent=True`` the agent's own (its LLM's, layer ``agent``).
    Rows are numbered session by session (sessions in the order of their first request), each
    session's exchanges in ``seq`` order, then the exchanges without a session; ``ordered`` lists
    the rows in ``seq`` order. ``session(code)`` and ``exchange(row)`` make the ``Exchange`` objects.
    """

    def __init__(self, trace: Trace, *, agent: bool = False) -> None:
        self.name = str(trace.path)
        columns = _columns(trace)
        self._episodes = _episode_rows(columns)
        self.broken = _broken(columns) if agent else {}
        """The agent's exchanges that broke when recorded: request seq -> the recorded transport error."""
        index = _Index(self.name, columns, _exchange_rows(columns, agent))
        if len(trace) and not index.table.num_rows and not agent:
            raise TraceFormatError(f"{self.name} records no HTTP exchanges to replay (no exchange numbers)")
        self._table, self._items, self._item_starts = index.table, index.items, index.item_starts
        self._rows, self._item_rows = _Rows(index.table), _Rows(index.items)
        self.session_ids: pa.Array = index.session_ids
        """The recorded session ids, by session code."""
        self._session_starts = index.session_starts
        self.ordered: np.ndarray = index.ordered
        """The rows in ``seq`` order."""
        self.rank = np.empty(len(index.ordered), np.int64)
        """Each row's place in ``seq`` order."""
        self.rank[index.ordered] = np.arange(len(index.ordered))
        self._names: tuple[list[str | None], list[str]] = ([], [])
        self.stateless = range(int(index.session_starts[-1]), index.table.num_rows)
        """The rows of the exchanges without a session, in ``seq`` order."""
        self.create_codes, self.create_rows = index.create_codes, index.create_rows
        """Each session's first ``/create``: its session code and row, in session order."""
        self._made: dict[int, Exchange] = {}
        self._codes: dict[str, int] | None = None

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def exchange(self, row: int) -> Exchange:
        """The exchange at ``row``, made once (it keeps its ``played`` count)."""
        made = self._made.get(row)
        if made is None:
            made = self._made[row] = self._make(row, row + 1)[0]
        return made

    def session(self, code: int) -> list[Exchange]:
        """The exchanges of session ``code``, in order."""
        start, end = int(self._session_starts[code]), int(self._session_starts[code + 1])
        if all(row in self._made for row in (start, end - 1)):
            return [self.exchange(row) for row in range(start, end)]
        for made in self._make(start, end):
            self._made.setdefault(made.row, made)
        return [self._made[row] for row in range(start, end)]

    def code(self, session_id: str) -> int | None:
        """The session code of a recorded session id (None if the trace holds no such session)."""
        if self._codes is None:
            self._codes = {sid: code for code, sid in enumerate(self.session_ids.to_pylist())}
        return self._codes.get(session_id)

    def played(self, row: int) -> bool:
        made = self._made.get(row)
        return made is not None and made.played > 0

    def peek(self, row: int) -> Exchange:
        """The exchange at ``row`` without keeping it (for describing what was never played)."""
        return self._made.get(row) or self._make(row, row + 1)[0]

    def requests(self, rows: list[int]) -> list[tuple[str, str, bytes]]:
        """(method, path, body) of some rows, without making exchanges."""
        part = self._table.select(["method", "path", "body"]).take(pa.array(rows, pa.int64()))
        return [(m or "GET", p, b or b"") for m, p, b in zip(*(c.to_pylist() for c in part.columns), strict=True)]

    def pairs(self, rows: range) -> set[tuple[str, str]]:
        """The (method, path) pairs of consecutive rows."""
        pair = self._pairs()[rows.start : rows.stop]
        return {self._pair(int(p)) for p in np.unique(pair)}

    def rows_of(self, wanted: Callable[[str, str], bool]) -> list[int]:
        """The rows whose (method, path) is ``wanted``, in ``seq`` order: decided once per distinct pair."""
        pair = self._pairs()
        chosen = [p for p in np.unique(pair).tolist() if wanted(*self._pair(p))]
        rows = np.flatnonzero(np.isin(pair, chosen))
        return [int(row) for row in rows[np.argsort(self.rank[rows], kind="stable")]]

    def _pairs(self) -> np.ndarray:
        """Each row's (method, path) as one number (``_pair`` names it)."""
        method, path = (self._table[name].combine_chunks() for name in ("method", "path"))
        methods = np.asarray(method.indices.fill_null(len(method.dictionary)).to_numpy(zero_copy_only=False), np.int64)
        paths = np.asarray(path.indices.to_numpy(zero_copy_only=False), np.int64)
        self._names = (method.dictionary.to_pylist(), path.dictionary.to_pylist())
        return methods * len(self._names[1]) + paths

    def _pair(self, pair: int) -> tuple[str, str]:
        methods, paths = self._names
        method = methods[pair // len(paths)] if pair // len(paths) < len(methods) else None
        return method or "GET", paths[pair % len(paths)]

    def bodies(self, rows: list[int]) -> list[bytes]:
        """The request bodies of some rows, without making exchanges."""
        taken = self._table["body"].take(pa.array(rows, pa.int64())).to_pylist()
        return [body or b"" for body in taken]

    def distinct_bodies(self, rows: np.ndarray) -> tuple[list[bytes], np.ndarray]:
        """The distinct request bodies of some rows, in the order they first appear, and each row's place among
        them: what many rows share is read (and parsed) once."""
        taken = pc.fill_null(self._table["body"].chunk(0).take(pa.array(rows, pa.int64())), b"")
        encoded = pc.dictionary_encode(taken)
        return encoded.dictionary.to_pylist(), np.asarray(encoded.indices.to_numpy(zero_copy_only=False), np.int64)

    def unplayed(self, skip: tuple[str, ...] = ()) -> list[str]:
        """The exchanges never played, described, in ``seq`` order (those on ``skip`` paths left out);
        made a block at a time and let go."""
        described: dict[int, str] = {}
        for start in range(0, len(self), 4096):
            for made in self._make(start, min(len(self), start + 4096)):
                exchange = self._made.get(made.row, made)
                if not exchange.played and exchange.path not in skip:
                    described[made.row] = exchange.describe()
        return [described[row] for row in self.ordered.tolist() if row in described]

    def episodes(self) -> list[tuple[EpisodeKey, str]]:
        """The trace's ``episode`` rows: (environment, split, task index, rollout) and session id, in order."""
        return recorded_episodes(self._episodes)

    def _make(self, start: int, end: int) -> list[Exchange]:
        """The exchanges of rows ``start`` to ``end``, made from the tables (not kept)."""
        rows = self._rows(start, end - start)
        bounds = [int(n) for n in self._item_starts[start : end + 1]]
        items = self._item_rows(bounds[0], bounds[-1] - bounds[0])
        made = []
        for offset, row in enumerate(rows):
            exchange = _exchange_of(row, start + offset, self.session_ids)
            if row["status"] is not None:
                exchange.headers = _headers(self.name, row["seq"], row["headers"])
            exchange.chunks = _chunks(items[bounds[offset] - bounds[0] : bounds[offset + 1] - bounds[0]])
            made.append(exchange)
        return made


class _Index:
    """The arrays a ``Recording`` keeps, built with Arrow and numpy from the trace's columns and the
    places of its exchange rows (``selected``); the columns are only taken from at the end, by place."""

    def __init__(self, name: str, columns: pa.Table, selected: np.ndarray) -> None:
        kind = _codes(columns["kind"], selected, KINDS)
        # the rows of one exchange, grouped by (run, exchange number) in table order: numbers are unique
        # within one recording process only, and a resumed (appended) trace holds several runs
        run = _codes(columns["run_id"], selected)
        number = _numbers(columns["exchange"], selected)
        order = _grouping(run, number)
        kind, run, number = kind[order], run[order], number[order]
        source = selected[order]  # sorted place -> place in the trace

        def rows(names: list[str], places: np.ndarray, missing: np.ndarray | None = None) -> dict[str, pa.Array]:
            return {name: _take(columns[name], source[places], missing) for name in names}

        position = np.arange(len(kind))
        starts = np.flatnonzero(np.r_[True, (run[1:] != run[:-1]) | (number[1:] != number[:-1])][: len(kind)])
        group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(kind)]))
        # an exchange begins at its (last) request row: rows before it have no exchange to join
        request = _last_per_group(group, kind == REQUEST, len(starts))
        since = request[group]
        kept = (since >= 0) & (position >= since)
        response = _last_per_group(group, kept & (kind == RESPONSE), len(starts))
        has = request >= 0
        request, response = request[has], response[has]
        seq, t_ns = _numbers(columns["seq"], source), _numbers(columns["t_ns"], source)
        # exchanges in seq order (ties: table order); sessions numbered by their first exchange
        by_seq = np.lexsort((source[request], seq[request]))
        request, response = request[by_seq], response[by_seq]
        rank_of_group = np.full(len(starts), -1)
        rank_of_group[np.flatnonzero(has)[by_seq]] = np.arange(len(request))
        sessions = _take(columns["session_id"], source[request])  # its dictionary: in order of first exchange
        self.session_ids: pa.Array = sessions.dictionary
        code = sessions.indices.fill_null(len(self.session_ids)).to_numpy(zero_copy_only=False).astype(np.int64)
        placed = np.lexsort((np.arange(len(code)), code))  # row -> the seq rank of its exchange
        self.ordered = np.empty(len(code), np.int64)  # seq rank -> row
        self.ordered[placed] = np.arange(len(code))
        self.session_starts = np.searchsorted(code[placed], np.arange(len(self.session_ids) + 1))
        request, response, code = request[placed], response[placed], code[placed]  # now in row order
        asked = rows(["exchange", "seq", "method", "url", "body", "call", "attempt", "t_ns"], request)
        answered = response >= 0
        answers = rows(["seq", "status", "headers", "body"], response, ~answered)
        _check_headers(name, answers["headers"].filter(pa.array(answered)), answers["seq"].filter(pa.array(answered)))
        self.table = pa.table({
            "exchange": asked["exchange"], "seq": asked["seq"], "session": pa.array(code, pa.int64()),
            "method": asked["method"], "path": _paths(asked["url"]),
            "body": asked["body"], "call": asked["call"], "attempt": asked["attempt"], "request_ns": asked["t_ns"],
            "status": answers["status"], "headers": answers["headers"], "response_body": answers["body"],
            "head_ns": pa.array(np.where(answered, t_ns[np.where(answered, response, 0)], 0), pa.int64()),
        })  # fmt: skip
        # items: chunk, event and comment rows after their request, timed from the response head before them
        is_item = kept & ((kind == CHUNK) | (kind == EVENT) | (kind == COMMENT))
        last_response = np.maximum.accumulate(np.where(kept & (kind == RESPONSE), position, -1)) if len(kind) else kind
        head_at = np.where(last_response >= since, t_ns[np.maximum(last_response, 0)], 0) if len(kind) else t_ns
        item_row = self.ordered[rank_of_group[group[is_item]]]
        item_order = np.argsort(item_row, kind="stable")
        picked = np.flatnonzero(is_item)[item_order]
        said = rows(["event", "data", "sse_id", "retry_ms", "comment", "seq"], picked)
        self.items = pa.table({
            "kind": pa.array(kind[picked], pa.int8()), "offset_ns": pa.array((t_ns - head_at)[picked], pa.int64()),
            "event": said["event"], "data": said["data"],
            "sse_id": said["sse_id"], "retry_ms": said["retry_ms"], "comment": said["comment"], "seq": said["seq"],
        })  # fmt: skip
        self.item_starts = np.searchsorted(item_row[item_order], np.arange(len(code) + 1))
        self.create_codes, self.create_rows = _creates(self.table, self.session_starts)


EpisodeKey = tuple[str, str | None, int | None, int]
"""An episode's environment, split, task index and rollout."""


def recorded_episodes(table: pa.Table) -> list[tuple[EpisodeKey, str]]:
    """Every ``episode`` row's (environment, split, task index, rollout) and session id, in the order written."""
    rows = table.filter(pc.and_(pc.equal(table["kind"], "episode"), pc.equal(table["layer"], "agent")))
    columns = rows.select(["environment", "split", "task_index", "rollout", "session_id"]).to_pylist()
    return [((r["environment"], r["split"], r["task_index"], r["rollout"]), r["session_id"]) for r in columns]


def matches(recorded: Any, live: Any) -> bool:
    """True when a live request's JSON value is the one recorded, a recorded ``"<redacted>"`` standing
    for any value but null (the recorder redacts secrets by key: the live request sends them)."""
    if recorded == REDACTED and isinstance(live, str | int | float | dict | list) and not isinstance(live, bool):
        return True
    if isinstance(recorded, dict) and isinstance(live, dict):
        return recorded.keys() == live.keys() and all(matches(recorded[k], live[k]) for k in recorded)
    if isinstance(recorded, list) and isinstance(live, list):
        return len(recorded) == len(live) and all(matches(r, v) for r, v in zip(recorded, live, strict=True))
    return bool(recorded == live)


def give_back() -> None:
    """Return the memory a trace and an index's scratch arrays took to the system, once they are let go: Arrow's
    pool keeps freed pages, and so does glibc's heap (numpy's scratch arrays), until asked."""
    pa.default_memory_pool().release_unused()
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)


def _take(column: pa.ChunkedArray, places: np.ndarray, missing: np.ndarray | None = None) -> pa.Array:
    """``column[places]`` (null where ``missing``), in ``KEEP``'s memory (Arrow takes from the column's chunks
    where they lie); a dictionary column's values with a dictionary of their own (``_compacted``)."""
    array = _at(column, places, missing, KEEP)
    return _compacted(array) if isinstance(array, pa.DictionaryArray) else array


def _at(column: pa.ChunkedArray, places: np.ndarray, missing: np.ndarray | None = None,
        pool: pa.MemoryPool | None = None) -> pa.Array:  # fmt: skip
    """``column[places]`` as one array (null where ``missing``)."""
    taken = pc.take(column, pa.array(places, pa.int64(), mask=missing), memory_pool=pool)
    return taken.chunk(0) if taken.num_chunks == 1 else taken.combine_chunks(memory_pool=pool)


def _compacted(array: pa.DictionaryArray) -> pa.DictionaryArray:
    """``array`` with a dictionary of the values it holds only, in the order they first appear, in ``KEEP``'s
    memory (the column's dictionary holds the values of every row read, and lives in the pool given back)."""
    used = pc.unique(array.indices).drop_null()
    indices = pc.index_in(array.indices, value_set=used, memory_pool=KEEP)
    return pa.DictionaryArray.from_arrays(indices, pc.take(array.dictionary, used, memory_pool=KEEP))


def _grouping(run: np.ndarray, number: np.ndarray) -> np.ndarray:
    """The order that groups rows by (run, exchange number), keeping table order within a group."""
    if len(number) and number.min() >= 0 and number.max() < 1 << 40 and run.max() < 1 << 22:
        return np.argsort((run << 40) | number, kind="stable")  # one key sorts faster than three
    return np.lexsort((number, run))  # stable too


def _exchange_rows(columns: pa.Table, agent: bool) -> np.ndarray:
    """The places of the rows of the ORS exchanges (or the agent's) in the trace."""
    is_agent = pc.fill_null(pc.equal(columns["layer"], "agent"), False)
    layer = is_agent if agent else pc.invert(is_agent)
    wanted = pc.and_(pc.is_valid(columns["exchange"]), layer)
    return np.flatnonzero(np.asarray(wanted.to_numpy(zero_copy_only=False), bool))


def _numbers(column: pa.ChunkedArray, places: np.ndarray) -> np.ndarray:
    """An integer column's values at ``places``, as int64 numbers, null as -1."""
    return np.asarray(_at(column, places).fill_null(-1).to_numpy(zero_copy_only=False), np.int64)


def _episode_rows(columns: pa.Table) -> pa.Table:
    """The ``episode`` rows, with the columns ``recorded_episodes`` reads (their values only: not the whole
    trace's dictionaries)."""
    rows = columns.filter(pc.and_(pc.equal(columns["kind"], "episode"), pc.equal(columns["layer"], "agent")))
    rows = rows.select(["kind", "layer", "environment", "split", "task_index", "rollout", "session_id"])
    return pa.table({name: pc.dictionary_decode(column) if pa.types.is_dictionary(column.type) else column
                     for name, column in zip(rows.column_names, rows.columns, strict=True)})  # fmt: skip


def _broken(columns: pa.Table) -> dict[int, str]:
    """The agent exchanges whose request or stream broke when recorded: request seq -> the recorded error."""
    rows = columns.filter(
        pc.and_(pc.equal(columns["layer"], "agent"), pc.is_in(columns["kind"], pa.array(["request", "disconnect"])))
    ).select(["run_id", "exchange", "kind", "seq", "error"])
    requests: dict[tuple[str, int], int] = {}
    broken: dict[int, str] = {}
    for row in rows.to_pylist():  # exchange numbers repeat across the runs of a resumed trace
        key = (row["run_id"], row["exchange"])
        if row["kind"] == "request":
            requests[key] = row["seq"]
        elif key in requests:
            broken[requests[key]] = row["error"] or ""
    return broken


def _codes(column: pa.ChunkedArray, places: np.ndarray, values: list[str] | None = None) -> np.ndarray:
    """The place of each value at ``places`` of a dictionary column in ``values`` (None: in the column's
    dictionary), -1 for null or absent: the dictionary is matched, and the rows take from it."""
    taken = _at(column, places)
    found = taken.indices
    if values is not None:
        found = pc.take(pc.index_in(taken.dictionary, value_set=pa.array(values, pa.string())), found)
    return np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)


def _last_per_group(group: np.ndarray, where: np.ndarray, groups: int) -> np.ndarray:
    """For each group, the last position where ``where`` holds (groups are runs of ``group``), else -1."""
    last = np.full(groups, -1)
    positions = np.flatnonzero(where)
    last[group[positions]] = positions  # positions ascend: the last assignment to a group wins
    return last


def _paths(urls: pa.DictionaryArray) -> pa.DictionaryArray:
    """The path of each URL, computed once per distinct URL."""
    paths = [urlsplit(url or "/").path for url in urls.dictionary.to_pylist()]
    indices = pc.coalesce(urls.indices, pa.scalar(len(paths), urls.indices.type), memory_pool=KEEP)
    return pa.DictionaryArray.from_arrays(indices, pa.array([*paths, "/"], pa.string()))


def _check_headers(name: str, texts: pa.DictionaryArray, seqs: pa.Array) -> None:
    """``TraceFormatError`` for a response whose headers are not a JSON object of texts: RE2 passes most, the
    rest are parsed in Python, in the order they first appear (``texts`` is ``_compacted``)."""
    distinct = texts.dictionary  # responses share most of their headers: each text is checked once
    plain = pc.or_(pc.equal(distinct, ""), pc.match_substring_regex(distinct, HEADERS_PATTERN))
    for code in np.flatnonzero(~np.asarray(plain.to_numpy(zero_copy_only=False), bool)).tolist():
        first = pc.index(texts.indices, code).as_py()  # the response to name, should it be bad
        _headers(name, seqs[first].as_py(), distinct[code].as_py())


def _creates(table: pa.Table, session_starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each session's first ``/create``: the session codes and the rows."""
    rows = np.flatnonzero(pc.equal(table["path"], "/create").to_numpy(zero_copy_only=False))
    rows = rows[rows < session_starts[-1]]
    codes = table["session"].to_numpy()[rows]
    codes, first = np.unique(codes, return_index=True)
    return codes, rows[first]


def _headers(name: str, seq: int, text: str | None) -> list[tuple[str, str]]:
    """A response's headers, as (name, value) pairs; ``TraceFormatError`` for what is not a JSON object of texts."""
    try:
        value = json.loads(text or "{}")
    except ValueError as exc:
        raise TraceFormatError(f"{name}: the response at seq {seq} has headers that are not JSON: {exc}") from exc
    if not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
        raise TraceFormatError(
            f"{name}: the response at seq {seq} has headers that are not a JSON object of texts: {value!r:.80}"
        )
    return list(value.items())


class _Rows:
    """Rows of a one-chunk table as dicts, column by column (``Table.slice(...).to_pylist()`` costs 10x more).

    A dictionary column is read as its indices and its values, decoded once per column: pyarrow makes
    each row of a dictionary array a scalar of its own (about 2.3 µs a row, against 0.3).
    """

    def __init__(self, table: pa.Table) -> None:
        self._table = table
        self._names = table.column_names
        self._values: dict[int, list[Any]] = {}

    def __call__(self, start: int, count: int) -> list[dict[str, Any]]:
        if not count:
            return []
        columns = [
            self._column(n, self._table[name].chunk(0).slice(start, count)) for n, name in enumerate(self._names)
        ]
        return [dict(zip(self._names, row, strict=True)) for row in zip(*columns, strict=True)]

    def _column(self, n: int, part: pa.Array) -> list[Any]:
        if not isinstance(part, pa.DictionaryArray):
            plain: list[Any] = part.to_pylist()
            return plain
        values = self._values.get(n)
        if values is None:
            values = self._values[n] = part.dictionary.to_pylist()
        return [None if index is None else values[index] for index in part.indices.to_pylist()]


def _exchange_of(row: dict[str, Any], place: int, session_ids: pa.Array) -> Exchange:
    code = row["session"]
    body = row["body"] or b""
    exchange = Exchange(
        exchange=row["exchange"],
        seq=row["seq"],
        session_id=session_ids[code].as_py() if code < len(session_ids) else None,
        method=row["method"] or "GET",
        path=row["path"],
        body=body,
        call=row["call"],
        attempt=row["attempt"],
        request_ns=row["request_ns"],
        status=row["status"],
        response_body=row["response_body"],
        head_ns=row["head_ns"],
        row=place,
    )
    if exchange.path.endswith("/call"):
        parsed = _json(body)
        exchange.tool = parsed.get("name")
        exchange.tool_input = parsed.get("input")
        exchange.task_id_sent = parsed.get("task_id")
    return exchange


def _chunks(rows: list[dict[str, Any]]) -> list[tuple[int, list[Item]]]:
    """An exchange's item rows as the chunks that delivered them (an item before any chunk opens one)."""
    chunks: list[tuple[int, list[Item]]] = []
    current: list[Item] | None = None
    for row in rows:
        if row["kind"] == CHUNK or current is None:
            current = []
            chunks.append((row["offset_ns"], current))
        if row["kind"] != CHUNK:
            current.append(Item(kind=KINDS[row["kind"]], event=row["event"] or "", data=row["data"] or "",
                                sse_id=row["sse_id"], retry_ms=row["retry_ms"], comment=row["comment"] or "",
                                seq=row["seq"]))  # fmt: skip
    return chunks


def _json(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
