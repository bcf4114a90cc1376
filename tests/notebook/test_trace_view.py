"""The trace viewer: a recorded run's episodes a page at a time, one episode's timeline, the readable frames.

The traces are recorded by the real recorder: a bare session against the ors-sdk reference server
(keep-alive pings every 50 ms, a slow call, a call that raises, an image) and an evaluation of the
OpenAI-compatible agent on the scripted LLM server (reasoning, text and tool-call argument deltas;
one answer whose arguments are not JSON, one refused by the provider).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import ors_lab as ol
from ors_lab.analysis import frames
from ors_lab.events import EventStream, OpenEvent, PingEvent, RequestEvent
from ors_lab.notebook.view import WIDGET_MIME
from ors_lab.viewer.trace import MAX_ITEMS, TEXT_CHARS, TraceState, reward_histogram, timeline
from tests.analysis.synthetic import Episode, events
from tests.envs.common import CRASH_MESSAGE, LAB_TASKS
from tests.llm_server import API_KEY, MODEL, LLMServer
from tests.traces import record

pytestmark = pytest.mark.timeout(120)

TRAIN = LAB_TASKS["train"]
ANSWERS = {task["question"]: task["answer"] for task in TRAIN}
MALFORMED, REFUSED = TRAIN[1]["question"], TRAIN[2]["question"]
PING_INTERVAL = 0.05
SLOW_S = 0.4


@dataclass
class Recorded:
    """A trace of one bare session and one LLM evaluation, and what the model streamed."""

    path: Path
    result: ol.EvalResult
    llm: LLMServer
    bare: str  # the bare session's id

    @property
    def trace(self) -> ol.Trace:
        return ol.load_trace(self.path)


@pytest.fixture(scope="module")
def recorded(ors_sdk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """The bare session, then the evaluation, recorded into one trace."""
    path = tmp_path_factory.mktemp("trace-view") / "run.parquet"
    modes = {MALFORMED: "malformed", REFUSED: "error"}
    with LLMServer(ANSWERS, modes=modes, error_status=400) as llm, ol.Recorder(path) as rec:
        with ol.Client(ors_sdk_server.url, recorder=rec, ping_interval=PING_INTERVAL) as client:
            with client.environment("lab").session(split="train", index=0) as session:
                assert session.call("slow", {"seconds": SLOW_S}).text == "slept"
                with pytest.raises(ol.ToolError, match=CRASH_MESSAGE):
                    session.call("crash")
                assert session.call("image").ok
                assert session.call("submit", {"answer": "4"}).reward == 1.0
                bare = session.sid
        agent = ol.OpenAIAgent(MODEL, base_url=llm.url + "/v1", api_key=API_KEY, max_retries=0)
        with ol.Client(ors_sdk_server.url) as client:  # record= records the run: no recorder on this client
            result = ol.evaluate(client.environment("lab"), agent, split="train", record=rec, progress=False)
    return Recorded(path, result, llm, str(bare))


@pytest.fixture(scope="module")
def state(recorded: Recorded) -> TraceState:
    """The viewer's state of the recorded trace, 2 rows a page."""
    state: TraceState = recorded.trace.view(page_size=2).state  # type: ignore[assignment]
    return state


def episode_of(trace: ol.Trace, question: str) -> str:
    """The session id of the evaluation's episode on `question`."""
    index = next(i for i, task in enumerate(TRAIN) if task["question"] == question)
    episodes = trace.episodes
    return str(episodes[(episodes["task_index"] == index) & episodes["rollout"].notna()]["session_id"].iloc[0])


# -- the list, a page at a time ---------------------------------------------------------------------


def test_the_list_is_the_episodes(recorded: Recorded) -> None:
    """The viewer lists the trace's episodes, in order, with their values (built without the per-call frames)."""
    trace = recorded.trace
    listing = frames.listing_frame(trace.table)
    assert list(listing.columns) == list(frames.LISTING_COLUMNS)
    assert listing.equals(trace.episodes[list(frames.LISTING_COLUMNS)])
    assert len(listing) == 1 + len(TRAIN) and listing["error"].notna().sum() == 1


