"""The front end of every live view: one anywidget whose JavaScript ships inside the package.

``static/common.js`` (helpers, the colour scale), one ``static/<view>.js`` per view and
``static/main.js`` (the entry point) are joined into one ES module; ``ors_lab/html/style.css`` is
its CSS. No CDN, no network, no npm build: the same files render the HTML report and the page of
``ors-lab watch``. A page of its own (``page_esm``) adds ``static/page.js``, a model the page plays
instead of the kernel, and the page's entry (``static/<page>.js``). anywidget and ipywidgets are imported when
the first widget is made, never by ``import ors_lab``.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from ors_lab.html import stylesheet

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["PAGES", "VIEWS", "esm", "make_front", "page_esm"]

VIEWS = ("session", "run", "trace")
"""The renderers in ``static/``, besides ``common.js`` (first) and ``main.js`` (last)."""
PAGES = ("report", "watch")
"""The pages of their own in ``static/``: each the entry of a page drawn without a kernel."""


@cache
def esm() -> str:
    """The front end's JavaScript, one ES module."""
    static = resources.files(__package__).joinpath("static")
    parts = ["common", *VIEWS, "main"]
    return "\n".join(static.joinpath(f"{name}.js").read_text(encoding="utf-8") for name in parts)


@cache
def page_esm(page: str) -> str:
    """The JavaScript of a page of its own (one of ``PAGES``): ``esm()``, the page's model
    (``static/page.js``) and the page's entry, one ES module to inline in a ``<script type="module">``."""
    if page not in PAGES:
        raise ValueError(f"no page {page!r}; the pages: {', '.join(PAGES)}")
    static = resources.files(__package__).joinpath("static")
    own = "\n".join(static.joinpath(f"{name}.js").read_text(encoding="utf-8") for name in ("page", page))
    return f"{esm()}\n{own}"


@cache
def _front_class() -> type:
    import anywidget
    import traitlets

    class Front(anywidget.AnyWidget):
        """A live view's widget: ``view`` names the renderer, ``data`` is the state it draws."""

        _esm = esm()
        _css = stylesheet()
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
