"""The frames as they were built before traces were read where they lie (pandas over the whole table, one
Python row at a time where pandas could not): kept as the oracle that the Arrow-built frames of
``ors_lab.analysis.frames`` are compared with, on real and synthetic traces (``test_frames.py``).
Not used by the package."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from ors_lab.analysis.frames import (
    CALLS_COLUMNS,
    EPISODES_COLUMNS,
    ERRORS_COLUMNS,
    LISTING_COLUMNS,
    SESSIONS_COLUMNS,
    STEPS_COLUMNS,
    SUMMARY_COLUMNS,
    TASKS_COLUMNS,
    TOKENS,
    TRANSCRIPTS_COLUMNS,
    Summary,
    default_ks,
    error_types,
    pass_columns,
    threshold_note,
)
from ors_lab.analysis.reduce import Reduction, check_reduction, mean, pass_at_k, reduce_reward, stderr
from ors_lab.transcript import STREAM_KINDS, join_stream, output_text

__all__ = [
    "calls_frame",
    "episodes_frame",
    "errors_frame",
    "finished_episodes",
    "listing_frame",
    "sessions_frame",
    "steps_frame",
    "summary_frame",
    "tasks_frame",
    "transcripts_frame",
]

_STR, _I64, _F64, _BOOL = pa.string(), pa.int64(), pa.float64(), pa.bool_()


def _typed(frame: pd.DataFrame, columns: Mapping[str, pa.DataType]) -> pd.DataFrame:
    """The frame with exactly the declared columns, in order, as Arrow-backed dtypes."""
    out = pd.DataFrame(index=pd.RangeIndex(len(frame)))
    for name, kind in columns.items():
        values = frame[name] if name in frame else pd.Series([None] * len(frame), dtype="object")
        out[name] = pd.Series(_arrow(values, kind), dtype=pd.ArrowDtype(kind))
    return out


def _arrow(values: pd.Series, kind: pa.DataType) -> pa.Array | pa.ChunkedArray:
    if isinstance(values.dtype, pd.ArrowDtype):
        return pa.chunked_array(values.array._pa_array).cast(kind)  # the Arrow data, without a round trip
    return pa.array([None if _missing(value) else value for value in values], type=kind)


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or value is pd.NaT or (isinstance(value, float) and value != value)


def _rows(table: pa.Table, kinds: Sequence[str], columns: Sequence[str], *, agent: bool | None = None) -> pd.DataFrame:
    """The rows of ``kinds`` (of the agent layer, or not of it, or both), with ``columns`` only."""
    mask = pc.is_in(table["kind"], value_set=pa.array(list(kinds), pa.string()))
    if agent is not None:
        layer = pc.equal(table["layer"], "agent")
        mask = pc.and_(mask, layer if agent else pc.invert(layer))
    frame: pd.DataFrame = table.filter(mask).select(list(columns)).to_pandas(types_mapper=pd.ArrowDtype)
    return frame


def events_frame(table: pa.Table) -> pd.DataFrame:
    """Every event, every schema column."""
    frame: pd.DataFrame = table.to_pandas(types_mapper=pd.ArrowDtype)
    return frame


# -- calls and sessions: the wire's view ---------------------------------------------------------------


def calls_frame(table: pa.Table) -> pd.DataFrame:
    """One row per tool call, keyed by (session_id, call): the ORS rows that carry a call number."""
    mask = pc.and_(pc.is_valid(table["call"]), pc.not_equal(table["layer"], "agent"))
    keys = ["session_id", "call"]
    frame = (
        table.filter(mask)
        .select(
            [
                *keys,
                "kind",
                "t_ns",
                "wall",
                "attempt",
                "ttfb_ns",
                "size",
                "environment",
                "split",
                "task_index",
                "tool",
                "input",
                "task_id",
                "ok",
                "reward",
                "finished",
                "error",
                "reason",
                "event",
                "data",
            ]
        )
        .to_pandas(types_mapper=pd.ArrowDtype)
    )
    if frame.empty:
        return _typed(pd.DataFrame(), CALLS_COLUMNS)
    kind = frame["kind"]
    by = [frame[k] for k in keys]
    grouped = frame.groupby(keys, sort=False)
    base = grouped.agg(
        environment=("environment", "first"),
        split=("split", "first"),
        task_index=("task_index", "first"),
        tool=("tool", "first"),
        input=("input", "first"),
        start_ns=("t_ns", "min"),
        started=("wall", "min"),
        attempts=("attempt", "max"),
    )
    base["chunks"] = (kind == "chunk").groupby(by, sort=False).sum()
    base["pings"] = (kind == "comment").groupby(by, sort=False).sum()
    base["bytes"] = frame["size"].where(kind == "chunk").groupby(by, sort=False).sum()
    base["ttfb_ms"] = frame[kind == "response"].groupby(keys, sort=False)["ttfb_ns"].first() / 1e6
    ends = frame[kind.isin(["result", "call_error"])].drop_duplicates(keys, keep="last").set_index(keys)
    for name in ("task_id", "ok", "reward", "finished", "error", "reason"):
        base[name] = ends[name]
    base["outcome"] = ends["kind"]
    base["duration_ms"] = (ends["t_ns"] - base["start_ns"]) / 1e6
    base["output"] = _outputs(frame, keys)
    return _typed(base.reset_index(), CALLS_COLUMNS)


def _outputs(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Each call's output as text: the ``chunk`` and ``end`` events of its last stream joined (the
    result's JSON), read by ``output_text``; null for a failed result or a stream that never ended."""
    events = frame[(frame["kind"] == "event") & frame["event"].isin(["chunk", "end"])]
    if events.empty:
        return pd.Series([], dtype="object")
    data = events["data"].fillna("")
    payloads = data.groupby([events[k] for k in [*keys, "attempt"]], sort=False).agg("".join)
    last = payloads.reset_index().drop_duplicates(keys, keep="last").set_index(keys)["data"]
    return last.map(lambda payload: output_text(_json(payload)))


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def sessions_frame(table: pa.Table) -> pd.DataFrame:
    """One row per session that opened."""
    columns = ["session_id", "kind", "wall", "environment", "split", "task_index", "task", "ok"]
    rows = _rows(table, ["open", "close", "ping", "result", "call_error"], columns, agent=False)
    opened = rows[rows["kind"] == "open"].drop_duplicates("session_id").set_index("session_id")
    if opened.empty:
        return _typed(pd.DataFrame(), SESSIONS_COLUMNS)
    kind = rows["kind"]
    counts = {
        name: (kind.isin(kinds)).groupby(rows["session_id"], sort=False).sum()
        for name, kinds in (("calls", ["result", "call_error"]), ("errors", ["call_error"]), ("pings", ["ping"]))
    }
    confirmed = (kind == "close") & ~rows["ok"].eq(False).fillna(False)  # ok false: its delete failed
    closed = rows[confirmed].groupby("session_id", sort=False)["wall"].last()
    frame = opened[["environment", "split", "task_index", "task"]].copy()
    frame["opened"] = opened["wall"]
    frame["closed"] = closed
    frame["duration_s"] = (frame["closed"] - frame["opened"]).dt.total_seconds()
    for name, series in counts.items():
        frame[name] = series.reindex(frame.index, fill_value=0)
    return _typed(frame.reset_index(), SESSIONS_COLUMNS)


