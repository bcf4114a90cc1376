"""The front end of every live view: one anywidget running the viewer's JavaScript (``ors_lab.viewer.page``).

Its ES module is ``esm()`` (``ors_lab/viewer/static``: ``common.js``, one renderer per view,
``main.js``), its CSS ``ors_lab/html/style.css``: no CDN, no network, no npm build, the same files
the HTML report and the page of ``ors-lab watch`` run. anywidget and ipywidgets are imported when
the first widget is made, never by ``import ors_lab``.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from ors_lab.html import stylesheet
from ors_lab.notebook.hosts import TWIN_CLASS
from ors_lab.viewer.page import esm

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["TWIN_HIDDEN", "make_front"]

TWIN_HIDDEN = f"""
/* A front end that runs the widget loads this sheet: the static twins beside widgets (ors_lab.notebook.hosts) hide,
   output area and all; where the widget does not run (nbconvert's HTML, GitHub), they show. */
.{TWIN_CLASS} {{ display: none !important; }}
.jp-OutputArea-child:has(.{TWIN_CLASS}), .output_area:has(.{TWIN_CLASS}) {{ display: none !important; }}
"""


@cache
def _front_class() -> type:
    import anywidget  # with traitlets, loaded when the first widget is made
    import traitlets

    class Front(anywidget.AnyWidget):
        """A live view's widget: ``view`` names the renderer, ``data`` is the state it draws."""

        _esm = esm()
        _css = stylesheet() + TWIN_HIDDEN
        view = traitlets.Unicode("").tag(sync=True)
        data = traitlets.Dict().tag(sync=True)
        inbox: traitlets.List[Any] = traitlets.List().tag(sync=True)
        text = traitlets.Unicode("").tag(sync=True)  # the text form, for a front end that draws nothing

        def __repr__(self) -> str:
            return self.text or f"<ors_lab {self.view} view>"

    return Front


def make_front(view: str, data: dict[str, Any], text: str, on_request: Callable[[dict[str, Any]], Any]) -> Any:
    """A new front end widget for ``view``; ``on_request`` answers the messages its JavaScript sends."""
    front = _front_class()(view=view, data=data, text=text)

    def handle(_widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict):
            reply = on_request(content)
            if reply is not None:
                front.send(reply)

    front.on_msg(handle)
    return front
