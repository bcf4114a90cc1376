"""The run in one row: ``summary`` (a ``Summary``, shown as a short vertical table), and the error types
and the threshold's note it holds."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ors_lab.analysis.frames.columns import SUMMARY_COLUMNS, TOKENS, pass_columns
from ors_lab.analysis.frames.source import _missing, _typed
from ors_lab.analysis.frames.tasks import _aggregates, default_ks, tasks_frame
from ors_lab.analysis.reduce import mean
from ors_lab.stats import success_note

__all__ = ["Summary", "error_types", "summary_frame", "threshold_note"]


class Summary(pd.DataFrame):
    """A run's summary: a one-row DataFrame (columns and dtypes declared in ``SUMMARY_COLUMNS``) that
    shows itself as a short vertical table, one line per figure, so that nothing is clipped.

    It is a DataFrame in every other way: ``summary()["mean_reward"]``, ``summary().iloc[0]``.
    What it shows is what indexes it: each line is a column's name and its value (numbers to 4
    significant digits; tokens no agent reported, and the error types and note when there are none,
    left out), with no header of its own, so every name shown is a ``summary()[name]``.
    ``vertical()`` is that table as a plain frame of its own (one ``value`` column indexed by the
    names). Whatever is derived from it (a selection, a copy) is a plain DataFrame.
    """

    @property
    def _constructor(self) -> type[pd.DataFrame]:
        return pd.DataFrame

    def vertical(self) -> pd.DataFrame:
        """The figures, one row each: a ``value`` column of text, indexed by the figure's name (the column's)."""
        if len(self) != 1:
            return pd.DataFrame(self).T
        shown: dict[str, str] = {}
        for name, value in pd.DataFrame(self).iloc[0].items():
            if name in (*TOKENS, "error_types", "note") and _missing(value):
                continue  # tokens no agent reported; the types of errors there were not; nothing to note
            shown[str(name)] = _shown(value)
        return pd.DataFrame({"value": shown})

    def __repr__(self) -> str:
        return self.vertical().to_string(header=len(self) != 1)

    def _repr_html_(self) -> str | None:
        with pd.option_context("display.max_colwidth", None):  # the note is a sentence: shown whole
            return self.vertical().to_html(header=len(self) != 1, notebook=True)


def _shown(value: Any) -> str:
    if _missing(value):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def error_types(episodes: pd.DataFrame) -> str | None:
    """The failed episodes' error types with their counts, the most common first
    (``"ReplayMismatchError ×10, TimeoutError ×2"``); None when none failed."""
    failed = episodes[episodes["error"].notna()]
    if failed.empty:
        return None
    counts = Counter("error" if _missing(kind) else str(kind) for kind in failed["error_type"])
    return ", ".join(f"{kind} ×{count}" for kind, count in counts.most_common())


def threshold_note(episodes: pd.DataFrame, success_threshold: float | None = None) -> str | None:
    """Why success and pass@k are 0 though rewards are positive, naming ``success_threshold=``
    (``ors_lab.stats.success_note``: the given threshold, else its default); None when not so."""
    if episodes.empty:
        return None
    clean = episodes[episodes["error"].isna()]
    rewards = [float(value) for value in clean["reward"] if not _missing(value)]
    successes = int(episodes["success"].fillna(False).astype(bool).sum())
    return success_note(len(episodes), successes, rewards, success_threshold)


def summary_frame(episodes: pd.DataFrame, ks: Sequence[int] | None = None, *,
                  success_threshold: float | None = None) -> Summary:  # fmt: skip
    """The run in one row: episodes, tasks, mean reward and its stderr, success rate, pass@k (mean over tasks),
    and a ``note`` when no episode succeeded though rewards are positive (``threshold_note``: the
    evaluation's ``success_threshold`` when given)."""
    ks = default_ks(episodes) if ks is None else ks
    tasks = tasks_frame(episodes, ks)
    row: dict[str, Any] = {
        "environments": ", ".join(map(str, episodes["environment"].dropna().unique())),
        "splits": ", ".join(map(str, episodes["split"].dropna().unique())),
        "tasks": len(tasks),
        **_overall(episodes),
    }
    row["error_types"] = error_types(episodes)
    row["note"] = threshold_note(episodes, success_threshold)
    for k in ks:
        known = tasks[f"pass@{k}"].dropna()
        row[f"pass@{k}"] = mean([float(v) for v in known]) if len(known) else None
    return Summary(_typed(pd.DataFrame([row]), {**SUMMARY_COLUMNS, **pass_columns(ks)}))


def _overall(episodes: pd.DataFrame) -> dict[str, Any]:
    """``_aggregates`` of all the episodes in one group (no episodes: none, no mean, no rates)."""
    if episodes.empty:
        return {"episodes": 0, "errors": 0}
    row = _aggregates(episodes, []).drop(columns="_successes").iloc[0]
    return {str(name): value for name, value in row.items()}
