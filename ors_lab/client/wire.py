"""The default wire transport: HTTP/1.1 on asyncio's own connections, behind httpx2's transport interface.

The client speaks httpx2 (requests, responses, the ``transport=`` seam that recording and replay plug
into). Underneath, what a request costs is mostly the machinery of a general HTTP library: aiohttp's
session, request and response objects and timers cost about twice the CPU of a connection that writes
the request's bytes and parses the answer's head as it arrives (``bench/README.md``, "The hot path").
So the default transport is that connection: an ``asyncio.Protocol`` per TCP connection, kept alive
and reused, the head parsed in one pass, the body framed by its ``Content-Length`` or its chunks (or
the connection's end), streamed to the reader as the network delivers it. Bodies pass untouched (no
decompression; nothing asks for it). TLS is asyncio's, verified as httpx2 verifies it (``https`` URLs).

Connections are bounded: at most ``connections`` per server (``DEFAULT_CONNECTIONS``, 512; None for
no bound). Each open session would otherwise hold a connection, and so a file descriptor on each
side, whenever its pings overlap, and a process under ``ulimit -n 1024`` fails to open a few
thousand sessions ("Too many open files"). A request holds a connection from sending to the end of
its answer (a ``/call`` stream for as long as it streams); idle sessions hold none, so their pings
share the same few. A request that finds every connection in use waits in line (first come, first
served) for the next one free, for as long as it takes: the line never fails a request, and the
connect timeout bounds connecting alone. A request that has to wait says so through its ``QUEUED``
extension, if it has one: the client stops the clock of its own deadlines while the request waits.

Failures are httpx2's errors, as the client's retry rules read them: a connection that cannot be made
is ``ConnectError`` (``ConnectTimeout``: not within the ``connect`` timeout), and only then was the
request surely never sent; a connection that ends before the whole answer came, or an answer that is
not HTTP, is ``RemoteProtocolError``; no byte for ``read`` seconds while an answer is awaited is
``ReadTimeout``. A reused connection that the server had closed before the request reached it (it
ended with no answer, and nothing of the request was answered) is not reused again.

A stream read slower than it arrives is not buffered without bound: above ``HIGH_WATER`` bytes
unread the connection stops reading, and reads on once the reader has taken them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpx2

__all__ = ["DEFAULT_CONNECTIONS", "HIGH_WATER", "MAX_HEAD", "QUEUED", "WireTransport"]

DEFAULT_CONNECTIONS = 512
"""Connections to one server at most, by default: as many as the largest concurrency an evaluation
usually runs (each of its episodes has at most one request in flight, so up to 512 of them run no
slower than unbounded: ``bench/scale_sessions.py``), and half a ``ulimit -n`` of 1024."""

QUEUED = "ors_lab.queued"
"""A request extension: a callable the transport calls with True when the request starts waiting for
a free connection (every one in use), then with False once it has one. Not called when a
connection is free at once."""

MAX_HEAD = 64 * 1024
"""The most bytes an answer's status line and headers may take (a longer head is not an answer)."""
HIGH_WATER = 1 << 20
"""Bytes of a body received and not yet read above which the connection stops reading."""

_HEAD, _LENGTH, _CHUNKS, _UNTIL_CLOSE, _DONE = range(5)
_NO_BODY = frozenset({204, 304})


