"""A session's view drawn as text (the one line a terminal shows) and as HTML (the card a saved notebook keeps)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ors_lab.html import Markup, card, escape, fmt, styled, table
from ors_lab.viewer.blocks import image_html, reward_html, text_html
from ors_lab.viewer.session_fold import FULL_STEPS, SessionFold, _line

__all__ = ["session_html", "session_text"]


def _blocks_markup(blocks: Sequence[dict[str, Any]]) -> Markup:
    """Shown blocks as static HTML: text escaped, images drawn when kept."""
    parts: list[str] = []
    for block in blocks:
        if block["type"] == "text":
            parts.append(text_html(block["text"]))
            if block["more"]:
                parts.append(f'<div class="ol-dim">… {block["more"]:,} more characters</div>')
        elif block["type"] == "image" and block.get("data"):
            parts.append(f"<div>{image_html(block['mime'], block['data'])}</div>")
        elif block["type"] == "image":
            parts.append(
                f'<div class="ol-dim">[{escape(block["mime"])} image, {block["size"]:,} base64 characters]</div>'
            )
        else:
            parts.append(f'<div class="ol-dim">[{escape(block["type"])} block]</div>')
    return Markup("".join(parts))


def _thumbnail(block: dict[str, Any]) -> str:
    return (f' <img src="data:{escape(block["mime"])};base64,{escape(block["data"])}" alt="{escape(block["mime"])}" '
            'style="max-height:48px;vertical-align:middle"/>')  # fmt: skip


def session_text(s: SessionFold) -> str:
    """The text form: one line."""
    env = s.environment or "?"
    steps = s.step_total
    parts = [f"session {env} {s.label}", f"{steps} step{'' if steps == 1 else 's'}",
             f"total reward {fmt(s.total_reward)}", f"last {fmt(s.last_reward)}"]  # fmt: skip
    if s.finished:
        parts.append("finished")
    state = s.state
    error = s.error
    parts.append(f"{state}: {_line(error, 80)}" if error else state)
    beat = s.heartbeat()
    if beat:
        parts.append(beat)
    return " · ".join(parts)


def session_html(s: SessionFold) -> str:
    """The static card: state, figures, tools, the prompt, the steps; the session id last."""
    state = s.state
    pill_class = {"open": "ol-ok", "opening": "ol-dim", "failed": "ol-bad", "expired": "ol-bad"}.get(state, "")
    rows: list[tuple[str, Any]] = [
        ("state", Markup(f'<span class="ol-pill {pill_class}">{escape(state)}</span>')),
    ]
    if s.error:
        rows.append(("error", Markup(f'<span class="ol-bad">{escape(s.error)}</span>')))
    rows += [
        ("steps", s.step_total),
        ("total reward", reward_html(s.total_reward)),
        ("last reward", reward_html(s.last_reward)),
        ("finished", s.finished),
    ]
    beat = s.heartbeat()
    if beat:
        rows.append(("heartbeat", beat))
    if s.tools is not None:
        rows.append(("tools", ", ".join(s.tools) or "-"))
    extra = ""
    if s.prompt is not None:
        extra += f"<details open><summary>prompt</summary>{_blocks_markup(s.prompt)}</details>"
    if s.steps:
        listed = list(s.steps.values())
        full = {step.call for step in listed[-FULL_STEPS:]}
        body = []
        for step in listed:
            outcome = (Markup(f'<span class="ol-bad">{escape(step.error)}</span>') if step.error
                       else step.summary or step.status)  # fmt: skip
            if step.call in full and step.blocks:
                images = [b for b in step.blocks if b["type"] == "image" and b.get("data")]
                if images:
                    outcome = Markup(escape(outcome) + "".join(_thumbnail(b) for b in images[:3]))
            body.append((step.call, step.tool, step.input_line, reward_html(step.reward), step.finished, outcome))
        if s.earlier:
            extra += f'<div class="ol-dim">{s.earlier:,} earlier steps not listed</div>'
        extra += table(["#", "tool", "input", "reward", "finished", "output"], body, numeric=[True])
    extra += f'<div class="ol-dim">session {escape(s.session_id)}</div>'
    subtitle = f"{s.environment or '?'} · {s.label}"
    return styled(card("Session", rows, subtitle=subtitle, extra=extra))
