"""Episode records and the ``EvalResult`` DataFrames built from them.

How a run's numbers are reduced (the one place this is decided):

- a **step** is a tool call that returned a result, ``ok`` true or false; its reward is the
  result's ``reward`` (None when the tool gave none);
- an **episode** is one session on one (task, rollout). ``total_reward`` is the sum of its steps'
  rewards, ``final_reward`` the last reward given (both NA when no step gave one), ``finished``
  whether a result said so. Its ``reward`` is ``total_reward`` by default (``reward="sum"``), or
  ``final_reward`` (``"final"``), ``max`` (``"max"``), or a function of the steps; an episode with
  no reward counts 0.0. ``success`` is ``reward >= success_threshold`` (1.0 by default);
- a **task** aggregates its episodes: mean reward, its standard error (sample standard deviation
  over sqrt(n); NA for one episode), success rate, and pass@k with the unbiased estimator
  ``1 - C(n - c, k) / C(n, k)`` (n episodes, c successes; NA when k > n);
- an episode that failed (an infrastructure error after the client's retries, an agent exception,
  the timeout) has ``error`` set, keeps the steps it made, and counts reward 0.0 and no success.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "EPISODES_COLUMNS",
    "ERRORS_COLUMNS",
    "STEPS_COLUMNS",
    "TASKS_COLUMNS",
    "EpisodeRecord",
    "EvalResult",
    "Reduction",
    "StepRecord",
    "episode_records",
    "pass_at_k",
    "reduce_reward",
]

Reduction = str | Callable[[Sequence["StepRecord"]], float | None]
REDUCTIONS = ("sum", "final", "max")


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step of an episode, as the DataFrames and the trace's ``episode`` rows hold it."""

    step: int
    call: int
    tool: str
    input: str  # compact JSON
    ok: bool
    reward: float | None
    finished: bool
    error: str | None
    duration_ms: float


@dataclass(frozen=True, slots=True)
class EpisodeRecord:
    """One (task, rollout) episode's outcome. ``to_json`` / ``from_json`` round-trip it exactly."""

    environment: str
    split: str
    task_index: int
    rollout: int
    session_id: str
    reward: float
    total_reward: float | None
    final_reward: float | None
    finished: bool
    success: bool
    finish_reason: str
    duration_s: float
    started: float  # wall clock, seconds since the epoch
    error: str | None = None
    error_type: str | None = None
    steps: tuple[StepRecord, ...] = field(default=())

    @property
    def key(self) -> tuple[str, str, int, int]:
        """What resume matches on: environment, split, task index, rollout."""
        return (self.environment, self.split, self.task_index, self.rollout)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> EpisodeRecord:
        value = json.loads(text)
        value["steps"] = tuple(StepRecord(**step) for step in value.get("steps", ()))
        return cls(**value)


def episode_records(table: Any) -> list[EpisodeRecord]:
    """The ``episode`` rows of a trace's Arrow table, as records, in the order they were written."""
    import pyarrow.compute as pc

    rows = table.filter(pc.equal(table["kind"], "episode")).column("data").to_pylist()
    return [EpisodeRecord.from_json(text) for text in rows]


