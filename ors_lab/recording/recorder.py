"""The recorder: every event the client (or the proxy) sees becomes one row of a Parquet trace.

How a trace is written, and why it survives a crash:

- ``emit`` only stamps the event (sequence number, monotonic nanoseconds since the run began) and
  queues it; a writer thread turns queued rows into Arrow columns, with secrets redacted first.
- Every ``flush_interval`` seconds (0.5 s by default), and whenever ``part_rows`` rows are
  waiting, the writer writes them as a new Parquet file ``PATH.parts/part-NNNNNNNNN.parquet``: it
  writes a hidden temporary file and renames it into place, so a part is either whole or absent.
  A process killed at any moment therefore leaves every event recorded up to about one second
  before the kill readable, as plain Parquet files.
- ``close()`` compacts the parts, in order, into the single file ``PATH`` and removes the parts.
- Memory stays bounded: the writer takes at most ``part_rows`` rows at a time, and when it falls
  ``2 * part_rows`` rows behind, ``emit`` waits.

``load_trace(PATH)`` reads the compacted file, or, after a crash, the parts (``partial=True``).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pyarrow as pa
import pyarrow.parquet as pq

from ors_lab.recording.redact import Redactor
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

__all__ = ["Recorder", "parts_dir"]

PART_GLOB = "part-*.parquet"
SESSION_COLUMNS = ("environment", "split", "task_index", "task")
COMPACT_ROWS = 16_384
CONVERT_ROWS = 1_024
YIELD_ROWS = 64


def parts_dir(path: Path) -> Path:
    """Where the parts of the trace at ``path`` live while it is being written."""
    return path.with_name(path.name + ".parts")


def _json(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


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
    ) -> None:
        self.path = Path(path)
        self.parts = parts_dir(self.path)
        if not overwrite and (self.path.exists() or self.parts.exists()):
            raise FileExistsError(f"{self.path} already holds a trace; pass overwrite=True or choose another path")
        if overwrite:
            self.path.unlink(missing_ok=True)
            shutil.rmtree(self.parts, ignore_errors=True)
        self.parts.mkdir(parents=True)
        self.run_id = run_id or uuid.uuid4().hex
        self.redactor = Redactor(redact_headers, redact_patterns)
        self.flush_interval = flush_interval
        self.part_rows = part_rows
        self.compression = compression
        self.created = dt.datetime.now(dt.UTC)
        self._t0 = time.monotonic_ns()
        self._wall0_us = time.time_ns() // 1000
        self._seq = itertools.count()
        self._queue: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._closing = False
        self._closed = False
        self._error: BaseException | None = None
        self._part_index = 0
        self._servers: set[str] = set()
        self._sessions: dict[str, dict[str, Any]] = {}
        self._urls: dict[str, str] = {}  # URL -> redacted URL: a run asks the same few URLs again and again
        self._calls: dict[tuple[str | None, int], tuple[str | None, str | None]] = {}
        self._writer = threading.Thread(target=self._run_writer, name="ors-lab-recorder", daemon=True)
        self._writer.start()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "recording"
        return f"Recorder({str(self.path)!r}, run_id={self.run_id!r}, {state})"

    # -- the hot path ----------------------------------------------------------------------------

    def emit(self, kind: str, /, **fields: Any) -> None:
        """Record one event now. ``fields`` are column values (see docs/trace-format.md)."""
        fields["t_ns"] = time.monotonic_ns() - self._t0
        fields["kind"] = kind
        with self._cond:
            if self._closed or self._closing:
                raise RuntimeError(f"{self!r} is closed")
            fields["seq"] = next(self._seq)
            queue = self._queue
            queue.append(fields)
            if len(queue) >= self.part_rows:
                self._cond.notify()
                while len(self._queue) >= 2 * self.part_rows and self._error is None:
                    self._cond.wait(0.1)  # the writer is behind: wait, so memory stays bounded
        if self._error is not None:
            raise RuntimeError(f"the trace writer failed: {self._error!r}") from self._error

    # -- the writer thread -----------------------------------------------------------------------

    def _run_writer(self) -> None:
        """Write a part every ``flush_interval`` seconds (sooner when ``part_rows`` rows wait)."""
        try:
            last = time.monotonic()
            while True:
                with self._cond:
                    while not self._closing and len(self._queue) < self.part_rows:
                        remaining = last + self.flush_interval - time.monotonic()
                        if remaining <= 0 and self._queue:
                            break
                        self._cond.wait(remaining if remaining > 0 else self.flush_interval)
                    rows = self._queue[: self.part_rows]
                    del self._queue[: self.part_rows]
                    done = self._closing and not self._queue
                    self._cond.notify_all()
                if rows:
                    self._write_part(rows)
                    last = time.monotonic()
                if done:
                    return
        except BaseException as exc:  # surfaced by the next emit() and by close()
            self._error = exc
            with self._cond:
                self._cond.notify_all()

    def _write_part(self, rows: list[dict[str, Any]]) -> None:
        table = self._table(rows)
        name = f"part-{self._part_index:09d}.parquet"
        self._part_index += 1
        tmp = self.parts / f".{name}.tmp"
        pq.write_table(table, tmp, compression=self.compression)
        os.replace(tmp, self.parts / name)

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

    def _table(self, rows: list[dict[str, Any]]) -> pa.Table:
        """Rows to an Arrow table: fill in context, redact, serialise nested values."""
        redactor = self.redactor
        wall0, run_id = self._wall0_us, self.run_id
        for index, row in enumerate(rows):
            if index % YIELD_ROWS == YIELD_ROWS - 1:
                time.sleep(0)  # hand the GIL to the client's event loop every ~0.5 ms, not every 5
            self._enrich(row, redactor)
            row["run_id"] = run_id
            row["wall"] = wall0 + row["t_ns"] // 1000
        schema = SCHEMA.with_metadata(self._metadata(partial=True))
        # in slices: each conversion holds the GIL, and the client's event loop is waiting for it
        return (
            pa.concat_tables(
                _convert(rows[start : start + CONVERT_ROWS], schema) for start in range(0, len(rows), CONVERT_ROWS)
            )
            if rows
            else schema.empty_table()
        )

    def _enrich(self, row: dict[str, Any], redactor: Redactor) -> None:
        kind = row["kind"]
        row.setdefault("layer", KIND_LAYER.get(kind, "agent"))
        sid = row.get("session_id")
        row["task"] = _json(row.get("task"))
        if sid is not None:
            if kind == "request" and str(row.get("url", "")).endswith("/create"):
                self._sessions[sid] = _session_of_create(row.get("body"))
            elif kind == "open":
                opened = {name: row.get(name) for name in SESSION_COLUMNS}
                self._sessions[sid] = {
                    **self._sessions.get(sid, {}),
                    **{k: v for k, v in opened.items() if v is not None},
                }
        context = self._sessions.get(sid) if sid is not None else None
        if context:
            for name, value in context.items():
                if row.get(name) is None:
                    row[name] = value
        call = row.get("call")
        if call is not None:
            key = (sid, call)
            if kind == "request" and key not in self._calls:
                self._calls[key] = _tool_and_input(row.get("body"))
            tool, tool_input = self._calls.get(key, (None, None))
            row.setdefault("tool", tool)
            row.setdefault("input", tool_input)
        url = row.get("url")
        if url is not None:
            redacted = self._urls.get(url)
            if redacted is None:
                redacted = redactor.url(url)
                if len(self._urls) < 10_000:
                    self._urls[url] = redacted
                self._servers.add(_origin(redacted))
            url = row["url"] = redacted
        headers = row.get("headers")
        if headers is not None and not isinstance(headers, str):
            raw = getattr(headers, "raw", None)  # httpx2.Headers: its raw bytes decode cheaper than multi_items()
            items = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw] if raw is not None else _items(headers)
            row["headers"] = _json(redactor.header_items(items))
        body = row.get("body")
        if body is not None:
            row["body"] = redactor.body(url or "", body)
        if redactor.patterns:
            for name in ("data", "comment", "error", "input", "task"):
                value = row.get(name)
                if isinstance(value, str):
                    row[name] = redactor.text(value)

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
                table = pq.read_table(part, schema=SCHEMA)
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


def _convert(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # a value of another type: convert column by column
        arrays = [_column([row.get(field.name) for row in rows], field) for field in SCHEMA]
        return pa.Table.from_arrays(arrays, schema=schema)


def _column(values: list[Any], field: pa.Field) -> pa.Array:
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


def _session_of_create(body: bytes | None) -> dict[str, Any]:
    """The task identity a /create body names (env_name, split/index or task_spec)."""
    try:
        value = json.loads(body or b"")
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    found = {
        "environment": value.get("env_name"),
        "split": value.get("split"),
        "task_index": value.get("index"),
        "task": _json(value.get("task_spec")),
    }
    return {name: v for name, v in found.items() if v is not None}


def _tool_and_input(body: bytes | None) -> tuple[str | None, str | None]:
    """The tool name and input (as JSON) of a /call request body."""
    try:
        value = json.loads(body or b"")
    except ValueError:
        return None, None
    if not isinstance(value, dict):
        return None, None
    return value.get("name"), _json(value.get("input"))
