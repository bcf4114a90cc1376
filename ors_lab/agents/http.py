"""The agent's own HTTP traffic (its LLM), recorded into the evaluation's trace.

``recording_http_client()`` is an ``httpx2.AsyncClient`` whose transport records every exchange
made while an episode runs, into that episode's recorder, with the episode's session id and
rollout: the request (method, URL, headers, body), the response (status, headers, time to first
byte, and the body of a plain answer), and each network chunk, SSE event and comment of a streamed
one. The rows have layer ``agent``, so the ORS replay leaves them alone and
``ors_lab.replay.AgentReplayTransport`` serves them back. Outside an episode, or with no recorder,
requests pass through unrecorded. Secrets (``Authorization``, API keys) are redacted by the
recorder before anything is written.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2

from ors_lab.agents.episode import CURRENT_EPISODE
from ors_lab.client.tap import EXCHANGES, SSETap
from ors_lab.client.transport import AiohttpTransport

__all__ = ["RecordingTransport", "recording_http_client"]

LAYER = "agent"


class _RecordedStream(httpx2.AsyncByteStream):
    """The response body, reported chunk by chunk (and decoded as SSE when it is a stream)."""

    def __init__(self, stream: Any, emit: Any, context: dict[str, Any]) -> None:
        self._stream = stream
        self._emit = emit
        self._context = context
        self._tap = SSETap(emit, None, **context)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                self._tap.feed(chunk)
                yield chunk
        except httpx2.TransportError as exc:
            self._emit("disconnect", error=f"{type(exc).__name__}: {exc}", **self._context)
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()


class RecordingTransport(httpx2.AsyncBaseTransport):
    """Wraps a transport (ours by default); records the exchanges made inside an episode.

    ``aclose`` closes the inner transport only when it made it: a transport given to it belongs to
    the caller, who may share it between episodes that are still streaming.
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self._owns_inner = inner is None
        self.inner = inner if inner is not None else AiohttpTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        episode = CURRENT_EPISODE.get()
        recorder = episode.events.recorder if episode is not None else None
        if episode is None or recorder is None:
            return await self.inner.handle_async_request(request)

        def emit(kind: str, /, **fields: Any) -> None:
            recorder.emit(kind, layer=LAYER, **fields)

        context = {"session_id": episode.session.sid, "rollout": episode.rollout, "exchange": next(EXCHANGES)}
        body = await request.aread()
        emit("request", method=request.method, url=str(request.url), headers=request.headers, body=body, **context)
        started = time.monotonic_ns()
        try:
            response = await self.inner.handle_async_request(request)
        except httpx2.TransportError as exc:
            emit("disconnect", error=f"{type(exc).__name__}: {exc}", **context)
            raise
        ttfb_ns = time.monotonic_ns() - started
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            try:  # a plain answer is read whole now, and recorded in its response row
                body = await response.aread()
            except httpx2.TransportError as exc:
                emit("disconnect", error=f"{type(exc).__name__}: {exc}", **context)
                raise
            finally:
                await response.aclose()
            emit("response", status=response.status_code, headers=response.headers, ttfb_ns=ttfb_ns, body=body,
                 **context)  # fmt: skip
            return response
        emit("response", status=response.status_code, headers=response.headers, ttfb_ns=ttfb_ns, **context)
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_RecordedStream(response.stream, emit, context),
            request=request,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        if self._owns_inner:
            await self.inner.aclose()


def recording_http_client(
    transport: httpx2.AsyncBaseTransport | None = None, *, timeout: float | httpx2.Timeout = 600.0
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` whose traffic inside an episode lands in the episode's trace.

    Closing the client closes the transport it made, never a ``transport`` it was given.
    """
    return httpx2.AsyncClient(transport=RecordingTransport(transport), timeout=timeout, follow_redirects=True)
