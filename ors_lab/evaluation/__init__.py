"""Evaluation: ``evaluate`` / ``aevaluate`` an agent over tasks × rollouts into an ``EvalResult``, here or
on Ray workers (``RayBackend``, ``ors_lab.evaluation.ray``: Ray itself is imported only when such a run starts)."""

from ors_lab.evaluation.ray import RayBackend
from ors_lab.evaluation.result import EvalResult
from ors_lab.evaluation.run import EvaluationInterrupted, aevaluate, evaluate, last_result

__all__ = ["EvalResult", "EvaluationInterrupted", "RayBackend", "aevaluate", "evaluate", "last_result"]