class _Exchange:
    """One request's answer as it arrives on a connection: its head, then its body's pieces."""

    __slots__ = ("_buffer", "_chunk_left", "_trailer", "body", "closed", "encoded", "ended", "error", "events",
                 "head", "headers", "length", "method", "reason", "state", "status", "unread", "waiter")  # fmt: skip

    def __init__(self, method: bytes) -> None:
        self.method = method
        self.state = _HEAD
        self._buffer = bytearray()
        self.head = False  # the head came
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.closed = False  # the connection may not be reused (Connection: close, a body until the end, HTTP/1.0)
        self.encoded = False  # the body has a Content-Encoding (httpx2 decodes it as it is read)
        self.events = False  # the body is an event stream (read as a stream, however soon it all came)
        self.length = 0  # of the body left, while framed by Content-Length
        self._chunk_left = -1  # of the chunk being read; -1: its size line comes next
        self._trailer = False
        self.body: deque[bytes] = deque()
        self.unread = 0
        self.ended = False  # the whole answer came
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def fail(self, error: Exception) -> None:
        if self.error is None and not self.ended:
            self.error = error
        self.wake()

    # -- parsing ---------------------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Bytes from the connection, in order."""
        if self.state == _LENGTH and not self._buffer:  # the common case, a body's bytes: no copy
            self._take(data)
        elif self.state == _UNTIL_CLOSE:
            self._push(data)
        else:
            self._buffer += data
            self._parse()
        self.wake()

    def _take(self, data: bytes) -> None:
        if len(data) > self.length:
            self.error = httpx2.RemoteProtocolError("the server sent more than its answer's Content-Length")
            data = data[: self.length]
        self.length -= len(data)
        self._push(data)
        if self.length == 0:
            self.state, self.ended = _DONE, True

    def _push(self, data: bytes) -> None:
        if data:
            self.body.append(bytes(data))
            self.unread += len(data)

    def _parse(self) -> None:
        buffer = self._buffer
        while buffer and self.error is None:
            if self.state == _HEAD:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(buffer) > MAX_HEAD:
                        self.error = httpx2.RemoteProtocolError(f"the answer's head is over {MAX_HEAD} bytes")
                    return
                head = bytes(buffer[:end])
                del buffer[: end + 4]
                self._head(head)
            elif self.state == _LENGTH:
                data = bytes(buffer)
                buffer.clear()
                self._take(data)
            elif self.state == _CHUNKS:
                if not self._chunk(buffer):
                    return
            elif self.state == _UNTIL_CLOSE:
                self._push(bytes(buffer))
                buffer.clear()
            else:  # bytes after a whole answer: the connection cannot be trusted with another
                self.closed = True
                buffer.clear()

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        code, _, reason = rest.partition(b" ")
        if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
            self.error = httpx2.RemoteProtocolError(f"not an HTTP/1.1 answer: {lines[0][:100]!r}")
            return
        status = int(code)
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            return
        headers: list[tuple[bytes, bytes]] = []
        length: int | None = None
        chunked = False
        closed = version == b"HTTP/1.0"
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                self.error = httpx2.RemoteProtocolError(f"a malformed header line: {line[:100]!r}")
                return
            value = value.strip()
            headers.append((name, value))
            lowered = name.lower()
            if lowered == b"content-length":
                if not value.isdigit() or (length is not None and length != int(value)):
                    self.error = httpx2.RemoteProtocolError(f"a malformed Content-Length: {value[:40]!r}")
                    return
                length = int(value)
            elif lowered == b"transfer-encoding":
                chunked = value.lower().endswith(b"chunked")
            elif lowered == b"content-type":
                self.events = value.lower().startswith(b"text/event-stream")
            elif lowered == b"content-encoding":
                self.encoded = value.lower() not in (b"", b"identity")
            elif lowered == b"connection":
                token = value.lower()
                closed = (closed and b"keep-alive" not in token) or b"close" in token
        self.status, self.reason, self.headers, self.head = status, reason, headers, True
        if self.method == b"HEAD" or status in _NO_BODY:
            self.state, self.ended = _DONE, True
        elif chunked:
            self.state = _CHUNKS
        elif length is not None:
            self.state, self.length = _LENGTH, length
            if length == 0:
                self.state, self.ended = _DONE, True
        else:
            self.state, closed = _UNTIL_CLOSE, True
        self.closed = closed

    def _chunk(self, buffer: bytearray) -> bool:
        """Read what ``buffer`` holds of the chunked body; False when more bytes are needed."""
        if self._chunk_left < 0:
            end = buffer.find(b"\r\n")
            if end < 0:
                if len(buffer) > 1024:
                    self.error = httpx2.RemoteProtocolError("a chunk's size line is over 1024 bytes")
                return False
            line = bytes(buffer[:end])
            del buffer[: end + 2]
            if self._trailer:  # the trailer's lines, up to an empty one
                if not line:
                    self.state, self.ended = _DONE, True
                return True
            size = line.split(b";", 1)[0].strip()
            try:
                self._chunk_left = int(size, 16)
            except ValueError:
                self.error = httpx2.RemoteProtocolError(f"a malformed chunk size: {line[:40]!r}")
                return False
            if self._chunk_left == 0:
                self._trailer, self._chunk_left = True, -1
            return True
        if len(buffer) < self._chunk_left + 2:  # the chunk's data, then its CRLF
            if len(buffer) > self._chunk_left:
                return False
            self._push(bytes(buffer))
            self._chunk_left -= len(buffer)
            buffer.clear()
            return False
        self._push(bytes(buffer[: self._chunk_left]))
        if buffer[self._chunk_left : self._chunk_left + 2] != b"\r\n":
            self.error = httpx2.RemoteProtocolError("a chunk does not end where its size says")
            return False
        del buffer[: self._chunk_left + 2]
        self._chunk_left = -1
        return True

    def at_end(self) -> None:
        """The connection ended: a body read to the end is whole; anything else was cut."""
        if self.state == _UNTIL_CLOSE:
            self.state, self.ended = _DONE, True
        elif not self.ended:
            said = "before its answer" if not self.head else "before the end of its answer's body"
            self.fail(httpx2.RemoteProtocolError(f"the server closed the connection {said}"))
        self.wake()


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection to a server: one exchange at a time."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.closed = False
        self.reading = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:  # bytes nobody asked for: the connection is not to be trusted
            self.close()
            return
        exchange.feed(data)
        if exchange.unread > HIGH_WATER and self.reading and self.transport is not None:
            self.reading = False
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self._lost(None)
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)

    def _lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self.pool.forget(self)
        exchange = self.exchange
        if exchange is not None:
            if exc is not None and not exchange.ended:
                exchange.fail(httpx2.RemoteProtocolError(f"the connection broke: {exc}"))
            exchange.at_end()

    def taken(self, exchange: _Exchange) -> None:
        """Some of the body was read: read on if reading had stopped."""
        if not self.reading and exchange.unread <= HIGH_WATER // 2 and self.transport is not None:
            self.reading = True
            self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if not self.closed:
            self.closed = True
            self.pool.forget(self)


