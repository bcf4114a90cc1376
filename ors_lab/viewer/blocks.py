"""The protocol's models as HTML: blocks, rewards, results, tasks, splits and tools (``ors_lab.html`` pieces).

The outcome, reward and errors first, ids last; text escaped, images drawn. The notebook layer
registers these as the models' MIME bundles (``ors_lab.notebook.display``); the session and run
views draw their blocks and rewards with the same pieces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ors_lab.html import Markup, card, colour, escape, fmt, pretty_json, styled, table
from ors_lab.protocol.models import JSON, Block, ImageBlock, Split, Task, TextBlock, ToolResult, ToolSpec

__all__ = [
    "HTML_TEXT_LIMIT",
    "blocks_html",
    "bundle_of",
    "image_block_html",
    "image_html",
    "result_html",
    "reward_html",
    "short_json",
    "split_html",
    "task_html",
    "text_block_html",
    "text_html",
    "tool_html",
]

HTML_TEXT_LIMIT = 20_000
"""The most characters of one text block an HTML view shows (the rest is counted, not drawn)."""

_Model = TypeVar("_Model")


def bundle_of(render: Callable[[_Model], str]) -> Callable[[_Model], dict[str, Any]]:
    """A display's bundle maker from an HTML renderer: the HTML, and the model's ``repr`` as its text."""

    def bundle(model: _Model) -> dict[str, Any]:
        return {"text/html": render(model), "text/plain": repr(model)}

    return bundle


def image_html(mime_type: str, data: str) -> Markup:
    """An ``<img>`` showing base64 ``data`` inline (a data URI: no file, no network)."""
    return Markup(
        f'<img src="data:{escape(mime_type)};base64,{escape(data)}" alt="{escape(mime_type)}" '
        'style="max-width:100%;max-height:480px;image-rendering:auto"/>'
    )


def text_html(text: str, *, limit: int = HTML_TEXT_LIMIT) -> Markup:
    """Text in a ``<pre>``, escaped, cut at ``limit`` characters (saying how many more there were)."""
    more = ""
    if len(text) > limit:
        more = f'<div class="ol-dim">… {len(text) - limit:,} more characters</div>'
        text = text[:limit]
    return Markup(f'<pre class="ol-pre">{escape(text)}</pre>{more}')


def blocks_html(blocks: Sequence[Block], *, limit: int = HTML_TEXT_LIMIT) -> Markup:
    """Blocks as HTML: text in ``<pre>`` (escaped, each cut at ``limit`` characters), images as images."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append(text_html(block.text, limit=limit))
        elif isinstance(block, ImageBlock):
            parts.append(f"<div>{image_html(block.mime_type, block.data)}</div>")
        else:
            parts.append(f'<div class="ol-dim">{escape(block.type)} block: <code>{escape(repr(block))}</code></div>')
    return Markup("".join(parts))


def reward_html(reward: float | None) -> Markup:
    """A reward, coloured on the red-to-green scale (``-`` when there is none)."""
    if reward is None:
        return Markup('<span class="ol-dim">-</span>')
    return Markup(f'<b style="color:{colour(reward)}">{escape(fmt(reward))}</b>')


def short_json(value: JSON, limit: int = 200) -> str:
    """A JSON value on one line, cut at ``limit`` characters."""
    text = value if isinstance(value, str) else pretty_json(value, limit=limit * 4).replace("\n", " ")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def text_block_html(block: TextBlock) -> str:
    """A text block, escaped and cut at ``HTML_TEXT_LIMIT`` characters."""
    return styled(blocks_html((block,)))


def image_block_html(block: ImageBlock) -> str:
    """An image block, drawn inline."""
    return styled(blocks_html((block,)))


def result_html(result: ToolResult) -> str:
    """A tool result: the outcome, reward and errors first, the blocks, the task_id last."""
    if result.ok:
        rows: list[tuple[str, Any]] = [("outcome", Markup('<span class="ol-ok">ok</span>')),
                                       ("reward", reward_html(result.reward)), ("finished", result.finished),
                                       ("blocks", len(result.blocks))]  # fmt: skip
        if result.metadata is not None:
            rows.append(("metadata", short_json(result.metadata)))
        body = blocks_html(result.blocks)
    else:
        rows = [("outcome", Markup('<span class="ol-bad">failed (ok=False)</span>')), ("error", result.error)]
        if result.reason is not None:
            rows.append(("reason", result.reason))
        body = Markup("")
    if result.task_id is not None:  # ids last
        body = Markup(f'{body}<div class="ol-dim">task_id {escape(result.task_id)}</div>')
    return styled(card("ToolResult", rows, extra=body))


def split_html(split: Split) -> str:
    """A split: its name and type."""
    return styled(
        f'<span class="ol-card"><b>{escape(split.name)}</b> <span class="ol-pill">{escape(split.type)}</span></span>'
    )


def task_html(task: Task) -> str:
    """A task: its spec, ids last."""
    ids = [key for key in task.spec if key == "id" or key.endswith("_id")]
    rows = [(key, short_json(value, 400)) for key, value in task.spec.items() if key not in ids]
    rows += [(key, short_json(task.spec[key])) for key in ids]
    return styled(card("Task", rows, subtitle=task.environment))


def tool_html(tool: ToolSpec) -> str:
    """A tool: its description and parameters."""
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    found = schema.get("properties")
    properties: dict[str, Any] = found if isinstance(found, dict) else {}
    required = set(schema.get("required") or ())
    rows = []
    for name, prop in properties.items():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type") or " | ".join(str(p.get("type")) for p in prop.get("anyOf", []) if isinstance(p, dict))
        rows.append((name, kind or "-", "yes" if name in required else "no", prop.get("description") or ""))
    params = (
        table(["parameter", "type", "required", "description"], rows)
        if rows
        else Markup('<div class="ol-dim">no parameters</div>')
    )
    return styled(card(tool.name, [("description", tool.description or "-")], subtitle="tool", extra=params))
