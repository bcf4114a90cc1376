"""The matcher both replay faces share: a request in, the recorded answer out.

- Stateless endpoints (``/list_environments``, ``/{env}/tools``, ``/splits``, ``/tasks``, ...) are
  answered from any recorded exchange with the same method, path and body, as often as asked; so is
  a request without a session on a path the trace recorded without one (a live feed's ``GET
  /events``, recorded through ``ors-lab proxy``: any SSE stream replays).
- A session is whatever id the replaying client chooses: its ``/create`` claims the first unclaimed
  recorded session whose ``/create`` named the same task (environment, split and index, or task
  spec); one sent with ``x-ors-lab-replay: rollout=N`` (an evaluation's episodes send it) claims that
  rollout's, as the trace's ``episode`` rows say, if it is unclaimed: so two rollouts of a task opened at
  once get their own whatever the order their ``/create``s arrive in. ``/create_session`` hands out
  fresh ids as the servers do.
- Within a session, requests match the recorded ones in order by method, path, tool name and input.
  Keep-alive pings are answered while the session lives, without taking part in the order.
- Server-made task ids are replaced by fresh ones, consistently; a ``/call`` resumed with such an id
  gets the recorded next attempt, or the recorded result.
- Answers keep their recorded status, headers and body, and SSE streams their events and comments,
  in order, at the recorded gaps divided by ``speed`` (``speed=0``: no waiting). A stream that was
  cut when it was recorded is cut again at the same place.
- A request with no recorded match gets HTTP 400 with ``x-ors-lab-replay: mismatch`` and a message
  naming the request, the trace, the nearest unplayed recorded requests, the field that differed,
  and how to record again, each also a field of the JSON body; the client raises
  ``ReplayMismatchError`` for it, with those fields.
- ``/{env}/num_tasks`` asked with ``x-ors-lab-replay: episodes`` is answered with the recorded
  answer plus ``recorded_episodes``, the (task index, rollout) pairs the trace holds for the split
  (``episodes()``), so that ``evaluate(..., tasks=None)`` runs those (``ors_lab.protocol.replay``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ors_lab.analysis.trace import Trace, load_trace
from ors_lab.protocol.replay import EPISODES, MISMATCH, RECORDED_EPISODES, REPLAY_HEADER, rollout_of
from ors_lab.recording.redact import REDACTED
from ors_lab.replay.faults import Fault
from ors_lab.replay.recorded import Exchange, Item, Recording, give_back, matches

__all__ = [
    "DROP_HEADERS",
    "MISMATCH_HEADER",
    "ROOT_STATELESS",
    "STATELESS",
    "Answer",
    "ReplayEngine",
    "body_value",
    "difference",
    "json_answer",
    "mismatch_answer",
    "short",
]

MISMATCH_HEADER = REPLAY_HEADER
STATELESS = ("/tools", "/splits", "/tasks", "/num_tasks", "/task", "/task_range")
ROOT_STATELESS = ("/list_environments", "/version", "/health")
DROP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "date", "server", "keep-alive"})
JSON_HEADERS = [("content-type", "application/json")]
SSE_HEADERS = [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache")]
NOT_FOUND = b'{"detail":"Active environment not found"}'


@dataclass
class Answer:
    """What to send back: status, headers and a body, or a stream of (seconds after the head, bytes)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    head_delay: float = 0.0
    stream: list[tuple[float, bytes]] | None = None
    cut: bool = False


def json_answer(status: int, value: Any, extra: Iterable[tuple[str, str]] = ()) -> Answer:
    return Answer(status, [*JSON_HEADERS, *extra], json.dumps(value, separators=(",", ":")).encode())


def mismatch_answer(lines: list[str], *, asked: str, differs: str, nearest: list[str], trace: str) -> Answer:
    """The 400 a request with no recorded match gets: the message (``detail``) and its fields
    (``ors_lab.protocol.replay``), with ``x-ors-lab-replay: mismatch``."""
    body = {"detail": "\n".join(lines), "asked": asked, "differs": differs, "nearest": nearest, "trace": trace}
    return json_answer(400, body, [(MISMATCH_HEADER, MISMATCH)])


