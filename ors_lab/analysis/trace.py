"""Reading traces back: ``load_trace(path)`` -> ``Trace``, with the run's DataFrames.

A trace is plain Parquet, readable by DuckDB, Polars or pandas without ors_lab (the parts of an
unfinished one are Arrow IPC files, see ``ors_lab.recording``); this module adds the checks
(schema version, columns) and the frames of ``ors_lab.analysis.frames``: ``events``, ``calls``,
``sessions``, ``steps``, ``episodes``, ``tasks``, ``errors``, ``transcripts`` and ``summary()``.

Traces are read where they lie. ``load_trace`` reads a compacted trace's footer only (its
metadata, checked, and its schema); rows are read when something asks for them, and only the
columns (and, where the row groups' statistics tell, only the row groups) asked for:
``trace.select(columns, kinds=...)`` is that projected read, the frames are built on it, and
``trace.table`` (every row, every column) is read on first access. ``trace.event_pages()`` pages
through the events as DataFrames of bounded size; ``trace.events`` is every row at once, refused
(``TraceTooLargeError``) above ``EVENTS_ROWS`` rows rather than exhausting memory. The parts of an
unfinished trace are read whole at load: the recorder compacts them away when it ends.

Whatever is wrong with a trace is a ``TraceFormatError`` naming the file and what is wrong, never
another exception and never a crash: every file is read into memory and validated before use (no
memory map), its ``ors_lab.*`` metadata is checked at load (UTF-8, a readable schema version,
servers as a JSON list, columns of the declared types), and a row group or part found damaged when
its rows are read, or a frame its rows cannot make (an ``episode`` row whose record is not JSON),
is one too, at that moment.

A damaged part of an unfinished trace, or a damaged row group of a compacted one, is refused by
default: the error names the bad file (and row group), and nothing is silently lost. ``load_trace(path,
skip_bad_parts=True)`` reads the whole trace at once, the rest of it, and the trace says what it
left out: ``trace.skipped`` (file, or file and row group -> what is wrong) and
``trace.metadata["skipped"]``; it is logged too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ors_lab import display
from ors_lab.analysis.conversations.formats import check
from ors_lab.protocol.errors import TraceFormatError, TraceNotFoundError, TraceTooLargeError
from ors_lab.recording.columns import (
    COLUMNS,
    EPISODE_COLUMNS,
    METADATA_CREATED,
    METADATA_RUN_ID,
    METADATA_SCHEMA_VERSION,
    METADATA_SERVERS,
    METADATA_VERSION,
    RECORD_SOURCE,
    SCHEMA_VERSION,
)
from ors_lab.recording.parts import check_metadata, part_files, parts_dir
from ors_lab.recording.reading import read_checked, select_rows
from ors_lab.recording.schema import SCHEMA, kind_mask, upgrade

if TYPE_CHECKING:
    import pandas as pd

    from ors_lab.analysis.conversations.build import Conversation
    from ors_lab.analysis.frames import Summary

__all__ = ["EVENTS_ROWS", "PAGE_ROWS", "Trace", "load_trace"]

log = logging.getLogger("ors_lab.analysis")
_T = TypeVar("_T")

EVENTS_ROWS = 5_000_000
"""The most rows ``trace.events`` makes one DataFrame of (about 5 GB in memory); page through more."""
PAGE_ROWS = 65_536
"""The rows of each DataFrame ``trace.event_pages()`` yields, by default."""
DICTIONARY_READ = ["run_id", "layer", "kind", "session_id", "environment", "split", "task", "tool", "input", "method",
                   "url", "headers", "event", "reason"]  # fmt: skip
"""The string columns the recorder writes dictionary-encoded, read so (several times faster than decoding every
value; ``kind`` is then matched by its few values) and made plain strings once the rows asked for are taken."""
GROUPS_AT_ONCE = 16  # row groups read (and decoded in parallel) at a time
SKIP_HINT = "read the rest with load_trace(path, skip_bad_parts=True)"


class _Rows(Protocol):
    """Where a trace's rows lie: the pieces of them (row groups, or a table in memory) read on request."""

    def count(self) -> int: ...

    def pieces(
        self, columns: Sequence[str], kinds: Sequence[str] | None, encoded: Sequence[str] = ()
    ) -> Iterator[pa.Table]: ...


