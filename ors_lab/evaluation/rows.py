"""The rows an evaluation's result is built from, gathered as the run goes (``ors_lab.evaluation.run``).

- ``RecordedRows``: a recorded run's, taken from the tables its recorder writes.
- ``ResultRows``: a run's that records no trace, made from its events.

Both keep the rows of the run's episodes' sessions (``ANALYSIS_KINDS``, requests of tool calls only),
``slim``: without the columns no frame reads.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from ors_lab.evaluation.result import ANALYSIS_KINDS
from ors_lab.events import Event
from ors_lab.recording.recorder import Recorder
from ors_lab.recording.redact import Redactor
from ors_lab.recording.rows import Rows

if TYPE_CHECKING:
    import pyarrow as pa

# pyarrow is imported where the rows are made into tables: on the recorder's writer thread, every BATCH rows of a run
# that records nothing, and at the run's end; not before its first episodes (importing it takes a third of a second)

__all__ = ["UNREAD", "RecordedRows", "ResultRows", "of_sessions", "slim", "without"]


UNREAD = ("method", "url", "status", "headers", "body", "event", "sse_id", "retry_ms", "comment")
"""The columns no frame reads: a result keeps them null (they hold most of a request row's bytes)."""


def slim(table: pa.Table) -> pa.Table:
    import pyarrow as pa  # deferred: see above

    for name in UNREAD:
        index = table.schema.get_field_index(name)
        field = table.schema.field(index)
        table = table.set_column(index, field, pa.nulls(table.num_rows, field.type))
    return table


class RecordedRows:
    """The rows of a recorded run its result is built from: those of its sessions, from each table of
    rows the recorder writes (``ANALYSIS_KINDS``, requests of tool calls only, without the columns
    no frame reads). Subscribed to the run's ``start`` events, which name its sessions."""

    KINDS = ("start",)

    def __init__(self, recorder: Recorder) -> None:
        self._sessions: set[str | None] = set()
        self._lost: set[str] = set()
        self._tables: list[pa.Table] = []
        self._stop = recorder.watch(self._take)

    def forget(self, session: str) -> None:
        """Leave ``session`` out of the result (an episode a dead Ray worker lost: it runs again)."""
        self._lost.add(session)

    def __call__(self, event: Event) -> None:
        self._sessions.add(event.session_id)

    def _take(self, table: pa.Table) -> None:
        import pyarrow.compute as pc  # deferred: see above

        present = set(pc.unique(table["session_id"]).to_pylist())
        mine = of_sessions(table, present & self._sessions)  # the part's sessions: a small set to look up
        requests = pc.equal(mine["kind"], "request")
        self._tables.append(slim(mine.filter(pc.or_(pc.invert(requests), pc.is_valid(mine["call"])))))

    def table(self) -> pa.Table:
        import pyarrow as pa  # deferred: see above

        from ors_lab.recording.schema import SCHEMA  # deferred: pyarrow

        self._stop()
        return without(pa.concat_tables(self._tables) if self._tables else SCHEMA.empty_table(), self._lost)


class ResultRows:
    """The rows of a run that records no trace, its result is built from (``ANALYSIS_KINDS``, of its
    episodes' sessions, named by their ``start`` events: not of a session an agent opened itself;
    requests of tool calls only).

    Every ``BATCH`` rows they are converted to Arrow, without the columns no frame reads, so what a
    long run keeps grows by a few hundred bytes an episode.
    """

    BATCH = 8_192
    KINDS = ANALYSIS_KINDS

    def __init__(self) -> None:
        self._rows = Rows(Redactor(), run_id="result", t0_ns=time.monotonic_ns())
        self._tables: list[pa.Table] = []
        self._lost: set[str] = set()
        self._sessions: set[str | None] = set()
        self._lock = threading.Lock()

    def forget(self, session: str) -> None:
        """Leave ``session`` out of the result (an episode a dead Ray worker lost: it runs again)."""
        self._lost.add(session)

    def __call__(self, event: Event) -> None:
        if event.kind == "request" and getattr(event, "call", None) is None:
            return
        if event.kind == "start":
            self._sessions.add(event.session_id)
        elif event.session_id not in self._sessions:
            return
        with self._lock:
            self._rows.add(event)
            if self._rows.waiting >= self.BATCH:
                self._tables.append(slim(self._rows.table()))

    def table(self) -> pa.Table:
        import pyarrow as pa  # deferred: see above

        with self._lock:
            tables = [*self._tables, slim(self._rows.table())]
        return without(pa.concat_tables(tables), self._lost)


def without(table: pa.Table, sessions: set[str]) -> pa.Table:
    """``table`` less the rows of ``sessions``."""
    if not sessions:
        return table
    import pyarrow as pa  # deferred: see above
    import pyarrow.compute as pc

    return table.filter(pc.invert(pc.is_in(table["session_id"], value_set=pa.array(sorted(sessions), pa.string()))))


def of_sessions(table: pa.Table, sessions: set[str | None]) -> pa.Table:
    """The rows of ``sessions`` in a table of trace rows that the result is built from."""
    import pyarrow as pa  # deferred: see above
    import pyarrow.compute as pc

    mask = pc.and_(
        pc.is_in(table["kind"], value_set=pa.array(ANALYSIS_KINDS, pa.string())),
        pc.is_in(table["session_id"], value_set=pa.array([s for s in sessions if s is not None], pa.string())),
    )
    return table.filter(mask)
