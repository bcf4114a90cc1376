"""Analysis, the reading side of traces: ``load_trace`` / ``Trace``, and the DataFrame builders
(events, calls, sessions, steps, episodes, tasks, errors, summary, transcripts: ``ors_lab.analysis.frames``)
that ``Trace`` and ``EvalResult`` both use; the reward reduction and pass@k; ``compare`` / ``Comparison``: runs compared
task by task (``ors_lab.analysis.comparison``, its statistics ``ors_lab.analysis.paired``)."""

from ors_lab.analysis.comparison import Comparison, compare
from ors_lab.analysis.frames import (
    calls_frame,
    episodes_frame,
    errors_frame,
    events_frame,
    finished_episodes,
    sessions_frame,
    steps_frame,
    summary_frame,
    tasks_frame,
    transcripts_frame,
)
from ors_lab.analysis.reduce import REDUCTIONS, Reduction, pass_at_k, reduce_reward
from ors_lab.analysis.trace import Trace, load_trace

__all__ = [
    "REDUCTIONS",
    "Comparison",
    "Reduction",
    "Trace",
    "calls_frame",
    "compare",
    "episodes_frame",
    "errors_frame",
    "events_frame",
    "finished_episodes",
    "load_trace",
    "pass_at_k",
    "reduce_reward",
    "sessions_frame",
    "steps_frame",
    "summary_frame",
    "tasks_frame",
    "transcripts_frame",
]
