"""Paired statistics: two runs compared through their per-task differences, with honest error bars.

The method is Evan Miller's "Adding Error Bars to Evals" (arXiv 2411.00640): the tasks are a sample;
two runs on the same tasks are compared through their paired per-task deltas; the standard error comes
from the central limit theorem, clustered by task (a task's score is the mean over its rollouts, so
its rollouts count once); a power analysis plans the size of the next eval. Over the n paired tasks,
with d_i = candidate − baseline (``paired(deltas)``, a ``Paired``):

- ``mean_delta``: the mean of the d_i (exact summation, ``math.fsum``);
- ``stderr``: the sample standard deviation of the d_i (n − 1 in the denominator) over sqrt(n);
  None for one task;
- ``ci_low`` / ``ci_high``: ``mean_delta`` ∓ ``Z`` · ``stderr``, ``Z`` = 1.959964: the normal 95%
  interval; below ``MIN_TASKS`` (30) tasks ``warning`` says it may be too narrow;
- ``p_value``: a two-sided sign-flip permutation test of the mean (``sign_flip_p``): the share of the
  sign vectors s in {−1, +1}^n whose |Σ s_i d_i| is at least |Σ d_i| (within ``RTOL`` of Σ |d_i|,
  so that sums equal but for rounding count as ties). Exact for n <= ``EXACT_TASKS`` (20): all 2^n
  vectors. Above, ``RESAMPLES`` (10,000) random sign vectors, drawn by numpy's PCG64 generator seeded
  ``SEED`` (241100640, the method's arXiv number), and p = (1 + hits) / (1 + 10,000), so that a p of 0
  is never reported (Phipson and Smyth 2010). Tasks whose |d_i| are equal are exchangeable in the
  sum, so each random vector is drawn as, for every |d| shared by k > 1 tasks, the number of them
  whose sign is kept, Binomial(k, 1/2), and a fair coin for each other task: the same distribution as
  a coin per task, in far fewer draws when deltas repeat (a success rate's do). The same deltas give
  the same p in every process;
- ``wins`` / ``losses`` / ``ties``: the tasks with d_i > 0, < 0 and = 0.

``tasks_needed(sd, delta, alpha, power)`` is the power analysis: n = ((z_{1−α/2} + z_{power}) · σ_d / δ)²
rounded up (the normal approximation of a paired test).

numpy draws the random signs (the only figure it computes); everything else is ``math`` on plain floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from statistics import NormalDist
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# numpy is imported for the p-value alone: an evaluation's dashboard follows its baseline's running delta with the
# rest (pure Python), from the run's first episode on, and numpy takes a tenth of a second to import.

__all__ = [
    "EXACT_TASKS",
    "FIGURES",
    "MIN_TASKS",
    "RESAMPLES",
    "RTOL",
    "SEED",
    "Paired",
    "Z",
    "few_tasks",
    "interval",
    "paired",
    "sign_flip_p",
    "tasks_needed",
    "z_of",
]

Z = 1.959964
"""The normal quantile of the 95% interval (the 0.975 quantile, to 7 digits)."""
MIN_TASKS = 30
"""Below this many paired tasks, the normal interval comes with a warning."""
EXACT_TASKS = 20
"""Up to this many paired tasks, the permutation test enumerates every sign vector."""
RESAMPLES = 10_000
"""Random sign vectors of the permutation test above ``EXACT_TASKS`` tasks."""
SEED = 241100640
"""The seed of those random sign vectors (numpy's PCG64): the method's arXiv number, 2411.00640."""
RTOL = 1e-10
"""Sums within ``RTOL`` · Σ |d_i| of the observed one count as ties (as extreme)."""
_CELLS = 4_000_000
"""Random draws held at once by the test (a chunk of resamples)."""


@dataclass(frozen=True, slots=True)
class Paired:
    """The figures of one comparison of paired per-task deltas (see the module docstring)."""

    tasks: int
    mean_delta: float | None
    stderr: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    wins: int
    losses: int
    ties: int
    sd: float | None
    """The sample standard deviation of the deltas (what the power analysis reads)."""
    p_method: str
    """How ``p_value`` was computed: ``exact (2^n sign vectors)`` or the resamples and their seed."""
    warning: str | None = None

    def figures(self) -> dict[str, float | int | str | None]:
        """The figures by name (``tasks``, ``mean_delta``, ``stderr``, ``ci_low``, ``ci_high``, ``p_value``,
        ``wins``, ``losses``, ``ties``)."""
        return {name: getattr(self, name) for name in FIGURES}


FIGURES = ("tasks", "mean_delta", "stderr", "ci_low", "ci_high", "p_value", "wins", "losses", "ties")
"""The names the issue fixes for a comparison's figures, in the order a summary shows them."""


def interval(mean_delta: float | None, stderr: float | None) -> tuple[float | None, float | None]:
    """The normal 95% interval ``mean_delta`` ∓ ``Z`` · ``stderr`` (None, None without a stderr)."""
    if mean_delta is None or stderr is None:
        return None, None
    return mean_delta - Z * stderr, mean_delta + Z * stderr


def few_tasks(n: int) -> str | None:
    """The warning of an interval over fewer than ``MIN_TASKS`` tasks; None from there on."""
    if n >= MIN_TASKS:
        return None
    return (f"only {n} paired task{'s' if n != 1 else ''}: the normal interval needs about {MIN_TASKS} to be "
            "trusted (it may be too narrow); the permutation p-value does not rely on it")  # fmt: skip


def paired(deltas: Sequence[float]) -> Paired:
    """The figures of the per-task ``deltas`` (candidate − baseline), as the module docstring defines them."""
    values = [float(d) for d in deltas]
    n = len(values)
    wins = sum(d > 0 for d in values)
    losses = sum(d < 0 for d in values)
    if not n:
        return Paired(0, None, None, None, None, None, 0, 0, 0, None, _method(0), few_tasks(0))
    mean = math.fsum(values) / n
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in values) / (n - 1)) if n > 1 else None
    stderr = sd / math.sqrt(n) if sd is not None else None
    low, high = interval(mean, stderr)
    return Paired(n, mean, stderr, low, high, sign_flip_p(values), wins, losses, n - wins - losses, sd, _method(n),
                  few_tasks(n))  # fmt: skip