class _InMemory:
    """Rows in memory (the parts of an unfinished trace, or a trace read with ``skip_bad_parts``)."""

    def __init__(self, read: Callable[[], pa.Table]) -> None:
        self._read = read

    @cached_property
    def table(self) -> pa.Table:
        return self._read()

    def count(self) -> int:
        return int(self.table.num_rows)

    def pieces(
        self, columns: Sequence[str], kinds: Sequence[str] | None, encoded: Sequence[str] = ()
    ) -> Iterator[pa.Table]:
        yield select_rows(self.table, columns, kinds)


class _Compacted:
    """A compacted trace, its footer read (the file kept open: a trace appended to and compacted again
    after the load is not mixed in); its row groups read on request, ``GROUPS_AT_ONCE`` at a time (the next
    batch read on a thread of its own while one is checked and used), each validated."""

    def __init__(self, path: Path, file: pq.ParquetFile, version: str) -> None:
        self.path, self.file, self.version = path, file, version
        self.present = set(file.schema_arrow.names)

    def count(self) -> int:
        return int(self.file.metadata.num_rows)

    def pieces(
        self, columns: Sequence[str], kinds: Sequence[str] | None, encoded: Sequence[str] = ()
    ) -> Iterator[pa.Table]:
        records = int(self.version) < 6 and any(name in EPISODE_COLUMNS for name in columns)  # read from the records
        read = [name for name in dict.fromkeys([*columns, *(["kind"] if kinds is not None else []),
                                                *(RECORD_SOURCE if records else [])])
                if name in self.present]  # fmt: skip
        groups = [i for i in range(self.file.num_row_groups) if kinds is None or self._may_hold(i, kinds)]
        batches = [groups[start : start + GROUPS_AT_ONCE] for start in range(0, len(groups), GROUPS_AT_ONCE)]
        if len(batches) < 2:  # a small trace, read on this thread (one row group not even on Arrow's threads: their
            for batch in batches:  # allocator keeps the pages they touched, some 15 MB)
                rows = partial(self._read, batch, read, len(batch) > 1)
                yield self._batch(batch, rows, read, columns, kinds, encoded)
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ors_lab-read") as reader:
            # the next batch is read (Arrow decodes it on its threads) while this one is checked here
            ahead = reader.submit(self._read, batches[0], read, True)
            for number, batch in enumerate(batches):
                taken = ahead
                if number + 1 < len(batches):
                    ahead = reader.submit(self._read, batches[number + 1], read, True)
                yield self._batch(batch, taken.result, read, columns, kinds, encoded, ahead)

    def _read(self, batch: list[int], read: list[str], threads: bool) -> pa.Table:
        return self.file.read_row_groups(batch, columns=read, use_threads=threads)

    def _batch(self, batch: list[int], rows: Callable[[], pa.Table], read: list[str], columns: Sequence[str],
               kinds: Sequence[str] | None, encoded: Sequence[str],
               ahead: Future[pa.Table] | None = None) -> pa.Table:  # fmt: skip
        """A batch of row groups, read (``rows``) and ``_checked``; when that fails, each row group on its own, to name
        the damaged one (once the read ``ahead`` is done: the file is read by one thread at a time)."""
        try:
            return self._checked(rows(), columns, kinds, encoded)
        except Exception:  # whatever a damaged row group makes the reader raise: find which, and say so
            if ahead is not None:
                wait([ahead])
            return pa.concat_tables([self._group(index, read, columns, kinds, encoded) for index in batch])

    def _checked(self, table: pa.Table, columns: Sequence[str], kinds: Sequence[str] | None,
                 encoded: Sequence[str] = ()) -> pa.Table:  # fmt: skip
        """Rows as read: validated, those of ``kinds`` kept, and made this version (``kind`` is read as a
        dictionary, matched by its few values); the ``encoded`` columns read as dictionaries are left so
        (their dictionaries unified: one a read), not made plain strings."""
        table.validate(full=True)
        if kinds is not None:
            mask = kind_mask(table["kind"], kinds)
            if not pc.all(mask).as_py():  # the filter copies every row it keeps: only when some go
                table = table.filter(mask)
        kept = {name: table[name] for name in encoded if name in columns and name in table.column_names
                and pa.types.is_dictionary(table.schema.field(name).type)}  # fmt: skip
        table = upgrade(table, self.version, [name for name in columns if name not in kept])
        if kept:
            table = pa.table({name: kept[name] if name in kept else table[name] for name in columns})
        return table.combine_chunks()  # one chunk a read: Arrow's kernels run faster

    def _group(self, index: int, read: list[str], columns: Sequence[str], kinds: Sequence[str] | None,
               encoded: Sequence[str] = ()) -> pa.Table:  # fmt: skip
        """One row group, read and ``_checked``; ``TraceFormatError`` naming it if it cannot be."""
        try:
            return self._checked(self.file.read_row_group(index, columns=read), columns, kinds, encoded)
        except Exception as exc:
            raise TraceFormatError(f"{self.path} row group {index} is not readable: {exc}; {SKIP_HINT}") from exc

    def _may_hold(self, index: int, kinds: Sequence[str]) -> bool:
        """False when the row group's statistics of ``kind`` (its least and greatest) leave out all ``kinds``."""
        try:
            column = self.file.metadata.row_group(index).column(self.file.schema_arrow.get_field_index("kind"))
            stats = column.statistics
            if stats is None or not stats.has_min_max:
                return True
            low, high = (v.decode() if isinstance(v, bytes) else str(v) for v in (stats.min, stats.max))
        except Exception:  # statistics it cannot read: read the row group
            return True
        return any(low <= kind <= high for kind in kinds)


