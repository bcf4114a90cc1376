"""A recording reverse proxy: any ORS client's traffic, recorded into the same trace format.

The official SDKs speak aiohttp, which no httpx hook can see; pointed at this proxy instead of the
server, they are recorded like our own client: requests, responses, every network chunk, SSE event
and comment, results, and the session steps (open on ``/create``, ping, close on ``/delete``).
Bodies stream through as they arrive (pings and chunks reach the client when the server sends
them); nothing is buffered but plain JSON answers. Redirects are passed back, not followed. What
passes through is published as typed events on the proxy's ``events`` stream, through the same
``ExchangeTap`` the ORS client records itself with; the recorder is its subscriber.

When the upstream fails, no client is led to run a tool twice:

- A first ``/call`` (no ``task_id`` in its body) whose upstream hangs up before the stream's
  ``task_id`` may or may not have run the tool. A 502 would be sent again by every client that
  retries gateway errors (the ors-sdk client retries every 5xx and every dropped connection,
  openreward's 429/502/503/504 and dropped connections, most SDKs 408, 409, 429 and 5xx; urllib3
  honours ``Retry-After`` on 413, 429 and 503), and so would a dropped connection. The proxy answers
  ``424 Failed Dependency`` instead (``OUTCOME_UNKNOWN_STATUS``: a client error no client retries),
  with ``x-should-retry: false`` (the header OpenAI-style SDKs obey), ``x-ors-lab-outcome: unknown``
  and a JSON ``detail`` that says the outcome is unknown. To keep that choice open, the head of a
  first ``/call`` stream is held back until its first event (the ``task_id``) arrives.
- A connection the upstream refused (nothing was sent) is a ``502``: retrying it is safe, as is
  retrying a failed resume (its body carries the ``task_id``) or any other request.
- A stream that breaks after its ``task_id`` reaches the client as the same break, so that it
  resumes with the ``task_id``; uvicorn does not log it as an application error. A plain answer
  whose body breaks is a drop before the answer, as above (a ``502``, or the ``424`` on a first
  ``/call``), never an exception in the proxy.
- The proxy has no read timeout of its own: it waits for the upstream as long as its client does.
  When the client hangs up first (its own timeout), the proxy hangs up on the upstream too, and
  records a ``disconnect`` (and, for a first ``/call`` still waiting for its ``task_id``, a
  ``call_error`` saying the outcome is unknown); a stream the client leaves mid-way is recorded
  the same way. So a silent or trickling upstream holds nothing after its client has gone.
- A ``/call`` body larger than ``max_result_bytes`` (the result with its SSE framing and pings,
  256 MiB by default), or an unfinished SSE event larger than it on any stream, is not read on:
  the proxy records a ``MalformedStreamError``, closes the upstream connection, and ends the
  client's stream with an ``error`` event that says so (a non-``/call`` stream is dropped). So
  the proxy holds at most about ``max_result_bytes`` per stream, whatever the upstream sends.

``ors-lab proxy UPSTREAM --port P --out TRACE`` runs it from the command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ors_lab.asgi import listen, run_app, serve_app
from ors_lab.client.policy import OUTCOME_HEADER
from ors_lab.client.tap import BodyReader, ExchangeTap, describe_error, is_event_stream
from ors_lab.client.url import server_url
from ors_lab.client.wire import WireTransport
from ors_lab.events import (
    CallErrorEvent,
    CloseEvent,
    EventStream,
    OpenEvent,
    PingEvent,
    ResultEvent,
    Subscriber,
)
from ors_lab.protocol.call import MAX_RESULT_BYTES, CallAssembler
from ors_lab.protocol.errors import MalformedStreamError, ORSError, OutcomeUnknownError
from ors_lab.recording.recorder import Recorder

__all__ = ["OUTCOME_UNKNOWN_STATUS", "RecordingProxy", "run_proxy", "serve_proxy"]

OUTCOME_UNKNOWN_STATUS = 424
"""The status of a first ``/call`` whose upstream hung up before its ``task_id`` (Failed Dependency).

