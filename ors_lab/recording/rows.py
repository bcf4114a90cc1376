"""Events made trace rows: the one place that says which columns each kind of event fills.

``Rows`` takes events (``add``) and rows written by hand (``add_row``) in order, and hands them
over as Arrow tables of the trace schema (``swap``, then ``convert``). Taking an event keeps a flat
tuple of the values its row needs (its type first; an agent event's JSON, made once; httpx2 headers
as their items): plain values the garbage collector never walks, so what waits to be converted
costs no collection time, and the event's own objects are freed at once. The few events that
change what later rows mean (a ``/create`` or ``/call`` request, an ``open``, a ``close``) update
the context they give as they are taken: a session's environment, split, task index and task, from
its ``/create`` request and its ``open`` event; a tool call's tool and input, from its first
request. Converting works a column at a time: each kind's tuples are transposed into columns and
handed to Arrow whole, secrets redacted on the way (``Redactor``), the context joined in by Arrow,
and the rows put in ``seq`` order. The recorder converts in its writer thread; an evaluation
that records nothing keeps the tables in memory for its result.

A value Arrow cannot store in its column (a subscriber-published event with a reward of "high")
is stored as null, and logged; its row and every other row are kept. ``add_row`` checks its values
as it takes them, and refuses a row it cannot store whole (``TypeError``, nothing of it kept).
"""

from __future__ import annotations

import functools
import json
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import httpx2

from ors_lab.events import (
    AgentEvent,
    BaselineEvent,
    CallErrorEvent,
    ChunkEvent,
    CloseEvent,
    CommentEvent,
    DisconnectEvent,
    EpisodeEvent,
    ErrorEvent,
    Event,
    FinishEvent,
    OpenEvent,
    PingEvent,
    RequestEvent,
    ResponseEvent,
    ResultEvent,
    RetryEvent,
    RewardEvent,
    SSEEvent,
    StartEvent,
    ToolInputAvailableEvent,
    ToolInputStartEvent,
    ToolOutputAvailableEvent,
    ToolOutputErrorEvent,
    UsageEvent,
    WireEvent,
    wall_ns,
)
from ors_lab.events import compact_json as _compact
from ors_lab.recording.columns import COLUMNS, EPISODE_COLUMNS, KIND_LAYER
from ors_lab.recording.redact import Redactor, is_create_url

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["STAMPED", "Rows", "compact_json", "row_fields"]

log = logging.getLogger("ors_lab.recording")

STAMPED = ("run_id", "wall")
"""The columns computed for a whole table at once; every other one is kept per row."""
CONTEXT = ("environment", "split", "task_index", "task")
NO_CONTEXT: tuple[Any, ...] = (None, None, None, None)
NO_CALL: tuple[str | None, str | None] = (None, None)
TOKENS = ("input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens")
TEXTS = ("data", "comment", "error", "input", "task")
"""The columns the user's redaction patterns are applied to (besides URLs, headers and bodies)."""
BODIES = 1_024  # request bodies kept with what they name: a run sends the same few /create and /call bodies again
URLS = 10_000  # redacted URLs kept: a run asks the same few
HEADER_ITEMS = 4_096  # redacted header items kept: a client sends the same few headers again and again


def compact_json(value: Any) -> str | None:
    """Compact JSON text (``{"a":1}``, UTF-8, not ASCII-escaped), as the trace's JSON columns hold it;
    a string stays as it is, None stays None."""
    if value is None or isinstance(value, str):
        return value
    return _compact(value)


Columns = dict[str, Sequence[Any]]
"""Column name -> the values of a group of rows (a list, or an Arrow array)."""

Item = tuple[Any, ...]
"""A row as kept until it is converted: its event type (or ``RAW``) first, then the values the row
needs, all plain (strings, numbers, bytes, tuples of them), so the garbage collector never walks it
and an event's objects (a tool result, an input dict, httpx2 headers) are freed as soon as it is taken."""

