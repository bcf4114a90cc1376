"""The display hook: how the layers under the notebook show what they hold, knowing nothing of widgets.

A session about to open, a run about to start, an object displayed in a notebook cell: the client,
the evaluation and the analysis ask this module, and whatever display registered itself answers.
``ors_lab.notebook``, the top layer, registers one when it is imported (``import ors_lab`` does):
it draws live views (a widget in a kernel, a text line elsewhere, as ``ol.live_views()`` says) and
the objects' MIME bundles. With none registered, nothing is drawn live and objects show as their
own text fallback. inspect_ai's core offers the same seam (its abstract ``display()``).

- ``live(subject, events)``: start the live view of ``subject`` (an ``AsyncSession`` about to open,
  a run's view state about to be fed), subscribed to ``events`` and shown where the caller is.
  None when views are off or nothing can draw it. It never raises: the work matters more than its
  view.
- ``bundle(subject)``: how ``subject`` shows itself when displayed (``_repr_mimebundle_``), or None
  for the subject's own fallback.
- ``make(subject, what, **options)``: something else the display layer makes of ``subject``, named
  by ``what``, for a subject that only holds data: a loaded trace (``ors_lab.analysis.Trace``) asks
  for its ``"view"`` (its live view, not yet shown: ``page_size=``), its ``"html"`` (its static
  summary) and its ``"report"`` (its HTML report written: ``path=``, ``timelines=``; the ``Report``).
  ``LookupError`` when no display is registered or it makes no such thing.

- ``Shown(bundle)``: a MIME bundle as an object of its own. A subject that shows itself as a widget answers
  marimo's display protocol (``_display_``, which marimo asks before any ``_repr_*_``) with
  ``Shown(self._repr_mimebundle_())``: marimo then draws what the display made (a live view's widget, which
  it draws as that widget) rather than the subject's static ``_repr_html_``.

A display draws the subjects it knows and returns None for the others. This module imports nothing
of ours, so every layer may use it (``events`` is an ``ors_lab.events.EventStream``; the protocol's
models show themselves through ``bundle`` too).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

__all__ = ["Display", "Live", "Shown", "bundle", "live", "make", "register"]

log = logging.getLogger(__name__)


class Live(Protocol):
    """A live view, as its subject holds it: closed when the subject ends (drawing its final state)."""

    def close(self) -> None: ...

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]: ...


class Display(Protocol):
    """What a display layer answers (``ors_lab.notebook`` is one)."""

    def live(self, subject: object, events: Any) -> Live | None: ...

    def bundle(self, subject: object) -> dict[str, Any] | None: ...

    def make(self, subject: object, what: str, /, **options: Any) -> Any: ...


class Shown:
    """A MIME bundle as an object that shows itself as that bundle and nothing else (see the module docstring)."""

    def __init__(self, bundle: dict[str, Any]) -> None:
        self.bundle = bundle

    def __repr__(self) -> str:
        return str(self.bundle.get("text/plain", "Shown(...)"))

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.bundle


_display: Display | None = None


def register(display: Display | None) -> Display | None:
    """Make ``display`` the one that answers (None: none); returns the one it replaced."""
    global _display
    previous, _display = _display, display
    return previous


def live(subject: object, events: Any) -> Live | None:
    """The live view of ``subject``, subscribed to ``events`` and shown; None when none is drawn. Never raises."""
    if _display is None:
        return None
    try:
        return _display.live(subject, events)
    except Exception:  # the work matters more than its view
        log.exception("ors_lab: the live view could not be shown (%s); the work goes on without it", type(subject))
        return None


def bundle(subject: object) -> dict[str, Any] | None:
    """How ``subject`` shows itself when displayed (its MIME bundle); None: its own text fallback."""
    return _display.bundle(subject) if _display is not None else None


def make(subject: object, what: str, /, **options: Any) -> Any:
    """What the display layer makes of ``subject`` for ``what`` (see the module docstring); ``LookupError``
    when none is registered or it makes no such thing."""
    if _display is None:
        raise LookupError(f"no display is registered to make the {what} of {type(subject).__name__}")
    return _display.make(subject, what, **options)
