"""The recorder: every event the client (or the proxy) sees becomes one row of a Parquet trace.

How a trace is written, and why it survives a crash:

- ``emit`` stamps the event (sequence number, monotonic nanoseconds since the run began), works
  out its context and redacts it (``_enrich``: the session's task and the call's tool filled in,
  secrets out of its URL, headers and body, into per-column lists) while the row is still in the
  CPU's cache, and queues it. Every ``CONVERT_ROWS`` rows, the ``emit`` call that fills the queue
  turns the queued rows into an Arrow table. Both happen in the emitting thread, not in a thread
  of their own: they need the GIL either way, and as a third busy thread (beside the client's and
  the server's) the work had the server preempted 40-150 times a second instead of 5-15 on a
  two-core machine (see bench/README.md).
- Every ``flush_interval`` seconds (0.5 s by default), whenever ``part_rows`` rows are waiting,
  and when ``flush()`` asks, the writer thread converts what is still queued and writes all the
  converted rows as a new Arrow IPC file ``PATH.parts/part-NNNNNNNNN.arrow``: it writes a hidden
  temporary file and renames it into place, so a part is either whole or absent. A part is the
  table as it is in memory, neither encoded nor compressed: a quarter of the CPU of a Parquet part.
  A process killed at any moment therefore leaves every event recorded up to about one second
  before the kill readable (``load_trace`` reads the parts; ``Recorder(PATH, append=True).close()``
  compacts them).
- ``close()`` compacts the parts, in order, into the single Parquet file ``PATH`` and removes them.
- Memory stays bounded: when ``2 * part_rows`` rows are waiting (queued or converted but not yet
  written), ``emit`` waits for the writer.
- Rows are enriched in the order they are emitted (under the lock) and converted in that order,
  one conversion at a time (``_converting``), whichever thread does it.

``load_trace(PATH)`` reads the compacted file, or, after a crash, the parts (``partial=True``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx2
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ors_lab.recording.redact import Redactor, is_create_url
from ors_lab.recording.schema import (
    KIND_LAYER,
    METADATA_CREATED,
    METADATA_PARTIAL,
    METADATA_RUN_ID,
    METADATA_SCHEMA_VERSION,
    METADATA_SERVERS,
    METADATA_VERSION,
    SCHEMA,
    SCHEMA_VERSION,
)

__all__ = ["Recorder", "parts_dir", "read_part"]

PART_GLOB = "part-*"  # part-NNNNNNNNN.arrow, and .parquet: a compacted trace appended to
PART = ".arrow"
SESSION_COLUMNS = ("environment", "split", "task_index", "task")
COMPACT_ROWS = 16_384
CONVERT_ROWS = 1_024  # emit converts this many queued rows at a time: about 5 ms of the emitting thread
BODIES = 1_024  # request bodies kept with what they name: a run sends the same few /create and /call bodies again
HEADER_ITEMS = 4_096  # redacted header items kept: a client sends the same few headers again and again

ENRICHED = ("layer", *SESSION_COLUMNS, "tool", "input", "url", "headers", "body")
"""The columns ``emit`` works out row by row (``_enrich``): layer, context, redaction, JSON text."""
STAMPED = ("run_id", "wall")
"""The columns a conversion computes for a whole slice of rows at once."""
PLAIN = pa.schema([field for field in SCHEMA if field.name not in ENRICHED and field.name not in STAMPED])
"""The columns that go to Arrow as emitted (``seq``, ``t_ns`` and ``kind`` are stamped by ``emit``)."""
PLAIN_ROW = pa.struct(list(PLAIN))
ENRICHED_FIELDS = [SCHEMA.field(name) for name in ENRICHED]
WALL = SCHEMA.field("wall").type
NO_CONTEXT: tuple[Any, ...] = (None,) * len(SESSION_COLUMNS)
NO_CALL: tuple[str | None, str | None] = (None, None)
IPC_OPTIONS = pa.ipc.IpcWriteOptions(use_threads=False)  # no pool threads taking the cores from the client
_monotonic_ns = time.monotonic_ns  # emit runs per event: one global lookup, not a global and an attribute


def parts_dir(path: Path) -> Path:
    """Where the parts of the trace at ``path`` live while it is being written."""
    return path.with_name(path.name + ".parts")


def read_part(path: Path, columns: list[str] | None = None) -> pa.Table:
    """One part of an unfinished trace (an Arrow IPC ``.arrow`` file, or a ``.parquet`` one), as written."""
    if path.suffix == PART:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()  # memory-mapped: selecting columns copies nothing
        return table if columns is None else table.select(columns)
    return pq.read_table(path, columns=columns)  # a compacted trace appended to can be large: read only these


def _part_schema(path: Path) -> pa.Schema:
    if path.suffix == PART:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_file(source).schema
    return pq.read_schema(path)


def part_format(path: Path) -> str:
    """The file format of a part, by its name, for messages."""
    return "Arrow IPC" if path.suffix == PART else "Parquet"


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)  # json.dumps makes one per call


def _json(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return _ENCODER.encode(value)


class Recorder:
    """Records events into the Parquet trace at ``path``; pass it as ``Client(url, recorder=rec)``.

    ``with Recorder("recordings/run.parquet") as rec:`` (or ``async with``) closes and compacts it
    at the end. ``redact_headers`` and ``redact_patterns`` add to the default redactions.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        run_id: str | None = None,
        redact_headers: Iterable[str] = (),
        redact_patterns: Iterable[str] = (),
        flush_interval: float = 0.5,
        part_rows: int = 8_192,
        compression: str = "zstd",
        overwrite: bool = False,
        append: bool = False,
    ) -> None:
        self.path = Path(path)
        self.parts = parts_dir(self.path)
        if append and overwrite:
            raise ValueError("append=True adds to a trace and overwrite=True replaces it: choose one")
        if not (overwrite or append) and (self.path.exists() or self.parts.exists()):
            raise FileExistsError(
                f"{self.path} already holds a trace; pass append=True to add to it, overwrite=True to replace it, "
                "or choose another path"
            )
        if overwrite:
            self.path.unlink(missing_ok=True)
            shutil.rmtree(self.parts, ignore_errors=True)
        first_part, first_seq, first_ns, servers = _reopen(self.path, self.parts) if append else (0, 0, 0, set())
        self.parts.mkdir(parents=True, exist_ok=append)
        self.run_id = run_id or uuid.uuid4().hex
        self.redactor = Redactor(redact_headers, redact_patterns)
        self.flush_interval = flush_interval
        self.part_rows = part_rows
        self.compression = compression
        self.created = dt.datetime.now(dt.UTC)
        # t_ns goes on from where an appended trace stopped, so it never runs backwards in one file
        self._t0 = time.monotonic_ns() - first_ns
        self._wall0_us = time.time_ns() // 1000 - first_ns // 1000
        self._next_seq = first_seq  # the seq of the next row emit takes
        self._written_seq = first_seq  # every row before this seq is in a part on disk
        self._flushers = 0  # flush() calls waiting: the writer writes what is queued now
        self._queue: list[dict[str, Any]] = []  # emitted, not yet converted
        self._enriched: list[list[Any]] = [[] for _ in ENRICHED]  # the queued rows' ENRICHED columns
        self._tables: list[pa.Table] = []  # converted, not yet written
        self._table_rows = 0  # rows in self._tables
        self._lock = threading.Lock()  # emit takes it directly: cheaper than entering the Condition
        self._cond = threading.Condition(self._lock)
        self._converting = threading.Lock()  # one conversion at a time, in emit order
        self._closing = False
        self._closed = False
        self._error: BaseException | None = None
        self._part_index = first_part
        self._servers: set[str] = servers
        self._sessions: dict[str, tuple[Any, ...]] = {}  # session id -> its SESSION_COLUMNS values
        self._urls: dict[str, tuple[str, bool]] = {}  # URL -> redacted, is a /create: a run asks the same few URLs
        self._calls: dict[str | None, dict[int, tuple[str | None, str | None]]] = {}  # session -> call -> tool, input
        # an httpx2 header item (raw name, lower-case name, value) -> (its name, its JSON member), redacted
        self._header_items: dict[tuple[bytes, ...], tuple[str, str]] = {}
        self._bodies: dict[tuple[Any, bytes | None], tuple[Any, ...]] = {}  # (parser, request body) -> parsed
        self._writer = threading.Thread(target=self._run_writer, name="ors-lab-recorder", daemon=True)
        self._writer.start()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "recording"
        return f"Recorder({str(self.path)!r}, run_id={self.run_id!r}, {state})"

    # -- the hot path ----------------------------------------------------------------------------

    def emit(self, kind: str, /, **fields: Any) -> None:
        """Record one event now. ``fields`` are column values (see docs/trace-format.md)."""
        fields["t_ns"] = _monotonic_ns() - self._t0
        fields["kind"] = kind
        with self._lock:
            if self._closing:  # set before _closed, and never unset
                raise RuntimeError(f"{self!r} is closed")
            self._enrich(fields)  # raises for a row it cannot record, before the row takes a seq
            fields["seq"] = self._next_seq
            self._next_seq += 1
            queue = self._queue
            queue.append(fields)
            full = len(queue) >= CONVERT_ROWS
            if full and len(queue) + self._table_rows >= 2 * self.part_rows:
                self._cond.notify_all()
                while len(self._queue) + self._table_rows >= 2 * self.part_rows and self._error is None:
                    self._cond.wait(0.1)  # the writer is behind: wait, so memory stays bounded
        # another thread converting: it, or the writer, takes these rows too
        if full and self._converting.acquire(blocking=False):
            try:
                self._convert()
            except BaseException as exc:
                self._fail(exc)
            finally:
                self._converting.release()
        if self._error is not None:
            raise RuntimeError(f"the trace writer failed: {self._error!r}") from self._error

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every event emitted so far is in a part on disk, where ``load_trace`` reads it.

        Raises ``TimeoutError`` after ``timeout`` seconds, and the writer's error if it failed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._next_seq
            self._flushers += 1
            self._cond.notify_all()
            try:
                while self._written_seq < target and self._error is None:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(
                            f"{self!r}: the events emitted before flush() are not written after {timeout:g} s"
                        )
                    self._cond.wait(remaining)
            finally:
                self._flushers -= 1
        if self._error is not None:
            raise RuntimeError(f"the trace writer failed: {self._error!r}") from self._error

    # -- the writer thread -----------------------------------------------------------------------

    def _run_writer(self) -> None:
        """Write a part every ``flush_interval`` seconds (sooner when ``part_rows`` rows wait, or flush asks)."""
        try:
            last = time.monotonic()
            while True:
                with self._cond:
                    while not self._closing and len(self._queue) + self._table_rows < self.part_rows:
                        remaining = last + self.flush_interval - time.monotonic()
                        if (self._queue or self._tables) and (remaining <= 0 or self._flushers):
                            break
                        self._cond.wait(remaining if remaining > 0 else self.flush_interval)
                    done = self._closing  # emit refuses rows from now on: what is queued is all there is
                tables, metadata = self._take_tables()
                if tables:
                    written = self._write_part(tables, metadata)
                    last = time.monotonic()
                    with self._cond:
                        self._written_seq = written
                        self._cond.notify_all()
                if done:
                    return
        except BaseException as exc:  # surfaced by the next emit() and by close()
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        with self._cond:
            self._cond.notify_all()

    def _take_tables(self) -> tuple[list[pa.Table], dict[bytes, bytes]]:
        """Convert what is queued, and take every converted table with the metadata for their part."""
        with self._converting:
            self._convert()
            with self._lock:
                tables, self._tables, self._table_rows = self._tables, [], 0
                metadata = self._metadata(partial=True)  # the servers seen so far (emit adds to them)
                self._cond.notify_all()
        return tables, metadata

    def _convert(self) -> None:
        """Convert every queued row and add the table to those the writer writes next (hold ``_converting``)."""
        with self._lock:
            rows, self._queue = self._queue, []
            enriched, self._enriched = self._enriched, [[] for _ in ENRICHED]
        if not rows:
            return
        table = self._table(rows, enriched)
        with self._lock:
            self._tables.append(table)
            self._table_rows += len(rows)
            if self._table_rows >= self.part_rows:
                self._cond.notify_all()

    def _write_part(self, tables: list[pa.Table], metadata: dict[bytes, bytes]) -> int:
        """Write ``tables`` as the next part; return the seq after their last row."""
        table = pa.concat_tables(tables).replace_schema_metadata(metadata)
        name = f"part-{self._part_index:09d}{PART}"
        self._part_index += 1
        tmp = self.parts / f".{name}.tmp"
        with pa.ipc.new_file(tmp, table.schema, options=IPC_OPTIONS) as writer:
            writer.write_table(table)
        os.replace(tmp, self.parts / name)
        return int(table["seq"][-1].as_py()) + 1

    def _metadata(self, partial: bool) -> dict[bytes, bytes]:
        from ors_lab import __version__

        return {
            METADATA_SCHEMA_VERSION: SCHEMA_VERSION.encode(),
            METADATA_VERSION: __version__.encode(),
            METADATA_CREATED: self.created.isoformat().encode(),
            METADATA_RUN_ID: self.run_id.encode(),
            METADATA_SERVERS: json.dumps(sorted(self._servers)).encode(),
            METADATA_PARTIAL: b"true" if partial else b"false",
        }

    def _table(self, rows: list[dict[str, Any]], enriched: list[list[Any]]) -> pa.Table:
        """Rows and their ENRICHED columns to an Arrow table, in slices (each holds the GIL throughout)."""
        tables = [
            self._slice(
                rows[start : start + CONVERT_ROWS], [column[start : start + CONVERT_ROWS] for column in enriched]
            )
            for start in range(0, len(rows), CONVERT_ROWS)
        ]
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def _slice(self, rows: list[dict[str, Any]], enriched: list[list[Any]]) -> pa.Table:
        """Up to CONVERT_ROWS rows as a table: ENRICHED columns from ``_enrich``, PLAIN ones as emitted."""
        try:
            # as a struct array: Arrow reads each row once, every column from it, where
            # Table.from_pylist reads every row once per column; the same work, but beside the
            # server that shares this machine's cores and caches it cost more time
            plain = pa.RecordBatch.from_struct_array(pa.array(rows, type=PLAIN_ROW))
            arrays = dict(zip(PLAIN.names, plain.columns, strict=True))
            for field, values in zip(ENRICHED_FIELDS, enriched, strict=True):
                arrays[field.name] = pa.array(values, type=field.type)
        except (pa.ArrowTypeError, pa.ArrowInvalid):  # a value of another type: convert column by column
            computed = dict(zip(ENRICHED, enriched, strict=True))
            arrays = {
                field.name: _column(
                    computed[field.name] if field.name in computed else [row.get(field.name) for row in rows], field
                )
                for field in SCHEMA
                if field.name not in STAMPED
            }
        arrays["run_id"] = pa.repeat(pa.scalar(self.run_id, SCHEMA.field("run_id").type), len(rows))
        arrays["wall"] = pa.array(arrays["t_ns"].to_numpy() // 1000 + self._wall0_us, type=WALL)
        return pa.Table.from_arrays([arrays[name] for name in SCHEMA.names], schema=SCHEMA)

    def _enrich(self, row: dict[str, Any]) -> None:
        """Add ``row``'s ENRICHED values to the queued rows' columns; with user patterns, also redacts
        its data, comment and error (in place).

        ``emit`` calls it under the lock, in emit order, while the row is still in the CPU's cache:
        the same work on a batch of rows emitted up to a fifth of a second before cost the client a
        third more beside a busy server. What can fail (the URL, headers and body) comes before what
        changes the recorder's state (a session's context, a call's tool), so a row it refuses
        leaves nothing behind. One list per column, not a tuple per row: thousands of queued tuples
        would be young GC-tracked objects, and each 700 of them start a garbage collection.
        """
        redactor, sessions, calls = self.redactor, self._sessions, self._calls
        get = row.get
        kind = row["kind"]
        headers = get("headers")
        if type(headers) is httpx2.Headers:  # not isinstance: an ABC check costs 0.4 us for every other row
            # the queued row keeps the text, not the object: queued headers objects (a list and a
            # tuple per header each) would make the client's garbage collections more frequent
            headers = row["headers"] = self._header_list_json(headers)
        elif headers is not None and not isinstance(headers, str):
            headers = self._headers_json(headers)
        url, creates = get("url"), False
        if url is not None:
            known = self._urls.get(url)
            if known is None:
                known = (redactor.url(url), is_create_url(str(url)))
                if len(self._urls) < 10_000:
                    self._urls[url] = known
                self._servers.add(_origin(known[0]))
            url, creates = known
        body = get("body")
        if body is not None:
            body = redactor.body(url or "", body)
        layer = row["layer"] if "layer" in row else KIND_LAYER.get(kind, "agent")
        sid = get("session_id")
        task = get("task")
        if task is not None and not isinstance(task, str):
            task = _json(task)
        environment, split, task_index = get("environment"), get("split"), get("task_index")
        if sid is not None:
            if kind == "request" and creates:
                context = sessions[sid] = self._body_meaning(_session_of_create, get("body"))
            elif kind == "open":
                context = sessions[sid] = _merged(sessions.get(sid), (environment, split, task_index, task))
            else:
                context = sessions.get(sid, NO_CONTEXT)
            if environment is None:
                environment = context[0]
            if split is None:
                split = context[1]
            if task_index is None:
                task_index = context[2]
            if task is None:
                task = context[3]
            if kind == "close":  # nothing of the session follows its close: keep memory bounded
                sessions.pop(sid, None)
                calls.pop(sid, None)
        call = get("call")
        if call is not None:
            of_session = calls.get(sid)
            if of_session is None:
                of_session = calls[sid] = {}
            if kind == "request" and call not in of_session:
                of_session[call] = self._body_meaning(_tool_and_input, get("body"))
            tool, tool_input = of_session.get(call, NO_CALL)
            if "tool" in row:
                tool = row["tool"]
            if "input" in row:
                tool_input = row["input"]
        else:
            tool, tool_input = get("tool"), get("input")
        if redactor.patterns:
            tool_input, task = self._redact_texts(row, tool_input, task)
        layers, environments, splits, indexes, tasks, tools, inputs, urls, header_column, bodies = self._enriched
        layers.append(layer)
        environments.append(environment)
        splits.append(split)
        indexes.append(task_index)
        tasks.append(task)
        tools.append(tool)
        inputs.append(tool_input)
        urls.append(url)
        header_column.append(headers)
        bodies.append(body)

    def _body_meaning(self, parse: Callable[[bytes | None], tuple[Any, ...]], body: bytes | None) -> tuple[Any, ...]:
        """``parse(body)`` (a /create body's context, a /call body's tool and input), cached by body."""
        if not isinstance(body, bytes):
            return parse(body)
        key = (parse, body)
        known = self._bodies.get(key)
        if known is None:
            known = parse(body)
            if len(self._bodies) >= BODIES:
                self._bodies.clear()
            self._bodies[key] = known
        return known

    def _redact_texts(self, row: dict[str, Any], tool_input: Any, task: Any) -> tuple[Any, Any]:
        """The user patterns' matches out of the row's data, comment and error (in place), input and task."""
        text = self.redactor.text
        for name in ("data", "comment", "error"):
            value = row.get(name)
            if isinstance(value, str):
                row[name] = text(value)
        if isinstance(tool_input, str):
            tool_input = text(tool_input)
        if isinstance(task, str):
            task = text(task)
        return tool_input, task

    def _headers_json(self, headers: Any) -> str | None:
        """Headers (a mapping, ``(name, value)`` pairs, an object with ``.raw``) as JSON text: what
        ``_json(redactor.header_items(...))`` makes of them."""
        if isinstance(headers, (bytes, bytearray)):
            forms = "httpx2.Headers, a mapping, (name, value) pairs or JSON text"
            raise TypeError(f"headers are {forms}, not {bytes(headers[:60])!r}")
        raw = getattr(headers, "raw", None)  # an httpx.Headers and the like
        items = _decoded(raw) if raw is not None else _items(headers)
        return _json(self.redactor.header_items(items))

    def _header_list_json(self, headers: httpx2.Headers) -> str | None:
        """``_headers_json(headers)``, from a cache of the JSON members of header items.

        A client sends the same few headers again and again, and a server answers with the same
        few: each item (httpx2 keeps a tuple per header: raw name, lower-case name, value) is
        redacted and made JSON once. Whole header sets are not cached: every request carries its
        session's id, and every response the second it was sent.
        """
        items = getattr(headers, "_list", None)
        if type(items) is not list:  # not the httpx2 this was written against: the general way
            return self._headers_json(headers)
        cache = self._header_items
        names: set[str] = set()
        members: list[str] = []
        for item in items:
            known = cache.get(item)
            if known is None:
                known = self._header_item(item)
            name, member = known
            if name in names:  # a repeated name: header_items joins the values
                return self._headers_json(headers)
            names.add(name)
            members.append(member)
        return "{" + ",".join(members) + "}"

    def _header_item(self, item: tuple[bytes, ...]) -> tuple[str, str]:
        """One httpx2 header item's lower-case name and ``"name":"value"`` JSON member, redacted; cached."""
        ((key, redacted),) = self.redactor.header_items(_decoded([(item[0], item[-1])])).items()
        if len(self._header_items) >= HEADER_ITEMS:
            self._header_items.clear()
        known = self._header_items[item] = (key, f"{_ENCODER.encode(key)}:{_ENCODER.encode(redacted)}")
        return known

    # -- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Write what is queued, compact the parts into ``path``, and remove them."""
        if self._closed:
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._writer.join()
        self._closed = True
        if self._error is not None:
            raise RuntimeError(f"the trace writer failed; the parts are kept in {self.parts}") from self._error
        self._compact()

    def _compact(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        schema = SCHEMA.with_metadata(self._metadata(partial=False))
        with pq.ParquetWriter(tmp, schema, compression=self.compression) as writer:
            pending: list[pa.Table] = []
            rows = 0
            for part in sorted(self.parts.glob(PART_GLOB)):
                table = read_part(part)
                pending.append(table)
                rows += table.num_rows
                if rows >= COMPACT_ROWS:
                    writer.write_table(pa.concat_tables(pending).replace_schema_metadata(schema.metadata))
                    pending, rows = [], 0
                    pa.default_memory_pool().release_unused()
            if pending:
                writer.write_table(pa.concat_tables(pending).replace_schema_metadata(schema.metadata))
        os.replace(tmp, self.path)
        shutil.rmtree(self.parts)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        import asyncio

        await asyncio.to_thread(self.close)


def _reopen(path: Path, parts: Path) -> tuple[int, int, int, set[str]]:
    """Make the trace at ``path`` (compacted, or the parts of a killed run) parts again, to append to.

    Returns the next part number, the next sequence number, the next ``t_ns`` and the servers seen.
    A compacted file becomes the first part (renamed: whole or absent, at any moment).
    """
    parts.mkdir(parents=True, exist_ok=True)
    for stale in parts.glob(".part-*.tmp"):  # a part half-written when the process died
        stale.unlink()
    existing = sorted(parts.glob(PART_GLOB))
    if path.is_file():
        if existing:
            raise FileExistsError(f"{path} is a finished trace, yet {parts} holds parts too; remove one of them")
        _check_trace(path, part=False)
        target = parts / "part-000000000.parquet"  # a Parquet part among the Arrow ones: read_part reads both
        os.replace(path, target)
        existing = [target]
    if not existing:
        return 0, 0, 0, set()
    last_seq, last_ns, servers = -1, -1, set()
    for part in existing:
        _check_trace(part, part=True)
        table = read_part(part, columns=["seq", "t_ns"])
        if table.num_rows:
            last_seq = max(last_seq, int(pc.max(table["seq"]).as_py()))
            last_ns = max(last_ns, int(pc.max(table["t_ns"]).as_py()))
    metadata = _part_schema(existing[-1]).metadata or {}
    servers = set(json.loads(metadata.get(METADATA_SERVERS, b"[]")))
    return int(existing[-1].name[5:14]) + 1, last_seq + 1, last_ns + 1, servers


def _check_trace(path: Path, *, part: bool) -> None:
    """Refuse to append to a file (a compacted trace, whatever its name, or a part) not of this schema version."""
    from ors_lab.protocol.errors import TraceFormatError

    try:
        metadata = (_part_schema(path) if part else pq.read_schema(path)).metadata or {}
    except (pa.ArrowInvalid, OSError) as exc:
        kind = part_format(path) if part else "Parquet"
        raise TraceFormatError(f"cannot append to {path}: it is not a readable {kind} file ({exc})") from exc
    version = metadata.get(METADATA_SCHEMA_VERSION, b"").decode()
    if version != SCHEMA_VERSION:
        raise TraceFormatError(
            f"cannot append to {path}: its trace schema version is {version or 'missing'}, this ors_lab writes "
            f"{SCHEMA_VERSION}"
        )


def _column(values: Sequence[Any], field: pa.Field) -> pa.Array:
    """One column; a string column takes any JSON-able value (as its JSON text)."""
    try:
        return pa.array(values, type=field.type)
    except (pa.ArrowTypeError, pa.ArrowInvalid) as exc:
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            return pa.array([_json(value) for value in values], type=field.type)
        raise TypeError(f"trace column {field.name!r} ({field.type}) cannot hold these values: {exc}") from exc


def _items(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> Iterable[tuple[str, str]]:
    if isinstance(headers, Mapping):
        return headers.items()
    return headers


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _session_of_create(body: bytes | None) -> tuple[Any, ...]:
    """The task identity a /create body names (env_name, split/index or task_spec), as SESSION_COLUMNS."""
    try:
        value = json.loads(body or b"")
    except ValueError:
        return NO_CONTEXT
    if not isinstance(value, dict):
        return NO_CONTEXT
    return (value.get("env_name"), value.get("split"), value.get("index"), _json(value.get("task_spec")))


def _decoded(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]


def _merged(known: tuple[Any, ...] | None, opened: tuple[Any, ...]) -> tuple[Any, ...]:
    """A session's context after its ``open`` row: the row's values where given, else what was known."""
    return tuple(new if new is not None else old for new, old in zip(opened, known or NO_CONTEXT, strict=True))


def _tool_and_input(body: bytes | None) -> tuple[str | None, str | None]:
    """The tool name and input (as JSON) of a /call request body."""
    try:
        value = json.loads(body or b"")
    except ValueError:
        return None, None
    if not isinstance(value, dict):
        return None, None
    return value.get("name"), _json(value.get("input"))
