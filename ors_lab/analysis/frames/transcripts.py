"""The agent's own view: ``transcripts``, one row per turn, its streamed deltas joined (``ors_lab.transcript``)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pyarrow.compute as pc

from ors_lab.analysis.frames.columns import TRANSCRIPTS_COLUMNS
from ors_lab.analysis.frames.listing import listing_frame
from ors_lab.analysis.frames.source import Source, _json, _select, _typed
from ors_lab.transcript import STREAM_KINDS, join_stream

__all__ = ["transcripts_frame"]


def transcripts_frame(source: Source, episodes: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per turn of the agent in each episode: its reasoning, text and tool calls, the deltas
    joined (``ors_lab.transcript``), in the order of ``episodes`` (the listing's when not
    given: the same episodes, in the same order), then by turn."""
    rows = _select(source, ["session_id", "data"], STREAM_KINDS, agent=True)
    rows = rows.filter(pc.and_(pc.is_valid(rows["session_id"]), pc.is_valid(rows["data"])))
    items: dict[str, list[Any]] = {}
    for session_id, data in zip(rows["session_id"].to_pylist(), rows["data"].to_pylist(), strict=True):
        item = _json(data)
        if isinstance(item, dict):
            items.setdefault(session_id, []).append(item)
    if not items:
        return _typed(pd.DataFrame(), TRANSCRIPTS_COLUMNS)
    keys = ["environment", "split", "task_index", "rollout"]
    episodes = listing_frame(source) if episodes is None else episodes
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
