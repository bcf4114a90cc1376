"""What a live view shows, as plain data: built from events, rendered by the widget, as text or HTML.

A view's state is tested without a browser: feed it events, read ``snapshot()`` (the JSON the
front end renders), ``text()`` (the text fallback) and ``html()`` (the static summary a saved
notebook keeps). It never blocks: ``apply`` does a little bookkeeping and returns whether anything
a person sees changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from ors_lab.events import Event

__all__ = ["ViewState"]


class ViewState:
    """Base of the views' states. ``name`` picks the front end's renderer (``static/<name>.js``)."""

    name: ClassVar[str] = ""
    kinds: ClassVar[Iterable[str] | None] = None
    """The event kinds the view subscribes to (None: all)."""

    def apply(self, event: Event) -> bool:
        """Take one event; True when what the view shows changed."""
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:
        """The front end's data: JSON-able, bounded in size."""
        raise NotImplementedError

    def inbox(self) -> list[Any]:
        """Items the front end keeps once sent (finished episodes' transcripts); emptied on each call."""
        return []

    def request(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Answer a front end's request (a page, a transcript); None when it asks for nothing known."""
        return None

    def text(self) -> str:
        """The compact text form: one line (or a few) a terminal or a log shows."""
        raise NotImplementedError

    def html(self) -> str:
        """The static HTML summary, readable with no kernel (``ors_lab.html`` pieces)."""
        raise NotImplementedError

    def done(self) -> bool:
        """True once there is nothing more to come (the session closed, the run ended)."""
        return False
