"""How an HTTP exchange becomes events: the one recording seam of the ORS client, the agent's LLM
client and the recording proxy.

An ``ExchangeTap`` stands for one request (one attempt of it): it publishes the request, the
response head (with the body of a plain answer), and, through ``BodyReader``, every network chunk
of a streamed body, each SSE event and comment the spec-exact decoder finds in it, and the
disconnect if it breaks. A ``/call`` body is also fed to the ``CallAssembler``, which gives the
result at ``end``. ``RecordingTransport`` wraps any httpx2 transport so that the exchanges made
through it are tapped the same way (the agent's LLM traffic).
"""

from __future__ import annotations

import itertools
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import fields
from typing import Any

import httpx2

from ors_lab.client.wire import WireTransport
from ors_lab.events import (
    ChunkEvent,
    CommentEvent,
    DisconnectEvent,
    EventStream,
    RequestEvent,
    ResponseEvent,
    SSEEvent,
    WireEvent,
)
from ors_lab.protocol.call import CallAssembler
from ors_lab.protocol.errors import MalformedStreamError
from ors_lab.protocol.models import ToolResult
from ors_lab.protocol.sse import MAX_LINE_BYTES, SSEComment, SSEDecoder

__all__ = [
    "EXCHANGES",
    "BodyReader",
    "ExchangeTap",
    "RecordingTransport",
    "SyncRecordingTransport",
    "describe_error",
    "exchanges_apart",
    "is_event_stream",
    "unreachable",
]

EXCHANGES = itertools.count(1)
"""Exchange numbers: one counter per process, shared by every client and proxy in it, so that the
requests recorded into one trace never share a number (counted from ``exchanges_apart()``'s place)."""

_exchange_base = 0


def exchanges_apart() -> None:
    """Number this process's exchanges from a random multiple of 2**32 (below 2**62) on: for a process whose
    events another one records (a Ray worker, into its driver's trace), so that its numbers meet neither the
    recording process's (counted from 1) nor, but by a chance of one in 2**30 for two such processes, each
    other's. Once per process; later calls keep the place taken."""
    global _exchange_base
    if not _exchange_base:
        _exchange_base = (1 + secrets.randbelow(2**30 - 1)) << 32


def describe_error(exc: BaseException) -> str:
    """``ExceptionType: message``, as disconnect and error rows hold an exception."""
    return f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"