Not 502/503/504 (every SDK retries those), nor 408, 409, 413, 425 or 429 (some retry those)."""

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


class RecordingProxy:
    """The proxy's state: upstream, event stream, call numbering per session, and the ASGI ``app``.

    ``recorder`` (a ``Recorder`` or any subscriber) is subscribed to ``events``.
    ``max_result_bytes`` bounds each ``/call`` response body and each unfinished SSE event.
    """

    def __init__(
        self, upstream: str, recorder: Subscriber | None = None, *, max_result_bytes: int = MAX_RESULT_BYTES
    ) -> None:
        if max_result_bytes < 1:
            raise ValueError(f"max_result_bytes must be 1 or more, not {max_result_bytes!r}")
        self.upstream = server_url(upstream)  # not a URL: refused here, before any port is taken or trace made
        self.max_result_bytes = max_result_bytes
        self.events = EventStream()
        if recorder is not None:
            self.events.subscribe(recorder)
        self._http: httpx2.AsyncClient | None = None
        self._calls: dict[str | None, int] = {}
        self._tasks: dict[str, tuple[int, int]] = {}  # task_id -> (call, attempts so far)
        self._redirected: dict[str | None, tuple[int, int]] = {}  # a /call answered 3xx: its next attempt
        self._default_env: str | None = None
        self.app = Starlette(routes=[Route("/{path:path}", self._handle, methods=METHODS)], lifespan=self._lifespan)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        await self.aclose()

    def _client(self) -> httpx2.AsyncClient:
        if self._http is None:
            self._http = httpx2.AsyncClient(  # unbounded: it forwards what its clients send, bounded by their own
                transport=WireTransport(connections=None),
                timeout=httpx2.Timeout(None, connect=10.0),
                follow_redirects=False,
            )
        return self._http

    async def _handle(self, request: Request) -> Response:
        body = await request.body()
        path = request.url.path
        url = self.upstream + path + (f"?{request.url.query}" if request.url.query else "")
        sid = request.headers.get("x-session-id", "").strip() or None
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP]
        call = attempt = None
        task_id: str | None = None
        if request.method == "POST" and path.endswith("/call"):
            call, attempt, task_id = self._number_call(sid, body)
        tap = ExchangeTap(self.events, session_id=sid, call=call, attempt=attempt)
        tap.request(request.method, url, headers, body)
        forward = asyncio.ensure_future(self._forward(request.method, url, path, headers, body, sid, tap, task_id))
        if not await _first_of(forward, _client_left(request)):
            message = "the client hung up before the upstream answered"
            tap.disconnect(message)
            return self._failed(message, tap, task_id)  # recorded; nobody is left to read the answer
        return forward.result()

    async def _forward(
        self,
        method: str,
        url: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes,
        sid: str | None,
        tap: ExchangeTap,
        task_id: str | None,
    ) -> Response:
        """Pass the request upstream and make the client's answer (a streamed one starts once its head is in)."""
        upstream = self._client().build_request(method, url, headers=headers, content=body)
        started = time.monotonic_ns()
        try:
            response = await self._client().send(upstream, stream=True)
        except httpx2.HTTPError as exc:
            tap.disconnect(exc)
            return self._failed(exc, tap, task_id)
        try:
            return await self._answer(response, path, body, sid, tap, task_id, started)
        except BaseException:  # the client left (cancelled), or a bug: never leave the upstream connection open
            await response.aclose()
            raise

    async def _answer(
        self,
        response: httpx2.Response,
        path: str,
        body: bytes,
        sid: str | None,
        tap: ExchangeTap,
        task_id: str | None,
        started: int,
    ) -> Response:
        call, attempt = tap.call, tap.attempt
        ttfb_ns = time.monotonic_ns() - started
        out_headers = {k: v for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP}
        if is_event_stream(response.headers):
            tap.response(response.status_code, response.headers, ttfb_ns)
            relay = _Relay(self, response, tap, task_id)
            if call is not None and task_id is None:  # hold the head back until the task_id
                try:
                    started_ok = await relay.read_ahead()
                except httpx2.HTTPError as exc:
                    tap.disconnect(exc)
                    await response.aclose()
                    return self._failed(exc, tap, task_id)
                if not started_ok:
                    tap.disconnect("the stream ended before its task_id")
                    await response.aclose()
                    return self._failed("the stream ended before its task_id", tap, task_id)
            return StreamingResponse(relay.body(), status_code=response.status_code, headers=out_headers)
        try:
            content = await response.aread()
        except httpx2.HTTPError as exc:  # the body broke: as a drop before the answer
            tap.disconnect(exc)
            return self._failed(exc, tap, task_id)
        finally:
            await response.aclose()
        tap.response(response.status_code, response.headers, ttfb_ns, content)
        if response.status_code < 300 and sid is not None:
            await self._session_step(path, sid, body)
        elif 300 <= response.status_code < 400 and call is not None and attempt is not None:
            self._redirected[sid] = (call, attempt)
        return Response(content, status_code=response.status_code, headers=out_headers)

    def _number_call(self, sid: str | None, body: bytes) -> tuple[int, int, str | None]:
        """A new call gets the session's next number; a resume (body with task_id) keeps its call's."""
        try:
            task_id = json.loads(body).get("task_id")
        except (ValueError, AttributeError):
            task_id = None
        if sid in self._redirected:  # the client follows the redirect: the same call, one attempt on
            call, attempts = self._redirected.pop(sid)
            return call, attempts + 1, task_id
        if task_id is not None and task_id in self._tasks:
            call, attempts = self._tasks[task_id]
            self._tasks[task_id] = (call, attempts + 1)
            return call, attempts + 1, task_id
        call = self._calls.get(sid, 0) + 1
        self._calls[sid] = call
        return call, 1, task_id

    def _failed(self, error: BaseException | str, tap: ExchangeTap, task_id: str | None) -> Response:
        """The answer to a request whose upstream failed before answering (see the module docstring)."""
        described = error if isinstance(error, str) else describe_error(error)
        refused = isinstance(error, httpx2.ConnectError | httpx2.ConnectTimeout)  # nothing was sent
        if tap.call is None or task_id is not None or refused:
            detail = json.dumps({"detail": f"ors-lab proxy: upstream failed: {described}"})
            return Response(detail, status_code=502, media_type="application/json")
        message = (
            f"ors-lab proxy: the upstream hung up before this /call's task_id ({described}); the tool may or may "
            "not have run, so its outcome is unknown: do not send it again, it could run twice"
        )
        unknown = OutcomeUnknownError(message, session_id=tap.session_id)
        self.events.publish(CallErrorEvent(session_id=tap.session_id, call=tap.call, task_id=None,
                                           error=describe_error(unknown)))  # fmt: skip
        return Response(
            json.dumps({"detail": message, "outcome": "unknown"}),
            status_code=OUTCOME_UNKNOWN_STATUS,
            headers={"x-should-retry": "false", OUTCOME_HEADER: "unknown"},
            media_type="application/json",
        )

    async def _session_step(self, path: str, sid: str, body: bytes) -> None:
        publish = self.events.publish
        if path == "/create":
            spec = _json_object(body)
            environment = spec.get("env_name") or await self._default_environment()
            publish(OpenEvent(session_id=sid, environment=environment, split=spec.get("split"),
                              task_index=spec.get("index"), task=spec.get("task_spec")))  # fmt: skip
        elif path == "/ping":
            publish(PingEvent(session_id=sid))
        elif path == "/delete":
            publish(CloseEvent(session_id=sid))

    async def _default_environment(self) -> str | None:
        """The server's default environment (the first it lists), for /create bodies that name none."""
        if self._default_env is None:
            with contextlib.suppress(httpx2.HTTPError, ValueError, IndexError):
                names = (await self._client().get(self.upstream + "/list_environments")).json()
                self._default_env = str(names[0])
        return self._default_env

    async def aclose(self) -> None:
        """Close the upstream connections (the app's lifespan does this at shutdown)."""
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()


