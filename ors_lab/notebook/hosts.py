"""Where a live view's widget is drawn: a Jupyter kernel or a marimo notebook, and how each one shows it.

Both hosts draw the same widget (``widget.make_front``: one anywidget running the viewer's JavaScript) of the
same view state; only how its output is made and kept differs.

- **Jupyter** (JupyterLab, Notebook 7, VS Code, nbclient): IPython's ``display`` with a display id. The widget's
  output holds the widget and its text line; beside it a second output, its *twin*, holds the view's static HTML
  summary (``<div class="ol-twin">``), drawn again when the view closes. A front end that runs the widget loads
  the widget's style sheet, which hides every twin (``widget.TWIN_HIDDEN``); one that does not (nbconvert's HTML
  offline or with JavaScript stripped, as GitHub does; a viewer with no kernel) shows the twin. One output could
  not do both: nbconvert draws a widget's output as the widget's placeholder alone once the notebook holds the
  widget's state, whatever else the output holds. An object that shows itself as a widget when displayed (a
  trace, a comparison, a session, a view) leaves the same pair: ``register`` gives IPython's display formatter a
  printer for each such type.
- **marimo** (``marimo edit``, ``marimo run``, ``marimo export html``): the widget is appended to the cell's output
  (``mo.output.append``). marimo draws an anywidget natively and sends its model's changes while the cell runs;
  its HTML export keeps each model's last state, so the exported page draws the final view with the same
  JavaScript. A cell whose last expression is not None replaces what was appended (marimo's rule), so a cell that
  evaluates ends with an assignment. A displayed trace, comparison or session is drawn from its MIME bundle
  (its ``_display_`` answers ``ors_lab.display.Shown``), whose widget marimo draws as that widget.

``current()`` is the host the code runs under, or None (a script, a terminal): then views are text
(``settings.resolve``). IPython and marimo are never imported here unless the code already runs under them.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

from ors_lab.notebook.settings import in_kernel, in_marimo

__all__ = [
    "JUPYTER",
    "MARIMO",
    "SELF_SHOWN",
    "TWIN_CLASS",
    "WIDGET_MIME",
    "Host",
    "Shown",
    "current",
    "register",
    "twin",
    "widget_bundle",
]

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
TWIN_CLASS = "ol-twin"


class Shown(Protocol):
    """A view's output as its host keeps it: drawn again with the view's last text and static HTML."""

    def update(self, text: str, html: str) -> None: ...


class Host(Protocol):
    """Where widgets are drawn (``JUPYTER``, ``MARIMO``)."""

    name: str

    def show(self, front: Any, text: str, html: str) -> Shown:
        """Draw ``front`` (the view's widget) where the caller is; ``text`` and ``html`` are its static forms."""
        ...


def twin(html: str) -> str:
    """The static HTML beside a widget's output: ``html``, hidden wherever the widget's front end runs."""
    return f'<div class="{TWIN_CLASS}">{html}</div>'


def widget_bundle(front: Any, text: str) -> dict[str, Any]:
    """A widget's own output: the widget, and its text line for a front end that shows text only."""
    return {WIDGET_MIME: {"version_major": 2, "version_minor": 0, "model_id": front.model_id}, "text/plain": text}


class _JupyterShown:
    def __init__(self, widget: Any, static: Any, front: Any) -> None:
        self.widget, self.static, self.front = widget, static, front

    def update(self, text: str, html: str) -> None:
        self.widget.update(widget_bundle(self.front, text), raw=True)
        self.static.update({"text/html": twin(html)}, raw=True)


class _Jupyter:
    """IPython's display: the widget's output, then its twin (see the module docstring)."""

    name = "jupyter"

    def show(self, front: Any, text: str, html: str) -> Shown:
        from IPython.display import display  # IPython: only when a widget is shown

        register()
        widget = display(widget_bundle(front, text), raw=True, display_id=True)  # type: ignore[no-untyped-call]
        static = display({"text/html": twin(html)}, raw=True, display_id=True)  # type: ignore[no-untyped-call]
        return _JupyterShown(widget, static, front)

    def display(self, bundle: dict[str, Any]) -> None:
        """Display an object's MIME bundle; one that holds a widget as the widget's output and its twin."""
        from IPython.display import display  # IPython: only when something is displayed

        if WIDGET_MIME not in bundle:
            display(bundle, raw=True)  # type: ignore[no-untyped-call]
            return
        own = {key: value for key, value in bundle.items() if key != "text/html"}
        display(own, raw=True)  # type: ignore[no-untyped-call]
        if "text/html" in bundle:
            display({"text/html": twin(bundle["text/html"])}, raw=True)  # type: ignore[no-untyped-call]


class _MarimoShown:
    def update(self, text: str, html: str) -> None:
        """Nothing to draw again: the widget holds the last state, and marimo's export keeps it."""


class _Marimo:
    """marimo's output: the widget appended to the running cell's (see the module docstring)."""

    name = "marimo"

    def show(self, front: Any, text: str, html: str) -> Shown:
        marimo = sys.modules["marimo"]  # current() said marimo runs this code
        marimo.output.append(front)
        return _MarimoShown()


JUPYTER = _Jupyter()
MARIMO = _Marimo()


def current() -> _Jupyter | _Marimo | None:
    """The host this code runs under: ``JUPYTER`` in a Jupyter kernel, ``MARIMO`` in a marimo notebook, else None."""
    if in_kernel():
        return JUPYTER
    if in_marimo():
        return MARIMO
    return None


SELF_SHOWN = (
    ("ors_lab.notebook.view", "LiveView"),
    ("ors_lab.notebook.session", "SessionView"),
    ("ors_lab.notebook.watch", "Watch"),
    ("ors_lab.analysis.trace", "Trace"),
    ("ors_lab.analysis.comparison", "Comparison"),
    ("ors_lab.client._session", "AsyncSession"),
    ("ors_lab.client.sync", "Session"),
)
"""The types whose display may be a widget (by module and name: their modules load when they are first used)."""

_registered: set[int] = set()


def _print(subject: Any) -> None:
    JUPYTER.display(subject._repr_mimebundle_())


def register() -> None:
    """Give the running IPython shell's display formatter a printer for each of ``SELF_SHOWN``: displayed in a
    kernel, such an object leaves its widget's output and its twin (``_Jupyter.display``). Once per shell; nothing
    outside a kernel."""
    if not in_kernel():
        return
    shell = sys.modules["IPython"].get_ipython()
    if id(shell) in _registered:
        return
    _registered.add(id(shell))
    printers = shell.display_formatter.ipython_display_formatter
    for module, name in SELF_SHOWN:
        printers.for_type_by_name(module, name, _print)
