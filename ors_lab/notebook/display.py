"""The notebook's display: its answer to the display hook (``ors_lab.display``), registered on import.

The layers under the notebook ask ``ors_lab.display.live(subject, events)`` and
``ors_lab.display.bundle(subject)``; this display answers by the subject's type, from the two tables
below: ``LIVE`` (start a live view: subscribed to the events and shown as ``ol.live_views()``
says) and ``BUNDLE`` (how the subject shows itself when displayed). A type not in a table (nor any
of its bases) gets None: nothing live, the subject's own text fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ors_lab import display
from ors_lab.display import Live
from ors_lab.events import EventStream
from ors_lab.notebook.settings import resolve
from ors_lab.notebook.state import ViewState
from ors_lab.notebook.view import LiveView

__all__ = ["BUNDLE", "LIVE", "NotebookDisplay"]

LIVE: dict[type, Callable[[Any, Any], Live | None]] = {}
"""Subject type -> its live view's maker, called with (subject, events)."""

BUNDLE: dict[type, Callable[[Any], dict[str, Any] | None]] = {}
"""Subject type -> its MIME bundle's maker."""


def _find(table: dict[type, Any], subject: object) -> Any:
    for kind in type(subject).__mro__:
        if kind in table:
            return table[kind]
    return None


class NotebookDisplay:
    """Draws what ``LIVE`` and ``BUNDLE`` know; None for the rest."""

    def live(self, subject: object, events: Any) -> Live | None:
        make = _find(LIVE, subject)
        return make(subject, events) if make is not None else None

    def bundle(self, subject: object) -> dict[str, Any] | None:
        make = _find(BUNDLE, subject)
        return make(subject) if make is not None else None


def live_state(state: ViewState, events: EventStream) -> LiveView | None:
    """A view state's live view (a run's ``RunState``): attached to ``events`` and shown, as
    ``ol.live_views()`` says; None when views are ``"off"``."""
    mode = resolve()
    if mode == "off":
        return None
    view = LiveView(state, mode=mode)
    view.attach(events)
    return view.show()


display.register(NotebookDisplay())

LIVE[ViewState] = live_state
