"""Evaluation: ``evaluate`` / ``aevaluate`` an agent over tasks × rollouts into an ``EvalResult``."""

from ors_lab.evaluation.result import EpisodeRecord, EvalResult, StepRecord, pass_at_k
from ors_lab.evaluation.run import aevaluate, evaluate, finished_records

__all__ = ["EpisodeRecord", "EvalResult", "StepRecord", "aevaluate", "evaluate", "finished_records", "pass_at_k"]
