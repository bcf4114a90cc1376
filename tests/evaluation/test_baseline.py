"""``evaluate(..., baseline=...)``: the running paired delta in the dashboard, the live feed and the trace, the report,
and ``result.comparison``.

The runs: the bundled demo agent on the demo arithmetic tasks (the ors-sdk server of ``demo_server``), 2 rollouts,
against the committed ``recordings/openai-arithmetic.parquet`` (the OpenAI-compatible agent on the same tasks, which
got two of them wrong): the demo agent solves every one, so it wins those two and ties the rest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ors_lab as ol
from ors_lab.demo.agent import DemoAgent
from ors_lab.demo.launch import ServerProcess
from ors_lab.events import BaselineEvent, Event, event_from_wire, full_wire
from ors_lab.feed import FeedReader
from ors_lab.viewer.feed_state import FeedState
from ors_lab.viewer.report import report_data
from ors_lab.viewer.run import RunState
from tests.analysis.test_report import opened
from tests.conftest import REPO_ROOT
from tests.notebook.lab import screenshot_dir

OPENAI = REPO_ROOT / "recordings" / "openai-arithmetic.parquet"
FIGURES = ["tasks", "mean_delta", "stderr", "ci_low", "ci_high", "p_value", "wins", "losses", "ties"]
KEYS = [(task, rollout) for task in range(10) for rollout in range(2)]

pytestmark = pytest.mark.timeout(120)


class Run:
    """An evaluation against the baseline: its result, its trace, the figures its dashboard showed after each
    episode, the dashboard's state, and the state a watcher of its feed rebuilt (joined after the run)."""

    def __init__(self, result: ol.EvalResult, path: Path, seen: list[dict[str, Any]], state: RunState,
                 watched: FeedState) -> None:  # fmt: skip
        self.result, self.path, self.seen, self.state, self.watched = result, path, seen, state, watched


