"""The two faces of replay over one ``ReplayEngine``: a real HTTP server and an httpx2 transport.

``ReplayServer(trace)`` serves on 127.0.0.1 (uvicorn in a background thread; use it as a context
manager, ``.url``), so any client, official ones included, can run against a trace.
``ReplayTransport(trace)`` answers in process, with no socket: ``Client(url, transport=...)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from types import TracebackType
from typing import Any, Self

import httpx2

from ors_lab.analysis.trace import Trace
from ors_lab.asgi import lifespan, listen, read_body, run_app, serve_app
from ors_lab.replay.engine import Answer, ReplayEngine
from ors_lab.replay.faults import Fault

__all__ = ["ReplayServer", "ReplayTransport", "replay_app"]

TraceLike = Trace | str | os.PathLike[str]


def replay_app(engine: ReplayEngine) -> Any:
    """A raw ASGI app answering every request from ``engine``."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        answer = engine.handle(scope["method"], scope["path"], headers, body)
        if answer.head_delay:
            await asyncio.sleep(answer.head_delay)
        raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
        if answer.stream is None:
            raw_headers.append((b"content-length", str(len(answer.body)).encode()))
            await send({"type": "http.response.start", "status": answer.status, "headers": raw_headers})
            await send({"type": "http.response.body", "body": answer.body})
            return
        await send({"type": "http.response.start", "status": answer.status, "headers": raw_headers})
        started = time.monotonic()
        for at, data in answer.stream:
            wait = started + at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await send({"type": "http.response.body", "body": data, "more_body": True})
        if answer.cut:
            raise _Cut  # uvicorn drops the connection: the client sees the stream break, as recorded
        await send({"type": "http.response.body", "body": b""})

    return app


class _Cut(Exception):
    """Raised to make the server drop a connection mid-stream."""


class ReplayServer:
    """A trace served back as a real ORS server on 127.0.0.1: ``with ReplayServer(trace) as server:``."""

    def __init__(
        self,
        trace_or_path: TraceLike,
        speed: float = 1.0,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        faults: Iterable[Fault | str] = (),
        allow_repeats: bool = False,
    ) -> None:
        if host != "127.0.0.1":
            raise ValueError("the replay server binds 127.0.0.1 only")
        self.engine = ReplayEngine(trace_or_path, speed=speed, faults=faults, allow_repeats=allow_repeats)
        self.port = port
        self.url = ""
        self._serving: contextlib.ExitStack | None = None

    def __repr__(self) -> str:
        return f"ReplayServer({self.engine.recording.name!r}, url={self.url or None!r})"

    def start(self) -> Self:
        """Start serving (``with`` does this); ``.url`` is set from here on."""
        stack = contextlib.ExitStack()
        self.url = stack.enter_context(serve_app(replay_app(self.engine), port=self.port, quiet=(_Cut,)))
        self._serving = stack
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self._serving is not None:
            self._serving.close()
            self._serving = None

    def unplayed(self) -> list[str]:
        """Recorded requests that were never asked for."""
        return self.engine.unplayed()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _AnswerStream(httpx2.AsyncByteStream, httpx2.SyncByteStream):
    def __init__(self, answer: Answer, request: httpx2.Request) -> None:
        self._answer = answer
        self._request = request

    def _cut(self) -> httpx2.RemoteProtocolError:
        return httpx2.RemoteProtocolError("the replayed stream was cut, as recorded", request=self._request)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        started = time.monotonic()
        for at, data in self._answer.stream or [(0.0, self._answer.body)]:
            wait = started + at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            yield data
        if self._answer.cut:
            raise self._cut()

    def __iter__(self) -> Iterator[bytes]:
        started = time.monotonic()
        for at, data in self._answer.stream or [(0.0, self._answer.body)]:
            wait = started + at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            yield data
        if self._answer.cut:
            raise self._cut()


class ReplayTransport(httpx2.AsyncBaseTransport, httpx2.BaseTransport):
    """A trace as an in-process httpx2 transport (async and sync): ``Client(url, transport=...)``."""

    def __init__(
        self,
        trace: TraceLike,
        *,
        speed: float = 0.0,
        faults: Iterable[Fault | str] = (),
        allow_repeats: bool = False,
    ) -> None:
        self.engine = ReplayEngine(trace, speed=speed, faults=faults, allow_repeats=allow_repeats)

    def _answer(self, request: httpx2.Request, body: bytes) -> Answer:
        headers = {k.lower(): v for k, v in request.headers.items()}
        return self.engine.handle(request.method, request.url.path, headers, body)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        answer = self._answer(request, await request.aread())
        if answer.head_delay:
            await asyncio.sleep(answer.head_delay)
        return httpx2.Response(answer.status, headers=answer.headers, stream=_AnswerStream(answer, request),
                               request=request)  # fmt: skip

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        answer = self._answer(request, request.read())
        if answer.head_delay:
            time.sleep(answer.head_delay)
        return httpx2.Response(answer.status, headers=answer.headers, stream=_AnswerStream(answer, request),
                               request=request)  # fmt: skip

    def unplayed(self) -> list[str]:
        """Recorded requests that were never asked for."""
        return self.engine.unplayed()


def run_replay(
    trace: TraceLike,
    *,
    port: int = 0,
    speed: float = 1.0,
    faults: Iterable[Fault | str] = (),
    allow_repeats: bool = False,
    say: Any = print,
) -> list[str]:
    """Serve a trace on 127.0.0.1 in the foreground until SIGINT or SIGTERM; returns what went unplayed.

    An unreadable trace is a ``TraceFormatError`` and a port in use an ``OSError``, both before serving.
    """
    engine = ReplayEngine(trace, speed=speed, faults=faults, allow_repeats=allow_repeats)
    sock = listen(port)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # uvicorn re-raises the signal after its graceful shutdown

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with sock, contextlib.suppress(KeyboardInterrupt):
            run_app(replay_app(engine), sock=sock, quiet=(_Cut,),
                    on_ready=lambda url: say(f"replaying {engine.recording.name} at {url}"))  # fmt: skip
    finally:
        signal.signal(signal.SIGTERM, previous)
    return engine.unplayed()
