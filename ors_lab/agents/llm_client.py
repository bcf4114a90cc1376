"""Any agent's own LLM client, recorded and read: what ``Episode.llm_client()`` and its twins return.

    async def run(self, episode):
        client = anthropic.AsyncAnthropic(http_client=episode.llm_client())   # or openai.AsyncOpenAI(...)
        ...                                                                   # the agent's own loop

The client is an ``httpx2.AsyncClient`` (``llm_client_httpx()``: an ``httpx.AsyncClient``, for
frameworks still on httpx; ``llm_client_sync()``: an ``httpx2.Client``, for the SDKs' sync clients)
made of three layers:

- ``DecodingTransport`` reads every answer to a request in a known wire format (``POST``
  ``.../chat/completions``, ``.../messages``, ``.../responses``: ``ors_lab.agents.turn``) as the SDK
  reads it, through the same decoder and the same ``Turn`` as the library's own agents, and publishes
  it as agent events: one block per call (``llm call N``, summarized by its finish reason), text,
  reasoning and tool-input deltas, usage (with the request's ``model``). An HTTP error status, an
  error in the stream, a stream cut short or not readable is published as the seed's structured
  ``error`` from source ``provider`` (``code`` like ``ANTHROPIC_429``, ``provider: {name,
  statusCode, requestId}``), and the harness does not publish it again when the SDK raises it. The
  bytes reach the SDK untouched: what the decoder thinks never changes what the SDK reads.
- ``ors_lab.client.RecordingTransport`` (its sync twin ``SyncRecordingTransport``) taps every
  exchange onto the episode's stream as layer ``agent``, so it goes into the run's trace (secrets
  redacted by the recorder) and ``ors_lab.replay.AgentReplayTransport`` can serve it back.
- the wire: ``ors_lab.client.WireTransport`` (``httpx2.HTTPTransport`` for the sync client), or the evaluation's
  ``llm_replay`` transport, which answers from a trace with no server and no key.

Events are published on the episode's own thread: a sync client used from another thread
(``asyncio.to_thread``) hands them to the episode's event loop, in order.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from functools import partial
from typing import Any, Protocol, cast

import httpx2

from ors_lab.agents.chat import Answer
from ors_lab.agents.errors import error_event, provider_error, replay_mismatch
from ors_lab.agents.parts import Publisher
from ors_lab.agents.turn import Turn, decoder_for
from ors_lab.client import AsyncSession, ExchangeTap, RecordingTransport, SyncRecordingTransport
from ors_lab.events import AgentEvent, BlockEndEvent, BlockStartEvent, EventStream
from ors_lab.protocol.errors import ProviderError, ProviderStatusError, ProviderStreamError
from ors_lab.protocol.replay import MISMATCH, REPLAY_HEADER


class Episode(Publisher, Protocol):
    """What the client needs of its episode (``ors_lab.agents.episode.Episode``, which imports this module)."""

    events: EventStream
    session: AsyncSession
    rollout: int
    llm_calls: int
    llm_reported: list[Any]


__all__ = ["DecodingTransport", "SyncDecodingTransport", "async_llm_client", "sync_llm_client"]

_SHOWN = 200  # characters of an error body the event quotes


class _OnLoop:
    """Publishes on the episode's event loop: at once from its thread, else handed to the loop in order."""

    def __init__(self, episode: Episode, loop: asyncio.AbstractEventLoop | None) -> None:
        self.episode = episode
        self._loop = loop
        self._thread = threading.get_ident()

    def _here(self) -> bool:
        return self._loop is None or threading.get_ident() == self._thread or self._loop.is_closed()

    def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        if self._here():
            function(*args, **kwargs)
        else:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(partial(function, *args, **kwargs))

    # -- the Publisher a turn writes to --

    def publish(self, event: AgentEvent) -> None:
        self.call(self.episode.publish, event)

    def new_id(self, prefix: str) -> str:
        return self.episode.new_id(prefix)

    def record_usage(self, **usage: Any) -> None:
        self.call(self.episode.record_usage, **usage)


class _Stream:
    """An ``EventStream`` stand-in for the exchange tap: publishes through ``_OnLoop``."""

    def __init__(self, events: EventStream, on_loop: _OnLoop) -> None:
        self._events = events
        self._on_loop = on_loop

    def publish(self, event: Any) -> None:
        self._on_loop.call(self._events.publish, event)

    def wanted(self) -> frozenset[str] | None:
        return self._events.wanted()


