"""Analysis, the reading side of traces: ``load_trace`` / ``Trace``, and the DataFrame builders
(events, calls, sessions, steps, episodes, tasks, errors, summary, transcripts: ``ors_lab.analysis.frames``)
that ``Trace`` and ``EvalResult`` both use; the reward reduction and pass@k; ``compare`` / ``Comparison``: runs
compared task by task (``ors_lab.analysis.comparison``, its statistics ``ors_lab.analysis.paired``); each episode's
conversation in an LLM API's shape (``ors_lab.analysis.conversations``).

The names load on first use: pyarrow and pandas are heavy, and the agents write their requests with the
conversation shapes, which need neither.
"""

from typing import TYPE_CHECKING

from ors_lab.lazy import lazy as _lazy

if TYPE_CHECKING:
    from ors_lab.analysis.comparison import Comparison, compare
    from ors_lab.analysis.conversations.build import Conversation
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

_LAZY = {
    **dict.fromkeys(
        [
            "calls_frame",
            "episodes_frame",
            "errors_frame",
            "events_frame",
            "finished_episodes",
            "sessions_frame",
            "steps_frame",
            "summary_frame",
            "tasks_frame",
            "transcripts_frame",
        ],
        "ors_lab.analysis.frames",
    ),
    **dict.fromkeys(["REDUCTIONS", "Reduction", "pass_at_k", "reduce_reward"], "ors_lab.analysis.reduce"),
    **dict.fromkeys(["Trace", "load_trace"], "ors_lab.analysis.trace"),
    "Conversation": "ors_lab.analysis.conversations.build",
    **dict.fromkeys(["Comparison", "compare"], "ors_lab.analysis.comparison"),
}

__all__ = [
    "REDUCTIONS",
    "Comparison",
    "Conversation",
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


__getattr__, __dir__ = _lazy(__name__, _LAZY)
