"""The async ORS client: ``AsyncClient`` → ``AsyncEnvironment`` → ``AsyncSession``.

Requests always name their environment (``/{env}/...``), never relying on the servers' 308
redirect to the default one. A session opens with one request (``POST /create`` with a session
id made here), keeps itself alive with ``POST /ping`` every 10 s for its whole life, and is
deleted when it closes, whatever ends it. ``call()`` returns a ``ToolResult``; ``ok=False`` is
data, and infrastructure failures are the typed errors of ``ors_lab.protocol.errors``.

Two seams: ``transport=`` (any ``httpx2.AsyncBaseTransport``; the default sends through aiohttp, at
most ``connections=`` connections to the server at once: ``ors_lab.client.transport``) and
``events``, the client's ``EventStream``: every request, response, network chunk, SSE event,
comment, retry and session step is published on it, in order, as a typed event
(``ors_lab.events``). ``recorder=`` subscribes a ``Recorder`` (or any subscriber) to it. An
environment or session can be given a stream of its own (``client.environment(name, events=...)``,
as an evaluation does): its events go there first, then to the client's stream. Code that captures
into a stream forwarding to the client's (``EventStream.capture``, as an evaluation's episodes do)
has the client's own requests, those of its environments and of the sessions made from them
published on that stream instead (``EventStream.routed``): an agent's requests through the client of
its episode's session belong to the run's trace.

A session opens on first use (``prompt()``, ``tools()`` or ``call()`` on a new session open it, once,
however many calls race to it) or on entering ``async with``, and then lives until it is closed: by
``close()``, by leaving the ``async with`` block, by the client's ``aclose()``, or by the client's own
end. A client left open closes itself when its event loop ends (``asyncio.run`` cancels its remaining
tasks), when it is dropped, or at interpreter exit: its sessions are deleted and its connections
closed, without warnings (``_ExitGuard``).

A session shows itself live as ``ol.live_views()`` says (``ors_lab.notebook.session``): in a
notebook, a widget displayed where it opens and updated in place by later calls; elsewhere, one
text line; nothing when views are off (or with ``session(..., view=False)``). The view subscribes
before the session's ``/create`` and never raises into it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import httpx2

from ors_lab.client.policy import BEFORE_SENDING, RETRY_STATUSES, RetryPolicy, is_starting, outcome_unknown
from ors_lab.client.shielding import outlast_cancel
from ors_lab.client.tap import BodyReader, ExchangeTap, describe_error, is_event_stream, unreachable
from ors_lab.client.transport import DEFAULT_CONNECTIONS, QUEUED, AiohttpTransport
from ors_lab.client.url import server_url
from ors_lab.events import (
    CallErrorEvent,
    CloseEvent,
    EventStream,
    OpenEvent,
    PingEvent,
    ResultEvent,
    RetryEvent,
    Subscriber,
)
from ors_lab.protocol.call import MAX_RESULT_BYTES, CallAssembler
from ors_lab.protocol.errors import (
    CallDeadlineExceededError,
    ConnectionFailedError,
    DeadlineExceededError,
    EnvironmentStartingError,
    MalformedResponseError,
    MalformedStreamError,
    ORSError,
    OutcomeUnknownError,
    ResumeFailedError,
    ServerError,
    SessionClosedError,
    SessionNotFoundError,
    TaskIndexError,
    UnknownEnvironmentError,
    UnknownSplitError,
)
from ors_lab.protocol.models import Block, Split, Task, ToolResult, ToolSpec, blocks_from_wire
from ors_lab.protocol.replay import EPISODES, MISMATCH, RECORDED_EPISODES, REPLAY_HEADER, mismatch_error
from ors_lab.protocol.sse import MAX_LINE_BYTES
from ors_lab.version import __version__

if TYPE_CHECKING:
    from ors_lab.notebook.session import SessionView

__all__ = [
    "DEFAULT_TIMEOUT",
    "DELETE_TIMEOUT",
    "EXIT_TIMEOUT",
    "AsyncClient",
    "AsyncEnvironment",
    "AsyncSession",
    "delete_session",
]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = httpx2.Timeout(60.0, connect=10.0)
"""Per network step: 10 s to connect, 60 s for each read (including a /call's response to start)."""

PING_INTERVAL = 10.0
DRAIN_TIMEOUT = 1.0
"""After `end`, how long to wait for the body to finish before closing the connection instead."""
HEARTBEAT_TIMEOUT = 30.0
"""A /call stream silent this long (three missed pings) counts as dropped, and is resumed."""

USER_AGENT = f"ors-lab/{__version__}"
URL_TEXT = "ors_lab.url"
"""The request extension holding ``str(request.url)``, made once per path."""
SESSION_NOT_FOUND = "Active environment not found"
DELETE_TIMEOUT = 10.0
"""The most a session's delete takes, its retries included: how long Ctrl-C or a cancel can wait on a
server that does not answer (a live one answers in milliseconds; deletes of several sessions run at once).
A wait for a free connection comes on top: with more deletes at once than ``connections``, the later
ones wait for the earlier, rather than give up on a session they never got to delete."""
DELETE_ATTEMPTS = 3
EXIT_TIMEOUT = 3.0
"""The most a client closed for its user (left open when its loop ends, dropped, at exit) waits for its deletes."""
CLOSING_DELETES = 64
"""How many sessions a client's close deletes at once."""
LOGGED_FAILURES = 3
"""A client closed for its user logs this many failed deletes one by one, the rest as a count."""


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


def _show(content: bytes, limit: int = 200) -> str:
    """The start of a body, for an error message."""
    text = repr(content[:limit].decode("utf-8", "replace"))
    return text + "..." if len(content) > limit else text


def _object_field(body: Any, key: str) -> Any:
    """``body[key]`` of a JSON object, or a ValueError saying what is missing."""
    if not isinstance(body, dict):
        raise TypeError(f"expected a JSON object with {key!r}, got a JSON {type(body).__name__}")
    if key not in body:
        raise ValueError(f"the object has no {key!r} (it has {sorted(body)[:10]})")
    return body[key]


def _array(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{what}: expected a JSON array, got a JSON {type(value).__name__}")
    return value


def _environment_names(body: Any) -> list[str]:
    names = _array(body, "environments")
    if not all(isinstance(name, str) for name in names):
        raise TypeError(f"environments: expected names (strings), got {names!r:.80}")
    return names


def _task_count(body: Any) -> int:
    count = _object_field(body, "num_tasks")
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"num_tasks: expected an integer, got {count!r:.40}")
    return count


def _count_and_recorded(body: Any) -> tuple[int, list[tuple[int, int]] | None]:
    """A ``num_tasks`` answer's count, and the episodes a replay recorded (``ors_lab.protocol.replay``), if any."""
    count = _task_count(body)
    pairs = body.get(RECORDED_EPISODES)
    if pairs is None:
        return count, None
    recorded = []
    for pair in _array(pairs, RECORDED_EPISODES):
        if not (isinstance(pair, list) and len(pair) == 2 and all(type(n) is int and n >= 0 for n in pair)):
            raise TypeError(f"{RECORDED_EPISODES}: expected [task index, rollout] pairs, got {pair!r:.40}")
        recorded.append((pair[0], pair[1]))
    return count, sorted(recorded)


def _tool_specs(body: Any) -> list[ToolSpec]:
    return [ToolSpec.from_wire(tool) for tool in _array(_object_field(body, "tools"), "tools")]


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


def _listing(names: list[str], limit: int = 20) -> str:
    """``a, b, c`` (the first ``limit``, then how many more)."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names)} in all)"


def _body(response: httpx2.Response) -> Any:
    """An answer's JSON, else its text."""
    try:
        return response.json()
    except ValueError:
        return response.text


def _detail(response: httpx2.Response) -> Any:
    body = _body(response)
    return body.get("detail", body) if isinstance(body, dict) else body


class _ExitGuard:
    """Closes a client left open: when its event loop ends, when it is dropped, or when the interpreter exits.

    It holds the client's set of open sessions and its transport, never the client, so a dropped client
    is still collected. On the client's first request in an event loop it starts a task there that only
    waits to be cancelled: ``asyncio.run`` cancels every task left once its coroutine returns, and waits
    for them (a sync client's private loop ends the same way); ``finish``, the client's finalizer, cancels
    it when the client is dropped or the interpreter exits. Cancelled, the task deletes the sessions still
    open (``CLOSING_DELETES`` at a time, ``EXIT_TIMEOUT`` seconds in all; a delete that fails is logged),
    then closes the connections.
    """

    def __init__(self, sessions: set[AsyncSession], transport: httpx2.AsyncBaseTransport) -> None:
        self.sessions = sessions
        self.transport = transport
        self.loop: asyncio.AbstractEventLoop | None = None
        """The loop watched (kept after its end, so that the requests of its last cleanups do not re-arm)."""
        self.task: asyncio.Task[None] | None = None

    def arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Watch ``loop``, the running one, where the client makes its first request."""
        self.loop = loop
        self.task = loop.create_task(self._watch(), name="ors-lab client guard")

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(asyncio.CancelledError):
            await loop.create_future()
        if self.task is not asyncio.current_task():
            return  # stood down by aclose(), which closed everything itself
        deadline = loop.time() + EXIT_TIMEOUT
        failures: list[tuple[AsyncSession, BaseException]] = []
        while True:
            try:
                failures = await self.close(max(deadline - loop.time(), 0.5))
            except asyncio.CancelledError:  # cancelled again, as its loop ends: a close cancelled before it began
                if self.sessions and loop.time() < deadline:  # left its session open; close those again
                    continue
            break
        for session, error in failures[:LOGGED_FAILURES]:
            log.warning("ors_lab: session %s, left open, could not be deleted: %s", session.sid, describe_error(error))
        if len(failures) > LOGGED_FAILURES:
            log.warning("ors_lab: %d more sessions left open could not be deleted", len(failures) - LOGGED_FAILURES)

    async def close(self, bound: float) -> list[tuple[AsyncSession, BaseException]]:
        """Delete the open sessions (``CLOSING_DELETES`` at a time, ``bound`` seconds in all), then the connections.

        Returns the sessions whose delete failed, with the error. Called by ``aclose()`` it also stands
        the watching task down (the next request arms a new one).
        """
        sessions = list(self.sessions)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        turns = asyncio.Semaphore(CLOSING_DELETES)

        async def close(session: AsyncSession) -> None:
            async with turns:
                await session._close(max(deadline - loop.time(), 0.1))

        try:
            results = await asyncio.gather(*(close(session) for session in sessions), return_exceptions=True)
        finally:
            await self.transport.aclose()
            task = self.task
            if task is not asyncio.current_task():
                self.task = self.loop = None
                if task is not None:
                    task.cancel()
        return [(session, result) for session, result in zip(sessions, results, strict=True)
                if isinstance(result, BaseException)]  # fmt: skip

    def finish(self) -> None:
        """Close now, from any thread: the client was dropped, or the interpreter exits (its finalizer).

        The watching task is cancelled on its loop and, where this thread can wait for it, waited for
        (``EXIT_TIMEOUT`` + 1 seconds at most): on a loop running in another thread (a sync client's), or
        on a loop that no longer runs (a notebook kernel's, at exit). On the loop's own thread the loop
        runs the cleanup next. Nothing to do when the client never ran, was closed, or its loop is gone.
        """
        task = self.task
        if task is None or task.done():
            return
        loop = task.get_loop()
        if loop.is_closed():
            return
        if not loop.is_running():
            task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.wait({task}, timeout=EXIT_TIMEOUT + 1))
            return
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if here:  # the loop runs the cleanup once this finalizer is done
            loop.call_soon(task.cancel)
            return
        ended = threading.Event()

        def cancel() -> None:  # on the loop's thread
            task.add_done_callback(lambda _: ended.set())
            task.cancel()

        with contextlib.suppress(RuntimeError):  # closed meanwhile
            loop.call_soon_threadsafe(cancel)
            ended.wait(EXIT_TIMEOUT + 1)


class AsyncClient:
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
                "(AiohttpTransport(connections=...)), or leave transport= out"
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
        self._transport = transport if transport is not None else AiohttpTransport(connections)
        self._http = httpx2.AsyncClient(
            headers=default_headers,
            timeout=self._timeout,
            transport=self._transport,
            follow_redirects=False,
        )
        for name in ("accept", "accept-encoding", "connection"):  # HTTP/1.1 defaults: fewer bytes to parse
            if name not in {key.lower() for key in default_headers}:
                del self._http.headers[name]
        self._base_headers = self._http.headers.multi_items()  # decoded once, not per request
        self.events = EventStream()
        self.recorder = recorder
        if recorder is not None:
            self.events.subscribe(recorder)
        self.retry = retry or RetryPolicy()
        self.ping_interval = ping_interval
        self._flavor: str | None = None
        self._sessions: set[AsyncSession] = set()
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
            self.events.routed(), "GET", "/list_environments", parse=_environment_names, expect='["name", ...]'
        )
        return names

    def environment(self, name: str, *, events: EventStream | None = None) -> AsyncEnvironment:
        """One environment by name (no request is made until you use it).

        ``events``: a stream of its own for what it and its sessions do (it forwards to the
        client's stream only if made with ``EventStream(parent=client.events)``).
        """
        return AsyncEnvironment(self, name, events=events)

    # -- the HTTP core -------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, body: Any, session_id: str | None, *, stream: bool = False
    ) -> httpx2.Request:
        headers = list(self._base_headers)
        if session_id is not None:
            headers.append(("X-Session-ID", session_id))
        content = None
        if body is not None:
            content = _dumps(body)
            headers.append(("Content-Type", "application/json"))
        if stream:
            headers.append(("Accept", "text/event-stream"))
        known = self._urls.get(path)
        if known is None:  # parsing a URL is a good part of a request's cost, and so is its text: once per path
            url = httpx2.URL(self.base_url + path)
            known = (url, str(url))
            if len(self._urls) < 1024:
                self._urls[path] = known
        request = httpx2.Request(method, known[0], headers=headers, content=content, extensions=dict(self._extensions))
        request.extensions[URL_TEXT] = known[1]
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
                return self._decode(response, session_id, parse, expect)
            if starting_since is None and is_starting(response):
                starting_since = time.monotonic()
            wait = self.retry.wait_after(response, attempt, starting_since)
            if wait is None:
                raise self._error(response, session_id)
            if events.active:
                events.publish(RetryEvent(session_id=session_id, attempt=attempt, reason=str(response.status_code),
                                          backoff=wait))  # fmt: skip
            await asyncio.sleep(wait)

    @staticmethod
    def _decode(
        response: httpx2.Response, session_id: str | None, parse: Callable[[Any], Any] | None, expect: str
    ) -> Any:
        """The JSON of a 2xx answer (UTF-8, as JSON is), shaped by ``parse``; else MalformedResponseError."""
        content = response.content
        try:
            value = json.loads(content)
            return value if parse is None else parse(value)
        except (ValueError, KeyError, IndexError, TypeError) as exc:  # ValueError: JSON, UTF-8, WireFormatError
            kind = response.headers.get("content-type") or "no content-type"
            raise MalformedResponseError(
                f"expected {expect} (ORS JSON), got a {response.status_code} answer ({kind}, {len(content)} bytes) "
                f"that is not: {type(exc).__name__}: {exc}; it starts {_show(content)}",
                session_id=session_id,
                request=response.request,
            ) from exc

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
        detail = _detail(response)
        status = response.status_code
        context: dict[str, Any] = {"session_id": session_id, "task_id": task_id, "request": response.request}
        message = f"HTTP {status}: {detail}"
        if status == 404 and detail == SESSION_NOT_FOUND:
            return SessionNotFoundError(
                f"{message} (the session is unknown, deleted, or was reaped after 900 s idle)",
                status_code=status,
                detail=detail,
                **context,
            )
        if response.headers.get(REPLAY_HEADER) == MISMATCH:
            return mismatch_error(status, _body(response), **context)
        if status == 503 and response.headers.get("x-backend-state", "").lower() == "starting":
            return EnvironmentStartingError(
                f"{message} (still starting after {self.retry.starting_timeout:g} s)",
                status_code=status,
                detail=detail,
                **context,
            )
        return ServerError(message, status_code=status, detail=detail, **context)

    def _outcome_unknown(
        self, response: httpx2.Response, session_id: str, name: str, request: httpx2.Request
    ) -> OutcomeUnknownError:
        """A first /call answered with a 5xx: a gateway may have passed it on before failing."""
        detail = _detail(response)
        return OutcomeUnknownError(
            f"HTTP {response.status_code} to {name!r}: {detail}; the request may have reached the environment, "
            "so the tool may or may not have run, and the call is not sent again",
            status_code=response.status_code,
            detail=detail,
            session_id=session_id,
            request=request,
        )

    def _call_deadline(self, session_id: str, name: str, progress: _CallProgress) -> DeadlineExceededError:
        """The error for a /call that outlived ``call_timeout``, by how far it got."""
        timeout = self.call_timeout
        task_id = progress.known_task_id
        context: dict[str, Any] = {"deadline": timeout, "session_id": session_id, "task_id": task_id,
                                   "request": progress.request}  # fmt: skip
        if task_id is not None:
            return CallDeadlineExceededError(
                f"no result for {name!r} within call_timeout={timeout:g} s; the server had accepted it as task "
                f"{task_id}, so the tool ran or is running, and the call is not sent again",
                **context,
            )
        if progress.maybe_ran:
            return CallDeadlineExceededError(
                f"no result for {name!r} within call_timeout={timeout:g} s; the request may have reached the "
                "environment, so the tool may or may not have run, and the call is not sent again",
                **context,
            )
        return DeadlineExceededError(
            f"{name!r} could not be sent within call_timeout={timeout:g} s (it waited for a free connection, "
            "or the server kept asking to wait); the tool did not run",
            **context,
        )

    async def _call(self, session: AsyncSession, name: str, tool_input: Mapping[str, Any]) -> ToolResult:
        """One ``/call`` within ``call_timeout``, published as a ``result`` or ``call_error`` event at its end."""
        __tracebackhide__ = True
        call_number = session._next_call()
        events = session.events
        progress = _CallProgress()
        limit = asyncio.timeout(self.call_timeout)
        try:
            try:
                async with limit:
                    result = await self._call_attempts(session, name, tool_input, call_number, progress)
            except TimeoutError as exc:
                if not limit.expired():
                    raise
                raise self._call_deadline(session.sid, name, progress) from exc
        except (ORSError, httpx2.HTTPError) as exc:
            if events.active:
                events.publish(CallErrorEvent(session_id=session.sid, call=call_number,
                                              task_id=getattr(exc, "task_id", None),
                                              error=describe_error(exc)))  # fmt: skip
            raise
        if events.active:
            events.publish(ResultEvent(session_id=session.sid, call=call_number, task_id=result.task_id, ok=result.ok,
                                       reward=result.reward, finished=result.finished, error=result.error,
                                       reason=result.reason))  # fmt: skip
        return result

    async def _call_attempts(
        self,
        session: AsyncSession,
        name: str,
        tool_input: Mapping[str, Any],
        call_number: int,
        progress: _CallProgress,
    ) -> ToolResult:
        """Send, assemble the stream, resume it with its task_id if it drops (the rules: ``policy.py``)."""
        __tracebackhide__ = True
        sid, path, events = session.sid, f"/{session.environment}/call", session.events
        body: dict[str, Any] = {"name": name, "input": dict(tool_input)}
        attempt = resumes = 0
        starting_since: float | None = None
        while True:
            attempt += 1
            task_id = progress.task_id
            request = self._request(
                "POST", path, body if task_id is None else {**body, "task_id": task_id}, sid, stream=True
            )
            progress.request, progress.assembler = request, None
            if task_id is None:
                progress.maybe_ran = True
            try:
                sent = await self._send(events, request, sid, attempt, stream=True, call=call_number, progress=progress)
            except ConnectionFailedError as exc:
                if exc.before_sending and task_id is None:
                    raise  # it could not connect: the tool did not run
                if task_id is None:
                    raise OutcomeUnknownError(
                        f"the connection failed after sending {name!r} ({describe_error(exc.__cause__ or exc)}); "
                        "the tool may or may not have run, so the call is not sent again",
                        session_id=sid,
                        request=request,
                    ) from exc.__cause__
                resumes = await self._before_resume(events, sid, task_id, request, resumes, exc, attempt, call_number)
                continue
            except DeadlineExceededError as exc:  # the answer did not come within request_timeout
                if task_id is None:
                    raise CallDeadlineExceededError(
                        f"no answer to {name!r} within request_timeout={self.request_timeout:g} s; the tool may or "
                        "may not have run, so the call is not sent again",
                        deadline=self.request_timeout,
                        session_id=sid,
                        request=request,
                    ) from exc
                resumes = await self._before_resume(events, sid, task_id, request, resumes, exc, attempt, call_number)
                continue
            if sent is None:
                continue
            response, tap = sent
            if response.status_code != 200:
                if starting_since is None and is_starting(response):
                    starting_since = time.monotonic()
                if task_id is not None and response.status_code in RETRY_STATUSES:  # re-attaching runs nothing
                    resumes = await self._before_resume(
                        events, sid, task_id, request, resumes, self._error(response, sid, task_id), attempt,
                        call_number, wait=self.retry.pause_after(response, resumes + 1),
                    )  # fmt: skip
                    continue
                wait = self.retry.wait_after(response, attempt, starting_since, first_call=task_id is None)
                if wait is None:
                    if task_id is None and outcome_unknown(response):
                        raise self._outcome_unknown(response, sid, name, request)
                    raise self._error(response, sid, task_id)
                progress.maybe_ran = False  # 429 or "starting": the tool did not run
                if events.active:
                    events.publish(RetryEvent(session_id=sid, attempt=attempt, call=call_number,
                                              reason=str(response.status_code), backoff=wait))  # fmt: skip
                await asyncio.sleep(wait)
                continue
            assembler = progress.assembler = CallAssembler(task_id, max_result_bytes=self.max_result_bytes)
            drop: httpx2.TransportError | None = None
            try:
                result = await self._read_stream(
                    response, BodyReader(tap, assembler, max_line_bytes=self.max_line_bytes)
                )
            except ORSError as exc:
                exc.session_id, exc.request = sid, request
                exc.task_id = exc.task_id or assembler.task_id
                raise
            except httpx2.TransportError as exc:
                if tap is not None:
                    tap.disconnect(exc)
                result, drop = None, exc
            if result is not None:
                return result
            task_id = progress.task_id = assembler.task_id
            if task_id is None:
                raise OutcomeUnknownError(
                    f"the stream for {name!r} ended before its task_id; the tool may or may not have run, "
                    "so the call is not sent again",
                    session_id=sid,
                    request=request,
                ) from drop
            resumes = await self._before_resume(events, sid, task_id, request, resumes, drop, attempt, call_number)

    async def _before_resume(
        self,
        events: EventStream,
        sid: str,
        task_id: str,
        request: httpx2.Request,
        resumes: int,
        cause: BaseException | None,
        attempt: int,
        call_number: int,
        *,
        wait: float | None = None,
    ) -> int:
        """Count one more resume (``ResumeFailedError`` past ``resume_attempts``), and wait before it."""
        __tracebackhide__ = True
        resumes += 1
        if resumes > self.retry.resume_attempts:
            raise ResumeFailedError(
                f"the stream dropped and {self.retry.resume_attempts} resumes with its task_id failed",
                session_id=sid,
                task_id=task_id,
                request=request,
            ) from cause
        if wait is None:
            wait = self.retry.backoff_for(resumes)
        if events.active:
            events.publish(RetryEvent(session_id=sid, attempt=attempt, call=call_number, reason="resume",
                                      task_id=task_id, backoff=wait))  # fmt: skip
        await asyncio.sleep(wait)
        return resumes

    async def _read_stream(self, response: httpx2.Response, reader: BodyReader) -> ToolResult | None:
        """Decode one SSE response through ``reader``; the result, or None if it ended early."""
        __tracebackhide__ = True
        try:
            content_type = response.headers.get("content-type", "")
            if not content_type.startswith("text/event-stream"):
                await response.aread()
                raise MalformedStreamError(f"expected an SSE stream, got {content_type!r}: {response.text[:200]!r}")
            chunks = response.aiter_bytes() if "content-encoding" in response.headers else response.aiter_raw()
            loop = asyncio.get_running_loop()
            heartbeat = self.heartbeat_timeout
            try:
                async with asyncio.timeout(heartbeat) as silence:
                    async for chunk in chunks:
                        if reader.result is None:
                            silence.reschedule(loop.time() + heartbeat)
                            if reader.feed(chunk) is not None:
                                # read on to the end of the body (the server closes it right after
                                # `end`), so the connection goes back to the pool instead of closing
                                silence.reschedule(loop.time() + DRAIN_TIMEOUT)
                        else:
                            reader.feed(chunk)
            except httpx2.TransportError:
                if reader.result is not None:
                    return reader.result  # the body broke after `end`: the result is whole
                raise
            except httpx2.DecodingError as exc:
                raise MalformedStreamError(f"the stream cannot be decoded ({describe_error(exc)})") from exc
            except TimeoutError as exc:
                if reader.result is not None:
                    return reader.result
                raise httpx2.ReadTimeout(
                    f"no bytes for {heartbeat:g} s on a /call stream (pings come every 10 s)", request=response.request
                ) from exc
            return reader.result
        finally:
            await response.aclose()

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


class AsyncEnvironment:
    """One environment on a server: its splits, tasks and tools, and sessions on its tasks.

    ``events`` is where it and its sessions publish: the client's stream, unless it was given one.
    """

    def __init__(self, client: AsyncClient, name: str, *, events: EventStream | None = None) -> None:
        self.client = client
        self.name = name
        self._events = events if events is not None else client.events

    @property
    def events(self) -> EventStream:
        """Where it publishes, and a session made from it: its stream (given, or the client's), or in code that
        captures into a stream forwarding there (``EventStream.capture``: an evaluation's episode), that one."""
        return self._events.routed()

    def __repr__(self) -> str:
        return f"AsyncEnvironment({self.name!r}, url={self.client.base_url!r})"

    async def _json(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        __tracebackhide__ = True
        try:
            return await self.client._json(self.events, method, f"/{self.name}/{path}", body, **options)
        except ServerError as exc:
            explained = await self._explain(exc, body)
            if explained is exc:
                raise
            raise explained from None

    async def _explain(self, error: ServerError, body: Any) -> ServerError:
        """The error a caller's mistake deserves, for the bare status a server answers it with: an environment
        the server does not have (a 308 to its default environment, or a 404), a split the environment does not
        have, a task index past the split's end (400 ``Invalid split`` / ``Invalid index``). The facts come from
        the server (its environments, splits or task count); the error itself when they do not show a mistake.
        """
        if type(error) is not ServerError:  # already a precise one (a session not found, a replay mismatch, ...)
            return error
        asked = body if isinstance(body, dict) else {}
        context: dict[str, Any] = {"status_code": error.status_code, "detail": error.detail,
                                   "session_id": error.session_id, "request": error.request}  # fmt: skip
        try:
            if 300 <= error.status_code < 400 or error.status_code == 404:
                names = await self.client.environments()
                if self.name not in names:
                    listed = f"its environments: {_listing(names)}" if names else "it has no environments"
                    return UnknownEnvironmentError(
                        f"unknown environment {self.name!r} at {self.client.base_url}; {listed}",
                        environment=self.name, available=names, **context,
                    )  # fmt: skip
            split, index = asked.get("split"), asked.get("index")
            if error.status_code == 400 and error.detail == "Invalid split" and isinstance(split, str):
                splits = [s.name for s in await self.splits()]
                if split not in splits:
                    return UnknownSplitError(
                        f"unknown split {split!r} of environment {self.name!r}; its splits: {_listing(splits)}",
                        split=split, available=splits, **context,
                    )  # fmt: skip
            if error.status_code == 400 and error.detail == "Invalid index" and isinstance(index, int):
                count = await self.num_tasks(str(split))
                span = f" (0 to {count - 1}, or {-count} to -1 from the end)" if count else ""
                return TaskIndexError(
                    f"no task {index} in split {split!r} of {self.name!r}: it has {count} tasks{span}",
                    split=str(split), index=index, num_tasks=count, **context,
                )  # fmt: skip
        except ORSError:  # the server could not say more: its own answer stands
            return error
        return error

    def _tasks(self, body: Any) -> list[Task]:
        return [Task.from_wire(spec, self.name) for spec in _array(_object_field(body, "tasks"), "tasks")]

    async def splits(self) -> list[Split]:
        """The environment's splits."""
        __tracebackhide__ = True
        splits: list[Split] = await self._json(
            "GET", "splits", parse=lambda body: [Split.from_wire(s) for s in _array(body, "splits")],
            expect='[{"name": ..., "type": ...}, ...]',
        )  # fmt: skip
        return splits

    async def tasks(self, split: str) -> list[Task]:
        """Every task of a split."""
        __tracebackhide__ = True
        tasks: list[Task] = await self._json("POST", "tasks", {"split": split}, parse=self._tasks,
                                             expect='{"tasks": [...]}')  # fmt: skip
        return tasks

    async def num_tasks(self, split: str) -> int:
        """How many tasks a split has."""
        __tracebackhide__ = True
        count: int = await self._json("POST", "num_tasks", {"split": split}, parse=_task_count,
                                      expect='{"num_tasks": N}')  # fmt: skip
        return count

    async def episodes(self, split: str, rollouts: int = 1) -> list[tuple[int, int]]:
        """The (task index, rollout) pairs an evaluation of ``split`` runs when not told which tasks: each
        task, ``rollouts`` times; from a replay of a trace, the pairs it holds (rollouts below ``rollouts``).

        One ``POST /{env}/num_tasks`` with ``x-ors-lab-replay: episodes``: ``ReplayServer`` and
        ``ReplayTransport`` add the pairs the trace holds to their answer; any other server answers
        the count alone (``ors_lab.protocol.replay``).
        """
        __tracebackhide__ = True
        if rollouts < 1:
            raise ValueError(f"rollouts must be 1 or more, not {rollouts}")
        count, recorded = await self._json(
            "POST", "num_tasks", {"split": split}, extra_headers={REPLAY_HEADER: EPISODES},
            parse=_count_and_recorded, expect='{"num_tasks": N}',
        )  # fmt: skip
        if recorded is None:
            return [(index, rollout) for index in range(count) for rollout in range(rollouts)]
        return [(index, rollout) for index, rollout in recorded if rollout < rollouts]

    async def task(self, split: str, index: int) -> Task:
        """One task by position (negative counts from the end)."""
        __tracebackhide__ = True
        task: Task = await self._json(
            "POST", "task", {"split": split, "index": index},
            parse=lambda body: Task.from_wire(_object_field(body, "task"), self.name), expect='{"task": {...}}',
        )  # fmt: skip
        return task

    async def task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[Task]:
        """Tasks ``start:stop`` of a split, with Python slice semantics."""
        __tracebackhide__ = True
        tasks: list[Task] = await self._json("POST", "task_range", {"split": split, "start": start, "stop": stop},
                                             parse=self._tasks, expect='{"tasks": [...]}')  # fmt: skip
        return tasks

    async def tools(self) -> list[ToolSpec]:
        """The tools every task of this environment shares."""
        __tracebackhide__ = True
        tools: list[ToolSpec] = await self._json("GET", "tools", parse=_tool_specs, expect='{"tools": [...]}')
        return tools

    def session(
        self,
        task: Task | Mapping[str, Any] | None = None,
        *,
        split: str | None = None,
        index: int | None = None,
        secrets: Mapping[str, str] | None = None,
        view: bool = True,
    ) -> AsyncSession:
        """A session on one task, by ``task=`` (a Task or its spec) or by ``split=`` and ``index=``.

        It opens on first use (``await s.call(...)``) and lives until ``close()``; or use it as
        ``async with env.session(split="test", index=0) as s:``, which opens it on entry and deletes
        it on exit. ``view=False``: no live view of this session, whatever ``ol.live_views()`` says (an
        evaluation's episodes, a loop over many sessions).
        """
        if task is not None and (split is not None or index is not None):
            raise ValueError("give either task= or split=/index=, not both")
        if task is None and (split is None or index is None):
            raise ValueError("give either task= or both split= and index=")
        return AsyncSession(self, task=task, split=split, index=index, secrets=secrets, view=view)


class AsyncSession:
    """A live episode on one task: ``prompt()``, ``tools()``, ``call()``; kept alive until closed.

    The first of them opens it (``open()`` and ``async with`` open it too); it is then kept alive
    (a ping every 10 s) until ``close()``, the end of the ``async with`` block, or its client's end.
    In a notebook it shows its live view where it opens (``view``), and again when displayed.
    ``events`` is where it publishes for its whole life: its environment's stream when it was made.
    """

    def __init__(
        self,
        environment: AsyncEnvironment,
        *,
        task: Task | Mapping[str, Any] | None,
        split: str | None,
        index: int | None,
        secrets: Mapping[str, str] | None,
        view: bool = True,
    ) -> None:
        self.client = environment.client
        self.environment = environment.name
        self.events = environment.events
        self._env = environment
        self._tools: list[ToolSpec] | None = None  # the last tools() answer, to name them when a call's tool is not
        self.task = task if isinstance(task, Task) or task is None else Task(environment.name, dict(task))
        self.split = split
        self.index = index
        self.sid = uuid.uuid4().hex
        self.pings = 0
        self.calls = 0
        self._secrets = dict(secrets) if secrets else None
        self._state = "new"
        self._opening = asyncio.Lock()  # one /create, whichever first use gets there first
        self._dead: ORSError | None = None
        self._pinger: asyncio.Task[None] | None = None
        self._wants_view = view
        self.view: SessionView | None = None
        """The live view, once the session opened with one (see ``ors_lab.notebook.session``)."""

    def __repr__(self) -> str:
        where = f"task={self.task!r}" if self.task is not None else f"split={self.split!r}, index={self.index}"
        return f"AsyncSession({self.environment!r}, {where}, sid={self.sid!r}, {self.state})"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        if self.view is not None:  # the live widget in a notebook (the same one), else its static card
            return self.view._repr_mimebundle_(include, exclude)
        return {"text/html": self._repr_html_(), "text/plain": repr(self)}

    def _repr_html_(self) -> str:
        from ors_lab.notebook.session import SessionState

        state = self.view.state if self.view is not None else SessionState.of(self)
        return state.html()

    @property
    def state(self) -> str:
        """``new``, ``opening``, ``open``, ``expired`` (the server no longer knows it) or ``closed``."""
        if self._dead is not None and self._state != "closed":
            return "expired"
        return self._state

    @property
    def closed(self) -> bool:
        """True once the session was closed or found dead."""
        return self._state == "closed" or self._dead is not None

    async def __aenter__(self) -> Self:
        __tracebackhide__ = True
        await self._ensure_open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        __tracebackhide__ = True
        if exc is None:
            await self.close()
            return
        try:
            await self.close()
        except Exception as close_error:  # the block's own exception matters more; the server reaps in 900 s
            exc.add_note(f"ors_lab: deleting session {self.sid} failed too: {close_error!r}")

    async def _json(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        __tracebackhide__ = True
        return await self.client._json(self.events, method, path, body, session_id=self.sid, **options)

    async def open(self) -> None:
        """Create the session on the server (one request) and start its keep-alive pings.

        Not needed before ``prompt()``, ``tools()`` or ``call()``: the first of them opens it.
        """
        __tracebackhide__ = True
        async with self._opening:
            if self._state != "new":
                raise SessionClosedError(f"the session is already {self._state}", session_id=self.sid)
            await self._open()

    async def _ensure_open(self) -> None:
        """Open a new session (once, whatever races to it); raise if it is closed or dead."""
        __tracebackhide__ = True
        if self._state in ("new", "opening"):  # "opening": another first use holds the lock; wait for it
            async with self._opening:
                if self._state == "new":
                    await self._open()
        self._check()

    async def _open(self) -> None:
        __tracebackhide__ = True
        body: dict[str, Any] = {"env_name": self.environment}
        if self.task is not None:
            body["task_spec"] = dict(self.task.spec)
        else:
            body["split"], body["index"] = self.split, self.index
        headers = None
        if self._secrets:
            if await self.client._server_flavor(self.events) == "openreward":
                secrets = {name: {"value": value} for name, value in self._secrets.items()}
                headers = {"X-Secrets": base64.b64encode(_dumps(secrets)).decode()}
            else:
                body["secrets"] = self._secrets
        if self._wants_view and self.view is None:  # subscribed before the /create, so it sees all of it
            from ors_lab.notebook.session import SessionView

            self.view = SessionView.start(self)
        self._state = "opening"
        self.client._sessions.add(self)
        create = asyncio.ensure_future(self._create(body, headers))
        try:
            await outlast_cancel(create, grace=DELETE_TIMEOUT)
        except BaseException:  # cancelled, or failed: the server may hold the session all the same
            try:
                await self._abandon(create)
            finally:
                self._end_view()
            raise
        self._opened()

    async def _create(self, body: dict[str, Any], headers: dict[str, str] | None) -> Any:
        """``POST /create``; a refusal for an unknown environment, split or task index says so (``_explain``)."""
        __tracebackhide__ = True
        try:
            return await self._json("POST", "/create", body, extra_headers=headers)
        except ServerError as exc:
            explained = await self._env._explain(exc, body)
            if explained is exc:
                raise
            raise explained from None

    def _opened(self) -> None:
        self._state = "open"
        if self.events.active:
            self.events.publish(OpenEvent(session_id=self.sid, environment=self.environment, split=self.split,
                                          task_index=self.index,
                                          task=None if self.task is None else self.task.spec))  # fmt: skip
        self._pinger = asyncio.create_task(self._keep_alive(), name=f"ors-lab ping {self.sid}")

    async def _abandon(self, create: asyncio.Future[Any]) -> None:
        """After a cancel or a failure during ``open``: delete the session unless the server surely never made it.

        It surely did not when it refused the ``/create`` (a 4xx) or the request never left; after a
        5xx, a dropped connection, a malformed answer or a cancel it may have, so it is deleted (a
        delete of a session the server does not know is harmless).
        """
        failed = None if create.cancelled() else create.exception()
        refused = isinstance(failed, ServerError) and failed.status_code < 500
        if refused or (isinstance(failed, ConnectionFailedError) and failed.before_sending):
            self._state = "closed"
            self.client._sessions.discard(self)
            return
        if failed is None and not create.cancelled():
            self._opened()  # it was made: recorded as opened, then closed like any other
        with contextlib.suppress(Exception):  # a failed delete is on its close event; the cancel goes on
            await self.close()

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self.client.ping_interval)
            try:
                await self.ping()
            except SessionNotFoundError as exc:
                self._dead = exc
                return
            except (ORSError, httpx2.HTTPError):
                continue  # a missed ping is not fatal: the server waits 900 s

    async def ping(self) -> None:
        """Tell the server the session is in use (the keep-alive task does this every 10 s)."""
        __tracebackhide__ = True
        await self._json("POST", "/ping")
        self.pings += 1
        if self.events.active:
            self.events.publish(PingEvent(session_id=self.sid))

    def _check(self) -> None:
        __tracebackhide__ = True
        if self._dead is not None:
            raise SessionClosedError(f"the session is dead: {self._dead.message}", session_id=self.sid)
        if self._state != "open":
            hint = "; start a new one with env.session(...)" if self._state == "closed" else ""
            raise SessionClosedError(f"the session is {self._state}{hint}", session_id=self.sid)

    def _next_call(self) -> int:
        self.calls += 1
        return self.calls

    async def prompt(self) -> list[Block]:
        """The task's prompt, as blocks (opens a new session first)."""
        __tracebackhide__ = True
        await self._ensure_open()
        blocks: list[Block] = await self._json(
            "GET", f"/{self.environment}/prompt", parse=lambda body: list(blocks_from_wire(body)), expect="[block, ...]"
        )
        return blocks

    async def tools(self) -> list[ToolSpec]:
        """The tools of this session: the shared ones, then the task's own (opens a new session first)."""
        __tracebackhide__ = True
        await self._ensure_open()
        tools: list[ToolSpec] = await self._json(
            "GET", f"/{self.environment}/task_tools", parse=_tool_specs, expect='{"tools": [...]}'
        )
        self._tools = tools
        return tools

    async def call(self, name: str, input: Mapping[str, Any] | None = None) -> ToolResult:
        """Run a tool; the ``ToolResult`` has ``ok=False`` (not an exception) for ORS logic failures.

        A new session is opened first. For a tool the session does not have, its ``error`` names the tool
        and lists the session's tools.
        """
        __tracebackhide__ = True
        await self._ensure_open()
        result = await self.client._call(self, name, input or {})
        if not result.ok and (result.reason == "not_found" or (result.error or "").endswith("is not a valid tool")):
            result = await self._name_the_tools(result, name)
        return result

    async def _name_the_tools(self, result: ToolResult, name: str) -> ToolResult:
        """A not-found result whose error lists the session's tools (the last ``tools()``, else asked for)."""
        try:
            tools = self._tools if self._tools is not None else await self.tools()
        except ORSError:  # the server's own words stand
            return result
        names = [tool.name for tool in tools]
        if name in names:
            return result
        listed = f"the tools of this session are: {_listing(names)}" if names else "this session has no tools"
        return dataclasses.replace(result, error=f"{result.error or f'no tool {name!r}'}; {listed}")

    async def close(self) -> None:
        """Stop the pings and delete the session on the server (safe to call twice).

        The delete is tried up to ``DELETE_ATTEMPTS`` times within ``DELETE_TIMEOUT`` seconds (not
        counting a wait for a free connection, when all are in use), and a cancel (Ctrl-C) cannot cut
        it short: the cancelled caller waits for it, then gets its ``CancelledError``. The ``close``
        event says whether the server confirmed it (``ok``); a delete that still failed raises its
        error (``OutcomeUnknownError`` when the server never answered in time).
        """
        __tracebackhide__ = True
        await self._close(DELETE_TIMEOUT)

    async def _close(self, bound: float) -> None:
        """``close()``, its delete given ``bound`` seconds at most."""
        __tracebackhide__ = True
        if self._state in ("closed", "new"):
            self._state = "closed"
            return
        self._state = "closed"
        self.client._sessions.discard(self)
        pinger, self._pinger = self._pinger, None
        if pinger is not None:
            pinger.cancel()
        try:
            await outlast_cancel(self._delete(bound))
        finally:
            self._end_view()

    def _end_view(self) -> None:
        """Detach the live view and draw its final state (it stays displayable)."""
        if self.view is not None:
            self.view.close()

    async def _delete(self, bound: float) -> None:
        """``POST /delete`` until the server confirms it (or no longer knows the session), then the close event."""
        __tracebackhide__ = True
        error: Exception | None = None
        try:
            async with asyncio.timeout(bound) as limit:
                for attempt in range(1, DELETE_ATTEMPTS + 1):
                    try:
                        await self._json("POST", "/delete", pause=limit)  # not counting a wait for a connection
                    except SessionNotFoundError:
                        error = None  # the server no longer holds it: nothing left to delete
                    except Exception as exc:  # any failure: try again, then report it
                        error = exc
                        if attempt < DELETE_ATTEMPTS:
                            await asyncio.sleep(self.client.retry.backoff_for(attempt))
                            continue
                    else:
                        error = None
                    break
        except TimeoutError as exc:
            error = OutcomeUnknownError(
                f"the server did not confirm deleting the session within {bound:g} s "
                f"(last error: {describe_error(error) if error is not None else 'none'}); it may still hold "
                "the session until it reaps it (900 s without a ping)",
                session_id=self.sid,
            )
            error.__cause__ = exc
        if self.events.active:
            self.events.publish(CloseEvent(session_id=self.sid, ok=error is None,
                                           error=None if error is None else describe_error(error)))  # fmt: skip
        if error is not None:
            raise error


async def delete_session(env: AsyncEnvironment, sid: str, *, bound: float = DELETE_TIMEOUT) -> None:
    """Delete the session ``sid`` on ``env``'s server: one that no ``AsyncSession`` of this process holds (a Ray
    worker that died had it open). The same ``POST /delete`` as ``AsyncSession.close()``, tried as often, within
    ``bound`` seconds, its ``close`` event on ``env.events``; a delete that still failed raises its error."""
    __tracebackhide__ = True
    session = AsyncSession(env, task=None, split=None, index=None, secrets=None, view=False)
    session.sid = sid
    session._state = "open"  # opened elsewhere: closing it is all that is left
    await session._close(bound)