_WIRE = ("session_id", "rollout", "call", "attempt", "exchange")
# the columns each kind of event fills from its own fields, as kept (after the type), besides "t_ns"
_OWN: dict[type[Event], tuple[str, ...]] = {
    RequestEvent: (*_WIRE, "method", "agent", "url", "headers", "body"),
    ResponseEvent: (*_WIRE, "status", "ttfb_ns", "agent", "headers", "body"),
    ChunkEvent: (*_WIRE, "size", "agent"),
    SSEEvent: (*_WIRE, "event", "data", "sse_id", "retry_ms", "agent"),
    CommentEvent: (*_WIRE, "comment", "agent"),
    DisconnectEvent: (*_WIRE, "error", "agent"),
    RetryEvent: (*_WIRE, "reason", "backoff", "task_id", "agent"),
    ResultEvent: ("session_id", "call", "task_id", "ok", "reward", "finished", "error", "reason"),
    CallErrorEvent: ("session_id", "call", "task_id", "error"),
    OpenEvent: ("session_id", "environment", "split", "task_index", "task"),
    PingEvent: ("session_id",),
    CloseEvent: ("session_id", "ok", "error"),
}


def _backoff(retry_after: Any) -> float | None:
    return retry_after if isinstance(retry_after, int | float) else None


# per agent event type: its typed columns besides data and input, and how an event gives their values
_AGENT: dict[type[AgentEvent], tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {
    StartEvent: (
        ("environment", "split", "task_index", "worker"),
        attrgetter("environment", "split", "task_index", "worker"),
    ),
    ToolInputStartEvent: (("tool",), lambda e: (e.tool_name,)),
    ToolInputAvailableEvent: (("tool",), lambda e: (e.tool_name,)),
    ToolOutputAvailableEvent: (("tool", "call"), attrgetter("tool", "call")),
    ToolOutputErrorEvent: (("tool", "call", "error", "reason"), attrgetter("tool", "call", "error", "reason")),
    RewardEvent: (("tool", "call", "reward", "finished"), attrgetter("tool", "call", "reward", "finished")),
    FinishEvent: (("reason",), lambda e: (e.finish_reason,)),
    ErrorEvent: (
        ("tool", "call", "error", "reason", "backoff"),
        lambda e: (e.tool, e.call, e.message, e.error_type, _backoff(e.retry_after)),
    ),
    UsageEvent: (TOKENS, attrgetter(*TOKENS)),
    BaselineEvent: (("environment", "split"), attrgetter("environment", "split")),
    EpisodeEvent: (
        ("environment", "split", "task_index", "reward", "finished", "error", *TOKENS, "ok", *EPISODE_COLUMNS),
        lambda e: (
            e.environment,
            e.split,
            e.task_index,
            e.reward,
            e.finished,
            e.error,
            e.input_tokens,
            e.output_tokens,
            e.reasoning_tokens,
            e.cached_tokens,
            e.error is None,
            *(getattr(e, name) for name in EPISODE_COLUMNS),
        ),
    ),
}
_NO_COLUMNS: tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]] = ((), lambda e: ())
_CALL_INPUT = (ToolOutputAvailableEvent, ToolOutputErrorEvent, RewardEvent, ErrorEvent)
"""Agent events about a tool call made: their input is the call's, as its request sent it."""


class RAW:
    """The type of a row written by hand (``add_row``): every column's value, context filled in."""


_ROW_NAMES = tuple(name for name in COLUMNS if name not in STAMPED)
_RAW_NAMES = tuple(name for name in _ROW_NAMES if name != "seq")


# Arrow, imported when the first rows are converted (on the recorder's writer thread) or a row is written by hand:
# importing pyarrow takes a third of a second, and a run's first episodes are recorded without it.


def _pa() -> Any:
    import pyarrow  # deferred: see above

    return pyarrow


def _pc() -> Any:
    import pyarrow.compute  # deferred: see above

    return pyarrow.compute


@functools.cache
def _schema() -> pa.Schema:
    from ors_lab.recording.schema import SCHEMA

    return SCHEMA


