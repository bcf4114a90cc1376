"""The one switch for live views: ``ol.live_views(...)`` or the ``ORS_LAB_VIEWS`` environment variable.

Modes:

- ``"auto"`` (the default): widgets inside a Jupyter kernel (JupyterLab, Notebook 7, VS Code) or a
  marimo notebook, text anywhere else (a terminal, plain Python, IPython in a terminal);
- ``"widgets"``: widgets, wherever a kernel or marimo is (an error outside them);
- ``"text"``: the compact text form, also in a notebook (CI logs, a saved notebook with no widgets);
- ``"off"``: no live view at all; objects still show themselves when displayed.

``ol.live_views("off")`` sets the mode for this process; ``ol.live_views()`` returns it.
``ORS_LAB_VIEWS=text`` (or any mode) sets the default before anything runs.
"""

from __future__ import annotations

import os
import sys
from typing import Literal

__all__ = ["ENV_VAR", "MODES", "Mode", "live_views", "resolve"]

Mode = Literal["auto", "widgets", "text", "off"]
MODES: tuple[Mode, ...] = ("auto", "widgets", "text", "off")
ENV_VAR = "ORS_LAB_VIEWS"

_mode: Mode | None = None  # set by live_views(); None: the environment variable, then "auto"


def _checked(mode: str, where: str) -> Mode:
    if mode not in MODES:
        raise ValueError(f"{where}: live views mode must be one of {', '.join(MODES)}, not {mode!r}")
    return mode  # checked against MODES just above


def live_views(mode: Mode | None = None) -> Mode:
    """Set the live views mode (``"auto"``, ``"widgets"``, ``"text"`` or ``"off"``); return the mode in force."""
    global _mode
    if mode is not None:
        _mode = _checked(str(mode), "live_views")
    if _mode is not None:
        return _mode
    return _checked(os.environ.get(ENV_VAR, "auto").strip().lower() or "auto", ENV_VAR)


def in_kernel() -> bool:
    """True inside a Jupyter kernel (not IPython in a terminal). Never imports IPython itself."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def in_marimo() -> bool:
    """True inside a marimo notebook's kernel (``marimo edit``, ``marimo run``, ``marimo export``). Never imports
    marimo itself: a marimo notebook has."""
    marimo = sys.modules.get("marimo")
    return marimo is not None and bool(marimo.running_in_notebook())


def resolve() -> Literal["widgets", "text", "off"]:
    """What a live view is drawn as here and now: ``widgets``, ``text`` or ``off``."""
    mode = live_views()
    front = in_kernel() or in_marimo()
    if mode == "auto":
        return "widgets" if front else "text"
    if mode == "widgets" and not front:
        raise RuntimeError(
            f"live views are set to 'widgets' but this is not a Jupyter kernel nor a marimo notebook; use 'auto' or"
            f" 'text' ({ENV_VAR})"
        )
    return mode
