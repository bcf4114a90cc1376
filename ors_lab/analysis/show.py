"""``ors-lab show TRACE``: a trace summarised as plain text, for a terminal or a log.

``summarize(trace)`` returns the summary: what the trace is (path, partial or not, run id, created,
servers, schema version, events), then one section each for environments, calls by tool, rewards
by environment, latency percentiles, pings and errors. Columns are aligned with spaces; numbers
are right-aligned. Empty sections say ``(none)``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.recording.columns import LAYERS, METADATA_RUN_ID
from ors_lab.recording.parts import parts_dir

if TYPE_CHECKING:
    import pandas as pd

    from ors_lab.analysis.trace import Trace

__all__ = ["summarize"]

PERCENTILES = (50, 90, 99)
MESSAGES_SHOWN = 5
MESSAGE_CHARS = 160
INDENT = "  "


def summarize(trace: Trace) -> str:
    """The plain-text summary of ``trace`` that ``ors-lab show`` prints."""
    sections = [
        _header(trace),
        _section("Environments", _environments(trace.sessions)),
        _section("Calls by tool", _calls_by_tool(trace.calls)),
        _section("Rewards by environment", _rewards(trace.episodes)),
        _section("Latency (ms)", _latency(trace.calls)),
        _section("Pings", _pings(trace.table, trace.sessions)),
        _section("Errors", _errors(trace.table, trace.calls)),
    ]
    return "\n\n".join(sections) + "\n"


# -- the header --------------------------------------------------------------------------------


def _header(trace: Trace) -> str:
    table = trace.table
    metadata = trace.metadata
    raw = table.schema.metadata or {}
    run_id = raw.get(METADATA_RUN_ID, b"").decode() or ", ".join(_distinct(table["run_id"])) or "-"
    servers = sorted(set(metadata.get("servers") or []) | {_origin(url) for url in _distinct(table["url"])})
    partial = (
        f"yes: read from the parts of an unfinished recording in {parts_dir(trace.path)}" if trace.partial else "no"
    )
    version = metadata.get("schema_version") or "-"
    if metadata.get("ors_lab_version"):
        version += f" (written by ors_lab {metadata['ors_lab_version']})"
    rows = [
        ("trace", str(trace.path)),
        ("partial", partial),
        ("run id", run_id),
        ("created", metadata.get("created") or "-"),
        ("servers", ", ".join(servers) or "-"),
        ("schema version", version),
        ("events", _events_line(table)),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _events_line(table: pa.Table) -> str:
    if table.num_rows == 0:
        return "0"
    layers = Counter(table["layer"].to_pylist())
    order = {layer: i for i, layer in enumerate(LAYERS)}
    ranked = sorted(layers.items(), key=lambda item: (order.get(item[0], len(order)), item[0]))
    by_layer = ", ".join(f"{layer} {count}" for layer, count in ranked)
    span = (pc.max(table["t_ns"]).as_py() - pc.min(table["t_ns"]).as_py()) / 1e9
    return f"{table.num_rows} ({by_layer}) over {span:.3f} s"


# -- the sections ------------------------------------------------------------------------------


def _environments(sessions: pd.DataFrame) -> list[str]:
    if sessions.empty:
        return []
    rows = []
    for environment, group in sessions.groupby(sessions["environment"].fillna("-"), sort=True):
        rows.append(
            [
                str(environment),
                _int(len(group)),
                _int(int(group["closed"].isna().sum())),
                _int(int(group["calls"].sum())),
                _int(int(group["errors"].sum())),
            ]
        )
    return _table(["environment", "sessions", "unclosed", "calls", "errors"], rows)


def _calls_by_tool(calls: pd.DataFrame) -> list[str]:
    if calls.empty:
        return []
    rows = []
    keys = [calls["environment"].fillna("-"), calls["tool"].fillna("-")]
    for (environment, tool), group in calls.groupby(keys, sort=True):
        outcome = group["outcome"]
        results = group[outcome == "result"]
        rows.append(
            [
                str(environment),
                str(tool),
                _int(len(group)),
                _int(int((results["ok"] == True).sum())),  # noqa: E712  (NA is neither)
                _int(int((results["ok"] == False).sum())),  # noqa: E712
                _int(int((outcome == "call_error").sum())),
                _mean(group["reward"]),
            ]
        )
    return _table(["environment", "tool", "calls", "ok", "not ok", "errors", "mean reward"], rows)


def _rewards(episodes: pd.DataFrame) -> list[str]:
    if episodes.empty:
        return []
    rows = []
    for environment, group in episodes.groupby(episodes["environment"].fillna("-"), sort=True):
        finished = int((group["finished"] == True).sum())  # noqa: E712
        rows.append(
            [
                str(environment),
                _int(len(group)),
                f"{finished / len(group):.0%}",
                _mean(group["total_reward"]),
                _mean(group["final_reward"]),
                _mean(group["steps"], digits=1),
            ]
        )
    return _table(["environment", "episodes", "finished", "mean total reward", "mean final reward", "mean steps"], rows)


def _latency(calls: pd.DataFrame) -> list[str]:
    rows = []
    for name in ("duration_ms", "ttfb_ms"):
        values = sorted(_floats(calls[name])) if not calls.empty else []
        if not values:
            continue
        cells = [f"{_percentile(values, p):.1f}" for p in PERCENTILES]
        rows.append([f"call {name}", _int(len(values)), *cells, f"{values[-1]:.1f}"])
    if not rows:
        return []
    return _table(["measure", "n", *(f"p{p}" for p in PERCENTILES), "max"], rows)


def _pings(table: pa.Table, sessions: pd.DataFrame) -> list[str]:
    beats = _select(table, ["open", "ping"], ["session_id", "kind", "t_ns"])
    pings = [row for row in beats if row["kind"] == "ping"]
    comments = int(pc.sum(pc.equal(table["kind"], "comment")).as_py() or 0)
    if not pings and not comments:
        return []
    last: dict[str | None, int] = {}
    gaps: list[float] = []
    for row in beats:
        sid = row["session_id"]
        if row["kind"] == "ping" and sid in last:
            gaps.append((row["t_ns"] - last[sid]) / 1e9)
        last[sid] = row["t_ns"]
    pinged = len({row["session_id"] for row in pings})
    lines = [f"keep-alive pings  {len(pings)} in {pinged} of {len(sessions)} sessions"]
    if gaps:
        gaps.sort()
        lines.append(
            f"gap before a ping (s)  p50 {_percentile(gaps, 50):.2f}  max {gaps[-1]:.2f}"
            "  (from the open or the previous ping)"
        )
    lines.append(f"server pings (SSE comments) during tool calls  {comments}")
    return lines


def _errors(table: pa.Table, calls: pd.DataFrame) -> list[str]:
    lines: list[str] = []
    failed = calls[calls["outcome"] == "call_error"] if not calls.empty else calls
    if len(failed):
        lines.append(f"calls that raised  {len(failed)}")
        lines.extend(_messages(str(message) for message in failed["error"].fillna("(no message)")))
    statuses = _http_errors(table)
    if statuses:
        counts = Counter(status for status, _ in statuses)
        summary = ", ".join(f"{status} x{count}" for status, count in sorted(counts.items()))
        lines.append(f"HTTP statuses >= 400  {len(statuses)} ({summary})")
        lines.extend(_messages(f"{status} {message}" for status, message in statuses))
    undeleted = [row for row in _select(table, ["close"], ["session_id", "ok", "error"]) if row["ok"] is False]
    if undeleted:  # the server may still hold these sessions: "unclosed" above counts them
        lines.append(f"sessions whose delete failed  {len(undeleted)}")
        lines.extend(_messages(f"{row['session_id']}: {row['error'] or '(no message)'}" for row in undeleted))
    kinds = Counter(_select_column(table, ["retry", "disconnect"], "kind"))
    if kinds:
        lines.append(f"retries  {kinds['retry']}, dropped streams  {kinds['disconnect']}")
    return lines


# -- HTTP errors -------------------------------------------------------------------------------


def _http_errors(table: pa.Table) -> list[tuple[int, str]]:
    """(status, "METHOD URL: detail") of every response with status >= 400, in order."""
    if table.num_rows == 0:
        return []
    is_error = pc.and_kleene(pc.equal(table["kind"], "response"), pc.greater_equal(table["status"], 400))
    if not pc.any(is_error).as_py():
        return []
    wanted = pc.or_kleene(is_error, pc.equal(table["kind"], "request"))
    rows = table.filter(pc.fill_null(wanted, False)).select(
        ["kind", "session_id", "call", "attempt", "method", "url", "status", "body"]
    )
    requests: dict[tuple[Any, Any, Any], str] = {}
    out: list[tuple[int, str]] = []
    for row in rows.to_pylist():
        key = (row["session_id"], row["call"], row["attempt"])
        if row["kind"] == "request":
            requests[key] = f"{row['method']} {row['url']}"
        else:
            out.append((int(row["status"]), f"{requests.get(key, '(request not recorded)')}: {_detail(row['body'])}"))
    return out


def _detail(body: bytes | None) -> str:
    """The ``detail`` of an error body, or its text."""
    if body is None:
        return "(body not recorded)"
    text = body.decode("utf-8", "replace")
    try:
        value = json.loads(text)
    except ValueError:
        return text.strip() or "(empty body)"
    if isinstance(value, dict) and "detail" in value:
        detail = value["detail"]
        return detail if isinstance(detail, str) else json.dumps(detail, ensure_ascii=False)
    return text.strip()


# -- helpers -----------------------------------------------------------------------------------


def _section(title: str, lines: list[str]) -> str:
    body = lines or ["(none)"]
    return "\n".join([title, *(INDENT + line for line in body)])


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Aligned columns: the first column(s) of text left-aligned, numbers right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    numeric = [all(_is_number(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for row in [list(header), *rows]:
        cells = [
            cell.rjust(width) if is_number else cell.ljust(width)
            for cell, width, is_number in zip(row, widths, numeric, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _is_number(cell: str) -> bool:
    return cell == "-" or cell.rstrip("%").replace(".", "", 1).lstrip("-").isdigit()


def _messages(messages: Iterable[str]) -> list[str]:
    """The first few distinct messages, each with how often it occurred."""
    counts = Counter(messages)
    lines = []
    for message, count in list(counts.items())[:MESSAGES_SHOWN]:
        shown = message if len(message) <= MESSAGE_CHARS else message[: MESSAGE_CHARS - 3] + "..."
        lines.append(f"{INDENT}{count} x {shown}")
    if len(counts) > MESSAGES_SHOWN:
        lines.append(f"{INDENT}... and {len(counts) - MESSAGES_SHOWN} more distinct messages")
    return lines


def _select(table: pa.Table, kinds: list[str], columns: list[str]) -> list[dict[str, Any]]:
    if table.num_rows == 0:
        return []
    mask = pc.is_in(table["kind"], value_set=pa.array(kinds))
    rows: list[dict[str, Any]] = table.filter(mask).select(columns).to_pylist()
    return rows


def _select_column(table: pa.Table, kinds: list[str], column: str) -> list[Any]:
    return [row[column] for row in _select(table, kinds, [column])]


def _distinct(column: pa.ChunkedArray) -> list[str]:
    return sorted(str(value) for value in pc.unique(column.drop_null()).to_pylist())


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def _floats(series: pd.Series) -> list[float]:
    return [float(value) for value in series.dropna()]


def _percentile(ordered: list[float], p: float) -> float:
    """The p-th percentile of sorted values, interpolated linearly (as numpy's default)."""
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _mean(series: pd.Series, digits: int = 3) -> str:
    values = _floats(series)
    return f"{sum(values) / len(values):.{digits}f}" if values else "-"


def _int(value: int) -> str:
    return str(value)
