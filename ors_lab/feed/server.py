"""``Feed``: a run's events served on 127.0.0.1 as Server-Sent Events (``docs/feed.md`` is the wire format).

    with ol.Feed(port=0) as feed:              # evaluate(..., feed=PORT) makes (and closes) one of its own
        print(feed.url)                        # http://127.0.0.1:PORT/events
        result = ol.evaluate(env, agent, split="test", feed=feed)

How it works, and why no reader can slow the run:

- During a run the feed is an inline subscriber of the run's events (``FEED_KINDS``: the agent
  stream vocabulary and the tool results) that only appends each event to a queue: no lock, no
  encoding, no I/O in the publishing thread.
- A thread of its own drains the queue every ``interval`` seconds (0.1). It joins the deltas of one
  part (text, reasoning, a tool call's input) that follow each other within an episode into one
  event, so a fast agent's deltas reach a reader at most ten times a second per part; numbers each
  event (``EPOCH-N``); writes it as one SSE frame (``full_wire``, strict JSON); and appends it to a
  bounded buffer (the last ``buffer`` events, ``BUFFER_BYTES`` at most). It also keeps what a
  reader who joins later needs: the run's plan, the outcome of every finished episode, and the
  events of each running one (its last ``RUNNING_EVENTS``). Once a second, when episodes ended, it
  adds a ``progress`` event.
- The HTTP server (uvicorn, in a thread with its own event loop) answers ``GET /events``. Each
  reader has a cursor into the buffer and is sent what it lacks as fast as it reads (at most
  ``BATCH_BYTES`` at a time); a reader that falls behind the buffer gets a ``reset`` (the run so
  far) and goes on from there. A reader that reconnects with ``Last-Event-ID`` gets what it missed.
  So a slow or stalled reader holds one batch at most, and nothing the run does waits for it.
- A reader idle for ``heartbeat`` seconds (15) gets a ``: heartbeat`` comment.
- Closing, the feed waits (``LINGER`` seconds at most) for its connected readers to be sent what they
  lack, and for a reader whose connection broke before it was sent the run's ``end`` to come back
  for it (``Last-Event-ID``): a reader between two connections when the run ends still gets its end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from itertools import islice
from types import TracebackType
from typing import Any, Self

from ors_lab.asgi import lifespan, serve_app
from ors_lab.events import AGENT_KINDS, EpisodeEvent, Event, EventStream, Subscription, event_from_wire, full_wire
from ors_lab.events import strict_json as _json
from ors_lab.feed.plan import RunPlan
from ors_lab.transcript import DELTA_FIELDS, join_deltas

__all__ = [
    "BATCH_BYTES",
    "BUFFER",
    "BUFFER_BYTES",
    "FEED_KINDS",
    "HEARTBEAT",
    "INTERVAL",
    "LINGER",
    "PATH",
    "PROGRESS_EVERY",
    "RUNNING_EVENTS",
    "Feed",
]

log = logging.getLogger("ors_lab.feed")

FEED_KINDS = (*AGENT_KINDS, "result")
"""The run's events a feed sends: the agent stream vocabulary (``start`` ... ``finish``, ``error``,
``reward``, ``usage``, ``episode``) and each tool call's ``result`` (the ORS step)."""
PATH = "/events"
"""Where the feed's stream is (``GET``)."""
HEARTBEAT = 15.0
"""Seconds a reader waits at most between two writes: then it gets a ``: heartbeat`` comment."""
BUFFER = 10_000
"""The last events a feed keeps, for readers that reconnect or fall behind."""
BUFFER_BYTES = 64 * 1024 * 1024
"""The most bytes of events the buffer holds, however few events that is."""
INTERVAL = 0.1
"""Seconds between two drains of the run's events (a part's deltas are joined within one)."""
PROGRESS_EVERY = 1.0
"""Seconds between two ``progress`` events at least."""
RUNNING_EVENTS = 1_000
"""The events of one running episode a snapshot holds at most (its ``start`` and its latest)."""
BATCH_BYTES = 1024 * 1024
"""The most bytes written to a reader at once."""
LINGER = 3.0
"""Seconds a closing feed waits at most for its readers: those still being sent the run's last events, and those
whose connection broke before they had the run's ``end`` (a reader tries again every 0.5 s)."""

