"""The HTML report of a run: its data (made by the notebook's own states), its page, and the page in a browser.

The traces: the committed ``recordings/demo.parquet`` (the demo agent on two environments, keep-alive
pings every 0.25 s) and ``recordings/openai-arithmetic.parquet`` (the OpenAI-compatible agent:
reasoning, text and tool-call deltas, token usage), and an evaluation recorded here: the
OpenAI-compatible agent on the ors-sdk reference server's ``lab`` train split, 2 rollouts, against
the scripted LLM server, one task's tool-call arguments not JSON and one refused by the provider
(two failed episodes). Its dashboard's state is fed the run's events live, to compare with what the
report makes of the trace afterwards.

The browser is Debian's Chromium (Playwright, ``tests/notebook/lab.py``'s flags), the page opened
from ``file://`` with every other request aborted and recorded; screenshots go to
``$ORS_LAB_SCREENSHOTS`` (``build/screenshots``).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import ors_lab as ol
from ors_lab.analysis.frames import default_ks, summary_frame
from ors_lab.demo.launch import ServerProcess
from ors_lab.events import CloseEvent, OpenEvent, PingEvent
from ors_lab.viewer import report as report_module
from ors_lab.viewer.page import esm
from ors_lab.viewer.report import Report, ReportData, report_data, report_html, write_report
from ors_lab.viewer.run import RunState
from ors_lab.viewer.trace import TraceState
from tests import traces
from tests.analysis.synthetic import Episode, record
from tests.conftest import REPO_ROOT
from tests.envs.common import LAB_TASKS
from tests.llm_server import API_KEY, MODEL, LLMServer
from tests.notebook.lab import CHROMIUM, CHROMIUM_ARGS, screenshot_dir

pytestmark = pytest.mark.timeout(180)

TRAIN = LAB_TASKS["train"]
ANSWERS = {task["question"]: task["answer"] for task in TRAIN}
MALFORMED, REFUSED = TRAIN[1]["question"], TRAIN[2]["question"]
ROLLOUTS = 2
COMMITTED = ["demo.parquet", "openai-arithmetic.parquet", "claude-arithmetic.parquet"]


@dataclass
class Recorded:
    """A recorded evaluation, its result, and the transcripts its dashboard's state made live (by session id)."""

    path: Path
    result: ol.EvalResult
    live: dict[str, dict[str, Any]]

    @property
    def trace(self) -> ol.Trace:
        return ol.load_trace(self.path)


