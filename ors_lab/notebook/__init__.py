"""The notebook layer: live views of sessions, evaluations and traces (``ors_lab.notebook``).

Every view is a ``ViewState`` (plain data built from events) drawn by a ``LiveView``: an
anywidget in a Jupyter kernel or a marimo notebook (``hosts``), compact text elsewhere, throttled
to about 10 updates a second.
``live_views()`` is the one switch (``ORS_LAB_VIEWS`` in the environment). ipywidgets and
anywidget load when the first widget is drawn.
"""

import ors_lab.notebook.display  # noqa: F401  (registers the notebook's display with ors_lab.display)
from ors_lab.notebook.settings import ENV_VAR, MODES, live_views, resolve
from ors_lab.notebook.throttle import INTERVAL, Throttle
from ors_lab.notebook.view import LiveView, TextLine
from ors_lab.viewer.state import ViewState

__all__ = ["ENV_VAR", "INTERVAL", "MODES", "LiveView", "TextLine", "Throttle", "ViewState", "live_views", "resolve"]
