"""The async client: ``AsyncClient``, an ORS server; its environments and sessions come from it.

``AsyncClient`` holds the connections (its transport), the ``EventStream`` everything is published
on, the retry policy and the time bounds; its HTTP core is ``_send.py``, its tool calls
``_call.py``, its lifetime ``_guard.py``. The whole client is described in ``aclient.py``.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping
from typing import Self

import httpx2

from ors_lab.client._call import HEARTBEAT_TIMEOUT, _Caller
from ors_lab.client._environment import AsyncEnvironment
from ors_lab.client._guard import _Closable, _ExitGuard
from ors_lab.client._send import DEFAULT_TIMEOUT, USER_AGENT, _positive, _request_deadline
from ors_lab.client._session import DELETE_TIMEOUT
from ors_lab.client.policy import RetryPolicy
from ors_lab.client.url import server_url
from ors_lab.client.wire import DEFAULT_CONNECTIONS, WireTransport
from ors_lab.events import EventStream, Subscriber
from ors_lab.protocol.answers import environment_names
from ors_lab.protocol.call import MAX_RESULT_BYTES
from ors_lab.protocol.sse import MAX_LINE_BYTES

__all__ = ["PING_INTERVAL", "AsyncClient"]

PING_INTERVAL = 10.0
"""Seconds between a session's keep-alive pings."""


