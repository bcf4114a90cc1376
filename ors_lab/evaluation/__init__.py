"""Evaluation: ``evaluate`` / ``aevaluate`` an agent over tasks × rollouts into an ``EvalResult``, here or
on Ray workers (``RayBackend``, ``ors_lab.evaluation.ray``: Ray itself is imported only when such a run starts).

The names load on first use: an evaluation's first episode runs before pandas and pyarrow are imported."""

from typing import TYPE_CHECKING

from ors_lab.lazy import lazy as _lazy

if TYPE_CHECKING:
    from ors_lab.evaluation.ray import RayBackend
    from ors_lab.evaluation.result import EvalResult
    from ors_lab.evaluation.run import EvaluationInterrupted, aevaluate, evaluate, last_result

__all__ = ["EvalResult", "EvaluationInterrupted", "RayBackend", "aevaluate", "evaluate", "last_result"]

__getattr__, __dir__ = _lazy(__name__, {
    "RayBackend": "ors_lab.evaluation.ray",
    "EvalResult": "ors_lab.evaluation.result",
    **dict.fromkeys(["EvaluationInterrupted", "aevaluate", "evaluate", "last_result"], "ors_lab.evaluation.run"),
})  # fmt: skip
