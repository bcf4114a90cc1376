"""The comparison view's state: runs compared with a baseline (``ol.compare``), as plain data the front end draws.

``CompareState(comparison)`` is what a notebook shows of a ``Comparison`` and what its page holds
(``ors_lab.viewer.compare_page``), drawn by one renderer, ``static/compare.js``:

- ``snapshot()``: for each candidate, the figures of each metric (``Comparison.summary``: the mean delta and
  its standard error, the 95% interval, the p-value and how it was computed, wins / losses / ties, the
  runs' means), its paired tasks (at most ``TASKS`` of them, in task order: each with both runs' means, the
  delta and its spread, for the bar chart and the grid coloured by delta), its unpaired tasks (counted,
  the first listed) and the notes;
- ``request({"task": key, "candidate": i})``: the two runs' episodes of that task side by side
  (``pair``): for each rollout, its transcript (the agent's turns, their reasoning, text and tool calls,
  the deltas joined by ``ors_lab.transcript``; the steps themselves where the agent streamed nothing)
  and the first step where the two runs differ (``first_difference``: another tool, input or reward);
- ``text()``: the text table ``ors-lab compare`` prints; ``html()``: the static summary a saved notebook keeps.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import pandas as pd

from ors_lab.analysis.comparison import Comparison
from ors_lab.analysis.runs import Run
from ors_lab.events import Event
from ors_lab.html import Markup, card, delta_colour, escape, fmt, styled
from ors_lab.transcript import output_text
from ors_lab.viewer.state import ViewState

__all__ = ["TASKS", "CompareState", "first_difference", "pair", "task_key"]

TASKS = 2_000
"""Paired tasks a snapshot holds per candidate at most (the first, in task order); the figures cover them all."""
UNPAIRED_LISTED = 20
"""Unpaired tasks a snapshot lists per candidate (all are counted)."""
ITEM_CHARS = 1_500
"""A transcript item's text at most (its first 1,000 characters and its last 500)."""
STATIC_CELLS = 500
"""Cells of the static summary's grid."""
_SHOWN = ("tasks", "mean_delta", "stderr", "ci_low", "ci_high", "p_value", "wins", "losses", "ties", "baseline_mean",
          "candidate_mean", "unpaired", "p_method", "warning")  # fmt: skip


def task_key(environment: Any, split: Any, task_index: Any) -> str:
    """A paired task's key: ``environment/split/index``."""
    return f"{environment}/{split}/{task_index}"