@pytest.fixture(scope="module")
def against(demo_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The demo agent on arithmetic/test, 2 rollouts, concurrency 1, baseline the committed OpenAI run; a RunState
    fed its agent events as they come (``subscribe=``); a watcher reading its feed once it has ended."""
    path = tmp_path_factory.mktemp("baseline") / "run.parquet"
    state = RunState("arithmetic", "test", KEYS)
    seen: list[dict[str, Any]] = []

    def watch(event: Event) -> None:
        state.apply(event)
        if event.kind == "episode" and state.baseline is not None:
            seen.append(state.snapshot()["baseline"])

    watched = FeedState("")
    with ol.Client(demo_server.url) as client, ol.Feed(0) as feed:
        result = ol.evaluate(client.environment("arithmetic"), DemoAgent(), split="test", rollouts=2, concurrency=1,
                             record=path, baseline=OPENAI, subscribe=watch, feed=feed, progress=False)  # fmt: skip
        reader = FeedReader(feed.url, watched.take).start()  # a watcher joining after the end: the snapshot alone
        try:
            reader.wait_ready()  # the snapshot read: the run's plan, its baseline, its outcomes and its end
        finally:
            reader.close()
    state.end()
    return Run(result, path, seen, state, watched)


def test_the_result_holds_the_comparison(against: Run) -> None:
    """result.comparison is ol.compare(baseline, result): the demo agent wins the two tasks the baseline lost."""
    comparison = against.result.comparison
    assert comparison is not None and comparison.names == ["openai-arithmetic.parquet", "DemoAgent(pace=0.0)"]
    summary = comparison.summary()
    assert (summary["tasks"], summary["mean_delta"], summary["wins"], summary["ties"]) == (10, 0.2, 2, 8)
    assert list(summary[FIGURES]) == list(ol.compare(OPENAI, against.result).summary()[FIGURES])
    assert list(summary[FIGURES]) == list(ol.compare(OPENAI, against.path).summary()[FIGURES])  # its trace alike
    assert "vs openai-arithmetic.parquet" in against.result._repr_html_()  # its card says so
    assert comparison.candidates[0].trace is not None  # its transcripts: the run's trace


def test_the_dashboard_compares_each_task_as_it_ends(against: Run) -> None:
    """After each episode the dashboard's tasks compared are the tasks whose two rollouts have ended, its figures the
    running ones (no p-value yet), its interval series one point per task; the ended state's figures are the
    comparison's, its p-value with them; the grid holds each finished cell's delta code."""
    seen = against.seen
    assert [f["tasks"] for f in seen] == [n // 2 for n in range(1, 21)]
    assert all(f["p_value"] is None for f in seen) and [p[0] for p in seen[-1]["series"]] == list(range(1, 11))
    final = against.state.snapshot()["baseline"]
    summary = against.result.comparison.summary()  # type: ignore[union-attr]
    for name in FIGURES:
        assert final[name] == pytest.approx(summary[name], abs=1e-12), name
    assert seen[-1]["mean_delta"] == pytest.approx(summary["mean_delta"])
    assert final["name"] == "openai-arithmetic.parquet"
    deltas = against.state.snapshot()["grid"]["deltas"]
    assert deltas == "".join("uu" if task in (3, 5) else "kk" for task in range(10))  # +1 where it won, else 0
    assert "vs openai-arithmetic.parquet: delta +0.200 [" in against.state.text()
    assert "vs openai-arithmetic.parquet" in against.state.html() and "wins / losses / ties" in against.state.html()


def test_a_watcher_of_the_feed_sees_the_comparison(against: Run) -> None:
    """A watcher that joined after the run rebuilt the same comparison from the feed's snapshot."""
    run = against.watched.run
    assert run is not None and run.baseline is not None and run.status == "finished"
    assert run.snapshot()["baseline"] == against.state.snapshot()["baseline"]


def test_the_trace_keeps_the_baseline_and_its_report_the_comparison(against: Run) -> None:
    """The trace holds one baseline row (the baseline's rewards per task); the report made from the trace alone
    draws the run's dashboard against it, with the comparison's figures, and its card says so."""
    trace = ol.load_trace(against.path)
    rows = trace.select(["kind", "environment", "split", "data"], kinds=["baseline"])
    assert rows.num_rows == 1 and rows["environment"].to_pylist() == ["arithmetic"]
    data = report_data(trace)
    (run,) = data.head["runs"]
    assert run["data"]["baseline"]["p_value"] == against.result.comparison.summary()["p_value"]  # type: ignore[union-attr]
    assert run["data"]["baseline"]["wins"] == 2 and "vs openai-arithmetic.parquet" in data.runs[0][1]
    (compared,) = data.head["comparisons"]  # the comparison's view, the baseline known by its per-task scores
    summary = against.result.comparison.summary()  # type: ignore[union-attr]
    assert [compared["data"]["figures"][0]["reward"][name] for name in FIGURES] == list(summary[FIGURES])
    assert sorted(compared["details"]) == [f"arithmetic/test/{task}" for task in range(10)]
    assert trace.episodes["reward"].tolist() == against.result.episodes["reward"].tolist()  # nothing else changed


@pytest.mark.browser  # through test_report's `opened`, which conftest's scan of this module does not see
def test_the_report_draws_the_run_against_its_baseline_in_a_browser(against: Run, tmp_path: Path) -> None:
    """The run's report, opened from disk offline: its dashboard says the delta, interval, p and wins/losses/ties of
    the comparison, and its grid is coloured by each cell's delta (the two tasks won +1, the rest 0); its comparison
    view has the comparison's figures, and a won task shows the run's transcript beside the baseline's note."""
    out = ol.load_trace(against.path).to_html(tmp_path / "run.html").path
    summary = against.result.comparison.summary()  # type: ignore[union-attr]
    with opened(out, tmp_path) as it:
        page = it.page
        figures = {node.get_attribute("data-figure"): node.inner_text() for node in page.locator(".ol-run-vs b").all()}
        assert figures["mean_delta"] == f"delta +{summary['mean_delta']:.3f} ± {summary['stderr']:.3f}"
        assert figures["ci_low"] == f"95% [{summary['ci_low']:+.3f}, {summary['ci_high']:+.3f}]"
        assert figures["p_value"] == f"p {summary['p_value']:g}" and figures["wins"] == "2/0/8 of 10 tasks"
        deltas = page.eval_on_selector_all(".ol-run-grid .ol-cell", "cells => cells.map(c => c.dataset.delta)")
        assert deltas == ["1.0" if task in (3, 5) else "0.0" for task in range(10) for _ in range(2)]
        page.locator(".ol-run").screenshot(path=str(screenshot_dir() / "report-against-baseline.png"))
        shown = {row.get_attribute("data-figure"): json.loads(row.locator("td").get_attribute("data-value") or "null")
                 for row in page.locator(".ol-cmp-figures tr").all()}  # fmt: skip
        assert [shown["mean_delta"], shown["p_value"], shown["wins"]] == [summary["mean_delta"], summary["p_value"],
                                                                          [2, 0, 8]]  # fmt: skip
        page.locator(".ol-cmp-cell[data-key='arithmetic/test/3']").click()
        page.locator(".ol-cmp-side").nth(1).locator(".ol-cmp-step").first.wait_for()
        assert "per-task scores only" in page.locator(".ol-cmp-side").nth(0).inner_text()
        assert "submit" in page.locator(".ol-cmp-side").nth(1).inner_text()


def test_a_baseline_without_the_runs_tasks_fails_before_the_run(demo_server: ServerProcess, tmp_path: Path) -> None:
    """A baseline of other tasks is a ValueError naming what it holds, before any session opened or trace was made;
    a run without a baseline has no comparison."""
    with ol.Client(demo_server.url) as client:
        env = client.environment("guessing")
        with pytest.raises(ValueError, match=r"holds no episode of guessing/test .*arithmetic/test \(10 tasks\)"):
            ol.evaluate(env, DemoAgent(), split="test", baseline=OPENAI, record=tmp_path / "x.parquet", progress=False)
        assert not (tmp_path / "x.parquet").exists()
        with pytest.raises(TypeError, match="a trace's path"):
            ol.evaluate(env, DemoAgent(), split="test", baseline=42, progress=False)  # type: ignore[arg-type]
        plain = ol.evaluate(env, DemoAgent(), split="test", tasks=1, progress=False)
    assert plain.comparison is None and plain.baseline is None


def test_the_baseline_event_is_one_row_of_the_agent_layer() -> None:
    """The event holds the baseline's rewards per task as it publishes them; its wire form is read back the same."""
    event = BaselineEvent(name="b", environment="lab", split="test", tasks=[[0, [1.0, 0.5], 1]])
    assert event.layer == "agent" and event.to_wire()["tasks"] == [[0, [1.0, 0.5], 1]]
    assert event_from_wire("baseline", full_wire(event)) == event
