"""The statistics every layer reports the same way: pass@k, the mean and its standard error.

Pure Python (``math`` only), at the bottom of the layers, so the live views compute the running
figures with the same code as the DataFrames (``ors_lab.analysis.reduce`` re-exports them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["mean", "pass_at_k", "stderr"]


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