class _Call:
    """One request for a model's answer, read as the SDK reads it (see the module docstring)."""

    def __init__(self, on_loop: _OnLoop, provider: str, decoder: Callable[..., Answer]) -> None:
        self._on_loop = on_loop
        self.episode = on_loop.episode
        self.provider = provider
        self.model: str | None = None
        self.turn = Turn(cast(Publisher, on_loop), decoder)
        self.status: int | None = None
        self.request_id: str | None = None
        self.response: httpx2.Response | None = None
        self.failed = False
        self.ended = False
        self.block = self.episode.new_id("block")

    def begin(self, body: bytes) -> None:
        """The request is sent: its block starts (``llm call N``); its body names the model."""
        self.model = _model(body)
        self.episode.llm_calls += 1
        self._on_loop.publish(BlockStartEvent(block_id=self.block, block_name=f"llm call {self.episode.llm_calls}"))

    def broke(self, exc: BaseException) -> None:
        """No answer came: the call is over (a transport error is published as a cut)."""
        if isinstance(exc, httpx2.TransportError):
            self.cut(exc)
        else:
            self.end()

    def passed(
        self, request: httpx2.Request, response: httpx2.Response, body: bytes | None, stream: Callable[..., Any]
    ) -> httpx2.Response:
        """What the SDK gets: the answer itself, or the same answer read through the decoder as the SDK reads it
        (``stream``: ``_DecodedStream`` or ``_SyncDecodedStream``)."""
        if not self.answer(response, body):
            return response
        source, headers = _source(response, body)
        self.response = httpx2.Response(response.status_code, headers=headers, stream=stream(source, self),
                                        request=request, extensions=response.extensions)  # fmt: skip
        return self.response

    def answer(self, response: httpx2.Response, body: bytes | None) -> bool:
        """The answer's head (and a plain answer's body, once read): True when its body is to be decoded."""
        self.response = response
        self.status = response.status_code
        self.request_id = response.headers.get("request-id") or response.headers.get("x-request-id")
        if response.headers.get(REPLAY_HEADER) == MISMATCH:
            mismatch = replay_mismatch(ProviderStatusError("replay mismatch", response=response))
            assert mismatch is not None
            self._fail(mismatch, plain=True)
            self.end()
            return False
        if response.status_code >= 400:
            said = _said(body) if body is not None else "(a streamed error answer)"
            self._fail(ProviderStatusError(f"HTTP {response.status_code}: {said}", response=response))
            self.end()
            return False
        if body is None and response.headers.get("content-encoding", "identity").lower() != "identity":
            self.end()  # a compressed stream although identity was asked for: passed through, not read
            return False
        self.turn.begin(response.headers.get("content-type"))
        return True

    def feed(self, data: bytes) -> None:
        if self.failed or self.ended:
            return
        try:
            self.turn.feed(data)
        except ProviderError as exc:
            self._fail(exc)

    def close(self) -> None:
        """The body ended."""
        if not (self.failed or self.ended):
            try:
                self.turn.close()
            except ProviderError as exc:
                self._fail(exc)
        self.end()

    def cut(self, exc: BaseException) -> None:
        """The body broke while the SDK read it."""
        if not (self.failed or self.ended):
            why = f"the connection was cut while the answer streamed ({type(exc).__name__}), after "
            self._fail(ProviderStreamError(why + self.turn.answer.where()))
        self.end()

    def end(self) -> None:
        """The call is over, however it ended (the SDK may stop reading early): its block ends."""
        if self.ended:
            return
        self.ended = True
        self.turn.end(self.model)
        self._on_loop.publish(BlockEndEvent(block_id=self.block, summary=self.turn.summary()))

    def _fail(self, exc: BaseException, *, plain: bool = False) -> None:
        self.failed = True
        event = (
            error_event(exc, source="provider")
            if plain
            else provider_error(exc, self.provider, status=self.status, request_id=self.request_id)
        )
        if self.response is not None:  # the SDK raises it as its own error: the harness knows it is said
            self.episode.llm_reported.append(self.response)
        self._on_loop.publish(event)


def _call_for(on_loop: _OnLoop, request: httpx2.Request) -> _Call | None:
    """The call to read, for a request in a known format made while someone listens; else None (passed through)."""
    known = decoder_for(request.method, request.url.path)
    if known is None or not on_loop.episode.events.active:
        return None
    request.headers["accept-encoding"] = "identity"  # the decoder reads the bytes as sent
    return _Call(on_loop, *known)


def _model(body: bytes) -> str | None:
    """The ``model`` a JSON request body names."""
    try:
        value = json.loads(body) if body else None
    except ValueError:
        return None
    model = value.get("model") if isinstance(value, dict) else None
    return model if isinstance(model, str) else None


def _said(body: bytes) -> str:
    """What an error answer's body says: its ``error.message`` (or ``message``, ``detail``), else its start."""
    try:
        value = json.loads(body)
    except ValueError:
        return body[:_SHOWN].decode("utf-8", "replace") or "(no body)"
    error = value.get("error", value) if isinstance(value, dict) else value
    if isinstance(error, dict):
        for key in ("message", "detail"):
            if isinstance(error.get(key), str):
                return str(error[key])
    return json.dumps(value)[:_SHOWN]


