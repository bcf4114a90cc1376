"""The replay index built from Arrow columns answers as the row-by-row index it replaced did.

``Old`` below is that index and its matcher as they were, kept here only to compare: the rows of
the trace as Python dicts, every exchange made at load, and lookups that scan. On the committed
traces and on traces recorded here against a reference server (one of them appended to, so it
holds two runs), the new ``Recording`` and ``ReplayEngine`` must give the same exchanges in the
same order with the same items, the same stateless answers, claim sessions in the same order, list
the same episodes, and word their mismatches the same.
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ors_lab as ol
from ors_lab.replay.engine import ReplayEngine, body_value, difference, short
from ors_lab.replay.recorded import COLUMNS, Exchange, Item, Recording, _Rows, matches, recorded_episodes
from tests import traces
from tests.replay.test_replay import script

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
STATELESS = ("/tools", "/splits", "/tasks", "/num_tasks", "/task", "/task_range")
ROOT_STATELESS = ("/list_environments", "/version", "/health")


class Old:
    """The index as it was: every row a dict, every exchange made at load, lookups that scan."""

    def __init__(self, trace: ol.Trace, *, agent: bool = False) -> None:
        exchanges: dict[tuple[str, int], Exchange] = {}
        current: dict[tuple[str, int], list[Item]] = {}
        for row in trace.table.select(COLUMNS).to_pylist():
            kind = row["kind"]
            if row["exchange"] is None or (row["layer"] == "agent") != agent:
                continue
            number = (row["run_id"], row["exchange"])
            if kind == "request":
                exchanges[number] = _old_exchange(row)
                continue
            exchange = exchanges.get(number)
            if exchange is None:
                continue
            if kind == "response":
                exchange.status, exchange.response_body, exchange.head_ns = row["status"], row["body"], row["t_ns"]
                exchange.headers = list(json.loads(row["headers"] or "{}").items())
            elif kind == "chunk":
                current[number] = []
                exchange.chunks.append((row["t_ns"] - exchange.head_ns, current[number]))
            elif kind in ("event", "comment"):
                item = Item(kind=kind, event=row["event"] or "", data=row["data"] or "", sse_id=row["sse_id"],
                            retry_ms=row["retry_ms"], comment=row["comment"] or "", seq=row["seq"])  # fmt: skip
                if number not in current:
                    current[number] = []
                    exchange.chunks.append((row["t_ns"] - exchange.head_ns, current[number]))
                current[number].append(item)
        self.exchanges = sorted(exchanges.values(), key=lambda e: e.seq)
        self.sessions: dict[str, list[Exchange]] = {}
        for exchange in self.exchanges:
            if exchange.session_id is not None:
                self.sessions.setdefault(exchange.session_id, []).append(exchange)
        creates = {s: next((e for e in ex if e.path == "/create"), None) for s, ex in self.sessions.items()}
        self.creates = {sid: create for sid, create in creates.items() if create is not None}
        self.unclaimed: dict[str, deque[str]] = {}
        for recorded, create in self.creates.items():
            self.unclaimed.setdefault(_old_key(create.body), deque()).append(recorded)
        self.claimed: set[str] = set()
        self.sessionless = {(e.method, e.path) for e in self.exchanges if e.session_id is None}
        self.trace = trace

    def stateless(self, method: str, path: str, body: bytes) -> Exchange | list[str]:
        """The exchange that answers (now played), or the mismatch's nearest and what differs."""
        wanted = body_value(body)
        candidates = [e for e in self.exchanges if e.method == method and e.path == path]
        same = [e for e in candidates if matches(body_value(e.body), wanted)]
        if not same:
            nearest = candidates[:3] or [e for e in self.exchanges if not e.played][:3]
            differs = difference(wanted, body_value(candidates[0].body), "body") if candidates else "path"
            return [differs, *(e.describe() for e in nearest)]
        exchange = next((e for e in same if not e.played), same[0])
        exchange.played += 1
        return exchange

    def claim(self, body: bytes) -> str | list[str]:
        """The recorded session a /create claims, or the mismatch's nearest and what differs."""
        wanted = _old_identity(body)
        waiting = self.unclaimed.get(_old_key(body))
        if not waiting:
            like = (w for w in self.unclaimed.values() if w and matches(list(_old_identity(self.creates[w[0]].body)),
                                                                         list(wanted)))  # fmt: skip
            waiting = next(like, None)
        if waiting:
            recorded = waiting.popleft()
            self.claimed.add(recorded)
            self.creates[recorded].played += 1
            return recorded
        nearest = [c for r, c in self.creates.items() if r not in self.claimed][:3]
        differs = difference(wanted, _old_identity(nearest[0].body), "task") if nearest else "no unclaimed session"
        return [differs, *(c.describe() for c in nearest)]

    def episodes(self, environment: str, split: str) -> list[tuple[int, int]]:
        pairs = {(index, rollout) for (env, s, index, rollout), _ in recorded_episodes(self.trace.table)
                 if (env, s) == (environment, split) and index is not None}  # fmt: skip
        if not pairs:
            sessions: dict[int, int] = {}
            for create in self.creates.values():
                env, s, index, _ = _old_identity(create.body)
                if (env, s) == (environment, split) and type(index) is int:
                    sessions[index] = sessions.get(index, 0) + 1
            pairs = {(index, rollout) for index, count in sessions.items() for rollout in range(count)}
        return sorted(pairs)


