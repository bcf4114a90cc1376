"""The runs a comparison reads (``ors_lab.analysis.comparison``): a trace path, a ``Trace``, an ``EvalResult``, or the
per-task scores a trace recorded of its baseline.

A run is read as its episodes (one row per episode: ``environment``, ``split``, ``task_index``, ``rollout``,
``session_id``, ``reward``, ``success``, as ``Trace.episodes`` has them) and its per-task scores
(``task_scores``). A trace is read where it lies: only the columns of its ``episode`` and ``open`` rows
(``Trace.select``); when every session that opened has an evaluation's ``episode`` row, those rows are its
episodes (what ``trace.episodes`` takes from them), else ``trace.episodes`` is built (a session no evaluation
ran has its steps reduced there). Its transcripts are its agent stream, joined by ``ors_lab.transcript``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.frames.source import _json
from ors_lab.analysis.trace import Trace, load_trace
from ors_lab.transcript import STREAM_KINDS, AgentStream, join_stream

__all__ = ["EPISODE_COLUMNS", "KEYS", "Run", "baseline_tasks", "environments", "episodes_run", "read_run", "scores_of",
           "task_scores", "trace_episodes"]  # fmt: skip

KEYS = ["environment", "split", "task_index"]
"""What pairs a task across runs: its environment, split and index."""
EPISODE_COLUMNS = [*KEYS, "rollout", "session_id", "reward", "success"]
"""The columns of a run's episodes a comparison reads."""
_READ = ["session_id", "layer", "kind", *KEYS, "rollout", "reward", "success"]


@dataclass(eq=False)
class Run:
    """A run as a comparison reads it: its ``name``, its ``episodes`` (None for a baseline known by its per-task
    scores only), its per-task ``scores`` (``task_scores``), and the ``trace`` its transcripts are in (or None)."""

    name: str
    scores: pd.DataFrame
    episodes: pd.DataFrame | None = None
    trace: Trace | None = None
    skipped: int = 0
    """Episodes that name no task index (opened with a task spec): they pair with nothing."""
    _streams: dict[str, list[dict[str, Any]]] | None = field(default=None, repr=False)
    _steps: dict[Any, Any] | None = field(default=None, repr=False)

    def stream(self, session_id: str) -> AgentStream | None:
        """The agent's stream of one episode, its deltas joined (``ors_lab.transcript``); None without a trace or
        agent events of it. The trace's agent rows are read once, on the first call."""
        if self.trace is None:
            return None
        if self._streams is None:
            rows = self.trace.select(["session_id", "layer", "data"], kinds=list(STREAM_KINDS))
            rows = rows.filter(pc.and_(pc.equal(rows["layer"], "agent"), pc.is_valid(rows["session_id"])))
            streams: dict[str, list[dict[str, Any]]] = {}
            for sid, data in zip(rows["session_id"].to_pylist(), rows["data"].to_pylist(), strict=True):
                item = _json(data) if data is not None else None
                if isinstance(item, dict):
                    streams.setdefault(sid, []).append(item)
            self._streams = streams
        items = self._streams.get(session_id)
        return None if items is None else join_stream(items)

    def steps(self, session_id: str) -> pd.DataFrame | None:
        """One episode's steps (``Trace.steps``: tool, input, ok, reward, finished), for a run whose agent streamed
        nothing; None without a trace."""
        if self.trace is None:
            return None
        steps = self.trace.steps
        if self._steps is None:  # each session's rows found once: a page asks for hundreds of episodes
            self._steps = dict(steps.groupby("session_id", sort=False).indices)
        return pd.DataFrame(steps.iloc[self._steps.get(session_id, [])].reset_index(drop=True))


def read_run(run: Any, name: str | None = None) -> Run:
    """``run`` (a trace's path, a ``Trace`` or an ``EvalResult``) as a ``Run``, named ``name`` (else its file's
    name, or its agent's). ``TypeError`` for anything else; a path with no trace, ``TraceNotFoundError``."""
    if isinstance(run, str | os.PathLike):
        run = load_trace(run)
    if isinstance(run, Trace):
        episodes = trace_episodes(run)
        return episodes_run(name or Path(run.path).name, episodes, run)
    frame = getattr(run, "episodes", None)
    if isinstance(frame, pd.DataFrame) and hasattr(run, "summary"):  # an EvalResult (a layer above this one)
        recorded = getattr(run, "trace", None)
        trace = load_trace(recorded) if isinstance(recorded, str) and Path(recorded).exists() else None
        label = getattr(run, "agent", None) or f"{getattr(run, 'environment', 'run')}/{getattr(run, 'split', '')}"
        return episodes_run(name or str(label), frame[EPISODE_COLUMNS], trace)
    raise TypeError(f"a run to compare is a trace's path, an ors_lab.Trace or an ors_lab.EvalResult, not {run!r:.80}")


def episodes_run(name: str, episodes: pd.DataFrame, trace: Trace | None) -> Run:
    """A run of these ``episodes`` (``EPISODE_COLUMNS`` at least), its transcripts in ``trace``."""
    known = episodes[episodes["task_index"].notna() & episodes["environment"].notna()].reset_index(drop=True)
    return Run(name, task_scores(known), known[EPISODE_COLUMNS], trace, skipped=len(episodes) - len(known))


