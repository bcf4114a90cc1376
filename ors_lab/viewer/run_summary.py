"""A run's static summary: the figures a saved notebook, an ``EvalResult`` and a report show, as HTML.

``RunSummary`` holds them (made from a ``RunState`` by ``ors_lab.viewer.run_view.summary``, or
from an evaluation's episodes frame by ``ors_lab.viewer.report.run_summary``); ``run_summary_html``
draws the card (rewards and errors first, ids last), the last errors, a small grid and the per-task
table (``task_table``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ors_lab.html import Markup, card, colour, escape, fmt, styled, table

__all__ = [
    "HTML_CELLS",
    "MAX_ERRORS",
    "TABLE_TASKS",
    "TOKEN_NAMES",
    "RunSummary",
    "TaskRow",
    "f3",
    "run_summary_html",
    "task_table",
    "tokens_text",
    "versus_rows",
]

MAX_ERRORS = 10
"""The last errors listed."""
TABLE_TASKS = 50
"""Tasks listed in the static summary's table."""
HTML_CELLS = 2_000
"""Cells of the static summary's grid."""
TOKEN_NAMES = ("input", "output", "reasoning", "cached")
"""The token counts an agent reports, in order."""


@dataclass
class TaskRow:
    """One task's line of a run's summary."""

    task: Any
    episodes: int
    mean: float | None
    stderr: float | None
    success_rate: float | None
    passes: list[float | None]
    errors: int


@dataclass
class RunSummary:
    """A run's figures as the static summary shows them (from a ``RunState`` or an ``EvalResult``)."""

    environment: str
    split: str
    agent: str | None
    episodes: int
    total: int | None
    tasks: int
    rollouts: int
    mean: float | None
    stderr: float | None
    ks: list[int]
    passes: list[float | None]
    success_rate: float | None
    errors: int
    last_errors: list[tuple[str, str, str]] = field(default_factory=list)
    """(task/rollout, error type, message) of the last errors."""
    tokens: dict[str, int | None] | None = None
    elapsed_s: float | None = None
    rate: float | None = None
    resumed: int = 0
    status: str | None = None
    task_rows: list[TaskRow] = field(default_factory=list)
    grid: list[tuple[Any, list[tuple[float | None, bool]]]] = field(default_factory=list)
    """(task, [(reward or None, failed) per rollout]) for the first tasks."""
    ids: list[tuple[str, str]] = field(default_factory=list)
    note: str | None = None
    """Why success and pass@k are 0 though rewards are positive (``ors_lab.stats.success_note``), or None."""
    versus: list[tuple[str, str]] = field(default_factory=list)
    """The run against its baseline (``versus_rows``), when it had one."""


