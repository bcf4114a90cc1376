"""A run's dashboard drawn from its folded events (``RunFold``): the front end's data, the text, the summary.

- ``snapshot(run)``: the JSON ``static/run.js`` draws: done / total, the rate and ETA, the figures,
  tokens per second, the errors, the grid (at most ``GRID_CELLS`` cells, whole tasks), the reward
  histogram and the mean over time as numbers (the front end draws them as inline SVG with DOM
  calls, no charting library), "now running" panes: the last ``PANE_PARTS`` parts of at most
  ``MAX_PANES`` live episodes, ``PANE_CHARS`` of each;
- ``request(run, {"transcript": key})``: a finished episode's transcript, or why there is none;
- ``text(run)``: the progress line ``ors-lab eval`` and a terminal show
  (``eval lab/train: 6/6 episodes  12.0/s  mean reward 0.500  errors 0``, then, against a baseline,
  ``vs base.parquet: delta -0.050 [-0.120, 0.020] over 12 tasks (1/3/8)``; once the run has ended,
  the note and the errors follow it on lines of their own);
- ``summary(run)``: the figures of the static summary (``run_summary_html``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ors_lab.stats import mean, pass_at_k, stderr
from ors_lab.viewer.run_fold import KEEP_TRANSCRIPTS, RunFold
from ors_lab.viewer.run_summary import HTML_CELLS, TABLE_TASKS, RunSummary, TaskRow, f3, versus_rows

__all__ = [
    "ERROR_CHARS",
    "GRID_CELLS",
    "MAX_PANES",
    "PANE_CHARS",
    "PANE_PARTS",
    "request",
    "snapshot",
    "summary",
    "text",
]

MAX_PANES = 3
"""Live episodes shown at once."""
PANE_PARTS = 8
"""The last parts of a live episode a pane shows."""
PANE_CHARS = 400
"""The last characters of each part a pane shows."""
ERROR_CHARS = 2000
"""The most of an error's message the text of an ended run shows."""
GRID_CELLS = 20_000
"""Grid cells sent to the front end at most (whole tasks, the first ones)."""


