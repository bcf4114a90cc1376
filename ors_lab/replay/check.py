"""The conformance checker: does every ``/call`` stream of a trace follow the ORS protocol?

``check_trace(trace)`` returns one ``Violation`` per broken rule, sorted by sequence number;
``format_violations`` prints them one per line with a summary (``ors-lab check TRACE``).

A ``/call`` stream is the rows of one exchange (the ``exchange`` column, within its session) whose
request URL path ends with ``/call`` and whose response is 200 with an SSE content type. Its rules, after
``shared/ors-protocol.md`` sections 5 and 9 (``RULES`` holds them as one-line texts):

- ``task-id-first``: the first event is ``task_id``; the one exception is the server's answer to
  an unknown resume, an ``error`` event with data ``unknown task_id`` and no ``task_id`` first;
- ``one-terminal``: one terminal event (``end`` or ``error``), with nothing after it;
- ``no-terminal``: a stream with no terminal event, unless a later attempt of the same call has
  one (the client resumed the dropped stream, and the resume completed);
- ``chunks-then-end``: only ``chunk`` events between ``task_id`` and the terminal event;
- ``invalid-json``: the ``chunk`` data and the ``end`` data, joined, are a ``RunToolOutput``
  (checked by the one ``CallAssembler``, as the client checks it);
- ``ok-false-in-end``: ``ok:false`` comes only in the ``end`` payload, never as an ``error``
  event's data;
- ``pings``: no silence longer than ``ping_interval + ping_slack`` seconds between consecutive rows
  of a stream, from its response to its terminal event (the server pings every 10 s);
- ``session-closed``: every session with an ``open`` row has a ``close`` row, and the server confirmed
  its delete (not ``ok`` false).

Rows that carry no ``exchange`` (none do in a trace this version writes) are not checked.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
from httpx2 import ServerSentEvent

from ors_lab.analysis.trace import Trace
from ors_lab.protocol.call import UNKNOWN_TASK_ID, CallAssembler
from ors_lab.protocol.errors import MalformedStreamError

__all__ = ["RULES", "CallStream", "Violation", "call_streams", "check_trace", "format_violations"]

RULES = {
    "task-id-first": "the first event of a /call stream is task_id (or, alone, error: unknown task_id)",
    "one-terminal": "a /call stream has one terminal event (end or error) and nothing after it",
    "no-terminal": "a /call stream without end or error was resumed by a later attempt that completed",
    "chunks-then-end": "only chunk events come between task_id and the terminal event",
    "invalid-json": "the chunk and end data, joined, are a valid RunToolOutput",
    "ok-false-in-end": "ok:false comes only inside the end payload, never as an error event's data",
    "pings": "a running call is never silent for longer than the ping interval plus the slack",
    "session-closed": "every session that was opened is closed, its delete confirmed by the server",
}
"""Every rule's id and what it requires."""

