"""The trace viewer's list: ``listing``, one row per episode, built without the per-call frames so that a
trace of many thousands of episodes opens at once."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.frames.columns import _I64, _STR, LISTING_COLUMNS
from ors_lab.analysis.frames.episode_rows import (
    _IDS,
    _episode_ids,
    _episode_rows,
    _in_order,
    _outcomes,
    _recorded,
    _rollouts,
    _sessions,
)
from ors_lab.analysis.frames.source import _SID, Source, _at, _typed

__all__ = ["listing_frame"]


def listing_frame(source: Source) -> pd.DataFrame:
    """One row per episode (as ``episodes``: the same episodes, in the same order, with the same
    values) with what the trace viewer lists, built from the ``open``, ``close``, ``result``,
    ``call_error``, ``start`` and ``episode`` rows by Arrow alone, without the per-call frames.

    A session no evaluation ran takes the sum of its rewards (``episodes``' default reduction)."""
    rows, names, _ = _episode_rows(source)  # one pass over the trace; the rest is small
    opened, outcomes = _sessions(rows), _outcomes(rows)
    ids, sid = _episode_ids(opened, outcomes, names)
    if not len(ids):
        return _typed(pd.DataFrame(), LISTING_COLUMNS)
    where = ["environment", "split", "task_index", "errors", "duration_s", "opened", _SID]
    known = _at(sid, opened.select(where), _SID)
    results = rows.ends.filter(pc.equal(rows.ends["kind"], "result")).select([_SID, "reward", "finished"])
    per = _at(sid, results.group_by(_SID).aggregate(
        [("reward", "sum"), ("reward", "count"), ("finished", "any"), (_SID, "count")]), _SID)  # fmt: skip
    rewarded = pc.fill_null(pc.greater(per["reward_count"], 0), False)
    frame = pa.table({
        "session_id": ids, **{name: known[name] for name in ("environment", "split", "task_index")},
        "steps": pc.fill_null(per[f"{_SID}_count"], 0), "errors": pc.fill_null(known["errors"], 0),
        "reward": pc.if_else(rewarded, per["reward_sum"], 0.0), "finished": pc.fill_null(per["finished_any"], False),
        "rollout": _at(sid, _rollouts(rows), _SID)["rollout"], "duration_s": known["duration_s"],
        "started": known["opened"], "error": pa.nulls(len(ids), _STR), "order": np.arange(len(ids), dtype=np.int64),
        _SID: sid,
    })  # fmt: skip
    recorded = pc.is_in(sid, value_set=outcomes[_SID].combine_chunks())
    parts = [frame.filter(pc.invert(recorded))]
    if pc.any(recorded).as_py():  # an evaluation's episodes: what its episode row recorded
        parts.append(
            _recorded(frame.filter(recorded), outcomes, ("rollout", "reward", "finished", "duration_s", "error"))
        )
    return _typed(_in_order(parts, {**LISTING_COLUMNS, "session_id": _IDS, "order": _I64}), LISTING_COLUMNS)
