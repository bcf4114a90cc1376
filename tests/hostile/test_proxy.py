"""Hostile upstreams through the recording proxy: nothing re-sent, drops passed on, nothing unbounded.

The upstream here is a raw HTTP/1.1 server on 127.0.0.1 whose ``/call`` answer is chosen per test;
everything else gets ``200 {}``. It counts the ``/call`` requests that would run the tool (a body
without ``task_id``) apart from the resumes, and how many bytes of ``/call`` stream it wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import ors_lab as ol
from ors_lab.replay.proxy import OUTCOME_UNKNOWN_STATUS, serve_proxy

RESULT = {"ok": True, "output": {"blocks": [{"type": "text", "text": "ran"}], "reward": 1.0, "finished": False}}
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
CAP = 64 * 1024 * 1024  # an "endless" stream stops here, so that a broken proxy cannot hang the test


def chunked(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(name: str, data: str) -> bytes:
    return f"event: {name}\ndata: {data}\n\n".encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Upstream

    def do_GET(self) -> None:
        self._plain()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if not self.path.endswith("/call"):
            self._plain()
            return
        task_id = json.loads(body).get("task_id")
        with self.server.lock:
            if task_id is None:
                self.server.runs += 1
            else:
                self.server.resumes += 1
        self.close_connection = True
        try:
            self.server.on_call(self, task_id)
        except OSError:  # the proxy hung up on us
            self.server.hung_up = True

    def _plain(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def send(self, data: bytes) -> None:
        """Write raw bytes and count them."""
        self.wfile.write(data)
        self.wfile.flush()
        self.server.sent += len(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Upstream(ThreadingHTTPServer):
    """``url``; ``runs`` (first /calls: each one runs the tool), ``resumes``, ``sent``, ``hung_up``."""

    daemon_threads = True

    def __init__(self, on_call: Callable[[Handler, str | None], None]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.on_call = on_call
        self.lock = threading.Lock()
        self.runs = self.resumes = self.sent = 0
        self.hung_up = False
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


def serve_upstream(on_call: Callable[[Handler, str | None], None]) -> Iterator[Upstream]:
    server = Upstream(on_call)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def whole_stream(handler: Handler, task_id: str | None) -> None:
    events = event("task_id", task_id or "t1") + event("end", json.dumps(RESULT))
    handler.send(SSE_HEAD + chunked(events) + b"0\r\n\r\n")


def drop_before_answering(handler: Handler, task_id: str | None) -> None:
    """Read the request, then hang up without a byte."""


def drop_after_head(handler: Handler, task_id: str | None) -> None:
    """Send the 200 head of an SSE stream, then hang up before the task_id."""
    handler.send(SSE_HEAD)
    time.sleep(0.05)


def drop_after_task_id(handler: Handler, task_id: str | None) -> None:
    """A first call breaks after its task_id; a resume gets the whole stream."""
    if task_id is not None:
        whole_stream(handler, task_id)
        return
    handler.send(SSE_HEAD + chunked(event("task_id", "t1")))
    time.sleep(0.05)


def endless_chunks(handler: Handler, task_id: str | None) -> None:
    """task_id, then chunk events without end (up to CAP, or until the proxy hangs up)."""
    handler.send(SSE_HEAD + chunked(event("task_id", "t1")))
    piece = chunked(event("chunk", "x" * 16_000) * 4)
    while handler.server.sent < CAP:
        handler.send(piece)


def endless_line(handler: Handler, task_id: str | None) -> None:
    """task_id, then one line that never ends (up to CAP, or until the proxy hangs up)."""
    handler.send(SSE_HEAD + chunked(event("task_id", "t1") + b"event: chunk\ndata: "))
    piece = chunked(b"x" * 64_000)
    while handler.server.sent < CAP:
        handler.send(piece)


@pytest.fixture
def upstream(request: pytest.FixtureRequest) -> Iterator[Upstream]:
    yield from serve_upstream(request.param)


class Collect(logging.Handler):
    """Keeps uvicorn's error records."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def uvicorn_errors() -> Iterator[list[logging.LogRecord]]:
    """What uvicorn logs as errors in the block (enter it after the server started: its config resets handlers)."""
    collect = Collect()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(collect)
    try:
        yield collect.records
    finally:
        logger.removeHandler(collect)


async def ors_sdk_call(url: str) -> Any:
    """A /call as the ors-sdk client sends it (its own retries: 5xx, 429 and every connection error)."""
    from ors.client._http import resumable_sse

    async with aiohttp.ClientSession(base_url=url) as http:
        return await resumable_sse(http, "/lab/call", sid="s1", json={"name": "run", "input": {}}, max_retries=3,
                                   backoff_base=0.01)  # fmt: skip


async def openreward_call(url: str) -> Any:
    """A /call as openreward's environment client sends it (retries 429, 502, 503, 504 and connection errors)."""
    from openreward.api._session.http import resumable_sse, set_retry_policy

    async with aiohttp.ClientSession(base_url=url) as http:
        set_retry_policy(http, "env-server")
        return await resumable_sse(http, "/lab/call", None, sid="s1", json={"name": "run", "input": {}},
                                   max_retries=3, backoff_base=0.01)  # fmt: skip


async def our_call(url: str) -> Any:
    async with ol.AsyncClient(url) as client, client.environment("lab").session(split="test", index=0) as session:
        return await session.call("run")


CLIENTS = {"ors-lab": our_call, "ors-sdk": ors_sdk_call, "openreward": openreward_call}


