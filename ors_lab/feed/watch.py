"""Watching a run through its live feed: ``ol.watch(url)`` in a notebook or terminal, ``ors-lab watch URL`` in a page.

Both read the feed in a thread of their own (``FeedReader``) into a ``FeedState``: the run's
``RunState`` rebuilt from its events, the state the notebook's dashboard draws.

- ``watch(url)`` shows it where it is called, as ``evaluate`` shows its own run (``ol.live_views()``):
  the dashboard widget in a notebook, updated at most 10 times a second and left with its final
  state and static summary when the run ends; the progress line elsewhere. It returns a ``Watch``
  at once; ``Watch.wait()`` blocks until the run has ended.
- ``serve_watch(url)`` (``ors-lab watch URL``) serves a page on 127.0.0.1 that shows the same
  dashboard, drawn by the notebook's own JavaScript (``static/run.js``, through ``static/page.js``'s
  page model): the page subscribes to this server with the browser's ``EventSource`` (``GET
  /dashboard``: ``dashboard`` events holding the state to draw, at most 10 a second, one a second
  when nothing changed) and asks it for a finished episode's transcript when a grid cell is clicked
  (``POST /request``, what a kernel answers in a notebook). The page reads this server only, never
  the feed, so the feed needs no CORS: no other web page can read a run's feed from a browser.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any, Self

from ors_lab.asgi import lifespan, read_body
from ors_lab.events import strict_json
from ors_lab.feed.reader import FeedReader, feed_url
from ors_lab.feed.state import FeedState
from ors_lab.html import escape, stylesheet
from ors_lab.notebook.view import LiveView
from ors_lab.notebook.widget import page_esm
from ors_lab.version import __version__

__all__ = ["DASHBOARD_EVERY", "PAGE_CSP", "Watch", "WatchPage", "serve_watch", "watch"]

DASHBOARD_EVERY = 0.1
"""Seconds between two dashboard updates a page gets at most."""
_IDLE_EVERY = 1.0
"""Seconds between two dashboard updates when nothing changed (the clock still moves)."""
PAGE_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
            "connect-src 'self'")  # fmt: skip
"""The watch page's Content-Security-Policy: its own inline script and styles; it talks to its own server only."""
_OVER = ("ended", "lost", "closed")


class Watch:
    """A run watched through its live feed (``watch(url)``): its ``state`` (``FeedState``; ``state.run``
    is the ``RunState``), its ``view``, and the ``reader`` of the feed."""

    def __init__(self, state: FeedState, view: LiveView, reader: FeedReader) -> None:
        self.state = state
        self.view = view
        self.reader = reader

    def __repr__(self) -> str:
        return repr(self.view)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run has ended (or the feed is lost); True if it has."""
        return self.reader.wait(timeout)

    def close(self) -> None:
        """Stop watching; the view keeps its last state."""
        self.reader.close()
        self.view.close()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.view._repr_mimebundle_(include, exclude)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def watch(url: str, *, timeout: float = 10.0) -> Watch:
    """Show the dashboard of the run behind the live feed at ``url`` (``evaluate(..., feed=...)``'s
    ``feed_url``, or ``ors-lab eval --feed``'s), live; returns a ``Watch`` at once (see the module docstring).

    A feed that cannot be reached within ``timeout`` seconds is a ``ConnectionFailedError``; a URL
    that answers something else than a feed, a ``MalformedResponseError``.
    """
    __tracebackhide__ = True
    state = FeedState(feed_url(url))
    view = LiveView(state)

    def status(name: str, error: str | None) -> None:
        def change() -> bool:
            state.status, state.error = name, error
            return True

        view.update(change)
        if name in _OVER:
            view.close()

    reader = FeedReader(url, lambda kind, data: view.update(lambda: state.take(kind, data)), on_status=status)
    reader.start()
    try:
        reader.wait_ready(timeout)
    except BaseException:
        reader.close()
        raise
    view.show()
    return Watch(state, view, reader)


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
        script = page_esm("watch")
        with self._lock:
            summary = self.state.html()
        feed = escape(self.state.url)
        return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{PAGE_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="ors_lab {__version__}">
<link rel="icon" href="data:,">
<title>watching {feed} · ors_lab</title>
<style>{stylesheet()}</style>
</head>
<body>
<main class="ors-lab ol-page">
<h1>A run, live</h1>
<p class="ol-dim" id="ors-lab-feed">watching {feed}</p>
<div id="ors-lab-run">{summary}</div>
</main>
<script type="module">
{script}
</script>
</body>
</html>
"""

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
    import contextlib
    import signal

    from ors_lab.asgi import listen, run_app

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
