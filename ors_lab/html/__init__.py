"""Small HTML pieces every layer's reprs are made of: one style sheet, a card, a table, a colour scale.

Pure string building (no template engine, no IPython), at the bottom of the layers so the
protocol's models, the client's sessions, traces and results all look alike. Every value is
escaped here; callers pass plain text, or ``Markup`` for HTML they built with these functions.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["Markup", "card", "colour", "delta_colour", "escape", "fmt", "pretty_json", "styled", "stylesheet", "table"]


class Markup(str):
    """HTML that is already safe: not escaped again."""

    __slots__ = ()


def escape(value: Any) -> Markup:
    """``value`` as HTML text (``Markup`` passes through)."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(value if isinstance(value, str) else fmt(value)))


def fmt(value: Any) -> str:
    """A value as a person reads it: floats to 4 significant digits, None as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.4g}"
    return str(value)


@cache
def stylesheet() -> str:
    """The CSS of every ors_lab view (``ors_lab/html/style.css``)."""
    return resources.files(__package__).joinpath("style.css").read_text(encoding="utf-8")


def styled(body: str) -> Markup:
    """``body`` inside the ``.ors-lab`` scope, with the style sheet (self-contained: no network)."""
    return Markup(f'<div class="ors-lab"><style>{stylesheet()}</style>{body}</div>')


def card(title: Any, rows: Iterable[tuple[Any, Any]], *, subtitle: Any = None, extra: str = "") -> Markup:
    """A summary card: a title, then one short vertical table of ``(name, value)`` rows."""
    sub = f'<span class="ol-sub">{escape(subtitle)}</span>' if subtitle not in (None, "") else ""
    body = "".join(f"<tr><th>{escape(name)}</th><td>{escape(value)}</td></tr>" for name, value in rows)
    return Markup(
        f'<div class="ol-card"><div class="ol-title">{escape(title)}{sub}</div>'
        f'<table class="ol-kv">{body}</table>{extra}</div>'
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, numeric: Sequence[bool] = ()) -> Markup:
    """A plain table; columns flagged in ``numeric`` are right-aligned."""
    num = list(numeric) + [False] * (len(headers) - len(numeric))
    head = "".join(f"<th{' class=num' if n else ''}>{escape(h)}</th>" for h, n in zip(headers, num, strict=True))
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=num' if n else ''}>{escape(v)}</td>" for v, n in zip(row, num, strict=False))
        + "</tr>"
        for row in rows
    )
    return Markup(f'<table class="ol-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def pretty_json(value: Any, *, limit: int = 4000) -> str:
    """A JSON value (or a JSON string) indented for reading, cut at ``limit`` characters."""
    if isinstance(value, str | bytes):
        try:
            value = json.loads(value)
        except ValueError:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            return text if len(text) <= limit else text[:limit] + " …"
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + " …"


def colour(reward: float | None, *, error: bool = False) -> str:
    """The colour of a reward in [0, 1] (clipped): red through amber to green; errors dark red, none grey.

    The front end (``ors_lab/viewer/static/common.js: ORS.colour``) uses the same scale.
    """
    if error:
        return "#82071e"
    if reward is None or (isinstance(reward, float) and math.isnan(reward)):
        return "#d0d7de"
    x = min(max(float(reward), 0.0), 1.0)
    hue = round(120 * x)
    return f"hsl({hue}, 65%, 45%)"


def delta_colour(delta: float | None) -> str:
    """The colour of a delta (candidate − baseline), clipped to [−1, 1]: red below 0, green above, paler towards
    0; 0 and none grey. The front end (``ORS.deltaColour``) uses the same scale."""
    if delta is None or (isinstance(delta, float) and math.isnan(delta)):
        return "#d0d7de"
    x = min(max(float(delta), -1.0), 1.0)
    if x == 0:
        return "hsl(0, 0%, 78%)"
    return f"hsl({0 if x < 0 else 120}, 65%, {math.floor(88.5 - 43 * abs(x))}%)"  # rounded as JavaScript rounds
