"""A loaded trace in the notebook: its viewer, its display, its summary and its report (``ors_lab.analysis.Trace``).

A ``Trace`` holds data only; it asks the display hook (``ors_lab.display``) for what shows it, and
these answer (``ors_lab.notebook.display``'s tables): ``trace.view()`` is a ``LiveView`` of the
trace viewer's state (``ors_lab.viewer.trace``), displaying a trace shows that viewer (or, with
live views off or as text, its summary card), ``trace._repr_html_()`` is the card, and
``trace.to_html(path)`` writes its report (``ors_lab.viewer.report``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ors_lab.notebook.settings import resolve
from ors_lab.notebook.view import LiveView

if TYPE_CHECKING:
    from ors_lab.analysis.trace import Trace
    from ors_lab.viewer.report import Report

__all__ = ["bundle", "html", "report", "view"]


def view(trace: Trace, *, page_size: int | None = None) -> LiveView:
    """The trace viewer: its episodes a page at a time, and any episode's timeline on a click (not yet shown)."""
    from ors_lab.viewer.trace import trace_state  # pandas: loaded when a trace is shown, never by `import ors_lab`

    return LiveView(trace_state(trace, page_size))


def bundle(trace: Trace) -> dict[str, Any]:
    """In a notebook with live views: the viewer (its widget, and its static summary for a saved notebook);
    else the summary card."""
    if resolve() == "widgets":
        return view(trace)._repr_mimebundle_()
    return {"text/html": html(trace), "text/plain": repr(trace)}


def html(trace: Trace) -> str:
    """The summary card (episodes, mean reward, errors, environments, duration; the path last), the reward
    histogram and the first episodes."""
    from ors_lab.viewer.trace import trace_state  # pandas: loaded when a trace is shown, never by `import ors_lab`

    return trace_state(trace).html()


def report(trace: Trace, *, path: str | os.PathLike[str], timelines: int | None = None) -> Report:
    """The trace's report written to ``path`` (``ors_lab.viewer.report.write_report``)."""
    from ors_lab.viewer.report import TIMELINES, write_report  # pandas, as above

    return write_report(trace, path, timelines=TIMELINES if timelines is None else timelines)
