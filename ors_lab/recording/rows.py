"""Events made trace rows: the one place that says which columns each kind of event fills.

``Rows`` takes events (``add``) or rows written by hand (``add_row``), in order, and keeps each as
a tuple of its kind's columns: the event's own values, its context (a session's environment, split,
task index and task, from its ``/create`` request and its ``open`` event; a tool call's tool and
input, from its first request), secrets redacted (``Redactor``). ``take()`` hands the rows kept so
far over as one Arrow table of the trace schema, in ``seq`` order: each kind's tuples are converted
by Arrow as one struct array, so no Python work is left per value. The recorder writes such tables
as parts; an evaluation keeps them in memory for its result.

A value Arrow cannot store in its column (a subscriber-published event with a reward of "high")
is stored as null, and logged; its row and every other row are kept. ``add_row`` checks its values
as it takes them, and refuses a row it cannot store whole (``TypeError``, nothing of it kept).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx2
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.events import (
    AgentEvent,
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
    wall_ns,
)
from ors_lab.recording.redact import Redactor, is_create_url
from ors_lab.recording.schema import KIND_LAYER, SCHEMA

__all__ = ["ROW_FIELDS", "STAMPED", "Rows", "compact_json"]

log = logging.getLogger("ors_lab.recording")

STAMPED = ("run_id", "wall")
"""The columns computed for a whole table at once; every other one is kept per row."""
ROW_FIELDS = [field for field in SCHEMA if field.name not in STAMPED]
_FIELD = {field.name: field for field in SCHEMA}
CONTEXT = ("environment", "split", "task_index", "task")
NO_CONTEXT: tuple[Any, ...] = (None, None, None, None)
NO_CALL: tuple[str | None, str | None] = (None, None)
TOKENS = ("input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens")
TEXTS = frozenset({"data", "comment", "error", "input", "task"})
"""The columns the user's redaction patterns are applied to (besides URLs, headers and bodies)."""
BODIES = 1_024  # request bodies kept with what they name: a run sends the same few /create and /call bodies again
URLS = 10_000  # redacted URLs kept: a run asks the same few
HEADER_ITEMS = 4_096  # redacted header items kept: a client sends the same few headers again and again

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)  # json.dumps makes one per call


def compact_json(value: Any) -> str | None:
    """Compact JSON text (``{"a":1}``, UTF-8, not ASCII-escaped), as the trace's JSON columns hold it;
    a string stays as it is, None stays None."""
    if value is None or isinstance(value, str):
        return value
    return _ENCODER.encode(value)


class _Kind:
    """How the rows of one kind of event are kept: their columns, and the tuples waiting."""

    __slots__ = ("columns", "index", "kind", "layer", "rows", "struct", "texts")

    def __init__(self, kind: str | None, layer: str | None, columns: Iterable[str]) -> None:
        self.kind = kind  # None: the rows hold their kind (hand-written rows)
        self.layer = layer  # None: the rows hold their layer
        self.columns = ("seq", "t_ns", *columns)
        self.index = {name: i for i, name in enumerate(self.columns)}
        self.struct = pa.struct([_FIELD[name] for name in self.columns])
        self.texts = tuple(i for i, name in enumerate(self.columns) if name in TEXTS)
        self.rows: list[tuple[Any, ...]] = []


_WIRE = ("layer", "session_id", *CONTEXT, "rollout", "call", "attempt", "exchange", "tool", "input")
_CALL = ("session_id", *CONTEXT, "call", "tool", "input")
_SESSION = ("session_id", *CONTEXT)
_AGENT = ("session_id", *CONTEXT, "rollout", "data")

