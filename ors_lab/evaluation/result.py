"""``EvalResult``: an evaluation's rows, and the DataFrames ``ors_lab.analysis`` builds from them.

An evaluation keeps, in memory, the trace rows its results need (the sessions opening and closing,
each tool call's request and result, each episode's ``start`` and ``episode`` rows), made by the
recorder's own ``Rows``; its frames are the builders of ``ors_lab.analysis.frames`` over them. So
``evaluate(..., record=p).episodes`` equals ``load_trace(p).episodes`` for the episodes it ran:
one definition of a step, an episode, a task and the reward reduction
(``ors_lab.analysis.reduce``), wherever a run is looked at.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from ors_lab import analysis
from ors_lab.analysis.reduce import Reduction, pass_at_k

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from ors_lab.analysis.comparison import Comparison
    from ors_lab.viewer.run_summary import RunSummary

# Its frames, and pandas with them, are made when first read (``ors_lab.analysis`` loads its builders on first use):
# a run's result is made at its end whether or not anyone reads it, and pandas takes most of a second to import.

__all__ = ["ANALYSIS_KINDS", "EvalResult"]

ANALYSIS_KINDS = ("request", "result", "call_error", "open", "close", "start", "episode")
"""The kinds of rows an evaluation keeps for its result (requests: those of tool calls only)."""


class EvalResult:
    """What ``evaluate`` returns: ``episodes``, ``steps``, ``tasks``, ``errors`` DataFrames and ``summary()``.

    ``table`` holds the run's rows (resumed episodes' included); ``episodes`` has one row per
    (task, rollout) pair, in order. ``rollouts`` sets the pass@k columns (pass@1 and pass@rollouts).
    ``agent`` names the agent (its class and model, or its name); ``feed_url`` is where its live feed
    was served (``evaluate(..., feed=...)``), or None; ``baseline`` the run it was compared with
    (``evaluate(..., baseline=...)``, read: ``ors_lab.analysis.runs.Run``) and ``comparison`` the comparison.
    In a notebook it shows itself as a summary card, its last errors, a small grid and the per-task table
    (``_repr_html_``).
    """

    def __init__(
        self,
        table: pa.Table,
        *,
        environment: str,
        split: str,
        rollouts: int,
        reward: Reduction = "sum",
        success_threshold: float = 1.0,
        trace: str | None = None,
        elapsed_s: float | None = None,
        resumed: int = 0,
        agent: str | None = None,
        feed_url: str | None = None,
        baseline: Any = None,
    ) -> None:
        self.table = table
        self.environment = environment
        self.split = split
        self.rollouts = rollouts
        self.reward = reward
        self.success_threshold = success_threshold
        self.trace = trace
        self.elapsed_s = elapsed_s
        self.resumed = resumed
        self.agent = agent
        self.feed_url = feed_url
        self.baseline = baseline

    def __len__(self) -> int:
        return len(self.episodes)

    @cached_property
    def comparison(self) -> Comparison | None:
        """This run against the baseline it was evaluated with (``evaluate(..., baseline=...)``): ``ol.compare(
        baseline, result)``; None without one."""
        if self.baseline is None:
            return None
        return analysis.compare(self.baseline, self)

    @cached_property
    def steps(self) -> pd.DataFrame:
        """One row per tool call that returned a result, with its reward and finished flag."""
        return analysis.steps_frame(self.table)

    @cached_property
    def episodes(self) -> pd.DataFrame:
        """One row per (task, rollout): reward (reduced), total and final reward, finished, success, steps, error."""
        return analysis.episodes_frame(self.table, reward=self.reward, success_threshold=self.success_threshold,
                                       steps=self.steps)  # fmt: skip

    @cached_property
    def tasks(self) -> pd.DataFrame:
        """One row per task: episodes, mean reward, stderr, success rate, pass@1 and pass@k, tokens."""
        return analysis.tasks_frame(self.episodes, self._ks())

    @cached_property
    def errors(self) -> pd.DataFrame:
        """One row per episode that failed, with the error's type and message."""
        return analysis.errors_frame(self.episodes)

    def pass_at(self, k: int) -> pd.Series:
        """pass@k per task (unbiased estimator), indexed by task index."""
        import pandas as pd  # deferred: see above

        counts = self.episodes.groupby("task_index", sort=True)["success"]
        values = {int(str(index)): pass_at_k(len(group), int(group.sum()), k) for index, group in counts}
        return pd.Series(values, name=f"pass@{k}", dtype="float64")

    def summary(self) -> pd.DataFrame:
        """The run in one row: episodes, tasks, mean reward and its stderr, success rate, pass@k, errors, time;
        a ``note`` naming ``success_threshold`` when no episode reached it though rewards are positive."""
        import pandas as pd  # deferred: see above
        import pyarrow as pa

        frame = analysis.summary_frame(self.episodes, self._ks(), success_threshold=self.success_threshold)
        frame["elapsed_s"] = pd.Series([self.elapsed_s], dtype=pd.ArrowDtype(pa.float64()))
        return frame

    def _ks(self) -> list[int]:
        return sorted({1, self.rollouts})

    def table_text(self) -> str:
        """The summary as aligned text (what ``ors-lab eval`` prints)."""
        import pandas as pd  # deferred: see above

        from ors_lab.analysis.frames import TOKENS  # deferred: pandas

        lines = []
        for name, value in self.summary().iloc[0].items():
            if name in ("environments", "splits") or (name in (*TOKENS, "error_types", "note") and pd.isna(value)):
                continue  # the run's own names; tokens no agent reported; the types of errors there were not; no note
            if pd.isna(value):
                shown = "-"
            elif isinstance(value, float):
                shown = f"{value:.1f}" if name == "elapsed_s" else f"{value:.3f}"
            else:
                shown = str(value)
            lines.append(f"  {name:<16} {shown}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """A summary card (rewards, pass@k and errors first; the trace last), the last errors, a small
        grid of the episodes coloured by reward, and the per-task table (``ors_lab.viewer.run_summary``). A plain
        ``str``: marimo's encoder turns a ``str`` subclass (``Markup``) into ``{}``."""
        from ors_lab.viewer.run_summary import run_summary_html  # deferred: pandas, as the frames

        return str(run_summary_html(self._summary_figures()))

    def _summary_figures(self) -> RunSummary:
        from ors_lab.viewer.report import run_summary  # deferred: pandas, as the frames
        from ors_lab.viewer.run_summary import versus_rows

        summary = run_summary(self.episodes, self._ks(), environment=self.environment, split=self.split,
                              rollouts=self.rollouts, agent=self.agent, elapsed_s=self.elapsed_s, resumed=self.resumed,
                              ids=[("trace", self.trace)] if self.trace else [],
                              success_threshold=self.success_threshold)  # fmt: skip
        if self.comparison is not None:  # the card says how the run did against its baseline
            figures = self.comparison.summary()
            summary.versus = versus_rows({**{str(k): v for k, v in figures.items()}, "name": self.comparison.names[0]})
        return summary

    def __repr__(self) -> str:
        if not len(self):
            return f"EvalResult({self.environment}/{self.split}: no episodes)"
        import pandas as pd  # deferred: see above

        from ors_lab.analysis.frames import pass_columns  # deferred: pandas

        row: Any = self.summary().iloc[0]
        passes = ", ".join(f"{name} {row[name]:.3f}" for name in pass_columns(self._ks()) if not pd.isna(row[name]))
        stderr = f" ± {row['stderr']:.3f}" if not pd.isna(row["stderr"]) else ""
        kinds = f": {row['error_types']}" if not pd.isna(row["error_types"]) else ""
        return (
            f"EvalResult({self.environment}/{self.split}: {row['episodes']} episodes over {row['tasks']} tasks "
            f"x {self.rollouts} rollouts; mean reward {row['mean_reward']:.3f}{stderr}; {passes}; "
            f"{row['errors']} errors{kinds})"
        )