def test_only_a_page_crosses_to_the_front_end(state: TraceState) -> None:
    """The snapshot holds the first page and the counts; a request answers one page, clamped to the last."""
    snapshot = state.snapshot()
    first = snapshot["page"]
    assert (first["page"], first["pages"], first["size"], first["total"]) == (0, 2, 2, 4)
    assert [row["n"] for row in first["rows"]] == [1, 2] and snapshot["label"] == "episodes"
    json.dumps(snapshot)  # JSON, as the widget's trait needs
    second = state.request({"page": 1, "size": 2})
    assert second is not None and [row["n"] for row in second["rows"]] == [3, 4]
    assert state.request({"page": 99, "size": 3})["page"] == 1  # type: ignore[index]
    assert state.request({"something": "else"}) is None


def test_pages_sort_and_filter(state: TraceState) -> None:
    """Sorting by a column (stable, nulls last), text filters and errors-only all page what matches."""
    by_reward = state.page(0, size=10, sort="reward", desc=True)
    rewards = [row["reward"] for row in by_reward["rows"]]
    assert rewards == sorted(rewards, reverse=True) and rewards[0] == 1.0
    errors = state.page(0, errors=True)
    assert errors["matched"] == 1 and errors["rows"][0]["error"]
    assert state.page(0, filter="TRAIN/1")["matched"] == 1  # a task, case-insensitive
    assert state.page(0, filter="no such thing")["matched"] == 0
    assert state.page(0, sort="not a column")["sort"] is None


# -- one episode's timeline -------------------------------------------------------------------------


def test_the_timeline_shows_pings_with_their_real_gaps(recorded: Recorded, state: TraceState) -> None:
    """Keep-alive pings of the slow call's session are items, each with the gap since the one before."""
    reply = state.request({"open": recorded.bare})
    assert reply is not None and reply["type"] == "timeline" and reply["more"] == 0
    items = reply["items"]
    times = [item["t"] for item in items]
    assert times == sorted(times) and items[0]["gap"] is None
    assert all(b["gap"] == pytest.approx(b["t"] - a["t"], abs=1e-5) for a, b in itertools.pairwise(items))
    pings = [item for item in items if item["kind"] == "ping"]
    assert len(pings) >= SLOW_S / PING_INTERVAL / 2
    table = recorded.trace.table.to_pandas()
    rows = table[(table["session_id"] == recorded.bare) & (table["kind"].isin(["open", "ping"]))]
    gaps = rows["t_ns"].diff().dropna() / 1e9
    assert [p["since"] for p in pings] == pytest.approx(gaps.tolist(), abs=1e-5)
    assert all(p["since"] >= 0.8 * PING_INTERVAL for p in pings[1:])


def test_the_timeline_shows_requests_calls_inputs_and_outputs(recorded: Recorded, state: TraceState) -> None:
    """Requests and responses with status and time to first byte; each result with its input and output."""
    items = state.timeline(recorded.bare)["items"]
    titles = [item["title"] for item in items]
    assert any(title.startswith("POST /create") for title in titles)
    assert any(title.startswith("200 · first byte after") for title in titles)
    results = [item for item in items if item["title"].startswith("result")]
    assert [item["title"] for item in results] == [
        "result · call 1 slow · ok",
        "result · call 3 image · ok",
        "result · call 4 submit · ok · reward 1 · finished",
    ]
    assert results[0]["detail"] == 'input {"seconds":0.4}\nslept'
    assert results[1]["detail"].endswith("[image/png image]")
    crashed = next(item for item in items if item["title"].startswith("call 2 raised"))
    assert crashed["error"] and CRASH_MESSAGE in crashed["detail"]


def test_the_timeline_rebuilds_the_agent_stream(recorded: Recorded, state: TraceState) -> None:
    """Reasoning, text and tool-call arguments are one item each, their deltas joined: what the model streamed."""
    trace = recorded.trace
    question = TRAIN[0]["question"]
    streamed = next(s for s in recorded.llm.streamed if s.question == question)
    items = state.timeline(episode_of(trace, question))["items"]
    kinds = [item["kind"] for item in items]
    assert {"turn", "reasoning", "text", "tool-input", "tool-call", "tool-output", "reward", "llm", "episode"} <= set(
        kinds
    )
    reasoning = next(item for item in items if item["kind"] == "reasoning")
    assert reasoning["detail"] == "".join(streamed.reasoning) and reasoning["count"] == len(streamed.reasoning) + 2
    assert next(item for item in items if item["kind"] == "text")["detail"] == "".join(streamed.text)
    arguments = next(item for item in items if item["kind"] == "tool-input")
    assert arguments["detail"] == f"submit({''.join(streamed.arguments)})"
    assert arguments["title"] == f"submit arguments streamed · {len(streamed.arguments)} deltas"
    assert next(item for item in items if item["kind"] == "reward")["title"] == "reward 1 for submit · finished"
    assert not any(item["error"] for item in items)


