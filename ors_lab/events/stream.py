"""The stream events flow through: ``EventStream``, its ``Subscription`` and buffered subscriptions, and
``capture`` (see ``ors_lab.events``)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ors_lab.events.records import EVENT_TYPES, Event
from ors_lab.protocol.errors import EventNotRecordedError

__all__ = ["DEFAULT_BUFFER", "BufferedSubscription", "EventStream", "Subscriber", "Subscription"]

log = logging.getLogger("ors_lab.events")


Subscriber = Callable[[Any], object]
"""Called with one event (inline, or buffered), or with a list of events (buffered with ``every=``)."""

DEFAULT_BUFFER = 10_000


class Subscription:
    """One subscriber's place on a stream: ``close()`` (or ``with``) removes it.

    ``error`` is the exception that detached it, if one did; ``dropped`` counts the events a
    buffered subscriber lost because its buffer was full (the oldest go first).
    """

    required = False
    """A required subscriber (the recorder) is never detached: its failure is the publisher's."""

    def __init__(self, stream: EventStream, subscriber: Subscriber, kinds: Iterable[str] | None) -> None:
        self.stream = stream
        self.subscriber = subscriber
        self.kinds = None if kinds is None else frozenset(kinds)
        self.error: BaseException | None = None
        self.dropped = 0
        self.closed = False

    def __repr__(self) -> str:
        name = getattr(self.subscriber, "__qualname__", None) or repr(self.subscriber)
        state = "closed" if self.closed else "error" if self.error is not None else "active"
        return f"{type(self).__name__}({name}, {state})"

    def wants(self, event: Event) -> bool:
        """True when this subscription takes ``event`` (its kind is among ``kinds``, or no kinds were given)."""
        return self.kinds is None or event.kind in self.kinds

    def deliver(self, event: Event) -> None:
        """Hand ``event`` to the subscriber now (inline subscriptions)."""
        self.subscriber(event)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every event published so far was handed over; True if it was (inline: always)."""
        return True

    def close(self) -> None:
        """Stop receiving events (safe to call twice)."""
        if not self.closed:
            self.closed = True
            self.stream._remove(self)

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        log.error("ors_lab: event subscriber %r raised and was detached", self.subscriber, exc_info=exc)
        self.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BufferedSubscription(Subscription):
    """A subscriber called from a thread of its own, through a buffer of at most ``maxlen`` events.

    Publishing only appends to the buffer: a slow subscriber never slows the publisher; when its
    buffer is full the oldest events are dropped (``dropped`` counts them). With ``every=S`` the
    subscriber is called with the list of events gathered, at most once every ``S`` seconds.
    """

    def __init__(
        self,
        stream: EventStream,
        subscriber: Subscriber,
        kinds: Iterable[str] | None,
        *,
        maxlen: int,
        every: float | None,
    ) -> None:
        super().__init__(stream, subscriber, kinds)
        if maxlen < 1:
            raise ValueError(f"buffer must hold at least 1 event, not {maxlen!r}")
        if every is not None and not every > 0:
            raise ValueError(f"every is in seconds and must be above 0, not {every!r}")
        self.every = every
        self._queue: deque[Event] = deque(maxlen=maxlen)
        self._cond = threading.Condition()
        self._published = 0
        self._handed = 0
        self._thread = threading.Thread(target=self._run, name=f"ors-lab events {self!r}", daemon=True)
        self._thread.start()

    def deliver(self, event: Event) -> None:
        with self._cond:
            queue = self._queue
            if len(queue) == queue.maxlen:
                self.dropped += 1
            queue.append(event)
            self._published += 1
            if len(queue) == 1:
                self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._published
            while self._handed + self.dropped < target and self._thread.is_alive():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return self._handed + self.dropped >= target

    def close(self) -> None:
        """Stop receiving events; what is buffered is still handed over, then the thread ends."""
        if self.closed:
            return
        super().close()
        with self._cond:
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self.closed:
                    self._cond.wait()
                if not self._queue:
                    return
                if self.every is None:
                    batch: list[Event] = [self._queue.popleft()]
                else:
                    batch = list(self._queue)
                    self._queue.clear()
            try:
                if self.every is None:
                    self.subscriber(batch[0])
                else:
                    self.subscriber(batch)
            except Exception as exc:
                self.error = exc
                log.error("ors_lab: event subscriber %r raised and was detached", self.subscriber, exc_info=exc)
                self.stream._remove(self)
                self.closed = True
            with self._cond:
                self._handed += len(batch)
                self._cond.notify_all()
                if self.error is not None:
                    self._queue.clear()
                    return
            if self.every is not None:
                time.sleep(self.every)


def _not_recorded(event: Event, subscription: Subscription, exc: Exception) -> EventNotRecordedError:
    name = getattr(subscription.subscriber, "__qualname__", None) or type(subscription.subscriber).__name__
    error = EventNotRecordedError(
        f"the {event.kind} event ({type(event).__name__}) could not be taken by {name}, which the run "
        f"cannot do without ({type(exc).__name__}: {exc}); the episode fails, and the trace keeps what came before",
        kind=event.kind,
        session_id=event.session_id,
    )
    error.__cause__ = exc
    return error


_changes = [0]
"""How many times a subscription was made or removed on any stream (what ``EventStream.wanted`` is kept until)."""

_CAPTURING: ContextVar[EventStream | None] = ContextVar("ors_lab_capturing_stream", default=None)
"""The stream the running code captures into (``EventStream.capture``), if any."""


class EventStream:
    """An ordered stream of events: ``subscribe`` to it, ``publish`` on it (see the module docstring).

    ``parent``: a stream that sees every event of this one after its own subscribers (a run's stream
    forwards to its client's, so the client's recorder sees the run too).
    """

    def __init__(self, parent: EventStream | None = None) -> None:
        self.parent = parent
        self._subscriptions: tuple[Subscription, ...] = ()
        self._lock = threading.Lock()
        self._wanted: tuple[int, frozenset[str] | None] | None = None  # (the change it was made at, wanted())

    def __repr__(self) -> str:
        return f"EventStream({len(self._subscriptions)} subscribers{', with a parent' if self.parent else ''})"

    @contextmanager
    def capture(self) -> Iterator[EventStream]:
        """In this block (and the tasks started from it), what would be published on a stream this one forwards
        to is published here instead (``routed``), and so reaches that stream too, after this one's subscribers."""
        token = _CAPTURING.set(self)
        try:
            yield self
        finally:
            _CAPTURING.reset(token)

    def routed(self) -> EventStream:
        """Where to publish what is meant for this stream: the stream the running code captures into
        (``capture``) when it forwards here, else this one."""
        capturing = _CAPTURING.get()
        if capturing is None or capturing is self:
            return self
        stream = capturing.parent
        while stream is not None:
            if stream is self:
                return capturing
            stream = stream.parent
        return self

    def wanted(self) -> frozenset[str] | None:
        """The kinds someone here or up the chain of parents takes: None when some subscriber takes every kind
        (publishers build only the events someone takes). Kept until a subscription changes anywhere."""
        cached = self._wanted
        if cached is not None and cached[0] == _changes[0]:
            return cached[1]
        kinds: set[str] = set()
        everything = False
        stream: EventStream | None = self
        while stream is not None and not everything:
            for subscription in stream._subscriptions:
                if subscription.kinds is None:
                    everything = True
                    break
                kinds |= subscription.kinds
            stream = stream.parent
        wanted = None if everything else frozenset(kinds)
        self._wanted = (_changes[0], wanted)
        return wanted

    @property
    def active(self) -> bool:
        """True when anyone listens, here or up the chain of parents (publishers skip work otherwise)."""
        stream: EventStream | None = self
        while stream is not None:
            if stream._subscriptions:
                return True
            stream = stream.parent
        return False

    def subscribe(
        self,
        subscriber: Subscriber,
        *,
        kinds: Iterable[str] | None = None,
        buffer: int | None = None,
        every: float | None = None,
        required: bool = False,
    ) -> Subscription:
        """Call ``subscriber`` with every event from now on (only ``kinds``, if given).

        Inline by default: called in the publishing thread, so it must be quick. With ``buffer=N``
        (or ``every=S``, which implies a buffer) it is called from a thread of its own through a
        buffer of N events (default 10,000); ``every=S`` hands it lists of the events gathered, at
        most once every S seconds. Returns the ``Subscription``; ``close()`` it to unsubscribe.

        ``required=True`` (inline only: what the run cannot do without, such as its recorder and the
        rows of its result) keeps the subscriber attached whatever it raises: the event still goes to
        every other subscriber, then ``publish`` raises ``EventNotRecordedError`` naming the event, so
        the code that published it (an episode) fails instead of the event being lost without a word.
        """
        if required and (buffer is not None or every is not None):
            raise ValueError("a required subscriber is called inline: it takes no buffer= or every=")
        if kinds is not None:
            kinds = list(kinds)
            unknown = sorted(set(kinds) - set(EVENT_TYPES))
            if unknown:
                raise ValueError(f"unknown event kinds {unknown}; valid kinds: {', '.join(EVENT_TYPES)}")
        subscription: Subscription
        if buffer is None and every is None:
            subscription = Subscription(self, subscriber, kinds)
        else:
            subscription = BufferedSubscription(
                self, subscriber, kinds, maxlen=DEFAULT_BUFFER if buffer is None else buffer, every=every
            )
        subscription.required = required
        with self._lock:
            self._subscriptions = (*self._subscriptions, subscription)
            _changes[0] += 1
        return subscription

    def _remove(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscriptions = tuple(s for s in self._subscriptions if s is not subscription)
            _changes[0] += 1

    def publish(self, event: Event) -> None:
        """Hand ``event`` to every subscriber, in the order they subscribed, then to the parent stream.

        Raises ``EventNotRecordedError`` (after every subscriber had the event) when a required one failed on it."""
        stream: EventStream | None = self
        failed: tuple[Subscription, Exception] | None = None
        while stream is not None:
            for subscription in stream._subscriptions:
                if subscription.kinds is None or event.kind in subscription.kinds:
                    try:
                        subscription.deliver(event)
                    except Exception as exc:  # a subscriber's failure is its own, never the publisher's ...
                        if subscription.required:  # ... but for one the run cannot do without
                            failed = failed or (subscription, exc)
                        else:
                            subscription._fail(exc)
            stream = stream.parent
        if failed is not None:
            raise _not_recorded(event, *failed)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the buffered subscribers here and up the chain took every event published so far."""
        deadline = None if timeout is None else time.monotonic() + timeout
        stream: EventStream | None = self
        while stream is not None:
            for subscription in stream._subscriptions:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not subscription.flush(left):
                    return False
            stream = stream.parent
        return True
