"""The recorder against both reference servers: what the client received is what the trace holds."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pyarrow as pa
import pytest

import ors_lab as ol
from ors_lab import events as ev
from ors_lab.client.wire import WireTransport
from ors_lab.recording.parts import parts_dir
from tests.envs import common
from tests.traces import comment, exchange, record
from tests.traces import sse as sse_event


class TeeTransport(httpx2.AsyncBaseTransport):
    """The default transport, keeping every /call response body's chunks with their arrival time."""

    def __init__(self) -> None:
        self.inner = WireTransport()
        self.bodies: list[list[tuple[float, bytes]]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if not request.url.path.endswith("/call"):
            return response
        chunks: list[tuple[float, bytes]] = []
        self.bodies.append(chunks)
        stream = response.stream

        class Tee(httpx2.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for chunk in stream:  # type: ignore[union-attr]
                    chunks.append((time.time(), chunk))
                    yield chunk

            async def aclose(self) -> None:
                await stream.aclose()  # type: ignore[union-attr]

        return httpx2.Response(response.status_code, headers=response.headers, stream=Tee(), request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def call_rows(trace: ol.Trace, call: int) -> Any:
    events = trace.events
    return events[(events["call"] == call) & events["kind"].isin(["event", "comment", "chunk"])]


def rebuilt_wire(rows: Any) -> bytes:
    """The SSE bytes the rows describe, framed as both reference servers frame them (CRLF)."""
    out = []
    for row in rows.itertuples():
        if row.kind == "event":
            out.append(f"event: {row.event}\r\ndata: {row.data}\r\n\r\n")
        elif row.kind == "comment":
            out.append(f":{row.comment}\r\n\r\n")
    return "".join(out).encode()


async def record_calls(url: str, path: Path, calls: list[tuple[str, dict[str, Any]]]) -> tuple[Any, ...]:
    tee = TeeTransport()
    async with ol.Recorder(path) as rec:
        async with ol.AsyncClient(url, recorder=rec, transport=tee) as client:
            async with client.environment("lab").session(split="test", index=0) as session:
                results = [await session.call(name, tool_input) for name, tool_input in calls]
    return ol.load_trace(path), results, tee


@pytest.mark.parametrize(
    ("n", "fill"),
    [(10_000, " "), (16 * 1024 * 1024, ' a"\\ü\n\t€  ')],
    ids=["10000-spaces", "16MiB"],
)
async def test_round_trip_byte_for_byte(reference_server: Any, tmp_path: Path, n: int, fill: str) -> None:
    """The trace holds the /call stream byte for byte: events rebuild the received bytes exactly."""
    trace, (result,), tee = await record_calls(
        reference_server.url, tmp_path / "t.parquet", [("big_output", {"n_chars": n, "fill": fill})]
    )
    received = b"".join(chunk for _, chunk in tee.bodies[0])
    rows = call_rows(trace, 1)
    assert rebuilt_wire(rows) == received
    chunk_sizes = rows[rows["kind"] == "chunk"]["size"]
    assert chunk_sizes.sum() == len(received)
    assert list(chunk_sizes) == [len(chunk) for _, chunk in tee.bodies[0]]
    data_rows = rows[(rows["kind"] == "event") & rows["event"].isin(["chunk", "end"])]
    payload = "".join(data_rows["data"])
    assert ol.ToolResult.from_wire(json.loads(payload), task_id=result.task_id) == result
    assert len(result.text) == n
    calls = trace.calls
    assert calls.loc[0, "bytes"] == len(received)
    assert calls.loc[0, "chunks"] == len(tee.bodies[0])


async def test_pings_recorded_when_they_arrived(quick_ping_server: Any, tmp_path: Path) -> None:
    """A slow call's `: ping` comments are rows stamped within 50 ms of their arrival."""
    trace, (result,), tee = await record_calls(
        quick_ping_server.url, tmp_path / "t.parquet", [("slow", {"seconds": common.QUICK_PING_S + 0.5})]
    )
    assert result.text == "slept"
    rows = call_rows(trace, 1)
    assert rebuilt_wire(rows) == b"".join(chunk for _, chunk in tee.bodies[0])
    pings = rows[rows["kind"] == "comment"]
    assert len(pings) == 1
    ping = pings.iloc[0]
    arrived = next(at for at, chunk in tee.bodies[0] if b": ping" in chunk)
    assert abs(ping["wall"].timestamp() - arrived) < 0.05
    sent = dt.datetime.fromisoformat(ping["comment"].removeprefix(" ping - "))
    assert abs(ping["wall"].timestamp() - sent.timestamp()) < 0.05
    assert trace.calls.loc[0, "pings"] == 1


async def test_every_kind_of_row_and_typed_outcomes(reference_server: Any, tmp_path: Path) -> None:
    """A session leaves open, request, response, chunk, event, result, call_error and close rows."""
    path = tmp_path / "t.parquet"
    async with ol.Recorder(path) as rec, ol.AsyncClient(reference_server.url, recorder=rec) as client:
        async with client.environment("lab").session(split="train", index=0) as session:
            await session.call("step", {"value": 1})
            with pytest.raises(ol.ToolError):
                await session.call("crash")
            await session.call("submit", {"answer": "4"})
    trace = ol.load_trace(path)
    events = trace.events
    assert set(events["kind"]) >= {"open", "request", "response", "chunk", "event", "result", "call_error", "close"}
    assert list(events["seq"]) == list(range(len(events)))
    assert events["t_ns"].is_monotonic_increasing
    results = events[events["kind"] == "result"]
    assert list(results["tool"]) == ["step", "submit"]
    assert list(results["reward"]) == [0.1, 1.0]
    assert list(results["finished"]) == [False, True]
    assert set(events["environment"].dropna()) == {"lab"}
    assert set(events[events["session_id"].notna()]["split"]) == {"train"}
    error = events[events["kind"] == "call_error"].iloc[0]
    assert error["tool"] == "crash"
    assert common.CRASH_MESSAGE in error["error"]
    assert list(trace.calls["outcome"]) == ["result", "call_error", "result"]


async def test_resume_is_recorded_as_attempts(reference_server: Any, cutting_proxy: Any, tmp_path: Path) -> None:
    """A cut stream leaves a disconnect row, a retry row with its backoff, and a second attempt."""
    proxy = cutting_proxy(reference_server.url)
    path = tmp_path / "t.parquet"
    policy = ol.RetryPolicy(backoff=0.05)
    async with ol.Recorder(path) as rec, ol.AsyncClient(proxy.url, recorder=rec, retry=policy) as client:
        async with client.environment("lab").session(split="test", index=0) as session:
            result = await session.call("tally", {"key": uuid.uuid4().hex, "delay": 0.2})
    trace = ol.load_trace(path)
    events = trace.events
    retry = events[events["kind"] == "retry"].iloc[0]
    assert (retry["reason"], retry["backoff"], retry["task_id"]) == ("resume", 0.05, result.task_id)
    call = trace.calls.iloc[0]
    assert (call["attempts"], call["outcome"], call["task_id"]) == (2, "result", result.task_id)
    requests = events[(events["kind"] == "request") & (events["call"] == 1)]
    assert list(requests["attempt"]) == [1, 2]
    assert json.loads(requests.iloc[1]["body"])["task_id"] == result.task_id


SECRETS = {"API_TOKEN": "s3cr3t-token-value", "DB_PASSWORD": "hunter2-password-value"}


async def test_secrets_never_reach_a_file(reference_server: Any, tmp_path: Path) -> None:
    """API key, auth headers, cookies, X-Secrets values, /create secrets and user patterns are redacted."""
    path = tmp_path / "t.parquet"
    headers = {"Authorization": "Bearer bearer-value-123", "Cookie": "session=cookie-value-456",
               "X-Custom-Secret": "custom-header-value-789", "X-Trace": "trace-id with ticket-4242"}  # fmt: skip
    secrets_seen: list[bytes] = []
    rec = ol.Recorder(path, compression="none", flush_interval=0.05, redact_names=["X-Custom-Secret"],
                      redact_patterns=[r"ticket-\d+"])  # fmt: skip
    with rec:
        async with ol.AsyncClient(reference_server.url, recorder=rec, api_key="api-key-value-000",
                                  headers=headers) as client:  # fmt: skip
            async with client.environment("lab").session(split="test", index=0, secrets=SECRETS) as session:
                names = (await session.call("secret_keys")).text
                await session.call("step", {"value": 1})
                await asyncio.sleep(0.3)  # let a part reach the disk while recording
                secrets_seen.extend(p.read_bytes() for p in parts_dir(path).iterdir())
    assert names == ", ".join(sorted(SECRETS))  # the secrets did reach the environment
    assert secrets_seen, "no part was written while recording"
    files = [path.read_bytes(), *secrets_seen]
    values = [*SECRETS.values(), "api-key-value-000", "bearer-value-123", "cookie-value-456",
              "custom-header-value-789", "ticket-4242"]  # fmt: skip
    for value in values:
        for blob in files:
            assert value.encode() not in blob
            assert base64.b64encode(value.encode()) not in blob
    events = ol.load_trace(path).events
    requests = events[events["kind"] == "request"]
    sent = [json.loads(h) for h in requests["headers"]]
    assert all(h.get("x-api-key") == "<redacted>" for h in sent)
    assert all(h.get("authorization") == "<redacted>" for h in sent)
    assert all(h["x-trace"] == "trace-id with <redacted>" for h in sent)
    create = requests[requests["url"].str.endswith("/create")].iloc[0]
    if reference_server.sdk == "ors-sdk":
        assert json.loads(create["body"])["secrets"] == dict.fromkeys(SECRETS, "<redacted>")
    else:
        x_secrets = json.loads(json.loads(create["headers"])["x-secrets"])
        assert {name: entry["value"] for name, entry in x_secrets.items()} == dict.fromkeys(SECRETS, "<redacted>")


async def test_a_recorder_does_not_overwrite_a_trace(tmp_path: Path) -> None:
    """An existing trace is kept unless overwrite=True; a closed recorder takes no more events."""
    path = tmp_path / "t.parquet"
    with ol.Recorder(path) as rec:
        rec.record(ev.PingEvent(session_id="s"))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        ol.Recorder(path)
    with pytest.raises(RuntimeError, match="closed"):
        rec.record(ev.PingEvent(session_id="s"))
    with ol.Recorder(path, overwrite=True) as rec:
        pass
    assert len(ol.load_trace(path)) == 0


def test_sync_client_records_too(ors_sdk_server: Any, tmp_path: Path) -> None:
    """The sync client, on its loop thread, records into the same trace format."""
    path = tmp_path / "t.parquet"
    with ol.Recorder(path) as rec, ol.Client(ors_sdk_server.url, recorder=rec) as client:
        with client.environment("echo").session(split="dev", index=0) as session:
            session.call("echo", {"text": "hi"})
    trace = ol.load_trace(path)
    assert trace.episodes.loc[0, "total_reward"] == common.ECHO_REWARD
    assert trace.sessions.loc[0, "environment"] == "echo"


# -- appending -----------------------------------------------------------------------------------


def _write(path: Path, rows: int, **options: Any) -> None:
    with ol.Recorder(path, **options) as rec:
        for n in range(rows):
            comment(rec, f"row {n}")


def _comments(path: Path) -> tuple[list[str], list[int], list[int], set[str]]:
    table = ol.load_trace(path).table
    return (
        table["comment"].to_pylist(),
        table["seq"].to_pylist(),
        table["t_ns"].to_pylist(),
        set(table["run_id"].to_pylist()),
    )


def test_append_adds_to_a_finished_trace(tmp_path: Path) -> None:
    """append=True continues a closed trace: rows kept, seq and t_ns go on, each run keeps its run id."""
    path = tmp_path / "run.parquet"
    _write(path, 3, run_id="first")
    _write(path, 2, run_id="second", append=True)
    comments, seqs, times, runs = _comments(path)
    assert comments == ["row 0", "row 1", "row 2", "row 0", "row 1"]
    assert seqs == list(range(5))
    assert times == sorted(times) and len(set(times)) == 5
    assert runs == {"first", "second"}
    assert not parts_dir(path).exists()
    assert ol.load_trace(path).metadata["run_id"] == "second"


def test_append_adds_to_the_parts_of_a_killed_run(tmp_path: Path) -> None:
    """append=True over the parts a crash left (a half-written .tmp among them) keeps every whole part."""
    path = tmp_path / "run.parquet"
    code = (
        "import sys, time, ors_lab as ol\n"
        "from ors_lab.events import CommentEvent\n"
        "rec = ol.Recorder(sys.argv[1], run_id='crashed', flush_interval=0.05)\n"
        "for n in range(4): rec.record(CommentEvent(comment=f'row {n}'))\n"
        "rec.flush(); print('flushed', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "flushed"
    proc.kill()
    proc.wait(timeout=30)
    proc.stdout.close()
    (parts_dir(path) / ".part-000000099.arrow.tmp").write_bytes(b"half a part")
    assert not path.exists()
    _write(path, 2, run_id="resumed", append=True)
    comments, seqs, _, runs = _comments(path)
    assert comments == ["row 0", "row 1", "row 2", "row 3", "row 0", "row 1"]
    assert seqs == list(range(6)) and runs == {"crashed", "resumed"}
    assert not ol.load_trace(path).partial


def test_append_after_a_kill_between_compaction_and_removal(tmp_path: Path) -> None:
    """A compacted trace beside the parts it was made of (a kill after the rename): append drops the leftovers."""
    path = tmp_path / "run.parquet"
    rec = ol.Recorder(path, run_id="first", flush_interval=3600)
    for n in range(3):
        comment(rec, f"row {n}")
    rec.flush()
    saved = tmp_path / "saved"
    shutil.copytree(parts_dir(path), saved, ignore=shutil.ignore_patterns(".lock"))
    rec.close()
    shutil.copytree(saved, parts_dir(path))
    assert _comments(path)[0] == ["row 0", "row 1", "row 2"]
    _write(path, 1, run_id="second", append=True)
    comments, seqs, _, _ = _comments(path)
    assert comments == ["row 0", "row 1", "row 2", "row 0"] and seqs == [0, 1, 2, 3]
    assert not parts_dir(path).exists()
    shutil.copytree(saved, parts_dir(path))  # parts that are not what the trace was compacted from: kept, refused
    with pytest.raises(FileExistsError, match="holds parts too"):
        ol.Recorder(path, append=True)
    assert sorted(p.name for p in parts_dir(path).glob("part-*")) == ["part-000000000.arrow"]


def test_a_trace_appended_to_reads_while_it_records(tmp_path: Path) -> None:
    """While appending, the parts are the old trace (Parquet) and the new run's (Arrow): load_trace reads both."""
    path = tmp_path / "run.parquet"
    _write(path, 2, run_id="first")
    with ol.Recorder(path, run_id="second", append=True, flush_interval=3600) as rec:
        comment(rec, "row 2")
        rec.flush()
        suffixes = sorted(p.suffix for p in parts_dir(path).glob("part-*"))
        partial = ol.load_trace(path)
    assert suffixes == [".arrow", ".parquet"]
    assert partial.partial and list(partial.events["comment"]) == ["row 0", "row 1", "row 2"]
    assert list(partial.events["seq"]) == [0, 1, 2]


def test_append_refuses_what_is_not_a_trace(tmp_path: Path) -> None:
    """Appending to a file that is not a trace raises TraceFormatError and leaves the file alone."""
    path = tmp_path / "run.parquet"
    path.write_text("not parquet")
    with pytest.raises(ol.TraceFormatError, match=r"cannot append to .*run\.parquet: it is not a readable Parquet"):
        ol.Recorder(path, append=True)
    assert path.read_text() == "not parquet"


def test_an_existing_trace_needs_append_or_overwrite(tmp_path: Path) -> None:
    """Without append= or overwrite=, an existing trace is refused, and the message names both options."""
    path = tmp_path / "run.parquet"
    _write(path, 1)
    with pytest.raises(FileExistsError, match="pass append=True to add to it, overwrite=True to replace it"):
        ol.Recorder(path)
    with pytest.raises(ValueError, match="choose one"):
        ol.Recorder(path, append=True, overwrite=True)


def test_create_secrets_are_redacted_whatever_the_query(tmp_path: Path) -> None:
    """A /create body's secrets are redacted also when the URL carries a query (as the proxy forwards it)."""
    path = tmp_path / "run.parquet"
    body = json.dumps({"env_name": "lab", "split": "train", "index": 0, "secrets": {"TOKEN": "s3cr3t-value"}})
    with ol.Recorder(path, compression="none") as rec:
        rec.record(ev.RequestEvent(session_id="s1", method="POST", url="http://127.0.0.1:1/create?trace=1",
                                   body=body.encode()))  # fmt: skip
    assert b"s3cr3t-value" not in path.read_bytes()
    recorded = json.loads(ol.load_trace(path).table["body"][0].as_py())
    assert recorded["secrets"] == {"TOKEN": "<redacted>"}
    assert ol.load_trace(path).table["task_index"][0].as_py() == 0


def test_flush_makes_everything_emitted_so_far_readable(tmp_path: Path) -> None:
    """flush() writes what is queued now (the flush interval is an hour here); load_trace reads it as partial."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path, flush_interval=3600) as rec:
        for n in range(3):
            comment(rec, f"row {n}")
        assert not list(parts_dir(path).glob("part-*"))
        rec.flush()
        first = ol.load_trace(path)
        comment(rec, "row 3")
        rec.flush(timeout=30)
        second = ol.load_trace(path)
    assert first.partial and list(first.events["comment"]) == ["row 0", "row 1", "row 2"]
    assert second.partial and list(second.events["comment"]) == ["row 0", "row 1", "row 2", "row 3"]
    final = ol.load_trace(path)
    assert not final.partial and list(final.events["seq"]) == [0, 1, 2, 3]
    rec.flush()  # closed: everything is written, nothing to wait for


def test_flush_from_several_threads_at_once(tmp_path: Path) -> None:
    """Concurrent flush() calls each return once their own rows are on disk."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path, flush_interval=3600) as rec:

        def emit_and_flush(thread: int) -> int:
            for n in range(50):
                comment(rec, f"{thread}-{n}")
            rec.flush(timeout=30)
            return len(ol.load_trace(path).events)

        with ThreadPoolExecutor(4) as pool:
            seen = list(pool.map(emit_and_flush, range(4)))
    assert all(count >= 50 for count in seen)
    assert len(ol.load_trace(path).events) == 200


def test_flush_times_out_and_reports_a_failed_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """flush(timeout) raises TimeoutError while the writer is stuck, and the writer's error once it fails."""
    release = threading.Event()

    def stuck(self: ol.Recorder, table: Any, metadata: dict[bytes, bytes]) -> None:
        release.wait(30)
        raise OSError("disk full")

    monkeypatch.setattr(ol.Recorder, "_write_part", stuck)
    rec = ol.Recorder(tmp_path / "run.parquet", flush_interval=3600)
    comment(rec, "row 0")
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"not written after 0\.2 s"):
        rec.flush(timeout=0.2)
    assert time.monotonic() - started < 5
    release.set()
    with pytest.raises(RuntimeError, match="the trace writer failed") as failed:
        rec.flush(timeout=30)
    assert isinstance(failed.value.__cause__, OSError)
    with pytest.raises(RuntimeError, match="the parts are kept"):
        rec.close()


def test_headers_are_recorded_as_the_client_held_them(tmp_path: Path) -> None:
    """httpx2.Headers become the JSON of their redacted items: names lower-cased, a repeated name's
    values joined, a secret replaced, bytes beyond ASCII kept, the same headers the same each time."""
    path = tmp_path / "run.parquet"
    raw = [
        (b"Content-Type", b"text/event-stream"),
        (b"Set-Cookie", b"a=1"),
        (b"set-cookie", b"b=2"),
        (b"Authorization", b"Bearer s3cr3t-token"),
        (b"X-Name", "caf\u00e9".encode("latin-1")),
    ]
    single = [(b"Server", b"uvicorn"), (b"X-Session-ID", b"s1")]
    with ol.Recorder(path) as rec:
        for headers in (raw, single, single, raw):
            rec.record(ev.ResponseEvent(session_id="s1", status=200, headers=httpx2.Headers(headers)))
            rec.emit("response", session_id="s1", status=200, headers=httpx2.Headers(headers))  # emit's own path
    recorded = [json.loads(text) for text in ol.load_trace(path).table["headers"].to_pylist()]
    expected_raw = {
        "content-type": "text/event-stream",
        "set-cookie": "<redacted>, <redacted>",
        "authorization": "<redacted>",
        "x-name": "caf\u00e9",
    }
    plain = {"server": "uvicorn", "x-session-id": "s1"}
    assert recorded == [expected_raw, expected_raw, plain, plain, plain, plain, expected_raw, expected_raw]
    assert b"s3cr3t-token" not in path.read_bytes()


def test_headers_of_another_type_fail_clearly(tmp_path: Path) -> None:
    """Headers given as bytes are not a form the recorder knows: emit refuses the row, saying which
    forms are, and records the rows before and after it."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path) as rec:  # emit: its refusal of a row is what this test pins
        rec.emit("comment", comment="before")
        with pytest.raises(TypeError, match=r"httpx2\.Headers, a mapping, \(name, value\) pairs or JSON text"):
            rec.emit("response", status=200, headers=b"content-type: text/plain")
        rec.emit("comment", comment="after")
    trace = ol.load_trace(path)
    assert list(trace.events["comment"]) == ["before", "after"]
    assert list(trace.events["seq"]) == [0, 1]


def test_threads_emitting_at_once_keep_order_and_context(tmp_path: Path) -> None:
    """Four threads emitting at once (past a part's worth of rows, so the writer takes rows meanwhile):
    every row once, in seq order, each with the context of its own session."""
    path = tmp_path / "run.parquet"
    per_thread = 3_089

    def emit_session(rec: ol.Recorder, n: int) -> None:
        rec.record(ev.OpenEvent(session_id=f"s{n}", environment=f"env{n}", split="test", task_index=n))
        for i in range(per_thread):
            rec.record(ev.SSEEvent(session_id=f"s{n}", call=1, event="chunk", data=f"{n}:{i}"))
        rec.record(ev.CloseEvent(session_id=f"s{n}"))

    with ol.Recorder(path, part_rows=1_024) as rec, ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: emit_session(rec, n), range(4)))
    table = ol.load_trace(path).table
    assert table["seq"].to_pylist() == list(range(4 * (per_thread + 2)))
    events = [row for row in table.to_pylist() if row["kind"] == "event"]
    assert sorted(row["data"] for row in events) == sorted(f"{n}:{i}" for n in range(4) for i in range(per_thread))
    for row in events:
        n = int(row["data"].split(":")[0])
        assert (row["session_id"], row["environment"], row["task_index"]) == (f"s{n}", f"env{n}", n)


@pytest.mark.parametrize("path_of", ["emit", "record"])
def test_a_session_id_used_again_after_its_close_keeps_its_context(tmp_path: Path, path_of: str) -> None:
    """A session id opened again after its close, with the close's rows written in between: the rows
    of the second session still have its context (the first close forgets only what came before it)."""
    path = tmp_path / "run.parquet"
    create = b'{"env_name":"e","split":"t","index":3}'
    call = b'{"name":"tool","input":{"a":1}}'
    with ol.Recorder(path) as rec:
        for n in range(2):
            if path_of == "emit":  # emit: this test pins that its rows keep the context as record's do
                rec.emit("request", session_id="s", url="http://127.0.0.1:1/create", body=create)
                rec.emit("request", session_id="s", call=0, url="http://127.0.0.1:1/e/call", body=call)
                rec.flush()  # the first close is written with the second session's requests
                rec.emit("result", session_id="s", call=0, ok=True, reward=float(n))
                rec.emit("close", session_id="s")
            else:
                rec.record(ev.RequestEvent(session_id="s", method="POST", url="http://127.0.0.1:1/create", body=create))
                rec.record(
                    ev.RequestEvent(session_id="s", call=0, method="POST", url="http://127.0.0.1:1/e/call", body=call)
                )
                rec.flush()
                rec.record(
                    ev.ResultEvent(session_id="s", call=0, task_id=None, ok=True, reward=float(n), finished=False)
                )
                rec.record(ev.CloseEvent(session_id="s"))
    rows = [row for row in ol.load_trace(path).table.to_pylist() if row["kind"] == "result"]
    assert [(r["environment"], r["split"], r["task_index"], r["tool"], r["input"], r["reward"]) for r in rows] == [
        ("e", "t", 3, "tool", '{"a":1}', 0.0),
        ("e", "t", 3, "tool", '{"a":1}', 1.0),
    ]


def test_watchers_get_every_written_table_and_a_raising_one_is_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``watch``: each reader gets every table the writer writes, as written; a reader that raises is
    dropped and logged while the recording and the other readers go on; ``stop()`` ends a reader."""
    path = tmp_path / "run.parquet"
    seen: list[pa.Table] = []
    stopped: list[pa.Table] = []
    raised: list[int] = []

    def bad(table: pa.Table) -> None:
        raised.append(table.num_rows)
        raise ValueError("reader broke")

    with ol.Recorder(path, part_rows=50) as rec:
        rec.watch(seen.append)
        rec.watch(bad)
        stop = rec.watch(stopped.append)
        for i in range(120):
            rec.record(ev.SSEEvent(session_id="s", event="chunk", data=str(i)))
        rec.flush()
        stop()
        rec.record(ev.SSEEvent(session_id="s", event="chunk", data="last"))
    assert pa.concat_tables(seen).equals(ol.load_trace(path).table.select(seen[0].schema.names))
    assert [row for t in stopped for row in t["data"].to_pylist()] == [str(i) for i in range(120)]
    assert len(raised) == 1 and "a reader of" in caplog.text and "reader broke" in caplog.text


def test_a_value_its_column_cannot_hold_is_refused_by_its_own_emit(tmp_path: Path) -> None:
    """A value of the wrong type fails the emit that gives it, naming the column; the row leaves
    nothing behind (no seq taken, no context kept), and the rows before and after it are recorded."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path) as rec:  # emit: wrong-typed values only a hand-written row can give
        rec.emit("comment", comment="before")
        with pytest.raises(TypeError, match=r"trace column 'status' \(int32\) cannot hold 'not a number'"):
            rec.emit("response", session_id="s1", status="not a number", headers={"x-a": "1"})
        with pytest.raises(TypeError, match=r"trace column 'call' \(int32\) cannot hold 4294967296"):
            rec.emit("open", session_id="s2", environment="quiz", call=2**32)
        with pytest.raises(TypeError, match="'bogus' is not a trace column"):
            rec.emit("comment", bogus=1)
        with pytest.raises(TypeError, match="'seq' is stamped by the recorder"):
            rec.emit("comment", seq=7)
        with pytest.raises(TypeError, match="'wall' is stamped by the recorder"):
            rec.emit("comment", wall=7)
        rec.emit("comment", comment="after", session_id="s2")
    events = ol.load_trace(path).events
    assert list(events["comment"]) == ["before", "after"]
    assert list(events["seq"]) == [0, 1]
    assert events["environment"].isna().all()  # the refused open left no context for s2


def test_a_refused_row_leaves_no_value_in_any_column(tmp_path: Path) -> None:
    """A row refused at its last column had stored its other values first: none of them is left for
    the next row, whose columns are null where it gives nothing (bools and texts alike)."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path) as rec:  # emit: a row refused at one of its columns, which only emit can give
        with pytest.raises(TypeError, match=r"trace column 'backoff'"):
            rec.emit("result", ok=True, finished=True, reward=1.0, data="kept?", status=200, backoff="soon")
        rec.emit("result", session_id="s1")
        rec.emit("result", ok=False, finished=True, data="", backoff=0.5)
    rows = ol.load_trace(path).table.to_pylist()
    assert [(r["ok"], r["finished"], r["reward"], r["data"], r["status"], r["backoff"]) for r in rows] == [
        (None, None, None, None, None, None),
        (False, True, None, "", None, 0.5),
    ]


def test_fields_land_in_their_columns_whatever_the_call(tmp_path: Path) -> None:
    """The same fields in other orders, by name or as **fields, each in their own column."""
    path = tmp_path / "run.parquet"
    fields = {"status": 201, "size": 7, "event": "e", "data": "d"}
    with ol.Recorder(path) as rec:  # emit: how its keyword columns are taken is what this test pins
        for _ in range(3):
            rec.emit("event", status=201, size=7, event="e", data="d")
            rec.emit("event", data="d", event="e", size=7, status=201)
            rec.emit("event", **fields)
            rec.emit("event", **dict(reversed(fields.items())))
            rec.emit("event", size=7, **{"data": "d", "status": 201}, event="e")
    rows = ol.load_trace(path).table.to_pylist()
    assert len(rows) == 15
    assert {(r["status"], r["size"], r["event"], r["data"]) for r in rows} == {(201, 7, "e", "d")}


def test_header_items_past_the_cache_are_recorded_right(tmp_path: Path) -> None:
    """A server's date changes every second: past the 4,096 header items the recorder keeps, it
    forgets them and goes on, each response's headers recorded as they were."""
    path = tmp_path / "run.parquet"
    n = 5_000
    with ol.Recorder(path) as rec:
        for i in range(n):
            headers = httpx2.Headers([(b"Server", b"uvicorn"), (b"Date", f"day {i}".encode()), (b"X-Api-Key", b"k3y")])
            rec.record(ev.ResponseEvent(status=200, headers=headers))
            assert len(rec._rows._header_items) <= 4_096
    recorded = [json.loads(text) for text in ol.load_trace(path).table["headers"].to_pylist()]
    assert recorded == [{"server": "uvicorn", "date": f"day {i}", "x-api-key": "<redacted>"} for i in range(n)]
    assert b"k3y" not in path.read_bytes()


def test_values_arrow_converts_are_stored_as_arrow_converts_them(tmp_path: Path) -> None:
    """Values of other types than the column's own are stored as Arrow converts them: an int reward
    as a float, a dict task and a list input as JSON text, bytearray and str bodies as bytes."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path) as rec:  # emit: values of another type than the column's, which no event holds
        rec.emit("result", reward=1, ok=True, finished=False, input=[1, "a"], task={"b": 2})
        rec.emit("request", body=bytearray(b"raw"), size=True is True and 3)
        rec.emit("request", body="text \u00e9")
    rows = ol.load_trace(path).table.to_pylist()
    assert rows[0]["reward"] == 1.0 and isinstance(rows[0]["reward"], float)
    assert (rows[0]["ok"], rows[0]["finished"]) == (True, False)
    assert json.loads(rows[0]["input"]) == [1, "a"] and json.loads(rows[0]["task"]) == {"b": 2}
    assert [rows[1]["body"], rows[2]["body"]] == [b"raw", "text \u00e9".encode()]
    assert rows[1]["size"] == 3


def test_append_to_a_trace_whatever_its_name(tmp_path: Path) -> None:
    """A finished trace is Parquet whatever its file name says: appending to one named .arrow works."""
    path = tmp_path / "run.arrow"
    _write(path, 2, run_id="first")
    _write(path, 1, run_id="second", append=True)
    comments, seqs, _, runs = _comments(path)
    assert comments == ["row 0", "row 1", "row 0"] and seqs == [0, 1, 2] and runs == {"first", "second"}


def test_every_path_of_emit_under_threads_gives_valid_arrow(tmp_path: Path) -> None:
    """Three threads emitting every kind of row (headers of each form, bodies with secrets, refused
    rows, user patterns, a body bigger than the buffers keep) through several parts: the trace
    is valid Arrow to the last buffer, every row is there once in seq order, and no secret is kept."""
    path = tmp_path / "run.parquet"
    rec = ol.Recorder(path, part_rows=512, redact_patterns=[r"sk-\w+"], redact_names=["x-mine"])
    repeated = httpx2.Headers(
        [(b"Content-Type", b"application/json"), (b"Set-Cookie", b"a=1"), (b"set-cookie", b"b=2")]
    )
    single = httpx2.Headers([(b"Server", b"uvicorn"), (b"X-Mine", b"mine-secret")])
    refused = ({"status": "no"}, {"call": 2**40}, {"bogus": 1}, {"headers": b"raw"}, {"seq": 1}, {"ok": 3})
    per_thread = 200

    def work(n: int) -> None:  # emit: every path of emit itself, refused rows among them
        for i in range(per_thread):
            sid = f"s{n}-{i % 7}"
            create = b'{"env_name":"e","split":"t","index":3,"secrets":{"k":"create-secret"}}'
            rec.emit(
                "request",
                session_id=sid,
                url="http://127.0.0.1:1/create?token=tok-secret",
                headers=repeated,
                body=create,
            )
            rec.emit("open", session_id=sid, environment="e", task={"q": [1, 2]})
            call_body = b'{"name":"tool","input":{"a":"sk-123"}}'
            rec.emit(
                "request", session_id=sid, call=i % 3, url="http://127.0.0.1:1/e/call", headers=single, body=call_body
            )
            rec.emit("response", session_id=sid, call=i % 3, status=200, headers=[("A", "1")], ttfb_ns=5)
            rec.emit("event", session_id=sid, call=i % 3, event="chunk", data="x" * (i % 50) + " sk-abc")
            rec.emit("result", session_id=sid, call=i % 3, ok=bool(i % 2), reward=i, error="failed: sk-1")
            for bad in refused:
                with pytest.raises(TypeError):
                    rec.emit("comment", session_id=sid, comment="refused", **bad)
            rec.emit("close", session_id=sid)

    with ThreadPoolExecutor(3) as pool:
        list(pool.map(work, range(3)))
    rec.emit("response", body=b"y" * (5 << 20))  # emit: a response row with no status, as only emit writes one
    rec.close()
    table = ol.load_trace(path).table
    table.validate(full=True)
    assert table["seq"].to_pylist() == list(range(3 * per_thread * 7 + 1))
    rows = table.to_pylist()
    assert "refused" not in {row["comment"] for row in rows}
    calls = [row for row in rows if row["kind"] == "result"]
    assert {(row["environment"], row["split"], row["task_index"], row["tool"]) for row in calls} == {
        ("e", "t", 3, "tool")
    }
    assert all(json.loads(row["input"]) == {"a": "<redacted>"} for row in calls)
    text = json.dumps([{k: v for k, v in row.items() if k != "body"} for row in rows], default=str)
    text += "".join(row["body"].decode() for row in rows if row["body"] and len(row["body"]) < 1000)
    for secret in ("create-secret", "tok-secret", "mine-secret", "sk-"):
        assert secret not in text


def test_settings_that_would_stall_the_recorder_are_refused(tmp_path: Path) -> None:
    """part_rows below 1 and a flush interval of 0 or less raise ValueError and leave no files."""
    path = tmp_path / "run.parquet"
    with pytest.raises(ValueError, match="part_rows must be at least 1, not 0"):
        ol.Recorder(path, part_rows=0)
    with pytest.raises(ValueError, match="flush_interval is in seconds and must be above 0, not 0"):
        ol.Recorder(path, flush_interval=0)
    assert list(tmp_path.iterdir()) == []
    with ol.Recorder(path) as rec:
        with pytest.raises(ValueError, match="not -5"):
            rec.part_rows = -5
        rec.part_rows = 3
        for i in range(7):
            comment(rec, f"row {i}")
        assert rec.part_rows == 3
    assert len(ol.load_trace(path)) == 7


# -- redaction by name -----------------------------------------------------------------------------

LEAKS = {f"leak-{n:02d}" for n in range(20)}
ORDINARY_BODY = {"session_id": "sid-1", "task_id": "tid-1", "tokens": 7, "max_tokens": 5, "input_tokens": 3,
                 "author": "me", "monkey": "banana", "keys": 2}  # fmt: skip


def test_common_secret_names_are_redacted_after_decoding(tmp_path: Path) -> None:
    """Query parameters, headers and JSON keys named like secrets (any case, percent- or JSON-escaped) are
    redacted; ORS fields and token counts are not; user names and patterns add to the list."""
    path = tmp_path / "run.parquet"
    query = ("password=leak-00&secret=leak-01&auth=leak-02&sig=leak-03&client_secret=leak-04&pass%77ord=leak-05"
             "&session_id=sid-1&max_tokens=5")  # fmt: skip
    headers = {"api-key": "leak-06", "X-Auth-Token": "leak-07", "OpenAI-Api-Key": "leak-08", "X-Tenant": "leak-09",
               "X-Session-ID": "sid-1", "X-Note": "ticket leak-10"}  # fmt: skip
    create = (b'{"env_name":"lab","split":"test","index":0,"secr\\u0065ts":{"OPENAI_API_KEY":"leak-11"},'
              b'"task_spec":{"id":"t1","Client-Secret":"leak-12"}}')  # fmt: skip
    call = json.dumps({"name": "login", "input": {"user": "u", "PassWord": "leak-13", "x_tenant": "leak-14",
                                                   **ORDINARY_BODY}}).encode()  # fmt: skip
    with ol.Recorder(path, compression="none", redact_names=["x-tenant"], redact_patterns=[r"leak-10"]) as rec:
        record(rec, ev.RequestEvent(session_id="s", method="GET", url=f"http://127.0.0.1:1/lab/tasks?{query}",
                                    headers=headers),
               ev.RequestEvent(session_id="s", method="POST", url="http://127.0.0.1:1/create", body=create),
               ev.RequestEvent(session_id="s", call=0, method="POST", url="http://127.0.0.1:1/lab/call", body=call),
               ev.ResultEvent(session_id="s", call=0, task_id=None, ok=True, reward=None, finished=False))  # fmt: skip
        rec.flush()
        written = [p.read_bytes() for p in parts_dir(path).glob("part-*")]
    written.append(path.read_bytes())
    for blob in written:
        assert not [leak for leak in sorted(LEAKS) if leak.encode() in blob]
    table = ol.load_trace(path).table
    url = table["url"][0].as_py()
    for name in ("password", "secret", "auth", "sig", "client_secret"):
        assert f"{name}=%3Credacted%3E" in url
    assert "session_id=sid-1" in url and "max_tokens=5" in url
    sent = json.loads(table["headers"][0].as_py())
    assert {k: v for k, v in sent.items() if v == "<redacted>"}.keys() == {"api-key", "x-auth-token",
                                                                          "openai-api-key", "x-tenant"}  # fmt: skip
    assert sent["x-session-id"] == "sid-1" and sent["x-note"] == "ticket <redacted>"
    body = json.loads(table["body"][1].as_py())
    assert body["secrets"] == {"OPENAI_API_KEY": "<redacted>"}  # the names are kept
    assert body["task_spec"] == {"id": "t1", "Client-Secret": "<redacted>"}
    assert json.loads(table["task"][1].as_py()) == {"id": "t1", "Client-Secret": "<redacted>"}
    given = json.loads(table["body"][2].as_py())["input"]
    assert given == {"user": "u", "PassWord": "<redacted>", "x_tenant": "<redacted>", **ORDINARY_BODY}
    assert json.loads(table["input"][3].as_py()) == given  # the result row's call context: the same, redacted


def test_key_and_sig_are_secrets_in_headers_and_queries_not_as_json_keys() -> None:
    """`?key=` and `?sig=` carry credentials; a JSON `key` (a counter's, a schema's parameter) is an ordinary field,
    unless the user names it."""
    from ors_lab.recording.redact import Redactor

    redactor = Redactor()
    assert "key=%3Credacted%3E" in redactor.url("http://h/x?key=k1&sig=s1&page=2")
    assert "sig=%3Credacted%3E" in redactor.url("http://h/x?key=k1&sig=s1&page=2")
    assert redactor.header_items([("Key", "k1")]) == {"key": "<redacted>"}
    schema = {"tools": [{"parameters": {"properties": {"key": {"type": "string", "description": "The counter."}}}}],
              "input": {"key": "counter-a", "sig": "v2", "api_key": "leak"}}  # fmt: skip
    kept = json.loads(redactor.body(json.dumps(schema).encode()) or b"")
    assert kept["tools"] == schema["tools"]
    assert kept["input"] == {"key": "counter-a", "sig": "v2", "api_key": "<redacted>"}
    named = json.loads(Redactor(names=["key"]).body(json.dumps(schema).encode()) or b"")
    assert named["input"]["key"] == "<redacted>"


def test_a_thinking_blocks_signature_is_kept_and_any_other_signature_redacted() -> None:
    """A Messages request sends back each thinking block with its signature (the provider's, no credential): it is
    kept, so that the recorded conversation can be sent again; a `signature` anywhere else is redacted."""
    from ors_lab.recording.redact import Redactor

    thinking = {"type": "thinking", "thinking": "Let me see.", "signature": "EqQBCkgIARABGAIiQL2k"}
    body = {"model": "m", "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": [
            thinking, {"type": "text", "text": "4"}]}], "webhook": {"signature": "whsec_leak"}}  # fmt: skip
    kept = json.loads(Redactor().body(json.dumps(body).encode()) or b"")
    assert kept["messages"][1]["content"][0] == thinking
    assert kept["webhook"] == {"signature": "<redacted>"}
    assert Redactor().json({"type": "text", "signature": "s"})[0] == {"type": "text", "signature": "<redacted>"}


def test_an_agent_tool_input_is_redacted_as_its_request_is(tmp_path: Path) -> None:
    """A tool-input-available event with a password key: its input and data are redacted like the /call body."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path, compression="none") as rec:
        rec.record(ev.ToolInputAvailableEvent(session_id="s", tool_call_id="c1", tool_name="login",
                                              input={"user": "u", "password": "leak-15"}))  # fmt: skip
    assert b"leak-15" not in path.read_bytes()
    row = ol.load_trace(path).table.to_pylist()[0]
    assert json.loads(row["input"]) == {"user": "u", "password": "<redacted>"}
    assert json.loads(row["data"])["input"] == {"user": "u", "password": "<redacted>"}


def test_redacted_bodies_still_replay(tmp_path: Path) -> None:
    """A /create task spec and a /call input with values redacted are matched by a replay that sends the values."""
    from ors_lab.replay.engine import ReplayEngine

    path = tmp_path / "run.parquet"
    create = b'{"env_name":"lab","split":null,"index":null,"task_spec":{"id":"t1","api_key":"leak-16"}}'
    call = b'{"name":"login","input":{"user":"u","password":"leak-17"}}'
    sse = '{"content-type":"text/event-stream"}'
    with ol.Recorder(path) as rec:
        exchange(rec, "POST", "http://127.0.0.1:1/create", 200, session_id="s", exchange=0, body=create,
                 headers="{}", response_body=b'{"ok":true}')  # fmt: skip
        exchange(rec, "POST", "http://127.0.0.1:1/lab/call", 200, session_id="s", call=0, exchange=1, body=call,
                 headers=sse)  # fmt: skip
        for name, data in (("task_id", "t-1"), ("chunk", '{"ok":true}'), ("end", "")):
            sse_event(rec, name, data, session_id="s", call=0, exchange=1)
    engine = ReplayEngine(path, speed=0)
    assert engine.handle("POST", "/create", {"x-session-id": "live"}, create).status == 200
    answer = engine.handle("POST", "/lab/call", {"x-session-id": "live"}, call)
    assert answer.status == 200 and answer.stream, answer
    other = b'{"name":"login","input":{"user":"v","password":"leak-17"}}'
    assert engine.handle("POST", "/lab/call", {"x-session-id": "live"}, other).status == 400  # user still differs