class _Pool:
    """A server's connections: the idle ones, and the places in line (None: no bound)."""

    def __init__(self, slots: asyncio.Semaphore | None) -> None:
        self.slots = slots
        self.idle: list[_Connection] = []

    def forget(self, connection: _Connection) -> None:
        if connection in self.idle:
            self.idle.remove(connection)


def _free(slots: asyncio.Semaphore) -> None:
    """Give a place in line back on the loop's next turn, once the connection it held is back or closed: handed
    over at once, the next request could open a connection beside one still on its way back."""
    asyncio.get_running_loop().call_soon(slots.release)


class _Body(httpx2.AsyncByteStream):
    """An answer's body, as the network delivers it; the connection goes back (or is closed) at its end."""

    def __init__(self, transport: WireTransport, connection: _Connection, exchange: _Exchange, pool: _Pool,
                 read: float | None, request: httpx2.Request) -> None:  # fmt: skip
        self._transport = transport
        self._connection = connection
        self._exchange = exchange
        self._pool = pool
        self._read = read
        self._request = request
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        exchange, connection = self._exchange, self._connection
        try:
            while True:
                if exchange.body:
                    chunk = exchange.body.popleft()
                    exchange.unread -= len(chunk)
                    connection.taken(exchange)
                    yield chunk
                    continue
                if exchange.error is not None:
                    raise _bound(exchange.error, self._request)
                if exchange.ended:
                    break
                await _wait(exchange, self._read, self._request)
        except BaseException:
            self._finish(reuse=False)
            raise
        self._finish(reuse=True)

    async def aclose(self) -> None:
        self._finish(reuse=False)

    def _finish(self, *, reuse: bool) -> None:
        """Once: the connection back to the pool (a whole answer on a connection to keep), else closed; then its
        place in line."""
        if self._done:
            return
        self._done = True
        exchange, connection = self._exchange, self._connection
        connection.exchange = None
        if reuse and exchange.ended and not exchange.closed and not connection.closed and exchange.error is None:
            self._pool.idle.append(connection)
        else:
            connection.close()
        if self._pool.slots is not None:
            _free(self._pool.slots)


