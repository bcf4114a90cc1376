"""A run's report to share: one self-contained HTML file (``Trace.to_html(path)``, ``ors-lab report``).

The page holds the run's summary card (as an ``EvalResult`` shows itself: mean reward ± stderr,
pass@k, success rate, errors, episodes and tasks, tokens, time, agent, model), then for each
evaluation in the trace (an environment and split) its dashboard as the notebook drew it when the
run ended (progress, figures, last errors, the tasks x rollouts grid whose cells open their
transcripts, the reward histogram, the mean reward over time; for a run evaluated against a baseline,
the comparison: the paired delta, its interval and p-value, wins / losses / ties, the grid coloured by
delta and the interval narrowing as tasks ended, from the ``baseline`` row the trace keeps) and its
per-task table (and against a baseline, the comparison's view: ``ors_lab.viewer.compare``), then every
episode in the trace viewer (a page at a time, sorted, filtered; a click opens the timeline:
requests and responses, SSE events, pings and gaps, tool calls with inputs and outputs, rewards,
the agent's reasoning and text, errors in red).

One front end: the page draws itself with the notebook's own renderers (``ors_lab/viewer/static``:
``run.js``, ``trace.js``) through a model the page plays instead of a kernel (``page.js``; the
report's entry is ``report.js``; the page's shell is ``ors_lab.viewer.page``). Its data is made here by the
states a notebook draws:
``RunState`` fed the trace's agent events (its clock set to each row's time), ``TraceState`` for
the list and the timelines; the summary card and the per-task tables are made from the frames
(``summary_frame``, ``tasks_frame``, ``errors_frame``) by ``run_summary``, the same function an
``EvalResult`` draws itself with, so their figures are the result's. The page answers what a
kernel would: a page of the list (``ORS.listPage``: ``TraceState.page``'s rules in JavaScript), a
timeline or a transcript (made here, read from the page's data).

Self-contained: the script, the style sheet and the data are inline (the data gzipped and in
base64, unpacked by the browser's own ``DecompressionStream``), and a Content-Security-Policy
forbids every fetch, so the file opens from disk or from an e-mail attachment and asks nothing of
any network. Without its script (a mail reader's preview) the page still shows the summary card,
each evaluation's static card and tasks, and the first episodes. It holds nothing the trace does
not (secrets are redacted when a trace is recorded), and the same trace makes the same file.

Size: the list, the figures, the grids, the charts and the per-task tables cover every episode
(tasks beyond ``TASK_ROWS`` are counted, not listed). Timelines and transcripts are the bulk: the
report holds those of at most ``TIMELINES`` episodes (``timelines=``) and about ``DETAIL_BYTES``
of compressed data, the failed episodes first, then in the list's order, and says so in the page
when it holds fewer than all. They are in chunks of about ``CHUNK_CHARS`` characters, each
unpacked on the first click that needs it, so the page opens as fast whatever it holds.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ors_lab.analysis.comparison import Comparison
from ors_lab.analysis.frames import TOKENS, default_ks, errors_frame, summary_frame, tasks_frame
from ors_lab.analysis.runs import Run, episodes_run, scores_of
from ors_lab.events import BaselineEvent, agent_event, strict_json
from ors_lab.html import Markup, escape
from ors_lab.version import __version__
from ors_lab.viewer.compare import CompareState, pair, task_key
from ors_lab.viewer.page import page_html, write_whole
from ors_lab.viewer.run import RunState
from ors_lab.viewer.run_summary import (
    HTML_CELLS,
    MAX_ERRORS,
    TABLE_TASKS,
    RunSummary,
    TaskRow,
    run_summary_html,
    task_table,
    versus_rows,
)
from ors_lab.viewer.trace import TraceState, trace_state

if TYPE_CHECKING:
    from ors_lab.analysis.trace import Trace

__all__ = [
    "CHUNK_CHARS",
    "DETAIL_BYTES",
    "TASK_ROWS",
    "TIMELINES",
    "Report",
    "ReportData",
    "report_data",
    "report_html",
    "run_summary",
    "write_report",
]

TIMELINES = 2_000
"""The most episodes whose timeline and transcript a report holds (``timelines=``)."""
DETAIL_BYTES = 8 * 2**20
"""About the most compressed bytes of timelines and transcripts a report holds."""
CHUNK_CHARS = 2**20
"""About the characters of JSON in one chunk of timelines and transcripts (unpacked at once)."""
TASK_ROWS = 1_000
"""The most tasks an evaluation's table lists."""
OPEN_TASKS = 50
"""An evaluation's table of more tasks is folded at first (a click unfolds it)."""
FALLBACK_CELLS = 500
"""The most grid cells of the static card an evaluation shows before the page's script draws its dashboard."""

CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
"""The page's Content-Security-Policy: its own inline script and styles, and nothing fetched."""
_FEED = ("start", "usage", "episode")
"""The agent events every episode gives its run's dashboard (its outcome and tokens); the episodes whose
transcript the report holds give all of theirs."""
_ROW_COLUMNS = ["kind", "session_id", "rollout", "t_ns", "data", "tool", "call", "environment", "split", "task_index"]


@dataclass(frozen=True)
class Report:
    """A report written: its ``path``, its ``size`` in bytes, the ``episodes`` it lists and how many
    of them it holds the timeline and transcript of (``detailed``)."""

    path: Path
    size: int
    episodes: int
    detailed: int

    def __repr__(self) -> str:
        return f"Report({str(self.path)!r}, size={self.size}, episodes={self.episodes}, detailed={self.detailed})"

    def describe(self) -> str:
        """One line: where, how big, what it holds."""
        held = "every episode's timeline and transcript" if self.detailed == self.episodes else (
            f"the timelines and transcripts of {self.detailed:,} of them")  # fmt: skip
        size = f"{self.size / 2**20:.1f} MB" if self.size >= 2**20 else f"{self.size / 2**10:.0f} KB"
        return f"wrote {self.path} ({size}): {self.episodes:,} episodes, {held}"


@dataclass
class ReportData:
    """What a report's page is made of, before it is written out.

    ``head``: the JSON the page reads first (``runs``: each evaluation's dashboard ``data`` and its
    grid's ``sessions``; ``trace``: the viewer's ``data``; ``list``: every episode's row; ``chunk``:
    the chunk holding each row's detail, or -1; ``notes``). ``chunks``: gzipped JSON objects, episode
    key -> ``{"timeline": ..., "transcript": ...}``. The rest is the HTML shown before the script runs.
    """

    title: str
    head: dict[str, Any]
    chunks: list[bytes]
    summary: Markup
    runs: list[tuple[str, Markup, Markup]]
    """Each evaluation's (mount id, static card, per-task table)."""
    comparisons: list[tuple[str, Markup]]
    """Each evaluation compared with its baseline: (mount id, the comparison's static summary)."""
    trace: Markup
    held: str
    episodes: int
    detailed: int
    footer: str


def write_report(trace: Trace, path: str | os.PathLike[str], *, timelines: int = TIMELINES) -> Report:
    """Write ``trace``'s report to ``path`` (replacing a file there; its directory made if need be).
    The file appears whole or not at all: it is written beside, then renamed."""
    path = Path(path)
    if path.resolve() == Path(trace.path).resolve():
        raise ValueError(f"{path} is the trace itself: write the report elsewhere, e.g. {path.with_suffix('.html')}")
    data = report_data(trace, timelines=timelines)
    size = write_whole(path, report_html(data).encode("utf-8"))
    return Report(path, size, data.episodes, data.detailed)


# -- the data --------------------------------------------------------------------------------------


