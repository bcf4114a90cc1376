"""A comparison to share: one self-contained HTML page (``Comparison.to_html(path)``, ``ors-lab compare -o``).

The page shows the view a notebook shows of a ``Comparison`` (``ors_lab.viewer.compare``), drawn by the same
renderer (``static/compare.js``) through a page model (``static/page.js``; the page's entry is
``static/comparison.js``): the card of the figures, the bar chart of the per-task deltas, the grid of the
tasks coloured by delta, and on a click the two runs' episodes of a task side by side, the first difference
marked. The data is inline, gzipped, base64 (unpacked by the browser's ``DecompressionStream``), and the
page's Content-Security-Policy forbids every fetch (the report's, ``ors_lab.viewer.report.CSP``): it opens
from disk, offline. Without its script it still shows the static summary.

The page holds the side-by-side episodes of at most ``DETAILED`` tasks per candidate (the largest deltas
first, then in task order) and says so; the figures, the chart and the grid cover every paired task.
"""

from __future__ import annotations

import base64
import gzip
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ors_lab.analysis.comparison import Comparison
from ors_lab.events import strict_json
from ors_lab.html import escape
from ors_lab.version import __version__
from ors_lab.viewer.compare import CompareState, pair, task_key
from ors_lab.viewer.page import page_html, write_whole
from ors_lab.viewer.report import CSP

__all__ = ["DETAILED", "ComparisonPage", "comparison_html", "write_comparison"]

DETAILED = 300
"""Tasks per candidate whose two runs' episodes the page holds side by side."""


@dataclass(frozen=True)
class ComparisonPage:
    """A comparison's page written: its ``path``, ``size`` in bytes, the paired ``tasks`` and how many of them it
    holds side by side (``detailed``)."""

    path: Path
    size: int
    tasks: int
    detailed: int

    def describe(self) -> str:
        """One line: where, how big, what it holds."""
        size = f"{self.size / 2**20:.1f} MB" if self.size >= 2**20 else f"{self.size / 2**10:.0f} KB"
        held = "every one side by side" if self.detailed == self.tasks else f"{self.detailed:,} of them side by side"
        return f"wrote {self.path} ({size}): {self.tasks:,} paired tasks, {held}"


def comparison_html(comparison: Comparison, *, detailed: int = DETAILED) -> tuple[str, int, int]:
    """The page of ``comparison``, the paired tasks and those it holds side by side."""
    state = CompareState(comparison)
    data = state.snapshot()
    details: dict[str, dict[str, Any]] = {}
    tasks = held = 0
    for n, name in enumerate(comparison.names[1:]):
        mine = comparison.tasks[comparison.tasks["candidate"] == name]
        tasks += len(mine)
        order = mine.assign(size=mine["delta"].abs()).sort_values("size", ascending=False, kind="stable")
        for environment, split, index in order[["environment", "split", "task_index"]].head(detailed).itertuples(
                index=False):  # fmt: skip
            key = task_key(environment, split, index)
            details.setdefault(key, {})[str(n)] = pair(comparison, key, n)
            held += 1
    note = (f"This page holds the two runs' episodes side by side of {min(detailed, tasks):,} tasks per candidate (the "
            "largest deltas first), not of this one: open the comparison in a notebook (ol.compare(...)) to see "
            "them.")  # fmt: skip
    blobs = [("ors-lab-compare", {"data": data, "note": note}), ("ors-lab-compare-detail", details)]
    inline = "".join(
        f'<script type="application/octet-stream" data-encoding="gzip+base64" id="{name}">'
        f"{base64.b64encode(gzip.compress(strict_json(value).encode(), compresslevel=6, mtime=0)).decode()}</script>\n"
        for name, value in blobs
    )
    names = ", ".join(comparison.names[1:])
    title = f"{names} vs {comparison.names[0]}"
    footer = f"Made by ors_lab {__version__} from {', '.join(comparison.names)}, and from nothing else."
    body = f"""<h1>{escape(title)}</h1>
<p class="ol-dim">Runs compared task by task: each task's mean reward over its rollouts, the candidate's minus the
baseline's. It draws itself in the browser, offline: it needs no network and no kernel.</p>
<noscript><p class="ol-err">Scripts are off here: this is the page's static summary.</p></noscript>
<div id="ors-lab-comparison">{state.html()}</div>
<footer>{escape(footer)}</footer>"""
    page = page_html("comparison", title=f"{escape(title)} · ors_lab comparison", csp=CSP, body=body, after=inline)
    return page, tasks, held


def write_comparison(
    comparison: Comparison, path: str | os.PathLike[str], *, detailed: int = DETAILED
) -> ComparisonPage:
    """Write ``comparison``'s page to ``path`` (replacing a file there; its directory made if need be), whole or
    not at all (written beside, then renamed)."""
    path = Path(path)
    page, tasks, held = comparison_html(comparison, detailed=detailed)
    size = write_whole(path, page.encode("utf-8"))
    return ComparisonPage(path, size, tasks, held)
