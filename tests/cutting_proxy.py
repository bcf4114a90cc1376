"""A real TCP proxy on 127.0.0.1 that drops `/call` streams, to prove that a client resumes them.

    with CuttingProxy(server.url) as proxy:      # or the `cutting_proxy` fixture in conftest.py
        ...talk to proxy.url...
        proxy.cuts, proxy.resumes

It forwards bytes both ways and runs its own event loop in a background thread, so sync and async
tests can both use it. For a `POST .../call` whose body has no `"task_id"` (a first call) it
forwards the response up to and including the blank line that ends the `event: task_id` event,
then closes both sockets: the client holds a task id and must resume with it. A `/call` whose body
has `"task_id"` (a resume) passes through untouched. Options:

- `cut_before_task_id=True`: cut right after the response headers, before any event (the client
  cannot know whether the tool ran).
- `cut_all=True`: cut resumes too, to test the client's retry bound.
- `cut_after_events=N`: cut after exactly N complete SSE blocks (events or comments, each ended by
  a blank line) instead, 0 meaning right after the headers; with `cut_into=K`, forward K more
  bytes of the next block first (a cut inside an event). Both may be changed between calls.

`drop(hold=True)` cuts every open connection at once, whatever it carries, and holds the
connections made after it (accepted, not forwarded: `held` counts them) until `release()`: a client
cut off at a moment of the test's choosing, whose next attempt reaches the server when the test says.

Only `200 text/event-stream` responses are cut; error responses (404, 422, a 308 redirect) pass.
Requests are parsed one at a time per connection (Content-Length or chunked bodies), as HTTP/1.1
clients send them; `Expect: 100-continue` and pipelining are not supported.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal, Self

HOST = "127.0.0.1"
_TASK_ID_EVENT = re.compile(rb"(?m)^event: ?task_id\r?\n(?:data:[^\r\n]*\r?\n)+\r?\n")
_BLOCK_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")  # the blank line that ends an SSE event or comment
_MAX_TRACKED = 64 * 1024  # give up looking for the cut point after this much body


class _CallResponse:
    """Follows the bytes of one `/call` response and finds where to cut them."""

    def __init__(self, after_headers: bool, events: int | None = None, into: int = 0) -> None:
        """Cut after the headers if `after_headers`, after `events` blocks (and `into` bytes) if
        given, else after the `task_id` event."""
        self.after_headers = after_headers or (events == 0 and into == 0)
        self.events = events
        self.into = into
        self.head = b""
        self.in_head = True
        self.done = False  # nothing to cut in this response: forward the rest as it comes
        self.chunked = False
        self.state: Literal["size", "data", "crlf"] = "size"
        self.size_line = b""
        self.left = 0  # bytes left in the current chunk (data) or its CRLF
        self.body = bytearray()  # the decoded body so far

    def feed(self, data: bytes) -> int | None:
        """Take the next bytes from the server; return how many of them to forward before the cut.

        None means forward all of `data` and keep going.
        """
        if self.done:
            return None
        offset = 0
        if self.in_head:
            buffered = self.head + data
            end = buffered.find(b"\r\n\r\n")
            if end < 0:
                self.head = buffered
                return None
            offset = end + 4 - len(self.head)
            self.in_head = False
            status, headers = _parse_head(buffered[: end + 4])
            if status != 200 or not headers.get("content-type", "").startswith("text/event-stream"):
                self.done = True
                return None
            if self.after_headers:
                return offset
            self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        return self._feed_body(data, offset)

    def _feed_body(self, data: bytes, offset: int) -> int | None:
        """Decode body bytes from `data[offset:]`; return the cut offset once the task_id event ends."""
        while offset < len(data) and not self.done:
            if not self.chunked:
                return self._take(data, offset, len(data) - offset)
            if self.state == "size":
                newline = data.find(b"\n", offset)
                if newline < 0:
                    self.size_line += data[offset:]
                    return None
                self.size_line += data[offset : newline + 1]
                offset = newline + 1
                size = int(self.size_line.split(b";")[0].strip() or b"0", 16)
                self.size_line = b""
                if size == 0:
                    self.done = True  # the body ended without a task_id event
                    return None
                self.state, self.left = "data", size
            elif self.state == "data":
                n = min(self.left, len(data) - offset)
                cut = self._take(data, offset, n)
                if cut is not None:
                    return cut
                offset += n
                self.left -= n
                if self.left == 0:
                    self.state, self.left = "crlf", 2
            else:
                n = min(self.left, len(data) - offset)
                offset += n
                self.left -= n
                if self.left == 0:
                    self.state = "size"
        return None

    def _take(self, data: bytes, offset: int, n: int) -> int | None:
        """Append `n` decoded body bytes; return the raw cut offset if the task_id event just ended."""
        before = len(self.body)
        self.body += data[offset : offset + n]
        if self.events is not None:
            target = self._target()
            if target is not None and len(self.body) >= target:
                self.done = True
                return offset + target - before
        else:
            match = _TASK_ID_EVENT.search(self.body)
            if match is not None:
                self.done = True
                return offset + match.end() - before
        if len(self.body) > _MAX_TRACKED:
            self.done = True
        return None

    def _target(self) -> int | None:
        """Where to cut in the decoded body (`into` bytes after the `events`-th block), once known."""
        assert self.events is not None
        start = 0
        if self.events:
            ends = [match.end() for match in _BLOCK_END.finditer(self.body)]
            if len(ends) < self.events:
                return None
            start = ends[self.events - 1]
        return start + self.into


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """The status code (or 0 for a request) and the lower-cased headers of an HTTP head."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    status = int(parts[1]) if lines[0].startswith("HTTP/") and len(parts) > 1 and parts[1].isdigit() else 0
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return status, headers


