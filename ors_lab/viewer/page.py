"""The front end's JavaScript, and the one shell of a page drawn without a kernel.

``static/common.js`` (helpers, the colour scale), one ``static/<view>.js`` per view and
``static/main.js`` (the entry point) are joined into one ES module (``esm()``); ``ors_lab/html/style.css``
is its CSS. No CDN, no network, no npm build: the notebook's widgets (``ors_lab.notebook.widget``), the
HTML report, the page of ``ors-lab watch`` and the page of ``ors-lab compare`` run the same files. A page of
its own (``page_esm``) adds ``static/page.js``, a model the page plays instead of the kernel, and the page's entry
(``static/<page>.js``); ``page_html`` is the HTML around it: the style sheet and the script inline, a
Content-Security-Policy, and the static body shown until the script has drawn it.
"""

from __future__ import annotations

import os
from functools import cache
from importlib import resources
from pathlib import Path

from ors_lab.html import stylesheet
from ors_lab.version import __version__

__all__ = ["PAGES", "VIEWS", "esm", "page_esm", "page_html", "write_whole"]

VIEWS = ("session", "run", "trace", "compare")
"""The renderers in ``static/``, besides ``common.js`` (first) and ``main.js`` (last)."""
PAGES = ("report", "watch", "comparison")
"""The pages of their own in ``static/``: each the entry of a page drawn without a kernel."""


def _read(names: tuple[str, ...]) -> str:
    static = resources.files(__package__).joinpath("static")
    return "\n".join(static.joinpath(f"{name}.js").read_text(encoding="utf-8") for name in names)


@cache
def esm() -> str:
    """The front end's JavaScript, one ES module."""
    return _read(("common", *VIEWS, "main"))


@cache
def page_esm(page: str) -> str:
    """The JavaScript of a page of its own (one of ``PAGES``): ``esm()``, the page's model
    (``static/page.js``) and the page's entry, one ES module to inline in a ``<script type="module">``."""
    if page not in PAGES:
        raise ValueError(f"no page {page!r}; the pages: {', '.join(PAGES)}")
    return f"{esm()}\n{_read(('page', page))}"


def page_html(page: str, *, title: str, csp: str, body: str, icon: bool = False, after: str = "") -> str:
    """A whole page drawn by ``page_esm(page)``: ``title`` (HTML, escaped by the caller), the ``csp``, the
    static ``body`` inside ``<main>``, ``after`` it the page's inline data; ``icon``: an empty favicon (a
    page served over HTTP, so that the browser asks for none)."""
    script = page_esm(page)
    if "</script" in script.lower():
        raise ValueError(f"the {page}'s script holds '</script', which would end it early")  # a bug in static/
    favicon = '<link rel="icon" href="data:,">\n' if icon else ""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="ors_lab {__version__}">
{favicon}<title>{title}</title>
<style>{stylesheet()}</style>
</head>
<body>
<main class="ors-lab ol-page">
{body}
</main>
{after}<script type="module">
{script}
</script>
</body>
</html>
"""


def write_whole(path: Path, page: bytes) -> int:
    """Write ``page`` to ``path`` (its directory made if need be, a file there replaced), whole or not at all: written
    beside, then renamed. Returns its size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_bytes(page)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return len(page)
