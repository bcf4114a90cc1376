"""The trace viewer's state: a recorded run's episodes, a page at a time, and one episode's timeline.

``TraceState(table, listing)`` takes a trace's Arrow ``table`` (every row, ``docs/trace-format.md``)
and its ``listing``: a DataFrame with one row per episode (``session_id``, ``environment``,
``split``, ``task_index``, ``rollout``, ``reward``, ``finished``, ``steps``, ``errors``,
``duration_s``, ``started``, ``error``), as ``ors_lab.analysis`` builds it (``Trace.listing``);
``trace_state(trace)`` makes it of a loaded ``Trace``, as ``trace.view()`` shows it.

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
holds more at once (the HTML report, ``ors_lab.viewer.report``): ``rows()`` is every row as a
page holds them, ``timelines(keys)`` many timelines, the trace read once for a batch of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.events import Event
from ors_lab.html import Markup, card, escape, fmt, styled, table
from ors_lab.stats import mean
from ors_lab.viewer.state import ViewState
from ors_lab.viewer.timeline import TEXT_CHARS, cut, timeline

if TYPE_CHECKING:
    from ors_lab.analysis.trace import Trace

__all__ = [
    "MAX_ITEMS",
    "PAGE_SIZE",
    "TEXT_CHARS",
    "Histogram",
    "TraceState",
    "reward_histogram",
    "timeline",
    "trace_state",
]

PAGE_SIZE = 25
MAX_PAGE_SIZE = 200
MAX_ITEMS = 400
"""The most items a timeline sends; a note says how many more there were."""
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
                + (f", error: {cut(row['error'], 80)}" if row["error"] else "")
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


def trace_state(trace: Trace, page_size: int | None = None) -> TraceState:
    """The viewer's state of a loaded trace (``trace.view()``, its display, its report): its rows and listing."""
    title = "Trace (partial)" if trace.partial else "Trace"
    return TraceState(trace.table, trace.listing, path=str(trace.path), title=title, page_size=page_size or PAGE_SIZE)


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
        return Markup(f'<span class="ol-err">{escape(cut(str(value), 120))}</span>')
    return value


def _size(size: int) -> int:
    return min(max(int(size), 1), MAX_PAGE_SIZE)


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _nan(value: Any) -> bool:
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return True


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