@dataclass
class _Run:
    """One evaluation of the trace: its episodes, and its dashboard's state once fed."""

    environment: str
    split: str
    episodes: pd.DataFrame
    agent: str | None
    state: RunState | None = None
    baseline: BaselineEvent | None = None  # the baseline it was evaluated against, as the trace keeps it
    last_t: float = 0.0
    sessions: dict[str, str] | None = None  # grid key "task/rollout" -> the session whose outcome it shows


def report_data(trace: Trace, *, timelines: int = TIMELINES, detail_bytes: int = DETAIL_BYTES) -> ReportData:
    """The report of ``trace``: see the module docstring."""
    if timelines < 0:
        raise ValueError(f"timelines must be 0 or more, not {timelines}")
    viewer: TraceState = trace_state(trace)
    viewer.path = Path(trace.path).name  # a page to share names the file, not where it was on this machine
    listed = viewer.rows()
    episodes = trace.episodes
    runs = _runs(trace.table, episodes)
    failed = [row["key"] for row in listed if row["error"] is not None]
    rest = [row["key"] for row in listed if row["error"] is None]
    chosen = (failed + rest)[:timelines]
    transcripts = _feed(trace.table, runs, set(chosen), partial=trace.partial)

    chunks: list[bytes] = []
    chunk_of: dict[str, int] = {}
    parts: list[str] = []
    size = total = 0
    for timeline in viewer.timelines(chosen):
        key = timeline["key"]
        text = strict_json({"timeline": timeline, "transcript": transcripts.get(key)})
        parts.append(f"{strict_json(key)}:{text}")
        chunk_of[key] = len(chunks)
        size += len(text)
        if size >= CHUNK_CHARS:
            chunks.append(_gzip("{" + ",".join(parts) + "}"))
            total += len(chunks[-1])
            parts, size = [], 0
            if total >= detail_bytes:
                break
    if parts:
        chunks.append(_gzip("{" + ",".join(parts) + "}"))

    count, detailed = len(listed), len(chunk_of)
    held = ("It holds every episode's timeline and transcript." if detailed == count else
            f"It holds the timelines and transcripts of {detailed:,} of its {count:,} episodes: the failed ones first "
            f"({len(failed):,} in all), then in the list's order. The list, the figures, the grids and the charts "
            "cover every episode.")  # fmt: skip
    budget = f"{detail_bytes / 2**20:.0f} MB"
    hint = (f"make a report that holds more (ors-lab report TRACE --timelines {count})" if detailed == timelines
            else f"see it in a notebook: a report holds about {budget} of them at most")  # fmt: skip
    left_out = (f"This report holds the timelines and transcripts of {detailed:,} of the {count:,} episodes (the "
                f"failed ones first), not this one's. Its rows are in the trace: display the trace in a notebook "
                f"(load_trace(path).view()), or {hint}.")  # fmt: skip
    run_parts = []
    for n, run in enumerate(runs):
        assert run.state is not None
        ks = list(run.state.ks)
        summary = run_summary(run.episodes, ks, environment=run.environment, split=run.split,
                              rollouts=run.state.rollouts, agent=run.state.agent, elapsed_s=run.state.elapsed(),
                              tasks=TASK_ROWS)  # fmt: skip
        if run.state.baseline is not None:  # the run against its baseline, as its dashboard ends
            summary = replace(summary, versus=versus_rows(run.state.baseline.figures(ended=True)))
        more = summary.tasks - len(summary.task_rows)
        opened = " open" if len(summary.task_rows) <= OPEN_TASKS else ""  # a long table, folded, costs no layout
        tasks = Markup(
            f"<details class=ol-page-tasks{opened}><summary>{summary.tasks:,} tasks"
            + (f", the first {len(summary.task_rows):,} listed" if more > 0 else "")
            + f"</summary><div>{task_table(summary.task_rows, ks)}</div></details>"
        )
        fallback = replace(summary, task_rows=[], grid=summary.grid[: max(FALLBACK_CELLS // run.state.rollouts, 1)])
        run_parts.append((f"ors-lab-run-{n}", run_summary_html(fallback), tasks))
    comparisons = [_comparison(trace, run, n) for n, run in enumerate(runs) if run.baseline is not None]
    head = {
        "comparisons": [{"mount": mount, **data} for mount, _, data in comparisons],
        "runs": [
            {"mount": mount, "data": run.state.snapshot(), "sessions": run.sessions}
            for (mount, _, _), run in zip(run_parts, runs, strict=True)
            if run.state is not None
        ],
        "trace": {"mount": "ors-lab-trace", "data": viewer.snapshot()},
        "list": listed,
        "chunk": [chunk_of.get(row["key"], -1) for row in listed],
        "notes": {
            "timeline": left_out,
            "transcript": left_out,
            "no_transcript": "The trace holds no agent events of this episode.",
        },
    }
    name = Path(trace.path).name
    created = trace.metadata.get("created") or "-"
    footer = (f"Made by ors_lab {__version__} from {name} (recorded {created} by ors_lab "
              f"{trace.metadata.get('ors_lab_version') or '-'}), and from nothing else.")  # fmt: skip
    return ReportData(
        title=name,
        head=head,
        chunks=chunks,
        summary=run_summary_html(_trace_summary(trace, episodes, runs)),
        runs=run_parts,
        comparisons=[(mount, static) for mount, static, _ in comparisons],
        trace=Markup(viewer.html()),
        held=held,
        episodes=count,
        detailed=detailed,
        footer=footer,
    )


def _runs(table: pa.Table, episodes: pd.DataFrame) -> list[_Run]:
    """The evaluations in the trace: its episodes that an evaluation ran, by environment and split, in order."""
    evaluated = episodes[episodes["rollout"].notna()]
    if evaluated.empty:
        return []
    agents = _agents(table)
    runs = []
    for (environment, split), frame in evaluated.groupby(["environment", "split"], sort=False, dropna=False):
        names = list(dict.fromkeys(agents[sid] for sid in frame["session_id"] if agents.get(sid)))
        models = _models(table, list(frame["session_id"].dropna()))
        agent = ", ".join(names) or None
        if models and not all(model in (agent or "") for model in models):
            agent = f"{agent} · model {', '.join(models)}" if agent else f"model {', '.join(models)}"
        runs.append(_Run(_text(environment), _text(split), frame.reset_index(drop=True), agent))
    return runs


def _agents(table: pa.Table) -> dict[str, str]:
    """Session id -> the agent its episode's record names (a trace recorded by ors_lab 0.1.0 names none)."""
    rows = table.filter(pc.and_(pc.equal(table["kind"], "episode"), pc.equal(table["layer"], "agent")))
    found = {}
    for sid, data in zip(rows["session_id"].to_pylist(), rows["data"].to_pylist(), strict=True):
        record = _loads(data)
        if isinstance(record, dict) and isinstance(record.get("agent"), str):
            found[sid] = record["agent"]
    return found


def _models(table: pa.Table, sessions: list[str]) -> list[str]:
    """The models the sessions' LLM calls name: in their ``usage`` events, else in their first requests' bodies."""
    mine = table.filter(pc.is_in(table["session_id"], value_set=pa.array(sessions, pa.string())))
    mine = mine.filter(pc.equal(mine["layer"], "agent"))
    usage = mine.filter(pc.and_(pc.equal(mine["kind"], "usage"), pc.match_substring(mine["data"], '"model"')))
    models = [record.get("model") for record in map(_loads, usage["data"].to_pylist()) if isinstance(record, dict)]
    if not models:
        requests = mine.filter(pc.equal(mine["kind"], "request"))["body"].to_pylist()[:20]
        models = [body.get("model") for body in map(_loads, requests) if isinstance(body, dict)]
    return [model for model in dict.fromkeys(models) if isinstance(model, str) and model]


def _feed(table: pa.Table, runs: list[_Run], detailed: set[str], *, partial: bool) -> dict[str, dict[str, Any]]:
    """Feed each run's ``RunState`` its episodes' agent events in the trace's order, its clock at each
    row's time; the transcripts of the ``detailed`` sessions, by session id."""
    run_of = {sid: run for run in runs for sid in run.episodes["session_id"].dropna()}
    transcripts: dict[str, dict[str, Any]] = {}
    if not run_of:
        return transcripts
    kinds = pa.array(list(RunState.kinds or ()), pa.string())
    rows = table.filter(pc.and_(pc.equal(table["layer"], "agent"), pc.is_in(table["kind"], value_set=kinds)))
    rows = rows.filter(pc.is_in(rows["session_id"], value_set=pa.array(list(run_of), pa.string())))
    every = pc.is_in(rows["kind"], value_set=pa.array(_FEED, pa.string()))
    mine = pc.is_in(rows["session_id"], value_set=pa.array(sorted(detailed), pa.string()))
    rows = rows.filter(pc.or_(every, mine)).sort_by("seq").select(_ROW_COLUMNS)
    baselines = _baselines(table)
    now = [0.0]

    def clock() -> float:
        return now[0]

    for row in rows.to_pylist():
        sid, kind = row["session_id"], row["kind"]
        run = run_of[sid]
        now[0] = run.last_t = row["t_ns"] / 1e9
        if run.state is None:
            planned = run.episodes[run.episodes["task_index"].notna()]
            keys = list(dict.fromkeys(zip(planned["task_index"].astype(int), planned["rollout"].astype(int),
                                          strict=True)))  # fmt: skip
            run.state = RunState(run.environment, run.split, keys, agent=run.agent, clock=clock)
            run.state.id = f"report-{runs.index(run)}"
            run.sessions = {}
        wire = _loads(row["data"])
        if not isinstance(wire, dict):
            continue
        context = {name: row[name] for name in _ROW_COLUMNS[2:] if name not in ("t_ns", "data")}
        try:
            event = agent_event(kind, wire, session_id=sid, t_ns=row["t_ns"], **context)
        except (TypeError, ValueError):  # a row no event is made of (a hand-edited trace): its timeline shows it
            continue
        run.state.apply(event)
        if kind == "episode":
            task, rollout = getattr(event, "task_index", None), getattr(event, "rollout", None)
            assert run.sessions is not None
            run.sessions[f"{task}/{rollout if rollout is not None else 0}"] = sid
            for transcript in run.state.inbox():
                if transcript.get("session_id") in detailed:
                    transcripts[transcript["session_id"]] = transcript
    for run in runs:
        if run.state is None:  # its episodes left no agent rows: an empty dashboard
            run.state = RunState(run.environment, run.split, [], agent=run.agent, clock=clock)
            run.sessions = {}
        for event in baselines:  # the run's baseline (its state takes the one of its environment and split)
            if run.state.apply(event):
                run.baseline = event
        now[0] = run.last_t
        run.state.end("partial" if partial else "finished")
    return transcripts


COMPARED = 100
"""Tasks of an evaluation against its baseline whose episodes the report holds for the comparison's view."""


def _comparison(trace: Trace, run: _Run, n: int) -> tuple[str, Markup, dict[str, Any]]:
    """The comparison of an evaluation with the baseline it was run against (known by its per-task scores, as the
    trace keeps them): its mount, its static summary, and the view's data with the episodes of the ``COMPARED``
    tasks of the largest deltas side by side."""
    event = run.baseline
    assert event is not None
    baseline = Run(event.name, scores_of(event.tasks, event.environment, event.split))
    candidate = episodes_run(run.agent or f"eval {run.environment}/{run.split}", run.episodes, trace)
    comparison = Comparison(baseline, [candidate])
    state = CompareState(comparison)
    tasks = comparison.tasks.assign(size=comparison.tasks["delta"].abs()).sort_values("size", ascending=False)
    keys = [
        task_key(*row) for row in tasks[["environment", "split", "task_index"]].head(COMPARED).itertuples(index=False)
    ]
    note = (f"This report holds the episodes of the {min(COMPARED, len(tasks))} tasks of the largest deltas side by "
            "side, not of this one: its episodes are in the trace; the baseline's are in its own trace.")  # fmt: skip
    data = {"data": state.snapshot(), "details": {key: {"0": pair(comparison, key)} for key in keys}, "note": note}
    return f"ors-lab-compare-{n}", Markup(state.html()), data


def _baselines(table: pa.Table) -> list[BaselineEvent]:
    """The baselines the trace's evaluations were compared with (``evaluate(..., baseline=...)``): their events."""
    rows = table.filter(pc.and_(pc.equal(table["layer"], "agent"), pc.equal(table["kind"], "baseline")))
    events = []
    for data in rows["data"].to_pylist():
        wire = _loads(data)
        with contextlib.suppress(TypeError, ValueError):  # a row no event is made of (a hand-edited trace)
            event = agent_event("baseline", wire) if isinstance(wire, dict) else None
            if isinstance(event, BaselineEvent):
                events.append(event)
    return events


def _trace_summary(trace: Trace, episodes: pd.DataFrame, runs: list[_Run]) -> RunSummary:
    """The whole trace's summary card: its figures (``trace.summary()``), what ran it, where it comes from."""
    environments = ", ".join(dict.fromkeys(_text(e) for e in episodes["environment"].dropna())) or "-"
    splits = ", ".join(dict.fromkeys(_text(s) for s in episodes["split"].dropna())) or "-"
    agents = ", ".join(dict.fromkeys(run.agent for run in runs if run.agent)) or None
    span = None
    if len(trace.table):
        bounds = pc.min_max(trace.table["t_ns"]).as_py()
        span = float(bounds["max"] - bounds["min"]) / 1e9
    ids: list[tuple[str, Any]] = [("trace", Path(trace.path).name)]
    if trace.metadata.get("created"):
        ids.append(("recorded", trace.metadata["created"]))
    rollouts = max(default_ks(episodes)) if len(episodes) else 1
    summary = run_summary(episodes, default_ks(episodes), environment=environments, split=splits, rollouts=rollouts,
                          agent=agents, elapsed_s=span, ids=ids)  # fmt: skip
    return replace(summary, last_errors=[], grid=[], task_rows=[], status="partial" if trace.partial else None)


def run_summary(
    episodes: pd.DataFrame,
    ks: Sequence[int],
    *,
    environment: str,
    split: str,
    rollouts: int,
    agent: str | None = None,
    elapsed_s: float | None = None,
    resumed: int = 0,
    ids: Sequence[tuple[str, Any]] = (),
    tasks: int = TABLE_TASKS,
    success_threshold: float | None = None,
) -> RunSummary:
    """A run's figures as its summary card shows them (``run_summary_html``), from its ``episodes``
    frame: the figures of ``summary_frame`` (its note naming ``success_threshold`` when given), the
    first ``tasks`` rows of ``tasks_frame``, the last errors, the grid of the first episodes.
    ``EvalResult`` shows itself with it, and a report."""

    def value(x: Any) -> Any:
        return None if x is None or x is pd.NA or (isinstance(x, float) and x != x) else x

    ks = list(ks)
    if not len(episodes):
        return RunSummary(environment, split, agent, 0, None, 0, rollouts, None, None, ks, [None] * len(ks), None, 0,
                          elapsed_s=elapsed_s, resumed=resumed, ids=list(ids))  # fmt: skip
    row: Any = summary_frame(episodes, ks, success_threshold=success_threshold).iloc[0]
    tokens = {name.removesuffix("_tokens"): value(row[name]) for name in TOKENS}
    task_rows = [
        TaskRow(
            task=value(t["task_index"]) if value(t["task_index"]) is not None else value(t["task"]),
            episodes=t["episodes"],
            mean=value(t["mean_reward"]),
            stderr=value(t["stderr"]),
            success_rate=value(t["success_rate"]),
            passes=[value(t[f"pass@{k}"]) for k in ks],
            errors=t["errors"],
        )
        for t in tasks_frame(episodes, ks).head(tasks).to_dict("records")
    ]
    last_errors = [
        (f"{e['task_index']}/{e['rollout']}", value(e["error_type"]) or "error", str(e["error"]))
        for e in errors_frame(episodes).tail(MAX_ERRORS).to_dict("records")
    ]
    grid: dict[Any, list[tuple[float | None, bool]]] = {}
    for e in episodes.head(HTML_CELLS).to_dict("records"):
        cells = grid.setdefault(value(e["task_index"]), [(None, False)] * rollouts)
        rollout = value(e["rollout"])
        if rollout is not None and 0 <= rollout < rollouts:
            cells[rollout] = (value(e["reward"]), value(e["error"]) is not None)
    return RunSummary(
        environment=environment,
        split=split,
        agent=agent,
        episodes=len(episodes),
        total=None,
        tasks=int(row["tasks"]),
        rollouts=rollouts,
        mean=value(row["mean_reward"]),
        stderr=value(row["stderr"]),
        ks=ks,
        passes=[value(row[f"pass@{k}"]) for k in ks],
        success_rate=value(row["success_rate"]),
        errors=int(row["errors"]),
        last_errors=last_errors,
        tokens=tokens,
        elapsed_s=elapsed_s,
        rate=(len(episodes) - resumed) / elapsed_s if elapsed_s else None,
        resumed=resumed,
        task_rows=task_rows,
        grid=list(grid.items()),
        ids=list(ids),
        note=value(row["note"]),
    )


# -- the page --------------------------------------------------------------------------------------


def report_html(data: ReportData) -> str:
    """The page: the static summary and cards, the data, the script. See the module docstring."""
    runs = "".join(f'<section class="ol-page-run"><div id="{mount}">{card}</div>{tasks}</section>'
                   for mount, card, tasks in data.runs)  # fmt: skip
    runs += "".join(f'<section class="ol-page-run"><h3>Against its baseline</h3><div id="{mount}">{summary}</div>'
                    "</section>" for mount, summary in data.comparisons)  # fmt: skip
    blobs = [
        ("ors-lab-head", _gzip(strict_json(data.head))),
        *((f"ors-lab-chunk-{n}", c) for n, c in enumerate(data.chunks)),
    ]
    inline = "".join(
        f'<script type="application/octet-stream" data-encoding="gzip+base64" id="{name}">'
        f"{base64.b64encode(blob).decode('ascii')}</script>\n"
        for name, blob in blobs
    )
    body = f"""<h1>{escape(data.title)}</h1>
<p class="ol-dim">A report of a recorded run. It draws itself in the browser, offline: it needs no network and no
kernel.</p>
<noscript><p class="ol-err">Scripts are off here (a mail reader's preview?): this is the page's static summary.
Open the file in a browser to see the dashboards and every episode's timeline.</p></noscript>
<p class="ol-page-held">{escape(data.held)}</p>
{data.summary}
{"<h2>Evaluations</h2>" if data.runs else ""}
{runs}
<h2>Episodes</h2>
<p class="ol-dim">Click an episode to open its timeline; sort by a column, filter, or show only the failed ones.</p>
<div id="ors-lab-trace">{data.trace}</div>
<footer>{escape(data.footer)}</footer>"""
    return page_html("report", title=f"{escape(data.title)} · ors_lab report", csp=CSP, body=body, after=inline)


# -- small pieces ------------------------------------------------------------------------------------


def _gzip(text: str) -> bytes:
    return gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0)


def _loads(text: str | bytes | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _text(value: Any) -> str:
    return "-" if value is None or value is pd.NA else str(value)