_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def _frame(kind: str, data: Mapping[str, Any] | str) -> bytes:
    """One SSE event without its id: ``event: KIND``, one ``data`` line of JSON, a blank line."""
    text = data if isinstance(data, str) else _json(data)
    return f"event: {kind}\ndata: {text}\n\n".encode()


class Feed:
    """A live feed on 127.0.0.1 (see the module docstring): ``start()`` or ``with``, then give it to
    ``evaluate(..., feed=feed)``; ``url`` is where to read it.

    ``port``: 0 picks a free one. ``buffer``: the events kept for readers that reconnect or lag.
    ``heartbeat``: seconds of silence before a ``: heartbeat`` comment. ``interval``: seconds
    between drains of the run's events. One run at a time; a later run on the same feed begins with
    its own ``run`` event.
    """

    def __init__(
        self, port: int = 0, *, buffer: int = BUFFER, heartbeat: float = HEARTBEAT, interval: float = INTERVAL
    ) -> None:
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ValueError(f"feed takes a port number on 127.0.0.1 (0: a free one), not {port!r}")
        if buffer < 1:
            raise ValueError(f"buffer must hold at least 1 event, not {buffer!r}")
        if not (heartbeat > 0 and math.isfinite(heartbeat)):
            raise ValueError(f"heartbeat is in seconds and must be above 0, not {heartbeat!r}")
        if not (interval > 0 and math.isfinite(interval)):
            raise ValueError(f"interval is in seconds and must be above 0, not {interval!r}")
        self.port = port
        self.buffer = buffer
        self.heartbeat = heartbeat
        self.interval = interval
        self.url = ""
        self.epoch = secrets.token_hex(4)
        """Names this feed in its event ids (``EPOCH-N``): an id from another feed is never taken for one of its own."""
        self._queue: deque[Event] = deque()
        self._lock = threading.Lock()  # the buffer and the run so far (the drain thread and the readers)
        self._readers_changed = threading.Condition(self._lock)  # a reader was sent more, came or went
        self._sent: dict[object, int] = {}  # each connected reader: the number of the last event written to it
        self._dropped: deque[float] = deque()  # when readers hung up before they had the run's end, not yet back
        self._drain_lock = threading.RLock()  # one drain at a time (the thread, begin and end)
        self._ring: deque[tuple[int, bytes]] = deque()
        self._ring_bytes = 0
        self._last = 0
        self._readers = 0
        self._closed = False
        self._subscription: Subscription | None = None
        self._reset_run()
        self._stop = threading.Event()
        self._drainer: threading.Thread | None = None
        self._serving: contextlib.ExitStack | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._readers} readers, {self._last} events"
        return f"Feed({self.url or None!r}, {state})"

    # -- the run so far --------------------------------------------------------------------------

    def _reset_run(self) -> None:
        self._run_frame: bytes | None = None
        self._baseline_frame: bytes | None = None  # the run's baseline (``evaluate(..., baseline=...)``), if any
        self._resumed: list[bytes] = []
        self._finished: list[bytes] = []
        self._running: dict[str | None, list[bytes]] = {}
        self._end_frame: bytes | None = None
        self._end_number: int | None = None
        self._started: float | None = None
        self._ended: float | None = None
        self._total = self._done = self._resumed_count = self._errors = self._successes = self._rewarded = 0
        self._reward_sum = 0.0
        self._progress_at = -math.inf
        self._progress_done = 0

    @property
    def last_id(self) -> str:
        """The id of the newest event (``EPOCH-0`` before any)."""
        return f"{self.epoch}-{self._last}"

    @property
    def readers(self) -> int:
        """How many readers are connected."""
        return self._readers

    # -- life -------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Serve on 127.0.0.1 (``with`` does this); ``url`` is set from here on. A port in use is an ``OSError``."""
        if self._serving is not None:
            return self
        if self._closed:
            raise RuntimeError("this feed is closed; make a new one")
        stack = contextlib.ExitStack()
        base = stack.enter_context(serve_app(self._app, port=self.port, quiet=(asyncio.CancelledError,)))
        self._serving = stack
        self.url = base + PATH
        self.port = int(base.rsplit(":", 1)[1])
        self._drainer = threading.Thread(target=self._drain_loop, name="ors-lab feed", daemon=True)
        self._drainer.start()
        return self

    def close(self) -> None:
        """Stop: readers get what they lack, then their stream ends. Returns once they have it, and once a reader
        whose connection broke before the run's ``end`` has come back for it, or after ``LINGER`` seconds (a stalled
        reader's connection is then dropped in the background within seconds)."""
        if self._closed:
            return
        if self._subscription is not None:
            self.end("interrupted")
        self._stop.set()
        if self._drainer is not None:
            self._drainer.join(timeout=5)
        with self._lock:
            self._closed = True
        self._notify()
        self._linger()
        serving, self._serving = self._serving, None
        if serving is not None:
            threading.Thread(target=serving.close, name="ors-lab feed closing", daemon=True).start()

    def _linger(self) -> None:
        """Wait, ``LINGER`` seconds at most, until no connected reader lacks an event and no reader that hung up
        before the run's ``end`` in the last ``LINGER`` seconds is still to come back."""
        deadline = time.monotonic() + LINGER
        with self._readers_changed:
            while True:
                now = time.monotonic()
                dropped = self._dropped
                while dropped and now - dropped[0] >= LINGER:
                    dropped.popleft()  # it did not come back in time: it is not coming
                behind = any(sent < self._last for sent in self._sent.values())
                if not (behind or dropped) or now >= deadline:
                    if behind or dropped:
                        log.debug("ors_lab: the live feed %s closes with readers still owed its last events", self.url)
                    return
                wake = min(deadline, dropped[0] + LINGER) if dropped else deadline
                self._readers_changed.wait(wake - now)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- a run ------------------------------------------------------------------------------------

    def begin(
        self,
        events: EventStream,
        *,
        environment: str,
        split: str,
        keys: Sequence[tuple[int, int]],
        agent: str | None = None,
        resumed: Iterable[Mapping[str, Any]] = (),
        label: str | None = None,
    ) -> None:
        """A run begins: send its ``run`` event (its plan: ``keys`` are its (task, rollout) pairs), its
        ``resumed`` outcomes (``EpisodeEvent.record()`` dicts) as ``episode`` events, then its events."""
        if self._subscription is not None:
            raise RuntimeError("this feed already serves a run; a feed serves one run at a time")
        plan = RunPlan(environment, split, keys, agent, label)
        outcomes = [_outcome(record) for record in resumed]
        run = plan.wire(started_at=time.time(), resumed=len(outcomes))
        with self._drain_lock, self._lock:
            self._reset_run()
            self._started = time.monotonic()
            self._total = plan.total
            self._run_frame = self._append("run", _frame("run", run))
            for outcome in outcomes:
                data = full_wire(outcome)
                data["resumed"] = True
                self._resumed.append(self._append("episode", _frame("episode", data)))
                self._count(outcome, resumed=True)
        self._subscription = events.subscribe(self._take, kinds=FEED_KINDS)
        self._notify()

    def end(self, status: str = "finished") -> None:
        """The run ended (``finished``, ``interrupted`` or ``failed``): its last events, a ``progress`` and ``end``."""
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            subscription.close()
        with self._drain_lock:
            self._drain(progress=False)
            with self._lock:
                if self._started is None or self._end_frame is not None:
                    return
                self._ended = time.monotonic()
                self._append("progress", self._progress())
                end = {"type": "end", "status": status, "elapsedS": round(self._ended - self._started, 3),
                       "done": self._done, "total": self._total, "errors": self._errors}  # fmt: skip
                self._end_frame = self._append("end", _frame("end", end))
                self._end_number = self._last
        self._notify()

    def _take(self, event: Event) -> None:
        """The run's subscriber: queue the event (the drain thread does the rest)."""
        self._queue.append(event)

    # -- draining ---------------------------------------------------------------------------------

    def _drain_loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with self._drain_lock:
                    self._drain()
            except Exception:  # the feed's failure is its own: the run goes on, readers keep what they had
                log.exception("ors_lab: the live feed failed to send some events")
        with self._drain_lock:
            self._drain()

    def _drain(self, *, progress: bool = True) -> None:
        """Send what the run published since the last drain (under ``_drain_lock``), and a ``progress`` when due."""
        queue = self._queue
        batch = []
        while queue:
            batch.append(queue.popleft())
        frames = [(event, _frame(event.kind, data)) for event, data in _joined(batch)]
        with self._lock:
            for event, frame in frames:
                self._keep(event, self._append(event.kind, frame))
            due = progress and time.monotonic() - self._progress_at >= PROGRESS_EVERY
            if due and self._done != self._progress_done and self._end_frame is None:
                self._append("progress", self._progress())
        if frames or self._done != self._progress_done:
            self._notify()

    def _append(self, kind: str, frame: bytes) -> bytes:
        """Number ``frame`` and buffer it (under ``_lock``); returns it."""
        self._last += 1
        self._ring.append((self._last, frame))
        self._ring_bytes += len(frame)
        while len(self._ring) > self.buffer or (self._ring_bytes > BUFFER_BYTES and len(self._ring) > 1):
            self._ring_bytes -= len(self._ring.popleft()[1])
        return frame

    def _keep(self, event: Event, frame: bytes) -> None:
        """What a snapshot needs of the run so far (under ``_lock``)."""
        sid = event.session_id
        if event.kind == "baseline":
            self._baseline_frame = frame
        elif event.kind == "start":
            self._running[sid] = [frame]
        elif isinstance(event, EpisodeEvent):
            self._running.pop(sid, None)
            self._finished.append(frame)
            self._count(event, resumed=False)
        else:
            frames = self._running.get(sid)
            if frames is not None:
                frames.append(frame)
                if len(frames) > RUNNING_EVENTS:
                    del frames[1]  # keep its start

    def _count(self, outcome: EpisodeEvent, *, resumed: bool) -> None:
        self._done += 1
        self._resumed_count += resumed
        self._errors += outcome.error is not None
        self._successes += outcome.success
        if math.isfinite(outcome.reward):
            self._reward_sum += outcome.reward
            self._rewarded += 1

    def _progress(self) -> bytes:
        """A ``progress`` event of the run now (under ``_lock``)."""
        now = self._ended if self._ended is not None else time.monotonic()
        elapsed = now - self._started if self._started is not None else 0.0
        self._progress_at, self._progress_done = time.monotonic(), self._done
        ran = self._done - self._resumed_count
        return _frame("progress", {
            "type": "progress",
            "done": self._done,
            "total": self._total,
            "resumed": self._resumed_count,
            "running": len(self._running),
            "errors": self._errors,
            "meanReward": self._reward_sum / self._rewarded if self._rewarded else None,
            "successRate": self._successes / self._done if self._done else None,
            "elapsedS": round(elapsed, 3),
            "rate": round(ran / elapsed, 3) if elapsed > 0 else None,
        })  # fmt: skip

    # -- readers ----------------------------------------------------------------------------------

    def _id(self, n: int) -> bytes:
        return f"id: {self.epoch}-{n}\n".encode()

    def _parse(self, asked: str) -> int | None:
        """The number of one of this feed's event ids, or None (another feed's, or not an id)."""
        epoch, _, number = asked.rpartition("-")
        if epoch != self.epoch or not number.isdigit():
            return None
        return int(number)

    def _snapshot(self, kind: str, asked: str | None) -> list[bytes]:
        """The run so far (under ``_lock``): ``snapshot`` or ``reset``, the run's events, ``snapshot-end``."""
        body = [] if self._run_frame is None else [self._run_frame]
        body += self._resumed
        body += [] if self._baseline_frame is None else [self._baseline_frame]
        body += self._finished
        for frames in self._running.values():
            body += frames
        if self._end_frame is not None:
            body.append(self._end_frame)
        now = self._ended if self._ended is not None else time.monotonic()
        elapsed = None if self._started is None else round(now - self._started, 3)
        head: dict[str, Any] = {"type": kind, "lastEventId": self.last_id, "events": len(body), "elapsedS": elapsed}
        if kind == "reset":
            head["asked"] = asked
        end = {"type": "snapshot-end", "lastEventId": self.last_id}
        return [_frame(kind, head), *body, self._id(self._last) + _frame("snapshot-end", end)]

    def _open(self, asked: str | None) -> tuple[int, list[bytes]]:
        """Where a new reader starts (under ``_lock``), and what it gets first."""
        if asked is None:
            return self._last, self._snapshot("snapshot", None)
        number = self._parse(asked)
        oldest = self._ring[0][0] if self._ring else self._last + 1
        if number is not None and oldest - 1 <= number <= self._last:
            return number, []
        return self._last, self._snapshot("reset", asked)

    def _next(self, cursor: int) -> tuple[int, list[bytes]]:
        """The events after ``cursor`` (under ``_lock``), ``BATCH_BYTES`` at most; ``reset`` if they left the buffer."""
        if cursor >= self._last:
            return cursor, []
        oldest = self._ring[0][0]
        if cursor + 1 < oldest:
            return self._last, self._snapshot("reset", f"{self.epoch}-{cursor}")
        frames, size = [], 0
        for number, frame in islice(self._ring, cursor + 1 - oldest, None):
            frames.append(self._id(number) + frame)
            cursor = number
            size += len(frame)
            if size >= BATCH_BYTES:
                break
        return cursor, frames

    def _notify(self) -> None:
        """Wake the readers (from any thread)."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: no reader is left to wake
                loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        if changed is not None:
            changed.set()

    # -- HTTP -------------------------------------------------------------------------------------

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._changed = asyncio.Event()
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["path"] == PATH and scope["method"] == "GET":
            await self._serve(scope, receive, send)
            return
        status = 200 if scope["path"] == "/" else 404
        text = f"ors_lab live feed: GET {PATH} (text/event-stream); the format is in ors_lab's docs/feed.md\n"
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8")]})  # fmt: skip
        await send({"type": "http.response.body", "body": text.encode()})

    async def _serve(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """One reader's stream: the snapshot (or what it missed), then the events as they come, heartbeats between."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        asked = headers.get("last-event-id", "").strip() or None
        loop = asyncio.get_running_loop()
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        gone = asyncio.ensure_future(_hung_up(receive))
        self._readers += 1
        reader = object()
        sent = -1
        finished = False
        try:
            with self._readers_changed:
                cursor, frames = self._open(asked)
                self._sent[reader] = sent
                if asked is not None and self._dropped:
                    self._dropped.popleft()  # a reader come back (which one does not matter: they are counted)
            await _write(send, frames)
            sent = self._wrote(reader, cursor)
            quiet_since = loop.time()
            while not gone.done():
                changed = self._changed
                with self._lock:
                    cursor, frames = self._next(cursor)
                    ended = self._closed and cursor >= self._last
                if frames:
                    await _write(send, frames)
                    sent = self._wrote(reader, cursor)
                    quiet_since = loop.time()
                    continue
                if ended:
                    finished = True
                    break
                wait = self.heartbeat - (loop.time() - quiet_since)
                if wait <= 0:
                    await send({"type": "http.response.body", "body": b": heartbeat\n\n", "more_body": True})
                    quiet_since = loop.time()
                    continue
                assert changed is not None
                woken = asyncio.ensure_future(changed.wait())
                await asyncio.wait((woken, gone), timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
            if not gone.done():
                await send({"type": "http.response.body", "body": b""})
        finally:
            self._readers -= 1
            gone.cancel()
            with self._readers_changed:
                del self._sent[reader]
                owed = self._started is not None and (self._end_number is None or sent < self._end_number)
                if not finished and owed:  # it broke before the run's end: it may come back for it
                    self._dropped.append(time.monotonic())
                self._readers_changed.notify_all()

    def _wrote(self, reader: object, cursor: int) -> int:
        """Note that ``reader`` was sent the events up to ``cursor``; returns it."""
        with self._readers_changed:
            self._sent[reader] = cursor
            self._readers_changed.notify_all()
        return cursor


def _outcome(record: Mapping[str, Any]) -> EpisodeEvent:
    """An episode's outcome from its trace record (``EpisodeEvent.record()``)."""
    event = event_from_wire("episode", record)
    assert isinstance(event, EpisodeEvent)
    return event


async def _write(send: Any, frames: list[bytes]) -> None:
    """Write ``frames`` in pieces of about ``BATCH_BYTES``."""
    start = size = 0
    for index, frame in enumerate(frames):
        size += len(frame)
        if size >= BATCH_BYTES or index == len(frames) - 1:
            await send({"type": "http.response.body", "body": b"".join(frames[start : index + 1]), "more_body": True})
            start, size = index + 1, 0


async def _hung_up(receive: Any) -> None:
    """Return when the reader hangs up."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _joined(events: list[Event]) -> list[tuple[Event, dict[str, Any]]]:
    """Each event with its wire form; deltas of one part that follow each other in an episode joined into one
    (``ors_lab.transcript.join_deltas``)."""
    out = []
    for event, more in join_deltas(events):
        data = full_wire(event)
        if more:
            key = DELTA_FIELDS[event.kind][2]
            data[key] = data[key] + "".join(more)
        out.append((event, data))
    return out
