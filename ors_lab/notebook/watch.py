"""Watching a run through its live feed, here: ``ol.watch(url)`` in a notebook or a terminal.

``watch(url)`` reads the feed in a thread of its own (``ors_lab.feed.FeedReader``) into a
``FeedState`` (``ors_lab.viewer.feed_state``: the run's ``RunState`` rebuilt from its events) and
shows it where it is called, as ``evaluate`` shows its own run (``ol.live_views()``): the
dashboard widget in a notebook, updated at most 10 times a second and left with its final state and
static summary when the run ends; the progress line elsewhere. It returns a ``Watch`` at once;
``Watch.wait()`` blocks until the run has ended. ``ors-lab watch URL`` serves the same dashboard as
a page (``ors_lab.viewer.watch``).
"""

from __future__ import annotations

from typing import Any, Self

from ors_lab.feed.reader import FeedReader, feed_url
from ors_lab.notebook.view import LiveView
from ors_lab.viewer.feed_state import FeedState
from ors_lab.viewer.watch import OVER

__all__ = ["Watch", "watch"]


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
        if name in OVER:
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
