"""The run's view per task: ``tasks`` (each task's episodes aggregated, pass@k) and ``errors``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.frames.columns import EPISODES_COLUMNS, ERRORS_COLUMNS, TASKS_COLUMNS, TOKENS, pass_columns
from ors_lab.analysis.frames.source import _arrow, _numbered, _pandas, _typed
from ors_lab.analysis.reduce import mean, pass_at_k, stderr

__all__ = ["default_ks", "errors_frame", "tasks_frame"]


_TASK_KEYS = ["environment", "split", "task_index", "task"]


def _aggregates(episodes: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Per group of ``keys`` (in the order the groups first appear; all the episodes one group when there
    are no keys), grouped by Arrow: episodes, mean reward and its standard error (exact sums, over
    each group's rewards), success, finished, steps, errors, tokens, and ``_successes``."""
    names = list(dict.fromkeys([*keys, "reward", "success", "finished", "steps", "error", *TOKENS]))
    table = pa.table({name: _arrow(episodes[name], EPISODES_COLUMNS[name]) for name in names})
    table = _numbered(table.append_column("_all", pa.array(np.zeros(len(episodes), dtype=np.int8))))
    for name in ("success", "finished"):
        table = table.append_column(f"_{name}", pc.cast(pc.fill_null(table[name], False), pa.int64()))
    grouped = table.group_by(list(keys) or ["_all"], use_threads=False).aggregate(
        [
            ("_row", "min"),
            ("reward", "list"),
            ("reward", "count", pc.CountOptions("all")),
            ("_success", "sum"),
            ("_finished", "sum"),
            ("steps", "sum"),
            ("error", "count"),
            *((name, "sum") for name in TOKENS),
        ]
    )
    grouped = grouped.take(pc.sort_indices(grouped["_row_min"]))
    n = grouped["reward_count"].to_numpy()
    rewards = grouped["reward_list"].to_pylist()
    out = _pandas(grouped.select(list(keys))) if keys else pd.DataFrame(index=pd.RangeIndex(len(n)))
    out["episodes"] = n
    out["mean_reward"] = [mean([float(r) for r in values]) for values in rewards]
    out["stderr"] = [stderr([float(r) for r in values]) for values in rewards]
    for name in ("success", "finished"):
        out[f"{name}_rate"] = grouped[f"_{name}_sum"].to_numpy() / n
    out["mean_steps"] = grouped["steps_sum"].to_numpy(zero_copy_only=False) / n
    out["errors"] = grouped["error_count"].to_numpy()
    for name in TOKENS:
        out[name] = pd.Series(grouped[f"{name}_sum"].to_numpy(zero_copy_only=False), dtype="object").where(
            grouped[f"{name}_sum"].is_valid().to_numpy(zero_copy_only=False), None)  # fmt: skip
    out["_successes"] = grouped["_success_sum"].to_numpy()
    return out


def default_ks(episodes: pd.DataFrame) -> list[int]:
    """1, and the number of rollouts per task (the largest rollout number + 1, else the most episodes a task has)."""
    if episodes.empty:
        return [1]
    rollouts = episodes["rollout"].dropna()
    k = int(rollouts.max()) + 1 if len(rollouts) else int(episodes.groupby(["environment", "split", "task_index"],
                                                                            dropna=False).size().max())  # fmt: skip
    return sorted({1, k})


def tasks_frame(episodes: pd.DataFrame, ks: Sequence[int] | None = None) -> pd.DataFrame:
    """One row per task (environment, split, task index or spec): its episodes aggregated, and pass@k."""
    ks = default_ks(episodes) if ks is None else ks
    tasks = _aggregates(episodes, _TASK_KEYS)
    for k in ks:
        tasks[f"pass@{k}"] = [pass_at_k(int(n), int(c), k) for n, c in zip(tasks["episodes"], tasks["_successes"],
                                                                             strict=True)]  # fmt: skip
    return _typed(tasks, {**TASKS_COLUMNS, **pass_columns(ks)})


def errors_frame(episodes: pd.DataFrame) -> pd.DataFrame:
    """One row per episode that failed, with the error's type and message."""
    return _typed(episodes[episodes["error"].notna()].reset_index(drop=True), ERRORS_COLUMNS)
