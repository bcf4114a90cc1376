"""Sending: one request to the transport, with the retry rules (``policy.py``), its exchange on the events.

``_Sender`` is the client's HTTP core, the base of ``AsyncClient``: ``_request`` builds a request
(headers decoded once, each path's URL parsed once), ``_json`` sends a JSON request and retries
it as the ``RetryPolicy`` says, and ``_send`` hands one try straight to the transport, publishing
the exchange through an ``ExchangeTap`` when anyone listens, and turning network failures into the
typed errors of ``ors_lab.protocol.errors``. Its answers are parsed by ``ors_lab.protocol.answers``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx2

from ors_lab.client._guard import _Closable, _ExitGuard
from ors_lab.client.policy import BEFORE_SENDING, RetryPolicy, is_starting
from ors_lab.client.tap import ExchangeTap, describe_error, is_event_stream, unreachable
from ors_lab.client.wire import QUEUED
from ors_lab.events import EventStream, RetryEvent
from ors_lab.protocol.answers import decode, server_error
from ors_lab.protocol.call import CallAssembler
from ors_lab.protocol.errors import (
    ConnectionFailedError,
    DeadlineExceededError,
    MalformedResponseError,
    ServerError,
)
from ors_lab.version import __version__

__all__ = ["DEFAULT_TIMEOUT", "URL_TEXT", "USER_AGENT"]


DEFAULT_TIMEOUT = httpx2.Timeout(60.0, connect=10.0)
"""Per network step: 10 s to connect, 60 s for each read (including a /call's response to start)."""


USER_AGENT = f"ors-lab/{__version__}"
URL_TEXT = "ors_lab.url"
"""The request extension holding ``str(request.url)``, made once per path."""


_BODY_METHODS = ("POST", "PUT", "PATCH", "QUERY")
"""The methods httpx2 gives a ``Content-Length: 0`` when they have no body."""


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _request_deadline(timeout: httpx2.Timeout) -> float | None:
    """The default ``request_timeout``: the timeout's connect and read budgets together (none without a read one)."""
    if timeout.read is None:
        return None
    return (timeout.connect or 0.0) + timeout.read


def _positive(name: str, value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise ValueError(f"{name} must be a number of seconds above 0, or None for no deadline; not {value!r}")
    return value


class _CallProgress:
    """How far one /call got: whether it may have reached the server, and its task_id once known."""

    __slots__ = ("assembler", "maybe_ran", "request", "task_id")

    def __init__(self) -> None:
        self.maybe_ran = False  # a try was sent, and no answer proved that the tool did not run
        self.task_id: str | None = None  # known from an earlier stream: later tries are resumes
        self.assembler: CallAssembler | None = None  # the stream being read
        self.request: httpx2.Request | None = None

    @property
    def known_task_id(self) -> str | None:
        """The task_id, also when it arrived on the stream being read."""
        if self.assembler is not None and self.assembler.task_id is not None:
            return self.assembler.task_id
        return self.task_id


def _bare(exc: BaseException) -> BaseException:
    """The HTTP library's error, made the ``__cause__`` of ours without its own frames and chain: its message
    says what failed, and a traceback shows ours, not pages of the HTTP and asyncio libraries' internals."""
    exc.__cause__ = exc.__context__ = None
    return exc.with_traceback(None)


class _Sender:
    """The HTTP core of ``AsyncClient`` (which sets these attributes): requests, sent with the retry rules."""

    base_url: str
    retry: RetryPolicy
    request_timeout: float | None
    _transport: httpx2.AsyncBaseTransport
    _guard: _ExitGuard
    _sessions: set[_Closable]
    _base_raw: list[tuple[bytes, bytes]]
    _urls: dict[str, tuple[httpx2.URL, str]]
    _extensions: dict[str, Any]
    _flavor: str | None

    def _request(
        self, method: str, path: str, body: Any, session_id: str | None, *, stream: bool = False
    ) -> httpx2.Request:
        known = self._urls.get(path)
        if known is None:  # parsing a URL is a good part of a request's cost, and so is its text: once per path
            url = httpx2.URL(self.base_url + path)
            known = (url, str(url))
            if len(self._urls) < 1024:
                self._urls[path] = known
        # the headers as httpx2 would make them from content= (Host first, Content-Length: 0 for a POST with no
        # body, the body's own last), given whole with stream=: a tenth of the cost, none of it parsing
        content = b"" if body is None else _dumps(body)
        headers = [(b"Host", known[0].netloc)]
        if body is None and method in _BODY_METHODS:
            headers.append((b"Content-Length", b"0"))
        headers += self._base_raw
        if session_id is not None:
            headers.append((b"X-Session-ID", session_id.encode("ascii")))
        if body is not None:
            headers.append((b"Content-Type", b"application/json"))
        if stream:
            headers.append((b"Accept", b"text/event-stream"))
        if body is not None:
            headers.append((b"Content-Length", str(len(content)).encode("ascii")))
        request = httpx2.Request(method, known[0], headers=headers, stream=httpx2.ByteStream(content),
                                 extensions={**self._extensions, URL_TEXT: known[1]})  # fmt: skip
        request.read()
        return request

    async def _json(
        self,
        events: EventStream,
        method: str,
        path: str,
        body: Any = None,
        *,
        session_id: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
        parse: Callable[[Any], Any] | None = None,
        expect: str = "a JSON body",
        pause: asyncio.Timeout | None = None,
    ) -> Any:
        """Send one JSON request with the retry rules; return its JSON body, through ``parse`` if given.

        A 2xx body that is not JSON, or that ``parse`` cannot take, is a ``MalformedResponseError``
        saying it ``expect``-ed something else.
        """
        __tracebackhide__ = True
        attempt, starting_since = 0, None
        while True:
            attempt += 1
            request = self._request(method, path, body, session_id)
            if extra_headers:
                request.headers.update(extra_headers)
            sent = await self._send(events, request, session_id, attempt, pause=pause)
            if sent is None:
                continue
            response, _ = sent
            if response.status_code < 300:
                return decode(response, session_id, parse, expect)
            if starting_since is None and is_starting(response):
                starting_since = time.monotonic()
            wait = self.retry.wait_after(response, attempt, starting_since)
            if wait is None:
                raise self._error(response, session_id)
            if events.active:
                events.publish(RetryEvent(session_id=session_id, attempt=attempt, reason=str(response.status_code),
                                          backoff=wait))  # fmt: skip
            await asyncio.sleep(wait)

    async def _send(
        self,
        events: EventStream,
        request: httpx2.Request,
        session_id: str | None,
        attempt: int,
        *,
        stream: bool = False,
        call: int | None = None,
        progress: _CallProgress | None = None,
        pause: asyncio.Timeout | None = None,
    ) -> tuple[httpx2.Response, ExchangeTap | None] | None:
        """Send; on a failure before sending, wait and return None (the caller tries again).

        Returns the response and the exchange's tap (None when nobody listens). The body is read
        before returning, unless ``stream`` and the answer is a 200 event stream. Raises
        ``ConnectionFailedError`` when the network fails (``before_sending`` once the tries for a
        failure before sending are spent), ``DeadlineExceededError`` past ``request_timeout`` and
        ``MalformedResponseError`` for a body that cannot be decoded. ``request_timeout``, and the
        caller's ``pause`` if given, stop while the request waits for a free connection (``QUEUED``).
        """
        __tracebackhide__ = True
        loop = asyncio.get_running_loop()
        if self._guard.loop is not loop:  # the first request on this loop: close what is left open when it ends
            self._guard.arm(loop)
        tap = None
        if events.active:
            tap = ExchangeTap(events, session_id=session_id, call=call, attempt=attempt)
            tap.request(request.method, request.extensions[URL_TEXT], request.headers, request.content)
        context: dict[str, Any] = {"session_id": session_id, "request": request}
        started = time.monotonic_ns()
        limit = asyncio.timeout(self.request_timeout)
        request.extensions[QUEUED] = self._in_line([limit] if pause is None else [limit, pause], progress)
        try:
            async with limit:
                # straight to the transport: no redirects, auth, cookies or hooks to run (httpx2's send
                # stack costs about a tenth of a request's client CPU)
                response = await self._transport.handle_async_request(request)
                response.request = request
                ttfb_ns = time.monotonic_ns() - started
                if not stream or response.status_code != 200 or not is_event_stream(response.headers):
                    stream = False  # an error answer to a /call: its body is read (and recorded) now
                    try:
                        await response.aread()
                    finally:
                        await response.aclose()
        except BEFORE_SENDING as exc:
            if attempt >= self.retry.attempts:
                raise ConnectionFailedError(
                    f"cannot reach the ORS server at {self.base_url}: {unreachable(exc)} "
                    f"({attempt} {'try' if attempt == 1 else 'tries'}; the request was never sent)",
                    before_sending=True,
                    **context,
                ) from _bare(exc)
            if progress is not None:
                progress.maybe_ran = False
            wait = self.retry.backoff_for(attempt)
            if events.active:
                events.publish(RetryEvent(session_id=session_id, attempt=attempt, call=call,
                                          reason=type(exc).__name__, backoff=wait))  # fmt: skip
            await asyncio.sleep(wait)
            return None
        except TimeoutError as exc:
            if not limit.expired():
                raise
            raise DeadlineExceededError(
                f"no whole answer within request_timeout={self.request_timeout:g} s",
                deadline=self.request_timeout,
                **context,
            ) from exc
        except httpx2.DecodingError as exc:
            raise MalformedResponseError(
                f"the answer's body cannot be decoded ({describe_error(exc)})", **context
            ) from exc
        except httpx2.RequestError as exc:
            raise ConnectionFailedError(
                f"the connection failed during the request ({describe_error(exc)})", before_sending=False, **context
            ) from _bare(exc)
        if tap is not None:
            tap.response(response.status_code, response.headers, ttfb_ns, None if stream else response.content)
        return response, tap

    @staticmethod
    def _in_line(timeouts: list[asyncio.Timeout], progress: _CallProgress | None) -> Callable[[bool], None]:
        """What the transport calls when the request waits for a free connection (True) and when it has one
        (False): the ``timeouts`` stop while it waits, then go on from where they stopped; a /call waiting
        has not left."""
        left: list[float | None] = []

        def queued(waiting: bool) -> None:
            now = asyncio.get_running_loop().time()
            if waiting:
                left[:] = [None if (when := limit.when()) is None else when - now for limit in timeouts]
                for limit in timeouts:
                    limit.reschedule(None)
            else:
                for limit, rest in zip(timeouts, left, strict=True):
                    limit.reschedule(None if rest is None else now + rest)
            if progress is not None:
                progress.maybe_ran = not waiting

        return queued

    def _error(self, response: httpx2.Response, session_id: str | None, task_id: str | None = None) -> ServerError:
        return server_error(response, session_id, task_id, starting_timeout=self.retry.starting_timeout)

    async def _server_flavor(self, events: EventStream) -> str:
        """``openreward`` when the server has ``/version`` (openreward's own route), else ``ors-sdk``."""
        __tracebackhide__ = True
        attempt = 0
        while self._flavor is None:
            attempt += 1
            sent = await self._send(events, self._request("GET", "/version", None, None), None, attempt)
            if sent is not None:
                self._flavor = "openreward" if sent[0].status_code == 200 else "ors-sdk"
        return self._flavor