# -- steps, episodes, tasks: the run's view ------------------------------------------------------------


def _rollouts(table: pa.Table) -> pd.Series:
    """session_id -> rollout, from the evaluation's ``start`` and ``episode`` rows."""
    rows = _rows(table, ["start", "episode"], ["session_id", "rollout"], agent=True)
    rows = rows[rows["rollout"].notna()]
    return rows.drop_duplicates("session_id", keep="last").set_index("session_id")["rollout"]


def steps_frame(table: pa.Table, calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Calls that returned a result, numbered 1, 2, ... within their session, with their rollout, in
    (environment, split, task, rollout) order, as the episodes."""
    calls = calls_frame(table) if calls is None else calls
    steps = calls[calls["outcome"] == "result"].copy()
    first = {sid: n for n, sid in enumerate(dict.fromkeys(steps["session_id"]))}  # sessions in the order they began
    steps["order"] = steps["session_id"].map(first)
    steps["rollout"] = steps["session_id"].map(_rollouts(table)).astype("object")
    steps = _typed(steps, {**STEPS_COLUMNS, "order": _I64})
    steps = steps.sort_values(["environment", "split", "task_index", "rollout", "order", "call"], kind="stable",
                              na_position="last")  # fmt: skip
    steps["step"] = steps.groupby("order", sort=False).cumcount() + 1
    return _typed(steps.drop(columns="order").reset_index(drop=True), STEPS_COLUMNS)


_OUTCOME = pa.schema(
    [
        pa.field("total_reward", _F64),
        pa.field("final_reward", _F64),
        pa.field("success", _BOOL),
        pa.field("finish_reason", _STR),
        pa.field("duration_s", _F64),
        pa.field("started", _F64),
        pa.field("error_type", _STR),
    ]
)
"""What an ``episode`` row's data (the episode's record, JSON) adds to its typed columns."""


def _outcomes(table: pa.Table) -> pd.DataFrame:
    """The last ``episode`` row of each session: its typed columns, and what its record adds."""
    columns = ["seq", "session_id", "environment", "split", "task_index", "rollout", "reward", "finished", "error",
               "data", *TOKENS]  # fmt: skip
    rows = table.filter(pc.and_(pc.equal(table["kind"], "episode"), pc.equal(table["layer"], "agent")))
    rows = rows.select(columns)
    if rows.num_rows:
        text = "\n".join(rows["data"].to_pylist()).encode()
        options = pa_json.ParseOptions(explicit_schema=_OUTCOME, unexpected_field_behavior="ignore")
        record = pa_json.read_json(io.BytesIO(text), parse_options=options)
        for name in _OUTCOME.names:
            rows = rows.append_column(name, record[name])
    else:
        rows = rows.append_column("_", pa.nulls(0))
    frame: pd.DataFrame = rows.drop_columns(["data"]).to_pandas(types_mapper=pd.ArrowDtype)
    return frame.drop_duplicates("session_id", keep="last").set_index("session_id")


class _Step(NamedTuple):
    """A step as a reduction function sees it."""

    tool: str
    input: str
    ok: bool
    reward: float | None
    finished: bool
    error: str | None


def episodes_frame(
    table: pa.Table,
    *,
    reward: Reduction = "sum",
    success_threshold: float = 1.0,
    steps: pd.DataFrame | None = None,
    sessions: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per episode, in (environment, split, task, rollout) order; see the module docstring.

    ``reward`` and ``success_threshold`` reduce the sessions no evaluation ran (an evaluation's
    episodes keep the reward and success it recorded).
    """
    check_reduction(reward)
    steps = steps_frame(table) if steps is None else steps
    sessions = sessions_frame(table) if sessions is None else sessions
    outcomes = _outcomes(table)
    opened = sessions.set_index("session_id")
    ids = list(dict.fromkeys([*opened.index, *outcomes.index]))
    if not ids:
        return _typed(pd.DataFrame(), EPISODES_COLUMNS)
    index = pd.Index(ids, name="session_id")
    by_session = steps.groupby("session_id", sort=False)
    frame = pd.DataFrame(
        {
            **{name: opened[name].reindex(index) for name in ("environment", "split", "task_index", "task")},
            "errors": opened["errors"].reindex(index).fillna(0),
            "steps": by_session.size().reindex(index, fill_value=0),
            "order": range(len(index)),
        },
        index=index,
    )
    recorded = index.isin(outcomes.index)
    parts = []
    if (~recorded).any():  # sessions no evaluation ran: their steps reduced here
        bare = frame[~recorded].copy()
        wanted = set(bare.index)
        reduced = {sid: reduce_reward(_steps(group), reward) for sid, group in by_session if sid in wanted}
        values = [reduced.get(sid) or reduce_reward([], reward) for sid in bare.index]
        bare["total_reward"], bare["final_reward"], bare["reward"] = (list(c) for c in zip(*values, strict=True))
        bare["success"] = [value >= success_threshold for _, _, value in values]
        bare["finished"] = by_session["finished"].any().reindex(bare.index, fill_value=False)
        bare["rollout"] = _rollouts(table).reindex(bare.index)
        bare["started"] = opened["opened"].reindex(bare.index)
        bare["duration_s"] = opened["duration_s"].reindex(bare.index)
        parts.append(bare)
    if recorded.any():  # an evaluation's episodes: what its episode row recorded
        parts.append(_recorded_outcomes(frame[recorded], outcomes, (
            "rollout", "reward", "total_reward", "final_reward", "finished", "success", "finish_reason", "duration_s",
            "error", "error_type", *TOKENS)))  # fmt: skip
    return _in_order([_typed(part.reset_index(), {**EPISODES_COLUMNS, "order": _I64}) for part in parts])


