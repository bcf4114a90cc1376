"""Analysis, the reading side of traces: ``load_trace`` / ``Trace``, and the DataFrame builders
(steps, episodes, tasks, ...) that ``EvalResult`` uses too; the reward reduction and pass@k."""

from ors_lab.analysis.frames import finished_episodes
from ors_lab.analysis.reduce import REDUCTIONS, Reduction, pass_at_k, reduce_reward
from ors_lab.analysis.trace import Trace, load_trace

__all__ = ["REDUCTIONS", "Reduction", "Trace", "finished_episodes", "load_trace", "pass_at_k", "reduce_reward"]