def _bound(error: Exception, request: httpx2.Request) -> Exception:
    """``error`` with the request it failed (httpx2's errors carry it)."""
    if isinstance(error, httpx2.RequestError):
        error.request = request
    return error


async def _wait(exchange: _Exchange, read: float | None, request: httpx2.Request) -> None:
    """Until more of the answer comes (or its end, or an error); ``ReadTimeout`` after ``read`` seconds of nothing."""
    loop = asyncio.get_running_loop()
    waiter = exchange.waiter = loop.create_future()
    timer = None if read is None else loop.call_later(read, _expire, waiter)
    try:
        await waiter
    finally:
        if timer is not None:
            timer.cancel()
        exchange.waiter = None
    if waiter.result() is not None:
        raise httpx2.ReadTimeout(f"no bytes for {read:g} s", request=request)


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_result(True)


class WireTransport(httpx2.AsyncBaseTransport):
    """An ``httpx2.AsyncBaseTransport`` on HTTP/1.1 connections of its own, at most ``connections`` at once to each
    server (None: no bound); a request beyond them waits for one to be free. See the module docstring.

    With ``connections=N``, N requests in flight to a server hold all N connections: the N+1th waits
    for the first of them to end. /call streams hold theirs while they stream, so N tools running at
    once (N long calls) make every other request to that server wait, pings included; raise N
    (``Client(url, connections=...)``) to run more tools at once.
    """

    def __init__(self, connections: int | None = DEFAULT_CONNECTIONS) -> None:
        if connections is not None and (type(connections) is not int or connections < 1):
            raise ValueError(f"connections must be a whole number, 1 or more (None: no bound), not {connections!r}")
        self.connections = connections
        self._pools: dict[tuple[bytes, bytes, int], _Pool] = {}  # (scheme, host, port) -> its pool
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tls: ssl.SSLContext | None = None

    def _pool(self, request: httpx2.Request) -> tuple[_Pool, tuple[bytes, bytes, int]]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections and places in line belong to the loop they were made on
            self._drop()
            self._loop = loop
        url = request.url
        scheme = url.raw_scheme
        key = (scheme, url.raw_host, url.port or (443 if scheme == b"https" else 80))
        pool = self._pools.get(key)
        if pool is None:
            pool = self._pools[key] = _Pool(None if self.connections is None else asyncio.Semaphore(self.connections))
        return pool, key

    async def _take_slot(self, pool: _Pool, request: httpx2.Request) -> None:
        slots = pool.slots
        if slots is None:
            return
        if not slots.locked():
            await slots.acquire()  # free: taken at once, without yielding to the loop
            return
        queued = request.extensions.get(QUEUED)
        if queued is not None:
            queued(True)
        await slots.acquire()
        if queued is not None:
            queued(False)

    async def _connect(self, pool: _Pool, key: tuple[bytes, bytes, int], request: httpx2.Request,
                       limit: float | None) -> _Connection:  # fmt: skip
        scheme, host, port = key
        tls: ssl.SSLContext | None = None
        if scheme == b"https":
            if self._tls is None:  # httpx2's: its certificates (certifi's), as any httpx2 client verifies them
                self._tls = httpx2.create_ssl_context()
            tls = self._tls
        name = host.decode("ascii")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(limit):
                _, connection = await loop.create_connection(lambda: _Connection(pool), name, port, ssl=tls,
                                                             server_hostname=name if tls else None)  # fmt: skip
        except TimeoutError as exc:
            said = f"no connection to {name}:{port} within {limit:g} s"
            raise httpx2.ConnectTimeout(said, request=request) from exc
        except (OSError, ssl.SSLError) as exc:
            raise httpx2.ConnectError(f"cannot connect to {name}:{port}: {exc}", request=request) from exc
        return connection

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        body = request.content if isinstance(request.stream, httpx2.ByteStream) else await request.aread()
        pool, key = self._pool(request)
        await self._take_slot(pool, request)
        held = True
        try:
            connection = None
            while pool.idle:
                candidate = pool.idle.pop()
                if not candidate.closed:
                    connection = candidate
                    break
            if connection is None:
                connection = await self._connect(pool, key, request, timeouts.get("connect"))
            exchange = _Exchange(request.method.encode("ascii"))
            connection.exchange = exchange
            assert connection.transport is not None
            connection.transport.write(_head(request, body) + body if len(body) < 16384 else _head(request, body))
            if len(body) >= 16384:
                connection.transport.write(body)
            read = timeouts.get("read")
            try:
                while not exchange.head:
                    if exchange.error is not None:
                        raise _bound(exchange.error, request)
                    if exchange.ended:  # the connection ended with no answer
                        raise httpx2.RemoteProtocolError("the server closed the connection before its answer",
                                                         request=request)  # fmt: skip
                    await _wait(exchange, read, request)
            except BaseException:
                connection.exchange = None
                connection.close()
                raise
            held = False
            stream = _Body(self, connection, exchange, pool, read, request)
            whole = exchange.ended and exchange.error is None and not exchange.encoded and not exchange.events
            if whole:  # the answer came with its head (most do): the connection goes back now
                body = b"".join(exchange.body)
                exchange.body.clear()
                stream._finish(reuse=True)
        finally:
            if held and pool.slots is not None:
                _free(pool.slots)
        extensions = {"http_version": b"HTTP/1.1", "reason_phrase": exchange.reason}
        if not whole:
            return httpx2.Response(exchange.status, headers=exchange.headers, stream=stream, request=request,
                                   extensions=extensions)  # fmt: skip
        return _read(exchange.status, exchange.headers, body, request, extensions)

    def _drop(self) -> None:
        """Close every idle connection and forget the pools (connections still answering close at their end)."""
        for pool in self._pools.values():
            for connection in list(pool.idle):
                with contextlib.suppress(RuntimeError):  # made on a loop closed now: nothing is left to close
                    connection.close()
        self._pools = {}

    async def aclose(self) -> None:
        self._drop()
        self._loop = None
        await asyncio.sleep(0)  # let the transports finish closing before the loop may end