def reduce_reward(steps: Sequence[StepRecord], reduction: Reduction) -> tuple[float | None, float | None, float]:
    """``(total_reward, final_reward, reward)`` of an episode's steps (see the module docstring)."""
    rewards = [s.reward for s in steps if s.reward is not None]
    total = math.fsum(rewards) if rewards else None
    final = rewards[-1] if rewards else None
    if callable(reduction):
        value = reduction(steps)
    elif reduction == "sum":
        value = total
    elif reduction == "final":
        value = final
    elif reduction == "max":
        value = max(rewards) if rewards else None
    else:
        raise ValueError(f"unknown reward reduction {reduction!r}; use one of {', '.join(REDUCTIONS)} or a function")
    return total, final, 0.0 if value is None else float(value)


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The unbiased pass@k of n samples with c successes (None when k > n)."""
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, not {k}")
    if k > n:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


STEPS_COLUMNS = {
    "environment": "string",
    "split": "string",
    "task_index": "int64",
    "rollout": "int64",
    "session_id": "string",
    "step": "int64",
    "call": "int64",
    "tool": "string",
    "input": "string",
    "ok": "bool",
    "reward": "float64",
    "finished": "bool",
    "error": "string",
    "duration_ms": "float64",
}
EPISODES_COLUMNS = {
    "environment": "string",
    "split": "string",
    "task_index": "int64",
    "rollout": "int64",
    "session_id": "string",
    "reward": "float64",
    "total_reward": "float64",
    "final_reward": "float64",
    "finished": "bool",
    "success": "bool",
    "steps": "int64",
    "finish_reason": "string",
    "duration_s": "float64",
    "started": "timestamp[us, tz=UTC]",
    "error": "string",
    "error_type": "string",
}
TASKS_COLUMNS = {
    "environment": "string",
    "split": "string",
    "task_index": "int64",
    "episodes": "int64",
    "mean_reward": "float64",
    "stderr": "float64",
    "success_rate": "float64",
    "finished_rate": "float64",
    "mean_steps": "float64",
    "errors": "int64",
}
ERRORS_COLUMNS = {
    "environment": "string",
    "split": "string",
    "task_index": "int64",
    "rollout": "int64",
    "session_id": "string",
    "error_type": "string",
    "error": "string",
    "steps": "int64",
}


def _frame(rows: list[dict[str, Any]], columns: Mapping[str, str]) -> pd.DataFrame:
    """Rows as a DataFrame with exactly ``columns``, Arrow-backed, declared dtypes."""
    import pandas as pd
    import pyarrow as pa

    arrays = {}
    for name, kind in columns.items():
        arrow_type = pa.timestamp("us", tz="UTC") if kind.startswith("timestamp") else pa.type_for_alias(kind)
        values = [row.get(name) for row in rows]
        if kind.startswith("timestamp"):
            values = [None if v is None else int(v * 1_000_000) for v in values]
        arrays[name] = pd.Series(pa.array(values, type=arrow_type), dtype=pd.ArrowDtype(arrow_type))
    return pd.DataFrame(arrays, index=pd.RangeIndex(len(rows)))


class EvalResult:
    """What ``evaluate`` returns: ``episodes``, ``steps``, ``tasks``, ``errors`` DataFrames and ``summary()``.

    ``records`` are the episodes in (task, rollout) order, one per pair, resumed ones included.
    """

    def __init__(
        self,
        records: Sequence[EpisodeRecord],
        *,
        environment: str,
        split: str,
        rollouts: int,
        success_threshold: float = 1.0,
        trace: str | None = None,
        elapsed_s: float | None = None,
        resumed: int = 0,
    ) -> None:
        self.records = sorted(records, key=lambda r: (r.task_index, r.rollout))
        self.environment = environment
        self.split = split
        self.rollouts = rollouts
        self.success_threshold = success_threshold
        self.trace = trace
        self.elapsed_s = elapsed_s
        self.resumed = resumed

    def __len__(self) -> int:
        return len(self.records)

    @property
    def episodes(self) -> pd.DataFrame:
        """One row per (task, rollout): reward (reduced), total and final reward, finished, success, steps, error."""
        rows = []
        for r in self.records:
            row = asdict(r)
            row["steps"] = len(r.steps)
            rows.append(row)
        return _frame(rows, EPISODES_COLUMNS)

    @property
    def steps(self) -> pd.DataFrame:
        """One row per tool call that returned a result, with its reward and finished flag."""
        rows = [
            {
                "environment": r.environment,
                "split": r.split,
                "task_index": r.task_index,
                "rollout": r.rollout,
                "session_id": r.session_id,
                **asdict(step),
            }
            for r in self.records
            for step in r.steps
        ]
        return _frame(rows, STEPS_COLUMNS)

    def pass_at(self, k: int) -> pd.Series:
        """pass@k per task (unbiased estimator), indexed by task index."""
        import pandas as pd

        return pd.Series(_pass_at(self._by_task(), k), name=f"pass@{k}", dtype="float64")

    @property
    def tasks(self) -> pd.DataFrame:
        """One row per task: episodes, mean reward, stderr, success rate, pass@1 (and pass@k for k rollouts)."""
        ks = self._ks()
        by_task = self._by_task()
        passes = {k: _pass_at(by_task, k) for k in ks}
        rows = [
            {
                "environment": self.environment,
                "split": self.split,
                "task_index": index,
                "episodes": len(rs),
                **_aggregate(rs),
                **{f"pass@{k}": passes[k][index] for k in ks},
            }
            for index, rs in by_task.items()
        ]
        return _frame(rows, {**TASKS_COLUMNS, **{f"pass@{k}": "float64" for k in ks}})

    @property
    def errors(self) -> pd.DataFrame:
        """One row per episode that failed, with the error's type and message."""
        rows = [{**asdict(r), "steps": len(r.steps)} for r in self.records if r.error is not None]
        return _frame(rows, ERRORS_COLUMNS)

    def summary(self) -> pd.DataFrame:
        """The run in one row: episodes, tasks, mean reward and its stderr, success rate, pass@k, errors."""
        return _frame([self._summary_row()], self._summary_columns())

    def _summary_columns(self) -> dict[str, str]:
        columns = {
            "environment": "string",
            "split": "string",
            "episodes": "int64",
            "tasks": "int64",
            "mean_reward": "float64",
            "stderr": "float64",
            "success_rate": "float64",
        }
        columns.update({f"pass@{k}": "float64" for k in self._ks()})
        columns.update({"finished_rate": "float64", "mean_steps": "float64", "errors": "int64", "elapsed_s": "float64"})
        return columns

    def _summary_row(self) -> dict[str, Any]:
        by_task = self._by_task()
        row: dict[str, Any] = {
            "environment": self.environment,
            "split": self.split,
            "episodes": len(self.records),
            "tasks": len(by_task),
            **_aggregate(self.records),
            "elapsed_s": self.elapsed_s,
        }
        for k in self._ks():
            known = [v for v in _pass_at(by_task, k).values() if v is not None]
            row[f"pass@{k}"] = math.fsum(known) / len(known) if known else None  # the mean over tasks
        return row

    def _ks(self) -> list[int]:
        return sorted({1, self.rollouts})

    def _by_task(self) -> dict[int, list[EpisodeRecord]]:
        by_task: dict[int, list[EpisodeRecord]] = {}
        for record in self.records:
            by_task.setdefault(record.task_index, []).append(record)
        return by_task

    def table(self) -> str:
        """The summary as aligned text (what ``ors-lab eval`` prints)."""
        row = self._summary_row()
        lines = []
        for name in self._summary_columns():
            value = row[name]
            if value is None:
                shown = "-"
            elif isinstance(value, float):
                shown = f"{value:.3f}" if name != "elapsed_s" else f"{value:.1f}"
            else:
                shown = str(value)
            lines.append(f"  {name:<14} {shown}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        row = self._summary_row()
        if not self.records:
            return f"EvalResult({self.environment}/{self.split}: no episodes)"
        passes = ", ".join(f"pass@{k} {row[f'pass@{k}']:.3f}" for k in self._ks() if row[f"pass@{k}"] is not None)
        stderr = f" ± {row['stderr']:.3f}" if row["stderr"] is not None else ""
        return (
            f"EvalResult({self.environment}/{self.split}: {row['episodes']} episodes over {row['tasks']} tasks "
            f"x {self.rollouts} rollouts; mean reward {row['mean_reward']:.3f}{stderr}; {passes}; "
            f"{row['errors']} errors)"
        )


def _aggregate(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Mean reward, its standard error, success, finished and error counts of some episodes (None when none)."""
    n = len(records)
    rewards = [r.reward for r in records]
    return {
        "mean_reward": math.fsum(rewards) / n if n else None,
        "stderr": _stderr(rewards),
        "success_rate": sum(r.success for r in records) / n if n else None,
        "finished_rate": sum(r.finished for r in records) / n if n else None,
        "mean_steps": sum(len(r.steps) for r in records) / n if n else None,
        "errors": sum(r.error is not None for r in records),
    }


def _pass_at(by_task: Mapping[int, Sequence[EpisodeRecord]], k: int) -> dict[int, float | None]:
    """pass@k of each task's episodes."""
    return {index: pass_at_k(len(rs), sum(r.success for r in rs), k) for index, rs in by_task.items()}


def _stderr(values: Sequence[float]) -> float | None:
    n = len(values)
    if n < 2:
        return None
    mean = math.fsum(values) / n
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return math.sqrt(variance / n)