@pytest.mark.parametrize("upstream", [drop_before_answering, drop_after_head], indirect=True,
                         ids=["before-head", "after-head"])  # fmt: skip
@pytest.mark.parametrize("client", list(CLIENTS))
async def test_a_drop_before_task_id_is_never_re_sent(upstream: Upstream, client: str, tmp_path: Path) -> None:
    """An upstream that hangs up before the task_id gets a status no client retries: the tool ran once."""
    path = tmp_path / "proxy.parquet"
    with ol.Recorder(path) as rec, serve_proxy(upstream.url, rec) as url:
        with pytest.raises((ol.ORSError, aiohttp.ClientResponseError)) as caught:
            await asyncio.wait_for(CLIENTS[client](url), 20)
    assert upstream.runs == 1 and upstream.resumes == 0
    error = caught.value
    if client == "ors-lab":  # ours reads the answer's x-ors-lab-outcome header
        assert isinstance(error, ol.OutcomeUnknownError), repr(error)
    status = getattr(error, "status_code", None) or getattr(error, "status", None)
    assert status == OUTCOME_UNKNOWN_STATUS, repr(error)
    assert "outcome is unknown" in str(error)
    events = ol.load_trace(path).events
    assert "OutcomeUnknownError" in events[events["kind"] == "call_error"].iloc[0]["error"]


@pytest.mark.parametrize("upstream", [drop_before_answering], indirect=True)
async def test_the_outcome_unknown_answer_says_so(upstream: Upstream, tmp_path: Path) -> None:
    """The answer to a /call whose outcome is unknown: no-retry header, and a JSON detail that says why."""
    with ol.Recorder(tmp_path / "proxy.parquet") as rec, serve_proxy(upstream.url, rec) as url:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/lab/call", json={"name": "run", "input": {}}) as response:
                body = await response.json()
                headers = response.headers
    assert response.status == OUTCOME_UNKNOWN_STATUS
    assert headers["x-should-retry"] == "false"
    assert headers["x-ors-lab-outcome"] == "unknown"
    assert body["outcome"] == "unknown" and "do not send it again" in body["detail"]


@pytest.mark.parametrize("upstream", [drop_before_answering], indirect=True)
async def test_an_upstream_that_refuses_connections_is_still_a_502(upstream: Upstream, tmp_path: Path) -> None:
    """A /call that never reached the upstream (connection refused) is a 502: retrying it is safe."""
    upstream.server_close()  # nothing listens on its port any more
    with ol.Recorder(tmp_path / "proxy.parquet") as rec, serve_proxy(upstream.url, rec) as url:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/lab/call", json={"name": "run", "input": {}}) as response:
                assert response.status == 502


@pytest.mark.parametrize("upstream", [drop_after_task_id], indirect=True)
@pytest.mark.parametrize("client", ["ors-lab", "ors-sdk"])
async def test_a_drop_after_task_id_is_passed_on_as_a_drop(upstream: Upstream, client: str, tmp_path: Path) -> None:
    """A stream broken after its task_id reaches the client as a break; it resumes; nothing is logged as a bug."""
    path = tmp_path / "proxy.parquet"
    with ol.Recorder(path) as rec, serve_proxy(upstream.url, rec) as url, uvicorn_errors() as errors:
        result = await asyncio.wait_for(CLIENTS[client](url), 20)
    assert (upstream.runs, upstream.resumes) == (1, 1)
    text = result.text if isinstance(result, ol.ToolResult) else result["output"]["blocks"][0]["text"]
    assert text == "ran"
    assert [r.getMessage() for r in errors] == []
    events = ol.load_trace(path).events
    assert events[events["kind"] == "disconnect"]["error"].str.contains("RemoteProtocolError").any()


def socket_buffers() -> int:
    """The most a loopback connection's two sockets may hold between a writer and a reader: the largest
    receive buffer and the largest send buffer the kernel grows them to (Linux auto-tuning)."""
    largest = [int(Path(f"/proc/sys/net/ipv4/tcp_{kind}").read_text().split()[2]) for kind in ("rmem", "wmem")]
    return sum(largest)


@pytest.mark.parametrize("upstream", [endless_chunks, endless_line], indirect=True, ids=["chunks", "line"])
async def test_an_endless_call_stream_is_ended_at_the_bound(upstream: Upstream, tmp_path: Path) -> None:
    """Past max_result_bytes the proxy ends the client's stream with an error and stops reading upstream."""
    path = tmp_path / "proxy.parquet"
    limit = 1024 * 1024
    with (
        ol.Recorder(path) as rec,
        serve_proxy(upstream.url, rec, max_result_bytes=limit) as url,
        uvicorn_errors() as errors,
    ):
        started = time.monotonic()
        with pytest.raises(ol.ToolError) as caught:
            await asyncio.wait_for(our_call(url), 20)
        elapsed = time.monotonic() - started
        for _ in range(100):  # the upstream notices the hang-up at its next write
            if upstream.hung_up:
                break
            await asyncio.sleep(0.02)
    assert "max_result_bytes" in str(caught.value)
    assert upstream.hung_up
    assert upstream.sent < 2 * limit + socket_buffers()  # the bound plus what the sockets may hold: not all 64 MiB
    assert elapsed < 10
    assert upstream.runs == 1
    assert [r.getMessage() for r in errors] == []
    events = ol.load_trace(path).events
    assert events[events["kind"] == "call_error"]["error"].str.contains("max_result_bytes").any()
