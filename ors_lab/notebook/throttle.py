"""Coalesce many changes into at most one front-end update per ``interval`` (0.1 s: 10 a second).

``touch()`` says the state changed. The first change after a quiet spell is sent at once; changes
within ``interval`` of the last send are held and sent together by one trailing timer, so the last
state always arrives. The timer runs on the caller's event loop when there is one (a kernel's, a
run's), on a daemon thread otherwise. ``close()`` sends what is held and stops.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

__all__ = ["INTERVAL", "Throttle"]

INTERVAL = 0.1


class Throttle:
    """Call ``send`` at most once per ``interval`` seconds for any number of ``touch()`` calls."""

    def __init__(self, send: Callable[[], None], *, interval: float = INTERVAL) -> None:
        if interval < 0:
            raise ValueError(f"interval must be >= 0, not {interval!r}")
        self.send = send
        self.interval = interval
        self.sent = 0
        self._last = -float("inf")
        self._dirty = False
        self._scheduled = False
        self._closed = False
        self._lock = threading.Lock()

    def touch(self) -> None:
        """Note a change; send now, or arrange one trailing send."""
        with self._lock:
            if self._closed:
                return
            self._dirty = True
            wait = self._last + self.interval - time.monotonic()
            if wait > 0:
                if not self._scheduled:
                    self._scheduled = True
                    self._later(wait)
                return
        self._flush()  # a trailing send still scheduled is late (its loop is busy): it waits out this one

    def flush(self) -> None:
        """Send what is held now, if anything."""
        self._flush()

    def close(self) -> None:
        """Send what is held, then ignore further changes."""
        self._flush()
        with self._lock:
            self._closed = True

    def _later(self, wait: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            timer = threading.Timer(wait, self._trailing)
            timer.daemon = True
            timer.start()
        else:
            loop.call_later(wait, self._trailing)

    def _trailing(self) -> None:
        with self._lock:
            wait = self._last + self.interval - time.monotonic()
            if wait > 0 and self._dirty and not self._closed:  # a touch sent meanwhile: wait out its interval
                self._later(wait)
                return
            self._scheduled = False
        self._flush()

    def _flush(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            self._dirty = False
            self._last = time.monotonic()
            self.sent += 1
        self.send()
