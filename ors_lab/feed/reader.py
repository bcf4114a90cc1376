"""``FeedReader``: a live feed read in a thread of its own, decoded, its events handed on; it reconnects.

The stream is read with httpx2 and decoded by the project's one SSE decoder
(``ors_lab.protocol.sse``); each event's JSON goes to ``handle(kind, data)``, in order, from the
reader's thread. A stream that breaks before the run's ``end`` is read again with
``Last-Event-ID`` (the feed sends what was missed, or a ``reset``), every ``RETRY`` seconds and up
to ``patience`` seconds without success; then the reader gives up (``lost``), and its ``error`` says
that the feed went away before the run's end reached it: the state it handed on is the run's last
known, not its final (a feed that closes waits a few seconds for such a reader to come back for its
``end``). A stream that ends or breaks after the run's ``end`` is over (``ended``). A stream that
stays silent for ``idle`` seconds (a feed heartbeats every 15) counts as broken.

The first connection says whether the URL is a feed at all: ``wait_ready()`` raises
``ConnectionFailedError`` when it cannot be reached, ``MalformedResponseError`` when what answers is
not a feed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Self

import httpx2

from ors_lab.client.tap import unreachable
from ors_lab.client.url import server_url
from ors_lab.feed.server import PATH
from ors_lab.protocol.errors import ConnectionFailedError, MalformedResponseError
from ors_lab.protocol.sse import SSEComment, SSEDecoder

__all__ = ["IDLE", "PATIENCE", "RETRY", "FeedReader", "feed_url"]

log = logging.getLogger("ors_lab.feed")

RETRY = 0.5
"""Seconds between two attempts to read a broken feed again."""
PATIENCE = 30.0
"""Seconds of failed attempts after which a reader gives up."""
IDLE = 60.0
"""Seconds of silence after which a stream counts as broken (a feed heartbeats every 15)."""

Handler = Callable[[str, dict[str, Any]], None]
StatusHandler = Callable[[str, "str | None"], None]


def feed_url(url: str) -> str:
    """A feed's stream URL: ``url`` itself, or ``url/events`` when it names no path (``http://127.0.0.1:8765``)."""
    url = server_url(url)
    return url + PATH if httpx2.URL(url).path in ("", "/") else url


class FeedReader:
    """Reads the feed at ``url`` (see the module docstring) until it ends, is lost, or ``close()``.

    ``status``: ``connecting``, ``live``, ``reconnecting``, ``ended``, ``lost`` or ``closed``, each
    change also given to ``on_status(status, error)``; ``last_id`` is the id of the last event read.
    """

    def __init__(
        self,
        url: str,
        handle: Handler,
        *,
        on_status: StatusHandler | None = None,
        patience: float = PATIENCE,
        idle: float = IDLE,
    ) -> None:
        self.url = feed_url(url)
        self.handle = handle
        self.on_status = on_status
        self.patience = patience
        self.idle = idle
        self.status = "connecting"
        self.error: str | None = None
        self.last_id = ""
        self.connections = 0
        self._over = False  # the run's end was read (and no run began since)
        self._first: BaseException | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._main, name=f"ors-lab feed reader {self.url}", daemon=True)

    def __repr__(self) -> str:
        return f"FeedReader({self.url!r}, {self.status})"

    def start(self) -> Self:
        """Start reading, in a thread of its own."""
        self._thread.start()
        return self

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait for the first connection: its snapshot read, or the reason there is none raised."""
        if not self._ready.wait(timeout):
            raise ConnectionFailedError(f"the live feed at {self.url} sent nothing within {timeout:g} s")
        if self._first is not None:
            raise self._first

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the reading is over (ended, lost or closed); True if it is."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self) -> None:
        """Stop reading (safe to call twice, and from a handler)."""
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # its loop already ended
                loop.call_soon_threadsafe(task.cancel)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

    # -- the thread -------------------------------------------------------------------------------

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
            await self._read()

        try:
            asyncio.run(main())
        except asyncio.CancelledError:
            self._set("closed", None)
        except BaseException as exc:  # a bug: said, never silent
            log.exception("ors_lab: the live feed reader of %s failed", self.url)
            self._set("lost", f"{type(exc).__name__}: {exc}")
        finally:
            self._ready.set()

    def _set(self, status: str, error: str | None) -> None:
        self.status, self.error = status, error
        if self.on_status is not None:
            try:
                self.on_status(status, error)
            except Exception:
                log.exception("ors_lab: a live feed status handler raised")

    async def _read(self) -> None:
        timeout = httpx2.Timeout(self.idle, connect=5.0)
        async with httpx2.AsyncClient(timeout=timeout, trust_env=False) as client:
            failing_since: float | None = None
            while True:
                try:
                    await self._stream(client)
                    failing_since = None
                except (httpx2.HTTPError, OSError) as exc:
                    if self._over:
                        break
                    if not self._ready.is_set():
                        reason = f"cannot reach the live feed at {self.url}: {unreachable(exc)}"
                        self._first = ConnectionFailedError(reason)
                        self._first.__cause__ = exc
                        self._set("lost", _describe(exc))
                        return
                    failing_since = failing_since or time.monotonic()
                    if time.monotonic() - failing_since > self.patience:
                        self._set("lost", f"the live feed went away before the run's end reached this reader "
                                          f"({unreachable(exc)}, for {self.patience:g} s): its final state is "
                                          "unknown")  # fmt: skip
                        return
                    self._set("reconnecting", _describe(exc))
                except MalformedResponseError as exc:
                    if not self._ready.is_set():
                        self._first = exc
                    self._set("lost", str(exc))
                    return
                if self._over:
                    break
                await asyncio.sleep(RETRY)
            self._set("ended", None)

    async def _stream(self, client: httpx2.AsyncClient) -> None:
        """Read one connection to its end."""
        headers = {"accept": "text/event-stream", "cache-control": "no-store"}
        if self.last_id:
            headers["last-event-id"] = self.last_id
        async with client.stream("GET", self.url, headers=headers) as response:
            kind = response.headers.get("content-type", "").partition(";")[0].strip()
            if response.status_code != 200 or kind != "text/event-stream":
                raise MalformedResponseError(
                    f"{self.url} is not a live feed: it answered {response.status_code} "
                    f"{kind or 'without a content type'}, where a feed answers 200 text/event-stream"
                )
            self.connections += 1
            decoder = SSEDecoder()
            async for chunk in response.aiter_raw():
                for item in decoder.feed(chunk):
                    if isinstance(item, SSEComment):
                        continue
                    if item.id:
                        self.last_id = item.id
                    try:
                        data = json.loads(item.data)
                    except ValueError:
                        log.warning("ors_lab: the live feed %s sent an event that is not JSON: %.200s", self.url,
                                    item.data)  # fmt: skip
                        continue
                    self._handle(item.event, data)
                    if item.event == "snapshot-end" and not self._ready.is_set():
                        self._set("live", None)
                        self._ready.set()
                    elif item.event in ("snapshot-end", "run") and self.status != "live":
                        self._set("live", None)
                    if item.event == "end":
                        self._over = True
                    elif item.event in ("run", "snapshot", "reset"):
                        self._over = False

    def _handle(self, kind: str, data: Any) -> None:
        if not isinstance(data, dict):
            return
        try:
            self.handle(kind, data)
        except Exception:  # one bad event (or a handler's bug) must not end the watch
            log.exception("ors_lab: an event of the live feed %s could not be taken: %s", self.url, kind)


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
