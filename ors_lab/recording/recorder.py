"""The recorder: a subscriber that writes every event it is given as one row of a Parquet trace.

    with ol.Recorder("recordings/run.parquet") as rec, ol.Client(url, recorder=rec) as client:
        ...                                   # or client.events.subscribe(rec), evaluate(..., record=rec)

How a trace is written, and why it survives a crash:

- ``record(event)`` (also ``rec(event)``: a recorder is a subscriber) stamps the event's row with
  its sequence number, works out its context and redacts it (``Rows``: the session's task, the
  call's tool, secrets out of URLs, headers and bodies), and keeps it as one tuple. It is pure
  Python and cheap: the conversion to Arrow happens per batch, in C, in the writer thread.
- Every ``flush_interval`` seconds (0.5 s by default), whenever ``part_rows`` rows are waiting,
  and when ``flush()`` asks, the writer thread takes the waiting rows, has Arrow convert them, and
  writes them as a new Arrow IPC file ``PATH.parts/part-NNNNNNNNN.arrow``: it writes a hidden
  temporary file and renames it into place, so a part is either whole or absent. A part is the
  table as it is in memory, neither encoded nor compressed: a quarter of the CPU of a Parquet part.
  A process killed at any moment therefore leaves every event recorded up to about one second
  before the kill readable (``load_trace`` reads the parts; ``Recorder(PATH, append=True).close()``
  compacts them).
- ``close()`` compacts the parts, in order, into the single Parquet file ``PATH`` and removes them.
- Memory stays bounded: when ``2 * part_rows`` rows are waiting, ``record`` waits for the writer
  (the only time a recorder holds its publisher up: nothing is ever dropped).
- A row is kept whole or not at all, in ``seq`` order, under one lock, whichever thread gives it.

``emit(kind, **columns)`` writes a row by hand, for rows no event type describes.

pyarrow is imported by the writer thread, when it converts its first rows, not by the recorder's maker: importing
it takes a third of a second, and a run's first episodes are recorded without it (a trace appended to is read with
it when it is reopened).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, Self

from ors_lab.events import Event
from ors_lab.protocol.errors import TraceExistsError
from ors_lab.recording.columns import (
    METADATA_CREATED,
    METADATA_PARTIAL,
    METADATA_RUN_ID,
    METADATA_SCHEMA_VERSION,
    METADATA_SERVERS,
    METADATA_VERSION,
    SCHEMA_VERSION,
)
from ors_lab.recording.lock import LOCK_NAME, TraceLock
from ors_lab.recording.parts import PART, part_files, parts_dir, remove_stale
from ors_lab.recording.redact import Redactor
from ors_lab.recording.rows import Rows
from ors_lab.version import __version__

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Recorder"]

log = logging.getLogger("ors_lab.recording")

COMPACT_ROWS = 16_384
DICTIONARY_COLUMNS = [
    "run_id", "layer", "kind", "session_id", "environment", "split", "task", "tool", "input", "method", "url",
    "headers", "event", "reason",
]  # fmt: skip
"""The columns compaction dictionary-encodes: those whose values repeat (the others would only pay for a
dictionary they overflow). Measured on evaluation traces: a quarter smaller, and cheaper to write."""
_EXISTS = (
    "{path} already holds a trace; pass append=True to add to it, overwrite=True to replace it, or choose another path"
)


class Recorder:
    """Records events into the Parquet trace at ``path``: ``Client(url, recorder=rec)``, or subscribe it.

    ``with Recorder("recordings/run.parquet") as rec:`` (or ``async with``) closes and compacts it
    at the end. Secrets are redacted before anything is written (``ors_lab.recording.redact``):
    ``redact_names`` adds header, query parameter and JSON key names to the default sensitive ones
    (any case; ``-`` and ``_`` alike), ``redact_patterns`` regular expressions whose matches are
    replaced in every text.

    One recorder writes a trace at a time: it holds a lock in ``PATH.parts`` from here until
    ``close()`` (``ors_lab.recording.lock``); another recorder on the same trace, in this process
    or another, raises ``TraceLockedError`` naming it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        run_id: str | None = None,
        redact_names: Iterable[str] = (),
        redact_patterns: Iterable[str] = (),
        flush_interval: float = 0.5,
        part_rows: int = 8_192,
        compression: str = "zstd",
        overwrite: bool = False,
        append: bool = False,
    ) -> None:
        __tracebackhide__ = True
        self.path = Path(path)
        self.parts = parts_dir(self.path)
        if append and overwrite:
            raise ValueError("append=True adds to a trace and overwrite=True replaces it: choose one")
        self.part_rows = part_rows  # checked before anything is on disk
        if not flush_interval > 0:
            raise ValueError(f"flush_interval is in seconds and must be above 0, not {flush_interval!r}")
        if not (overwrite or append) and self.path.exists():
            raise TraceExistsError(_EXISTS.format(path=self.path), path=str(self.path))
        self.run_id = run_id or uuid.uuid4().hex
        # one writer per trace: the lock comes before anything of the trace is read, changed or removed
        self._lock_file = TraceLock(self.path, self.parts, run_id=self.run_id)
        self._lock_file.acquire()
        try:
            if overwrite:
                self.path.unlink(missing_ok=True)
                for entry in self.parts.iterdir():
                    if entry.name != LOCK_NAME:
                        shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            elif not append:
                remove_stale(self.path, self.parts)
                if self.path.exists() or part_files(self.parts):  # a run killed before its close left parts
                    raise TraceExistsError(_EXISTS.format(path=self.path), path=str(self.path))
            first_part, first_seq, first_ns, servers = _reopen(self.path, self.parts) if append else (0, 0, 0, set())
        except BaseException:
            self._lock_file.release()
            raise
        self.redactor = Redactor(redact_names, redact_patterns)
        self.flush_interval = flush_interval
        self.compression = compression
        self.created = dt.datetime.now(dt.UTC)
        # t_ns goes on from where an appended trace stopped, so it never runs backwards in one file
        self._rows = Rows(self.redactor, run_id=self.run_id, t0_ns=time.monotonic_ns() - first_ns,
                          first_seq=first_seq)  # fmt: skip
        self._rows.servers |= servers
        self._lock = threading.Lock()  # record takes it directly: cheaper than entering the Condition
        self._cond = threading.Condition(self._lock)
        self._written_seq = first_seq  # every row before this seq is in a part on disk
        self._flushers = 0  # flush() calls waiting: the writer writes what is waiting now
        self._closing = False
        self._closed = False
        self._error: BaseException | None = None
        self._part_index = first_part
        self._readers: tuple[Callable[[pa.Table], object], ...] = ()
        self._writer = threading.Thread(target=self._run_writer, name="ors-lab-recorder", daemon=True)
        self._writer.start()

    @property
    def part_rows(self) -> int:
        """Rows that make a part: the writer writes when this many wait; ``record`` waits at twice as many."""
        return self._part_rows

    @part_rows.setter
    def part_rows(self, rows: int) -> None:
        if rows < 1:
            raise ValueError(f"part_rows must be at least 1, not {rows!r}")
        self._part_rows = rows

    def __repr__(self) -> str:
        state = "closed" if self._closed else "recording"
        return f"Recorder({str(self.path)!r}, run_id={self.run_id!r}, {state})"

    # -- taking rows -------------------------------------------------------------------------------

    def record(self, event: Event) -> None:
        """Record ``event`` as the next row of the trace."""
        with self._lock:
            if self._closing or self._error is not None:
                self._refuse()
            rows = self._rows
            rows.add(event)
            if rows.waiting >= self._part_rows:
                self._make_room()

    __call__ = record

    def emit(self, kind: str, /, **columns: Any) -> None:
        """Record one row given by hand: ``kind`` and column values (docs/trace-format.md).

        ``seq``, ``t_ns``, ``wall`` and ``run_id`` are stamped; ``layer`` follows from the kind
        unless given; the context columns are filled in from the session and the call. A value of
        another type than its column's is stored as Arrow converts it (any JSON-able value in a
        string column, as its JSON text). A value its column cannot hold, a name that is not a
        column, or headers of an unknown form raise ``TypeError``, and nothing of the row is kept.
        """
        now = time.monotonic_ns()
        with self._lock:
            if self._closing or self._error is not None:
                self._refuse()
            rows = self._rows
            rows.add_row(kind, now, columns)
            if rows.waiting >= self._part_rows:
                self._make_room()

    def _refuse(self) -> NoReturn:
        if self._error is not None:
            raise RuntimeError(f"the trace writer failed: {self._error!r}") from self._error
        raise RuntimeError(f"{self!r} is closed")

    def _make_room(self) -> None:
        """Under the lock: wake the writer; at twice a part's worth, wait for it, so memory stays bounded."""
        self._cond.notify_all()
        while self._rows.waiting >= 2 * self._part_rows and self._error is None and not self._closing:
            self._cond.wait(0.1)

    def watch(self, reader: Callable[[pa.Table], object]) -> Callable[[], None]:
        """Call ``reader`` with every table of rows the writer writes from now on, in the writer thread,
        once its part is on disk (``flush()`` or ``close()`` makes the writer write what is waiting).

        An evaluation reads its result's rows so, with no second conversion of its events. Returns
        the function that stops it. A reader that raises is dropped and logged; the recording goes on.
        """
        with self._lock:
            self._readers = (*self._readers, reader)

        def stop() -> None:
            with self._lock:
                self._readers = tuple(r for r in self._readers if r is not reader)

        return stop

    def _hand_over(self, table: pa.Table) -> None:
        for reader in self._readers:
            try:
                reader(table)
            except Exception:
                log.exception("ors_lab: a reader of %r raised and was dropped", self)
                with self._lock:
                    self._readers = tuple(r for r in self._readers if r is not reader)

    @property
    def servers(self) -> set[str]:
        """The origins of the URLs recorded so far (redacted)."""
        return set(self._rows.servers)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every event recorded so far is in a part on disk, where ``load_trace`` reads it.

        Raises ``TimeoutError`` after ``timeout`` seconds, and the writer's error if it failed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._rows.next_seq
            self._flushers += 1
            self._cond.notify_all()
            try:
                while self._written_seq < target and self._error is None:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(
                            f"{self!r}: the events recorded before flush() are not written after {timeout:g} s"
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
                    while not self._closing and self._rows.waiting < self._part_rows:
                        remaining = last + self.flush_interval - time.monotonic()
                        if self._rows.waiting and (remaining <= 0 or self._flushers):
                            break
                        self._cond.wait(remaining if remaining > 0 else self.flush_interval)
                    done = self._closing  # record refuses rows from now on: what is waiting is all there is
                    taken = self._rows.swap()
                    written = self._rows.next_seq
                    metadata = self._metadata(partial=True)  # the servers seen so far
                    self._cond.notify_all()  # a record waiting for room
                if taken[1]:
                    table = self._rows.convert(taken)
                    self._write_part(table, metadata)
                    self._hand_over(table)
                    last = time.monotonic()
                    with self._cond:
                        self._written_seq = written
                        self._cond.notify_all()
                if done:
                    return
        except BaseException as exc:  # surfaced by the next record() and by close()
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _write_part(self, table: pa.Table, metadata: dict[bytes, bytes]) -> None:
        """Write ``table`` as the next part: a hidden temporary file, renamed into place."""
        table = table.replace_schema_metadata(metadata)
        name = f"part-{self._part_index:09d}{PART}"
        self._part_index += 1
        tmp = self.parts / f".{name}.tmp"
        import pyarrow as pa  # deferred: the writer thread imports it (see the module docstring)

        try:
            options = pa.ipc.IpcWriteOptions(use_threads=False)  # no pool threads taking the cores from the client
            with pa.ipc.new_file(tmp, table.schema, options=options) as writer:
                writer.write_table(table)
            os.replace(tmp, self.parts / name)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a full disk leaves no half-written part behind
            raise

    def _metadata(self, partial: bool) -> dict[bytes, bytes]:
        return {
            METADATA_SCHEMA_VERSION: SCHEMA_VERSION.encode(),
            METADATA_VERSION: __version__.encode(),
            METADATA_CREATED: self.created.isoformat().encode(),
            METADATA_RUN_ID: self.run_id.encode(),
            METADATA_SERVERS: json.dumps(sorted(self._rows.servers)).encode(),
            METADATA_PARTIAL: b"true" if partial else b"false",
        }

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
            self._lock_file.release()
            raise RuntimeError(f"the trace writer failed; the parts are kept in {self.parts}") from self._error
        try:
            self._compact()
        except BaseException:
            self._lock_file.release()  # the parts stay, whole: append=True takes them up again
            raise
        shutil.rmtree(self.parts, ignore_errors=True)  # the lock file with them; the lock goes when released
        self._lock_file.release()

    @property
    def closed(self) -> bool:
        """True once ``close()`` returned."""
        return self._closed

    def _compact(self) -> None:
        """Write the parts, in order, as the Parquet file ``path`` (a hidden temporary file, renamed into place)."""
        import pyarrow as pa  # deferred (see the module docstring)
        import pyarrow.parquet as pq

        from ors_lab.recording.reading import read_checked
        from ors_lab.recording.schema import SCHEMA

        tmp = self.path.with_name(f".{self.path.name}.tmp")
        schema = SCHEMA.with_metadata(self._metadata(partial=False))
        try:
            with pq.ParquetWriter(tmp, schema, compression=self.compression,
                                  use_dictionary=DICTIONARY_COLUMNS) as writer:  # fmt: skip
                pending: list[pa.Table] = []
                rows = 0
                for part in part_files(self.parts):
                    table = read_checked(part, part=True)  # validated, this version: damage is a TraceFormatError
                    pending.append(table)
                    rows += table.num_rows
                    if rows >= COMPACT_ROWS:
                        writer.write_table(pa.concat_tables(pending).replace_schema_metadata(schema.metadata))
                        pending, rows = [], 0
                        pa.default_memory_pool().release_unused()
                if pending:
                    writer.write_table(pa.concat_tables(pending).replace_schema_metadata(schema.metadata))
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

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
        await asyncio.to_thread(self.close)


def _reopen(path: Path, parts: Path) -> tuple[int, int, int, set[str]]:
    """``ors_lab.recording.reading.reopen``: a trace appended to is read (with pyarrow) when it is reopened."""
    from ors_lab.recording.reading import reopen  # deferred: pyarrow (see the module docstring)

    return reopen(path, parts)
