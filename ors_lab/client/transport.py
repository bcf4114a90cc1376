"""The default wire transport: aiohttp behind httpx2's transport interface.

The client speaks httpx2 (requests, responses, the ``transport=`` seam that recording and replay
plug into). Underneath, httpx2's own connection pool costs about twice the CPU of aiohttp per
request at high concurrency (``bench/README.md`` has the figures), so the default transport
hands each request to an aiohttp session and wraps the answer back into an ``httpx2.Response``.
Bodies stream through untouched (no decompression, no buffering), and aiohttp's errors become
the httpx2 errors the client's retry rules are written against.

Connections are bounded: at most ``connections`` per server (``DEFAULT_CONNECTIONS``, 512; None for
no bound). Each open session would otherwise hold a connection, and so a file descriptor on each
side, whenever its pings overlap, and a process under ``ulimit -n 1024`` fails to open a few
thousand sessions ("Too many open files"). A request holds a connection from sending to the end
of its answer (a ``/call`` stream for as long as it streams); idle sessions hold none, so their
pings share the same few. A request that finds every connection in use waits in line (first come,
first served) for the next one free, for as long as it takes: the line never fails a request.

The line is this transport's own, outside aiohttp (whose pool stays unbounded): aiohttp counts the
wait for a pooled connection in its connect timeout, which would fail a request that only waited.
Here the connect timeout bounds resolving and connecting alone, and a request that has to wait
says so through its ``QUEUED`` extension, if it has one: the client stops the clock of its own
deadlines (``request_timeout``, a session delete's 10 s) while the request waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2

__all__ = ["DEFAULT_CONNECTIONS", "QUEUED", "AiohttpTransport"]

DEFAULT_CONNECTIONS = 512
"""Connections to one server at most, by default: as many as the largest concurrency an evaluation
usually runs (each of its episodes has at most one request in flight, so up to 512 of them run no
slower than unbounded: ``bench/scale_sessions.py``), and half a ``ulimit -n`` of 1024."""

QUEUED = "ors_lab.queued"
"""A request extension: a callable the transport calls with True when the request starts waiting for
a free connection (every one in use), then with False once it has one. Not called when a
connection is free at once."""


class _AiohttpStream(httpx2.AsyncByteStream):
    """A response body read from aiohttp as the network delivers it."""

    def __init__(
        self, response: aiohttp.ClientResponse, request: httpx2.Request, slots: asyncio.Semaphore | None
    ) -> None:
        self._response = response
        self._request = request
        self._slots = slots

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
            self._release()  # read to its end: the connection is free for the next request now
        except (aiohttp.SocketTimeoutError, TimeoutError) as exc:
            raise httpx2.ReadTimeout(str(exc) or "read timed out", request=self._request) from exc
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
            raise httpx2.RemoteProtocolError(str(exc) or type(exc).__name__, request=self._request) from exc
        except aiohttp.ClientError as exc:
            raise httpx2.ReadError(str(exc) or type(exc).__name__, request=self._request) from exc

    async def aclose(self) -> None:
        self._release()

    def _release(self) -> None:
        """Hand the connection back (to the pool, or closed if the body was not read to its end), then
        its place in the line: once, the first of the end of the body and ``aclose``."""
        self._response.release()
        slots, self._slots = self._slots, None
        if slots is not None:
            _free(slots)


def _free(slots: asyncio.Semaphore) -> None:
    """Give a place in line back on the loop's next turn, once aiohttp is done with the connection it held
    (pooled, or its socket closed): handed over at once, the next request could open a connection beside
    one still on its way back (2,000 sessions closed at once over connections=64 reached 98 sockets)."""
    asyncio.get_running_loop().call_soon(slots.release)


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """An ``httpx2.AsyncBaseTransport`` sending through one aiohttp session, at most ``connections`` at once
    to each server (None: no bound); a request beyond them waits for one to be free.

    With ``connections=N``, N requests in flight to a server hold all N connections: the N+1th waits
    for the first of them to end. /call streams hold theirs while they stream, so N tools running at
    once (N long calls) make every other request to that server wait, pings included; raise N
    (``Client(url, connections=...)``) to run more tools at once.
    """

    def __init__(self, connections: int | None = DEFAULT_CONNECTIONS) -> None:
        if connections is not None and (type(connections) is not int or connections < 1):
            raise ValueError(f"connections must be a whole number, 1 or more (None: no bound), not {connections!r}")
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._slots: dict[bytes, asyncio.Semaphore] = {}  # server (host:port) -> its places in line

    def _session_for_loop(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=False)
            session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self._session = session
        return session

    async def _take_slot(self, request: httpx2.Request) -> asyncio.Semaphore | None:
        """Wait for a connection to the request's server to be free, and take it (None: no bound)."""
        if self.connections is None:
            return None
        server = request.url.netloc
        slots = self._slots.get(server)
        if slots is None:
            slots = self._slots[server] = asyncio.Semaphore(self.connections)
        if not slots.locked():
            await slots.acquire()  # free: taken at once, without yielding to the loop
            return slots
        queued = request.extensions.get(QUEUED)
        if queued is not None:
            queued(True)
        await slots.acquire()
        if queued is not None:
            queued(False)
        return slots

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=timeouts.get("connect"),  # resolving and connecting: the wait in line is not aiohttp's
            sock_connect=timeouts.get("connect"),
            sock_read=timeouts.get("read"),
        )
        body = await request.aread()
        slots = await self._take_slot(request)
        session = self._session_for_loop()
        response: aiohttp.ClientResponse | None = None
        try:
            response = await session.request(
                request.method,
                str(request.url),
                headers=[(key.decode("latin-1"), value.decode("latin-1")) for key, value in request.headers.raw],
                data=body or None,
                allow_redirects=False,
                timeout=timeout,
                compress=None,
            )
        except aiohttp.ClientConnectorError as exc:
            raise httpx2.ConnectError(str(exc), request=request) from exc
        except aiohttp.ConnectionTimeoutError as exc:
            raise httpx2.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
        except (aiohttp.SocketTimeoutError, TimeoutError) as exc:
            raise httpx2.ReadTimeout(str(exc) or "read timed out", request=request) from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientPayloadError) as exc:
            raise httpx2.RemoteProtocolError(str(exc) or type(exc).__name__, request=request) from exc
        except aiohttp.ClientError as exc:
            raise httpx2.ReadError(str(exc) or type(exc).__name__, request=request) from exc
        finally:
            if slots is not None and response is None:
                _free(slots)
        return httpx2.Response(
            response.status,
            headers=[(key, value) for key, value in response.raw_headers],
            stream=_AiohttpStream(response, request, slots),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode()},
        )

    async def aclose(self) -> None:
        session, self._session = self._session, None
        self._slots = {}  # the next request may run on another loop; requests still out release their own
        if session is not None and not session.closed:
            await session.close()
            await asyncio.sleep(0)  # let aiohttp's transports finish closing before the loop may end
