"""A trace read back as the HTTP exchanges it recorded, ready to be served again.

Each request row, its response row and the chunk, event and comment rows that share its
``exchange`` number become one ``Exchange``: what was asked (method, path, body, tool and input)
and what came back (status, headers, body, or the SSE items grouped by the network chunk that
delivered them, each with its delay after the response head).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.trace import Trace
from ors_lab.protocol.errors import TraceFormatError
from ors_lab.recording.redact import REDACTED

__all__ = ["EpisodeKey", "Exchange", "Item", "Recording", "matches", "recorded_episodes"]

COLUMNS = [
    "run_id", "layer", "seq", "t_ns", "kind", "session_id", "call", "attempt", "exchange", "method", "url", "status",
    "headers", "body", "ttfb_ns", "event", "data", "sse_id", "retry_ms", "comment", "tool", "input",
]  # fmt: skip


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
    """The exchanges of a trace: ``stateless`` ones, and ``sessions`` (recorded id → exchanges in order).

    ``agent=False`` takes the ORS exchanges; ``agent=True`` the agent's own (its LLM's, layer ``agent``).
    """

    def __init__(self, trace: Trace, *, agent: bool = False) -> None:
        self.trace = trace
        self.name = str(trace.path)
        # keyed by run and number: exchange numbers are unique within one recording process only, and
        # a resumed (appended) trace holds several runs
        exchanges: dict[tuple[str, int], Exchange] = {}
        current: dict[tuple[str, int], list[Item]] = {}
        rows = trace.table.select(COLUMNS).to_pylist()
        for row in rows:
            kind = row["kind"]
            if row["exchange"] is None or (row["layer"] == "agent") != agent:
                continue
            number = (row["run_id"], row["exchange"])
            if kind == "request":
                exchanges[number] = _exchange_of(row)
                continue
            exchange = exchanges.get(number)
            if exchange is None:
                continue
            if kind == "response":
                exchange.status = row["status"]
                exchange.headers = _headers(self.name, row)
                exchange.response_body = row["body"]
                exchange.head_ns = row["t_ns"]
            elif kind == "chunk":
                group: list[Item] = []
                exchange.chunks.append((row["t_ns"] - exchange.head_ns, group))
                current[number] = group
            elif kind in ("event", "comment"):
                item = Item(kind=kind, event=row["event"] or "", data=row["data"] or "", sse_id=row["sse_id"],
                            retry_ms=row["retry_ms"], comment=row["comment"] or "", seq=row["seq"])  # fmt: skip
                if number not in current:
                    group = []
                    exchange.chunks.append((row["t_ns"] - exchange.head_ns, group))
                    current[number] = group
                current[number].append(item)
        if rows and not exchanges and not agent:
            raise TraceFormatError(f"{self.name} records no HTTP exchanges to replay (no exchange numbers)")
        ordered = sorted(exchanges.values(), key=lambda e: e.seq)
        self.exchanges = ordered
        self.stateless = [e for e in ordered if e.session_id is None]
        self.sessions: dict[str, list[Exchange]] = {}
        for exchange in ordered:
            if exchange.session_id is not None:
                self.sessions.setdefault(exchange.session_id, []).append(exchange)


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


def _headers(name: str, row: dict[str, Any]) -> list[tuple[str, str]]:
    """A response row's headers, as (name, value) pairs; ``TraceFormatError`` for what is not a JSON object of texts."""
    try:
        value = json.loads(row["headers"] or "{}")
    except ValueError as exc:
        where = f"{name}: the response at seq {row['seq']}"
        raise TraceFormatError(f"{where} has headers that are not JSON: {exc}") from exc
    if not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
        raise TraceFormatError(
            f"{name}: the response at seq {row['seq']} has headers that are not a JSON object of texts: {value!r:.80}"
        )
    return list(value.items())


def _exchange_of(row: dict[str, Any]) -> Exchange:
    body = row["body"] or b""
    exchange = Exchange(
        exchange=row["exchange"],
        seq=row["seq"],
        session_id=row["session_id"],
        method=row["method"] or "GET",
        path=urlsplit(row["url"] or "/").path,
        body=body,
        call=row["call"],
        attempt=row["attempt"],
        request_ns=row["t_ns"],
    )
    if exchange.path.endswith("/call"):
        parsed = _json(body)
        exchange.tool = parsed.get("name")
        exchange.tool_input = parsed.get("input")
        exchange.task_id_sent = parsed.get("task_id")
    return exchange


def _json(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