@pytest.fixture(scope="module")
def recorded(ors_sdk_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """The OpenAI-compatible agent on lab/train, 2 rollouts, recorded; a RunState watching it live."""
    path = tmp_path_factory.mktemp("report") / "run.parquet"
    keys = [(task, rollout) for task in range(len(TRAIN)) for rollout in range(ROLLOUTS)]
    state = RunState("lab", "train", keys)
    live: dict[str, dict[str, Any]] = {}

    def watch(event: Any) -> None:
        state.apply(event)
        for transcript in state.inbox():
            live[transcript["session_id"]] = transcript

    with LLMServer(ANSWERS, modes={MALFORMED: "malformed", REFUSED: "error"}, error_status=400) as llm:
        agent = ol.OpenAIAgent(MODEL, base_url=llm.url + "/v1", api_key=API_KEY, max_retries=0)
        with ol.Client(ors_sdk_server.url, ping_interval=0.05) as client:
            result = ol.evaluate(client.environment("lab"), agent, split="train", rollouts=ROLLOUTS, record=path,
                                 progress=False, subscribe=watch)  # fmt: skip
    assert len(result.errors) == ROLLOUTS  # the refused task's episodes failed
    return Recorded(path, result, live)


def chunks_of(data: ReportData) -> dict[str, dict[str, Any]]:
    """Every episode's detail the report holds, unpacked."""
    found: dict[str, dict[str, Any]] = {}
    for chunk in data.chunks:
        found.update(json.loads(gzip.decompress(chunk)))
    return found


def plain(value: Any) -> Any:
    """``value`` as the page reads it (JSON)."""
    return json.loads(json.dumps(value))


def figures(episodes: Any) -> dict[str, Any]:
    """The figures a summary shows, from ``summary_frame`` as ``EvalResult.summary()`` makes them."""
    row = summary_frame(episodes, default_ks(episodes)).iloc[0]
    passes = {k: float(row[f"pass@{k}"]) for k in default_ks(episodes)}
    return {"mean": float(row["mean_reward"]), "stderr": float(row["stderr"]), "pass": passes,
            "success_rate": float(row["success_rate"]), "errors": int(row["errors"]), "episodes": int(row["episodes"]),
            "tasks": int(row["tasks"])}  # fmt: skip


# -- the data, without a browser ----------------------------------------------------------------------


def test_the_report_holds_what_the_viewer_and_the_dashboard_make(recorded: Recorded) -> None:
    """Every episode's row, timeline and transcript are the TraceState's and the live RunState's, made of the trace."""
    trace = recorded.trace
    data = report_data(trace)
    viewer: TraceState = trace.view().state  # type: ignore[assignment]
    assert data.head["list"] == plain(viewer.rows()) and data.episodes == data.detailed == 2 * len(TRAIN)
    held = chunks_of(data)
    assert sorted(held) == sorted(row["key"] for row in data.head["list"]) and -1 not in data.head["chunk"]
    for key, detail in held.items():
        assert detail["timeline"] == plain(viewer.timeline(key))
        assert detail["transcript"] == plain(recorded.live[key])  # the trace's events, fed back: what was seen live
    reasons = {part[1] for detail in held.values() for part in detail["transcript"]["parts"]}
    assert {"block", "reasoning", "text", "tool", "output", "reward", "finish"} <= reasons
    (run,) = data.head["runs"]
    episodes = recorded.result.episodes
    assert run["sessions"] == {f"{e['task_index']}/{e['rollout']}": e["session_id"]
                               for e in episodes.to_dict("records")}  # fmt: skip
    assert run["data"]["grid"]["cells"].count("x") == ROLLOUTS and run["data"]["status"] == "finished"


def test_a_report_of_small_rewards_says_why_success_is_0(tmp_path: Path) -> None:
    """Rewards of 0.15 and no success: the report's summary card, its evaluation's card and its dashboard's data
    each carry the note that names success_threshold=."""
    run = [Episode(task, rollout, [0.05, 0.1], environment="port") for task in range(2) for rollout in range(2)]
    data = report_data(record(tmp_path / "small.parquet", run))
    note = summary_frame(ol.load_trace(tmp_path / "small.parquet").episodes).iloc[0]["note"]
    assert "no episode reached the success threshold (success_threshold=, 1.0 by default)" in note
    (run_data,) = data.head["runs"]
    assert run_data["data"]["note"] == note
    ((_, card, _),) = data.runs
    assert note in data.summary and note in card
    assert note in report_html(data)


def test_the_figures_are_the_eval_results(recorded: Recorded) -> None:
    """The dashboard's figures and the summary card's are the EvalResult's summary(), to the last digit."""
    data = report_data(recorded.trace)
    summary = recorded.result.summary().iloc[0]
    dashboard = data.head["runs"][0]["data"]
    assert dashboard["mean"] == summary["mean_reward"] and dashboard["stderr"] == summary["stderr"]
    assert dashboard["pass"] == [[1, summary["pass@1"]], [ROLLOUTS, summary[f"pass@{ROLLOUTS}"]]]
    assert dashboard["success_rate"] == summary["success_rate"] and dashboard["errors"] == summary["errors"]
    assert dashboard["done"] == dashboard["total"] == summary["episodes"]
    assert dashboard["agent"] == f"OpenAIAgent({MODEL})"  # the agent the run named, in its trace
    card = data.summary
    assert f"<th>mean reward</th><td>{summary['mean_reward']:.3f} ± {summary['stderr']:.3f}</td>" in card
    assert f"<th>pass@{ROLLOUTS}</th><td>{summary[f'pass@{ROLLOUTS}']:.3f}</td>" in card
    assert f"<th>errors</th><td>{summary['errors']}</td>" in card and f"OpenAIAgent({MODEL})" in card
    _, fallback, tasks = data.runs[0]
    assert fallback.count("<th>mean reward</th>") == 1 and tasks.count("<tr><td>") == len(TRAIN)
    assert f"{len(TRAIN)} tasks</summary>" in tasks


def test_a_report_holds_the_failed_timelines_first_and_says_what_it_left_out(recorded: Recorded) -> None:
    """With timelines=3: the two failed episodes and the first other one; the page and each left-out row say so."""
    trace = recorded.trace
    data = report_data(trace, timelines=3)
    rows, chunk = data.head["list"], data.head["chunk"]
    kept = [row["key"] for row, n in zip(rows, chunk, strict=True) if n >= 0]
    failed = [row["key"] for row in rows if row["error"]]
    first_other = next(row["key"] for row in rows if not row["error"])
    assert data.detailed == 3 and sorted(kept) == sorted([*failed, first_other]) == sorted(chunks_of(data))
    assert data.held.startswith(f"It holds the timelines and transcripts of 3 of its {2 * len(TRAIN)} episodes")
    assert f"ors-lab report TRACE --timelines {2 * len(TRAIN)}" in data.head["notes"]["timeline"]
    assert report_data(trace, timelines=0).detailed == 0
    with pytest.raises(ValueError, match="timelines must be 0 or more"):
        report_data(trace, timelines=-1)


def test_details_come_in_chunks_within_a_budget(recorded: Recorded, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each chunk closes past CHUNK_CHARS; the report stops taking details once the compressed ones pass the budget."""
    monkeypatch.setattr(report_module, "CHUNK_CHARS", 1)
    trace = recorded.trace
    data = report_data(trace)
    assert len(data.chunks) == data.detailed == 2 * len(TRAIN) and sorted(data.head["chunk"]) == list(range(6))
    budget = report_data(trace, detail_bytes=1)
    assert budget.detailed == len(budget.chunks) == 1
    assert "--timelines" not in budget.head["notes"]["timeline"]  # more timelines would not help: the budget is spent
    assert "display the trace in a notebook (load_trace(path).view())" in budget.head["notes"]["timeline"]


def test_the_page_is_one_file_that_fetches_nothing(tmp_path: Path) -> None:
    """One HTML file: the notebook's own script verbatim, the style sheet and the data inline, a policy forbidding
    any fetch, no URL to load; the same trace gives the same bytes; an existing file is replaced."""
    trace = ol.load_trace(REPO_ROOT / "recordings" / "demo.parquet")
    out = tmp_path / "reports" / "demo.html"
    out.parent.mkdir()
    out.write_text("an older report")
    written = trace.to_html(out)
    page = out.read_text(encoding="utf-8")
    assert written == Report(out, len(page.encode()), 40, 40) and page.startswith("<!doctype html>")
    assert '<meta http-equiv="Content-Security-Policy" content="default-src \'none\';' in page
    assert esm() in page  # the notebook's front end, not a copy of it
    assert not re.search(r"\s(src|href)=", page) and "<link" not in page and "@import" not in page
    head = re.search(r'id="ors-lab-head">([^<]*)</script>', page)
    assert head is not None and json.loads(gzip.decompress(base64.b64decode(head.group(1))))["list"]
    assert write_report(trace, out).size == written.size and out.read_text(encoding="utf-8") == page
    assert report_html(report_data(trace)) == page  # the same trace, the same page
    with pytest.raises(ValueError, match="is the trace itself"):
        write_report(trace, REPO_ROOT / "recordings" / "demo.parquet")
    assert not list(tmp_path.glob("reports/.*.tmp"))


def test_a_trace_no_evaluation_ran_lists_its_sessions(tmp_path: Path) -> None:
    """Sessions recorded without an evaluation (a proxy's trace): no dashboard, the list and timelines all the same."""
    path = tmp_path / "bare.parquet"
    with ol.Recorder(path) as rec:
        traces.record(rec, OpenEvent(session_id="s", environment="lab", split="train", task_index=0),
                      PingEvent(session_id="s"), CloseEvent(session_id="s", ok=True))  # fmt: skip
    data = report_data(ol.load_trace(path))
    assert data.head["runs"] == [] and data.runs == [] and [row["key"] for row in data.head["list"]] == ["s"]
    assert [item["kind"] for item in chunks_of(data)["s"]["timeline"]["items"]] == ["session", "ping", "session"]
    assert chunks_of(data)["s"]["transcript"] is None
    assert "<h2>Evaluations</h2>" not in report_html(data)


def test_a_committed_trace_names_its_model() -> None:
    """A trace whose episodes do not name their agent (recorded before they did) names the model its usage names."""
    data = report_data(ol.load_trace(REPO_ROOT / "recordings" / "openai-arithmetic.parquet"))
    assert data.head["runs"][0]["data"]["agent"] == "model scripted-model"


# -- the page, in a browser ----------------------------------------------------------------------------


@dataclass
class Opened:
    """A report open in Chromium: the page, what went wrong on it, and every request it made."""

    page: Any
    problems: list[str]
    requests: list[str]


@contextlib.contextmanager
def opened(path: Path, scratch: Path) -> Iterator[Opened]:
    """``path`` opened from file:// in headless Chromium, every request but the file aborted; drawn when it yields."""
    from playwright.sync_api import sync_playwright

    env = {**os.environ, "XDG_CONFIG_HOME": str(scratch / "config"), "XDG_CACHE_HOME": str(scratch / "cache")}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, env=env)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            found = Opened(page, [], [])
            page.on("pageerror", lambda error: found.problems.append(f"page error: {error}"))
            page.on("console", lambda m: found.problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)  # fmt: skip

            def route(route: Any) -> None:
                found.requests.append(route.request.url)
                if route.request.url.startswith("file://"):
                    route.continue_()
                else:
                    route.abort()

            page.route("**/*", route)
            page.goto(path.as_uri())
            page.wait_for_function("document.documentElement.dataset.orsLab", timeout=30_000)
            assert page.evaluate("document.documentElement.dataset.orsLab") == "ready", found.problems
            yield found
            assert found.problems == []
            assert found.requests == [path.as_uri()]  # the page itself, and nothing else
        finally:
            browser.close()


def card_values(page: Any, selector: str) -> dict[str, str]:
    """The rows of the first card table under ``selector``: name -> text."""
    rows = page.locator(f"{selector} table.ol-kv").first.locator("tr")
    return {rows.nth(i).locator("th").inner_text(): rows.nth(i).locator("td").inner_text() for i in range(rows.count())}


def dashboard_figures(page: Any, n: int) -> dict[str, str]:
    """The figures of the n-th run dashboard as it shows them: label -> value."""
    stats = page.locator(f"#ors-lab-run-{n} .ol-run-stat")
    pairs = [stats.nth(i).locator("span").first.inner_text().strip() for i in range(stats.count())]
    values = [stats.nth(i).locator("b").inner_text() for i in range(stats.count())]
    return {label: value for label, value in zip(pairs, values, strict=True) if label != "tokens"}


def shown(figures: dict[str, Any]) -> dict[str, str]:
    """``figures`` as a dashboard writes them (3 decimals)."""
    return {"mean reward": f"{figures['mean']:.3f} ± {figures['stderr']:.3f}", "pass@1": f"{figures['pass'][1]:.3f}",
            "pass@2": f"{figures['pass'][2]:.3f}", "success": f"{figures['success_rate']:.3f}",
            "errors": str(figures["errors"])}  # fmt: skip


def listed(page: Any) -> list[int]:
    """The # column of the list's rows on screen."""
    return [int(text) for text in page.locator("table.ol-tr-list tbody tr td:first-child").all_inner_texts()]


@pytest.mark.parametrize("name", COMMITTED)
def test_a_committed_traces_report_in_a_browser(name: str, tmp_path: Path) -> None:
    """From file://, offline: no errors; the summary and each dashboard show the frames' figures; a grid cell opens
    its transcript and an episode of the list its timeline, as the trace holds them."""
    trace = ol.load_trace(REPO_ROOT / "recordings" / name)
    out = trace.to_html(tmp_path / name.replace(".parquet", ".html")).path
    episodes = trace.episodes
    whole = figures(episodes)
    stem = f"report-{name.removesuffix('.parquet')}"
    with opened(out, tmp_path) as it:
        page = it.page
        card = card_values(page, "main > .ors-lab")
        assert card["mean reward"] == f"{whole['mean']:.3f} ± {whole['stderr']:.3f}"
        assert card["pass@1"] == f"{whole['pass'][1]:.3f}" and card["pass@2"] == f"{whole['pass'][2]:.3f}"
        assert card["success rate"] == f"{whole['success_rate']:.3f}" and card["errors"] == str(whole["errors"])
        assert card["episodes"] == f"{whole['episodes']} ({whole['tasks']} tasks x 2 rollouts)"
        groups = list(episodes.groupby(["environment", "split"], sort=False))
        assert page.locator(".ol-run").count() == len(groups)
        for n, (_, group) in enumerate(groups):
            assert dashboard_figures(page, n) == shown(figures(group))
        page.screenshot(path=str(screenshot_dir() / f"{stem}.png"), full_page=True)

        # the first grid cell: task 0, rollout 0 of the first evaluation, its transcript as the trace holds it
        first = groups[0][1].iloc[0]
        page.locator("#ors-lab-run-0 .ol-run-grid .ol-cell").first.click()
        body = page.locator("#ors-lab-run-0 .ol-run-transcript-body")
        body.locator(".ol-run-part").first.wait_for()
        turns = trace.transcripts[trace.transcripts["session_id"] == first["session_id"]]
        text = body.inner_text()
        assert turns.iloc[0]["reasoning"][:60] in text and "reward 1 (finished)" in text

        # the first episode of the list: its timeline, every item TraceState makes of its rows
        page.locator("table.ol-tr-list tbody tr").first.click()
        page.locator(".ol-tr-item").first.wait_for()
        expected = trace.view().state.timeline(first["session_id"])  # type: ignore[attr-defined]
        assert page.locator(".ol-tr-item").count() == len(expected["items"])
        for kind in ("reasoning", "tool-call", "tool-output", "reward", "episode"):
            assert page.locator(f".ol-tr-k-{kind}").count() >= 1, kind
        assert page.locator(".ol-tr-panel .ol-tr-title").first.inner_text() == "episode starts"
        page.locator(".ol-tr-panel").screenshot(path=str(screenshot_dir() / f"{stem}-timeline.png"))
        if name == "demo.parquet":  # its client pinged every 0.25 s: a guessing episode shows its pings and gaps
            page.fill(".ol-tr-bar input[type=search]", "guessing")
            page.wait_for_function("() => document.querySelector('.ol-tr-where').textContent.includes('20 of 40')")
            page.locator("table.ol-tr-list tbody tr").first.click()
            page.locator(".ol-tr-k-ping").first.wait_for()
            assert "keep-alive ping · " in page.locator(".ol-tr-k-ping").first.inner_text()


def test_a_recorded_runs_report_in_a_browser(recorded: Recorded, tmp_path: Path) -> None:
    """The recorded run's page: the EvalResult's figures; a failed cell's transcript and timeline show the error in
    red; the list sorts, filters and pages as TraceState.page does."""
    trace = recorded.trace
    out = trace.to_html(tmp_path / "run.html").path
    summary = recorded.result.summary().iloc[0]
    viewer: TraceState = trace.view().state  # type: ignore[assignment]
    with opened(out, tmp_path) as it:
        page = it.page
        assert dashboard_figures(page, 0) == shown({
            "mean": summary["mean_reward"], "stderr": summary["stderr"], "success_rate": summary["success_rate"],
            "pass": {1: summary["pass@1"], 2: summary["pass@2"]}, "errors": summary["errors"]})  # fmt: skip
        page.locator("#ors-lab-run-0 .ol-cell[data-state=failed]").first.click()
        transcript = page.locator("#ors-lab-run-0 .ol-run-transcript")
        error = recorded.result.errors.iloc[0]
        transcript.locator(".ol-err").first.wait_for()
        assert f"{error['error_type']}: {error['error']}"[:80] in transcript.inner_text()
        page.screenshot(path=str(screenshot_dir() / "report-recorded-run.png"), full_page=True)

        page.click("text=errors only")
        page.wait_for_function("() => document.querySelectorAll('table.ol-tr-list tbody tr').length === 2")
        page.locator("table.ol-tr-list tbody tr").first.click()
        page.locator(".ol-tr-item.ol-tr-error").first.wait_for()
        assert page.locator(".ol-tr-item.ol-tr-error").count() >= 2
        page.locator(".ol-tr-panel").screenshot(path=str(screenshot_dir() / "report-recorded-run-failed.png"))
        page.click("text=errors only")

        # the list pages, sorts and filters in the page as the kernel's TraceState does
        query: dict[str, Any] = {"size": 25, "sort": None, "desc": False, "filter": "", "errors": False}

        def same(**changes: Any) -> None:
            query.update(changes)
            want = viewer.page(0, **query)
            count = want["total"] if want["matched"] == want["total"] else f"{want['matched']} of {want['total']}"
            where = f"page 1 of {want['pages']} · {count} episodes"  # what trace.js writes for it
            page.wait_for_function("(text) => document.querySelector('.ol-tr-where').textContent === text", arg=where)
            assert listed(page) == [row["n"] for row in want["rows"]], query

        page.click("table.ol-tr-list th:has-text('reward')")
        same(sort="reward")
        page.click("table.ol-tr-list th:has-text('reward')")
        same(desc=True)
        page.click("table.ol-tr-list th:has-text('error')")
        same(sort="error", desc=False)
        page.fill(".ol-tr-bar input[type=search]", "TRAIN/1")
        same(filter="TRAIN/1")
        page.fill(".ol-tr-bar input[type=search]", "")
        page.select_option(".ol-tr-bar select", "10")
        same(filter="", size=10)


def test_a_report_says_what_it_does_not_hold(recorded: Recorded, tmp_path: Path) -> None:
    """A report holding 2 timelines: an episode left out shows the note instead of a timeline, its cell a note too."""
    trace = recorded.trace
    out = trace.to_html(tmp_path / "two.html", timelines=2).path
    data = report_data(trace, timelines=2)
    with opened(out, tmp_path) as it:
        page = it.page
        assert page.locator(".ol-page-held").inner_text() == data.held
        left_out = next(n for n, chunk in enumerate(data.head["chunk"]) if chunk < 0)
        page.locator("table.ol-tr-list tbody tr").nth(left_out).click()
        page.locator(".ol-tr-note").wait_for()
        assert page.locator(".ol-tr-note").inner_text() == data.head["notes"]["timeline"]
        assert page.locator(".ol-tr-item").count() == 0
        row = data.head["list"][left_out]
        page.locator(f"#ors-lab-run-0 .ol-cell[data-key='{row['task_index']}/{row['rollout']}']").click()
        transcript = page.locator("#ors-lab-run-0 .ol-run-transcript-body")
        page.wait_for_function("(n) => document.querySelector('.ol-run-transcript-body').textContent === n",
                               arg=data.head["notes"]["transcript"])  # fmt: skip
        assert transcript.inner_text() == data.head["notes"]["transcript"]
