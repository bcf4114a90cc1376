"""Comparing runs: ``compare(baseline, *candidates)`` -> ``Comparison``, paired by task, with honest error bars.

    cmp = ol.compare("runs/base.parquet", "runs/new.parquet")
    cmp.summary()["mean_delta"], cmp.summary()["ci_low"], cmp.summary()["p_value"]
    cmp.tasks; cmp.unpaired; cmp.episodes; cmp.power(delta=0.05)

A run is a trace's path, a ``Trace`` or an ``EvalResult`` (``ors_lab.analysis.runs``). Runs are paired by
(environment, split, task index). A task's score in a run is its mean reward over the run's rollouts of it,
so rollouts are clustered by task: each task counts once, however many rollouts it had. Each candidate is
compared with the baseline on the tasks both ran (``ors_lab.analysis.paired`` defines every figure: the
mean delta, its standard error, the normal 95% interval, the sign-flip permutation p-value, wins, losses and
ties). The tasks only one of them ran are counted and listed (``unpaired``), never silently dropped.

Three metrics, each a task's own estimate differenced (``metrics``): ``reward`` (its mean reward),
``success`` (its success rate: successes / rollouts) and ``pass@k`` (the unbiased pass@k of its rollouts,
``ors_lab.stats.pass_at_k``; k is the fewest rollouts any paired task has in either run, unless given; a task
with fewer than k rollouts has no pass@k and sits that metric out).

A ``Comparison`` holds data only; it shows itself in a notebook through the display hook
(``ors_lab.display``): the comparison view (a card of the figures, a bar chart of the per-task deltas with
their spread, a grid of the tasks coloured by delta; a click on a task shows the two runs' transcripts of
it side by side, the first step where they differ marked), drawn by ``ors_lab.viewer.compare``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pandas as pd

from ors_lab import display
from ors_lab.analysis.paired import Paired, paired, tasks_needed
from ors_lab.analysis.runs import KEYS, Run, read_run
from ors_lab.stats import pass_at_k

__all__ = ["Comparison", "Power", "compare"]

POWER_ROLLOUTS = (1, 2, 4, 8, 16)
"""The rollouts per task a power analysis tells the tasks needed for."""


def compare(baseline: Any, *candidates: Any, names: list[str] | None = None, k: int | None = None) -> Comparison:
    """Compare each of ``candidates`` with ``baseline``, paired by task (see the module docstring).

    Each run is a trace's path, a ``Trace`` or an ``EvalResult``. ``names``: how the runs are called, the
    baseline's first (by default their files' names, or their agents'). ``k``: the k of pass@k (by default the
    fewest rollouts a paired task has in either run)."""
    if not candidates:
        raise TypeError("compare needs a baseline and at least one candidate: compare(baseline, candidate, ...)")
    runs = [baseline, *candidates]
    if names is not None and len(names) != len(runs):
        raise ValueError(f"names has {len(names)} names for {len(runs)} runs (the baseline's first)")
    read = [run if isinstance(run, Run) else read_run(run, None if names is None else names[n])
            for n, run in enumerate(runs)]  # fmt: skip
    return Comparison(read[0], read[1:], k=k)


@dataclass(frozen=True, slots=True)
class Power:
    """A power analysis: the paired tasks needed to detect a true mean delta of ``delta`` (two-sided level
    ``alpha``, probability ``power``), from the observed variances (``Comparison.power``).

    ``tasks``: at the observed rollouts per task (``rollouts``), from the observed standard deviation of the
    per-task deltas (``sd``). ``by_rollouts``: rollouts per task -> tasks needed, from the variance of the
    deltas split into the tasks' own (``between``) and the rollouts' within a task (``within``, per rollout:
    the two runs' rollout variances, summed); empty when no task had two rollouts in both runs."""

    delta: float
    alpha: float
    power: float
    tasks: int
    rollouts: int
    sd: float
    between: float | None
    within: float | None
    by_rollouts: dict[int, int]

    def __repr__(self) -> str:
        more = ", ".join(f"{n} tasks x {k} rollouts" for k, n in self.by_rollouts.items())
        return (f"Power(delta={self.delta:g}: {self.tasks} tasks at {self.rollouts} rollouts (alpha={self.alpha:g}, "
                f"power={self.power:g})" + (f"; or {more}" if more else "") + ")")  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Pairing:
    """One candidate against the baseline: its paired tasks (one row each), its unpaired ones, its figures."""

    tasks: pd.DataFrame
    unpaired: pd.DataFrame
    figures: dict[str, Paired]


class Comparison:
    """Runs compared with a baseline, task by task (``compare()``; see the module docstring).

    ``baseline`` and ``candidates`` are the runs read (``ors_lab.analysis.runs.Run``), ``names`` theirs (the
    baseline's first), ``metrics`` the metrics compared (``reward``, ``success``, ``pass@k``), ``k`` that k.
    """

    def __init__(self, baseline: Run, candidates: list[Run], *, k: int | None = None) -> None:
        self.baseline = baseline
        self.candidates = list(candidates)
        self.names = _unique([baseline.name, *(run.name for run in self.candidates)])
        merged = [_merge(baseline.scores, run.scores) for run in self.candidates]
        if k is None:
            fewest = [int(min(frame["episodes_b"].min(), frame["episodes_c"].min())) for frame in merged if len(frame)]
            k = min(fewest) if fewest else 1
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k (of pass@k) is a whole number, 1 or more, not {k!r}")
        self.k = k
        self.metrics = ("reward", "success", f"pass@{k}")
        self._pairings = [self._pair(frame, baseline.scores, run.scores) for frame, run in
                          zip(merged, self.candidates, strict=True)]  # fmt: skip

    def __repr__(self) -> str:
        shown = []
        for name, pairing in zip(self.names[1:], self._pairings, strict=True):
            f = pairing.figures["reward"]
            if f.mean_delta is None:
                shown.append(f"{name}: no paired task")
                continue
            interval = "" if f.ci_low is None else f" [{f.ci_low:.3f}, {f.ci_high:.3f}]"
            shown.append(f"{name}: mean delta {f.mean_delta:+.3f}{interval}, p {f.p_value:.3g}, "
                         f"{f.wins}/{f.losses}/{f.ties} over {f.tasks} tasks")  # fmt: skip
        return f"Comparison(vs {self.names[0]}: {'; '.join(shown)})"

    # -- the figures ----------------------------------------------------------------------------------

    def _pair(self, frame: pd.DataFrame, base: pd.DataFrame, cand: pd.DataFrame) -> _Pairing:
        k = self.k
        tasks = frame.copy()
        tasks["delta"] = tasks["mean_c"] - tasks["mean_b"]
        within = tasks["variance_b"] / tasks["episodes_b"] + tasks["variance_c"] / tasks["episodes_c"]
        tasks["delta_stderr"] = [math.sqrt(v) if v == v else None for v in within]
        tasks["success_delta"] = tasks["success_rate_c"] - tasks["success_rate_b"]
        for side in ("b", "c"):
            counts = zip(tasks[f"episodes_{side}"], tasks[f"successes_{side}"], strict=True)
            tasks[f"pass_{side}"] = [pass_at_k(int(n), int(c), k) for n, c in counts]
        tasks["pass_delta"] = [None if b is None or c is None else c - b
                               for b, c in zip(tasks["pass_b"], tasks["pass_c"], strict=True)]  # fmt: skip
        figures = {
            "reward": paired(tasks["delta"].tolist()),
            "success": paired(tasks["success_delta"].tolist()),
            f"pass@{k}": paired([d for d in tasks["pass_delta"] if not pd.isna(d)]),  # a task short of k rollouts: none
        }
        return _Pairing(tasks, _unpaired(base, cand), figures)

    def figures(self, metric: str = "reward", candidate: int | str = 0) -> Paired:
        """The figures of ``metric`` for one candidate (by its position or name) against the baseline."""
        return self._pairings[self._candidate(candidate)].figures[self._metric(metric)]

    def summary(self, metric: str = "reward") -> pd.Series | pd.DataFrame:
        """The figures of ``metric`` (``reward``, ``success`` or ``pass@k``): ``tasks``, ``mean_delta``, ``stderr``,
        ``ci_low``, ``ci_high``, ``p_value``, ``wins``, ``losses``, ``ties``, then the runs' means over the
        paired tasks, the tasks left unpaired, how p was computed and the warning of few tasks.

        For two runs a Series indexed by those names (``summary()["mean_delta"]``); for more, a DataFrame with
        one row per candidate (indexed by its name)."""
        metric = self._metric(metric)
        rows = {}
        for name, pairing in zip(self.names[1:], self._pairings, strict=True):
            f = pairing.figures[metric]
            column = {"reward": ("mean_b", "mean_c"), "success": ("success_rate_b", "success_rate_c")}.get(
                metric, ("pass_b", "pass_c"))  # fmt: skip
            values = [v for v in pairing.tasks[list(column)].itertuples(index=False) if not any(pd.isna(x) for x in v)]
            means = [_mean([float(v[n]) for v in values]) for n in (0, 1)]
            rows[name] = {**f.figures(), "baseline_mean": means[0], "candidate_mean": means[1],
                          "unpaired": len(pairing.unpaired), "metric": metric, "baseline": self.names[0],
                          "p_method": f.p_method, "warning": f.warning}  # fmt: skip
        if len(rows) == 1:
            name, row = next(iter(rows.items()))
            return pd.Series(row, name=name, dtype=object)
        return pd.DataFrame.from_dict(rows, orient="index")

    @cached_property
    def tasks(self) -> pd.DataFrame:
        """One row per candidate and paired task: the task (environment, split, index), each run's mean reward
        (``baseline_mean``, ``candidate_mean``) and rollouts, the ``delta`` and its own standard error from the
        rollouts (``delta_stderr``: sqrt(var_b / n_b + var_c / n_c), None where a run had one rollout), the
        success rates and their delta, pass@k of each and its delta."""
        k = self.k
        frames = []
        for name, pairing in zip(self.names[1:], self._pairings, strict=True):
            t = pairing.tasks
            frames.append(pd.DataFrame({
                "candidate": name, **{key: t[key] for key in KEYS},
                "baseline_mean": t["mean_b"], "candidate_mean": t["mean_c"], "delta": t["delta"],
                "delta_stderr": t["delta_stderr"], "baseline_rollouts": t["episodes_b"],
                "candidate_rollouts": t["episodes_c"], "baseline_success_rate": t["success_rate_b"],
                "candidate_success_rate": t["success_rate_c"], "success_delta": t["success_delta"],
                f"baseline_pass@{k}": t["pass_b"], f"candidate_pass@{k}": t["pass_c"],
                f"pass@{k}_delta": t["pass_delta"],
            }))  # fmt: skip
        return pd.concat(frames, ignore_index=True).convert_dtypes(dtype_backend="pyarrow")

    @cached_property
    def unpaired(self) -> pd.DataFrame:
        """One row per candidate and task only one of the two runs has: the task, ``only_in`` (``baseline`` or
        ``candidate``) and its ``episodes`` there."""
        frames = [p.unpaired.assign(candidate=name) for name, p in zip(self.names[1:], self._pairings, strict=True)]
        return pd.concat(frames, ignore_index=True)[["candidate", *KEYS, "only_in", "episodes"]]

    @cached_property
    def episodes(self) -> pd.DataFrame:
        """The runs' episodes side by side: one row per candidate, task and rollout number either run has, the
        baseline's session, reward and success beside the candidate's (null where a run lacks that rollout). Empty
        for a baseline known by its per-task scores only."""
        base = self.baseline.episodes
        if base is None:
            return pd.DataFrame(columns=["candidate", *KEYS, "rollout"])
        frames = []
        for name, run in zip(self.names[1:], self.candidates, strict=True):
            if run.episodes is None:
                continue
            sides = [frame[[*KEYS, "rollout", "session_id", "reward", "success"]].rename(
                columns={c: f"{prefix}_{c}" for c in ("session_id", "reward", "success")})
                for frame, prefix in ((base, "baseline"), (run.episodes, "candidate"))]  # fmt: skip
            both = sides[0].merge(sides[1], on=[*KEYS, "rollout"], how="outer", sort=True)
            frames.append(both.assign(candidate=name))
        together = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        return together[["candidate", *(c for c in together.columns if c != "candidate")]] if frames else together

    # -- planning --------------------------------------------------------------------------------------

    def power(self, delta: float, alpha: float = 0.05, power: float = 0.8, *, metric: str = "reward",
              candidate: int | str = 0) -> Power:  # fmt: skip
        """The number of tasks (and rollouts) needed to detect a true mean delta of ``delta`` of ``metric`` at
        two-sided level ``alpha`` with probability ``power``, from this comparison's observed variances
        (``ors_lab.analysis.paired.tasks_needed``; see ``Power``)."""
        metric = self._metric(metric)
        pairing = self._pairings[self._candidate(candidate)]
        observed = pairing.figures[metric]
        if observed.sd is None:
            raise ValueError("a power analysis needs the deltas' standard deviation: compare at least 2 paired tasks")
        t = pairing.tasks
        rollouts = round(float(pd.concat([t["episodes_b"], t["episodes_c"]]).median()))
        between = within = None
        by_rollouts: dict[int, int] = {}
        both = t[(t["episodes_b"] > 1) & (t["episodes_c"] > 1)]
        if metric == "reward" and len(both):
            within = math.fsum(both["variance_b"] + both["variance_c"]) / len(both)
            share = math.fsum(both["variance_b"] / both["episodes_b"] + both["variance_c"] / both["episodes_c"]) / len(
                both
            )
            between = max(observed.sd**2 - share, 0.0)
            by_rollouts = {
                n: tasks_needed(math.sqrt(between + within / n), delta, alpha, power) for n in POWER_ROLLOUTS
            }
        return Power(delta, alpha, power, tasks_needed(observed.sd, delta, alpha, power), rollouts, observed.sd,
                     between, within, by_rollouts)  # fmt: skip

    # -- showing itself: drawn by the display layer (``ors_lab.display``), this holds the data only --------

    def to_html(self, path: str | os.PathLike[str]) -> Any:
        """Write the comparison as one self-contained HTML page to ``path`` (no network, no kernel: the view a
        notebook shows, drawn by the same JavaScript); returns what was written (``ors_lab.viewer.compare_page``)."""
        return display.make(self, "report", path=path)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        shown = display.bundle(self)
        return shown if shown is not None else {"text/plain": repr(self)}

    def _display_(self) -> display.Shown:
        """marimo's display protocol (asked before ``_repr_html_``): the bundle, so a live view's widget."""
        return display.Shown(self._repr_mimebundle_())

    def _repr_html_(self) -> str:
        return str(display.make(self, "html"))

    # -- small pieces ----------------------------------------------------------------------------------

    def _metric(self, metric: str) -> str:
        if metric == "pass@k":
            return self.metrics[2]
        if metric not in self.metrics:
            raise ValueError(f"no metric {metric!r}; the metrics: {', '.join(self.metrics)}")
        return metric

    def _candidate(self, candidate: int | str) -> int:
        if isinstance(candidate, str):
            if candidate not in self.names[1:]:
                raise ValueError(f"no candidate {candidate!r}; the candidates: {', '.join(self.names[1:])}")
            return self.names[1:].index(candidate)
        if not 0 <= candidate < len(self.candidates):
            raise IndexError(f"candidate {candidate} of {len(self.candidates)}")
        return candidate


def _merge(base: pd.DataFrame, cand: pd.DataFrame) -> pd.DataFrame:
    """The tasks both runs have: the baseline's scores (``_b``) beside the candidate's (``_c``), in task order."""
    both = base.merge(cand, on=KEYS, how="inner", suffixes=("_b", "_c"), sort=False)
    return both.sort_values(KEYS, kind="stable").reset_index(drop=True)


def _unpaired(base: pd.DataFrame, cand: pd.DataFrame) -> pd.DataFrame:
    both = base.merge(cand, on=KEYS, how="outer", suffixes=("_b", "_c"), indicator=True, sort=False)
    alone = both[both["_merge"] != "both"]
    return pd.DataFrame({
        **{key: alone[key] for key in KEYS},
        "only_in": ["baseline" if side == "left_only" else "candidate" for side in alone["_merge"]],
        "episodes": alone["episodes_b"].fillna(alone["episodes_c"]).astype("int64"),
    }).sort_values(KEYS, kind="stable").reset_index(drop=True)  # fmt: skip


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _unique(names: list[str]) -> list[str]:
    """``names``, a repeated one numbered (``run.parquet (2)``)."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return out
