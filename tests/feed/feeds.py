"""Reading a live feed in the tests: with the project's own SSE decoder and with httpx2's SSE reader.

Both read over a real connection to 127.0.0.1. ``read_feed`` keeps comments (the heartbeats) as
items of their own, in order with the events; ``httpx2_events`` is another client's view (it drops
comments, as readers per the spec do).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import httpx2

from ors_lab.protocol.sse import ServerSentEvent, SSEComment, SSEDecoder, SSEItem


def read_feed(
    url: str,
    *,
    last_id: str | None = None,
    until: Callable[[list[SSEItem]], bool] | None = None,
    timeout: float = 60.0,
) -> list[SSEItem]:
    """The feed's items (events and comments) read with our decoder, until ``until(items)`` (default: the run's
    ``end``) or the stream closes; ``last_id`` is sent as ``Last-Event-ID``."""
    stop = until or (lambda items: isinstance(items[-1], ServerSentEvent) and items[-1].event == "end")
    headers = {"accept": "text/event-stream"} if last_id is None else {"last-event-id": last_id}
    items: list[SSEItem] = []
    deadline = time.monotonic() + timeout
    decoder = SSEDecoder()
    with httpx2.Client(trust_env=False, timeout=timeout) as client, client.stream("GET", url, headers=headers) as got:
        assert got.status_code == 200 and got.headers["content-type"].startswith("text/event-stream")
        for chunk in got.iter_raw():
            for item in decoder.feed(chunk):
                items.append(item)
                if stop(items):
                    return items
            assert time.monotonic() < deadline, f"the feed did not end within {timeout} s: {items[-3:]}"
    return items


def httpx2_events(url: str, *, timeout: float = 60.0) -> list[ServerSentEvent]:
    """The feed's events as httpx2's own SSE reader gives them, until the run's ``end``."""
    found: list[ServerSentEvent] = []
    with httpx2.Client(trust_env=False, timeout=timeout) as client, client.sse(url) as source:
        for event in source:
            found.append(event)
            if event.event == "end":
                break
    return found


def events_of(items: list[SSEItem]) -> list[ServerSentEvent]:
    """The events among ``items`` (comments left out)."""
    return [item for item in items if isinstance(item, ServerSentEvent)]


def comments_of(items: list[SSEItem]) -> list[str]:
    """The comments among ``items``."""
    return [item.text for item in items if isinstance(item, SSEComment)]


def data(event: ServerSentEvent) -> dict[str, Any]:
    """An event's JSON data."""
    value = json.loads(event.data)
    assert isinstance(value, dict) and value["type"] == event.event
    return value


def number(event_id: str) -> int:
    """The N of an ``EPOCH-N`` event id."""
    return int(event_id.rpartition("-")[2])


def in_thread(work: Callable[[], Any]) -> Future[Any]:
    """Run ``work`` in a thread of its own; its result (or exception) comes through the future."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


def wait_for_readers(feed: Any, count: int, timeout: float = 10.0) -> None:
    """Wait until ``feed`` has ``count`` readers connected."""
    deadline = time.monotonic() + timeout
    while feed.readers < count:
        assert time.monotonic() < deadline, f"{feed} did not get {count} readers within {timeout} s"
        time.sleep(0.01)


def pairs(items: list[SSEItem]) -> Iterator[tuple[str, str, str]]:
    """(event, id, data) of each event of ``items``."""
    for event in events_of(items):
        yield event.event, event.id, event.data