@functools.cache
def row_fields() -> list[pa.Field]:
    """The schema's fields kept per row (all but ``STAMPED``)."""
    return [field for field in _schema() if field.name not in STAMPED]


class Rows:
    """Trace rows being gathered; see the module docstring. Not thread-safe for adding: the
    recorder adds under its lock; converting may run in another thread meanwhile.

    ``t0_ns``: the monotonic clock at the trace's ``t_ns`` 0. ``first_seq``: the ``seq`` of the first
    row. ``servers`` collects the origins of the URLs requested (redacted).
    """

    def __init__(self, redactor: Redactor, *, run_id: str, t0_ns: int, first_seq: int = 0) -> None:
        self.redactor = redactor
        self.run_id = run_id
        self.t0 = t0_ns
        self.next_seq = first_seq
        self.waiting = 0  # rows kept and not yet taken
        self.servers: set[str] = set()
        self._patterns = bool(redactor.patterns)
        self._items: list[Item] = []  # in seq order
        self._first = first_seq  # the seq of self._items[0]
        self._sessions: dict[str | None, tuple[Any, ...]] = {}  # session id -> its CONTEXT values (never None)
        self._calls: dict[str | None, dict[int, tuple[str | None, str | None]]] = {}  # session -> call -> tool, input
        self._closed: deque[tuple[int, str]] = deque()  # (seq, session id) of closes: forgotten once converted
        self._changed: dict[str | None, int] = {}  # session id -> the seq of the last row that set its context
        self._workers: dict[str | None, str] = {}  # session id -> the worker its start row names (a Ray run)
        self._ended: deque[tuple[int, str | None]] = deque()  # (seq, session id) of episode rows of such sessions
        self._urls: dict[str, tuple[str, bool]] = {}  # URL -> redacted, is a /create
        # an httpx2 header item (raw name, lower-case name, value) -> its lower-case name, its JSON member
        self._header_items: dict[tuple[bytes, ...], tuple[str, str]] = {}
        self._bodies: dict[tuple[Any, bytes | None], tuple[Any, ...]] = {}  # (parser, request body) -> parsed
        self._takers: dict[type, Callable[[Any], Item]] = {}  # event type -> how an event of it is kept
        self._kinds: dict[type, tuple[tuple[str, ...], Callable[[type, Columns], None]]] = {
            RAW: (_RAW_NAMES, lambda kind, columns: None)
        }  # event type (or RAW) -> the names of its items' values after the type, what converting adds

    def __len__(self) -> int:
        return self.waiting

    # -- taking events -------------------------------------------------------------------------

    def add(self, event: Event) -> None:
        """Keep ``event`` as the next row."""
        try:
            take = self._takers[type(event)]
        except KeyError:
            take = self._taker(type(event))
        self._items.append(take(event))
        self.next_seq += 1
        self.waiting += 1

    def _taker(self, kind: type) -> Callable[[Any], Item]:
        """An event type met for the first time: how its events are kept (a subclass as its base);
        ``TypeError`` for a type no row can be made of."""
        if not issubclass(kind, Event):
            raise TypeError(f"{kind.__name__} is no event type of ors_lab.events, so it has no trace row")
        if issubclass(kind, AgentEvent):
            take, names, finish = self._agent_kind(kind)
        else:
            base = next((cls for cls in kind.__mro__ if cls in _OWN), None)
            if base is None:
                raise TypeError(f"{kind.__name__} is no event type of ors_lab.events, so it has no trace row")
            take, names, finish = self._own_kind(kind, base)
        self._takers[kind] = take
        self._kinds[kind] = (names, finish)
        return take

    def _own_kind(self, kind: type, base: type[Event]) -> tuple[Callable[[Any], Item], tuple[str, ...], Any]:
        names = (*_OWN[base], "t_ns")
        if base is RequestEvent:
            take: Callable[[Any], Item] = functools.partial(self._request, kind)
        elif base is ResponseEvent:

            def take(e: ResponseEvent) -> Item:
                return (kind, e.session_id, e.rollout, e.call, e.attempt, e.exchange, e.status, e.ttfb_ns, e.agent,
                        _plain_headers(e.headers), e.body, e.t_ns)  # fmt: skip

        elif base is OpenEvent:
            take = functools.partial(self._open, kind)
        elif base is CloseEvent:
            take = functools.partial(self._close, kind)
        else:
            take = attrgetter("__class__", *names)  # the event's own type first, then its values
        layer = kind.LAYER  # type: ignore[attr-defined]
        wire = issubclass(kind, WireEvent)

        def finish(kind: type, columns: Columns) -> None:
            rows = len(columns["t_ns"])
            columns["kind"] = [kind.kind] * rows  # type: ignore[attr-defined]
            columns["layer"] = ["agent" if a else layer for a in columns.pop("agent")] if wire else [layer] * rows
            if base is RequestEvent:
                columns["headers"] = self._headers_column(kind, columns["headers"])
                redact = self.redactor.body  # parses only a body that may hold a sensitive key
                columns["body"] = [redact(b) if b else b for b in columns["body"]]
            elif base is ResponseEvent:
                columns["headers"] = self._headers_column(kind, columns["headers"])
                if self._patterns:
                    columns["body"] = [self.redactor.patterns_in(b) if b else b for b in columns["body"]]

        return take, names, finish

    def _agent_kind(self, kind: type) -> tuple[Callable[[Any], Item], tuple[str, ...], Any]:
        known = next((cls for cls in kind.__mro__ if cls in _AGENT), None)
        typed_names, typed = _AGENT[known] if known is not None else _NO_COLUMNS
        episode = issubclass(kind, EpisodeEvent)  # its data is its record; every other one's, its wire form
        start = issubclass(kind, StartEvent)  # names the worker of its session's rows
        workers, ended = self._workers, self._ended
        own_input = issubclass(kind, ToolInputAvailableEvent)
        call_input = issubclass(kind, _CALL_INPUT)
        calls = self._calls

        def take(e: Any) -> Item:
            if own_input:
                given = compact_json(e.input)
            elif call_input:  # the call's input as its request sent it (joined when converting), else the event's
                given = None if e.call in calls.get(e.session_id, ()) else compact_json(e.input)
            else:
                given = None
            data = _compact(e.record()) if episode else e.to_json()
            if start and e.worker is not None:
                workers[e.session_id] = e.worker
            elif episode and e.session_id in workers:
                ended.append((self.next_seq, e.session_id))
            return (kind, e.session_id, e.rollout, e.t_ns, data, given, *typed(e))

        def finish(kind: type, columns: Columns) -> None:
            rows = len(columns["t_ns"])
            columns["kind"] = [kind.kind] * rows  # type: ignore[attr-defined]
            columns["layer"] = ["agent"] * rows
            if own_input or call_input or episode:  # a tool input, as its /call body is: sensitive keys redacted
                redact = self.redactor.json_text
                columns["input"] = [redact(text) for text in columns["input"]]
                columns["data"] = [redact(text) for text in columns["data"]]

        return take, ("session_id", "rollout", "t_ns", "data", "input", *typed_names), finish

    def _request(self, kind: type, e: RequestEvent) -> Item:
        """A request: a /create sets its session's context; a tool call's first request, the call's."""
        sid, call = e.session_id, e.call
        url, creates = self._url(e.url)
        if sid is not None and creates:
            self._sessions[sid] = self._body_meaning(_session_of_create, e.body)
            self._changed[sid] = self.next_seq
        if call is not None:
            of_session = self._calls.get(sid)
            if of_session is None:
                of_session = self._calls[sid] = {}
            if call not in of_session:
                of_session[call] = self._body_meaning(_tool_and_input, e.body)
                self._changed[sid] = self.next_seq
        return (kind, sid, e.rollout, call, e.attempt, e.exchange, e.method, e.agent, url, _plain_headers(e.headers),
                e.body, e.t_ns)  # fmt: skip

    def _open(self, kind: type, e: OpenEvent) -> Item:
        task = self.redactor.json_text(compact_json(e.task))
        if e.session_id is not None:
            given = (e.environment, e.split, e.task_index, task)
            self._sessions[e.session_id] = _merged(self._sessions.get(e.session_id), given)
            self._changed[e.session_id] = self.next_seq
        return (kind, e.session_id, e.environment, e.split, e.task_index, task, e.t_ns)

    def _close(self, kind: type, e: CloseEvent) -> Item:
        if e.session_id is not None:  # nothing of a session follows its close: forgotten once its rows are made
            self._closed.append((self.next_seq, e.session_id))
        return (kind, e.session_id, e.ok, e.error, e.t_ns)

    # -- rows written by hand --------------------------------------------------------------------

    def add_row(self, kind: str, t_ns: int, columns: Mapping[str, Any]) -> None:
        """Keep one row given as column values (see ``Recorder.emit``); raises ``TypeError`` for a row
        it cannot store whole, keeping nothing of it."""
        row: dict[str, Any] = dict.fromkeys(_RAW_NAMES)
        for name, value in columns.items():
            if name in ("seq", "t_ns", *STAMPED, "kind"):
                raise TypeError(f"{name!r} is stamped by the recorder; emit() takes the other columns")
            field = _schema().field(name) if name in COLUMNS else None
            if field is None:
                raise TypeError(f"{name!r} is not a trace column; see docs/trace-format.md for the columns")
            if name == "headers":
                row[name] = self._headers(value)
            elif value is not None:
                row[name] = _cell(field, value)
        url, creates = self._url(row["url"]) if row["url"] is not None else (None, False)
        row["url"] = url
        if row["body"]:
            redact = self.redactor.body if kind == "request" else self.redactor.patterns_in
            row["body"] = redact(row["body"])
        for name in ("input", "task"):  # JSON text: its sensitive keys redacted, as in a request body
            if row[name] is not None:
                row[name] = self.redactor.json_text(row[name])
        row["kind"] = kind
        if row["layer"] is None:
            row["layer"] = KIND_LAYER.get(kind, "agent")
        if kind == "episode" and row["layer"] == "agent" and not any(name in columns for name in EPISODE_COLUMNS):
            row.update(_episode_figures(row["data"]))
        sid, call = row["session_id"], row["call"]
        raw_body = columns.get("body")
        raw_body = raw_body if isinstance(raw_body, bytes) else row["body"]
        # what changes the recorder's state comes last: a refused row leaves nothing behind
        if sid is not None:
            if kind == "request" and creates:
                context = self._sessions[sid] = self._body_meaning(_session_of_create, raw_body)
                self._changed[sid] = self.next_seq
            elif kind == "open":
                given = tuple(row[name] for name in CONTEXT)
                context = self._sessions[sid] = _merged(self._sessions.get(sid), given)
                self._changed[sid] = self.next_seq
            else:
                context = self._sessions.get(sid, NO_CONTEXT)
            for name, known in zip(CONTEXT, context, strict=True):
                if row[name] is None:
                    row[name] = known
        if call is not None:
            of_session = self._calls.setdefault(sid, {})
            if kind == "request" and call not in of_session:
                of_session[call] = self._body_meaning(_tool_and_input, raw_body)
                self._changed[sid] = self.next_seq
            tool, tool_input = of_session.get(call, NO_CALL)
            if "tool" not in columns:
                row["tool"] = tool
            if "input" not in columns:
                row["input"] = tool_input
        if self._patterns:
            text = self.redactor.text
            for name in TEXTS:
                if isinstance(row[name], str):
                    row[name] = text(row[name])
        row["t_ns"] = t_ns
        if kind == "close" and sid is not None:
            self._closed.append((self.next_seq, sid))
        self._items.append((RAW, *row.values()))
        self.next_seq += 1
        self.waiting += 1

    # -- redaction and context -----------------------------------------------------------------

    def _url(self, url: str) -> tuple[str, bool]:
        known = self._urls.get(url)
        if known is None:
            known = (self.redactor.url(url), is_create_url(url))
            if len(self._urls) < URLS:
                self._urls[url] = known
            self.servers.add(_origin(known[0]))
        return known

    def _headers(self, headers: Any) -> str | None:
        """Headers as the JSON text of their redacted items (names lower-cased, repeats joined)."""
        if headers is None or isinstance(headers, str):
            return headers
        if type(headers) is tuple and headers and headers[0] is HTTPX2_ITEMS:  # as _plain_headers keeps them
            return self._header_list_json(headers[1:]) or self._headers_json(
                _decoded([(i[0], i[-1]) for i in headers[1:]])
            )
        if type(headers) is httpx2.Headers:
            items = getattr(headers, "_list", None)  # (raw name, lower-case name, value): httpx2's own list
            if type(items) is list:
                return self._header_list_json(items) or self._headers_json(headers)
        return self._headers_json(headers)

    def _header_list_json(self, items: Sequence[tuple[bytes, bytes, bytes]]) -> str | None:
        """The JSON of httpx2's header items, each redacted and made JSON once (a client sends the same
        few headers again and again, and a server answers with the same few); None for a repeated name."""
        cache = self._header_items
        names: set[str] = set()
        members: list[str] = []
        for item in items:
            known = cache.get(item)
            if known is None:
                ((key, redacted),) = self.redactor.header_items(_decoded([(item[0], item[-1])])).items()
                if len(cache) >= HEADER_ITEMS:
                    cache.clear()
                known = cache[item] = (key, f"{_compact(key)}:{_compact(redacted)}")
            name, member = known
            if name in names:  # a repeated name: header_items joins the values
                return None
            names.add(name)
            members.append(member)
        return "{" + ",".join(members) + "}"

    def _headers_json(self, headers: Any) -> str | None:
        if isinstance(headers, bytes | bytearray):
            forms = "httpx2.Headers, a mapping, (name, value) pairs or JSON text"
            raise TypeError(f"headers are {forms}, not {bytes(headers[:60])!r}")
        raw = getattr(headers, "raw", None)  # an httpx.Headers and the like
        items = _decoded(raw) if raw is not None else (headers.items() if isinstance(headers, Mapping) else headers)
        return compact_json(self.redactor.header_items(items))

    def _body_meaning(self, parse: Callable[[bytes | None], tuple[Any, ...]], body: bytes | None) -> tuple[Any, ...]:
        """``parse(body)`` (a /create body's context, a /call body's tool and input) of the body as it is
        written, its secrets redacted; cached by body."""
        if not isinstance(body, bytes):
            return parse(body)
        key = (parse, body)
        known = self._bodies.get(key)
        if known is None:
            known = parse(self.redactor.body(body) if body else body)
            if len(self._bodies) >= BODIES:
                self._bodies.clear()
            self._bodies[key] = known
        return known

    def _headers_column(self, kind: type, values: Sequence[Any]) -> list[str | None]:
        out = []
        for headers in values:
            try:
                out.append(self._headers(headers))
            except TypeError as exc:
                log.error("ors_lab: a %s event is recorded with null headers: %s", kind.kind, exc)  # type: ignore[attr-defined]
                out.append(None)
        return out

    # -- handing rows over as Arrow --------------------------------------------------------------

    def swap(self) -> tuple[int, list[Any]]:
        """Take the rows kept so far (cheap: call it under the lock, and ``convert`` outside it)."""
        first, items = self._first, self._items
        self._items = []
        self._first = self.next_seq
        self.waiting = 0
        return first, items

    def convert(self, taken: tuple[int, list[Any]]) -> pa.Table:
        """The rows ``swap`` took, as one table of the trace schema in ``seq`` order."""
        first, items = taken
        groups: dict[type, tuple[list[int], list[Item]]] = {}
        for position, item in enumerate(items, first):
            group = groups.get(item[0])
            if group is None:
                group = groups[item[0]] = ([], [])
            group[0].append(position)
            group[1].append(item)
        parts = []
        t0 = self.t0
        for kind, (seqs, group_items) in groups.items():
            names, finish = self._kinds[kind]
            columns: Columns = dict(zip(names, list(zip(*group_items, strict=True))[1:], strict=True))
            finish(kind, columns)
            columns["seq"] = seqs
            columns["t_ns"] = [t - t0 for t in columns["t_ns"]]
            parts.append(_table(columns, len(seqs)))
        pa, pc = _pa(), _pc()
        table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        table = self._with_context(table)
        if self._patterns:
            table = self._redacted_texts(table)
        if len(parts) > 1:
            table = table.take(pc.sort_indices(table["seq"]))
        end = first + len(items)
        while self._closed and self._closed[0][0] < end:  # their rows are made: the sessions can go
            closed, sid = self._closed.popleft()
            if self._changed.get(sid, -1) < closed:  # unless the id was opened again since (a hand-written trace)
                self._sessions.pop(sid, None)
                self._calls.pop(sid, None)
                self._changed.pop(sid, None)
        while self._ended and self._ended[0][0] < end:  # an episode's outcome is its last row: its worker can go
            self._workers.pop(self._ended.popleft()[1], None)
        wall = pc.add(pc.divide(table["t_ns"], 1000), wall_ns(self.t0) // 1000)
        run_id = pa.repeat(pa.scalar(self.run_id, pa.string()), table.num_rows)
        schema = _schema()
        table = table.append_column("run_id", run_id).append_column("wall", wall.cast(schema.field("wall").type))
        return table.select(list(COLUMNS)).cast(schema)

    def _with_context(self, table: pa.Table) -> pa.Table:
        """Each row's session context and tool call context, where the row gives none itself."""
        pa, pc = _pa(), _pc()
        sessions = pc.unique(table["session_id"]).drop_null().to_pylist()
        if not sessions:
            return table
        contexts = [self._sessions.get(sid, NO_CONTEXT) for sid in sessions]
        where = pc.index_in(table["session_id"], value_set=pa.array(sessions, pa.string()))
        for position, name in enumerate(CONTEXT):
            known = pa.array([context[position] for context in contexts], type=_schema().field(name).type)
            table = _fill(table, name, known.take(where))
        if self._workers:
            workers = pa.array([self._workers.get(sid) for sid in sessions], pa.string())
            table = _fill(table, "worker", workers.take(where))
        calls = pc.binary_join_element_wise(table["session_id"], pc.cast(table["call"], pa.string()), "\x1f")
        keys = pc.unique(calls).drop_null().to_pylist()
        if keys:
            found = []
            for key in keys:
                sid, _, call = key.rpartition("\x1f")
                found.append(self._calls.get(sid, {}).get(int(call), NO_CALL))
            where = pc.index_in(calls, value_set=pa.array(keys, pa.string()))
            for position, name in enumerate(("tool", "input")):
                table = _fill(table, name, pa.array([call[position] for call in found], pa.string()).take(where))
        return table

    def _redacted_texts(self, table: pa.Table) -> pa.Table:
        text, schema = self.redactor.text, _schema()
        for name in TEXTS:
            values = [None if v is None else text(v) for v in table[name].to_pylist()]
            field = schema.field(name)
            table = table.set_column(table.schema.get_field_index(name), field, _pa().array(values, field.type))
        return table

    def table(self) -> pa.Table:
        """Every row kept so far, taken, as one table (empty: the schema, no rows)."""
        taken = self.swap()
        return self.convert(taken) if taken[1] else _schema().empty_table()


def _table(columns: Columns, rows: int) -> pa.Table:
    """A group's columns as a table of every row field (those it does not fill are null)."""
    pa, fields = _pa(), row_fields()
    arrays = []
    for field in fields:
        values = columns.get(field.name)
        arrays.append(pa.nulls(rows, field.type) if values is None else _array(field, values))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _array(field: pa.Field, values: Sequence[Any]) -> pa.Array:
    """One column; a value its column cannot hold is stored as null (and logged)."""
    pa = _pa()
    try:
        return pa.array(values, type=field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        pass
    cells = []
    for value in values:
        try:
            cells.append(None if value is None else _cell(field, value))
        except TypeError as exc:
            log.error("ors_lab: a row is recorded with a null %s: %s", field.name, exc)
            cells.append(None)
    return pa.array(cells, type=field.type)


def _fill(table: pa.Table, name: str, known: pa.Array) -> pa.Table:
    """``name`` where the rows give it, else ``known``."""
    index = table.schema.get_field_index(name)
    column = table.column(index)
    if column.null_count == 0:
        return table
    return table.set_column(index, table.schema.field(index), _pc().coalesce(column, known))


def _episode_figures(record: str | None) -> dict[str, Any]:
    """An episode row's typed figures (``EPISODE_COLUMNS``) from its record (its ``data``), as an evaluation's
    episode rows hold them; ``TypeError`` for a record that is not a JSON object or a figure of the wrong type."""
    if record is None:
        return {}
    try:
        value = json.loads(record)
    except ValueError as exc:
        raise TypeError(f"an episode row's data is its record, a JSON object: {record!r:.80} is not JSON") from exc
    if not isinstance(value, dict):
        raise TypeError(f"an episode row's data is its record, a JSON object, not {record!r:.80}")
    schema = _schema()
    return {
        name: None if value.get(name) is None else _cell(schema.field(name), value[name]) for name in EPISODE_COLUMNS
    }


def _cell(field: pa.Field, value: Any) -> Any:
    """``value`` as its column ``field`` stores it (a string column takes any JSON-able value, as its
    JSON text); ``TypeError`` naming the column when it cannot hold it."""
    pa = _pa()
    kind = field.type
    if type(value) is str and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return value
    if type(value) is bytes and pa.types.is_large_binary(kind):
        return value
    try:
        return pa.array([value], type=kind)[0].as_py()
    except (pa.ArrowTypeError, pa.ArrowInvalid, OverflowError, TypeError, ValueError) as exc:
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            try:
                return compact_json(value)
            except (TypeError, ValueError):
                pass
        raise TypeError(f"trace column {field.name!r} ({kind}) cannot hold {value!r:.80}: {exc}") from exc


HTTPX2_ITEMS = "httpx2 header items"
"""The first item of httpx2 headers as kept until converted: (HTTPX2_ITEMS, (raw name, lower-case name,
value), ...), plain tuples the garbage collector does not walk."""


def _plain_headers(headers: Any) -> Any:
    """httpx2 headers as plain tuples (``HTTPX2_ITEMS``); any other form as it is."""
    if type(headers) is httpx2.Headers:
        items = getattr(headers, "_list", None)
        if type(items) is list:
            return (HTTPX2_ITEMS, *items)
    return headers


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _session_of_create(body: bytes | None) -> tuple[Any, ...]:
    """The task identity a /create body names (env_name, split/index or task_spec), as CONTEXT."""
    try:
        value = json.loads(body or b"")
    except ValueError:
        return NO_CONTEXT
    if not isinstance(value, dict):
        return NO_CONTEXT
    return (value.get("env_name"), value.get("split"), value.get("index"), compact_json(value.get("task_spec")))


def _decoded(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]


def _merged(known: tuple[Any, ...] | None, given: tuple[Any, ...]) -> tuple[Any, ...]:
    """A session's context after its ``open``: the given values where there are some, else what was known."""
    return tuple(new if new is not None else old for new, old in zip(given, known or NO_CONTEXT, strict=True))


def _tool_and_input(body: bytes | None) -> tuple[str | None, str | None]:
    """The tool name and input (as JSON) of a /call request body."""
    try:
        value = json.loads(body or b"")
    except ValueError:
        return None, None
    if not isinstance(value, dict):
        return None, None
    return value.get("name"), compact_json(value.get("input"))