@dataclass
class _Connection:
    """Per-connection state shared by the two pump directions."""

    response: _CallResponse | None = None  # set while a /call to be cut is outstanding
    cut: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class LoopbackProxy:
    """A TCP proxy on 127.0.0.1 in front of `upstream_url`, run on an event loop thread of its own:
    `start()` or `with` runs it, `close()` ends every connection; subclasses write `_handle`."""

    NAME = "loopback-proxy"

    def __init__(self, upstream_url: str) -> None:
        """Prepare a proxy for `upstream_url` (http://127.0.0.1:port)."""
        parts = urllib.parse.urlsplit(upstream_url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream_url must look like http://127.0.0.1:PORT, not {upstream_url!r}")
        self.upstream_host: str = parts.hostname
        self.upstream_port: int = parts.port
        self.port = 0
        self.held = 0
        self._gate: asyncio.Event | None = None  # while set here, new connections wait for it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()  # every socket this proxy opened or accepted

    @property
    def url(self) -> str:
        """The proxy's base URL, http://127.0.0.1:PORT."""
        return f"http://{HOST}:{self.port}"

    def start(self) -> Self:
        """Start the event loop thread and listen on a free port of 127.0.0.1."""
        if self._loop is not None:
            raise RuntimeError(f"this {type(self).__name__} was already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name=self.NAME, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), loop).result(timeout=10)
        return self

    def close(self) -> None:
        """Stop listening, drop every connection, stop the loop and join its thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            loop.close()

    def __enter__(self) -> Self:
        """Start the proxy."""
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close the proxy."""
        self.close()

    def drop(self, *, hold: bool = False) -> None:
        """Close every open connection now (both its sockets); with `hold`, the next ones wait until `release()`."""
        assert self._loop is not None, "start the proxy first"
        asyncio.run_coroutine_threadsafe(self._drop(hold), self._loop).result(timeout=10)

    def release(self) -> None:
        """Let the held connections (and the next ones) through to the server."""
        assert self._loop is not None, "start the proxy first"
        asyncio.run_coroutine_threadsafe(self._release(), self._loop).result(timeout=10)

    async def _drop(self, hold: bool) -> None:
        if hold and self._gate is None:
            self._gate = asyncio.Event()
        for writer in list(self._writers):  # their handlers end on their own
            writer.close()

    async def _release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.set()

    async def _listen(self) -> None:
        """Open the listening socket."""
        self._server = await asyncio.start_server(self._accept, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        """Close the listener, cancel the connection handlers, and close every socket they leave open."""
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        for writer in list(self._writers):  # a handler cancelled before it ran closed nothing
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()

    def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        """Take a connection: its socket and its handler are known at once, so a shutdown closes both."""
        self._writers.add(client_writer)
        task = asyncio.get_running_loop().create_task(self._handle(client_reader, client_writer))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class CuttingProxy(LoopbackProxy):
    """A TCP proxy on 127.0.0.1 in front of `upstream_url` that cuts `/call` streams (see module doc).

    Counters: `connections`, `calls` (POST .../call requests), `resumes` (those with "task_id" in
    the body) and `cuts` (responses cut).
    """

    NAME = "cutting-proxy"

    def __init__(
        self,
        upstream_url: str,
        *,
        cut_before_task_id: bool = False,
        cut_all: bool = False,
        cut_after_events: int | None = None,
        cut_into: int = 0,
    ) -> None:
        """Prepare a proxy for `upstream_url` (http://host:port); `start()` or `with` runs it."""
        super().__init__(upstream_url)
        self.cut_before_task_id = cut_before_task_id
        self.cut_all = cut_all
        self.cut_after_events = cut_after_events
        self.cut_into = cut_into
        self.connections = 0
        self.calls = 0
        self.resumes = 0
        self.cuts = 0

    def __repr__(self) -> str:
        """Options and counters, for assertion messages."""
        return (
            f"CuttingProxy({self.url} -> {self.upstream_host}:{self.upstream_port}, "
            f"cut_before_task_id={self.cut_before_task_id}, cut_all={self.cut_all}, "
            f"cut_after_events={self.cut_after_events}, cut_into={self.cut_into}, "
            f"connections={self.connections}, calls={self.calls}, resumes={self.resumes}, cuts={self.cuts})"
        )

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        """Proxy one client connection to a fresh upstream connection."""
        self.connections += 1
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            gate = self._gate
            if gate is not None:
                self.held += 1
                await gate.wait()
            upstream_reader, upstream_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
            self._writers.add(upstream_writer)
            conn = _Connection()
            up = asyncio.create_task(self._client_to_server(client_reader, upstream_writer, conn))
            down = asyncio.create_task(self._server_to_client(upstream_reader, client_writer, conn))
            conn.tasks = {up, down}
            try:
                done, _ = await asyncio.wait(conn.tasks, return_when=asyncio.FIRST_COMPLETED)
                if up in done and not conn.cut and up.exception() is None:
                    await down  # the client finished sending; let the response finish
            finally:
                for pump in conn.tasks:
                    pump.cancel()
                await asyncio.gather(*conn.tasks, return_exceptions=True)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for writer in (client_writer, upstream_writer):
                if writer is not None:
                    writer.close()
                    self._writers.discard(writer)
                    with contextlib.suppress(Exception):
                        await writer.wait_closed()

    async def _client_to_server(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Connection
    ) -> None:
        """Forward requests one at a time, arming the cut for the `/call` ones that get cut."""
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    writer.write(exc.partial)
                if writer.can_write_eof():
                    writer.write_eof()
                return
            _, headers = _parse_head(head)
            raw, body = await _read_body(reader, headers)
            method, _, rest = head.partition(b" ")
            path = urllib.parse.urlsplit(rest.split(b" ", 1)[0].decode("latin-1")).path
            conn.response = None
            if method == b"POST" and path.rstrip("/").endswith("/call"):
                self.calls += 1
                resume = b'"task_id"' in body
                if resume:
                    self.resumes += 1
                if self.cut_all or not resume:
                    conn.response = _CallResponse(self.cut_before_task_id, self.cut_after_events, self.cut_into)
            writer.write(head + raw)
            await writer.drain()

    async def _server_to_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Connection
    ) -> None:
        """Forward response bytes; for an armed `/call`, stop at the cut point and mark the cut."""
        while True:
            data = await reader.read(65536)
            if not data:
                return
            response = conn.response
            cut = response.feed(data) if response is not None else None
            writer.write(data if cut is None else data[:cut])
            await writer.drain()
            if cut is not None:
                conn.cut = True
                self.cuts += 1
                return


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> tuple[bytes, bytes]:
    """Read a request body as sent (Content-Length or chunked): (raw bytes, decoded bytes)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raw, body = bytearray(), bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            raw += size_line
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers, up to the empty line
                    line = await reader.readuntil(b"\r\n")
                    raw += line
                    if line == b"\r\n":
                        return bytes(raw), bytes(body)
            chunk = await reader.readexactly(size + 2)
            raw += chunk
            body += chunk[:-2]
    length = int(headers.get("content-length", "0") or "0")
    body = await reader.readexactly(length) if length else b""
    return body, body