TERMINAL = frozenset({"end", "error"})
STREAM_KINDS = ("chunk", "event", "comment", "disconnect")
SHOWN = 3  # rows named in a message before "and N more"
PREVIEW = 60  # characters of event data quoted in a message


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: its ``rule`` id, what is wrong, where (session, call, exchange, seqs)."""

    rule: str
    message: str
    session_id: str | None = None
    call: int | None = None
    exchange: int | None = None
    seqs: tuple[int, ...] = ()

    def __str__(self) -> str:
        where = [_seq_range(self.seqs)]
        if self.session_id is not None:
            where.append(f"session {self.session_id}")
        if self.call is not None:
            where.append(f"call {self.call}")
        return f"{' '.join(where)} [{self.rule}] {self.message}"


@dataclass(frozen=True, slots=True)
class CallStream:
    """One ``/call`` response stream: its exchange, call, attempt and request and response rows."""

    exchange: int
    session_id: str | None
    call: int | None
    attempt: int | None
    request_seq: int
    response_seq: int
    response_t_ns: int


def call_streams(trace: Trace) -> list[CallStream]:
    """Every ``/call`` exchange of ``trace`` answered 200 with an SSE stream, in request order."""
    table = trace.table
    columns = ["seq", "t_ns", "kind", "session_id", "call", "attempt", "exchange", "url", "status", "headers"]
    rows = _rows(table, ("request", "response"), columns)
    requests = {_key(row): row for row in rows if row["kind"] == "request" and row["exchange"] is not None}
    streams = []
    for response in rows:
        request = requests.get(_key(response))
        if response["kind"] != "response" or request is None or response["status"] != 200:
            continue
        if not urlsplit(request["url"] or "").path.endswith("/call") or not _is_sse(response["headers"]):
            continue
        streams.append(
            CallStream(
                exchange=response["exchange"],
                session_id=request["session_id"],
                call=request["call"],
                attempt=request["attempt"],
                request_seq=request["seq"],
                response_seq=response["seq"],
                response_t_ns=response["t_ns"],
            )
        )
    return sorted(streams, key=lambda stream: stream.request_seq)


def check_trace(trace: Trace, *, ping_interval: float = 10.0, ping_slack: float = 2.5) -> list[Violation]:
    """Every violation of the ``RULES`` in ``trace``, sorted by sequence number.

    ``ping_interval`` is how often the server pings a running call (10 s on both reference
    servers); a silence longer than ``ping_interval + ping_slack`` seconds is a violation.
    """
    if not ping_interval > 0 or not ping_slack >= 0:
        raise ValueError(f"ping_interval must be > 0 and ping_slack >= 0, not {ping_interval!r} and {ping_slack!r}")
    streams = call_streams(trace)
    columns = ["seq", "t_ns", "kind", "session_id", "exchange", "event", "data", "comment", "error"]
    rows_of: dict[tuple[str | None, int], list[dict[str, Any]]] = defaultdict(list)
    wanted = {(stream.session_id, stream.exchange) for stream in streams}
    for row in _rows(trace.table, STREAM_KINDS, columns):
        key = _key(row)
        if key in wanted:
            rows_of[key].append(row)
    # the last attempt of each call whose stream reached end or error
    completed: dict[tuple[str | None, int], int] = {}
    for stream in streams:
        if stream.call is not None and _first_terminal(rows_of[stream.session_id, stream.exchange]) is not None:
            key = (stream.session_id, stream.call)
            completed[key] = max(completed.get(key, 0), stream.attempt or 0)
    limit_ns = round((ping_interval + ping_slack) * 1e9)
    violations: list[Violation] = []
    for stream in streams:
        last = completed.get((stream.session_id, stream.call), 0) if stream.call is not None else 0
        resumed = last > (stream.attempt or 0)
        rows = rows_of[stream.session_id, stream.exchange]
        violations.extend(_StreamCheck(stream, rows, resumed=resumed, limit_ns=limit_ns).run())
    violations.extend(_unclosed_sessions(trace))
    return sorted(violations, key=lambda v: (v.seqs, v.rule))


def format_violations(violations: Sequence[Violation], *, streams: int | None = None) -> str:
    """One line per violation (``seq 12-15 session S call 2 [rule] message``), then a summary line.

    ``streams`` is how many call streams were checked, for the summary.
    """
    lines = [str(violation) for violation in violations]
    checked = "" if streams is None else f"{streams} call stream{'' if streams == 1 else 's'} checked"
    if not violations:
        lines.append(f"{checked}, no violations" if checked else "no violations")
    else:
        by_rule = Counter(violation.rule for violation in violations)
        counts = ", ".join(f"{count} {rule}" for rule, count in sorted(by_rule.items()))
        count = len(violations)
        summary = f"{count} violation{'' if count == 1 else 's'} ({counts})"
        lines.append(f"{summary}; {checked}" if checked else summary)
    return "\n".join(lines)


class _StreamCheck:
    """The stream rules over one stream's rows (chunk, event, comment and disconnect, in order)."""

    def __init__(self, stream: CallStream, rows: list[dict[str, Any]], *, resumed: bool, limit_ns: int) -> None:
        self.stream = stream
        self.rows = rows
        self.events = [row for row in rows if row["kind"] == "event"]
        self.resumed = resumed
        self.limit_ns = limit_ns
        self.found: list[Violation] = []

    def run(self) -> list[Violation]:
        terminal = _first_terminal(self.rows)
        self._task_id_first()
        self._terminal(terminal)
        self._between(terminal)
        self._payload(terminal)
        self._ok_false()
        self._pings(terminal)
        return self.found

    def _add(self, rule: str, message: str, seqs: Iterable[int]) -> None:
        stream = self.stream
        if stream.attempt is not None and stream.attempt > 1:
            message = f"attempt {stream.attempt}: {message}"
        self.found.append(
            Violation(rule, message, stream.session_id, stream.call, stream.exchange, tuple(sorted(set(seqs))))
        )

    def _task_id_first(self) -> None:
        if not self.events:
            return
        first = self.events[0]
        if first["event"] == "task_id" or (first["event"] == "error" and first["data"] == UNKNOWN_TASK_ID):
            return
        self._add("task-id-first", f"the first event is {_describe(first)}, not 'task_id'", [first["seq"]])

    def _terminal(self, terminal: dict[str, Any] | None) -> None:
        if terminal is None:
            if self.resumed:
                return
            stream = self.stream
            last = self.rows[-1]["seq"] if self.rows else stream.response_seq
            drops = [row for row in self.rows if row["kind"] == "disconnect"]
            how = f"the connection dropped ({drops[0]['error']})" if drops else "the stream ended"
            self._add(
                "no-terminal",
                f"{how} after {len(self.events)} event(s) with no 'end' or 'error', "
                "and no later attempt of the call completed",
                [stream.response_seq, last],
            )
            return
        after = [row for row in self.rows if row["seq"] > terminal["seq"] and row["kind"] in ("event", "comment")]
        if after:
            self._add(
                "one-terminal",
                f"{_describe(terminal)} at seq {terminal['seq']} is followed by {_describe_all(after)}; "
                "nothing may follow the terminal event",
                [terminal["seq"], *(row["seq"] for row in after)],
            )

    def _between(self, terminal: dict[str, Any] | None) -> None:
        body = [row for row in self.events[1:] if terminal is None or row["seq"] < terminal["seq"]]
        wrong = [row for row in body if row["event"] != "chunk"]
        if wrong:
            self._add(
                "chunks-then-end",
                f"{_describe_all(wrong)} between the first event and the terminal event; only 'chunk' may come there",
                [row["seq"] for row in wrong],
            )

    def _payload(self, terminal: dict[str, Any] | None) -> None:
        """The chunks and the end, joined, through the assembler the client uses."""
        if terminal is None or terminal["event"] != "end":
            return
        chunks = [row for row in self.events if row["event"] == "chunk" and row["seq"] < terminal["seq"]]
        first = self.events[0]  # there is one: the terminal event
        task_id = first["data"] if first["event"] == "task_id" else "(none)"  # (none): task-id-first said so
        assembler = CallAssembler()
        assembler.feed(ServerSentEvent(event="task_id", data=task_id or ""))
        for row in chunks:
            assembler.feed(ServerSentEvent(event="chunk", data=row["data"] or ""))
        try:
            assembler.feed(ServerSentEvent(event="end", data=terminal["data"] or ""))
        except MalformedStreamError as exc:
            self._add("invalid-json", exc.message, [*(row["seq"] for row in chunks), terminal["seq"]])

    def _ok_false(self) -> None:
        for row in self.events:
            if row["event"] != "error":
                continue
            try:
                value = json.loads(row["data"] or "")
            except ValueError:
                continue
            if isinstance(value, dict) and value.get("ok") is False:
                self._add(
                    "ok-false-in-end",
                    f"an 'error' event carries a result with ok:false ({_preview(row['data'])}); "
                    "a logic failure is sent as the 'end' payload, 'error' is for a tool that raised",
                    [row["seq"]],
                )

    def _pings(self, terminal: dict[str, Any] | None) -> None:
        stream = self.stream
        timed = [("response", stream.response_seq, stream.response_t_ns)]
        timed += [(_label(row), row["seq"], row["t_ns"]) for row in self.rows]
        if terminal is not None:
            timed = [item for item in timed if item[1] <= terminal["seq"]]
        limit = self.limit_ns / 1e9
        for (kind_a, seq_a, t_a), (kind_b, seq_b, t_b) in pairwise(timed):
            if t_b - t_a > self.limit_ns:
                self._add(
                    "pings",
                    f"{(t_b - t_a) / 1e9:.2f} s of silence between the {kind_a} at seq {seq_a} and the {kind_b} "
                    f"at seq {seq_b} while the call ran (more than {limit:g} s without a ping)",
                    [seq_a, seq_b],
                )


