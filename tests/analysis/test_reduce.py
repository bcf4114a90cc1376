"""The reward reduction and pass@k: the one definition, checked against brute force and by hand."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest

from ors_lab.analysis.reduce import REDUCTIONS, mean, pass_at_k, reduce_reward, stderr


def _brute_pass_at_k(n: int, c: int, k: int) -> float:
    """The share of all k-subsets of n samples (c of them successes) holding at least one success."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


SMALL = [(n, c, k) for n in range(1, 7) for c in range(n + 1) for k in range(1, n + 1)]


@pytest.mark.parametrize(("n", "c", "k"), SMALL)
def test_pass_at_k_is_the_unbiased_estimator(n: int, c: int, k: int) -> None:
    """pass@k equals the exact share of k-subsets with a success, for every small n, c, k."""
    assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k))


def test_pass_at_k_beyond_n_is_unknown_and_k_must_be_positive() -> None:
    """k > n gives None (not enough samples); k < 1 is a ValueError."""
    assert pass_at_k(3, 1, 4) is None
    with pytest.raises(ValueError, match="k >= 1"):
        pass_at_k(3, 1, 0)


def _steps(*rewards: float | None) -> list[SimpleNamespace]:
    return [SimpleNamespace(reward=reward, tool="t") for reward in rewards]


def test_reductions() -> None:
    """sum, final and max over the rewards given; a function sees the steps; no reward at all counts 0.0."""
    steps = _steps(0.5, None, 0.25)
    assert reduce_reward(steps, "sum") == (0.75, 0.25, 0.75)
    assert reduce_reward(steps, "final") == (0.75, 0.25, 0.25)
    assert reduce_reward(steps, "max") == (0.75, 0.25, 0.5)
    assert reduce_reward(steps, lambda s: len(s)) == (0.75, 0.25, 3.0)
    assert reduce_reward(_steps(None), "sum") == (None, None, 0.0)
    assert reduce_reward([], "max") == (None, None, 0.0)
    assert set(REDUCTIONS) == {"sum", "final", "max"}


def test_an_unknown_reduction_names_the_valid_ones() -> None:
    """A reduction that is neither a known name nor a function is a ValueError listing the names."""
    with pytest.raises(ValueError, match="unknown reward reduction 'median'; use one of sum, final, max"):
        reduce_reward(_steps(1.0), "median")


def test_sums_are_exact() -> None:
    """0.1 + 0.2 + 0.3 sums to 0.6 exactly (fsum), and mean and stderr use the same summation."""
    assert reduce_reward(_steps(0.1, 0.2, 0.3))[0] == 0.6
    assert mean([0.1, 0.2, 0.3]) == 0.6 / 3
    assert stderr([1.0]) is None and mean([]) is None
    assert stderr([0.0, 1.0, 1.0]) == pytest.approx(math.sqrt((1 / 3) / 3))