class AsyncClient(_Caller):
    """An ORS server, from asyncio code. ``async with AsyncClient(url) as client: ...``.

    ``events`` is the client's ``EventStream``; ``recorder=`` subscribes a ``Recorder`` (or any
    subscriber) to it for the client's life.

    ``async with`` (or ``aclose()``) closes it; one left open closes itself when its event loop ends
    (as ``asyncio.run`` ends it), when it is dropped, or at interpreter exit: its open sessions are
    deleted (``EXIT_TIMEOUT`` seconds at most) and its connections closed.

    ``connections`` bounds the connections to the server (``DEFAULT_CONNECTIONS``, 512; None: no
    bound), and so the file descriptors the client holds: idle sessions share them (a ping holds one
    for its few milliseconds), a request holds one until its answer ends, a /call stream while it
    streams. A request finding all of them in use waits for the next one free, however long; that
    wait counts in no timeout but ``call_timeout``. So with ``connections=N``, N tools running at once
    (N /call streams) make the N+1th request, a ping too, wait until one of them ends: raise it to run
    more at once, e.g. ``AsyncClient(url, connections=2048)`` (keep it below ``ulimit -n``). The bound
    belongs to the default transport; with ``transport=``, bound that transport (or not) instead.

    ``max_result_bytes`` bounds one /call result (the UTF-8 size of its JSON; default 256 MiB) and
    ``max_line_bytes`` one SSE line of a /call stream (default 16 MiB; ORS servers send lines of
    4096 characters). A stream that crosses either raises ``MalformedStreamError``, and is not resumed.

    Three time bounds, each raising a typed error when crossed:

    - ``timeout``: each network step (``DEFAULT_TIMEOUT``: 10 s to connect, 60 s for each read);
      a step that takes longer is a ``ConnectionFailedError`` (a /call's stream is resumed instead).
      A wait for a free connection is not a step: connecting starts once the request has its place.
    - ``request_timeout``: one whole exchange, from sending a request to the last byte of its answer
      (every exchange but a /call's event stream; each try on its own, the waits between tries are
      the ``RetryPolicy``'s; a wait for a free connection is not counted). Default: the timeout's
      connect + read (70 s), so an answer trickled a byte at a time cannot hold a request longer.
      ``DeadlineExceededError``.
    - ``call_timeout``: a whole ``call()``, with its tries, its stream and its resumes. Default
      None: no bound, so a tool may run as long as its server keeps the stream alive (pings every
      10 s keep it alive for ever). ``CallDeadlineExceededError`` (an ``OutcomeUnknownError``) once
      the call may have reached the server, a plain ``DeadlineExceededError`` if it never left (a
      call still waiting for a free connection never left).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | httpx2.Timeout = DEFAULT_TIMEOUT,
        transport: httpx2.AsyncBaseTransport | None = None,
        recorder: Subscriber | None = None,
        retry: RetryPolicy | None = None,
        ping_interval: float = PING_INTERVAL,
        heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
        max_result_bytes: int = MAX_RESULT_BYTES,
        max_line_bytes: int = MAX_LINE_BYTES,
        call_timeout: float | None = None,
        request_timeout: float | None = None,
        connections: int | None = DEFAULT_CONNECTIONS,
    ) -> None:
        self.base_url = server_url(base_url)
        if transport is not None and connections != DEFAULT_CONNECTIONS:
            raise ValueError(
                "connections= bounds the default transport; with transport= bound that transport instead "
                "(WireTransport(connections=...)), or leave transport= out"
            )
        default_headers = {"User-Agent": USER_AGENT}
        api_key = api_key if api_key is not None else os.environ.get("ORS_API_KEY")
        if api_key:
            default_headers["X-API-Key"] = api_key
        default_headers.update(headers or {})
        self._timeout = timeout if isinstance(timeout, httpx2.Timeout) else httpx2.Timeout(timeout)
        self.heartbeat_timeout = heartbeat_timeout
        self.max_result_bytes = max_result_bytes
        self.max_line_bytes = max_line_bytes
        self.call_timeout = _positive("call_timeout", call_timeout)
        self.request_timeout = (
            _positive("request_timeout", request_timeout)
            if request_timeout is not None
            else _request_deadline(self._timeout)
        )
        self._extensions = {"timeout": self._timeout.as_dict()}
        self._urls: dict[str, tuple[httpx2.URL, str]] = {}  # path -> its URL, and the URL as text
        self._transport = transport if transport is not None else WireTransport(connections)
        self._http = httpx2.AsyncClient(
            headers=default_headers,
            timeout=self._timeout,
            transport=self._transport,
            follow_redirects=False,
        )
        for name in ("accept", "accept-encoding", "connection"):  # HTTP/1.1 defaults: fewer bytes to parse
            if name not in {key.lower() for key in default_headers}:
                del self._http.headers[name]
        self._base_raw = list(self._http.headers.raw)  # encoded once, as httpx2 encodes them, not per request
        self.events = EventStream()
        self.recorder = recorder
        if recorder is not None:
            self.events.subscribe(recorder)
        self.retry = retry or RetryPolicy()
        self.ping_interval = ping_interval
        self._flavor: str | None = None
        self._sessions: set[_Closable] = set()
        self._guard = _ExitGuard(self._sessions, self._transport)
        weakref.finalize(self, self._guard.finish)

    def __repr__(self) -> str:
        return f"AsyncClient({self.base_url!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        __tracebackhide__ = True
        await self.aclose()

    async def aclose(self) -> None:
        """Close every session still open (their deletes at once), then the connections.

        A delete that failed raises its error once everything is closed (the first, if several did).
        """
        __tracebackhide__ = True
        failures = await self._guard.close(DELETE_TIMEOUT)
        if failures:
            raise failures[0][1]

    # -- stateless endpoints -------------------------------------------------------------------

    async def health(self) -> bool:
        """True when ``GET /health`` answers ``{"status": "ok"}``."""
        __tracebackhide__ = True
        body = await self._json(self.events.routed(), "GET", "/health", expect='{"status": "ok"}')
        return isinstance(body, dict) and body.get("status") == "ok"

    async def environments(self) -> list[str]:
        """The environment names the server hosts; the first is its default."""
        __tracebackhide__ = True
        names: list[str] = await self._json(
            self.events.routed(), "GET", "/list_environments", parse=environment_names, expect='["name", ...]'
        )
        return names

    def environment(self, name: str, *, events: EventStream | None = None) -> AsyncEnvironment:
        """One environment by name (no request is made until you use it).

        ``events``: a stream of its own for what it and its sessions do (it forwards to the
        client's stream only if made with ``EventStream(parent=client.events)``).
        """
        return AsyncEnvironment(self, name, events=events)
