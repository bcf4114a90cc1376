"""Evaluation: ``evaluate`` / ``aevaluate`` an agent over tasks × rollouts into an ``EvalResult``."""

from ors_lab.evaluation.result import EvalResult
from ors_lab.evaluation.run import aevaluate, evaluate

__all__ = ["EvalResult", "aevaluate", "evaluate"]