def test_errors_are_marked(recorded: Recorded, state: TraceState) -> None:
    """A provider's refusal and arguments that are not JSON are error items; the episode's error is on its row."""
    trace = recorded.trace
    refused = state.timeline(episode_of(trace, REFUSED))
    assert refused["errors"] >= 2 and refused["episode"]["error"]
    marked = [item for item in refused["items"] if item["error"]]
    assert any(item["kind"] == "llm" and item["title"].startswith("LLM 400") for item in marked)
    assert any(item["kind"] == "episode" for item in marked)
    malformed = state.timeline(episode_of(trace, MALFORMED))["items"]
    failed = [item for item in malformed if item["error"]]
    assert failed and failed[0]["kind"] == "error" and failed[0]["title"].startswith("submit failed")


def test_a_timeline_is_bounded(tmp_path: Path) -> None:
    """A session of thousands of items sends MAX_ITEMS of them and says how many more; long texts are cut.

    (A trace no evaluation ran lists its sessions.)"""
    path = tmp_path / "long.parquet"
    with ol.Recorder(path) as rec:
        record(rec, OpenEvent(session_id="s", environment="lab", split="train", task_index=0))
        record(rec, RequestEvent(session_id="s", method="POST", url="http://127.0.0.1:9/lab/call", call=1, attempt=1,
                                 body=b"x" * (3 * TEXT_CHARS)))  # fmt: skip
        for _ in range(2 * MAX_ITEMS):
            record(rec, PingEvent(session_id="s"))
    state = ol.load_trace(path).view().state
    assert state.label == "sessions"  # no evaluation ran: the list is of sessions
    reply = state.request({"open": "s"})
    assert reply is not None and len(reply["items"]) == MAX_ITEMS and reply["more"] == 2 * MAX_ITEMS + 2 - MAX_ITEMS
    body = reply["items"][1]["detail"]
    assert body.startswith("x" * 100) and body.endswith(f"({2 * TEXT_CHARS} more characters)")
    assert len(timeline([])) == 0