class _UpstreamDropped(Exception):
    """Raised from a streamed body to drop the client's connection, as the upstream dropped the proxy's.

    uvicorn then closes the connection mid-body; ``serve_app(quiet=...)`` keeps it out of the error log.
    """


class _Relay:
    """One streamed response on its way to the client: recorded and decoded chunk by chunk, and bounded.

    ``size`` counts a ``/call`` body's bytes until its result is whole (the assembler holds no more
    than that) and ``unfinished`` the bytes since the decoder last held nothing (it holds no more
    than that); either above the proxy's ``max_result_bytes`` ends the stream.
    """

    __slots__ = ("chunks", "failed", "held", "limit", "over", "proxy", "reader", "response", "size", "tap",
                 "unfinished")  # fmt: skip

    def __init__(self, proxy: RecordingProxy, response: httpx2.Response, tap: ExchangeTap, task_id: str | None) -> None:
        self.proxy = proxy
        self.response = response
        self.tap = tap
        self.reader = BodyReader(tap, CallAssembler(task_id) if tap.call is not None else None)
        self.chunks = aiter(response.aiter_raw())
        self.held: list[bytes] = []  # read ahead, not yet passed on
        self.limit = proxy.max_result_bytes
        self.size = self.unfinished = 0
        self.failed = False  # the stream carried an error, or broke the protocol
        self.over: str | None = None  # why the stream is ended before its end

    async def _next(self) -> bytes | None:
        """The next chunk from the upstream, recorded and decoded; None at the end of the body."""
        try:
            chunk = await anext(self.chunks)
        except StopAsyncIteration:
            return None
        self._take(chunk)
        return chunk

    def _take(self, chunk: bytes) -> None:
        reader, tap, publish = self.reader, self.tap, self.proxy.events.publish
        call, sid = tap.call, tap.session_id
        try:
            result = reader.feed(chunk)
        except ORSError as exc:
            result = None
            if call is not None and not self.failed:
                publish(CallErrorEvent(session_id=sid, call=call, task_id=exc.task_id, error=describe_error(exc)))
            self.failed = True
        assembler = reader.assembler
        if assembler is not None and assembler.task_id and call is not None:
            self.proxy._tasks.setdefault(assembler.task_id, (call, tap.attempt or 1))
        if result is not None and call is not None:
            publish(ResultEvent(session_id=sid, call=call, task_id=result.task_id, ok=result.ok, reward=result.reward,
                                finished=result.finished, error=result.error, reason=result.reason))  # fmt: skip
        self.unfinished = self.unfinished + len(chunk) if reader.decoder.pending else 0
        if assembler is not None and not assembler.done:
            self.size += len(chunk)
        if self.size > self.limit:
            self.over = f"the /call response passed max_result_bytes={self.limit} without its end"
        elif self.unfinished > self.limit:
            self.over = f"an unfinished SSE event passed max_result_bytes={self.limit}"

    async def read_ahead(self) -> bool:
        """Read a first /call's stream up to its first event or comment (the task_id); False if it ended first."""
        assembler = self.reader.assembler
        assert assembler is not None
        while not (assembler.task_id or assembler.pings or assembler.ignored or self.failed or self.over):
            chunk = await self._next()
            if chunk is None:
                return False
            self.held.append(chunk)
        return True

    async def body(self) -> AsyncIterator[bytes]:
        """The body for the client: what was read ahead, then the rest as it arrives."""
        tap = self.tap
        try:
            held, self.held = self.held, []
            for early in held:
                yield early
            while self.over is None:
                chunk = await self._next()
                if chunk is None:
                    if tap.call is not None and self.reader.result is None and not self.failed:
                        tap.disconnect("the stream ended before end or error")
                    return
                yield chunk
            async for chunk in self._end():
                yield chunk
        except httpx2.HTTPError as exc:
            tap.disconnect(exc)
            raise _UpstreamDropped(describe_error(exc)) from exc
        except asyncio.CancelledError:  # Starlette cancels the body when the client hangs up
            if not (self.failed or self.reader.result is not None):
                tap.disconnect("the client hung up before the end of the stream")
            raise
        finally:
            await self.response.aclose()

    async def _end(self) -> AsyncIterator[bytes]:
        """Stop reading the upstream, record why, and end the client's stream (an error event on a /call)."""
        await self.response.aclose()  # hangs up on the upstream: nothing more is read
        tap, message = self.tap, f"ors-lab proxy: {self.over}"
        if tap.call is None:
            tap.disconnect(message)
            raise _UpstreamDropped(message)
        assembler = self.reader.assembler
        error = MalformedStreamError(message, task_id=assembler.task_id if assembler is not None else None)
        self.proxy.events.publish(CallErrorEvent(session_id=tap.session_id, call=tap.call, task_id=error.task_id,
                                                 error=describe_error(error)))  # fmt: skip
        yield b"\n\nevent: error\ndata: " + message.encode() + b"\n\n"


