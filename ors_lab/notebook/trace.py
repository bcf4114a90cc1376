"""The trace viewer's state: a recorded run's episodes, a page at a time, and one episode's timeline.

``TraceState(table, listing)`` takes a trace's Arrow ``table`` (every row, ``docs/trace-format.md``)
and its ``listing``: a DataFrame with one row per episode (``session_id``, ``environment``,
``split``, ``task_index``, ``rollout``, ``reward``, ``finished``, ``steps``, ``errors``,
``duration_s``, ``started``, ``error``), as ``ors_lab.analysis`` builds it for ``trace.view()``.
It imports nothing of the analysis layer: it reads columns.

Only what is on screen crosses to the front end. ``snapshot()`` holds the first page and the
counts; the front end asks for the rest:

- ``request({"page": n, "size": s, "sort": column, "desc": bool, "filter": text, "errors": bool})``
  answers ``{"type": "page", ...}``: page ``n`` (from 0) of the episodes that match, sorted;
- ``request({"open": key})`` answers ``{"type": "timeline", ...}``: the episode's rows in order,
  as a person reads them: requests and responses (status, time to first byte), SSE events,
  pings with the real gap since the previous one, tool calls with their inputs and outputs,
  rewards, the agent's stream rebuilt (reasoning, text and tool-call arguments: the deltas joined
  by ``ors_lab.transcript``), errors marked. Runs of chunks and deltas are one item each;
  each item's text is cut at ``TEXT_CHARS`` and a timeline at ``MAX_ITEMS`` items, with a note.

The listing is sorted and filtered by pandas over whole columns, and a timeline reads only its
session's rows (an Arrow filter), so a trace of 10,000 episodes opens at once. A page of its own
holds more at once (the HTML report, ``ors_lab.analysis.report``): ``rows()`` is every row as a
page holds them, ``timelines(keys)`` many timelines, the trace read once for a batch of them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.events import Event
from ors_lab.html import Markup, card, escape, fmt, styled, table
from ors_lab.notebook.state import ViewState
from ors_lab.stats import mean
from ors_lab.transcript import STREAM_KINDS, AgentStream, Part, output_text

__all__ = ["MAX_ITEMS", "PAGE_SIZE", "TEXT_CHARS", "Histogram", "TraceState", "reward_histogram", "timeline"]

PAGE_SIZE = 25
MAX_PAGE_SIZE = 200
MAX_ITEMS = 400
"""The most items a timeline sends; a note says how many more there were."""
TEXT_CHARS = 2000
"""The most characters of one item's text (a body, an output, a reasoning part) a timeline sends."""
STATIC_ROWS = 10
"""The rows of the list a saved notebook's static HTML keeps."""
SORTABLE = ("environment", "split", "task_index", "rollout", "reward", "steps", "errors", "duration_s", "started",
            "error", "finished")  # fmt: skip

_COLUMNS = [
    # (key in a row, header, numeric)
    ("n", "#", True),
    ("environment", "environment", False),
    ("task", "task", False),
    ("rollout", "rollout", True),
    ("reward", "reward", True),
    ("steps", "steps", True),
    ("duration_s", "duration", True),
    ("error", "error", False),
]
_TIMELINE_COLUMNS = ["seq", "t_ns", "layer", "kind", "call", "attempt", "method", "url", "status", "body",
                     "ttfb_ns", "size", "event", "data", "comment", "tool", "input", "ok", "reward", "finished",
                     "error", "reason", "backoff", "environment", "split", "task_index"]  # fmt: skip