def _method(n: int) -> str:
    if n <= EXACT_TASKS:
        return f"exact: all 2^{n} sign vectors"
    return f"{RESAMPLES:,} random sign vectors, seed {SEED}"


def sign_flip_p(deltas: Sequence[float]) -> float | None:
    """The two-sided sign-flip permutation p-value of the mean of ``deltas`` (module docstring); None for none."""
    import numpy as np  # deferred: see above

    d = np.asarray(deltas, dtype=np.float64)
    if not len(d):
        return None
    observed = abs(math.fsum(d.tolist()))
    tolerance = RTOL * math.fsum(np.abs(d).tolist())
    moving = np.abs(d[d != 0])  # a zero delta adds 0 whatever its sign
    if len(d) <= EXACT_TASKS:
        sums = np.zeros(1)
        for value in moving:  # every sign vector's sum: 2^m of them, m <= 20
            sums = np.concatenate([sums + value, sums - value])
        hits = int(np.count_nonzero(np.abs(sums) >= observed - tolerance))
        return hits / len(sums)
    hits = int(np.count_nonzero(np.abs(_resampled(moving)) >= observed - tolerance))
    return (1 + hits) / (1 + RESAMPLES)


def _resampled(magnitudes: np.ndarray) -> np.ndarray:
    """``RESAMPLES`` sums Σ s_i |d_i| over random signs (seeded ``SEED``): the magnitudes shared by several tasks
    as binomial counts of kept signs, the others a random bit each (8 of them a byte, their sums looked up)."""
    import numpy as np  # deferred: see above

    generator = np.random.Generator(np.random.PCG64(SEED))
    values, counts = np.unique(magnitudes, return_counts=True)
    shared, single = values[counts > 1], values[counts == 1]
    k = counts[counts > 1]
    totals = np.zeros(RESAMPLES)
    if len(shared):
        step = max(_CELLS // len(shared), 1)
        for start in range(0, RESAMPLES, step):
            kept = generator.binomial(k, 0.5, size=(min(step, RESAMPLES - start), len(k)))
            totals[start : start + len(kept)] += (2 * kept - k) @ shared
    if len(single):
        totals += _bit_sums(generator, single)
    return totals


@cache
def _bits() -> np.ndarray:
    """Byte -> its 8 bits."""
    import numpy as np  # deferred: see above

    return ((np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1).astype(np.float64)


def _bit_sums(generator: np.random.Generator, values: np.ndarray) -> np.ndarray:
    """``RESAMPLES`` sums of ``values`` under random signs, a random byte giving the signs of 8 values: each
    group of 8 has its 256 signed sums tabled once, and a resample adds one entry per group."""
    import numpy as np  # deferred: see above

    padded = np.concatenate([values, np.zeros(-len(values) % 8)]).reshape(-1, 8)
    table = (2 * _bits() @ padded.T - padded.sum(axis=1)).T.ravel()  # group g, byte b -> table[256 g + b]
    groups = len(padded)
    offsets = np.arange(groups, dtype=np.intp) * 256
    totals = np.empty(RESAMPLES)
    step = max(_CELLS // groups, 1)
    for start in range(0, RESAMPLES, step):
        rows = min(step, RESAMPLES - start)
        signs = generator.integers(0, 256, size=(rows, groups), dtype=np.uint8)
        totals[start : start + rows] = table[signs.astype(np.intp) + offsets].sum(axis=1)
    return totals


def z_of(probability: float) -> float:
    """The standard normal quantile of ``probability``."""
    return NormalDist().inv_cdf(probability)


def tasks_needed(sd: float, delta: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """The paired tasks needed to detect a true mean delta of ``delta`` at two-sided level ``alpha`` with
    probability ``power``, deltas of standard deviation ``sd``: ((z_{1−α/2} + z_{power}) · sd / δ)², rounded up
    (at least 2: a standard error needs two)."""
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power are probabilities between 0 and 1, not {alpha!r} and {power!r}")
    if not delta or not math.isfinite(delta):
        raise ValueError(f"delta is the true difference to detect, a finite number other than 0, not {delta!r}")
    n = ((z_of(1 - alpha / 2) + z_of(power)) * sd / abs(delta)) ** 2
    return max(math.ceil(n - 1e-9), 2)
