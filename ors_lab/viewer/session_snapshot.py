"""A session's view as the front end's data (``static/session.js`` draws it): JSON-able, bounded in size."""

from __future__ import annotations

import json
from typing import Any

from ors_lab.events import wall_time
from ors_lab.viewer.session_fold import FULL_STEPS, IMAGE_BUDGET, INPUT_CHARS, SessionFold, _utf8

__all__ = ["session_snapshot"]


def _json_text(value: Any, limit: int) -> str:
    """A JSON value indented for reading, cut at ``limit`` characters."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return _utf8(text if len(text) <= limit else text[:limit] + " …")


def _budgeted(blocks: list[dict[str, Any]] | None, budget: int) -> tuple[list[dict[str, Any]] | None, int]:
    """``blocks`` with the images that fit in ``budget`` base64 characters (the others named, not drawn)."""
    if not blocks:
        return blocks, budget
    kept = []
    for block in blocks:
        data = block.get("data")
        if data:
            if len(data) <= budget:
                budget -= len(data)
            else:
                block = {**block, "data": None}
        kept.append(block)
    return kept, budget


def session_snapshot(s: SessionFold) -> dict[str, Any]:
    """The data the front end renders (images within ``IMAGE_BUDGET``, the newest steps whole)."""
    rows = list(s.steps.values())
    budget = IMAGE_BUDGET
    prompt, budget = _budgeted(s.prompt, budget)
    shown: list[dict[str, Any]] = []
    full = {step.call for step in rows[-FULL_STEPS:]}
    for step in reversed(rows):
        row: dict[str, Any] = {
            "call": step.call, "tool": step.tool, "input": step.input_line, "status": step.status,
            "ok": step.ok, "reward": step.reward, "finished": step.finished, "error": step.error,
            "summary": step.summary, "chunks": step.chunks, "chars": step.chars, "retries": step.retries,
            "duration": None if step.ended_ns is None else (step.ended_ns - step.started_ns) / 1e9,
            "full": step.call in full and not step.folded,
        }  # fmt: skip
        if row["full"]:  # indented here, at most 10 times a second, not as each call goes out
            row["input_full"] = step.input if isinstance(step.input, str) else _json_text(step.input, INPUT_CHARS)
            row["output"], budget = _budgeted(step.preview(s.output_chars), budget)
        shown.append(row)
    shown.reverse()
    return {
        "sid": s.session_id,
        "environment": s.environment,
        "task": s.label,
        "state": s.state,
        "error": s.error,
        "steps": s.step_total,
        "total": s.total_reward,
        "last": s.last_reward,
        "finished": s.finished,
        "pings": s.pings,
        "last_ping": None if s.last_ping_ns is None else wall_time(s.last_ping_ns),
        "opened": None if s.opened_ns is None else wall_time(s.opened_ns),
        "retries": s.retries,
        "prompt": prompt,
        "tools": s.tools,
        "earlier": s.earlier,
        "rows": shown,
    }