def _unclosed_sessions(trace: Trace) -> list[Violation]:
    """Sessions opened and never closed, or whose delete the server never confirmed (``close`` with ``ok``
    false; older traces have no ``ok`` on ``close`` rows: each counts as confirmed)."""
    rows = _rows(trace.table, ("open", "close"), ["seq", "kind", "session_id", "ok", "error"])
    closed = {row["session_id"] for row in rows if row["kind"] == "close" and row["ok"] is not False}
    failed = {row["session_id"]: row for row in rows if row["kind"] == "close" and row["ok"] is False}
    partial = " (the trace is partial: its recording never finished)" if trace.partial else ""
    violations = []
    for row in rows:
        sid = row["session_id"]
        if row["kind"] != "open" or sid in closed:
            continue
        if sid in failed:
            close = failed[sid]
            message = (
                f"the session was opened at seq {row['seq']} and its delete at seq {close['seq']} failed "
                f"({close['error']}): the server may still hold it"
            )
            seqs: tuple[int, ...] = (row["seq"], close["seq"])
        else:
            message = f"the session was opened at seq {row['seq']} and never closed{partial}"
            seqs = (row["seq"],)
        violations.append(Violation("session-closed", message, session_id=sid, seqs=seqs))
    return violations


def _rows(table: pa.Table, kinds: Iterable[str], columns: list[str]) -> list[dict[str, Any]]:
    """The rows of the given kinds, with only the given columns, as dicts in seq order."""
    mask = pc.is_in(table["kind"], value_set=pa.array(list(kinds), type=pa.string()))
    rows: list[dict[str, Any]] = table.filter(mask).select(columns).to_pylist()
    return rows