class _DecodedStream(httpx2.AsyncByteStream):
    def __init__(self, stream: Any, call: _Call) -> None:
        self._stream = stream
        self._call = call

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                self._call.feed(chunk)
                yield chunk
        except httpx2.TransportError as exc:
            self._call.cut(exc)
            raise
        self._call.close()

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self._call.end()


class _SyncDecodedStream(httpx2.SyncByteStream):
    def __init__(self, stream: Any, call: _Call) -> None:
        self._stream = stream
        self._call = call

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self._stream:
                self._call.feed(chunk)
                yield chunk
        except httpx2.TransportError as exc:
            self._call.cut(exc)
            raise
        self._call.close()

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._call.end()


class _Bytes:
    """A body already read, as a stream of one chunk (sync or async)."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def __iter__(self) -> Iterator[bytes]:
        yield self._body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._body

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


def _source(response: httpx2.Response, body: bytes | None) -> tuple[Any, Any]:
    """What the SDK is to read and with which headers: the streamed body as it comes, or the plain body as read
    (decoded, so without its content-encoding)."""
    if body is None:
        return response.stream, response.headers
    dropped = ("content-encoding", "content-length")
    return _Bytes(body), [(k, v) for k, v in response.headers.multi_items() if k.lower() not in dropped]


def _plain(response: httpx2.Response) -> bool:
    return "text/event-stream" not in response.headers.get("content-type", "").lower()


class DecodingTransport(httpx2.AsyncBaseTransport):
    """Publishes the answers in known formats as agent events while passing them through; see the module docstring."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, on_loop: _OnLoop) -> None:
        self.inner = inner
        self._on_loop = on_loop

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        call = _call_for(self._on_loop, request)
        if call is None:
            return await self.inner.handle_async_request(request)
        call.begin(await request.aread())
        try:
            response = await self.inner.handle_async_request(request)
            body = await response.aread() if _plain(response) else None
        except BaseException as exc:
            call.broke(exc)
            raise
        return call.passed(request, response, body, _DecodedStream)

    async def aclose(self) -> None:
        await self.inner.aclose()


class SyncDecodingTransport(httpx2.BaseTransport):
    """``DecodingTransport`` for a sync client."""

    def __init__(self, inner: httpx2.BaseTransport, on_loop: _OnLoop) -> None:
        self.inner = inner
        self._on_loop = on_loop

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        call = _call_for(self._on_loop, request)
        if call is None:
            return self.inner.handle_request(request)
        call.begin(request.read())
        try:
            response = self.inner.handle_request(request)
            body = response.read() if _plain(response) else None
        except BaseException as exc:
            call.broke(exc)
            raise
        return call.passed(request, response, body, _SyncDecodedStream)

    def close(self) -> None:
        self.inner.close()


def _tap_for(episode: Episode, events: Any) -> Callable[[httpx2.Request], ExchangeTap | None]:
    def tap(request: httpx2.Request) -> ExchangeTap | None:
        if not episode.events.active:
            return None
        return ExchangeTap(events, session_id=episode.session.sid, rollout=episode.rollout, agent=True)

    return tap


def _loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def async_llm_client(episode: Episode, inner: httpx2.AsyncBaseTransport | None, **kwargs: Any) -> httpx2.AsyncClient:
    """``Episode.llm_client()``: an ``httpx2.AsyncClient`` whose traffic is decoded and recorded into the
    episode (``inner``: the wire, or a replay; None: ``WireTransport``). ``kwargs`` go to ``httpx2.AsyncClient``."""
    on_loop = _OnLoop(episode, None)
    recording = RecordingTransport(_tap_for(episode, episode.events), inner)
    kwargs.setdefault("timeout", 600.0)
    kwargs.setdefault("follow_redirects", True)
    return httpx2.AsyncClient(transport=DecodingTransport(recording, on_loop), **kwargs)


def sync_llm_client(episode: Episode, inner: httpx2.BaseTransport | None, **kwargs: Any) -> httpx2.Client:
    """``Episode.llm_client_sync()``: the same for a sync SDK client (``inner`` None: ``httpx2.HTTPTransport``)."""
    on_loop = _OnLoop(episode, _loop())
    stream = cast(EventStream, _Stream(episode.events, on_loop))
    recording = SyncRecordingTransport(_tap_for(episode, stream), inner)
    kwargs.setdefault("timeout", 600.0)
    kwargs.setdefault("follow_redirects", True)
    return httpx2.Client(transport=SyncDecodingTransport(recording, on_loop), **kwargs)