def snapshot(run: RunFold) -> dict[str, Any]:
    """The front end's data (``static/run.js``): the figures, the grid, the histogram, the line, the panes."""
    figures = run.figures()
    elapsed = run.elapsed()
    rate = run.rate()
    left = run.total - run.episodes
    tokens = run.tokens()
    rows = max(GRID_CELLS // max(run.rollouts, 1), 1)
    shown_tasks = run.tasks[:rows]
    return {
        "id": run.id,
        "label": run.label,
        "environment": run.environment,
        "split": run.split,
        "agent": run.agent,
        "status": run.status,
        "done": run.episodes,
        "total": run.total,
        "resumed": run.resumed,
        "running": len(run._running),
        "elapsed_s": round(elapsed, 3),
        "rate": round(rate, 3),
        "eta_s": round(left / rate, 1) if rate > 0 and left > 0 and run.ended is None else None,
        "mean": figures["mean"],
        "stderr": figures["stderr"],
        "success_rate": figures["success_rate"],
        "pass": [[k, value] for k, value in zip(run.ks, figures["pass"], strict=True)],
        "note": run.note(),
        "errors": run.errors,
        "last_errors": [list(error) for error in run.last_errors],
        "tokens": tokens,
        "tokens_per_s": round(run._run_tokens / max(elapsed, 1e-9), 1) if tokens or run._run_tokens else None,
        "grid": {
            "rollouts": run.rollouts,
            "tasks": _ranges(shown_tasks),
            "cells": run._grid[: len(shown_tasks) * run.rollouts].decode("ascii"),
            "more_tasks": len(run.tasks) - len(shown_tasks),
            **({"deltas": run._deltas[: len(shown_tasks) * run.rollouts].decode("ascii")} if run.baseline else {}),
        },
        "hist": {"lo": run._hist_range[0], "hi": run._hist_range[1], "counts": list(run._hist)},
        "series": {"t": list(run._series_t), "mean": list(run._series_v)},
        "panes": _panes(run),
        "kept": len(run._transcripts),
        "baseline": run.baseline.figures(run.ended is not None) if run.baseline is not None else None,
    }


def _panes(run: RunFold) -> list[dict[str, Any]]:
    """The live episodes shown: those already shown first (panes do not jump), then the latest started."""
    running = run._running
    shown = [sid for sid in run._shown if sid in running]
    if len(shown) < MAX_PANES:
        for sid in reversed(running):
            if len(shown) >= MAX_PANES:
                break
            if sid not in shown:
                shown.append(sid)
    run._shown = shown
    now = run.clock()
    panes = []
    for sid in shown:
        live = running[sid]
        items = live.items[-PANE_PARTS:]
        panes.append({
            "session_id": sid,
            "key": None if live.key is None else f"{live.key[0]}/{live.key[1]}",
            "elapsed_s": round(now - live.started, 1),
            "reward": live.reward,
            "parts": [item.wire(PANE_CHARS) for item in items],
        })  # fmt: skip
    return panes


def request(run: RunFold, message: dict[str, Any]) -> dict[str, Any] | None:
    """A finished episode's transcript (``{"transcript": key}``), or why there is none."""
    key = message.get("transcript")
    if not isinstance(key, str):
        return None
    found = run._transcripts.get(key)
    if found is not None:
        return {"transcript": found}
    index = run._cell.get(_parse_key(key)) if _parse_key(key) is not None else None  # type: ignore[arg-type]
    outcome = run._outcomes[index] if index is not None else None
    why = ("resumed from the trace: its events are in the trace" if outcome is not None and index is not None
           else "not run yet" if index is not None else "not an episode of this run")  # fmt: skip
    if outcome is not None and run.episodes - run.resumed > KEEP_TRANSCRIPTS:
        why = f"not kept (the last {KEEP_TRANSCRIPTS} are): its events are in the trace, if the run recorded one"
    return {"transcript": {"key": key, "missing": why}}


def text(run: RunFold) -> str:
    """The progress line; once the run has ended, the note and the errors on lines of their own."""
    figures = run.figures()
    done, ran = run.episodes, run.episodes - run.resumed
    average = f3(figures["mean"])
    resumed = f" ({run.resumed} resumed)" if run.resumed else ""
    line = (
        f"{run.label}: {done}/{run.total} episodes{resumed}  {ran / max(run.elapsed(), 1e-9):.1f}/s  "
        f"mean reward {average}  errors {run.errors}"
    )
    tokens = run.tokens()
    if tokens is not None:
        line += f"  tokens {(tokens['input'] or 0) + (tokens['output'] or 0)}"
    if run.baseline is not None:
        line += f"  {run.baseline.text(run.ended is not None)}"
    note = run.note() if run.status != "running" else None
    if note is not None:
        line += f"\n  {note}"
    if run.status != "running" and run.errors and run.last_errors:
        line += "\n" + _errors_text(run)
    return line


def _errors_text(run: RunFold) -> str:
    """The run's errors once it has ended: their types with their counts, and the last one's message."""
    kinds = Counter(o.error_type or "error" for o in run._outcomes if o is not None and o.error is not None)
    key, kind, message = run.last_errors[-1]
    if len(message) > ERROR_CHARS:
        message = message[: ERROR_CHARS - 1] + "…"
    counts = ", ".join(f"{name} ×{count}" for name, count in kinds.most_common())
    last = "\n".join("    " + line for line in f"{kind}: {message}".splitlines())
    return f"  errors: {counts}; the last, of task/rollout {key}:\n{last}"


def summary(run: RunFold) -> RunSummary:
    """The figures of the static summary."""
    figures = run.figures()
    task_rows = []
    grid: list[tuple[Any, list[tuple[float | None, bool]]]] = []
    for n, task in enumerate(run.tasks):
        cells = run._outcomes[n * run.rollouts : (n + 1) * run.rollouts]
        done = [o for o in cells if o is not None]
        if n < TABLE_TASKS:
            episodes, successes, errors = run._per_task[task]
            rewards = [o.reward for o in done]
            passes = [pass_at_k(episodes, successes, k) if episodes else None for k in run.ks]
            task_rows.append(TaskRow(task, episodes, mean(rewards), stderr(rewards),
                                     successes / episodes if episodes else None, passes, errors))  # fmt: skip
        if (n + 1) * run.rollouts <= HTML_CELLS:
            grid.append((task, [(None, False) if o is None else (o.reward, o.error is not None) for o in cells]))
    return RunSummary(
        environment=run.environment,
        split=run.split,
        agent=run.agent,
        episodes=run.episodes,
        total=run.total,
        tasks=len(run.tasks),
        rollouts=run.rollouts,
        mean=figures["mean"],
        stderr=figures["stderr"],
        ks=list(run.ks),
        passes=list(figures["pass"]),
        success_rate=figures["success_rate"],
        errors=run.errors,
        last_errors=list(run.last_errors),
        tokens=run.tokens(),
        elapsed_s=run.elapsed(),
        rate=run.rate(),
        resumed=run.resumed,
        status=run.status,
        task_rows=task_rows,
        grid=grid,
        note=run.note(),
        versus=versus_rows(run.baseline.figures(run.ended is not None)) if run.baseline is not None else [],
    )


def _ranges(values: Sequence[int]) -> list[list[int]]:
    """Consecutive runs of integers as ``[first, last]`` pairs (the grid's task indices, compactly)."""
    out: list[list[int]] = []
    for value in values:
        if out and value == out[-1][1] + 1:
            out[-1][1] = value
        else:
            out.append([value, value])
    return out


def _parse_key(key: str) -> tuple[int, int] | None:
    task, _, rollout = key.partition("/")
    try:
        return int(task), int(rollout)
    except ValueError:
        return None