def _recorded_outcomes(frame: pd.DataFrame, outcomes: pd.DataFrame, names: Sequence[str]) -> pd.DataFrame:
    """An evaluation's episodes as their ``episode`` rows recorded them: ``names`` and the start taken from there."""
    mine = frame.copy()
    outcome = outcomes.reindex(mine.index)
    for name in ("environment", "split", "task_index"):
        mine[name] = outcome[name].where(outcome[name].notna(), mine[name])
    mine["started"] = pd.to_datetime(outcome["started"].astype("float64") * 1e6, unit="us", utc=True)
    for name in names:
        mine[name] = outcome[name]
    return mine


def _in_order(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The parts as one frame in the episodes' order (environment, split, task, rollout, then as recorded)."""
    typed = pd.concat(parts)
    typed = typed.sort_values(["environment", "split", "task_index", "rollout", "order"], kind="stable",
                              na_position="last")  # fmt: skip
    return typed.drop(columns="order").reset_index(drop=True)


def _steps(group: pd.DataFrame) -> list[_Step]:
    rows: list[tuple[Any, ...]] = list(group[list(_Step._fields)].itertuples(index=False))
    return [_Step._make(None if _missing(value) else value for value in values) for values in rows]


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(name): value for name, value in row.items()} for row in frame.to_dict("records")]


