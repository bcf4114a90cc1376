"""Evaluation: ``evaluate`` / ``aevaluate`` an agent over tasks × rollouts into an ``EvalResult``."""

from ors_lab.evaluation.result import EvalResult
from ors_lab.evaluation.run import EvaluationInterrupted, aevaluate, evaluate, last_result

__all__ = ["EvalResult", "EvaluationInterrupted", "aevaluate", "evaluate", "last_result"]
