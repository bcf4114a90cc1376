"""The page of ``ors-lab watch URL``: a run watched through its live feed, served on 127.0.0.1.

``serve_watch(url)`` reads the feed in a thread of its own (``ors_lab.feed.FeedReader``) into a
``FeedState`` (the run's ``RunState`` rebuilt from its events) and serves a page that shows the
dashboard the notebook shows, drawn by the same JavaScript (``static/run.js``, through
``static/page.js``'s page model): the page subscribes to this server with the browser's
``EventSource`` (``GET /dashboard``: ``dashboard`` events holding the state to draw, at most 10 a
second, one a second when nothing changed) and asks it for a finished episode's transcript when a
grid cell is clicked (``POST /request``, what a kernel answers in a notebook). The page reads this
server only, never the feed, so the feed needs no CORS: no other web page can read a run's feed from
a browser. In a notebook or a terminal, ``ol.watch(url)`` shows the same state live
(``ors_lab.notebook.watch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
from collections.abc import Callable
from typing import Any

from ors_lab.asgi import lifespan, listen, read_body, run_app
from ors_lab.events import strict_json
from ors_lab.feed.reader import FeedReader, feed_url
from ors_lab.html import escape
from ors_lab.viewer.feed_state import FeedState
from ors_lab.viewer.page import page_html

__all__ = ["DASHBOARD_EVERY", "OVER", "PAGE_CSP", "WatchPage", "serve_watch"]

DASHBOARD_EVERY = 0.1
"""Seconds between two dashboard updates a page gets at most."""
_IDLE_EVERY = 1.0
"""Seconds between two dashboard updates when nothing changed (the clock still moves)."""
PAGE_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
            "connect-src 'self'")  # fmt: skip
"""The watch page's Content-Security-Policy: its own inline script and styles; it talks to its own server only."""
OVER = ("ended", "lost", "closed")
"""The reader's states of a feed that will send no more."""


class WatchPage:
    """The page of ``ors-lab watch``: a ``FeedState`` fed by a ``FeedReader``, and the ASGI ``app`` serving it."""

    def __init__(self, url: str, *, on_status: Callable[[str, str | None], None] | None = None) -> None:
        self.state = FeedState(feed_url(url))
        self.on_status = on_status
        self._lock = threading.Lock()
        self._version = 0
        self.reader = FeedReader(url, self._take, on_status=self._status)

    def _take(self, kind: str, data: dict[str, Any]) -> None:
        with self._lock:
            if self.state.take(kind, data):
                self._version += 1

    def _status(self, status: str, error: str | None) -> None:
        with self._lock:
            self.state.status, self.state.error = status, error
            self._version += 1
        if self.on_status is not None:
            self.on_status(status, error)

    def html(self) -> str:
        """The page: its static summary until its script has drawn the dashboard."""
        with self._lock:
            summary = self.state.html()
        feed = escape(self.state.url)
        body = f"""<h1>A run, live</h1>
<p class="ol-dim" id="ors-lab-feed">watching {feed}</p>
<div id="ors-lab-run">{summary}</div>"""
        return page_html("watch", title=f"watching {feed} · ors_lab", csp=PAGE_CSP, body=body, icon=True)

    def update(self) -> tuple[int, str]:
        """The state's version and one ``dashboard`` event of it (what the page draws)."""
        with self._lock:
            state = self.state
            update = {"data": state.snapshot(), "text": state.text(),
                      "feed": {"url": state.url, "status": state.status, "error": state.error,
                               "resets": state.resets}}  # fmt: skip
            version = self._version
        return version, f"event: dashboard\ndata: {strict_json(update)}\n\n"

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The ASGI app: ``GET /`` the page, ``GET /dashboard`` its updates, ``POST /request`` a transcript."""
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/" and method == "GET":
            await _answer(send, 200, "text/html; charset=utf-8", self.html().encode())
        elif path == "/dashboard" and method == "GET":
            await self._dashboard(receive, send)
        elif path == "/request" and method == "POST":
            try:
                asked = json.loads(await read_body(receive))
            except ValueError:
                asked = None
            reply = None
            if isinstance(asked, dict):
                with self._lock:
                    reply = self.state.request(asked)
            await _answer(send, 200, "application/json", strict_json(reply).encode())
        else:
            await _answer(send, 404, "text/plain; charset=utf-8", b"not found: the page is at /\n")

    async def _dashboard(self, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        gone = asyncio.ensure_future(_hung_up(receive))
        loop = asyncio.get_running_loop()
        sent, sent_at = -1, -_IDLE_EVERY
        try:
            while not gone.done():
                if self._version != sent or loop.time() - sent_at >= _IDLE_EVERY:
                    sent, frame = self.update()
                    await send({"type": "http.response.body", "body": frame.encode(), "more_body": True})
                    sent_at = loop.time()
                await asyncio.wait((gone,), timeout=DASHBOARD_EVERY)
        finally:
            gone.cancel()


async def _answer(send: Any, status: int, kind: str, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", kind.encode())]})
    await send({"type": "http.response.body", "body": body})


async def _hung_up(receive: Any) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def serve_watch(url: str, *, port: int = 0, say: Callable[[str], None] = print, timeout: float = 10.0) -> None:
    """``ors-lab watch URL``: serve the watch page on 127.0.0.1 in the foreground until SIGINT or SIGTERM.

    The port is taken and the feed read first: a port in use is an ``OSError``, a feed that cannot be
    reached a ``ConnectionFailedError``, both before anything is served.
    """

    def said(status: str, error: str | None) -> None:
        if status == "ended":
            say(f"the run ended: {page.state.text()}")
        elif status == "lost":
            say(f"the feed is lost ({error}); the page keeps the run's last state")

    page = WatchPage(url, on_status=said)
    sock = listen(port)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # uvicorn re-raises the signal after its graceful shutdown

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with sock:
            page.reader.start()
            page.reader.wait_ready(timeout)
            with contextlib.suppress(KeyboardInterrupt):
                run_app(page.app, sock=sock, on_ready=lambda at: say(f"watching {page.state.url} at {at}/"))
    finally:
        signal.signal(signal.SIGTERM, previous)
        page.reader.close()