def _tasks(episodes: pd.DataFrame) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    keys = ["environment", "split", "task_index", "task"]
    by_task: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in _records(episodes):
        key = tuple(None if _missing(row[k]) else row[k] for k in keys)
        by_task.setdefault(key, []).append(row)
    return by_task


def _aggregate(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean reward, its standard error, success, finished, steps, errors and tokens of some episodes."""
    n = len(episodes)
    rewards = [float(e["reward"]) for e in episodes]
    tokens = {
        name: sum(int(e[name]) for e in episodes if not _missing(e[name]))
        if any(not _missing(e[name]) for e in episodes) else None
        for name in TOKENS
    }  # fmt: skip
    return {
        "episodes": n,
        "mean_reward": mean(rewards),
        "stderr": stderr(rewards),
        "success_rate": sum(bool(e["success"]) for e in episodes) / n if n else None,
        "finished_rate": sum(bool(e["finished"]) for e in episodes) / n if n else None,
        "mean_steps": sum(int(e["steps"]) for e in episodes) / n if n else None,
        "errors": sum(not _missing(e["error"]) for e in episodes),
        **tokens,
    }


def tasks_frame(episodes: pd.DataFrame, ks: Sequence[int] | None = None) -> pd.DataFrame:
    """One row per task (environment, split, task index or spec): its episodes aggregated, and pass@k."""
    ks = default_ks(episodes) if ks is None else ks
    rows = []
    for (environment, split, index, task), group in _tasks(episodes).items():
        successes = sum(bool(e["success"]) for e in group)
        rows.append({"environment": environment, "split": split, "task_index": index, "task": task, **_aggregate(group),
                     **{f"pass@{k}": pass_at_k(len(group), successes, k) for k in ks}})  # fmt: skip
    return _typed(pd.DataFrame(rows), {**TASKS_COLUMNS, **pass_columns(ks)})


def errors_frame(episodes: pd.DataFrame) -> pd.DataFrame:
    """One row per episode that failed, with the error's type and message."""
    return _typed(episodes[episodes["error"].notna()].reset_index(drop=True), ERRORS_COLUMNS)


def summary_frame(episodes: pd.DataFrame, ks: Sequence[int] | None = None) -> Summary:
    """The run in one row: episodes, tasks, mean reward and its stderr, success rate, pass@k (mean over tasks)."""
    ks = default_ks(episodes) if ks is None else ks
    tasks = tasks_frame(episodes, ks)
    row: dict[str, Any] = {
        "environments": ", ".join(dict.fromkeys(episodes["environment"].dropna())),
        "splits": ", ".join(dict.fromkeys(episodes["split"].dropna())),
        "tasks": len(tasks),
        **_aggregate(_records(episodes)),
    }
    row["error_types"] = error_types(episodes)
    row["note"] = threshold_note(episodes)
    for k in ks:
        known = tasks[f"pass@{k}"].dropna()
        row[f"pass@{k}"] = mean([float(v) for v in known]) if len(known) else None
    return Summary(_typed(pd.DataFrame([row]), {**SUMMARY_COLUMNS, **pass_columns(ks)}))


# -- the agent's own view: transcripts -----------------------------------------------------------------


def transcripts_frame(table: pa.Table, episodes: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per turn of the agent in each episode: its reasoning, text and tool calls, the deltas
    joined (``ors_lab.transcript``), in the order of ``episodes`` (the listing's when not
    given: the same episodes, in the same order), then by turn."""
    rows = table.select(["session_id", "layer", "kind", "data"])
    mask = pc.and_(
        pc.equal(rows["layer"], "agent"), pc.is_in(rows["kind"], value_set=pa.array(STREAM_KINDS, pa.string()))
    )
    rows = rows.filter(pc.and_(pc.and_(mask, pc.is_valid(rows["session_id"])), pc.is_valid(rows["data"])))
    items: dict[str, list[Any]] = {}
    for session_id, data in zip(rows["session_id"].to_pylist(), rows["data"].to_pylist(), strict=True):
        item = _json(data)
        if isinstance(item, dict):
            items.setdefault(session_id, []).append(item)
    if not items:
        return _typed(pd.DataFrame(), TRANSCRIPTS_COLUMNS)
    keys = ["environment", "split", "task_index", "rollout"]
    episodes = listing_frame(table) if episodes is None else episodes
    known = episodes.drop_duplicates("session_id").set_index("session_id")[keys]
    where_of = {str(sid): record for sid, record in zip(known.index, known.to_dict("records"), strict=True)}
    order = [sid for sid in dict.fromkeys(episodes["session_id"]) if sid in items]
    order += [sid for sid in items if sid not in where_of]
    out = []
    for session_id in order:
        where = where_of.get(session_id, {})
        for turn in join_stream(items[session_id]).turns():
            calls = turn.tool_calls
            rewards = [call.reward for call in calls if call.reward is not None]
            out.append({**where, "session_id": session_id, "turn": turn.number, "block": turn.name,
                        "reasoning": turn.reasoning or None, "text": turn.text or None,
                        "tool_calls": "\n".join(call.describe() for call in calls) or None, "calls": len(calls),
                        "reward": math.fsum(rewards) if rewards else None,
                        "error": "\n".join(turn.errors) or None})  # fmt: skip
    return _typed(pd.DataFrame(out), TRANSCRIPTS_COLUMNS)


# -- the trace viewer's list ---------------------------------------------------------------------------


def listing_frame(table: pa.Table) -> pd.DataFrame:
    """One row per episode (as ``episodes``: the same episodes, in the same order, with the same
    values) with what the trace viewer lists, built from the ``open``, ``close``, ``result``,
    ``call_error``, ``start`` and ``episode`` rows by Arrow alone, without the per-call frames.

    A session no evaluation ran takes the sum of its rewards (``episodes``' default reduction)."""
    kinds = pa.array(["open", "close", "ping", "result", "call_error", "start", "episode"], pa.string())
    table = table.filter(pc.is_in(table["kind"], value_set=kinds))  # one pass over the trace; the rest is small
    sessions = sessions_frame(table).set_index("session_id")
    outcomes = _outcomes(table)
    ids = list(dict.fromkeys([*sessions.index, *outcomes.index]))
    if not ids:
        return _typed(pd.DataFrame(), LISTING_COLUMNS)
    index = pd.Index(ids, dtype="object", name="session_id")
    results = table.filter(pc.and_(pc.equal(table["kind"], "result"), pc.not_equal(table["layer"], "agent")))
    per = (
        results.select(["session_id", "reward", "finished"])
        .group_by("session_id")
        .aggregate([("reward", "sum"), ("reward", "count"), ("finished", "any"), ("session_id", "count")])
        .to_pandas(types_mapper=pd.ArrowDtype)
        .set_index("session_id")
        .reindex(index)
    )
    frame = pd.DataFrame(
        {
            **{name: sessions[name].reindex(index) for name in ("environment", "split", "task_index")},
            "steps": per["session_id_count"].fillna(0),
            "errors": sessions["errors"].reindex(index).fillna(0),
            "reward": per["reward_sum"].where(per["reward_count"] > 0, 0.0),
            "finished": per["finished_any"].fillna(False),
            "rollout": _rollouts(table).reindex(index),
            "duration_s": sessions["duration_s"].reindex(index),
            "started": sessions["opened"].reindex(index),
            "error": pd.Series(pd.NA, index=index, dtype=pd.ArrowDtype(_STR)),
            "order": pd.Series(range(len(index)), index=index, dtype=pd.ArrowDtype(_I64)),
        },
        index=index,
    )
    ids_array = pa.array(ids, pa.string())
    recorded = pc.is_in(ids_array, value_set=pa.array(list(outcomes.index), pa.string())).to_numpy(zero_copy_only=False)
    frame["session_id"] = pd.Series(ids_array, index=index, dtype=pd.ArrowDtype(_STR))
    parts = [frame[~recorded]]
    if recorded.any():  # an evaluation's episodes: what its episode row recorded
        listed = ("rollout", "reward", "finished", "duration_s", "error")
        parts.append(_recorded_outcomes(frame[recorded], outcomes, listed))
    return _in_order([_typed(part.reset_index(drop=True), {**LISTING_COLUMNS, "order": _I64}) for part in parts])


def finished_episodes(table: pa.Table) -> dict[tuple[str, str, int, int], str]:
    """The episodes an evaluation finished without an error: (environment, split, task, rollout) -> session id."""
    rows = table.filter(pc.and_(pc.equal(table["kind"], "episode"), pc.equal(table["layer"], "agent")))
    rows = rows.filter(pc.fill_null(rows["ok"], False)).select(
        ["environment", "split", "task_index", "rollout", "session_id"]
    )
    return {
        (row["environment"], row["split"], row["task_index"], row["rollout"]): row["session_id"]
        for row in rows.to_pylist()
    }
