"""How steps reduce to an episode's reward, and episodes to a task's scores: the one place this is decided.

- A **step** is a tool call that returned a result, ``ok`` true or false; its reward is the
  result's ``reward`` (None when the tool gave none). Calls that raised are not steps.
- An episode's ``total_reward`` is the sum of its steps' rewards, ``final_reward`` the last reward
  given (both None when no step gave one). Its ``reward`` is ``total_reward`` by default
  (``reward="sum"``), ``final_reward`` (``"final"``), the largest reward given (``"max"``), or a
  function of the episode's rewards; an episode with no reward counts 0.0, and so does one that
  failed (an infrastructure error, an agent exception, the timeout). ``success`` is
  ``reward >= success_threshold`` (1.0 by default) without an error.
- A task's ``mean_reward`` is the mean over its episodes, ``stderr`` its standard error (sample
  standard deviation over sqrt(n); None for one episode), and ``pass@k`` the unbiased estimator
  ``1 - C(n - c, k) / C(n, k)`` over n episodes with c successes (None when k > n).

``evaluate`` reduces each episode as it ends (the trace's ``episode`` row keeps the result); the
DataFrame builders of ``ors_lab.analysis.frames`` reduce the sessions no evaluation ran the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ors_lab.stats import mean, pass_at_k, stderr

__all__ = ["REDUCTIONS", "Reduction", "check_reduction", "mean", "pass_at_k", "reduce_reward", "stderr"]


class Rewarded(Protocol):
    """A step, as a reduction sees it: its ``reward`` (None when it gave none), and whatever else it has."""

    @property
    def reward(self) -> float | None: ...


Reduction = str | Callable[[Sequence[Any]], float | None]
"""A reduction's name, or a function of an episode's steps (objects with ``reward``, ``tool``,
``input``, ``ok``, ``finished``, ``error``), in order."""

REDUCTIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "sum": math.fsum,
    "final": lambda rewards: rewards[-1],
    "max": max,
}


def check_reduction(reduction: Reduction) -> Reduction:
    """``reduction`` if it is one; ``ValueError`` listing the valid names if not."""
    if callable(reduction) or reduction in REDUCTIONS:
        return reduction
    raise ValueError(f"unknown reward reduction {reduction!r}; use one of {', '.join(REDUCTIONS)} or a function")


def reduce_reward(steps: Sequence[Rewarded], reduction: Reduction = "sum") -> tuple[float | None, float | None, float]:
    """``(total_reward, final_reward, reward)`` of an episode's steps (see the module docstring)."""
    given = [float(s.reward) for s in steps if s.reward is not None]
    total = math.fsum(given) if given else None
    final = given[-1] if given else None
    if callable(reduction):
        value = reduction(steps)
    else:
        value = REDUCTIONS[str(check_reduction(reduction))](given) if given else None
    return total, final, 0.0 if value is None else float(value)