def _pm(value: float | None, err: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" + (f" ± {err:.3f}" if err is not None else "")


def f3(value: float | None) -> str:
    """A figure to 3 decimals; ``-`` for none."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def tokens_text(tokens: Mapping[str, int | None] | None) -> str | None:
    """Tokens as a person reads them (``840 in, 786 out (636 reasoning, 640 cached)``); None when none were reported."""
    if not tokens or all(tokens.get(name) is None for name in TOKEN_NAMES):
        return None
    main = f"{tokens.get('input') or 0} in, {tokens.get('output') or 0} out"
    extra = [f"{tokens[name]} {name}" for name in ("reasoning", "cached") if tokens.get(name)]
    return main + (f" ({', '.join(extra)})" if extra else "")


def versus_rows(figures: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The card's rows of a run against its baseline (``LiveBaseline.figures``): the mean delta ± its stderr, the
    95% interval, the p-value, wins / losses / ties over the tasks compared."""
    if not figures.get("tasks"):
        return [(f"vs {figures['name']}", "no task compared yet")]
    span = "-" if figures["ci_low"] is None else f"[{figures['ci_low']:.3f}, {figures['ci_high']:.3f}]"
    p = "-" if figures["p_value"] is None else fmt(figures["p_value"])
    return [(f"vs {figures['name']}", f"delta {_pm(figures['mean_delta'], figures['stderr'])}"),
            ("95% interval", span), ("p-value", p),
            ("wins / losses / ties", f"{figures['wins']} / {figures['losses']} / {figures['ties']} of "
                                     f"{figures['tasks']} tasks")]  # fmt: skip


def _grid_html(grid: Sequence[tuple[Any, Sequence[tuple[float | None, bool]]]], more: int) -> str:
    """One column of cells per task (its rollouts downwards), the columns wrapping, as the dashboard draws it."""
    if not grid:
        return ""
    columns = []
    for task, row in grid:
        cells = []
        for rollout, (reward, failed) in enumerate(row):
            what = "failed" if failed else "not run" if reward is None else f"reward {fmt(reward)}"
            style = f"background:{colour(reward, error=failed)}"
            cells.append(f'<div class="ol-cell" style="{style}" title="task {escape(task)} rollout {rollout}: {what}">'
                         "</div>")  # fmt: skip
        columns.append(f'<div class="ol-grid" title="task {escape(task)}">{"".join(cells)}</div>')
    note = f'<div class="ol-dim">and {more} more tasks</div>' if more else ""
    flow = "display:flex; flex-wrap:wrap; gap:2px; margin:4px 0; max-width:620px"
    return f'<div style="{flow}">{"".join(columns)}</div>{note}'


def task_table(rows: Sequence[TaskRow], ks: Sequence[int]) -> Markup:
    """One line per task: its episodes, mean reward ± stderr, success rate, pass@k and errors."""
    headers = ["task", "episodes", "mean reward", "success rate", *[f"pass@{k}" for k in ks], "errors"]
    lines = [(r.task, r.episodes, _pm(r.mean, r.stderr), f3(r.success_rate), *map(f3, r.passes), r.errors)
             for r in rows]  # fmt: skip
    return table(headers, lines, numeric=[False, True, True, True, *[True] * len(ks), True])


def run_summary_html(summary: RunSummary) -> Markup:
    """A run's static summary: a card (rewards and errors first, ids last), the errors, a small grid, the tasks."""
    s = summary
    rows: list[tuple[str, Any]] = [("mean reward", _pm(s.mean, s.stderr))]
    rows += [(f"pass@{k}", f3(value)) for k, value in zip(s.ks, s.passes, strict=True)]
    rows.append(("success rate", f3(s.success_rate)))
    if s.note is not None:
        rows.append(("note", s.note))
    rows += s.versus
    rows.append(("errors", s.errors))
    total = f" of {s.total}" if s.total is not None and s.total != s.episodes else ""
    resumed = f", {s.resumed} resumed" if s.resumed else ""
    rows.append(("episodes", f"{s.episodes}{total} ({s.tasks} tasks x {s.rollouts} rollouts{resumed})"))
    tokens = tokens_text(s.tokens)
    if tokens is not None:
        rows.append(("tokens", tokens))
    if s.elapsed_s is not None:
        rate = f", {s.rate:.1f}/s" if s.rate is not None else ""
        rows.append(("time", f"{s.elapsed_s:.1f} s{rate}"))
    if s.agent:
        rows.append(("agent", s.agent))
    rows += s.ids
    subtitle = s.status if s.status not in (None, "finished") else None
    errors = ""
    if s.last_errors:
        errors = '<div class="ol-title" style="margin-top:6px">last errors</div>' + table(
            ["task/rollout", "type", "error"], [(key, kind, message[:300]) for key, kind, message in s.last_errors]
        )
    more_tasks = max(s.tasks - len(s.task_rows), 0)
    tasks = Markup("")
    if s.task_rows:
        tasks = task_table(s.task_rows, s.ks)
        if more_tasks:
            tasks = Markup(tasks + f'<div class="ol-dim">and {more_tasks} more tasks</div>')
    grid = _grid_html(s.grid, max(s.tasks - len(s.grid), 0))
    return styled(card(f"eval {s.environment}/{s.split}", rows, subtitle=subtitle, extra=errors + grid + tasks))
