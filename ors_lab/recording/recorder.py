"""The recorder: every event the client (or the proxy) sees becomes one row of a Parquet trace.

How a trace is written, and why it survives a crash:

- ``emit`` (in C, ``_rows.c``: the base class ``Rows``) stamps the event (sequence number,
  monotonic nanoseconds since the run began), works out its context (the session's task, the
  call's tool), redacts it, and appends each column's value to that column's buffers, laid out as
  an Arrow array's. What is rare or needs Python's libraries is a method here that ``emit`` calls:
  a URL or header item seen for the first time, a ``/create`` or ``/call`` body, an ``open`` row,
  a body that may hold secrets, the user's patterns, a value of an unusual type. Storing a row
  makes no Python object and leaves nothing to convert later: recording adds about 0.3 ms of
  client CPU to a quiz episode, less than half of what the same work cost in Python (bench/README.md).
- Every ``flush_interval`` seconds (0.5 s by default), whenever ``part_rows`` rows are waiting,
  and when ``flush()`` asks, the writer thread takes the buffers (``_take``), wraps them as Arrow
  arrays without copying a row, and writes them as a new Arrow IPC file
  ``PATH.parts/part-NNNNNNNNN.arrow``: it writes a hidden temporary file and renames it into place,
  so a part is either whole or absent. A part is the table as it is in memory, neither encoded nor
  compressed: a quarter of the CPU of a Parquet part. A process killed at any moment therefore
  leaves every event recorded up to about one second before the kill readable (``load_trace``
  reads the parts; ``Recorder(PATH, append=True).close()`` compacts them).
- ``close()`` compacts the parts, in order, into the single Parquet file ``PATH`` and removes them.
- Memory stays bounded: when ``2 * part_rows`` rows are waiting, ``emit`` waits for the writer.
- A row is stored whole or not at all, in seq order, under one lock, whichever thread emits it; a
  row ``emit`` refuses (a value its column cannot hold, headers of an unknown form) leaves nothing
  behind and raises ``TypeError`` naming what is wrong.

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
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, Self

import httpx2
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ors_lab.recording import _rows
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
BODIES = 1_024  # request bodies kept with what they name: a run sends the same few /create and /call bodies again
URLS = 10_000  # redacted URLs kept: a run asks the same few

STAMPED = ("run_id", "wall")
"""The columns the writer computes for a whole part at once; ``emit`` stores every other one."""
ROW_FIELDS = [field for field in SCHEMA if field.name not in STAMPED]
"""The columns ``emit`` stores, in the order of its buffers."""
_KINDS = {
    pa.int64(): _rows.INT64,
    pa.int32(): _rows.INT32,
    pa.float64(): _rows.FLOAT64,
    pa.bool_(): _rows.BOOL,
    pa.string(): _rows.STRING,
    pa.large_string(): _rows.LARGE_STRING,
    pa.large_binary(): _rows.LARGE_BINARY,
}
BODY = [field.name for field in ROW_FIELDS].index("body")
ROW_COLUMNS = [(field.name, _KINDS[field.type]) for field in ROW_FIELDS]
WALL = SCHEMA.field("wall").type
NO_CONTEXT: tuple[Any, ...] = (None,) * len(SESSION_COLUMNS)
IPC_OPTIONS = pa.ipc.IpcWriteOptions(use_threads=False)  # no pool threads taking the cores from the client


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


class Recorder(_rows.Rows):
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
        self.part_rows = part_rows  # checked before anything is on disk
        if not flush_interval > 0:
            raise ValueError(f"flush_interval is in seconds and must be above 0, not {flush_interval!r}")
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
        self.compression = compression
        self.created = dt.datetime.now(dt.UTC)
        # emit's state (Rows): _sessions (session id -> its SESSION_COLUMNS values), _calls (session
        # id -> call -> tool, input), _urls (URL -> redacted, is a /create), _header_items (how many
        # httpx2 header items it keeps, with their lower-case names and JSON members, redacted: 4,096
        # at most), _next_seq, _t0, _closing, _error; _waiting counts the rows stored and not yet taken
        # by the writer
        self._setup(ROW_COLUMNS, STAMPED, KIND_LAYER, "agent", httpx2.Headers, _json)
        # t_ns goes on from where an appended trace stopped, so it never runs backwards in one file
        self._t0 = time.monotonic_ns() - first_ns
        self._wall0_us = time.time_ns() // 1000 - first_ns // 1000
        self._next_seq = first_seq
        self._patterns = bool(self.redactor.patterns)
        self._written_seq = first_seq  # every row before this seq is in a part on disk
        self._flushers = 0  # flush() calls waiting: the writer writes what is waiting now
        self._cond = threading.Condition()
        self._closed = False
        self._part_index = first_part
        self._servers: set[str] = servers
        self._bodies: dict[tuple[Any, bytes | None], tuple[Any, ...]] = {}  # (parser, request body) -> parsed
        self._writer = threading.Thread(target=self._run_writer, name="ors-lab-recorder", daemon=True)
        self._writer.start()

    @property
    def part_rows(self) -> int:
        """Rows that make a part: the writer writes when this many are waiting; ``emit`` waits at twice as many."""
        return self._part_rows

    @part_rows.setter
    def part_rows(self, rows: int) -> None:
        if rows < 1:
            raise ValueError(f"part_rows must be at least 1, not {rows!r}")
        self._part_rows = rows

    def __repr__(self) -> str:
        state = "closed" if self._closed else "recording"
        return f"Recorder({str(self.path)!r}, run_id={self.run_id!r}, {state})"

    # -- what emit (Rows, in C) calls --------------------------------------------------------------

    def _wake_writer(self) -> None:
        """A part's worth of rows is waiting."""
        with self._cond:
            self._cond.notify_all()

    def _wait_for_writer(self) -> None:
        """Twice a part's worth is waiting: wait for the writer, so memory stays bounded."""
        with self._cond:
            self._cond.notify_all()
            while self._waiting >= 2 * self.part_rows and self._error is None:
                self._cond.wait(0.1)

    def _raise_error(self) -> NoReturn:
        """The writer's failure, raised where ``emit`` or ``flush`` meets it."""
        raise RuntimeError(f"the trace writer failed: {self._error!r}") from self._error

    def _cell(self, index: int, value: Any) -> Any:
        """A value of a type ``emit`` does not store directly, as Arrow converts it for its column
        (a string column takes any JSON-able value, as its JSON text)."""
        field = ROW_FIELDS[index]
        try:
            return pa.array([value], type=field.type)[0].as_py()
        except (pa.ArrowTypeError, pa.ArrowInvalid, OverflowError) as exc:
            if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
                text = _json(value)
                if text is not value:
                    return text
            raise TypeError(f"trace column {field.name!r} ({field.type}) cannot hold {value!r:.80}: {exc}") from exc

    def _url_known(self, url: str) -> tuple[str, bool]:
        """A URL seen for the first time: redacted, whether it is a /create, and its server noted."""
        known = (self.redactor.url(url), is_create_url(str(url)))
        if len(self._urls) < URLS:
            self._urls[url] = known
        self._servers.add(_origin(known[0]))
        return known

    def _body(self, url: str, body: Any) -> Any:
        """A body that may hold secrets (or meets the user's patterns), or is not bytes: as bytes, redacted."""
        if not isinstance(body, bytes):
            body = self._cell(BODY, body)
        return self.redactor.body(url, body)

    def _create_context(self, sid: str, body: bytes | None) -> tuple[Any, ...]:
        """A /create request: its session's context is the task its body names."""
        context = self._sessions[sid] = self._body_meaning(_session_of_create, body)
        return context

    def _open_context(self, sid: str, *opened: Any) -> tuple[Any, ...]:
        """An ``open`` row: its values where given, else what was known of the session."""
        context = self._sessions[sid] = _merged(self._sessions.get(sid), opened)
        return context

    def _call_meaning(self, body: bytes | None) -> tuple[str | None, str | None]:
        """A /call request: the tool and input its body names."""
        meaning: tuple[str | None, str | None] = self._body_meaning(_tool_and_input, body)
        return meaning

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every event emitted so far is in a part on disk, where ``load_trace`` reads it.

        Raises ``TimeoutError`` after ``timeout`` seconds, and the writer's error if it failed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._next_seq  # every row before it is stored whole (emit counts under its lock)
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
            self._raise_error()

    # -- the writer thread -----------------------------------------------------------------------

    def _run_writer(self) -> None:
        """Write a part every ``flush_interval`` seconds (sooner when ``part_rows`` rows wait, or flush asks)."""
        try:
            last = time.monotonic()
            while True:
                with self._cond:
                    while not self._closing and self._waiting < self.part_rows:
                        remaining = last + self.flush_interval - time.monotonic()
                        if self._waiting and (remaining <= 0 or self._flushers):
                            break
                        self._cond.wait(remaining if remaining > 0 else self.flush_interval)
                    done = self._closing  # emit refuses rows from now on: what is waiting is all there is
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
        """Take every waiting row, as a table, with the metadata for its part (no table: none waiting)."""
        columns = self._take()
        metadata = self._metadata(partial=True)  # the servers seen so far (emit adds to them)
        with self._cond:
            self._cond.notify_all()  # an emit waiting for room
        return ([self._table(columns)] if columns else []), metadata

    def _table(self, columns: list[tuple[int, int, bytes | None, bytes, bytes | None]]) -> pa.Table:
        """The buffers ``_take`` gave, as Arrow arrays (no copy), and the STAMPED columns."""
        arrays: dict[str, pa.Array] = {}
        for field, (rows, nulls, validity, values, data) in zip(ROW_FIELDS, columns, strict=True):
            buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(values)]
            if data is not None:
                buffers.append(pa.py_buffer(data))
            arrays[field.name] = pa.Array.from_buffers(field.type, rows, buffers, null_count=nulls)
        rows = len(arrays["seq"])
        arrays["run_id"] = pa.repeat(pa.scalar(self.run_id, SCHEMA.field("run_id").type), rows)
        arrays["wall"] = pa.array(arrays["t_ns"].to_numpy() // 1000 + self._wall0_us, type=WALL)
        return pa.Table.from_arrays([arrays[name] for name in SCHEMA.names], schema=SCHEMA)

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
            METADATA_SERVERS: json.dumps(sorted(self._servers)).encode(),  # sorted() copies in C: emit may add
            METADATA_PARTIAL: b"true" if partial else b"false",
        }

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

    def _redact_texts(self, *texts: Any) -> tuple[Any, ...]:
        """The user patterns' matches out of a row's data, comment, error, input and task."""
        text = self.redactor.text
        return tuple(text(value) if isinstance(value, str) else value for value in texts)

    def _headers_json(self, headers: Any) -> str | None:
        """Headers (a mapping, ``(name, value)`` pairs, an object with ``.raw``) as JSON text: what
        ``_json(redactor.header_items(...))`` makes of them."""
        if isinstance(headers, (bytes, bytearray)):
            forms = "httpx2.Headers, a mapping, (name, value) pairs or JSON text"
            raise TypeError(f"headers are {forms}, not {bytes(headers[:60])!r}")
        raw = getattr(headers, "raw", None)  # an httpx.Headers and the like
        items = _decoded(raw) if raw is not None else _items(headers)
        return _json(self.redactor.header_items(items))

    def _header_item(self, item: tuple[bytes, ...]) -> tuple[str, str]:
        """One httpx2 header item (raw name, lower-case name, value) seen for the first time: its
        lower-case name and ``"name":"value"`` JSON member, redacted, for ``emit`` to keep. A client
        sends the same few headers again and again, and a server answers with the same few."""
        ((key, redacted),) = self.redactor.header_items(_decoded([(item[0], item[-1])])).items()
        return key, f"{_ENCODER.encode(key)}:{_ENCODER.encode(redacted)}"

    # -- closing ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Write what is waiting, compact the parts into ``path``, and remove them."""
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