def _read(status: int, headers: list[tuple[bytes, bytes]], body: bytes, request: httpx2.Request,
          extensions: dict[str, Any]) -> httpx2.Response:  # fmt: skip
    """A response whose body is all here, already read (as ``aread()`` leaves one: its stream consumed): httpx2
    would read it again, chunk by chunk through its decoders, for a tenth of a request's cost (its ``content``
    is its ``_content``: checked once below). Not for an event stream, which its reader reads as a stream."""
    response = httpx2.Response(status, headers=headers, stream=httpx2.ByteStream(body), request=request,
                               extensions=extensions)  # fmt: skip
    if _PRESET:
        response._content = body
        response.is_stream_consumed = True
    return response


def _presets() -> bool:
    """True when a response's body can be given as read (httpx2 keeps it as ``_content``, as it has so far)."""
    probe = httpx2.Response(200, stream=httpx2.ByteStream(b"probe"))
    probe._content = b"probe"
    try:
        return probe.content == b"probe" and probe.text == "probe"
    except httpx2.ResponseNotRead:
        return False


_PRESET = _presets()


def _head(request: httpx2.Request, body: bytes) -> bytes:
    """The request's line and headers, as bytes (its ``Host``, and its ``Content-Length`` for a body, added if it
    has none)."""
    url = request.url
    target = url.raw_path or b"/"
    lines = [request.method.encode("ascii") + b" " + target + b" HTTP/1.1"]
    names = set()
    for name, value in request.headers.raw:
        names.add(name.lower())
        lines.append(name + b": " + value)
    if b"host" not in names:
        lines.append(b"Host: " + url.netloc)
    if body and b"content-length" not in names and b"transfer-encoding" not in names:
        lines.append(b"Content-Length: " + str(len(body)).encode("ascii"))
    lines.append(b"\r\n")
    return b"\r\n".join(lines)
