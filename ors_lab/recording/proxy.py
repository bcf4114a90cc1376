"""A recording reverse proxy: any ORS client's traffic, recorded into the same trace format.

The official SDKs speak aiohttp, which no httpx hook can see; pointed at this proxy instead of the
server, they are recorded like our own client: requests, responses, every network chunk, SSE event
and comment, results, and the session steps (open on ``/create``, ping, close on ``/delete``).
Bodies stream through as they arrive (pings and chunks reach the client when the server sends
them); nothing is buffered but plain JSON answers. Redirects are passed back, not followed. What
passes through is published as typed events on the proxy's ``events`` stream, through the same
``ExchangeTap`` the ORS client records itself with; the recorder is its subscriber.

``ors-lab proxy UPSTREAM --port P --out TRACE`` runs it from the command line.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ors_lab.asgi import serve_app
from ors_lab.client.tap import BodyReader, ExchangeTap, describe_error, is_event_stream
from ors_lab.client.transport import AiohttpTransport
from ors_lab.events import (
    CallErrorEvent,
    CloseEvent,
    EventStream,
    OpenEvent,
    PingEvent,
    ResultEvent,
    Subscriber,
)
from ors_lab.protocol.call import CallAssembler
from ors_lab.protocol.errors import ORSError
from ors_lab.recording.recorder import Recorder

__all__ = ["RecordingProxy", "serve_proxy"]

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
    """

    def __init__(self, upstream: str, recorder: Subscriber | None = None) -> None:
        self.upstream = upstream.rstrip("/")
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
            self._http = httpx2.AsyncClient(
                transport=AiohttpTransport(), timeout=httpx2.Timeout(None, connect=10.0), follow_redirects=False
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
        upstream = self._client().build_request(request.method, url, headers=headers, content=body)
        started = time.monotonic_ns()
        try:
            response = await self._client().send(upstream, stream=True)
        except httpx2.HTTPError as exc:
            tap.disconnect(exc)
            detail = json.dumps({"detail": f"ors-lab proxy: upstream failed: {describe_error(exc)}"})
            return Response(detail, status_code=502, media_type="application/json")
        ttfb_ns = time.monotonic_ns() - started
        out_headers = {k: v for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP}
        if is_event_stream(response.headers):
            tap.response(response.status_code, response.headers, ttfb_ns)
            return StreamingResponse(
                self._stream(response, tap, task_id), status_code=response.status_code, headers=out_headers
            )
        try:
            content = await response.aread()
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

    async def _stream(self, response: httpx2.Response, tap: ExchangeTap, task_id: str | None) -> AsyncIterator[bytes]:
        call, sid, publish = tap.call, tap.session_id, self.events.publish
        reader = BodyReader(tap, CallAssembler(task_id) if call is not None else None)
        failed = False
        try:
            async for chunk in response.aiter_raw():
                try:
                    result = reader.feed(chunk)
                except ORSError as exc:
                    result, failed = None, True
                    if call is not None:
                        publish(
                            CallErrorEvent(session_id=sid, call=call, task_id=exc.task_id, error=describe_error(exc))
                        )
                if reader.assembler is not None and reader.assembler.task_id and call is not None:
                    self._tasks.setdefault(reader.assembler.task_id, (call, tap.attempt or 1))
                if result is not None and call is not None:
                    publish(ResultEvent(session_id=sid, call=call, task_id=result.task_id, ok=result.ok,
                                        reward=result.reward, finished=result.finished, error=result.error,
                                        reason=result.reason))  # fmt: skip
                yield chunk
            if call is not None and reader.result is None and not failed:
                tap.disconnect("the stream ended before end or error")
        except httpx2.HTTPError as exc:
            tap.disconnect(exc)
            raise
        finally:
            await response.aclose()

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


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@contextlib.contextmanager
def serve_proxy(upstream: str, recorder: Recorder, *, port: int = 0) -> Iterator[str]:
    """Run the recording proxy on 127.0.0.1 for a ``with`` block; yields its URL."""
    proxy = RecordingProxy(upstream, recorder)
    with serve_app(proxy.app, port=port) as url:
        yield url


def run_proxy(upstream: str, out: str, *, port: int = 0, say: Any = print) -> None:
    """Record through the proxy into ``out`` until SIGINT or SIGTERM, then close the trace."""
    import signal

    from ors_lab.asgi import run_app

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # uvicorn re-raises the signal after its graceful shutdown

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with Recorder(out) as recorder:
            proxy = RecordingProxy(upstream, recorder)
            with contextlib.suppress(KeyboardInterrupt):
                run_app(proxy.app, port=port, on_ready=lambda url: say(f"recording {upstream} at {url} into {out}"))
    finally:
        signal.signal(signal.SIGTERM, previous)
    say(f"trace written to {out}")