def _number(value: Any) -> Any:
    """A figure as JSON holds it: None for a missing one, plain Python numbers."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value


class CompareState(ViewState):
    """A ``Comparison`` as its view shows it (see the module docstring). It takes no events."""

    name: ClassVar[str] = "compare"
    kinds: ClassVar[Iterable[str] | None] = ()

    def __init__(self, comparison: Comparison) -> None:
        self.comparison = comparison
        self.id = uuid.uuid4().hex

    def __repr__(self) -> str:
        return f"CompareState({self.comparison!r})"

    def apply(self, event: Event) -> bool:
        return False

    def done(self) -> bool:
        return True

    # -- the snapshot -----------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        c = self.comparison
        figures = []
        for n in range(len(c.candidates)):
            per_metric = {}
            for metric in c.metrics:
                summary = c.summary(metric)
                row = summary if isinstance(summary, pd.Series) else summary.iloc[n]
                per_metric[metric] = {name: _number(row[name]) for name in _SHOWN}
            figures.append(per_metric)
        return {
            "id": self.id,
            "baseline": c.names[0],
            "candidates": c.names[1:],
            "metrics": list(c.metrics),
            "figures": figures,
            "tasks": [self._tasks(n) for n in range(len(c.candidates))],
            "unpaired": [self._unpaired(name) for name in c.names[1:]],
            "notes": self.notes(),
        }

    def _tasks(self, n: int) -> dict[str, Any]:
        c = self.comparison
        tasks = c.tasks[c.tasks["candidate"] == c.names[1 + n]]
        k = c.k
        columns = ["environment", "split", "task_index", "baseline_mean", "candidate_mean", "delta", "delta_stderr",
                   "baseline_rollouts", "candidate_rollouts", "success_delta", f"pass@{k}_delta"]  # fmt: skip
        rows = [[task_key(*row[:3]), *(_number(v) for v in row[2:])]
                for row in tasks[columns].head(TASKS).itertuples(index=False)]  # fmt: skip
        return {"columns": ["key", *columns[2:]], "rows": rows, "more": max(len(tasks) - TASKS, 0)}

    def _unpaired(self, name: str) -> dict[str, Any]:
        unpaired = self.comparison.unpaired
        mine = unpaired[unpaired["candidate"] == name]
        listed = mine[["environment", "split", "task_index", "only_in"]].head(UNPAIRED_LISTED)
        first = [[task_key(e, s, i), only] for e, s, i, only in listed.itertuples(index=False)]
        return {"count": len(mine), "baseline": int((mine["only_in"] == "baseline").sum()),
                "candidate": int((mine["only_in"] == "candidate").sum()), "first": first}  # fmt: skip

    def notes(self) -> list[str]:
        """What a reader must know: episodes that pair with nothing, a baseline known by its scores only."""
        c = self.comparison
        notes = []
        for run in (c.baseline, *c.candidates):
            if run.skipped:
                notes.append(f"{run.name}: {run.skipped} episodes name no task index (opened with a task spec) and "
                             "pair with nothing")  # fmt: skip
        if c.baseline.episodes is None:
            notes.append(f"{c.baseline.name} is known here by its per-task scores only: its transcripts are in its own "
                         "trace")  # fmt: skip
        return notes

    # -- one task, side by side -------------------------------------------------------------------------

    def request(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """The two runs' episodes of a task side by side (``{"task": key, "candidate": n}``); None otherwise."""
        key = message.get("task")
        if not isinstance(key, str):
            return None
        candidate = message.get("candidate", 0)
        if not isinstance(candidate, int) or not 0 <= candidate < len(self.comparison.candidates):
            return None
        return pair(self.comparison, key, candidate)

    # -- text and HTML ------------------------------------------------------------------------------------

    def text(self) -> str:
        """The comparison as a text table: per candidate, one line per metric; the unpaired tasks; the notes."""
        c = self.comparison
        lines = [f"baseline: {c.names[0]}"]
        header = ["metric", "tasks", "baseline", "candidate", "delta", "stderr", "95% interval", "p", "W/L/T"]
        for n, name in enumerate(c.names[1:]):
            rows = [header]
            for metric in c.metrics:
                f = c.summary(metric)
                row = f if isinstance(f, pd.Series) else f.iloc[n]
                span = "-" if _number(row["ci_low"]) is None else f"[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]"
                rows.append([metric, str(row["tasks"]), _f3(row["baseline_mean"]), _f3(row["candidate_mean"]),
                             _f3(row["mean_delta"], sign=True), _f3(row["stderr"]), span, fmt(_number(row["p_value"])),
                             f"{row['wins']}/{row['losses']}/{row['ties']}"])  # fmt: skip
            widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
            lines += ["", f"candidate: {name}"]
            lines += ["  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                                       enumerate(zip(r, widths, strict=True))).rstrip() for r in rows]  # fmt: skip
            reward = c.figures("reward", n)
            lines.append(f"  p: {reward.p_method}")
            unpaired = self._unpaired(name)
            if unpaired["count"]:
                first = ", ".join(key for key, _ in unpaired["first"][:5])
                lines.append(f"  unpaired: {unpaired['count']} tasks ({unpaired['baseline']} only in the baseline, "
                             f"{unpaired['candidate']} only in the candidate): {first}"
                             + (", ..." if unpaired["count"] > 5 else ""))  # fmt: skip
            if reward.warning:
                lines.append(f"  note: {reward.warning}")
        lines += [f"note: {note}" for note in self.notes()]
        return "\n".join(lines)

    def html(self) -> str:
        """The static summary: a card per candidate (the figures of each metric), its grid of tasks by delta."""
        c = self.comparison
        snapshot = self.snapshot()
        cards = []
        for n, name in enumerate(c.names[1:]):
            figures = snapshot["figures"][n]
            rows = [(metric, _line(figures[metric])) for metric in c.metrics]
            reward = figures["reward"]
            rows += [("p-value", f"{fmt(reward['p_value'])} ({reward['p_method']})"),
                     ("unpaired tasks", snapshot["unpaired"][n]["count"])]  # fmt: skip
            if reward["warning"]:
                rows.append(("note", reward["warning"]))
            cells = "".join(
                f'<div class="ol-cell" style="background:{delta_colour(row[5])}" '
                f'title="{escape(row[0])}: delta {escape(fmt(row[5]))}"></div>'
                for row in snapshot["tasks"][n]["rows"][:STATIC_CELLS]
            )
            grid = Markup(
                f'<div style="display:flex;flex-wrap:wrap;gap:2px;margin:4px 0;max-width:620px">{cells}</div>'
            )
            cards.append(card(f"{name} vs {c.names[0]}", rows, subtitle="paired by task", extra=grid))
        notes = "".join(f'<div class="ol-dim">{escape(note)}</div>' for note in snapshot["notes"])
        return styled("".join(cards) + notes)


def _f3(value: Any, *, sign: bool = False) -> str:
    value = _number(value)
    if value is None:
        return "-"
    return f"{value:+.3f}" if sign else f"{value:.3f}"


def _line(f: dict[str, Any]) -> str:
    """One metric's figures on a line: ``-0.200 ± 0.133 [-0.461, 0.061], 0/2/8 of 10 tasks``."""
    if f["mean_delta"] is None:
        return "no paired task"
    err = "" if f["stderr"] is None else f" ± {f['stderr']:.3f}"
    span = "" if f["ci_low"] is None else f" [{f['ci_low']:+.3f}, {f['ci_high']:+.3f}]"
    return f"{f['mean_delta']:+.3f}{err}{span}, {f['wins']}/{f['losses']}/{f['ties']} of {f['tasks']} tasks"


# -- the episodes of one task, side by side ----------------------------------------------------------------


def pair(comparison: Comparison, key: str, candidate: int = 0) -> dict[str, Any]:
    """The two runs' episodes of the task ``key`` side by side, for candidate ``candidate``: each run's episodes
    (rollouts, in order) with their transcripts, and for each rollout the first step where they differ."""
    environment, split, index = _parse(key)
    runs = [comparison.baseline, comparison.candidates[candidate]]
    sides = [_side(run, environment, split, index) for run in runs]
    differences = []
    for b, c in zip(sides[0]["episodes"], sides[1]["episodes"], strict=False):
        differences.append({"rollouts": [b["rollout"], c["rollout"]], **first_difference(b["steps"], c["steps"])})
    return {"type": "pair", "key": key, "candidate": candidate, "names": [comparison.names[0],
            comparison.names[1 + candidate]], "runs": sides, "differences": differences}  # fmt: skip


def _parse(key: str) -> tuple[str, str, int]:
    environment, split, index = key.rsplit("/", 2)
    return environment, split, int(index)


def _side(run: Run, environment: str, split: str, index: int) -> dict[str, Any]:
    if run.episodes is None:
        return {"name": run.name, "episodes": [], "missing": "this run is known here by its per-task scores only: its "
                "transcripts are in its own trace"}  # fmt: skip
    e = run.episodes
    mine = e[(e["environment"] == environment) & (e["split"] == split) & (e["task_index"] == index)]
    mine = mine.sort_values("rollout", kind="stable", na_position="last")
    episodes = []
    for sid, rollout, reward, success in mine[["session_id", "rollout", "reward", "success"]].itertuples(index=False):
        items, steps = _transcript(run, str(sid))
        episodes.append({"session_id": str(sid), "rollout": _number(rollout), "reward": _number(reward),
                         "success": _number(success), "items": items, "steps": steps})  # fmt: skip
    missing = None if run.trace is not None else "this run recorded no trace: its transcripts are not kept"
    return {"name": run.name, "episodes": episodes, "missing": missing}


def _transcript(run: Run, session_id: str) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """One episode's items (turns, reasoning, text, steps, errors) and its steps ``[tool, input, reward]``."""
    items: list[dict[str, Any]] = []
    steps: list[list[Any]] = []
    stream = run.stream(session_id)
    if stream is not None:
        for turn in stream.turns():
            items.append({"kind": "turn", "text": turn.name or f"turn {turn.number}"})
            for part in turn.parts:
                if part.kind == "tool-call":
                    steps.append([part.tool, _canonical(part.arguments), part.reward])
                    shown = output_text(part.output) if part.output is not None else part.error
                    items.append({"kind": "step", "step": len(steps), "text": _cut(part.describe()),
                                  "output": _cut(shown or ""), "reward": part.reward, "error": part.error})  # fmt: skip
                elif part.kind in ("reasoning", "text", "error"):
                    items.append({"kind": part.kind, "text": _cut(part.error or part.text if part.kind == "error"
                                                                  else part.text)})  # fmt: skip
        return items, steps
    frame = run.steps(session_id)
    for tool, given, reward, ok in ([] if frame is None else frame[["tool", "input", "reward", "ok"]].itertuples(
            index=False)):  # fmt: skip
        steps.append([str(tool), _canonical(given), _number(reward)])
        items.append({"kind": "step", "step": len(steps), "text": _cut(f"{tool}({given})"), "output": "",
                      "reward": _number(reward), "error": None if ok else "not ok"})  # fmt: skip
    return items, steps


def first_difference(base: Sequence[Sequence[Any]], cand: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """The first step (from 1) where two episodes' steps (``[tool, input, reward]`` each) differ, and what
    differs (``tool``, ``input``, ``reward``, or ``steps``: one episode has no such step); ``step`` None when none
    differs."""
    for n, (b, c) in enumerate(zip(base, cand, strict=False), start=1):
        for what, x, y in zip(("tool", "input", "reward"), b, c, strict=True):
            if x != y and not (x is None and y is None):
                return {"step": n, "what": what, "baseline": _said(what, x), "candidate": _said(what, y)}
    if len(base) != len(cand):
        n = min(len(base), len(cand)) + 1
        return {"step": n, "what": "steps", "baseline": f"{len(base)} steps", "candidate": f"{len(cand)} steps"}
    return {"step": None, "what": None}


def _said(what: str, value: Any) -> str:
    return fmt(value) if what == "reward" else str(value)


def _canonical(arguments: Any) -> str:
    """A tool call's input as comparable text: its JSON with sorted keys, else the text as it is."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    try:
        return json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (ValueError, TypeError, RecursionError):
        return text.strip()


def _cut(text: str) -> str:
    if len(text) <= ITEM_CHARS:
        return text
    return f"{text[:1000]} … [{len(text) - ITEM_CHARS} characters] … {text[-500:]}"
