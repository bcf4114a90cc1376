"""A run against its baseline, as its tasks end: the running paired delta the dashboard shows (``LiveBaseline``).

An evaluation given a baseline (``evaluate(..., baseline=...)``) publishes it once, before its episodes, as a
``BaselineEvent``: the baseline's per-task rewards on the run's environment and split. The run's dashboard
(``ors_lab.viewer.run_fold.RunFold``) hands it here, then every outcome: a task is compared once all its
planned rollouts have ended (its mean reward over them, as ``ol.compare`` takes it), its delta the run's mean
minus the baseline's. The figures are ``ors_lab.analysis.paired``'s: while the run goes on, the mean delta
and its standard error come from running sums (no pass over the tasks per update), the interval from them,
and no p-value (a permutation test per update would cost the run); once the run has ended, every figure,
the p-value included, is ``paired()`` over the deltas, as ``result.comparison`` has them. Each finished
episode's grid cell gets a delta code too: its reward minus its task's baseline mean, clipped to [−1, 1].
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ors_lab.analysis.paired import Paired, few_tasks, interval, paired
from ors_lab.events import BaselineEvent
from ors_lab.html import fmt

__all__ = ["DELTA_LEVELS", "LiveBaseline", "delta_code"]

DELTA_LEVELS = 10
"""Grid codes of a delta: ``"a"`` (−1) .. ``"k"`` (0) .. ``"u"`` (+1), in tenths (``delta_code``)."""
SERIES_POINTS = 200


def delta_code(delta: float) -> str:
    """A delta's grid code: ``"a"`` + its value clipped to [−1, 1] in tenths above −1."""
    if not math.isfinite(delta):
        return " "
    return chr(ord("a") + round((min(max(delta, -1.0), 1.0) + 1.0) * DELTA_LEVELS))


class LiveBaseline:
    """The run's tasks against the baseline's (see the module docstring). ``planned``: the run's rollouts per task."""

    def __init__(self, event: BaselineEvent, planned: Counter[int]) -> None:
        self.name = event.name
        self.environment, self.split = event.environment, event.split
        self.means: dict[int, float] = {}
        for entry in event.tasks:
            index, rewards = int(entry[0]), [float(value) for value in entry[1]]
            if rewards:
                self.means[index] = math.fsum(rewards) / len(rewards)
        self.planned = planned
        self.deltas: dict[int, float] = {}
        self.wins = self.losses = 0
        self._sum = self._squares = 0.0
        self.series: list[list[Any]] = []  # [tasks, mean delta, low, high] as tasks end
        self._stride = 1
        self._exact: Paired | None = None

    @property
    def tasks(self) -> int:
        """The paired tasks compared so far."""
        return len(self.deltas)

    def unpaired(self) -> tuple[int, int]:
        """The run's planned tasks the baseline lacks, and the baseline's tasks the run does not plan."""
        return sum(task not in self.means for task in self.planned), sum(
            task not in self.planned for task in self.means
        )

    def task_done(self, task: int, rewards: Sequence[float]) -> bool:
        """A task of the run has ended with ``rewards`` (one per rollout): compared (its delta replacing any
        before); False when the baseline lacks it."""
        base = self.means.get(task)
        if base is None or not rewards:
            return False
        delta = math.fsum(rewards) / len(rewards) - base
        old = self.deltas.get(task)
        if old is not None:
            self._count(old, -1)
        self.deltas[task] = delta
        self._count(delta, 1)
        self._exact = None
        self._point()
        return True

    def _count(self, delta: float, sign: int) -> None:
        self._sum += sign * delta
        self._squares += sign * delta * delta
        self.wins += sign * (delta > 0)
        self.losses += sign * (delta < 0)

    def running(self) -> tuple[float | None, float | None]:
        """The mean delta and its standard error from the running sums."""
        n = len(self.deltas)
        if not n:
            return None, None
        mean = self._sum / n
        if n < 2:
            return mean, None
        variance = max((self._squares - self._sum * self._sum / n) / (n - 1), 0.0)
        return mean, math.sqrt(variance / n)

    def _point(self) -> None:
        n = len(self.deltas)
        if n % self._stride:
            return
        mean, stderr = self.running()
        low, high = interval(mean, stderr)
        self.series.append([n, *(None if v is None else round(v, 6) for v in (mean, low, high))])
        if len(self.series) > SERIES_POINTS:
            self.series, self._stride = self.series[::2], self._stride * 2

    def figures(self, ended: bool) -> dict[str, Any]:
        """The figures shown: exact (``paired``, the p-value with them) once the run has ended, running before."""
        alone, missing = self.unpaired()
        shared = {"name": self.name, "unpaired_run": alone, "unpaired_baseline": missing, "series": self.series}
        if ended:
            if self._exact is None:
                self._exact = paired(list(self.deltas.values()))
            exact = self._exact
            return {**shared, **exact.figures(), "p_method": exact.p_method, "warning": exact.warning}
        mean, stderr = self.running()
        low, high = interval(mean, stderr)
        n = len(self.deltas)
        return {**shared, "tasks": n, "mean_delta": mean, "stderr": stderr, "ci_low": low, "ci_high": high,
                "p_value": None, "wins": self.wins, "losses": self.losses, "ties": n - self.wins - self.losses,
                "p_method": None, "warning": few_tasks(n) if n else None}  # fmt: skip

    def text(self, ended: bool) -> str:
        """The figures on one line: ``vs base.parquet: delta -0.050 [-0.120, 0.020] over 12 tasks``."""
        f = self.figures(ended)
        if not f["tasks"]:
            return f"vs {self.name}: no task compared yet"
        span = "" if f["ci_low"] is None else f" [{f['ci_low']:.3f}, {f['ci_high']:.3f}]"
        p = "" if f["p_value"] is None else f" p {fmt(f['p_value'])}"
        return (f"vs {self.name}: delta {f['mean_delta']:+.3f}{span}{p} over {f['tasks']} tasks "
                f"({f['wins']}/{f['losses']}/{f['ties']})")  # fmt: skip