def trace_episodes(trace: Trace) -> pd.DataFrame:
    """The trace's episodes (``EPISODE_COLUMNS``), read from its ``episode`` rows where they hold every episode."""
    rows = trace.select(_READ, kinds=["episode", "open"])
    agent = pc.equal(rows["layer"], "agent")
    outcomes = rows.filter(pc.and_(agent, pc.equal(rows["kind"], "episode")))
    opened = rows.filter(pc.and_(pc.invert(agent), pc.equal(rows["kind"], "open")))["session_id"]
    recorded = pc.is_in(opened, value_set=outcomes["session_id"].combine_chunks())
    if not pc.all(recorded).as_py() or not outcomes.num_rows:  # sessions no evaluation ran: their steps reduced
        return pd.DataFrame(trace.episodes[EPISODE_COLUMNS])
    frame = outcomes.select(EPISODE_COLUMNS).to_pandas(types_mapper=pd.ArrowDtype)
    last = frame.drop_duplicates("session_id", keep="last")  # an episode's last outcome
    return pd.DataFrame(last.reset_index(drop=True))


def task_scores(episodes: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """Per task (``KEYS``), in the order the tasks first appear: its ``episodes`` (rollouts), ``mean`` reward,
    ``variance`` of the rewards over its rollouts (sample: n − 1; None for one), ``successes`` and
    ``success_rate``. A reward that is null counts 0, as ``reduce_reward`` counts an episode with none."""
    table = episodes if isinstance(episodes, pa.Table) else pa.Table.from_pandas(
        episodes[[*KEYS, "reward", "success"]], preserve_index=False)  # fmt: skip
    table = pa.table({
        "environment": table["environment"].cast(pa.string()), "split": table["split"].cast(pa.string()),
        "task_index": table["task_index"].cast(pa.int64()),
        "reward": pc.fill_null(table["reward"].cast(pa.float64()), 0.0),
        "success": pc.cast(pc.fill_null(table["success"].cast(pa.bool_()), False), pa.int64()),
        "_row": pa.array(np.arange(table.num_rows, dtype=np.int64)),
    })  # fmt: skip
    grouped = table.group_by(KEYS, use_threads=False).aggregate([
        ("_row", "min"), ("reward", "count"), ("reward", "mean"), ("reward", "variance", pc.VarianceOptions(ddof=1)),
        ("success", "sum")])  # fmt: skip
    grouped = grouped.take(pc.sort_indices(grouped["_row_min"]))
    frame: pd.DataFrame = grouped.select(KEYS).to_pandas()
    frame["episodes"] = grouped["reward_count"].to_numpy()
    frame["mean"] = grouped["reward_mean"].to_numpy(zero_copy_only=False)
    frame["variance"] = grouped["reward_variance"].to_numpy(zero_copy_only=False)
    frame["successes"] = grouped["success_sum"].to_numpy()
    frame["success_rate"] = frame["successes"] / frame["episodes"]
    return frame


def scores_of(tasks: Iterable[Sequence[Any]], environment: str, split: str) -> pd.DataFrame:
    """``task_scores`` of a baseline given as ``[task_index, [rewards...], successes]`` per task (what an evaluation
    records of its baseline, ``ors_lab.events.BaselineEvent``): each task's rewards, and that many successes."""
    indices: list[int] = []
    rewards: list[float] = []
    successes: list[bool] = []
    for index, values, won in tasks:
        values = [float(value) for value in values]
        indices += [int(index)] * len(values)
        rewards += values
        successes += [n < int(won) for n in range(len(values))]
    n = len(indices)
    return task_scores(pa.table({
        "environment": pa.array([environment] * n, pa.string()), "split": pa.array([split] * n, pa.string()),
        "task_index": pa.array(indices, pa.int64()), "reward": pa.array(rewards, pa.float64()),
        "success": pa.array(successes, pa.bool_())}))  # fmt: skip


def baseline_tasks(run: Run, environment: str, split: str) -> list[list[Any]]:
    """``run``'s tasks of ``environment``/``split`` as an evaluation records its baseline: ``[task_index, [rewards
    of its rollouts...], successes]`` each, in order."""
    if run.episodes is None:
        raise ValueError(f"{run.name} holds per-task scores only, not the rewards of its episodes")
    mine = run.episodes[(run.episodes["environment"] == environment) & (run.episodes["split"] == split)]
    out: dict[int, list[Any]] = {}
    for index, reward, success in zip(mine["task_index"], mine["reward"], mine["success"], strict=True):
        entry = out.setdefault(int(index), [int(index), [], 0])
        entry[1].append(0.0 if pd.isna(reward) else float(reward))
        entry[2] += bool(success) if not pd.isna(success) else 0
    return list(out.values())


def environments(scores: pd.DataFrame) -> Mapping[tuple[str, str], int]:
    """(environment, split) -> its tasks, of a run's scores."""
    counts = scores.groupby(["environment", "split"], sort=False).size()
    return {(str(key[0]), str(key[1])): int(n) for key, n in counts.items() if isinstance(key, tuple)}
