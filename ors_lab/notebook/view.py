"""A live view: a ``ViewState`` fed by an event stream, drawn as a widget or as text, throttled.

``LiveView(state)`` is an inline subscriber (``stream.subscribe(view, kinds=state.kinds)`` or
``view.attach(stream)``). Each event updates the state at once (cheap bookkeeping) and touches a
``Throttle``, so the front end gets at most about 10 updates a second whatever the event rate, and
the publisher never waits for a browser.

Drawn as (``settings.resolve()``):

- **widgets**: one anywidget (``widget.make_front``) shown once by the host the code runs under
  (``hosts``: a Jupyter kernel or a marimo notebook), updated in place. In Jupyter a second output
  beside it holds the static summary (drawn again when the view closes), so a saved notebook,
  nbconvert's HTML or a notebook viewer shows the result without a kernel; marimo's export keeps
  the widget's last state;
- **text**: the state's ``text()``: one line rewritten in place on a TTY, else a line every
  ``text_interval`` seconds, and the final one at ``close()``;
- **off**: nothing while it runs.

Displaying the view object itself (``display(view)``, or a cell ending with it) shows another
copy of the same widget (with its static twin in Jupyter: ``hosts.register``).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from ors_lab.events import Event, EventStream, Subscription
from ors_lab.notebook import hosts
from ors_lab.notebook.hosts import WIDGET_MIME
from ors_lab.notebook.settings import resolve
from ors_lab.notebook.throttle import INTERVAL, Throttle
from ors_lab.viewer.state import ViewState

__all__ = ["WIDGET_MIME", "LiveView", "TextLine"]

log = logging.getLogger(__name__)

TEXT_INTERVAL = 10.0


class TextLine:
    """Writes a changing line: rewritten in place on a TTY (at most 10 a second), else every ``interval`` s."""

    def __init__(self, stream: TextIO | None = None, *, interval: float = TEXT_INTERVAL) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = INTERVAL if self.tty else interval
        self._last = time.monotonic()
        self._width = 0

    def update(self, text: str, *, force: bool = False) -> None:
        """Show ``text`` if it is time to (or ``force``)."""
        now = time.monotonic()
        if force or now - self._last >= self.interval:
            self._last = now
            self._write(text)

    def finish(self, text: str) -> None:
        """Show the final ``text`` and end the line (on a TTY, its further lines follow it)."""
        self._write(text)
        if self.tty:
            self.stream.write("".join(f"\n{line}" for line in text.splitlines()[1:]) + "\n")
            self.stream.flush()

    def _write(self, text: str) -> None:
        if self.tty:
            first = text.splitlines()[0] if text else ""
            self.stream.write("\r" + first + " " * max(self._width - len(first), 0))
            self._width = len(first)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


class LiveView:
    """A ``ViewState`` drawn live. Call it with events (it is a subscriber); ``close()`` draws the last state."""

    def __init__(
        self,
        state: ViewState,
        *,
        mode: str | None = None,
        text_stream: TextIO | None = None,
        text_interval: float = TEXT_INTERVAL,
        interval: float = INTERVAL,
    ) -> None:
        self.state = state
        self.mode = mode if mode is not None else resolve()
        self._lock = threading.RLock()
        self._throttle = Throttle(self._send, interval=interval)
        self._subscriptions: list[Subscription] = []
        self._front: Any = None
        self._shown: hosts.Shown | None = None
        self._line = TextLine(text_stream, interval=text_interval) if self.mode == "text" else None
        self.closed = False

    def __repr__(self) -> str:
        with self._lock:
            return self.state.text()

    # -- feeding --------------------------------------------------------------------------------

    def attach(self, stream: EventStream) -> Subscription:
        """Subscribe to ``stream`` (inline, the state's kinds); detached again at ``close()``."""
        subscription = stream.subscribe(self, kinds=self.state.kinds)
        self._subscriptions.append(subscription)
        return subscription

    def __call__(self, event: Event) -> None:
        with self._lock:
            changed = self.state.apply(event)
        if changed:
            self._throttle.touch()

    def update(self, change: Callable[[], bool]) -> None:
        """Run ``change()``, which changes the state, as an event does: under the view's lock, and
        when it returns True the front end is updated (throttled). For a state fed by something other
        than an event stream (``ors_lab.feed``: a live feed read from another process)."""
        with self._lock:
            changed = change()
        if changed:
            self._throttle.touch()

    @property
    def updates(self) -> int:
        """How many times the front end (or the text line) was updated."""
        return self._throttle.sent

    # -- drawing --------------------------------------------------------------------------------

    def show(self) -> LiveView:
        """Draw the view where the caller is (a cell's output, or the text stream); returns the view."""
        if self.mode == "widgets" and self._shown is None:
            front = self.front()
            with self._lock:
                text, html = self.state.text(), self.state.html()
            self._shown = (hosts.current() or hosts.JUPYTER).show(front, text, html)
        elif self.mode == "text" and self._line is not None:
            with self._lock:
                text = self.state.text()
            self._line.update(text, force=True)
        return self

    def close(self) -> None:
        """Stop listening, send the last state and leave the final view (with its static summary)."""
        if self.closed:
            return
        self.closed = True
        for subscription in self._subscriptions:
            subscription.close()
        self._throttle.close()
        with self._lock:
            text = self.state.text()
        if self.mode == "text" and self._line is not None:
            self._line.finish(text)
        elif self._shown is not None:
            with self._lock:
                html = self.state.html()
            self._shown.update(text, html)

    def front(self) -> Any:
        """The widget (made on first use)."""
        if self._front is None:
            from ors_lab.notebook.widget import make_front  # anywidget: only when the widget is made

            with self._lock:
                data, text = self.state.snapshot(), self.state.text()
            self._front = make_front(self.state.name, data, text, self._request)
        return self._front

    def _bundle(self) -> dict[str, Any]:
        front = self.front()
        with self._lock:
            text, html = self.state.text(), self.state.html()
        return {**hosts.widget_bundle(front, text), "text/html": str(html)}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        if resolve() == "widgets":
            return self._bundle()
        with self._lock:
            return {"text/html": str(self.state.html()), "text/plain": self.state.text()}

    def _send(self) -> None:
        if self.mode == "text":
            if self._line is not None:
                with self._lock:
                    text = self.state.text()
                self._line.update(text)
            return
        if self._front is None:
            return
        with self._lock:
            data, text, inbox = self.state.snapshot(), self.state.text(), self.state.inbox()
        try:
            with self._front.hold_sync():
                self._front.data = data
                self._front.text = text
                if inbox:
                    self._front.inbox = inbox
        except Exception:  # a front end that went away must not break the run
            log.exception("ors_lab: a live view could not be updated")

    def _request(self, message: dict[str, Any]) -> Any:
        with self._lock:
            return self.state.request(message)