# -- 10,000 episodes --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> ol.Trace:
    """10,000 episodes of an evaluation (start, create, open, 1 to 3 steps, close, finish, episode), recorded."""
    path = tmp_path_factory.mktemp("big") / "big.parquet"
    stream = EventStream()
    with ol.Recorder(path) as recorder:
        stream.subscribe(recorder)
        for n in range(10_000):
            episode = Episode(n % 500, n // 500, [0.0, 0.5, 1.0][: 1 + n % 3], error="boom" if n % 97 == 0 else None)
            for event in events(episode):
                stream.publish(event)
    return ol.load_trace(path)


def test_ten_thousand_episodes_open_at_once(big_trace: ol.Trace) -> None:
    """The first snapshot of a 10,000-episode trace (list, page, summary, static HTML) is built in well under 2 s."""
    started, cpu = time.perf_counter(), time.process_time()
    view = big_trace.view()
    snapshot = json.dumps(view.state.snapshot())
    html = view.state.html()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(f"10,000 episodes ({len(big_trace)} rows): first snapshot and HTML in {elapsed:.3f} s ({cpu:.3f} s CPU)")
    assert cpu < 2.0  # CPU time: what the work costs, whatever else this shared machine runs meanwhile
    assert len(snapshot) < 20_000 and len(html) < 30_000  # one page, not 10,000 rows
    assert json.loads(snapshot)["page"]["total"] == 10_000
    cpu = time.process_time()
    last = view.state.request({"page": 399, "size": 25, "sort": "reward", "filter": "lab"})
    key = last["rows"][-1]["key"]  # type: ignore[index]
    opened = view.state.request({"open": key})
    assert time.process_time() - cpu < 1.0 and opened is not None and opened["items"]


# -- the frames a person reads ----------------------------------------------------------------------


def test_summary_reads_as_a_vertical_table(recorded: Recorded) -> None:
    """summary() of a Trace and of an EvalResult is one row of declared dtypes that shows itself vertically."""
    for summary in (recorded.trace.summary(), recorded.result.summary()):
        assert isinstance(summary, frames.Summary) and len(summary) == 1
        assert summary["episodes"].tolist() == [len(summary) and summary.iloc[0]["episodes"]]
        lines = repr(summary).splitlines()
        assert len(lines) > 8 and lines[0].split()[0] == "environments"  # no header: each name shown indexes
        assert any(line.split()[:2] == ["mean_reward", f"{summary.iloc[0]['mean_reward']:.4g}"] for line in lines)
        assert "<table" in summary._repr_html_() and "mean_reward</th>" in summary._repr_html_()
        assert type(summary[["episodes"]]) is pd.DataFrame  # what is derived is a plain frame
    assert "elapsed_s" in repr(recorded.result.summary())


def test_transcripts_join_the_agents_deltas(recorded: Recorded) -> None:
    """One row per turn: the reasoning, text and tool calls the model streamed, joined; the turn's reward."""
    trace = recorded.trace
    transcripts = trace.transcripts
    assert dict(transcripts.dtypes) == {c: pd.ArrowDtype(t) for c, t in frames.TRANSCRIPTS_COLUMNS.items()}
    question = TRAIN[0]["question"]
    streamed = next(s for s in recorded.llm.streamed if s.question == question)
    mine = transcripts[transcripts["session_id"] == episode_of(trace, question)]
    first = mine.iloc[0]
    assert first["reasoning"] == "".join(streamed.reasoning) and first["text"] == "".join(streamed.text)
    assert first["tool_calls"] == f"submit({''.join(streamed.arguments)})" and first["reward"] == 1.0
    assert (first["turn"], first["calls"], first["task_index"], first["rollout"]) == (1, 1, 0, 0)
    malformed = transcripts[transcripts["session_id"] == episode_of(trace, MALFORMED)]
    assert malformed["error"].notna().any()
    assert recorded.bare not in set(transcripts["session_id"])  # a bare client streams no agent events


def test_calls_have_readable_outputs(recorded: Recorded) -> None:
    """calls' output column holds the text the tool returned; an image is a placeholder; a raise is null."""
    calls = recorded.trace.calls
    bare = calls[calls["session_id"] == recorded.bare].set_index("tool")
    assert bare.loc["slow", "output"] == "slept" and bare.loc["image", "output"].endswith("[image/png image]")
    assert pd.isna(bare.loc["crash", "output"]) and json.loads(bare.loc["slow", "input"]) == {"seconds": SLOW_S}


# -- how a trace shows itself ------------------------------------------------------------------------


def test_a_trace_shows_a_summary_card(recorded: Recorded, monkeypatch: pytest.MonkeyPatch) -> None:
    """The HTML card: episodes, mean reward, errors, environments, duration, events, then the path; the first rows."""
    trace = recorded.trace
    monkeypatch.setenv("ORS_LAB_VIEWS", "widgets")
    with pytest.raises(RuntimeError, match="not a Jupyter kernel"):  # widgets asked for where none can be drawn
        trace._repr_mimebundle_()
    monkeypatch.setenv("ORS_LAB_VIEWS", "auto")
    page = trace._repr_html_()
    facts = ["episodes", "mean reward", "errors", "environments", "duration", "events", "path"]
    positions = [page.index(f"<th>{fact}</th>") for fact in facts]
    assert positions == sorted(positions) and str(recorded.path) in page
    assert page.count("<tr><td class=num>") == len(trace.episodes) and "<svg" in page
    bundle = trace._repr_mimebundle_()  # not a kernel: the card
    assert set(bundle) == {"text/html", "text/plain"} and bundle["text/plain"] == repr(trace)
    text = trace.view().state.text()
    assert text.splitlines()[0].startswith("Trace run.parquet: 4 episodes, mean reward ")


def test_the_reward_histogram() -> None:
    """Rewards in 10 bins over [0, 1] (widened for rewards outside it), as SVG and as text bars."""
    histogram = reward_histogram([0.0, 0.05, 1.0, 1.0, None, float("nan")])
    assert histogram.counts == (2, 0, 0, 0, 0, 0, 0, 0, 0, 2) and histogram.edges[0] == 0.0
    assert histogram.svg().count("<rect") == 10 and "[0.9, 1]" in repr(histogram)
    assert reward_histogram([-1.0, 2.0], bins=3).edges == (-1.0, 0.0, 1.0, 2.0)
    assert reward_histogram([]).svg() == ""


@pytest.fixture
def nb_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jupyter's state in a temporary directory, not $HOME."""
    for name in ("IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))


def test_in_a_kernel_a_trace_is_the_viewer(recorded: Recorded, nb_env: None) -> None:
    """In a real kernel, a cell ending with a trace outputs the viewer's widget with its text, then its static card."""
    import nbformat
    from nbclient import NotebookClient

    cells = [
        f"import ors_lab as ol\ntrace = ol.load_trace({str(recorded.path)!r})\ntrace",
        "view = trace.view()\nview",
        "trace.view().state.request({'open': trace.episodes['session_id'][0]})['type']",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    NotebookClient(nb, timeout=60, kernel_name="python3").execute()
    for cell in nb.cells[:2]:
        output, static = cell.outputs
        assert WIDGET_MIME in output["data"] and output["data"]["text/plain"].startswith("Trace"), output
        assert set(static["data"]) == {"text/html"} and "mean reward" in static["data"]["text/html"]
    assert nb.cells[2].outputs[0]["data"]["text/plain"] == "'timeline'"


# -- the front end, in a real browser -----------------------------------------------------------------

HARNESS = """
async (data) => {
  const url = URL.createObjectURL(new Blob([window.ESM], { type: "text/javascript" }));
  const widget = await import(url);
  const handlers = {};
  const model = {  // anywidget's model, as far as a renderer uses it; send() reaches TraceState.request
    get: (name) => (name === "data" ? data : name === "view" ? "trace" : ""),
    on: (name, cb) => { (handlers[name] = handlers[name] || []).push(cb); },
    off: (name, cb) => { handlers[name] = (handlers[name] || []).filter((h) => h !== cb); },
    send: (message) => window.kernel(JSON.stringify(message)).then((reply) => {
      if (reply) for (const h of handlers["msg:custom"] || []) h(JSON.parse(reply), []);
    }),
  };
  const started = performance.now();
  widget.default.render({ model, el: document.getElementById("out") });
  return performance.now() - started;
}
"""


def test_the_viewer_in_a_browser(recorded: Recorded, big_trace: ol.Trace, tmp_path: Path) -> None:
    """Chromium draws the first page, pages on, and opens a clicked episode's timeline with its errors in red."""
    from playwright.sync_api import sync_playwright

    from ors_lab.html import stylesheet
    from ors_lab.viewer.page import esm

    page_html = f"<!doctype html><meta charset=utf-8><style>{stylesheet()}</style><div id=out></div>"
    with sync_playwright() as playwright:
        home = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_CACHE_HOME": str(tmp_path / "cache")}  # not $HOME
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", env={**os.environ, **home})
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            states = {"small": recorded.trace.view(page_size=2).state, "big": big_trace.view().state}
            current = {"state": states["big"]}
            page.expose_function("kernel", lambda message: json.dumps(current["state"].request(json.loads(message))))
            page.set_content(page_html)
            page.evaluate("(source) => { window.ESM = source; }", esm())

            # 10,000 episodes: one page of rows is drawn, and the next page comes on a click
            render_ms = page.evaluate(HARNESS, current["state"].snapshot())
            print(f"10,000 episodes: first page drawn in {render_ms:.1f} ms")
            rows = page.locator("table.ol-tr-list tbody tr")
            assert rows.count() == 25 and render_ms < 1000
            assert page.locator(".ol-tr-where").inner_text() == "page 1 of 400 · 10000 episodes"
            page.click("text=next ›")
            page.wait_for_function("() => document.querySelector('.ol-tr-where').textContent.startsWith('page 2 ')")
            assert rows.first.locator("td").first.inner_text() == "26"

            # the recorded trace: open the refused episode; its error items are marked
            current["state"] = states["small"]
            page.set_content(page_html)
            page.evaluate("(source) => { window.ESM = source; }", esm())
            page.evaluate(HARNESS, current["state"].snapshot())
            page.click("text=errors only")
            page.wait_for_function("() => document.querySelectorAll('table.ol-tr-list tbody tr').length === 1")
            rows.first.click()
            page.wait_for_selector(".ol-tr-item")
            assert page.locator(".ol-tr-item.ol-tr-error").count() >= 2
            assert page.locator(".ol-tr-k-reasoning, .ol-tr-k-tool-input, .ol-tr-k-turn").count() >= 1
            page.screenshot(path=str(tmp_path / "trace-viewer.png"), full_page=True)
            assert errors == []
        finally:
            browser.close()