def _key(row: dict[str, Any]) -> tuple[str | None, int]:
    """A row's exchange, qualified by its session: each client numbers its own exchanges, and
    several clients may record into one trace (a session belongs to one client)."""
    return row["session_id"], row["exchange"]


def _first_terminal(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((row for row in rows if row["kind"] == "event" and row["event"] in TERMINAL), None)


def _is_sse(headers: str | None) -> bool:
    try:
        value = json.loads(headers or "{}")
    except ValueError:
        return False
    if not isinstance(value, dict):
        return False
    content_type = next((v for k, v in value.items() if str(k).lower() == "content-type"), "")
    return isinstance(content_type, str) and content_type.strip().lower().startswith("text/event-stream")


def _seq_range(seqs: Sequence[int]) -> str:
    if not seqs:
        return "seq -"
    low, high = min(seqs), max(seqs)
    return f"seq {low}" if low == high else f"seq {low}-{high}"


def _preview(data: str | None) -> str:
    text = data or ""
    return repr(text if len(text) <= PREVIEW else f"{text[:PREVIEW]}...")


def _describe(row: dict[str, Any]) -> str:
    if row["kind"] == "comment":
        return "a comment"
    if row["event"] in ("task_id", "chunk", "end"):
        return f"{row['event']!r}"
    return f"{row['event']!r} ({_preview(row['data'])})"


def _label(row: dict[str, Any]) -> str:
    """A stream row in a few words: ``'end' event``, ``comment``, ``network chunk``, ``disconnect``."""
    kind = row["kind"]
    if kind == "event":
        return f"{row['event']!r} event"
    return "network chunk" if kind == "chunk" else str(kind)


def _describe_all(rows: Sequence[dict[str, Any]]) -> str:
    named = ", ".join(f"{_describe(row)} at seq {row['seq']}" for row in rows[:SHOWN])
    more = len(rows) - SHOWN
    return f"{named} and {more} more" if more > 0 else named
