"""The notebook's display: its answer to the display hook (``ors_lab.display``), registered on import.

The layers under the notebook ask ``ors_lab.display.live(subject, events)``,
``ors_lab.display.bundle(subject)`` and ``ors_lab.display.make(subject, what, **options)``; this display
answers by the subject's type, from the three tables below: ``LIVE`` (start a live view: subscribed
to the events and shown as ``ol.live_views()`` says), ``BUNDLE`` (how the subject shows itself when
displayed) and ``MAKE`` (what else it makes of the subject, by name). A type not in a table (nor any
of its bases) gets None: nothing live, the subject's own text fallback (``make``: ``LookupError``).
A table's key is the type, or its dotted name (``"ors_lab.analysis.trace.Trace"``) for a type whose
module ``import ors_lab`` does not load (pyarrow and pandas are loaded when a trace is, not before).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ors_lab import display
from ors_lab.client import AsyncSession, Session
from ors_lab.display import Live
from ors_lab.events import EventStream
from ors_lab.notebook import compare, hosts, trace
from ors_lab.notebook.session import SessionView, session_bundle, sync_session_bundle
from ors_lab.notebook.settings import resolve
from ors_lab.notebook.view import LiveView
from ors_lab.protocol.models import ImageBlock, Split, Task, TextBlock, ToolResult, ToolSpec
from ors_lab.viewer import blocks
from ors_lab.viewer.state import ViewState

__all__ = ["BUNDLE", "LIVE", "MAKE", "NotebookDisplay"]

LIVE: dict[type | str, Callable[[Any, Any], Live | None]] = {}
"""Subject type -> its live view's maker, called with (subject, events)."""

BUNDLE: dict[type | str, Callable[[Any], dict[str, Any] | None]] = {
    "ors_lab.analysis.trace.Trace": trace.bundle,
    "ors_lab.analysis.comparison.Comparison": compare.bundle,
}
"""Subject type -> its MIME bundle's maker."""

MAKE: dict[tuple[type | str, str], Callable[..., Any]] = {
    ("ors_lab.analysis.trace.Trace", "html"): trace.html,
    ("ors_lab.analysis.trace.Trace", "report"): trace.report,
    ("ors_lab.analysis.trace.Trace", "view"): trace.view,
    ("ors_lab.analysis.comparison.Comparison", "html"): compare.html,
    ("ors_lab.analysis.comparison.Comparison", "report"): compare.report,
}
"""(Subject type, what) -> its maker, called with (subject, **options)."""


def _find(table: dict[Any, Any], subject: object, what: str | None = None) -> Any:
    for kind in type(subject).__mro__:
        for key in (kind, f"{kind.__module__}.{kind.__qualname__}"):
            found = table.get(key if what is None else (key, what))
            if found is not None:
                return found
    return None


class NotebookDisplay:
    """Draws what ``LIVE``, ``BUNDLE`` and ``MAKE`` know; None for the rest."""

    def live(self, subject: object, events: Any) -> Live | None:
        make = _find(LIVE, subject)
        return make(subject, events) if make is not None else None

    def bundle(self, subject: object) -> dict[str, Any] | None:
        make = _find(BUNDLE, subject)
        return plain(make(subject)) if make is not None else None

    def make(self, subject: object, what: str, /, **options: Any) -> Any:
        make = _find(MAKE, subject, what)
        if make is None:
            raise LookupError(f"the notebook makes no {what} of {type(subject).__name__}")
        return make(subject, **options)


def plain(bundle: dict[str, Any] | None) -> dict[str, Any] | None:
    """``bundle`` with its texts as plain ``str``: marimo's encoder turns a ``str`` subclass (``ors_lab.html.Markup``)
    into ``{}``, so a card would show as nothing there."""
    if bundle is None:
        return None
    return {key: str(value) if isinstance(value, str) else value for key, value in bundle.items()}


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
hosts.register()  # in a Jupyter kernel: objects shown as widgets leave their static twin too

BUNDLE[AsyncSession] = session_bundle
BUNDLE[ImageBlock] = blocks.bundle_of(blocks.image_block_html)
BUNDLE[Session] = sync_session_bundle
BUNDLE[Split] = blocks.bundle_of(blocks.split_html)
BUNDLE[Task] = blocks.bundle_of(blocks.task_html)
BUNDLE[TextBlock] = blocks.bundle_of(blocks.text_block_html)
BUNDLE[ToolResult] = blocks.bundle_of(blocks.result_html)
BUNDLE[ToolSpec] = blocks.bundle_of(blocks.tool_html)
LIVE[AsyncSession] = SessionView.start
LIVE[ViewState] = live_state
