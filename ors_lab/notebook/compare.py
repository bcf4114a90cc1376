"""A comparison in the notebook: its view, its summary and its page (``ors_lab.analysis.Comparison``).

A ``Comparison`` holds data only; it asks the display hook (``ors_lab.display``) for what shows it, and these
answer (``ors_lab.notebook.display``'s tables): displaying it shows the comparison view
(``ors_lab.viewer.compare``, a ``LiveView`` of its ``CompareState``: the widget answers a click on a task with
the two runs' episodes side by side), or, with live views off or as text, its static summary;
``comparison._repr_html_()`` is that summary, and ``comparison.to_html(path)`` writes its page
(``ors_lab.viewer.compare_page``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ors_lab.notebook.settings import resolve
from ors_lab.notebook.view import LiveView

if TYPE_CHECKING:
    from ors_lab.analysis.comparison import Comparison
    from ors_lab.viewer.compare_page import ComparisonPage

__all__ = ["bundle", "html", "report", "view"]


def view(comparison: Comparison) -> LiveView:
    """The comparison view (not yet shown)."""
    from ors_lab.viewer.compare import (
        CompareState,
    )  # pandas: loaded when a comparison is shown, not by `import ors_lab`

    return LiveView(CompareState(comparison))


def bundle(comparison: Comparison) -> dict[str, Any]:
    """In a notebook with live views: the view (its widget, and its static summary for a saved notebook); else the
    summary."""
    if resolve() == "widgets":
        return view(comparison)._repr_mimebundle_()
    return {"text/html": html(comparison), "text/plain": repr(comparison)}


def html(comparison: Comparison) -> str:
    """The static summary: a card per candidate, its grid of tasks coloured by delta."""
    from ors_lab.viewer.compare import CompareState  # pandas, as above

    return CompareState(comparison).html()


def report(comparison: Comparison, *, path: str | os.PathLike[str]) -> ComparisonPage:
    """The comparison's page written to ``path`` (``ors_lab.viewer.compare_page.write_comparison``)."""
    from ors_lab.viewer.compare_page import write_comparison  # pandas, as above

    return write_comparison(comparison, path)
