"""An evaluation against a baseline (``evaluate(..., baseline=...)``): the baseline read, checked, and told to the run.

The baseline (a trace's path, a ``Trace`` or an ``EvalResult``) is read before the run starts
(``ors_lab.analysis.runs``): one that holds no episode of the run's environment and split is a
``ValueError`` naming what it holds, before any session is opened. The run then publishes it once, before
its episodes, as a ``BaselineEvent`` (its per-task rewards on the run's environment and split): the
dashboard compares the tasks with it as they end (``ors_lab.viewer.run_baseline``), the live feed carries it
to ``ol.watch`` and ``ors-lab watch``, and the trace keeps it, so the run's report holds the comparison.
The result's ``comparison`` is ``ol.compare(baseline, result)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ors_lab.analysis.runs import Run, baseline_tasks, environments, read_run
from ors_lab.events import BaselineEvent

__all__ = ["Baseline", "read_baseline"]


@dataclass(frozen=True)
class Baseline:
    """A run's baseline: the run read (``Run``), and the event that tells the run's subscribers its scores."""

    run: Run
    event: BaselineEvent


def read_baseline(baseline: Any, environment: str, split: str) -> Baseline | None:
    """``baseline`` read for a run of ``environment``/``split`` (None for None); ``ValueError`` when it holds no
    episode of them."""
    if baseline is None:
        return None
    run = read_run(baseline)
    tasks = baseline_tasks(run, environment, split)
    if not tasks:
        held = ", ".join(f"{env}/{spl} ({n} tasks)" for (env, spl), n in environments(run.scores).items()) or "none"
        raise ValueError(f"the baseline {run.name} holds no episode of {environment}/{split} to compare with "
                         f"(it holds: {held})")  # fmt: skip
    return Baseline(run, BaselineEvent(name=run.name, environment=environment, split=split, tasks=tasks))
