"""The statistics every layer reports the same way: pass@k, the mean and its standard error, and the
note that says why success and pass@k read 0 when rewards are positive.

Pure Python (``math`` only), at the bottom of the layers, so the live views compute the running
figures with the same code as the DataFrames (``ors_lab.analysis.reduce`` re-exports them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["mean", "pass_at_k", "stderr", "success_note"]


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The unbiased pass@k of n samples with c successes (None when k > n)."""
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, not {k}")
    if k > n:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean(values: Sequence[float]) -> float | None:
    """The mean (exact summation), None for no values."""
    return math.fsum(values) / len(values) if values else None


def stderr(values: Sequence[float]) -> float | None:
    """The standard error of the mean: sample standard deviation over sqrt(n); None below two values."""
    n = len(values)
    if n < 2:
        return None
    centre = math.fsum(values) / n
    variance = math.fsum((v - centre) ** 2 for v in values) / (n - 1)
    return math.sqrt(variance / n)


def success_note(episodes: int, successes: int, rewards: Sequence[float], threshold: float | None = None) -> str | None:
    """Why success and pass@k are 0 though rewards are not, naming the argument that sets it; None otherwise.

    ``rewards`` are those of the episodes that ended without an error (the only ones that can succeed),
    ``successes`` how many of all ``episodes`` succeeded, ``threshold`` the run's ``success_threshold``
    when known. An environment of dense small rewards (a port that pays 0.15 a shift) scores 0 against
    the default threshold of 1.0 with nothing else amiss: the summary, the dashboard and the report
    say so with this text.
    """
    positive = [reward for reward in rewards if math.isfinite(reward) and reward > 0]
    if not episodes or successes or not positive:
        return None
    where = (f"success_threshold={float(threshold)!r}" if threshold is not None
             else "the success threshold (success_threshold=, 1.0 by default)")  # fmt: skip
    return (
        f"success and pass@k are 0: no episode reached {where}, though {len(positive)} of {episodes} earned a "
        f"positive reward (the highest {max(positive):.4g}); pass evaluate(..., success_threshold=) the reward a "
        "success earns"
    )
