"""A /call result and an SSE line are bounded: endless streams end in MalformedStreamError, memory stays small.

A tiny raw-socket ORS server on 127.0.0.1 (defined here, so these tests stand alone) answers every
request with ``{}`` except ``/call``, whose stream it makes hostile: after ``task_id`` it sends
chunks, a line or data lines that never end, until the client hangs up or ``CAP`` bytes went out.
A resume (a ``/call`` with ``task_id``) gets ``error: unknown task_id``. The client runs with small
limits, so each case takes well under a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import socket
import threading
import tracemalloc
from collections.abc import Iterator

import pytest

from ors_lab import AsyncClient, Client
from ors_lab.protocol.call import MAX_RESULT_BYTES
from ors_lab.protocol.errors import MalformedStreamError
from ors_lab.protocol.sse import MAX_LINE_BYTES

CAP = 64 * 1024 * 1024  # the server stops here: far beyond any limit below, so no test hangs
LIMIT = 1024 * 1024  # max_result_bytes and max_line_bytes in these tests
SLACK = 24 * 1024 * 1024  # socket buffers on both sides of loopback, and the reads in flight
PIECE = 64 * 1024
TASK_ID = "0123456789abcdef0123456789abcdef"

MODES = {
    # each: (what follows the task_id event, repeated until the client hangs up)
    "endless chunks": b"event: chunk\r\ndata: " + b"x" * (PIECE - 24) + b"\r\n\r\n",
    "endless line": b"x" * PIECE,  # after an unfinished "data: " line
    "endless data lines": b"data: " + b"x" * (PIECE - 8) + b"\r\n",  # no blank line: one endless event
}
PREFIX = {"endless line": b"event: chunk\r\ndata: "}


class HostileServer:
    """A raw HTTP/1.1 server on 127.0.0.1: ``{}`` for every request, a hostile stream for ``/call``."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sent = 0  # body bytes of hostile /call streams written before the client hung up
        self.calls = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for thread in self._threads:
            thread.join(10)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        reader = conn.makefile("rb")
        with contextlib.suppress(OSError), conn, reader:
            while not self._stop.is_set():
                head = reader.readline()
                if not head:
                    return
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = reader.read(length) if length else b""
                if b"/call" not in head.split(b" ")[1]:
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
                    continue
                self.calls += 1
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                )
                if "task_id" in json.loads(body):
                    self._chunk(conn, b"event: error\r\ndata: unknown task_id\r\n\r\n")
                    conn.sendall(b"0\r\n\r\n")
                    continue
                self._chunk(conn, b"event: task_id\r\ndata: " + TASK_ID.encode() + b"\r\n\r\n")
                self._chunk(conn, PREFIX.get(self.mode, b""))
                piece = MODES[self.mode]
                while self.sent < CAP and not self._stop.is_set():
                    self._chunk(conn, piece)
                    self.sent += len(piece)
                return  # the client hung up (OSError) or the cap was reached: close

    @staticmethod
    def _chunk(conn: socket.socket, data: bytes) -> None:
        if data:
            conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))


@contextlib.contextmanager
def traced() -> Iterator[list[int]]:
    """Yield a list that holds, afterwards, the peak of Python memory above the start (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        peak: list[int] = []
        yield peak
        _, top = tracemalloc.get_traced_memory()
        peak.append(top - start)
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("mode", list(MODES))
async def test_endless_stream_raises_and_memory_stays_bounded(mode: str) -> None:
    """An endless /call stream raises MalformedStreamError near the limit; the client's memory stays bounded."""
    with HostileServer(mode) as server:
        async with AsyncClient(server.url, max_result_bytes=LIMIT, max_line_bytes=LIMIT) as client:
            async with client.environment("lab").session(split="train", index=0) as session:
                with traced() as peak, pytest.raises(MalformedStreamError, match="max_") as caught:
                    await asyncio.wait_for(session.call("big", {}), 30)
    assert caught.value.task_id == TASK_ID
    assert server.calls == 1  # not resumed: the stream is malformed, not dropped
    assert server.sent < LIMIT + SLACK, f"the client read {server.sent} bytes before giving up"
    assert peak[0] < 8 * LIMIT, f"the client's memory grew by {peak[0]} bytes"


def test_sync_client_takes_the_limits() -> None:
    """The sync Client passes max_result_bytes and max_line_bytes to its async client."""
    with (
        HostileServer("endless chunks") as server,
        Client(server.url, max_result_bytes=LIMIT, max_line_bytes=LIMIT) as client,
    ):
        assert (client.aio.max_result_bytes, client.aio.max_line_bytes) == (LIMIT, LIMIT)
        with client.environment("lab").session(split="train", index=0) as session:
            with pytest.raises(MalformedStreamError, match=f"{LIMIT} bytes"):
                session.call("big", {})
    assert server.sent < LIMIT + SLACK


async def test_default_limits_on_the_client() -> None:
    """AsyncClient's defaults are the protocol's MAX_RESULT_BYTES and MAX_LINE_BYTES."""
    async with AsyncClient("http://127.0.0.1:1") as client:
        assert (client.max_result_bytes, client.max_line_bytes) == (MAX_RESULT_BYTES, MAX_LINE_BYTES)
