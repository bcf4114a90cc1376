"""The run's view, per step and per episode: ``steps`` and ``episodes`` (the evaluation's record of an
episode, else its steps reduced), and the episodes an evaluation finished (what a resume skips)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.frames.calls import calls_frame
from ors_lab.analysis.frames.columns import _I64, _STR, EPISODES_COLUMNS, SESSIONS_COLUMNS, STEPS_COLUMNS, TOKENS
from ors_lab.analysis.frames.episode_rows import (
    _IDS,
    _counted,
    _episode_ids,
    _episode_rows,
    _in_order,
    _outcomes,
    _recorded,
    _rollouts,
    _sessions,
    _step_counts,
)
from ors_lab.analysis.frames.source import _SID, Source, _arrow, _at, _missing, _pandas, _select, _table, _typed
from ors_lab.analysis.reduce import Reduction, check_reduction, reduce_reward

__all__ = ["episodes_frame", "finished_episodes", "steps_frame"]


def steps_frame(source: Source, calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Calls that returned a result, numbered 1, 2, ... within their session, with their rollout, in
    (environment, split, task, rollout) order, as the episodes."""
    calls = calls_frame(source, outputs=False) if calls is None else calls
    steps = calls[calls["outcome"] == "result"].copy()
    steps["order"] = pd.factorize(steps["session_id"])[0]  # sessions in the order they began
    rows, _, (codes,) = _episode_rows(source, _arrow(steps["session_id"], _STR), outcomes=False)
    rollouts = _at(codes, _rollouts(rows), _SID)["rollout"]
    steps["rollout"] = pd.arrays.ArrowExtensionArray(rollouts.cast(_I64))
    steps = _typed(steps, {**STEPS_COLUMNS, "order": _I64})
    steps = steps.sort_values(["environment", "split", "task_index", "rollout", "order", "call"], kind="stable",
                              na_position="last")  # fmt: skip
    steps["step"] = steps.groupby("order", sort=False).cumcount() + 1
    return _typed(steps.drop(columns="order").reset_index(drop=True), STEPS_COLUMNS)


class _Step(NamedTuple):
    """A step as a reduction function sees it."""

    tool: str
    input: str
    ok: bool
    reward: float | None
    finished: bool
    error: str | None


def episodes_frame(
    source: Source,
    *,
    reward: Reduction = "sum",
    success_threshold: float = 1.0,
    steps: pd.DataFrame | None = None,
    sessions: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per episode, in (environment, split, task, rollout) order; see the module docstring.

    ``reward`` and ``success_threshold`` reduce the sessions no evaluation ran (an evaluation's
    episodes keep the reward and success it recorded). Built by Arrow from the rows an episode is
    made of, read in one pass; an evaluation's episodes need no steps frame (their steps are
    counted from the ``result`` and ``call_error`` rows alone).
    """
    check_reduction(reward)
    given = _table(sessions, SESSIONS_COLUMNS) if sessions is not None else None
    counted = [] if steps is None else [_arrow(steps["session_id"], _STR)]
    rows, names, codes = _episode_rows(source, *([] if given is None else [given["session_id"]]), *counted)
    opened = _sessions(rows) if given is None else given.append_column(_SID, codes[0])
    outcomes = _outcomes(rows)
    ids, sid = _episode_ids(opened, outcomes, names)
    if not len(ids):
        return _typed(pd.DataFrame(), EPISODES_COLUMNS)
    known = _at(sid, opened.select(["environment", "split", "task_index", "task", "errors", _SID]), _SID)
    counts = _step_counts(rows) if steps is None else _counted(codes[-1])
    frame = pa.table({
        "session_id": ids, **{name: known[name] for name in ("environment", "split", "task_index", "task")},
        "errors": pc.fill_null(known["errors"], 0), "steps": pc.fill_null(_at(sid, counts, _SID)["steps"], 0),
        "order": np.arange(len(ids), dtype=np.int64), _SID: sid,
    })  # fmt: skip
    recorded = pc.is_in(sid, value_set=outcomes[_SID].combine_chunks())
    parts = []
    if not pc.all(recorded).as_py():  # sessions no evaluation ran: their steps reduced here
        steps = steps_frame(source) if steps is None else steps
        bare = _pandas(_plain(frame.filter(pc.invert(recorded)))).set_index("session_id")
        reduced = _reduced(bare, steps, _pandas(opened).set_index("session_id"), _rollouts(rows), reward,
                           success_threshold)  # fmt: skip
        parts.append(_table(reduced.reset_index(), _ORDERED_EPISODES))
    if pc.any(recorded).as_py():  # an evaluation's episodes: what its episode row recorded
        parts.append(_recorded(frame.filter(recorded), outcomes, (
            "rollout", "reward", "total_reward", "final_reward", "finished", "success", "finish_reason", "duration_s",
            "error", "error_type", *TOKENS)))  # fmt: skip
    return _typed(_in_order(parts, _ORDERED_EPISODES), EPISODES_COLUMNS)


_ORDERED_EPISODES = {**EPISODES_COLUMNS, "session_id": _IDS, "order": _I64}


def _plain(table: pa.Table) -> pa.Table:
    """``table`` with its session ids plain strings."""
    return table.set_column(table.schema.get_field_index("session_id"), "session_id", table["session_id"].cast(_STR))


def _reduced(bare: pd.DataFrame, steps: pd.DataFrame, opened: pd.DataFrame, rollouts: pa.Table, reward: Reduction,
             success_threshold: float) -> pd.DataFrame:  # fmt: skip
    """Sessions no evaluation ran, their steps reduced (``reduce_reward``: a reduction may be any function)."""
    wanted = set(bare.index)
    by_session = steps[steps["session_id"].isin(wanted)].groupby("session_id", sort=False)
    reduced = {sid: reduce_reward(_steps(group), reward) for sid, group in by_session}
    values = [reduced.get(sid) or reduce_reward([], reward) for sid in bare.index]
    bare["total_reward"], bare["final_reward"], bare["reward"] = (list(c) for c in zip(*values, strict=True))
    bare["success"] = [value >= success_threshold for _, _, value in values]
    bare["finished"] = by_session["finished"].any().reindex(bare.index, fill_value=False)
    bare["rollout"] = _pandas(_at(_arrow(bare[_SID], _I64), rollouts, _SID))["rollout"].to_numpy()
    bare["started"] = opened["opened"].reindex(bare.index)
    bare["duration_s"] = opened["duration_s"].reindex(bare.index)
    return bare


def _steps(group: pd.DataFrame) -> list[_Step]:
    rows: list[tuple[Any, ...]] = list(group[list(_Step._fields)].itertuples(index=False))
    return [_Step._make(None if _missing(value) else value for value in values) for values in rows]


def finished_episodes(source: Source) -> dict[tuple[str, str, int, int], str]:
    """The episodes an evaluation finished without an error: (environment, split, task, rollout) -> session id."""
    rows = _select(
        source, ["environment", "split", "task_index", "rollout", "session_id", "ok"], ["episode"], agent=True
    )
    rows = rows.filter(pc.fill_null(rows["ok"], False))
    keys = zip(*(rows[name].to_pylist() for name in ("environment", "split", "task_index", "rollout")), strict=True)
    return dict(zip(keys, rows["session_id"].to_pylist(), strict=True))