class Trace:
    """A loaded trace: its ``metadata``, the rows read on request (``select``, ``event_pages``, the
    whole ``table``), and DataFrames built on demand.

    ``partial`` is True when the trace was read from the parts a crashed recorder left behind.
    ``skipped`` names what ``load_trace(..., skip_bad_parts=True)`` left out (file -> what is wrong).
    """

    def __init__(
        self,
        rows: pa.Table | _Rows,
        *,
        path: Path,
        partial: bool,
        skipped: dict[str, str] | None = None,
        metadata: dict[bytes, bytes] | None = None,
    ) -> None:
        if isinstance(rows, pa.Table):
            table, metadata = rows, rows.schema.metadata
            rows = _InMemory(lambda: table)
        self._rows: _Rows = rows
        self.path = path
        self.partial = partial
        self.skipped = dict(skipped or {})
        self._schema_metadata = metadata
        checked = check_metadata(path, metadata)
        self.metadata: dict[str, Any] = {
            "schema_version": checked.get(METADATA_SCHEMA_VERSION.decode(), ""),
            "ors_lab_version": checked.get(METADATA_VERSION.decode(), ""),
            "created": checked.get(METADATA_CREATED.decode(), ""),
            "servers": checked[METADATA_SERVERS.decode()],
            "run_id": checked.get(METADATA_RUN_ID.decode(), ""),
            "partial": partial,
            "skipped": list(self.skipped),
        }

    def __repr__(self) -> str:
        partial = ", partial" if self.partial else ""
        return f"Trace({str(self.path)!r}, events={len(self)}{partial})"

    def __len__(self) -> int:
        return self._rows.count()

    # -- reading rows ---------------------------------------------------------------------------------

    @cached_property
    def table(self) -> pa.Table:
        """Every row, every column (this schema version), as one Arrow table: read on first access.

        A large trace is better read by ``select`` (the columns and kinds of rows needed) or paged
        by ``event_pages``."""
        return self.select(COLUMNS).replace_schema_metadata(self._schema_metadata)

    def select(self, columns: Sequence[str], *, kinds: Sequence[str] | None = None) -> pa.Table:
        """The trace's rows of ``kinds`` (every kind when None) with ``columns`` only, in that order, in
        the trace's order: only these columns are read from the file, and only the row groups that
        can hold those kinds. ``ValueError`` for a name that is no column of the trace schema.

        ``trace.select(["session_id", "reward"], kinds=["result"])``: the rewards of every result."""
        pieces = list(self.scan(columns, kinds=kinds))
        schema = pa.schema([SCHEMA.field(name) for name in columns])
        return pa.concat_tables(pieces) if pieces else schema.empty_table()

    def scan(self, columns: Sequence[str], *, kinds: Sequence[str] | None = None) -> Iterator[pa.Table]:
        """``select``, a piece at a time: Arrow tables of the rows of ``kinds`` with ``columns``, each from a few
        row groups of the file, in the trace's order; for work over a trace larger than memory."""
        return self._scan(columns, kinds)

    def _scan(self, columns: Sequence[str], kinds: Sequence[str] | None = None,
              encoded: Sequence[str] = ()) -> Iterator[pa.Table]:  # fmt: skip
        """``scan``, with the ``encoded`` columns of a compacted trace left dictionary-encoded as the file holds
        them (each piece one dictionary a column; a column not so in the file, or rows in memory, plain)."""
        unknown = [name for name in columns if name not in COLUMNS]
        if unknown:
            raise ValueError(f"no trace column {', '.join(map(repr, unknown))}; the columns are {', '.join(COLUMNS)}")
        if "table" in self.__dict__:  # read whole already
            yield select_rows(self.table, columns, kinds)
        else:
            yield from self._rows.pieces(columns, kinds, encoded)

    def event_pages(
        self,
        rows: int = PAGE_ROWS,
        *,
        kinds: Sequence[str] | None = None,
        sessions: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
    ) -> Iterator[pd.DataFrame]:
        """The events as DataFrames of at most ``rows`` rows each, in the trace's order, read a row group
        at a time: only the rows of ``kinds`` and of the ``sessions`` (session ids) given, with
        ``columns`` (every column when None), so that no more than a page is in memory at once.

        ``for page in trace.event_pages(kinds=["result"], columns=["session_id", "reward"]): ...``"""
        if rows < 1:
            raise ValueError(f"a page holds at least one row, not {rows}")
        names = list(COLUMNS if columns is None else columns)
        read = names if sessions is None or "session_id" in names else [*names, "session_id"]
        wanted = None if sessions is None else pa.array(list(sessions), pa.string())
        pending: list[pa.Table] = []
        held = 0
        for piece in self.scan(read, kinds=kinds):
            if wanted is not None:
                piece = piece.filter(pc.is_in(piece["session_id"], value_set=wanted)).select(names)
            pending.append(piece)
            held += piece.num_rows
            while held >= rows:
                together = pa.concat_tables(pending)
                yield _pandas(together.slice(0, rows))
                pending, held = [together.slice(rows)], together.num_rows - rows
        if held:
            yield _pandas(pa.concat_tables(pending))

    # -- showing itself: drawn by the display layer (``ors_lab.display``), this holds the data only ------------

    def view(self, *, page_size: int | None = None) -> Any:
        """The trace viewer (``ors_lab.viewer.trace``, a ``LiveView`` of it): its episodes a page at a time, and
        any episode's timeline on a click. Display it (a cell ending with it) or call ``.show()``."""
        return display.make(self, "view", page_size=page_size)

    def to_html(self, path: str | os.PathLike[str], *, timelines: int | None = None) -> Any:
        """Write the run's report to ``path``: one self-contained HTML file to share (no network, no
        kernel): the summary, each evaluation's dashboard and per-task table, and the episodes with
        their timelines and transcripts (at most ``timelines`` of them, by default 2,000, the failed
        ones first; the page says when it holds fewer than all). Returns the ``Report`` written. See
        ``ors_lab.viewer.report``."""
        return display.make(self, "report", path=path, timelines=timelines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """In a notebook with live views: the viewer (its widget, and its static summary for a saved
        notebook); else the summary card."""
        shown = display.bundle(self)
        return shown if shown is not None else {"text/plain": repr(self)}

    def _display_(self) -> display.Shown:
        """marimo's display protocol (asked before ``_repr_html_``): the bundle, so a live view's widget."""
        return display.Shown(self._repr_mimebundle_())

    def _repr_html_(self) -> str:
        """The summary card (episodes, mean reward, errors, environments, duration; the path last), the
        reward histogram and the first episodes."""
        return str(display.make(self, "html"))

    @cached_property
    def listing(self) -> pd.DataFrame:
        """The episodes as the trace viewer lists them, one row each (``frames.listing_frame``): made once."""
        from ors_lab.analysis.frames import listing_frame  # pandas: loaded when a frame is asked for

        return self._frame("listing", lambda: listing_frame(self))

    @cached_property
    def events(self) -> pd.DataFrame:
        """One row per event, every column of the schema (Arrow-backed dtypes), all in memory at once.

        A trace of more than ``EVENTS_ROWS`` rows is refused with ``TraceTooLargeError`` (such a frame
        would take more memory than a laptop has, and a kernel killed for it loses everything else):
        page through it with ``event_pages()``, or read the columns needed with ``select()``."""
        from ors_lab.analysis.frames import events_frame  # pandas: loaded when a frame is asked for

        if len(self) > EVENTS_ROWS:
            raise TraceTooLargeError(
                f"{self.path} has {len(self):,} events, more than trace.events holds at once ({EVENTS_ROWS:,}): "
                "page through them with trace.event_pages(kinds=..., sessions=..., columns=...), or read "
                "some columns with trace.select(columns, kinds=...)"
            )
        return self._frame("events", lambda: events_frame(self.table))

    @cached_property
    def calls(self) -> pd.DataFrame:
        """One row per tool call: tool, input, ok, reward, finished, timings, chunks, pings, bytes."""
        from ors_lab.analysis.frames import calls_frame  # pandas: loaded when a frame is asked for

        return self._frame("calls", lambda: calls_frame(self))

    @cached_property
    def sessions(self) -> pd.DataFrame:
        """One row per session: environment, task, open and close times, calls, pings."""
        from ors_lab.analysis.frames import sessions_frame  # pandas: loaded when a frame is asked for

        return self._frame("sessions", lambda: sessions_frame(self))

    @cached_property
    def steps(self) -> pd.DataFrame:
        """One row per tool call that returned a result, numbered within its episode."""
        from ors_lab.analysis.frames import steps_frame  # pandas: loaded when a frame is asked for

        calls = self.__dict__.get("calls")  # when made already; else the calls without their outputs
        return self._frame("steps", lambda: steps_frame(self, calls))

    @cached_property
    def episodes(self) -> pd.DataFrame:
        """One row per episode: reward, total and final reward, finished, success, steps, error, tokens."""
        from ors_lab.analysis.frames import episodes_frame  # pandas: loaded when a frame is asked for

        steps = self.__dict__.get("steps")  # when made already; else counted from the result rows alone
        sessions = self.__dict__.get("sessions")
        return self._frame("episodes", lambda: episodes_frame(self, steps=steps, sessions=sessions))

    @cached_property
    def tasks(self) -> pd.DataFrame:
        """One row per task: episodes, mean reward and its stderr, success rate, pass@k, tokens."""
        from ors_lab.analysis.frames import tasks_frame  # pandas: loaded when a frame is asked for

        episodes = self.episodes
        return self._frame("tasks", lambda: tasks_frame(episodes))

    @cached_property
    def errors(self) -> pd.DataFrame:
        """One row per episode that failed."""
        from ors_lab.analysis.frames import errors_frame  # pandas: loaded when a frame is asked for

        episodes = self.episodes
        return self._frame("errors", lambda: errors_frame(episodes))

    @cached_property
    def transcripts(self) -> pd.DataFrame:
        """One row per turn of the agent: its reasoning, text and tool calls (the deltas joined), reward, errors."""
        from ors_lab.analysis.frames import transcripts_frame  # pandas: loaded when a frame is asked for

        episodes = self.__dict__.get("episodes")  # when made already; else the cheaper listing of the same episodes
        return self._frame("transcripts", lambda: transcripts_frame(self, episodes))

    def conversations(self, format: str = "openai", *, min_reward: float | None = None) -> list[Conversation]:
        """Each episode's conversation as ``format``'s messages (``"openai"``: chat completions, ``"anthropic"``:
        Messages, ``"responses"``: the Responses API), tool calls and tool results included, with its reward; the
        episodes whose reward is below ``min_reward`` (or who have none) left out. In the order of ``episodes``.
        ``ors_lab.analysis.conversations`` says what each holds; ``write_conversations`` writes them as JSONL."""
        from ors_lab.analysis.conversations.build import build  # pyarrow, pandas: loaded when asked for

        check(format)
        if min_reward is not None and (isinstance(min_reward, bool) or not isinstance(min_reward, int | float)):
            raise TypeError(f"min_reward must be a number or None, not {type(min_reward).__name__}: {min_reward!r}")
        episodes = self.episodes
        records: list[dict[str, Any]] = episodes.astype(object).where(episodes.notna(), None).to_dict("records")  # type: ignore[assignment]
        return self._built("conversations", lambda: build(self, records, format=format, min_reward=min_reward))

    def write_conversations(
        self, path: str | os.PathLike[str], format: str = "openai", *, min_reward: float | None = None
    ) -> int:
        """Write ``conversations(format, min_reward=...)`` to ``path`` as JSONL, one episode a line
        (``Conversation.to_json()``); the number of lines written. The file is written whole or not at all."""
        from ors_lab.events import strict_json  # the JSON any reader takes: a reward that is NaN is null

        conversations = self.conversations(format, min_reward=min_reward)
        target = Path(path)
        temporary = target.with_name(f".{target.name}.partial")
        with temporary.open("w", encoding="utf-8") as out:
            for conversation in conversations:
                out.write(strict_json(conversation.to_json()) + "\n")
        os.replace(temporary, target)
        return len(conversations)

    def summary(self) -> Summary:
        """The trace's episodes in one row, shown as a short vertical table: mean reward and its stderr,
        success rate, pass@k, errors."""
        from ors_lab.analysis.frames import Summary, summary_frame  # pandas: loaded when a frame is asked for

        episodes = self.episodes
        return Summary(self._frame("summary", lambda: summary_frame(episodes)))

    def _frame(self, name: str, build: Callable[[], pd.DataFrame]) -> pd.DataFrame:
        """``build()``, with what the trace's rows cannot make (a record that is not JSON, a value of the
        wrong kind in a hand-edited trace) a ``TraceFormatError`` naming the trace and the frame."""
        return self._built(name, build)

    def _built(self, name: str, build: Callable[[], _T]) -> _T:
        """``_frame`` for anything the rows make."""
        try:
            return build()
        except TraceFormatError:
            raise
        except (pa.ArrowException, ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as exc:
            raise TraceFormatError(f"{self.path}: its rows do not make the {name} frame: {exc}") from exc


def load_trace(path: str | os.PathLike[str], *, skip_bad_parts: bool = False) -> Trace:
    """Open the trace at ``path``: the compacted file, or the parts of an unfinished recording.

    Of a compacted trace only the metadata (the Parquet footer) is read now, and checked; its rows are
    read when asked for. The parts of an unfinished recording are read now, whole: the recorder
    compacts them away when it ends. ``TraceFormatError`` for anything wrong with it, naming the file
    and what is wrong: now for its metadata and parts, when they are read for a compacted trace's
    rows. A damaged part (or row group of a compacted trace) is refused unless
    ``skip_bad_parts=True``: then the whole trace is read now, the rest of it, and ``trace.skipped``
    names what was left out.
    """
    __tracebackhide__ = True
    path = Path(path)
    if not path.name:
        raise TraceNotFoundError(
            f"no trace at {str(path)!r}: a trace is a file, named like run.parquet", path=str(path)
        )
    parts = parts_dir(path)
    skipped: dict[str, str] = {}
    if path.is_file() and skip_bad_parts:
        table = _read_compacted(path, skipped)
        trace = Trace(table, path=path, partial=False, skipped=skipped)
    elif path.is_file():
        file, version = _open_compacted(path)
        trace = Trace(_Compacted(path, file, version), path=path, partial=False, metadata=file.schema_arrow.metadata)
    elif parts.is_dir():  # read now: the recorder compacts its parts away when it ends
        table = _read_parts(part_files(parts), skipped if skip_bad_parts else None)
        trace = Trace(table, path=path, partial=True, skipped=skipped)
    else:
        raise TraceNotFoundError(f"no trace at {path}", path=str(path))
    if skipped:
        log.warning("ors_lab: %s loaded without %s", path, "; ".join(f"{k} ({v})" for k, v in skipped.items()))
    return trace


def _open_compacted(path: Path) -> tuple[pq.ParquetFile, str]:
    """A compacted trace's footer, read and checked (metadata, columns and their types); its schema version."""
    try:
        file = pq.ParquetFile(path)
        schema = file.schema_arrow
    except Exception as exc:  # a damaged footer: nothing can be read
        raise TraceFormatError(f"{path} is not a readable Parquet file: {exc}") from exc
    version = _checked(path, schema.empty_table(), "Parquet", schema.metadata)
    dictionaries = [name for name in DICTIONARY_READ if name in schema.names]
    try:
        return pq.ParquetFile(path, metadata=file.metadata, read_dictionary=dictionaries), version  # footer read once
    except Exception as exc:
        raise TraceFormatError(f"{path} is not a readable Parquet file: {exc}") from exc


def _read_parts(files: list[Path], skipped: dict[str, str] | None) -> pa.Table:
    """The parts, each read whole and checked, as one table; the bad ones refused (all named), or, with
    ``skipped`` (skip_bad_parts), left out and named there."""
    tables: list[pa.Table] = []
    bad: list[tuple[Path, TraceFormatError]] = []
    for file in files:
        try:
            tables.append(read_checked(file, part=True))
        except TraceFormatError as exc:
            bad.append((file, exc))
            if skipped is not None:
                skipped[str(file)] = exc.message
        except FileNotFoundError as exc:
            raise TraceFormatError(
                f"{file} is gone since the trace was loaded (finished or moved): load it again"
            ) from exc
    if skipped is None:
        _refuse(bad)
    # each part's metadata is the running one (servers seen so far): the last part's is whole
    if not tables:
        return SCHEMA.empty_table().replace_schema_metadata({METADATA_SCHEMA_VERSION: SCHEMA_VERSION.encode()})
    return pa.concat_tables(tables).replace_schema_metadata(tables[-1].schema.metadata)


def _refuse(bad: list[tuple[Path, TraceFormatError]]) -> None:
    """Raise the first bad part's error, naming the others."""
    if bad:
        more = f" (and {len(bad) - 1} more bad part(s): {', '.join(str(file) for file, _ in bad[1:])})"
        raise TraceFormatError(f"{bad[0][1].message}{more if len(bad) > 1 else ''}") from bad[0][1]


def _checked(path: Path, table: pa.Table, kind: str, metadata: dict[bytes, bytes] | None = None) -> str:
    """The schema version of a trace file whose metadata (``table``'s, or ``metadata``) and columns are
    readable (``upgrade`` can make ``table`` this version); ``TraceFormatError`` if not."""
    checked = check_metadata(path, table.schema.metadata if metadata is None else metadata, kind)
    version: str = checked[METADATA_SCHEMA_VERSION.decode()]
    try:
        upgrade(table, version)
    except ValueError as exc:
        raise TraceFormatError(f"{path} {exc}") from exc
    return version


def _read_compacted(path: Path, skipped: dict[str, str]) -> pa.Table:
    """A compacted trace read whole; a damaged one row group by row group, the bad ones left out and
    named in ``skipped`` (skip_bad_parts)."""
    try:
        return read_checked(path, part=False)
    except TraceFormatError:
        pass
    file, version = _open_compacted(path)  # a damaged footer: nothing can be read
    metadata = file.schema_arrow.metadata
    tables = []
    for index in range(file.num_row_groups):
        try:
            group = file.read_row_group(index)
            group.validate(full=True)
            tables.append(upgrade(group.replace_schema_metadata(metadata), version))
        except Exception as exc:  # whatever a damaged row group makes the reader raise
            skipped[f"{path} row group {index}"] = f"{path} row group {index} is not readable: {exc}"
    if not tables:
        raise TraceFormatError(f"{path}: no row group of it is readable ({next(iter(skipped.values()), '')})")
    return pa.concat_tables(tables)


def _pandas(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as a DataFrame of Arrow-backed dtypes, as every frame of a trace."""
    import pandas as pd  # loaded when a frame is asked for, not with the trace

    frame: pd.DataFrame = table.to_pandas(types_mapper=pd.ArrowDtype)
    return frame