# per agent event type: the typed columns it fills besides data, and how
_AGENT_COLUMNS: dict[type[AgentEvent], tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {
    ToolInputStartEvent: (("tool",), lambda e: (e.tool_name,)),
    ToolInputAvailableEvent: (("tool", "input"), lambda e: (e.tool_name, compact_json(e.input))),
    ToolOutputAvailableEvent: (("tool", "input", "call"), lambda e: (e.tool, compact_json(e.input), e.call)),
    ToolOutputErrorEvent: (
        ("tool", "input", "call", "error", "reason"),
        lambda e: (e.tool, compact_json(e.input), e.call, e.error, e.reason),
    ),
    RewardEvent: (
        ("tool", "input", "call", "reward", "finished"),
        lambda e: (e.tool, compact_json(e.input), e.call, e.reward, e.finished),
    ),
    FinishEvent: (("reason",), lambda e: (e.finish_reason,)),
    ErrorEvent: (
        ("tool", "input", "call", "error", "reason", "backoff"),
        lambda e: (
            e.tool,
            compact_json(e.input),
            e.call,
            e.message,
            e.error_type,
            e.retry_after if isinstance(e.retry_after, int | float) else None,
        ),
    ),
    UsageEvent: (TOKENS, lambda e: (e.input_tokens, e.output_tokens, e.reasoning_tokens, e.cached_tokens)),
    EpisodeEvent: (
        ("reward", "finished", "ok", "error", *TOKENS),
        lambda e: (
            e.reward,
            e.finished,
            e.error is None,
            e.error,
            e.input_tokens,
            e.output_tokens,
            e.reasoning_tokens,
            e.cached_tokens,
        ),
    ),
}
_NO_COLUMNS: tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]] = ((), lambda e: ())