async def _client_left(request: Request) -> None:
    """Return when the client hangs up (its request body is read: ``receive`` waits for the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _first_of(work: asyncio.Future[Any], left: Coroutine[Any, Any, None]) -> bool:
    """Wait for ``work`` unless the client leaves first; then cancel it and return False (True: ``work`` is done).

    Without it, an upstream that never answers (or trickles a JSON body) would hold its connection and the
    proxy's task long after the client gave up, until the proxy stops.
    """
    watch = asyncio.ensure_future(left)
    try:
        await asyncio.wait((work, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (watch, work):
            if not task.done():
                task.cancel()
        await asyncio.wait((work, watch))  # let both clean up (work closes its upstream response)
    return not work.cancelled()


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@contextlib.contextmanager
def serve_proxy(
    upstream: str, recorder: Subscriber, *, port: int = 0, max_result_bytes: int = MAX_RESULT_BYTES
) -> Iterator[str]:
    """Run the recording proxy on 127.0.0.1 for a ``with`` block; yields its URL."""
    proxy = RecordingProxy(upstream, recorder, max_result_bytes=max_result_bytes)
    with serve_app(proxy.app, port=port, quiet=(_UpstreamDropped,)) as url:
        yield url


def run_proxy(
    upstream: str,
    out: str | os.PathLike[str],
    *,
    port: int = 0,
    say: Any = print,
    redact_names: Iterable[str] = (),
    redact_patterns: Iterable[str] = (),
    max_result_bytes: int = MAX_RESULT_BYTES,
) -> None:
    """Record through the proxy into ``out`` until SIGINT or SIGTERM, then close the trace.

    The port is taken before the trace is created: a port in use is an ``OSError`` that leaves
    nothing behind. ``redact_names`` (header, query and JSON key names, matched case-insensitively)
    and ``redact_patterns`` (regular expressions) add to the recorder's default redactions.
    """
    redaction: dict[str, Any] = {"redact_patterns": list(redact_patterns)}
    names = list(redact_names)
    if names:  # only then: a Recorder without name redaction does not take the keyword
        redaction["redact_names"] = names
    proxy = RecordingProxy(upstream, max_result_bytes=max_result_bytes)
    sock = listen(port)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # uvicorn re-raises the signal after its graceful shutdown

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with sock, Recorder(out, **redaction) as recorder:
            proxy.events.subscribe(recorder)
            with contextlib.suppress(KeyboardInterrupt):
                run_app(proxy.app, sock=sock, quiet=(_UpstreamDropped,),
                        on_ready=lambda url: say(f"recording {upstream} at {url} into {out}"))  # fmt: skip
    finally:
        signal.signal(signal.SIGTERM, previous)
    say(f"trace written to {out}")