def unreachable(exc: BaseException) -> str:
    """Why no connection could be made, in a few words (``connection refused``), from the error's chain."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, TimeoutError | httpx2.TimeoutException):
            return "timed out connecting"
        if isinstance(seen, OSError) and (seen.errno or seen.strerror):
            text = os.strerror(seen.errno) if seen.errno and seen.errno > 0 else str(seen.strerror)
            return text[:1].lower() + text[1:]
        seen = seen.__cause__ or seen.__context__
    return describe_error(exc)


def is_event_stream(headers: httpx2.Headers) -> bool:
    """True for a ``text/event-stream`` response."""
    return headers.get("content-type", "").startswith("text/event-stream")


_CONTEXT = tuple(f.name for f in fields(WireEvent) if f.name != "t_ns")
"""What every event of an exchange carries, its context: the fields of ``WireEvent`` (``session_id``, ``rollout``,
``call``, ``attempt``, ``exchange``, ``agent``): all but its time, ``t_ns``."""


class ExchangeTap:
    """Publishes one exchange's events on ``events``; every event carries the exchange's ``context``
    (``_CONTEXT``, as a dict of keywords for the events' types; its values are the tap's attributes too)."""

    __slots__ = ("agent", "attempt", "call", "context", "events", "exchange", "rollout", "session_id", "wanted")

    def __init__(
        self,
        events: EventStream,
        *,
        session_id: str | None = None,
        rollout: int | None = None,
        call: int | None = None,
        attempt: int | None = None,
        agent: bool = False,
    ) -> None:
        self.events = events
        self.wanted = events.wanted()  # None: every kind; else the kinds someone takes (only those are made)
        self.session_id = session_id
        self.rollout = rollout
        self.call = call
        self.attempt = attempt
        self.agent = agent
        self.exchange = _exchange_base + next(EXCHANGES)
        self.context: dict[str, Any] = {name: getattr(self, name) for name in _CONTEXT}

    def takes(self, kind: str) -> bool:
        """True when someone takes events of ``kind``."""
        return self.wanted is None or kind in self.wanted

    def request(self, method: str, url: str, headers: Any, body: bytes | None) -> None:
        """The request, as sent."""
        if self.takes("request"):
            self.events.publish(RequestEvent(**self.context, method=method, url=url, headers=headers, body=body))

    def response(self, status: int, headers: Any, ttfb_ns: int | None, body: bytes | None = None) -> None:
        """The response head, and the whole body of an answer that is not streamed."""
        if self.takes("response"):
            self.events.publish(ResponseEvent(**self.context, status=status, headers=headers, ttfb_ns=ttfb_ns,
                                              body=body))  # fmt: skip

    def disconnect(self, error: BaseException | str) -> None:
        """The request or its body broke before the end."""
        if self.takes("disconnect"):
            text = error if isinstance(error, str) else describe_error(error)
            self.events.publish(DisconnectEvent(**self.context, error=text))

    def reader(self, assembler: CallAssembler | None = None, *, max_line_bytes: int = MAX_LINE_BYTES) -> BodyReader:
        """A reader for the streamed body (``assembler``: a ``/call`` body's, to get its result)."""
        return BodyReader(self, assembler, max_line_bytes=max_line_bytes)


class BodyReader:
    """Feed it a streamed body's chunks; ``feed`` returns the result once, when ``end`` completes it.

    ``tap`` is None when nobody listens: the chunks are then only decoded for the assembler.
    Errors of the assembler (``ToolError``, ``UnknownTaskError``, ``MalformedStreamError``) are
    raised from ``feed`` after the event that caused them was published. The decoder's
    ``MalformedStreamError`` (a line over ``max_line_bytes``) is raised after the chunk and the
    items before the bad line were published, unless the result is already whole: what follows
    ``end`` cannot spoil it.
    The memory a body can take is bounded by ``max_line_bytes`` and the assembler's
    ``max_result_bytes``.
    """

    __slots__ = ("assembler", "decoder", "result", "tap")

    def __init__(
        self, tap: ExchangeTap | None, assembler: CallAssembler | None, *, max_line_bytes: int = MAX_LINE_BYTES
    ) -> None:
        self.tap = tap
        self.assembler = assembler
        self.decoder = SSEDecoder(max_line_bytes)
        self.result: ToolResult | None = None

    def feed(self, chunk: bytes) -> ToolResult | None:
        """Take one network chunk; return the result when this chunk completed it."""
        tap, assembler = self.tap, self.assembler
        if tap is not None:
            publish, context = tap.events.publish, tap.context
            if tap.takes("chunk"):
                publish(ChunkEvent(**context, size=len(chunk)))
            if not (tap.takes("event") or tap.takes("comment")):
                tap = None  # nobody takes the stream's items: they are only decoded for the assembler
        try:
            items = self.decoder.feed(chunk)
        except MalformedStreamError:
            if self.result is not None:
                return None
            raise
        completed = None
        for item in items:
            if tap is not None:
                if isinstance(item, SSEComment):
                    publish(CommentEvent(**context, comment=item.text))
                else:
                    publish(SSEEvent(**context, event=item.event, data=item.data, sse_id=item.id or None,
                                     retry_ms=item.retry))  # fmt: skip
            if assembler is not None and self.result is None:
                completed = self.result = assembler.feed(item)
        if self.decoder.error is not None and self.result is None:
            raise MalformedStreamError(self.decoder.error)  # a bad line after the items of this chunk
        return completed


TapFor = Callable[[httpx2.Request], ExchangeTap | None]
"""Given a request, the tap to publish its exchange with, or None to let it pass untapped."""


class _TappedStream(httpx2.AsyncByteStream):
    """A response body, published chunk by chunk (and decoded as SSE) as the caller reads it."""

    def __init__(self, stream: Any, tap: ExchangeTap) -> None:
        self._stream = stream
        self._tap = tap
        self._reader = tap.reader()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                self._reader.feed(chunk)
                yield chunk
        except httpx2.TransportError as exc:
            self._tap.disconnect(exc)
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()


class RecordingTransport(httpx2.AsyncBaseTransport):
    """Wraps a transport; the exchanges ``tap_for`` gives a tap for are published through it.

    A plain answer is read whole and published in its response event; a streamed one is published
    chunk by chunk as the caller reads it. ``aclose`` closes the inner transport only when this made
    it: a transport given to it belongs to the caller, who may share it.
    """

    def __init__(self, tap_for: TapFor, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.tap_for = tap_for
        self._owns_inner = inner is None
        self.inner = inner if inner is not None else WireTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        tap = self.tap_for(request)
        if tap is None:
            return await self.inner.handle_async_request(request)
        body = await request.aread()
        tap.request(request.method, str(request.url), request.headers, body)
        started = time.monotonic_ns()
        try:
            response = await self.inner.handle_async_request(request)
        except httpx2.TransportError as exc:
            tap.disconnect(exc)
            raise
        ttfb_ns = time.monotonic_ns() - started
        if not is_event_stream(response.headers):
            try:  # a plain answer is read whole now, and published with its response
                content = await response.aread()
            except httpx2.TransportError as exc:
                tap.disconnect(exc)
                raise
            finally:
                await response.aclose()
            tap.response(response.status_code, response.headers, ttfb_ns, content)
            return response
        tap.response(response.status_code, response.headers, ttfb_ns)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_TappedStream(response.stream, tap),
            request=request,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        if self._owns_inner:
            await self.inner.aclose()


class _SyncTappedStream(httpx2.SyncByteStream):
    """``_TappedStream`` for a sync client."""

    def __init__(self, stream: Any, tap: ExchangeTap) -> None:
        self._stream = stream
        self._tap = tap
        self._reader = tap.reader()

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._stream:
                self._reader.feed(chunk)
                yield chunk
        except httpx2.TransportError as exc:
            self._tap.disconnect(exc)
            raise

    def close(self) -> None:
        self._stream.close()


class SyncRecordingTransport(httpx2.BaseTransport):
    """``RecordingTransport`` for a sync client (``inner`` None: ``httpx2.HTTPTransport``, closed with it)."""

    def __init__(self, tap_for: TapFor, inner: httpx2.BaseTransport | None = None) -> None:
        self.tap_for = tap_for
        self._owns_inner = inner is None
        self.inner = inner if inner is not None else httpx2.HTTPTransport()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        tap = self.tap_for(request)
        if tap is None:
            return self.inner.handle_request(request)
        body = request.read()
        tap.request(request.method, str(request.url), request.headers, body)
        started = time.monotonic_ns()
        try:
            response = self.inner.handle_request(request)
        except httpx2.TransportError as exc:
            tap.disconnect(exc)
            raise
        ttfb_ns = time.monotonic_ns() - started
        if not is_event_stream(response.headers):
            try:
                content = response.read()
            except httpx2.TransportError as exc:
                tap.disconnect(exc)
                raise
            finally:
                response.close()
            tap.response(response.status_code, response.headers, ttfb_ns, content)
            return response
        tap.response(response.status_code, response.headers, ttfb_ns)
        stream = _SyncTappedStream(response.stream, tap)
        return httpx2.Response(response.status_code, headers=response.headers, stream=stream, request=request,
                               extensions=response.extensions)  # fmt: skip

    def close(self) -> None:
        if self._owns_inner:
            self.inner.close()