def _old_exchange(row: dict[str, Any]) -> Exchange:
    body = row["body"] or b""
    exchange = Exchange(exchange=row["exchange"], seq=row["seq"], session_id=row["session_id"],
                        method=row["method"] or "GET", path=urlsplit(row["url"] or "/").path, body=body,
                        call=row["call"], attempt=row["attempt"], request_ns=row["t_ns"])  # fmt: skip
    if exchange.path.endswith("/call"):
        parsed = json.loads(body or b"{}")
        exchange.tool, exchange.tool_input = parsed.get("name"), parsed.get("input")
        exchange.task_id_sent = parsed.get("task_id")
    return exchange


def _old_identity(body: bytes) -> tuple[Any, ...]:
    value = body_value(body)
    value = value if isinstance(value, dict) else {}
    return (value.get("env_name"), value.get("split"), value.get("index"), value.get("task_spec"))


def _old_key(body: bytes) -> str:
    return json.dumps(_old_identity(body), sort_keys=True, default=str)


# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded_here(tmp_path_factory: pytest.TempPathFactory, ors_sdk_server: Any) -> Path:
    """The replay tests' script recorded against the ors-sdk server, then recorded again into the same
    trace (appended: a second run whose exchange numbers start again at 0)."""
    path = tmp_path_factory.mktemp("index") / "two-runs.parquet"
    with ol.Recorder(path) as rec:
        script(ors_sdk_server.url, recorder=rec)
    with ol.Recorder(path, append=True) as rec:
        script(ors_sdk_server.url, recorder=rec)
    return path


@pytest.fixture(scope="module")
def written_plain(tmp_path_factory: pytest.TempPathFactory, recorded_here: Path) -> Path:
    """The two-run trace written again without dictionary encoding: its string columns are plain in the file."""
    path = tmp_path_factory.mktemp("plain") / "two-runs-plain.parquet"
    pq.write_table(pq.read_table(recorded_here), path, use_dictionary=False)
    return path


@pytest.fixture(params=["demo", "openai-arithmetic", "two-runs", "two-runs written plain", "demo in memory",
                        "two-runs in memory"])  # fmt: skip
def trace(request: pytest.FixtureRequest, recorded_here: Path, written_plain: Path) -> ol.Trace:
    """A trace as ``load_trace`` gives it; or its rows in memory, plain strings (as the parts of an unfinished trace
    are read)."""
    paths = {"demo": RECORDINGS / "demo.parquet", "openai-arithmetic": RECORDINGS / "openai-arithmetic.parquet",
             "two-runs": recorded_here, "two-runs written plain": written_plain}  # fmt: skip
    name = request.param.removesuffix(" in memory")
    trace = ol.load_trace(paths[name])
    if name == request.param:
        return trace
    return ol.Trace(trace.table, path=trace.path, partial=True)


@pytest.mark.parametrize("agent", [False, True])
def test_the_same_exchanges_in_the_same_order_with_the_same_items(trace: ol.Trace, agent: bool) -> None:
    """Every exchange (request, answer, chunks and their items) equals the old index's, in seq order and per session."""
    old, new = Old(trace, agent=agent), Recording(trace, agent=agent)
    assert [new.peek(int(row)) for row in new.ordered] == old.exchanges
    assert new.session_ids.to_pylist() == list(old.sessions)
    assert [new.session(code) for code in range(len(new.session_ids))] == list(old.sessions.values())
    assert sum(len(e.items) for e in old.exchanges) == sum(len(new.peek(row).items) for row in range(len(new)))
    assert new.episodes() == recorded_episodes(trace.table)


