"""`check_trace` and `ors-lab check`: every /call stream of a trace held against the ORS protocol."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ors_lab as ol
from ors_lab.demo.launch import ServerProcess
from ors_lab.events import ChunkEvent, DisconnectEvent
from ors_lab.replay.check import RULES, Violation, call_streams, check_trace, format_violations
from tests import traces
from tests.envs import common
from tests.scripted_demo import guess_by_bisection, solve_arithmetic

CLI = [sys.executable, "-m", "ors_lab.cli", "check"]
SID = "5e55" * 8
URL = "http://127.0.0.1:9/lab"
SSE = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
TASK_ID = "7a5c" * 8
OUTPUT = {
    "blocks": [{"text": "slept", "detail": None, "type": "text"}],
    "metadata": None,
    "reward": 1.0,
    "finished": False,
}
OK = json.dumps({"ok": True, "output": OUTPUT}, separators=(",", ":"))  # a RunToolOutput
NOT_OK = json.dumps({"ok": False, "error": "'nope' is not a valid tool"}, separators=(",", ":"))
PING = " ping - 2026-11-30 02:13:43.598012+00:00"

# A stream item: (event, data), or a comment's text as the bare string ":<text>"
Item = tuple[str, str] | str


class Wire:
    """Writes rows in the shapes the client records, one HTTP exchange at a time (`exchange` 1, 2, ...)."""

    def __init__(self, rec: ol.Recorder) -> None:
        self.rec = rec
        self.exchange = 0

    def open(self, sid: str = SID) -> None:
        """POST /create answered 200, then the `open` row."""
        self.http("POST", "/create", 200, {"content-type": "application/json"}, sid=sid)
        traces.open_(self.rec, sid, "lab", "test", 0)

    def close(self, sid: str = SID) -> None:
        """POST /delete answered 200, then the `close` row."""
        self.http("POST", "/delete", 200, {"content-type": "application/json"}, sid=sid)
        traces.close(self.rec, sid)

    def http(
        self,
        method: str,
        path: str,
        status: int,
        headers: dict[str, str],
        *,
        sid: str | None = SID,
        body: dict[str, Any] | None = None,
        call: int | None = None,
        attempt: int = 1,
    ) -> dict[str, Any]:
        """A request and its response (the response's body left out: the caller streams it or not)."""
        self.exchange += 1
        context = {"session_id": sid, "call": call, "attempt": attempt, "exchange": self.exchange}
        request_headers = {"x-session-id": sid or "", "content-type": "application/json"}
        content = json.dumps(body or {}).encode()
        traces.exchange(self.rec, method, URL + path, status, request_headers=request_headers, body=content,
                        headers=headers, ttfb_ns=1_000_000, **context)  # fmt: skip
        return context

    def call(
        self,
        call: int,
        items: list[Item],
        *,
        attempt: int = 1,
        disconnect: str | None = None,
        status: int = 200,
        headers: dict[str, str] = SSE,
    ) -> None:
        """A /call exchange: request, response, then per item one network chunk and its event or comment."""
        body = {"name": "slow", "input": {"seconds": 1}} | ({"task_id": TASK_ID} if attempt > 1 else {})
        context = self.http("POST", "/call", status, headers, body=body, call=call, attempt=attempt)
        for item in items:
            if isinstance(item, str):
                traces.record(self.rec, ChunkEvent(size=len(item) + 4, **context))
                traces.comment(self.rec, item.removeprefix(":"), **context)
            else:
                event, data = item
                traces.sse(self.rec, event, data, size=len(event) + len(data) + 17, **context)
        if disconnect is not None:
            traces.record(self.rec, DisconnectEvent(error=disconnect, **context))


def record(path: Path, script: Callable[[Wire], None], *, seconds: list[float] | None = None) -> ol.Trace:
    """Write the rows `script` emits as a trace; `seconds` replaces every row's `t_ns`, for exact timing."""
    with ol.Recorder(path) as rec:
        script(Wire(rec))
    if seconds is not None:
        table = pq.read_table(path)
        assert len(seconds) == table.num_rows, f"{table.num_rows} rows, {len(seconds)} times"
        t_ns = pa.array([round(s * 1e9) for s in seconds], type=pa.int64())
        table = table.set_column(table.schema.get_field_index("t_ns"), "t_ns", t_ns)
        pq.write_table(table, path)  # the table keeps the trace's metadata
    return ol.load_trace(path)


def session(*calls: Callable[[Wire], None]) -> Callable[[Wire], None]:
    """A script: open a session, run `calls` in order, close it."""

    def script(wire: Wire) -> None:
        wire.open()
        for call in calls:
            call(wire)
        wire.close()

    return script


def stream(items: list[Item], call: int = 1, **options: Any) -> Callable[[Wire], None]:
    """One /call exchange in a script."""
    return lambda wire: wire.call(call, items, **options)


def rules(violations: list[Violation]) -> list[str]:
    """The rule of each violation, in order."""
    return [violation.rule for violation in violations]


def checked(tmp_path: Path, *calls: Callable[[Wire], None], **options: Any) -> list[Violation]:
    """The violations of a session holding `calls`."""
    return check_trace(record(tmp_path / "t.parquet", session(*calls)), **options)


def seq_of(trace: ol.Trace, **match: Any) -> list[int]:
    """The seqs of the rows whose columns equal `match`."""
    rows = trace.table.to_pylist()
    return [row["seq"] for row in rows if all(row[name] == value for name, value in match.items())]


# -- real traces ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_trace(demo_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo run: guessing test/0 by bisection, arithmetic test/0 solved, then an unknown tool (ok:false)."""
    path = tmp_path_factory.mktemp("check") / "demo.parquet"
    with ol.Recorder(path) as rec, ol.Client(demo_server.url, recorder=rec) as client:
        with client.environment("guessing").session(split="test", index=0) as s:
            guess_by_bisection(s)
        arithmetic = client.environment("arithmetic")
        with arithmetic.session(task=arithmetic.task("test", 0)) as s:
            solve_arithmetic(s)
            assert not s.call("nope").ok
    return path


def test_demo_session_is_clean(demo_trace: Path) -> None:
    """A session recorded on the demo server has no violations, and every /call stream is found."""
    trace = ol.load_trace(demo_trace)
    assert check_trace(trace) == []
    streams = call_streams(trace)
    assert len(streams) == len(trace.calls) >= 5
    assert [s.exchange for s in streams] == sorted(set(trace.events.query("kind == 'event'")["exchange"]))


async def test_reference_server_chunks_errors_and_resumes_are_clean(
    reference_server: ServerProcess, cutting_proxy: Any, tmp_path: Path
) -> None:
    """Chunked results, ok:false, a tool error, and a stream cut then resumed: no violations."""
    proxy = cutting_proxy(reference_server.url)
    path = tmp_path / "t.parquet"
    policy = ol.RetryPolicy(backoff=0.01)
    async with ol.Recorder(path) as rec:
        async with ol.AsyncClient(reference_server.url, recorder=rec) as client:
            async with client.environment("lab").session(split="test", index=0) as s:
                assert len((await s.call("big_output", {"n_chars": 10_000, "fill": ' "\\ü'})).text) == 10_000
                assert not (await s.call("nope")).ok
                with pytest.raises(ol.ToolError):
                    await s.call("crash")
        async with ol.AsyncClient(proxy.url, recorder=rec, retry=policy) as client:
            async with client.environment("lab").session(split="test", index=0) as s:
                await s.call("step", {"value": 1})
    trace = ol.load_trace(path)
    assert proxy.cuts == 1
    events = trace.events
    assert set(events[events["kind"] == "event"]["event"]) == {"task_id", "chunk", "end", "error"}
    assert (events["kind"] == "disconnect").sum() == 1
    assert check_trace(trace) == []


@pytest.mark.slow  # the suite's one wait for a reference server's real 10 s ping (the others: quick_ping_server)
async def test_slow_call_pings_pass_and_a_shorter_interval_reports_the_gap(
    ors_sdk_server: ServerProcess, tmp_path: Path
) -> None:
    """An 11 s call pinged at 10 s passes; checked for 5 s pings, the 10 s gap is reported."""
    path = tmp_path / "t.parquet"
    async with ol.Recorder(path) as rec, ol.AsyncClient(ors_sdk_server.url, recorder=rec) as client:
        async with client.environment("lab").session(split="test", index=0) as s:
            assert (await s.call("slow", {"seconds": 11})).text == "slept"
    trace = ol.load_trace(path)
    assert check_trace(trace) == []
    (violation,) = check_trace(trace, ping_interval=5.0)
    (stream,) = call_streams(trace)
    task_id, ping = seq_of(trace, kind="event", event="task_id")[0], seq_of(trace, kind="comment")[0]
    ping_chunk = max(seq for seq in seq_of(trace, kind="chunk", exchange=stream.exchange) if seq < ping)
    assert (violation.rule, violation.seqs, violation.call, violation.exchange) == (
        "pings",
        (task_id, ping_chunk),
        1,
        stream.exchange,
    )
    gap = float(violation.message.split(" s of silence", 1)[0])  # the server's 10 s ping timer starts before task_id
    assert 9.5 <= gap < 11, violation.message  # is sent: under load the client sees 9.99 s as well as 10.01 s
    assert "more than 7.5 s without a ping" in violation.message


# -- each rule on a hand-built trace ---------------------------------------------------------------


def test_a_hand_built_conformant_trace_is_clean(tmp_path: Path) -> None:
    """Chunks, a ping, ok:false, a tool error, an unknown-task resume and a completed resume pass."""
    violations = checked(
        tmp_path,
        stream([("task_id", TASK_ID), ("chunk", OK[:50]), ":" + PING, ("chunk", OK[50:90]), ("end", OK[90:])]),
        stream([("task_id", TASK_ID), ("end", NOT_OK)], call=2),
        stream([("task_id", TASK_ID), ("error", common.CRASH_MESSAGE)], call=3),
        stream([("error", "unknown task_id")], call=4, attempt=1),
        stream([("task_id", TASK_ID)], call=5, disconnect="ReadError: cut"),
        stream([("task_id", TASK_ID), ("end", OK)], call=5, attempt=2),
    )
    assert violations == []


@pytest.mark.parametrize(
    ("items", "first"),
    [
        ([("chunk", OK[:10]), ("end", OK[10:])], "'chunk'"),
        ([("error", common.CRASH_MESSAGE)], f"'error' ('{common.CRASH_MESSAGE}')"),
        ([("message", "hi"), ("task_id", TASK_ID), ("end", OK)], "'message' ('hi')"),
    ],
    ids=["chunk", "error-not-unknown-task", "message"],
)
def test_task_id_first(tmp_path: Path, items: list[Item], first: str) -> None:
    """A stream whose first event is not task_id (nor a lone `unknown task_id` error) is reported."""
    trace = record(tmp_path / "t.parquet", session(stream(items)))
    violations = [v for v in check_trace(trace) if v.rule == "task-id-first"]
    first_event = seq_of(trace, kind="event")[0]
    assert [(v.seqs, v.session_id, v.call) for v in violations] == [((first_event,), SID, 1)]
    assert violations[0].message == f"the first event is {first}, not 'task_id'"


@pytest.mark.parametrize(
    ("items", "after"),
    [
        ([("task_id", TASK_ID), ("end", OK), ("end", OK)], 1),
        ([("task_id", TASK_ID), ("error", "boom"), ("end", OK)], 1),
        ([("task_id", TASK_ID), ("end", OK), ("chunk", "x"), ":" + PING], 2),
    ],
    ids=["two-ends", "error-then-end", "chunk-and-ping-after-end"],
)
def test_one_terminal(tmp_path: Path, items: list[Item], after: int) -> None:
    """A second terminal event, or any event or comment after the terminal one, is reported once."""
    trace = record(tmp_path / "t.parquet", session(stream(items)))
    (violation,) = check_trace(trace)
    stream_rows = seq_of(trace, kind="event") + seq_of(trace, kind="comment")
    terminal = sorted(stream_rows)[1]
    assert violation.rule == "one-terminal"
    assert violation.seqs == tuple(sorted(stream_rows))[1:] and len(violation.seqs) == after + 1
    assert f"at seq {terminal} is followed by" in violation.message


def test_no_terminal_unless_a_later_attempt_completed(tmp_path: Path) -> None:
    """A stream with no end or error is reported unless a later attempt of its call completed."""
    trace = record(
        tmp_path / "t.parquet",
        session(
            stream([("task_id", TASK_ID), ("chunk", "{")], call=1),  # never resumed
            stream([("task_id", TASK_ID)], call=2, disconnect="ReadError: cut"),
            stream([("task_id", TASK_ID)], call=2, attempt=2, disconnect="ReadError: cut again"),
            stream([("task_id", TASK_ID)], call=3, disconnect="ReadError: cut"),  # resumed, and completed
            stream([("task_id", TASK_ID), ("end", OK)], call=3, attempt=2),
        ),
    )
    violations = check_trace(trace)
    assert [(v.rule, v.call) for v in violations] == [("no-terminal", 1), ("no-terminal", 2), ("no-terminal", 2)]
    first, dropped, again = violations
    response = seq_of(trace, kind="response", call=1)[0]
    assert first.seqs == (response, max(seq_of(trace, call=1)))
    assert first.message == (
        "the stream ended after 2 event(s) with no 'end' or 'error', and no later attempt of the call completed"
    )
    assert dropped.message.startswith("the connection dropped (ReadError: cut) after 1 event(s)")
    assert again.message.startswith("attempt 2: the connection dropped (ReadError: cut again)")


def test_an_empty_stream_has_no_terminal(tmp_path: Path) -> None:
    """A 200 SSE response with no events at all is reported as having no terminal event."""
    (violation,) = checked(tmp_path, stream([]))
    assert violation.rule == "no-terminal"
    assert "after 0 event(s)" in violation.message


@pytest.mark.parametrize(
    "items",
    [
        [("task_id", TASK_ID), ("chunk", OK[:10]), ("message", "hi"), ("end", OK[10:])],
        [("task_id", TASK_ID), ("task_id", TASK_ID), ("end", OK)],
    ],
    ids=["message", "second-task_id"],
)
def test_chunks_then_end(tmp_path: Path, items: list[Item]) -> None:
    """Any event other than chunk between task_id and the terminal event is reported."""
    trace = record(tmp_path / "t.parquet", session(stream(items)))
    (violation,) = check_trace(trace)
    events = seq_of(trace, kind="event")
    assert violation.rule == "chunks-then-end"
    assert violation.seqs == (events[-2],)
    assert "only 'chunk' may come there" in violation.message


@pytest.mark.parametrize(
    ("parts", "why"),
    [
        ([OK[:40], OK[40:80]], "Unterminated string"),  # the result cut short inside a string
        (['{"ok":"yes"}'], "result 'ok': expected bool"),
        ([""], "Expecting value"),
    ],
    ids=["truncated", "wrong-shape", "empty-end"],
)
def test_invalid_json(tmp_path: Path, parts: list[str], why: str) -> None:
    """Chunk and end data that do not join into a RunToolOutput are reported with their length."""
    items: list[Item] = [("task_id", TASK_ID), *(("chunk", part) for part in parts[:-1]), ("end", parts[-1])]
    trace = record(tmp_path / "t.parquet", session(stream(items)))
    (violation,) = check_trace(trace)
    assert violation.rule == "invalid-json"
    assert violation.seqs == tuple(seq_of(trace, kind="event")[1:])
    assert why in violation.message
    assert f"; {len(''.join(parts))} chars: " in violation.message


def test_ok_false_in_an_error_event(tmp_path: Path) -> None:
    """An `error` event whose data is a result with ok:false is reported; ok:false in `end` is not."""
    trace = record(
        tmp_path / "t.parquet",
        session(stream([("task_id", TASK_ID), ("error", NOT_OK)]), stream([("task_id", TASK_ID), ("end", NOT_OK)], 2)),
    )
    (violation,) = check_trace(trace)
    assert (violation.rule, violation.call) == ("ok-false-in-end", 1)
    assert violation.seqs == (seq_of(trace, kind="event", event="error")[0],)


def _times(stream_times: list[float]) -> list[float]:
    """Row times: the /create exchange and open at 0, the call's rows at `stream_times`, then the close."""
    end = stream_times[-1]
    return [0.0, 0.0, 0.0, *stream_times, end, end, end]


@pytest.mark.parametrize(
    ("pings", "gaps"),
    [
        ([10.0, 20.0], []),
        ([12.4, 24.8], []),
        ([], [(0.001, 25.0)]),
        ([10.0], [(10.0, 25.0)]),
        ([13.0, 20.0], [(0.001, 13.0)]),
    ],
    ids=["every-10s", "late-within-slack", "none", "one-missing", "first-late"],
)
def test_pings(tmp_path: Path, pings: list[float], gaps: list[tuple[float, float]]) -> None:
    """A 25 s call needs pings at about 10 and 20 s; each silence over 12.5 s is reported with its two rows."""
    items: list[Item] = [("task_id", TASK_ID), *(":" + PING for _ in pings), ("end", OK)]
    # request, response at 0; each item is a chunk row and its event or comment row at the same time
    stream_times = [0.0, 0.0, *[t for t in [0.001, *pings, 25.0] for _ in range(2)]]
    trace = record(tmp_path / "t.parquet", session(stream(items)), seconds=_times(stream_times))
    violations = check_trace(trace)
    times = dict(zip(trace.table["seq"].to_pylist(), trace.table["t_ns"].to_pylist(), strict=True))
    found = [(times[v.seqs[0]] / 1e9, times[v.seqs[1]] / 1e9) for v in violations]
    assert rules(violations) == ["pings"] * len(gaps)
    assert found == gaps
    for v in violations:
        kinds = [row["kind"] for row in trace.table.to_pylist() if row["seq"] in v.seqs]
        assert kinds[1] == "chunk"  # the first row after the silence: the network chunk that broke it


def test_pings_after_the_response_and_until_a_drop(tmp_path: Path) -> None:
    """Silence counts from the response row, and up to the disconnect row of a dropped stream."""
    items: list[Item] = [("task_id", TASK_ID)]
    stream_times = [0.0, 0.0, 13.0, 13.0, 44.0]
    script = session(stream(items, disconnect="ReadTimeout: no bytes for 30 s"))
    trace = record(tmp_path / "t.parquet", script, seconds=_times(stream_times))
    assert rules(check_trace(trace)) == ["pings", "no-terminal", "pings"]  # by seqs: (4, 5), (4, 7), (6, 7)
    first, _, second = check_trace(trace)
    assert first.message.startswith("13.00 s of silence between the response at seq 4 and the network chunk at seq 5")
    assert "31.00 s of silence between the 'task_id' event at seq 6 and the disconnect at seq 7" in second.message


def test_ping_interval_and_slack_are_parameters(tmp_path: Path) -> None:
    """The allowed silence is ping_interval + ping_slack seconds."""
    items: list[Item] = [("task_id", TASK_ID), ":" + PING, ("end", OK)]
    trace = record(tmp_path / "t.parquet", session(stream(items)), seconds=_times([0, 0, 0, 0, 3.0, 3.0, 6.0, 6.0]))
    assert check_trace(trace, ping_interval=2.0, ping_slack=1.0) == []
    assert rules(check_trace(trace, ping_interval=2.0, ping_slack=0.5)) == ["pings", "pings"]
    with pytest.raises(ValueError, match="ping_interval must be > 0"):
        check_trace(trace, ping_interval=0)


def test_session_closed(tmp_path: Path) -> None:
    """A session with an open row and no close row is reported at its open row."""

    def script(wire: Wire) -> None:
        wire.open("1" * 32)
        wire.open("2" * 32)
        wire.call(1, [("task_id", TASK_ID), ("end", OK)])
        wire.close("2" * 32)

    trace = record(tmp_path / "t.parquet", script)
    (violation,) = check_trace(trace)
    assert violation == Violation(
        "session-closed",
        f"the session was opened at seq {violation.seqs[0]} and never closed",
        session_id="1" * 32,
        seqs=tuple(seq_of(trace, kind="open", session_id="1" * 32)),
    )


def test_session_closed_in_a_partial_trace_says_so(tmp_path: Path) -> None:
    """The parts of an unfinished recording are checked; the unclosed session's message says it is partial."""
    path = tmp_path / "t.parquet"
    rec = ol.Recorder(path, flush_interval=0.01)
    try:
        Wire(rec).open()
        deadline = time.monotonic() + 5
        while True:  # until the open row is on disk
            trace = ol.load_trace(path) if rec.parts.is_dir() else None
            if (trace is not None and "open" in trace.table["kind"].to_pylist()) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert trace is not None
        (violation,) = check_trace(trace)
    finally:
        rec.close()
    assert trace.partial
    assert violation.rule == "session-closed"
    assert violation.message.endswith("(the trace is partial: its recording never finished)")


def test_only_call_streams_are_checked(tmp_path: Path) -> None:
    """A /call answered 404 or not as SSE, and SSE on other paths, are not call streams and are not checked."""

    def script(wire: Wire) -> None:
        wire.open()
        wire.call(1, [], status=404, headers={"content-type": "application/json"})
        wire.call(1, [("end", "not json")], attempt=2, headers={"content-type": "application/json"})
        context = wire.http("POST", "/create_session", 200, SSE)
        traces.sse(wire.rec, "end", "", **context)
        wire.call(2, [("task_id", TASK_ID), ("end", OK)], headers={"Content-Type": "text/event-stream"})
        wire.close()

    trace = record(tmp_path / "t.parquet", script)
    assert check_trace(trace) == []
    assert [(s.call, s.attempt) for s in call_streams(trace)] == [(2, 1)]


# -- formatting and the command line --------------------------------------------------------------


@pytest.fixture
def bad_trace(tmp_path: Path) -> Path:
    """A trace breaking four rules: a chunk first, an end after the end, an error with ok:false, an open session."""
    path = tmp_path / "bad.parquet"

    def script(wire: Wire) -> None:
        wire.open()
        wire.call(1, [("chunk", OK[:10]), ("end", OK[10:]), ("end", OK)])
        wire.call(2, [("task_id", TASK_ID), ("error", NOT_OK)])

    record(path, script)
    return path


def test_violations_sorted_and_formatted(bad_trace: Path) -> None:
    """Violations come in seq order, one line each (`seq A-B session S call N [rule] message`), then a summary."""
    trace = ol.load_trace(bad_trace)
    violations = check_trace(trace)
    assert rules(violations) == ["session-closed", "task-id-first", "one-terminal", "ok-false-in-end"]
    assert [min(v.seqs) for v in violations] == sorted(min(v.seqs) for v in violations)
    lines = format_violations(violations, streams=2).splitlines()
    one_terminal = violations[2]
    assert lines[2] == (
        f"seq {min(one_terminal.seqs)}-{max(one_terminal.seqs)} session {SID} call 1 [one-terminal] "
        + one_terminal.message
    )
    assert lines[0].startswith(f"seq {violations[0].seqs[0]} session {SID} [session-closed] ")
    assert lines[-1] == (
        "4 violations (1 ok-false-in-end, 1 one-terminal, 1 session-closed, 1 task-id-first); 2 call streams checked"
    )
    assert format_violations([], streams=1) == "1 call stream checked, no violations"
    assert format_violations([]) == "no violations"
    assert set(rules(violations)) <= set(RULES)


def test_cli_clean_trace_exits_0(demo_trace: Path) -> None:
    """`ors-lab check` on a clean trace prints the stream count and no violations, and exits 0."""
    done = subprocess.run([*CLI, str(demo_trace)], capture_output=True, text=True, timeout=60)
    streams = len(call_streams(ol.load_trace(demo_trace)))
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{streams} call streams checked, no violations\n", "")


def test_cli_bad_trace_exits_1_with_the_violations(bad_trace: Path) -> None:
    """`ors-lab check` prints one line per violation and the summary, and exits 1."""
    done = subprocess.run([*CLI, str(bad_trace)], capture_output=True, text=True, timeout=60)
    expected = format_violations(check_trace(ol.load_trace(bad_trace)), streams=2)
    assert (done.returncode, done.stdout, done.stderr) == (1, expected + "\n", "")
    assert "[task-id-first] the first event is 'chunk', not 'task_id'" in done.stdout


def test_cli_ping_interval_option(tmp_path: Path) -> None:
    """`--ping-interval S` sets the ping interval the check expects."""
    items: list[Item] = [("task_id", TASK_ID), ":" + PING, ("end", OK)]
    path = tmp_path / "t.parquet"
    record(path, session(stream(items)), seconds=_times([0, 0, 0, 0, 6.0, 6.0, 12.0, 12.0]))
    assert subprocess.run([*CLI, str(path)], capture_output=True, timeout=60).returncode == 0
    done = subprocess.run([*CLI, str(path), "--ping-interval", "3"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == "2 violations (2 pings); 1 call stream checked"


def test_cli_missing_trace_exits_1(tmp_path: Path) -> None:
    """A missing trace exits 1 with the TraceFormatError message."""
    done = subprocess.run([*CLI, str(tmp_path / "none.parquet")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith(f"ors-lab check: no trace at {tmp_path / 'none.parquet'}")
