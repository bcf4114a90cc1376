"""One episode's timeline: its trace rows as a person reads them (``timeline(rows)``, the trace viewer's).

Requests and responses (status, time to first byte), SSE events, pings with the real gap since the
previous one, tool calls with their inputs and outputs, rewards, the agent's stream rebuilt
(reasoning, text and tool-call arguments: the deltas joined by ``ors_lab.transcript``, the one
joiner), errors marked. Runs of chunks and deltas are one item each; each item's text is cut at
``TEXT_CHARS``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ors_lab.html import fmt
from ors_lab.transcript import PART_KINDS, STREAM_KINDS, AgentStream, Part, output_text

__all__ = ["TEXT_CHARS", "cut", "timeline"]

TEXT_CHARS = 2000
"""The most characters of one item's text (a body, an output, a reasoning part) a timeline sends."""


def timeline(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The items a person reads for one episode's trace rows (in ``seq`` order): see the module docstring.

    Each item: ``t`` (seconds since the first row), ``gap`` (seconds since the item before),
    ``kind`` (what it is: ``http``, ``llm``, ``sse``, ``ping``, ``call``, ``session``, ``turn``,
    ``reasoning``, ``text``, ``tool-input``, ``tool-call``, ``tool-output``, ``reward``, ``usage``,
    ``finish``, ``error``, ``episode``, ...), ``title`` (one line), ``detail`` (text, cut at
    ``TEXT_CHARS``, or None), ``error`` (bool), ``span`` (seconds a run of chunks or deltas took),
    ``count`` (rows it stands for) and, for a ping, ``since`` (seconds since the previous ping).
    """
    return _Timeline(rows).items


@dataclass
class _Item:
    t_ns: int
    kind: str
    title: str
    detail: str | None = None
    error: bool = False
    end_ns: int | None = None
    count: int = 1
    since: float | None = None
    group: tuple[Any, ...] | None = None
    part: Part | None = None
    size: int = 0


class _Timeline:
    def __init__(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self.t0 = int(rows[0]["t_ns"]) if rows else 0
        self.list: list[_Item] = []
        self.stream = AgentStream()
        self.payloads: dict[tuple[Any, ...], list[str]] = {}  # (call, attempt) -> its chunk and end data
        self.last_ping: dict[Any, int] = {}  # session pings (None) and each call's server pings -> t_ns
        self.opened: int | None = None
        self.parts: dict[int, _Item] = {}  # id of a reasoning, text or streamed-arguments part -> its item
        for index, row in enumerate(rows):
            self.row(index, row)
        self.items = [self.out(item, self.list[n - 1] if n else None) for n, item in enumerate(self.list)]

    def out(self, item: _Item, before: _Item | None) -> dict[str, Any]:
        detail = item.detail
        if item.part is not None:
            detail = item.part.describe() if item.part.kind == "tool-call" else item.part.text
            item.title = _part_title(item.part, item.title)
        return {
            "t": round((item.t_ns - self.t0) / 1e9, 6),
            "gap": None if before is None else round((item.t_ns - before.t_ns) / 1e9, 6),
            "kind": item.kind,
            "title": item.title,
            "detail": None if detail in (None, "") else cut(detail, TEXT_CHARS),
            "error": item.error,
            "span": None if item.end_ns is None else round((item.end_ns - item.t_ns) / 1e9, 6),
            "count": item.count,
            "since": item.since,
        }

    def add(self, row: Mapping[str, Any], kind: str, title: str, detail: str | None = None, *, error: bool = False,
            group: tuple[Any, ...] | None = None) -> _Item:  # fmt: skip
        item = _Item(int(row["t_ns"]), kind, title, detail, error, group=group)
        self.list.append(item)
        return item

    def grouped(self, row: Mapping[str, Any], group: tuple[Any, ...]) -> _Item | None:
        """The last item, if it is a run of ``group`` that this row continues."""
        last = self.list[-1] if self.list else None
        if last is not None and last.group == group:
            last.count += 1
            last.end_ns = int(row["t_ns"])
            return last
        return None

    def row(self, index: int, row: Mapping[str, Any]) -> None:
        layer, kind = row["layer"], row["kind"]
        if layer == "agent" and kind in STREAM_KINDS:
            self.agent(index, row)
        elif kind in ("request", "response", "chunk", "disconnect", "retry", "event", "comment"):
            self.wire(row, llm=layer == "agent")
        elif layer == "agent":
            self.agent_other(row)
        else:
            self.session(row)

    # the wire: ORS traffic, and the agent's own (its LLM's) ----------------------------------------

    def wire(self, row: Mapping[str, Any], *, llm: bool) -> None:
        kind, call, attempt = row["kind"], row["call"], row["attempt"]
        who = "llm" if llm else "http"
        prefix = "LLM " if llm else ""
        where = "" if call is None else f" · call {call}" + (f", attempt {attempt}" if attempt and attempt > 1 else "")
        if kind == "request":
            path = urlsplit(row["url"] or "").path or (row["url"] or "")
            tool = f" · {row['tool']}" if row["tool"] and not llm else ""
            self.add(row, who, f"{prefix}{row['method'] or ''} {path}{where}{tool}", _body(row["body"]))
        elif kind == "response":
            status = row["status"]
            ttfb = row["ttfb_ns"]
            latency = "" if ttfb is None else f" · first byte after {_ms(ttfb / 1e6)}"
            self.add(row, who, f"{prefix}{status}{latency}{where}", _body(row["body"]),
                     error=status is not None and status >= 400)  # fmt: skip
        elif kind == "chunk":
            group = ("chunk", llm, call, attempt)
            item = self.grouped(row, group) or self.add(row, who, "", group=group)
            item.size += int(row["size"] or 0)
            item.title = f"{prefix}{_plural(item.count, 'network chunk')} · {_bytes(item.size)}"
        elif kind == "disconnect":
            self.add(row, who, f"{prefix}stream dropped{where}", row["error"], error=True)
        elif kind == "retry":
            backoff = "" if row["backoff"] is None else f" in {fmt(float(row['backoff']))} s"
            self.add(row, "retry", f"{prefix}retry{backoff}{where}: {row['reason'] or ''}".rstrip(": "))
        elif kind == "event":
            self.event(row, llm=llm, where=where)
        elif kind == "comment":
            self.comment(row, llm=llm)

    def event(self, row: Mapping[str, Any], *, llm: bool, where: str) -> None:
        name, data, call, attempt = row["event"], row["data"] or "", row["call"], row["attempt"]
        group: tuple[Any, ...]
        if llm:  # an LLM's stream: one item for the run of its events
            group = ("llm-events", attempt)
            item = self.grouped(row, group) or self.add(row, "llm", "", group=group)
            item.size += len(data)
            item.title = f"LLM {_plural(item.count, 'SSE event')} · {_plural(item.size, 'char')}"
            return
        if name in ("chunk", "end"):
            self.payloads.setdefault((call, attempt), []).append(data)
        if name == "chunk":
            group = ("sse-chunks", call, attempt)
            item = self.grouped(row, group) or self.add(row, "sse", "", group=group)
            item.size += len(data)
            item.title = f"{_plural(item.count, 'chunk event')} · {_plural(item.size, 'char')}"
        elif name == "task_id":
            self.add(row, "sse", f"task_id {data}{where}")
        elif name == "end":
            self.add(row, "sse", f"end{where}", _pretty(data))
        elif name == "error":
            self.add(row, "sse", f"error event{where}", data, error=True)
        else:
            self.add(row, "sse", f"event {name}{where}", data)

    def comment(self, row: Mapping[str, Any], *, llm: bool) -> None:
        key = ("comment", llm, row["call"])
        since = self.gap_since(key, row, default=None)
        text = (row["comment"] or "").strip()
        title = f"{'LLM ' if llm else ''}server ping" if text.startswith("ping") else f": {text}"
        item = self.add(row, "ping", title + ("" if since is None else f" · {_seconds(since)} after the last"),
                        text or None)  # fmt: skip
        item.since = since

    def gap_since(self, key: Any, row: Mapping[str, Any], default: int | None) -> float | None:
        now = int(row["t_ns"])
        before = self.last_ping.get(key, default)
        self.last_ping[key] = now
        return None if before is None else round((now - before) / 1e9, 6)

    # the ORS session and its calls -------------------------------------------------------------------

    def session(self, row: Mapping[str, Any]) -> None:
        kind = row["kind"]
        if kind == "open":
            task = "" if row["task_index"] is None else f" {row['split']}/{row['task_index']}"
            self.add(row, "session", f"session opened · {row['environment'] or ''}{task}")
            self.opened = int(row["t_ns"])
        elif kind == "ping":
            after = "the last" if "session" in self.last_ping else "opening"
            since = self.gap_since("session", row, self.opened)
            item = self.add(
                row, "ping", "keep-alive ping" + ("" if since is None else f" · {_seconds(since)} after {after}")
            )
            item.since = since
        elif kind == "close":
            ok = row["ok"] is not False
            self.add(row, "session", "session closed" if ok else "session delete failed", row["error"], error=not ok)
        elif kind == "result":
            self.result(row)
        elif kind == "call_error":
            self.add(row, "call", f"call {row['call']} raised · {row['tool'] or ''}".rstrip(" ·"), row["error"],
                     error=True)  # fmt: skip
        else:
            self.add(row, "other", str(kind), row["error"] or row["data"], error=bool(row["error"]))

    def result(self, row: Mapping[str, Any]) -> None:
        call = row["call"]
        payload = [value for (c, _), value in self.payloads.items() if c == call]
        output = output_text(_json("".join(payload[-1]))) if payload else None
        ok = row["ok"] is not False
        facts = [f"call {call} {row['tool'] or ''}".rstrip(), "ok" if ok else "failed"]
        if row["reward"] is not None:
            facts.append(f"reward {fmt(float(row['reward']))}")
        if row["finished"]:
            facts.append("finished")
        detail = output if ok else " · ".join(str(x) for x in (row["error"], row["reason"]) if x)
        inputs = f"input {row['input']}\n" if row["input"] else ""
        self.add(row, "call", "result · " + " · ".join(facts), inputs + (detail or ""), error=not ok)

    # the agent ----------------------------------------------------------------------------------------

    def agent(self, index: int, row: Mapping[str, Any]) -> None:
        item = _json(row["data"] or "")
        if not isinstance(item, dict):
            return
        part = self.stream.feed(item, index)
        kind = row["kind"]
        if kind in PART_KINDS:
            if part is None:
                return
            mine = self.parts.get(id(part))
            if mine is None:
                shown = "tool-input" if part.kind == "tool-call" else part.kind
                mine = self.parts[id(part)] = self.add(row, shown, shown)
                mine.part = part
            else:
                mine.end_ns, mine.count = int(row["t_ns"]), mine.count + 1
            return
        if kind == "block-start":
            self.add(row, "turn", f"turn · {item.get('blockName') or item.get('blockId') or ''}".rstrip(" ·"))
        elif kind == "block-end":
            return
        elif kind == "tool-input-available":
            tool = item.get("toolName") or (part.tool if part else None) or "?"
            self.add(row, "tool-call", f"calls {tool}", _compact(item.get("input")))
        elif kind == "tool-output-available":
            self.add(row, "tool-output", f"output of {_tool(part)}", output_text(item.get("output")))
        elif kind == "tool-output-error":
            reason = item.get("reason")
            self.add(row, "error", f"{_tool(part)} failed" + (f" ({reason})" if reason else ""), str(item.get("error")),
                     error=True)  # fmt: skip
        elif kind == "reward":
            finished = " · finished" if item.get("finished") else ""
            self.add(row, "reward", f"reward {fmt(_float(item.get('reward')))} for {_tool(part)}{finished}")
        elif kind == "error":
            source = item.get("source")
            self.add(row, "error", f"{item.get('errorType') or 'error'}" + (f" from the {source}" if source else ""),
                     str(item.get("message") or ""), error=True)  # fmt: skip

    def agent_other(self, row: Mapping[str, Any]) -> None:
        kind = row["kind"]
        item = _json(row["data"] or "")
        item = item if isinstance(item, dict) else {}
        if kind == "start":
            self.add(row, "start", "episode starts")
        elif kind == "usage":
            scope = item.get("scope") or "call"
            model = f" · {item['model']}" if item.get("model") else ""
            self.add(row, "usage", f"tokens ({scope}{model}): {fmt(item.get('inputTokens'))} in, "
                                   f"{fmt(item.get('outputTokens'))} out")  # fmt: skip
        elif kind == "finish":
            reason = item.get("finishReason") or row["reason"]
            self.add(row, "finish", f"finish · {reason}", error=reason == "error")
        elif kind == "episode":
            facts = [f"reward {fmt(_float(item.get('reward')))}", "success" if item.get("success") else "no success",
                     _plural(int(item.get("steps") or 0), "step")]  # fmt: skip
            error = item.get("error")
            kind_of = f"{item.get('error_type')}: " if item.get("error_type") else ""
            self.add(row, "episode", "episode · " + ", ".join(facts), f"{kind_of}{error}" if error else None,
                     error=bool(error))  # fmt: skip
        else:
            self.add(row, "other", str(kind), row["data"], error=bool(row["error"]))


def _part_title(part: Part, shown: str) -> str:
    pieces = f" · {_plural(part.pieces, 'delta')}" if part.pieces > 1 else ""
    if part.kind == "tool-call":
        return f"{part.tool or '?'} arguments streamed{pieces}"
    return f"{shown}{pieces}"


def _tool(part: Part | None) -> str:
    return (part.tool if part is not None else None) or "the tool"


def cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and how many more there were."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _compact(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def _pretty(text: str) -> str:
    value = _json(text)
    return text if value is None else json.dumps(value, ensure_ascii=False, indent=1, default=str)


def _body(body: bytes | None) -> str | None:
    if not body:
        return None
    text = bytes(body[: TEXT_CHARS * 4]).decode("utf-8", "replace")
    return _pretty(text) if len(body) <= TEXT_CHARS * 4 else text


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _bytes(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} KiB" if size < 1024 * 1024 else f"{size / 2**20:.1f} MiB"


def _ms(ms: float) -> str:
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def _seconds(seconds: float) -> str:
    return _ms(seconds * 1000) if seconds < 1 else f"{seconds:.2f} s"


def _float(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None