@dataclass
class _Live:
    """A replaying session: the recorded session it plays, and how far."""

    sid: str
    recorded: str
    exchanges: list[Exchange]
    closed: bool = False
    task_calls: dict[str, int] = field(default_factory=dict)


class ReplayEngine:
    """Answers requests from a trace; thread-safe, and shared by ``ReplayServer`` and ``ReplayTransport``."""

    def __init__(
        self,
        trace: Trace | str | os.PathLike[str],
        *,
        speed: float = 1.0,
        faults: Iterable[Fault | str] = (),
        allow_repeats: bool = False,
    ) -> None:
        if speed < 0:
            raise ValueError(f"speed must be 0 (no waiting) or more, not {speed}")
        # the index keeps what it needs: a trace loaded here, and the scratch of the lookups, are let go (give_back)
        self.recording = Recording(trace if isinstance(trace, Trace) else load_trace(trace))
        self.speed = speed
        # copies: a fault counts its uses, and a list given to several replays serves each afresh
        self.faults = [Fault.parse(f) if isinstance(f, str) else dataclasses.replace(f, used=0) for f in faults]
        self.allow_repeats = allow_repeats
        self._live: dict[str, _Live] = {}
        self._task_ids: dict[str, str] = {}  # recorded task id -> replay task id
        self._resumable: dict[str, tuple[_Live, int]] = {}  # replay task id -> (session, call)
        self._lock = threading.Lock()
        self._episodes: dict[tuple[str, str], list[tuple[int, int]]] = {}
        self._creates = _Creates(self.recording)
        self._sessionless = _Stateless(self.recording)
        self._unplayed = 0  # no exchange before this place in seq order is unplayed
        give_back()

    # -- the entry point -------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Answer:
        """The answer to one request (``headers`` with lower-case names)."""
        sid = (headers.get("x-session-id") or "").strip() or None
        with self._lock:
            if path == "/health":
                return json_answer(200, {"status": "ok"})
            if path == "/create_session" and method == "POST":
                return self._create_session()
            if path == "/delete_session" and method == "POST":
                return json_answer(200, {"sid": sid})
            if path == "/ping" and method == "POST":
                return self._ping(sid)
            if path == "/delete" and method == "POST":
                return self._delete(sid)
            if path == "/create" and method == "POST":
                return self._create(sid, body, rollout_of(headers.get(REPLAY_HEADER)))
            if path.endswith("/num_tasks") and headers.get(REPLAY_HEADER) == EPISODES:
                return self._with_episodes(self._stateless(method, path, body), path, body)
            sessionless = sid is None and (method, path) in self._sessionless.sessionless
            if path in ROOT_STATELESS or path.endswith(STATELESS) or sessionless:
                return self._stateless(method, path, body)
            return self._in_session(sid, method, path, body)

    # -- generic endpoints -----------------------------------------------------------------------

    def _create_session(self) -> Answer:
        wire = Item("event", event="task_id", data=str(uuid.uuid4())).wire() + Item("event", event="end").wire()
        return Answer(200, SSE_HEADERS, stream=[(0.0, wire)])

    def _ping(self, sid: str | None) -> Answer:
        live = self._live.get(sid or "")
        if live is None or live.closed:
            return Answer(404, JSON_HEADERS, NOT_FOUND)
        return json_answer(200, {"status": "ok"})

    def _delete(self, sid: str | None) -> Answer:
        live = self._live.get(sid or "")
        if live is not None and not live.closed:
            live.closed = True
            for exchange in live.exchanges:
                if exchange.path == "/delete" and not exchange.played:
                    exchange.played += 1
                    break
        return json_answer(200, {"sid": sid})

    # -- stateless endpoints ---------------------------------------------------------------------

    def _stateless(self, method: str, path: str, body: bytes) -> Answer:
        wanted = body_value(body)
        row = self._sessionless.find(method, path, wanted)
        if row is None:
            candidates = [self.recording.exchange(r) for r in self._sessionless.groups.get((method, path), [])[:3]]
            nearest = candidates or self._unplayed_nearby(None)
            differs = difference(wanted, body_value(candidates[0].body), "body") if candidates else "path"
            return self._mismatch(f"{method} {path} {short(body)}", None, nearest, differs)
        return self._play(self.recording.exchange(row), None)

    def _with_episodes(self, answer: Answer, path: str, body: bytes) -> Answer:
        """A ``num_tasks`` answer with the recorded episodes of its split added (``ors_lab.protocol.replay``)."""
        count = body_value(answer.body) if answer.status == 200 and answer.stream is None else None
        request = body_value(body)
        if not isinstance(count, dict) or not isinstance(request, dict):
            return answer
        environment = path.removesuffix("/num_tasks").lstrip("/")
        pairs = self.episodes(environment, str(request.get("split")))
        value = {**count, RECORDED_EPISODES: [list(pair) for pair in pairs]}
        return Answer(answer.status, answer.headers, json.dumps(value, separators=(",", ":")).encode(),
                      answer.head_delay)  # fmt: skip

    def episodes(self, environment: str, split: str) -> list[tuple[int, int]]:
        """The (task index, rollout) pairs the trace holds for a split of an environment, sorted.

        Those of its ``episode`` rows (an evaluation's); in a trace without them, the n-th recorded
        session of a task index counts as its rollout n.
        """
        found = self._episodes.get((environment, split))
        if found is None:
            pairs = {(index, rollout) for (env, s, index, rollout), _ in self.recording.episodes()
                     if (env, s) == (environment, split) and index is not None}  # fmt: skip
            if not pairs:
                sessions: dict[int, int] = {}
                for create in self.recording.bodies(self.recording.create_rows.tolist()):
                    env, s, index, _ = _task_identity(create)
                    if (env, s) == (environment, split) and type(index) is int:
                        sessions[index] = sessions.get(index, 0) + 1
                pairs = {(index, rollout) for index, count in sessions.items() for rollout in range(count)}
            found = self._episodes[(environment, split)] = sorted(pairs)
        return found

    # -- sessions --------------------------------------------------------------------------------

    def _create(self, sid: str | None, body: bytes, rollout: int | None) -> Answer:
        if sid is None:
            return json_answer(400, {"detail": "X-Session-ID header is required"})
        wanted = _task_identity(body)
        code = self._creates.claim(wanted, rollout)
        if code is not None:  # in recorded order; a dict lookup, not a scan, for traces of many sessions
            create = self.recording.exchange(int(self._creates.rows[code]))
            session = self.recording.session(code)
            exchanges = [e for e in session if e.path not in ("/ping", "/delete_session")]
            live = _Live(sid, str(create.session_id), exchanges)
            create.played += 1
            if create.status is not None and create.status < 300:
                self._live[sid] = live
            return self._play(create, live)
        nearest = [self.recording.exchange(row) for row in self._creates.nearest()]
        differs = difference(wanted, _task_identity(nearest[0].body), "task") if nearest else "no unclaimed session"
        return self._mismatch(f"POST /create {short(body)}", sid, nearest, differs)

    def _in_session(self, sid: str | None, method: str, path: str, body: bytes) -> Answer:
        live = self._live.get(sid or "")
        if live is None or live.closed:
            return Answer(404, JSON_HEADERS, NOT_FOUND)
        request = body_value(body)
        task_id = request.get("task_id") if isinstance(request, dict) else None
        if path.endswith("/call") and task_id is not None:
            return self._resume(live, str(task_id), method, path, body)
        pending = [e for e in live.exchanges if not e.played and e.task_id_sent is None and e.path != "/delete"]
        if pending and _same_request(pending[0], method, path, request):
            return self._play(pending[0], live, faults=path.endswith("/call"))
        if self.allow_repeats:
            again = [e for e in live.exchanges if e.played and _same_request(e, method, path, request)]
            if again:
                return self._play(again[-1], live, faults=path.endswith("/call"))
        expected = pending[0] if pending else None
        differs = _requestdifference(expected, method, path, request) if expected else "nothing left to replay"
        return self._mismatch(f"{method} {path} {short(body)}", sid, pending[:3], differs, live)

    def _resume(self, live: _Live, task_id: str, method: str, path: str, body: bytes) -> Answer:
        found = self._resumable.get(task_id)
        if found is None or found[0] is not live:
            return Answer(200, SSE_HEADERS, stream=[(0.0, Item("event", event="error", data="unknown task_id").wire())])
        call = found[1]
        attempts = [e for e in live.exchanges if e.call == call and e.path == path]
        following = [e for e in attempts if not e.played and e.task_id_sent is not None]
        if following:
            return self._play(following[0], live)
        done = next((e for e in reversed(attempts) if e.sse and e.complete), None)
        if done is None:
            return Answer(200, SSE_HEADERS, stream=[(0.0, Item("event", event="error", data="unknown task_id").wire())])
        items = [i for i in done.items if i.kind == "event"]
        wire = b"".join(i.wire(task_id if i.event == "task_id" else None) for i in items)
        return Answer(200, SSE_HEADERS, stream=[(0.0, wire)])

    # -- answering -------------------------------------------------------------------------------

    def _play(self, exchange: Exchange, live: _Live | None, *, faults: bool = False) -> Answer:
        speed = self.speed
        head_delay = 0.0 if speed == 0 else max(0.0, (exchange.head_ns - exchange.request_ns) / 1e9 / speed)
        headers = [(k, v) for k, v in exchange.headers if k not in DROP_HEADERS]
        fault = self._fault_for(exchange) if faults else None
        if fault is not None and fault.kind == "status":
            return self._status_fault(str(fault.value))
        exchange.played += 1
        if exchange.status is None:
            return json_answer(502, {"detail": f"ors-lab replay: {exchange.describe()} got no answer when recorded"})
        if not exchange.sse:
            body = exchange.response_body or b""
            if live is not None and exchange.path == "/create":
                body = body.replace(live.recorded.encode(), live.sid.encode())
            return Answer(exchange.status, headers, body, head_delay)
        stream = self._stream(exchange, live, fault)
        return Answer(exchange.status, headers, head_delay=head_delay, stream=stream[0], cut=stream[1])

    def _stream(
        self, exchange: Exchange, live: _Live | None, fault: Fault | None
    ) -> tuple[list[tuple[float, bytes]], bool]:
        speed = self.speed
        kind = fault.kind if fault is not None else None
        limit = int(str(fault.value)) if kind == "cut" and fault is not None else None
        stall = float(str(fault.value)) if kind == "stall" and fault is not None else 0.0
        out: list[tuple[float, bytes]] = []
        events = 0
        shift = 0.0  # a stall moves everything after the first event (the task_id) later
        for offset_ns, items in exchange.chunks:
            at = 0.0 if speed == 0 else offset_ns / 1e9 / speed
            parts: list[bytes] = []
            for item in items:
                if item.kind == "comment" and kind == "no-pings":
                    continue
                data = None
                if item.kind == "event" and item.event == "task_id" and exchange.path.endswith("/call"):
                    data = self._replay_task_id(item.data, exchange, live)
                elif item.kind == "event" and item.event == "end" and kind == "malformed":
                    data = item.data[: max(1, len(item.data) // 2)]
                parts.append(item.wire(data))
                if item.kind != "event":
                    continue
                events += 1
                if limit is not None and events >= limit:
                    out.append((at + shift, b"".join(parts)))
                    return out, True
                if events == 1 and stall:
                    out.append((at, b"".join(parts)))
                    parts, shift = [], stall
            if parts:
                out.append((at + shift, b"".join(parts)))
        return out, not exchange.complete

    def _replay_task_id(self, recorded: str, exchange: Exchange, live: _Live | None) -> str:
        replay = self._task_ids.get(recorded)
        if replay is None:
            replay = self._task_ids[recorded] = uuid.uuid4().hex
        if live is not None and exchange.call is not None:
            self._resumable[replay] = (live, exchange.call)
        return replay

    def _fault_for(self, exchange: Exchange) -> Fault | None:
        return next((f for f in self.faults if f.take(exchange.tool)), None)

    def _status_fault(self, value: str) -> Answer:
        if value == "503-starting":
            extra = [("x-backend-state", "starting"), ("retry-after", "1")]
            return json_answer(503, {"detail": "Environment still starting."}, extra)
        status = int(value)
        extra = [("retry-after", "1")] if status in (429, 503) else []
        return json_answer(status, {"detail": f"ors-lab replay: injected {status}"}, extra)

    # -- mismatches ------------------------------------------------------------------------------

    def _unplayed_nearby(self, live: _Live | None) -> list[Exchange]:
        if live is not None:
            return [e for e in live.exchanges if not e.played][:3]
        ordered, played = self.recording.ordered, self.recording.played
        while self._unplayed < len(ordered) and played(int(ordered[self._unplayed])):
            self._unplayed += 1  # played stays played: the scan starts where the last one stopped
        rows = (int(row) for row in ordered[self._unplayed :] if not played(int(row)))
        return [self.recording.exchange(row) for row in itertools.islice(rows, 3)]

    def _mismatch(
        self, what: str, sid: str | None, nearest: list[Exchange], differs: str, live: _Live | None = None
    ) -> Answer:
        where = f" in session {sid} (recorded as {live.recorded})" if live is not None else ""
        described = [e.describe() for e in nearest]
        lines = [
            f"no recorded request matches {what}{where} in the trace {self.recording.name}",
            f"what differs: {differs}",
            "nearest unplayed recorded requests: " + ("; ".join(described) or "(none)"),
            "to record again: run against the live server through `ors-lab proxy UPSTREAM --out TRACE` "
            "(or pytest with --ors-record-mode=all)",
        ]
        return mismatch_answer(lines, asked=what, differs=differs, nearest=described, trace=self.recording.name)

    def unplayed(self) -> list[str]:
        """The recorded requests no one asked for (pings and the id allocator left out)."""
        skip = ("/ping", "/create_session", "/delete_session", "/health")
        return self.recording.unplayed(skip)


def body_value(body: bytes) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return body


def _task_identity(body: bytes) -> tuple[Any, ...]:
    value = body_value(body)
    value = value if isinstance(value, dict) else {}
    return (value.get("env_name"), value.get("split"), value.get("index"), value.get("task_spec"))


def _identity_key(identity: tuple[Any, ...]) -> Any:
    """A task identity as one hashable key, the same for identities that ``matches``; None for one with a
    redacted secret (or a NaN), which only ``matches`` can compare. A plain (environment, split, index)
    is its own key; the rest, a canonical text."""
    env, split, index, spec = identity
    if spec is None and type(env) is str and type(split) is str and type(index) is int and REDACTED not in (env, split):
        return env, split, index
    if spec is None and type(index) in (bool, float) and float(index).is_integer():
        return _identity_key((env, split, int(index), None))  # 1.0 and True match 1
    return body_key(list(identity))


def body_key(value: Any) -> Any:
    """A recorded JSON value as one hashable key, equal for values that ``matches`` (a bool as its number, a
    whole float as an int, keys sorted); None for one holding ``"<redacted>"`` or a NaN (``matches`` only)."""
    if isinstance(value, bytes):
        return value
    try:
        return json.dumps(_normal(value), sort_keys=True, separators=(",", ":"))
    except _Odd:
        return None


class _Odd(Exception):
    """A value no key can stand for."""


def _normal(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Odd
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        return {key: _normal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_normal(item) for item in value]
    if value == REDACTED:
        raise _Odd
    return value


class _Stateless:
    """The exchanges recorded without a session, by (method, path) and by request body: lookups, not scans."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.groups: dict[tuple[str, str], list[int]] = {}  # rows in seq order
        self._same: dict[tuple[str, str, Any], list[int]] = {}  # ... by the key of their body
        self._odd: dict[tuple[str, str], list[int]] = {}  # ... whose body only ``matches`` compares
        self._next: dict[tuple[str, str, Any], int] = {}  # the first place in ``_same`` that may be unplayed
        self.sessionless = recording.pairs(recording.stateless)  # asked without a session: answered so
        rows = recording.rows_of(self.answers)  # any recorded exchange answers them, in a session or not
        keys: dict[bytes, Any] = {}
        for row, (method, path, body) in zip(rows, recording.requests(rows), strict=True):
            self.groups.setdefault((method, path), []).append(row)
            key = keys[body] = keys[body] if body in keys else body_key(body_value(body))
            if key is None:
                self._odd.setdefault((method, path), []).append(row)
            else:
                self._same.setdefault((method, path, key), []).append(row)

    def answers(self, method: str, path: str) -> bool:
        """True for a request the stateless index answers (when it comes without a session, for the last)."""
        return path in ROOT_STATELESS or path.endswith(STATELESS) or (method, path) in self.sessionless

    def find(self, method: str, path: str, wanted: Any) -> int | None:
        """The first unplayed recorded row answering the request, else its first; None when none does."""
        key = body_key(wanted)
        odd = self._odd.get((method, path), [])
        if key is None:  # a live NaN: compared one by one
            odd = self.groups.get((method, path), [])
        same = [] if key is None else self._same.get((method, path, key), [])
        if odd:
            bodies = self.recording.bodies(odd)
            odd = [row for row, body in zip(odd, bodies, strict=True) if matches(body_value(body), wanted)]
        if not same and not odd:
            return None
        played = self.recording.played
        start = self._next.get((method, path, key), 0)
        while start < len(same) and played(same[start]):
            start += 1
        self._next[(method, path, key)] = start
        firsts = [row for row in (*same[start : start + 1], next((r for r in odd if not played(r)), None))
                  if row is not None]  # fmt: skip
        return min(firsts or same[:1] + odd[:1], key=lambda row: int(self.recording.rank[row]))


class _Creates:
    """The recorded sessions by the task their first ``/create`` named; the unclaimed ones in recorded order."""

    def __init__(self, recording: Recording) -> None:
        self.rows = np.full(len(recording.session_ids), -1)  # session code -> the row of its /create
        self.rows[recording.create_codes] = recording.create_rows
        self._order = recording.create_codes
        self._claimed = bytearray(len(recording.session_ids))
        self._first = 0  # no session before this place in ``_order`` is unclaimed
        # identity key -> sessions not yet claimed, the first last (lists: a deque per task costs 600 bytes)
        self._waiting: dict[Any, list[int]] = {}
        self._odd: dict[str, tuple[tuple[Any, ...], list[int]]] = {}  # identities with a redacted secret
        self._recording = recording
        self._rollouts: dict[int, int] | None = None  # session code -> its episode's rollout, made when first asked
        # each distinct body parsed once; the sessions grouped by its key with numpy, in recorded order
        bodies, body_of = recording.distinct_bodies(recording.create_rows)
        groups: dict[tuple[bool, Any], int] = {}  # (odd, key or canonical text) -> group, in order of first use
        firsts: list[tuple[Any, ...]] = []  # each group's first identity
        group_of = np.empty(len(bodies), np.int64)
        for place, body in enumerate(bodies):
            identity = _task_identity(body)
            key = _identity_key(identity)
            name = (False, key) if key is not None else (True, json.dumps(identity, sort_keys=True, default=str))
            group_of[place] = groups.setdefault(name, len(groups))
            if group_of[place] == len(firsts):
                firsts.append(identity)
        group = group_of[body_of]
        by_group = np.argsort(group, kind="stable")
        bounds = np.searchsorted(group[by_group], np.arange(len(groups) + 1)).tolist()
        codes = self._order[by_group]
        for (odd, key), number in groups.items():
            waiting = codes[bounds[number] : bounds[number + 1]][::-1].tolist()
            if odd:
                self._odd[key] = (firsts[number], waiting)
            else:
                self._waiting[key] = waiting

    def claim(self, wanted: tuple[Any, ...], rollout: int | None = None) -> int | None:
        """The first unclaimed session of the task ``wanted`` names, now claimed; None if there is none.

        With ``rollout``: the first unclaimed one of that rollout, if the trace's ``episode`` rows name one.
        """
        key = _identity_key(wanted)
        waiting = self._waiting.get(key) if key is not None else None
        if not waiting:
            waiting = next((w for identity, w in self._odd.values() if w and matches(list(identity), list(wanted))),
                           None)  # fmt: skip
        if not waiting:
            return None
        place = len(waiting) - 1
        if rollout is not None:
            rollouts = self._rollouts_of()
            # the first in recorded order is last: claims mostly come in that order, so the scan is short
            place = next((p for p in range(len(waiting) - 1, -1, -1) if rollouts.get(waiting[p]) == rollout), place)
        code = waiting.pop(place)
        self._claimed[code] = 1
        return code

    def _rollouts_of(self) -> dict[int, int]:
        if self._rollouts is None:
            self._rollouts = {}
            for (_, _, _, rollout), sid in self._recording.episodes():
                code = self._recording.code(sid) if sid is not None and rollout is not None else None
                if code is not None:
                    self._rollouts.setdefault(code, int(rollout))
        return self._rollouts

    def nearest(self) -> list[int]:
        """The rows of the first three unclaimed sessions' ``/create``s."""
        order, claimed = self._order, self._claimed
        while self._first < len(order) and claimed[order[self._first]]:
            self._first += 1
        codes = (code for code in itertools.islice(order, self._first, None) if not claimed[code])
        return [int(self.rows[code]) for code in itertools.islice(codes, 3)]


def _same_request(exchange: Exchange, method: str, path: str, request: Any) -> bool:
    if exchange.method != method or exchange.path != path:
        return False
    if path.endswith("/call"):
        request = request if isinstance(request, dict) else {}
        return bool(exchange.tool == request.get("name") and matches(exchange.tool_input, request.get("input")))
    return True


def _requestdifference(exchange: Exchange, method: str, path: str, request: Any) -> str:
    if exchange.method != method or exchange.path != path:
        return f"the next recorded request is {exchange.method} {exchange.path}"
    request = request if isinstance(request, dict) else {}
    if exchange.tool != request.get("name"):
        return f"tool: {request.get('name')!r} != recorded {exchange.tool!r}"
    return difference(request.get("input"), exchange.tool_input, "input")


def difference(got: Any, recorded: Any, where: str) -> str:
    """The first place two JSON values differ, as ``where.key[0]: got != recorded``."""
    if isinstance(got, dict) and isinstance(recorded, dict):
        for key in sorted(set(got) | set(recorded), key=str):
            if got.get(key) != recorded.get(key):
                return difference(got.get(key), recorded.get(key), f"{where}.{key}")
    if isinstance(got, list) and isinstance(recorded, list) and len(got) == len(recorded):
        for index, (a, b) in enumerate(zip(got, recorded, strict=True)):
            if a != b:
                return difference(a, b, f"{where}[{index}]")
    if isinstance(got, tuple) and isinstance(recorded, tuple):
        names = ("env_name", "split", "index", "task_spec")
        for name, a, b in zip(names, got, recorded, strict=False):
            if a != b:
                return difference(a, b, f"{where}.{name}")
    return f"{where}: {json.dumps(got)} != recorded {json.dumps(recorded)}"


def short(body: bytes, limit: int = 160) -> str:
    text = body.decode("utf-8", "replace")
    return text if len(text) <= limit else text[: limit - 3] + "..."