class Rows:
    """Trace rows being gathered; see the module docstring. Not thread-safe: the recorder locks.

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
        self._kinds: dict[type[Event] | str, _Kind] = {}
        self._sessions: dict[str, tuple[Any, ...]] = {}  # session id -> its CONTEXT values
        self._calls: dict[str | None, dict[int, tuple[str | None, str | None]]] = {}  # session -> call -> tool, input
        self._urls: dict[str, tuple[str, bool]] = {}  # URL -> redacted, is a /create
        # an httpx2 header item (raw name, lower-case name, value) -> its lower-case name, its JSON member
        self._header_items: dict[tuple[bytes, ...], tuple[str, str]] = {}
        self._bodies: dict[tuple[Any, bytes | None], tuple[Any, ...]] = {}  # (parser, request body) -> parsed
        self._adders: dict[type[Event], Callable[[Any, int], None]] = {
            RequestEvent: self._request,
            ResponseEvent: self._response,
            ChunkEvent: self._wire_adder(ChunkEvent, ("size",), lambda e: (e.size,)),
            SSEEvent: self._wire_adder(
                SSEEvent, ("event", "data", "sse_id", "retry_ms"), lambda e: (e.event, e.data, e.sse_id, e.retry_ms)
            ),
            CommentEvent: self._wire_adder(CommentEvent, ("comment",), lambda e: (e.comment,)),
            DisconnectEvent: self._wire_adder(DisconnectEvent, ("error",), lambda e: (e.error,)),
            RetryEvent: self._wire_adder(
                RetryEvent, ("reason", "backoff", "task_id"), lambda e: (e.reason, e.backoff, e.task_id)
            ),
            ResultEvent: self._call_adder(
                ResultEvent,
                ("task_id", "ok", "reward", "finished", "error", "reason"),
                lambda e: (e.task_id, e.ok, e.reward, e.finished, e.error, e.reason),
            ),
            CallErrorEvent: self._call_adder(CallErrorEvent, ("task_id", "error"), lambda e: (e.task_id, e.error)),
            OpenEvent: self._open,
            PingEvent: self._session_adder(PingEvent),
            CloseEvent: self._session_adder(CloseEvent),
        }

    def __len__(self) -> int:
        return self.waiting

    # -- taking events -------------------------------------------------------------------------

    def add(self, event: Event) -> None:
        """Keep ``event`` as the next row."""
        kind = type(event)
        adder = self._adders.get(kind)
        if adder is None:
            adder = self._adder_for(kind)
        seq = self.next_seq
        adder(event, seq)
        self.next_seq = seq + 1
        self.waiting += 1

    def _adder_for(self, kind: type[Event]) -> Callable[[Any, int], None]:
        """An event type met for the first time: an agent event, or a subclass of a known event."""
        if issubclass(kind, AgentEvent):
            base = next((cls for cls in kind.__mro__ if cls in _AGENT_COLUMNS), None)
            columns, values = _AGENT_COLUMNS[base] if base is not None else _NO_COLUMNS
            adder = self._agent_adder(kind, columns, values)
        else:
            known = next((cls for cls in kind.__mro__ if cls in self._adders), None)
            if known is None:
                raise TypeError(f"{kind.__name__} is no event type of ors_lab.events, so it has no trace row")
            adder = self._adders[known]
        self._adders[kind] = adder
        return adder

    def _kind(self, key: type[Event] | str, kind: str | None, layer: str | None, columns: Iterable[str]) -> _Kind:
        spec = self._kinds.get(key)
        if spec is None:
            spec = self._kinds[key] = _Kind(kind, layer, columns)
        return spec

    def _keep(self, spec: _Kind, row: tuple[Any, ...]) -> None:
        if self._patterns:
            text = self.redactor.text
            row = tuple(text(v) if i in spec.texts and isinstance(v, str) else v for i, v in enumerate(row))
        spec.rows.append(row)

    def _context(self, sid: str | None) -> tuple[Any, ...]:
        return NO_CONTEXT if sid is None else self._sessions.get(sid, NO_CONTEXT)

    def _call(self, sid: str | None, call: int | None) -> tuple[str | None, str | None]:
        if call is None:
            return NO_CALL
        of_session = self._calls.get(sid)
        return NO_CALL if of_session is None else of_session.get(call, NO_CALL)

    def _wire_adder(
        self, cls: type[Event], columns: tuple[str, ...], values: Callable[[Any], tuple[Any, ...]]
    ) -> Callable[[Any, int], None]:
        spec = self._kind(cls, cls.kind, None, (*_WIRE, *columns))
        t0, context, call_of = self.t0, self._context, self._call
        keep = self._keep if self._patterns else None

        def add(e: Any, seq: int) -> None:  # the most frequent rows (chunks, SSE events): the shortest path
            sid, call = e.session_id, e.call
            row = (seq, e.t_ns - t0, e.layer, sid, *context(sid), e.rollout, call, e.attempt, e.exchange,
                   *call_of(sid, call), *values(e))  # fmt: skip
            if keep is None:
                spec.rows.append(row)
            else:
                keep(spec, row)

        return add

    def _call_adder(
        self, cls: type[Event], columns: tuple[str, ...], values: Callable[[Any], tuple[Any, ...]]
    ) -> Callable[[Any, int], None]:
        spec = self._kind(cls, cls.kind, cls.LAYER, (*_CALL, *columns))

        def add(e: Any, seq: int) -> None:
            sid, call = e.session_id, e.call
            self._keep(spec, (seq, e.t_ns - self.t0, sid, *self._context(sid), call, *self._call(sid, call),
                              *values(e)))  # fmt: skip

        return add

    def _session_adder(self, cls: type[Event]) -> Callable[[Any, int], None]:
        spec = self._kind(cls, cls.kind, cls.LAYER, _SESSION)
        closes = cls is CloseEvent

        def add(e: Any, seq: int) -> None:
            sid = e.session_id
            self._keep(spec, (seq, e.t_ns - self.t0, sid, *self._context(sid)))
            if closes:
                self._forget(sid)

        return add

    def _open(self, e: OpenEvent, seq: int) -> None:
        spec = self._kind(OpenEvent, OpenEvent.kind, OpenEvent.LAYER, _SESSION)
        sid = e.session_id
        context = (e.environment, e.split, e.task_index, compact_json(e.task))
        if sid is not None:
            context = self._sessions[sid] = _merged(self._sessions.get(sid), context)
        self._keep(spec, (seq, e.t_ns - self.t0, sid, *context))

    def _agent_adder(
        self, cls: type[AgentEvent], columns: tuple[str, ...], values: Callable[[Any], tuple[Any, ...]]
    ) -> Callable[[Any, int], None]:
        spec = self._kind(cls, cls.kind, cls.LAYER, (*_AGENT, *columns))
        own_context = issubclass(cls, (StartEvent, EpisodeEvent))  # they name their task themselves
        episode = issubclass(cls, EpisodeEvent)  # its data is its record; every other one's, its wire form

        def data(e: Any) -> str | None:
            return compact_json(e.record() if episode else e.to_wire())

        def add(e: Any, seq: int) -> None:
            sid = e.session_id
            known = self._context(sid)
            context = (e.environment, e.split, e.task_index, known[3]) if own_context else known
            self._keep(spec, (seq, e.t_ns - self.t0, sid, *context, e.rollout, data(e), *values(e)))

        return add

    def _request(self, e: RequestEvent, seq: int) -> None:
        spec = self._kind(RequestEvent, "request", None, (*_WIRE, "method", "url", "headers", "body"))
        url, creates = self._url(e.url)
        headers = self._headers(e.headers)
        body = e.body
        redacted = self.redactor.body(url or "", body) if body else body
        sid, call = e.session_id, e.call
        if sid is not None and creates:
            self._sessions[sid] = self._body_meaning(_session_of_create, body)
        if call is not None:
            of_session = self._calls.get(sid)
            if of_session is None:
                of_session = self._calls[sid] = {}
            if call not in of_session:
                of_session[call] = self._body_meaning(_tool_and_input, body)
        self._keep(spec, (seq, e.t_ns - self.t0, e.layer, sid, *self._context(sid), e.rollout, call, e.attempt,
                          e.exchange, *self._call(sid, call), e.method, url, headers, redacted))  # fmt: skip

    def _response(self, e: ResponseEvent, seq: int) -> None:
        spec = self._kind(ResponseEvent, "response", None, (*_WIRE, "status", "headers", "ttfb_ns", "body"))
        body = e.body
        if body and self._patterns:
            body = self.redactor.body("", body)
        sid, call = e.session_id, e.call
        self._keep(spec, (seq, e.t_ns - self.t0, e.layer, sid, *self._context(sid), e.rollout, call, e.attempt,
                          e.exchange, *self._call(sid, call), e.status, self._headers(e.headers), e.ttfb_ns,
                          body))  # fmt: skip

    def _forget(self, sid: str | None) -> None:
        """Nothing of a session follows its close: its context goes, so memory stays bounded."""
        if sid is not None:
            self._sessions.pop(sid, None)
            self._calls.pop(sid, None)

    # -- rows written by hand --------------------------------------------------------------------

    def add_row(self, kind: str, t_ns: int, columns: Mapping[str, Any]) -> None:
        """Keep one row given as column values (see ``Recorder.emit``); raises ``TypeError`` for a row
        it cannot store whole, keeping nothing of it."""
        row: dict[str, Any] = {field.name: None for field in ROW_FIELDS}
        for name, value in columns.items():
            if name in ("seq", "t_ns", *STAMPED, "kind"):
                raise TypeError(f"{name!r} is stamped by the recorder; emit() takes the other columns")
            field = _FIELD.get(name)
            if field is None:
                raise TypeError(f"{name!r} is not a trace column; see docs/trace-format.md for the columns")
            if name == "headers":
                row[name] = self._headers(value)
            elif value is not None:
                row[name] = _cell(field, value)
        url, creates = self._url(row["url"]) if row["url"] is not None else (None, False)
        row["url"] = url
        if row["body"]:
            row["body"] = self.redactor.body(url or "", row["body"])
        row["kind"] = kind
        if row["layer"] is None:
            row["layer"] = KIND_LAYER.get(kind, "agent")
        sid, call = row["session_id"], row["call"]
        raw_body = columns.get("body")
        raw_body = raw_body if isinstance(raw_body, bytes) else row["body"]
        # what changes the recorder's state comes last: a refused row leaves nothing behind
        if sid is not None:
            if kind == "request" and creates:
                context = self._sessions[sid] = self._body_meaning(_session_of_create, raw_body)
            elif kind == "open":
                given = tuple(row[name] for name in CONTEXT)
                context = self._sessions[sid] = _merged(self._sessions.get(sid), given)
            else:
                context = self._sessions.get(sid, NO_CONTEXT)
            for name, known in zip(CONTEXT, context, strict=True):
                if row[name] is None:
                    row[name] = known
        if call is not None:
            of_session = self._calls.setdefault(sid, {})
            if kind == "request" and call not in of_session:
                of_session[call] = self._body_meaning(_tool_and_input, raw_body)
            tool, tool_input = of_session.get(call, NO_CALL)
            if "tool" not in columns:
                row["tool"] = tool
            if "input" not in columns:
                row["input"] = tool_input
        row["seq"] = self.next_seq
        row["t_ns"] = t_ns - self.t0
        spec = self._kind("row", None, None, [name for name in row if name not in ("seq", "t_ns")])
        self._keep(spec, tuple(row.values()))
        if kind == "close":
            self._forget(sid)
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
        if type(headers) is httpx2.Headers:
            items = getattr(headers, "_list", None)  # (raw name, lower-case name, value): httpx2's own list
            if type(items) is list:
                return self._header_list_json(items) or self._headers_json(headers)
        return self._headers_json(headers)

    def _header_list_json(self, items: list[tuple[bytes, bytes, bytes]]) -> str | None:
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
                known = cache[item] = (key, f"{_ENCODER.encode(key)}:{_ENCODER.encode(redacted)}")
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

    # -- handing rows over as Arrow --------------------------------------------------------------

    def swap(self) -> list[tuple[_Kind, list[tuple[Any, ...]]]]:
        """Take the rows kept so far (cheap: call it under the lock, and ``convert`` outside it)."""
        taken = []
        for spec in self._kinds.values():
            if spec.rows:
                taken.append((spec, spec.rows))
                spec.rows = []
        self.waiting = 0
        return taken

    def convert(self, taken: list[tuple[_Kind, list[tuple[Any, ...]]]]) -> pa.Table:
        """The rows ``swap`` took, as one table of the trace schema in ``seq`` order."""
        structs = [(spec, _struct_array(spec, rows)) for spec, rows in taken]
        arrays = []
        for field in ROW_FIELDS:
            name, chunks = field.name, []
            for spec, struct in structs:
                index = spec.index.get(name)
                if index is not None:
                    chunks.append(struct.field(index))
                elif name == "kind" and spec.kind is not None:
                    chunks.append(pa.repeat(pa.scalar(spec.kind, field.type), len(struct)))
                elif name == "layer" and spec.layer is not None:
                    chunks.append(pa.repeat(pa.scalar(spec.layer, field.type), len(struct)))
                else:
                    chunks.append(pa.nulls(len(struct), field.type))
            arrays.append(pa.chunked_array(chunks, type=field.type))
        table = pa.Table.from_arrays(arrays, schema=pa.schema(ROW_FIELDS))
        if len(structs) > 1:
            table = table.take(pc.sort_indices(table["seq"]))
        rows = table.num_rows
        wall0_us = wall_ns(self.t0) // 1000
        wall = pc.add(pc.divide(table["t_ns"], 1000), wall0_us)
        table = table.append_column("run_id", pa.repeat(pa.scalar(self.run_id, pa.string()), rows).cast(
            SCHEMA.field("run_id").type))  # fmt: skip
        table = table.append_column("wall", wall.cast(pa.int64()).cast(SCHEMA.field("wall").type))
        return table.select(SCHEMA.names).cast(SCHEMA).combine_chunks()

    def table(self) -> pa.Table:
        """Every row kept so far, taken, as one table (empty: the schema, no rows)."""
        taken = self.swap()
        return self.convert(taken) if taken else SCHEMA.empty_table()


def _struct_array(spec: _Kind, rows: list[tuple[Any, ...]]) -> pa.StructArray:
    """The tuples as one struct array; a value its column cannot hold is stored as null (and logged)."""
    try:
        return pa.array(rows, type=spec.struct)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
        pass
    fields, columns = list(spec.struct), []
    for index, field in enumerate(fields):
        values = [row[index] for row in rows]
        try:
            columns.append(pa.array(values, type=field.type))
            continue
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            pass
        cells = []
        for row, value in zip(rows, values, strict=True):
            try:
                cells.append(_cell(field, value))
            except TypeError as exc:
                kind = spec.kind or row[spec.index["kind"]]
                log.error("ors_lab: a %s row (seq %s) is recorded with a null %s: %s", kind, row[0], field.name, exc)
                cells.append(None)
        columns.append(pa.array(cells, type=field.type))
    return pa.StructArray.from_arrays(columns, fields=fields)


def _cell(field: pa.Field, value: Any) -> Any:
    """``value`` as its column ``field`` stores it (a string column takes any JSON-able value, as its
    JSON text); ``TypeError`` naming the column when it cannot hold it."""
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