def test_the_same_stateless_answers_and_mismatches(trace: ol.Trace) -> None:
    """Each stateless request, asked twice as often as recorded, plays the same recorded exchanges in the
    same order; a changed body or an unknown path gets the same message."""
    old, engine = Old(trace), ReplayEngine(trace, speed=0)
    answered_so = [
        e
        for e in old.exchanges
        if e.path in ROOT_STATELESS or e.path.endswith(STATELESS) or (e.method, e.path) in old.sessionless
    ]
    asked = [(e.method, e.path, e.body) for e in answered_so]
    asked += [(m, p, b'{"split":"nowhere"}') for m, p, _ in asked[:2]] + [("GET", "/nowhere/tasks", b"")]
    for method, path, body in asked * 2:
        expected = old.stateless(method, path, body)
        answer = engine.handle(method, path, {}, body)
        if isinstance(expected, Exchange):
            assert answer.status == expected.status
            assert [e.seq for e in old.exchanges if e.played] == _played(engine)
        else:
            detail = json.loads(answer.body)
            assert [detail["differs"], *detail["nearest"]] == expected
            assert detail["asked"] == f"{method} {path} {short(body)}"


def test_the_same_claim_order_episodes_and_create_mismatches(trace: ol.Trace) -> None:
    """/creates claim the same recorded sessions as before, asked in recorded and in reverse order, then one
    more of each task gets the same mismatch (nearest unclaimed sessions); the episodes listed are the same."""
    old, engine = Old(trace), ReplayEngine(trace, speed=0)
    environments = {_old_identity(c.body)[:2] for c in old.creates.values()}
    for env, split in environments:
        assert engine.episodes(str(env), str(split)) == old.episodes(str(env), str(split))
    creates = [c.body for c in old.creates.values()]
    half = len(creates) // 2
    for n, body in enumerate([*creates[:half], *reversed(creates[half:]), creates[0], b'{"env_name":"x"}']):
        expected = old.claim(body)
        answer = engine.handle("POST", "/create", {"x-session-id": f"live-{n}"}, body)
        if isinstance(expected, str):
            assert engine._live[f"live-{n}"].recorded == expected
        else:
            detail = json.loads(answer.body)
            assert [detail["differs"], *detail["nearest"]] == expected


def test_in_session_mismatches_name_the_same_nearest(trace: ol.Trace) -> None:
    """A session that asks something else at its second step gets the message the old index gave: the same
    nearest unplayed requests of that session."""
    old = Old(trace)
    exchanges = next(e for e in old.sessions.values() if len(e) > 2 and e[0].path == "/create")
    engine = ReplayEngine(trace, speed=0)
    assert engine.handle("POST", "/create", {"x-session-id": "mine"}, exchanges[0].body).status == 200
    answer = engine.handle("POST", "/lab/call", {"x-session-id": "mine"}, b'{"name":"other","input":{}}')
    pending = [e for e in exchanges[1:] if e.path not in ("/ping", "/delete_session", "/delete")]
    pending = [e for e in pending if e.task_id_sent is None]
    assert json.loads(answer.body)["nearest"] == [e.describe() for e in pending[:3]]


def _played(engine: ReplayEngine) -> list[int]:
    recording = engine.recording
    return [recording.peek(int(row)).seq for row in recording.ordered if recording.played(int(row))]


@pytest.mark.parametrize("in_memory", [False, True])
def test_of_several_bad_headers_the_first_recorded_is_named(tmp_path: Path, in_memory: bool) -> None:
    """Responses whose headers are not a JSON object of texts: the error names the first one in the index's order."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path) as rec:
        for number, headers in enumerate(['{"a": "b"}', '["a list"]', "{not json", '["a list"]']):
            traces.exchange(rec, "POST", "http://127.0.0.1:1/ping", 200, session_id="s", exchange=number,
                            headers=headers)  # fmt: skip
    trace = ol.load_trace(path)
    rows = trace.select(["seq", "kind", "headers"], kinds=["response"]).to_pylist()
    first = next(row["seq"] for row in rows if row["headers"] == '["a list"]')
    if in_memory:
        trace = ol.Trace(trace.table, path=trace.path, partial=True)
    with pytest.raises(ol.TraceFormatError, match=rf"at seq {first} has headers that are not a JSON object of texts"):
        Recording(trace)


def test_rows_decode_dictionary_columns_with_their_nulls() -> None:
    """A slice of rows reads a dictionary column through its indices and values (nulls kept), as pyarrow's own
    `to_pylist` does, for any slice and after earlier ones (the values are decoded once)."""
    method = pa.array(["POST", None, "GET", "POST", None, "DELETE", "GET"]).dictionary_encode()
    table = pa.table({"method": method, "seq": pa.array([1, 2, None, 4, 5, 6, 7]), "body": pa.array([b"x"] * 7)})
    rows = _Rows(table)
    for start, count in [(0, 7), (1, 3), (4, 3), (6, 1), (0, 0), (2, 2)]:
        assert rows(start, count) == table.slice(start, count).to_pylist()
    assert rows(1, 2) == [{"method": None, "seq": 2, "body": b"x"}, {"method": "GET", "seq": None, "body": b"x"}]