class TraceState(ViewState):
    """A recorded run, browsable: see the module docstring. It takes no events (``apply`` ignores them)."""

    name: ClassVar[str] = "trace"
    kinds: ClassVar[Iterable[str] | None] = ()

    def __init__(
        self,
        table: pa.Table,
        listing: pd.DataFrame,
        *,
        path: str = "",
        title: str = "Trace",
        page_size: int = PAGE_SIZE,
    ) -> None:
        self.table = table
        self.path = path
        self.title = title
        self.page_size = _size(page_size)
        self.listing = listing.reset_index(drop=True)
        self.listing["n"] = pd.RangeIndex(1, len(self.listing) + 1)
        evaluated = bool(len(table)) and bool(pc.any(pc.equal(table["kind"], "episode")).as_py())
        self.label = "episodes" if evaluated or not len(self.listing) else "sessions"
        self._keys = pd.Series(
            self.listing["session_id"].astype("object").where(self.listing["session_id"].notna(), None).tolist(),
            dtype="object",
        ).fillna(pd.Series([f"#{n}" for n in self.listing["n"]], dtype="object"))
        self._by_key = {key: index for index, key in enumerate(self._keys)}

    # -- ViewState ------------------------------------------------------------------------------

    def apply(self, event: Event) -> bool:
        """A recorded run takes no events."""
        return False

    def done(self) -> bool:
        """Always: the run is over."""
        return True

    def snapshot(self) -> dict[str, Any]:
        """The title, the counts, the columns, the first page and the reward histogram."""
        return {
            "title": self.title,
            "label": self.label,
            "path": self.path,
            "facts": [[name, _jsonable(value)] for name, value in self.facts()],
            "columns": [list(column) for column in _COLUMNS],
            "sortable": list(SORTABLE),
            "page": self.page(),
            "histogram": self.histogram().to_json(),
            "limits": {"items": MAX_ITEMS, "text": TEXT_CHARS, "page_size": MAX_PAGE_SIZE},
        }

    def request(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """A page (``{"page": n, ...}``) or an episode's timeline (``{"open": key}``); None for anything else."""
        if "open" in message:
            return self.timeline(str(message["open"]))
        if "page" in message:
            return self.page(
                _int(message.get("page"), 0),
                size=_int(message.get("size"), self.page_size),
                sort=message.get("sort"),
                desc=bool(message.get("desc")),
                filter=str(message.get("filter") or ""),
                errors=bool(message.get("errors")),
            )
        return None

    def text(self) -> str:
        """One line for the run, then the first few episodes."""
        lines = [self._headline()]
        for row in self._rows(self.listing.head(5)):
            lines.append(
                f"  {row['n']:>4} {row['environment'] or '-'} {row['task']} rollout {fmt(row['rollout'])}: "
                f"reward {fmt(row['reward'])}, {row['steps']} steps"
                + (f", error: {_cut(row['error'], 80)}" if row["error"] else "")
            )
        if len(self.listing) > 5:
            lines.append(f"  ... {len(self.listing) - 5} more")
        return "\n".join(lines)

    def html(self) -> str:
        """The summary card, the reward histogram and the first rows: what a saved notebook keeps."""
        rows = self._rows(self.listing.head(STATIC_ROWS))
        numeric = [n for _, _, n in _COLUMNS]
        body = table(
            [header for _, header, _ in _COLUMNS],
            [[_cell(key, row[key]) for key, _, _ in _COLUMNS] for row in rows],
            numeric=numeric,
        )
        more = len(self.listing) - len(rows)
        note = (
            f'<div class="ol-dim">the first {len(rows)} of {len(self.listing)} {self.label}; '
            "display the trace in a running notebook to browse them all and open their timelines</div>"
            if more > 0
            else ""
        )
        extra = f"{self.histogram().svg()}{body}{note}"
        return str(styled(card(self.title, self.facts(), subtitle=self._file(), extra=extra)))

    # -- the list -------------------------------------------------------------------------------

    def facts(self) -> list[tuple[str, Any]]:
        """The run at a glance, rewards and errors first, the path last."""
        listing = self.listing
        rewards = [float(value) for value in listing["reward"].dropna()] if len(listing) else []
        errors = int(listing["error"].notna().sum()) if len(listing) else 0
        environments = ", ".join(str(e) for e in dict.fromkeys(listing["environment"].dropna())) if len(listing) else ""
        facts: list[tuple[str, Any]] = [
            (self.label, len(listing)),
            ("mean reward", mean(rewards)),
            ("errors", errors),
            ("environments", environments or "-"),
            ("duration", _duration(self._span())),
            ("events", int(self.table.num_rows)),
        ]
        if self.path:
            facts.append(("path", self.path))
        return facts

    def histogram(self) -> Histogram:
        """The episodes' rewards in bins."""
        return reward_histogram(self.listing["reward"] if len(self.listing) else [])

    def page(
        self,
        number: int = 0,
        *,
        size: int | None = None,
        sort: Any = None,
        desc: bool = False,
        filter: str = "",
        errors: bool = False,
    ) -> dict[str, Any]:
        """Page ``number`` (from 0) of the episodes that match ``filter`` (and have an error, with
        ``errors``), sorted by ``sort``: only that page's rows."""
        size = _size(self.page_size if size is None else size)
        frame = self.listing
        if errors and len(frame):
            frame = frame[frame["error"].notna()]
        if filter and len(frame):
            needle = filter.lower()
            found = pd.Series(False, index=frame.index)
            for column in ("environment", "split", "session_id", "error"):
                text = frame[column].astype("string").str.lower()
                found |= text.str.contains(needle, regex=False).fillna(False).astype(bool)
            task = frame["split"].astype("string").fillna("") + "/" + frame["task_index"].astype("string").fillna("")
            found |= task.str.contains(needle, regex=False).fillna(False).astype(bool)
            frame = frame[found]
        sort = sort if sort in SORTABLE else None
        if sort is not None and len(frame):
            frame = frame.sort_values([sort, "n"], ascending=[not desc, True], kind="stable", na_position="last")
        matched = len(frame)
        pages = max(1, math.ceil(matched / size))
        number = min(max(number, 0), pages - 1)
        rows = self._rows(frame.iloc[number * size : (number + 1) * size])
        return {
            "type": "page",
            "page": number,
            "pages": pages,
            "size": size,
            "total": len(self.listing),
            "matched": matched,
            "sort": sort,
            "desc": desc,
            "filter": filter,
            "errors": errors,
            "rows": rows,
        }

    def _rows(self, frame: pd.DataFrame) -> list[dict[str, Any]]:
        rows = []
        for index, record in zip(frame.index, frame.to_dict("records"), strict=True):
            get = {str(k): _jsonable(v) for k, v in record.items()}
            split, task = get.get("split"), get.get("task_index")
            rows.append({
                "key": self._keys[index],
                "n": get["n"],
                "environment": get.get("environment"),
                "split": split,
                "task_index": task,
                "session_id": get.get("session_id"),
                "task": f"{split or '-'}/{'-' if task is None else task}",
                "rollout": get.get("rollout"),
                "reward": get.get("reward"),
                "finished": get.get("finished"),
                "steps": get.get("steps"),
                "errors": get.get("errors"),
                "duration_s": get.get("duration_s"),
                "started": get.get("started"),
                "error": get.get("error"),
            })  # fmt: skip
        return rows

    # -- one episode ----------------------------------------------------------------------------

    def rows(self) -> list[dict[str, Any]]:
        """Every episode's row, in the listing's order, as a page holds them (``key`` opens its timeline)."""
        return self._rows(self.listing)

    def timeline(self, key: str) -> dict[str, Any]:
        """The timeline of the episode ``key`` (its session id): see the module docstring."""
        rows: list[dict[str, Any]] = []
        if not key.startswith("#") and len(self.table):
            mine = self.table.filter(pc.equal(self.table["session_id"], pa.scalar(key, pa.string())))
            rows = mine.select(_TIMELINE_COLUMNS).to_pylist()
        index = self._by_key.get(key)
        return self._timeline(key, rows, self._rows(self.listing.iloc[[index]])[0] if index is not None else None)

    def timelines(self, keys: Sequence[str], *, batch: int = 200) -> Iterator[dict[str, Any]]:
        """The timelines of the episodes ``keys``, in that order: ``timeline(key)`` of each, the trace read
        once for every ``batch`` of them (not once for each)."""
        listed = self.rows()
        for start in range(0, len(keys), batch):
            some = keys[start : start + batch]
            wanted = [key for key in some if not key.startswith("#")]
            by_key: dict[str, list[dict[str, Any]]] = {key: [] for key in some}
            if wanted and len(self.table):
                mine = self.table.filter(pc.is_in(self.table["session_id"], value_set=pa.array(wanted, pa.string())))
                for row in mine.select(["session_id", *_TIMELINE_COLUMNS]).to_pylist():
                    by_key[row.pop("session_id")].append(row)
            for key in some:
                index = self._by_key.get(key)
                yield self._timeline(key, by_key[key], listed[index] if index is not None else None)

    def _timeline(self, key: str, rows: list[dict[str, Any]], episode: dict[str, Any] | None) -> dict[str, Any]:
        items = timeline(rows)
        shown = items[:MAX_ITEMS]
        return {
            "type": "timeline",
            "key": key,
            "episode": episode,
            "rows": len(rows),
            "items": shown,
            "more": len(items) - len(shown),
            "errors": sum(1 for item in items if item["error"]),
        }

    # -- helpers --------------------------------------------------------------------------------

    def _headline(self) -> str:
        facts = dict(self.facts())
        reward = facts["mean reward"]
        return (
            f"{self.title} {self._file()}: {len(self.listing)} {self.label}, mean reward "
            f"{'-' if reward is None else f'{reward:.3f}'}, {facts['errors']} errors ({facts['environments']})"
        ).replace("  ", " ")

    def _file(self) -> str:
        return self.path.replace("\\", "/").rsplit("/", 1)[-1] if self.path else ""

    def _span(self) -> float | None:
        if not len(self.table):
            return None
        bounds = pc.min_max(self.table["t_ns"]).as_py()
        return float(bounds["max"] - bounds["min"]) / 1e9


# -- the timeline ----------------------------------------------------------------------------------


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
            "detail": None if detail in (None, "") else _cut(detail, TEXT_CHARS),
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
        if kind in ("reasoning-start", "reasoning-delta", "reasoning-end", "text-start", "text-delta", "text-end",
                    "tool-input-start", "tool-input-delta", "tool-input-end"):  # fmt: skip
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


# -- a reward histogram -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Histogram:
    """Rewards counted in equal bins from ``edges[0]`` to ``edges[-1]``; shows itself as an SVG
    bar chart in a notebook and as text bars elsewhere."""

    edges: tuple[float, ...]
    counts: tuple[int, ...]
    title: str = "rewards"

    def to_json(self) -> dict[str, Any]:
        """The bins, for the front end."""
        return {"edges": list(self.edges), "counts": list(self.counts), "title": self.title}

    def svg(self, *, width: int = 320, height: int = 72) -> Markup:
        """The bars as inline SVG (no script, no network)."""
        total = sum(self.counts)
        if not total:
            return Markup("")
        peak = max(self.counts)
        bins = len(self.counts)
        bar = width / bins
        parts = []
        for index, count in enumerate(self.counts):
            h = 0 if not count else max(1.0, (height - 14) * count / peak)
            middle = (self.edges[index] + self.edges[index + 1]) / 2
            parts.append(
                f'<rect x="{index * bar + 1:.1f}" y="{height - 14 - h:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" '
                f'fill="{escape(_colour(middle))}"><title>{escape(_bin(self.edges, index))}: {count}</title></rect>'
            )
        low, high = fmt(self.edges[0]), fmt(self.edges[-1])
        parts.append(f'<text x="0" y="{height - 2}" font-size="10" fill="#656d76">{escape(low)}</text>')
        parts.append(f'<text x="{width}" y="{height - 2}" font-size="10" fill="#656d76" text-anchor="end">'
                     f"{escape(high)}</text>")  # fmt: skip
        label = escape(f"{self.title}: {total} in {bins} bins, the tallest {peak}")
        return Markup(
            f'<svg class="ol-histogram" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" aria-label="{label}">{"".join(parts)}</svg>'
        )

    def _repr_html_(self) -> str:
        return str(styled(f'<div class="ol-title">{escape(self.title)}</div>{self.svg()}'))

    def __repr__(self) -> str:
        total = sum(self.counts)
        peak = max(self.counts, default=0)
        lines = [f"{self.title}: {total}"]
        for index, count in enumerate(self.counts):
            bar = "#" * (round(30 * count / peak) if peak else 0)
            lines.append(f"  {_bin(self.edges, index):>13} {count:>6} {bar}")
        return "\n".join(lines)


def reward_histogram(rewards: Iterable[Any], *, bins: int = 10, title: str = "rewards") -> Histogram:
    """The rewards (nulls left out) in ``bins`` equal bins over [0, 1], widened to hold every reward."""
    values = [float(v) for v in rewards if v is not None and v is not pd.NA and not _nan(v)]
    low = min([0.0, *values])
    high = max([1.0, *values])
    width = (high - low) / bins
    counts = [0] * bins
    for value in values:
        counts[min(int((value - low) / width), bins - 1)] += 1
    edges = tuple(round(low + width * index, 10) for index in range(bins + 1))
    return Histogram(edges, tuple(counts), title)


def _bin(edges: Sequence[float], index: int) -> str:
    close = "]" if index == len(edges) - 2 else ")"
    return f"[{fmt(edges[index])}, {fmt(edges[index + 1])}{close}"


def _colour(reward: float) -> str:
    x = min(max(reward, 0.0), 1.0)
    return f"hsl({round(120 * x)}, 65%, 45%)"


# -- small pieces -------------------------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        return _jsonable(value.item())
    return value


def _cell(key: str, value: Any) -> Any:
    if key == "duration_s":
        return _duration(value)
    if key == "error" and value:
        return Markup(f'<span class="ol-err">{escape(_cut(str(value), 120))}</span>')
    return value


def _size(size: int) -> int:
    return min(max(int(size), 1), MAX_PAGE_SIZE)


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _float(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def _nan(value: Any) -> bool:
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return True


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


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _bytes(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} KiB" if size < 1024 * 1024 else f"{size / 2**20:.1f} MiB"


def _ms(ms: float) -> str:
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def _seconds(seconds: float) -> str:
    return _ms(seconds * 1000) if seconds < 1 else f"{seconds:.2f} s"


def _duration(seconds: Any) -> str:
    if seconds is None or _nan(seconds):
        return "-"
    seconds = float(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes = int(seconds // 60)
    return (
        f"{minutes} min {round(seconds - 60 * minutes)} s" if minutes < 120 else f"{minutes // 60} h {minutes % 60} min"
    )
