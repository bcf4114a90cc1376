"""The comparison view (``ors_lab.viewer.compare``): its state without a browser, its first difference, the run
dashboard against a baseline, and the view in a real JupyterLab in headless Chromium: shown, a task clicked,
the two runs' transcripts side by side with the first difference marked, the figures equal to ``summary()``.

The runs are the committed ``recordings/demo.parquet`` (the demo agent) and
``recordings/openai-arithmetic.parquet`` (the OpenAI-compatible agent on the same arithmetic tasks).
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import re
from collections import Counter
from pathlib import Path

import nbformat
import pytest

import ors_lab as ol
from ors_lab.analysis.paired import paired
from ors_lab.events import BaselineEvent, EpisodeEvent
from ors_lab.notebook.view import WIDGET_MIME
from ors_lab.viewer.compare import TASKS, CompareState, first_difference
from ors_lab.viewer.compare_page import comparison_html, write_comparison
from ors_lab.viewer.run import RunState
from ors_lab.viewer.run_baseline import LiveBaseline, delta_code
from tests.conftest import REPO_ROOT
from tests.notebook.lab import MARKER, JupyterLab

DEMO = REPO_ROOT / "recordings" / "demo.parquet"
OPENAI = REPO_ROOT / "recordings" / "openai-arithmetic.parquet"
FIGURES = ["tasks", "mean_delta", "stderr", "ci_low", "ci_high", "p_value", "wins", "losses", "ties"]


@pytest.fixture(scope="module")
def comparison() -> ol.Comparison:
    return ol.compare(DEMO, OPENAI)


# -- the state, without a browser ----------------------------------------------------------------------------


def test_the_snapshot_holds_the_figures_the_tasks_and_the_unpaired(comparison: ol.Comparison) -> None:
    """Each metric's figures are summary()'s; one row per paired task with its delta; the unpaired counted; JSON."""
    snapshot = json.loads(json.dumps(CompareState(comparison).snapshot()))
    for metric in comparison.metrics:
        summary = comparison.summary(metric)
        assert [snapshot["figures"][0][metric][name] for name in FIGURES] == list(summary[FIGURES])
    tasks = snapshot["tasks"][0]
    at = tasks["columns"].index("delta")
    deltas = {row[0]: row[at] for row in tasks["rows"]}
    assert deltas == {f"arithmetic/test/{t}": (-1.0 if t in (3, 5) else 0.0) for t in range(10)}
    assert snapshot["unpaired"][0]["count"] == 10 and snapshot["unpaired"][0]["baseline"] == 10
    assert tasks["more"] == 0 and TASKS >= 1_000


def test_a_task_side_by_side_marks_the_first_difference(comparison: ol.Comparison) -> None:
    """The two runs' episodes of a task, rollout by rollout, their transcripts (the agent's turns, reasoning, text and
    steps, joined by ors_lab.transcript), and the first step that differs; a key of no task answers no episode."""
    state = CompareState(comparison)
    reply = state.request({"task": "arithmetic/test/3", "candidate": 0})
    assert reply is not None and reply["names"] == ["demo.parquet", "openai-arithmetic.parquet"]
    base, cand = reply["runs"]
    assert [e["rollout"] for e in base["episodes"]] == [0, 1] and [e["reward"] for e in cand["episodes"]] == [0.0, 0.0]
    assert [item["kind"] for item in base["episodes"][0]["items"]] == ["turn", "reasoning", "step", "turn", "reasoning",
                                                                        "text", "step"]  # fmt: skip
    assert reply["differences"][0] == {"rollouts": [0, 0], "step": 1, "what": "tool", "baseline": "calculator",
                                       "candidate": "submit"}  # fmt: skip
    transcripts = ol.load_trace(OPENAI).transcripts
    said = transcripts[transcripts["session_id"] == cand["episodes"][0]["session_id"]].iloc[0]
    texts = [item["text"] for item in cand["episodes"][0]["items"]]
    assert said["reasoning"] in texts and said["text"] in texts  # the same join as trace.transcripts
    assert state.request({"task": "lab/train/99", "candidate": 0})["runs"][0]["episodes"] == []  # type: ignore[index]
    assert state.request({"task": "arithmetic/test/3", "candidate": 5}) is None and state.request({}) is None


def test_first_difference() -> None:
    """The first step whose tool, input or reward differs; a missing step; none."""
    a = [["calc", '{"x":1}', None], ["submit", '{"a":"2"}', 1.0]]
    assert first_difference(a, a) == {"step": None, "what": None}
    assert first_difference(a, [a[0], ["submit", '{"a":"3"}', 1.0]])["step"] == 2
    assert first_difference(a, [a[0], ["submit", '{"a":"2"}', 0.0]])["what"] == "reward"
    assert first_difference(a, [["search", '{"x":1}', None]])["what"] == "tool"
    assert first_difference(a, a[:1]) == {"step": 2, "what": "steps", "baseline": "2 steps", "candidate": "1 steps"}


def test_the_text_and_the_static_summary(comparison: ol.Comparison) -> None:
    """The text table has a line per metric; the static HTML a card with each metric's figures and a grid by delta."""
    state = CompareState(comparison)
    assert [line.split()[0] for line in state.text().splitlines() if line.startswith("  ") and line.split()[0] in
            comparison.metrics] == list(comparison.metrics)  # fmt: skip
    html = state.html()
    assert "openai-arithmetic.parquet vs demo.parquet" in html and "-0.200 ± 0.133" in html
    assert html.count('class="ol-cell"') == 10
    bundle = comparison._repr_mimebundle_()  # not a kernel: the static summary
    assert set(bundle) == {"text/html", "text/plain"} and bundle["text/plain"] == repr(comparison)


def test_the_page_holds_the_tasks_of_the_largest_deltas(comparison: ol.Comparison, tmp_path: Path) -> None:
    """A page holding 2 tasks side by side holds the two lost ones (the largest deltas) and says so of the others."""
    page, tasks, held = comparison_html(comparison, detailed=2)
    blobs = dict(re.findall(r'id="(ors-lab-compare[a-z-]*)">([^<]+)</script>', page))
    head, details = (json.loads(gzip.decompress(base64.b64decode(blobs[name]))) for name in
                     ("ors-lab-compare", "ors-lab-compare-detail"))  # fmt: skip
    assert (tasks, held) == (10, 2) and sorted(details) == ["arithmetic/test/3", "arithmetic/test/5"]
    assert "side by side of 2 tasks per candidate" in head["note"]
    written = write_comparison(comparison, tmp_path / "cmp.html", detailed=2)
    assert written.describe().endswith("10 paired tasks, 2 of them side by side")


# -- the dashboard against a baseline ------------------------------------------------------------------------


def outcome(task: int, rollout: int, reward: float) -> EpisodeEvent:
    return EpisodeEvent(session_id=f"s{task}-{rollout}", rollout=rollout, environment="lab", split="test",
                        task_index=task, reward=reward, total_reward=reward, final_reward=reward, finished=True,
                        success=reward >= 1.0, finish_reason="stop", steps=1, started=0.0, duration_s=0.1)  # fmt: skip


def test_the_dashboard_compares_a_task_once_its_rollouts_ended() -> None:
    """Outcomes resumed before the baseline are compared when it comes; a task counts once both rollouts ended; a
    second outcome of a rollout replaces the first; running figures are paired()'s but for p; ended, all of them."""
    keys = [(task, rollout) for task in range(4) for rollout in range(2)]
    state = RunState("lab", "test", keys, resumed=[outcome(0, 0, 1.0).record(), outcome(0, 1, 0.0).record()])
    scores = [[0, [1.0, 1.0], 2], [1, [0.0, 0.0], 0], [2, [0.5, 0.5], 0], [9, [1.0], 1]]
    state.apply(BaselineEvent(name="b", environment="lab", split="test", tasks=scores))
    assert state.baseline is not None and state.baseline.deltas == {0: -0.5}
    assert state.baseline.unpaired() == (1, 1)  # task 3 not in the baseline, task 9 not planned
    state.apply(outcome(1, 0, 1.0))
    assert state.baseline.tasks == 1  # task 1 has one rollout of two
    for event in (outcome(1, 1, 0.0), outcome(2, 0, 1.0), outcome(2, 1, 1.0), outcome(2, 1, 0.0)):
        state.apply(event)
    deltas = [-0.5, 0.5, 0.0]
    running = state.snapshot()["baseline"]
    expected = paired(deltas)
    assert running["mean_delta"] == pytest.approx(expected.mean_delta) and running["p_value"] is None
    assert running["stderr"] == pytest.approx(expected.stderr)
    assert (running["wins"], running["losses"], running["ties"]) == (1, 1, 1)
    state.end()
    ended = state.snapshot()["baseline"]
    assert [ended[name] for name in FIGURES] == [getattr(expected, name) for name in FIGURES]
    assert state.snapshot()["grid"]["deltas"][:6] == "kaukpf"  # 1-1, 0-1; 1-0, 0-0; 1-0.5, then 0-0.5 replacing 1-0.5


def test_another_runs_baseline_is_ignored_and_codes_clip() -> None:
    """A baseline of another environment or split leaves the dashboard as it is; delta codes clip to [-1, 1]."""
    state = RunState("lab", "test", [(0, 0)])
    assert not state.apply(BaselineEvent(name="b", environment="lab", split="train", tasks=[[0, [1.0], 1]]))
    assert state.baseline is None and state.snapshot()["baseline"] is None
    assert (delta_code(-3.0), delta_code(0.0), delta_code(0.3), delta_code(math.nan)) == ("a", "k", "n", " ")
    baseline = LiveBaseline(BaselineEvent(name="b", environment="lab", split="test", tasks=[]), Counter([0]))
    assert baseline.text(ended=False) == "vs b: no task compared yet" and not baseline.task_done(0, [1.0])


# -- in JupyterLab, in Chromium ------------------------------------------------------------------------------

SHOW = f"""
import json
import ors_lab as ol
comparison = ol.compare({str(DEMO)!r}, {str(OPENAI)!r})
comparison
"""
FIGURES_CELL = f"""
print(json.dumps({{name: comparison.summary()[name] for name in {FIGURES!r}}}))
print({MARKER!r})
"""


def test_the_view_in_jupyterlab(tmp_path: Path, jupyter_lab: JupyterLab) -> None:
    """Run All: the view is a widget whose figures are summary()'s; a click on a task shows both runs' transcripts
    side by side, the first difference marked in both; the kernel answered the click."""
    notebook = tmp_path / "compare.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SHOW), nbformat.v4.new_code_cell(FIGURES_CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, notebook)
    with jupyter_lab.run_all(notebook, name="compare-view", timeout=120) as run:
        run.finish()
        page = run.page
        page.locator(".ors-lab .ol-cmp-figures").wait_for()
        shown = {row.get_attribute("data-figure"): json.loads(row.locator("td").get_attribute("data-value") or "null")
                 for row in page.locator(".ol-cmp-figures tr").all()}  # fmt: skip
        outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
        printed = next(line for line in outputs if '"mean_delta"' in line)
        figures = json.loads(printed.splitlines()[0])
        assert shown["mean_delta"] == figures["mean_delta"] and shown["p_value"] == figures["p_value"]
        assert shown["ci_low"] == [figures["ci_low"], figures["ci_high"]] and shown["tasks"] == figures["tasks"]
        assert shown["wins"] == [figures["wins"], figures["losses"], figures["ties"]]
        page.locator(".ol-cmp-bar[data-key='arithmetic/test/3']").click()
        page.locator(".ol-cmp-diff").first.wait_for(timeout=20_000)
        assert page.locator(".ol-cmp-side").count() == 2 and page.locator(".ol-cmp-diff").count() == 2
        assert page.locator(".ol-cmp-banner").inner_text() == "first difference: step 1 (tool): calculator · submit"
        left, right = (page.locator(".ol-cmp-side").nth(n).inner_text() for n in range(2))
        assert left.startswith("demo.parquet") and "The calculator says 28." in left
        assert right.startswith("openai-arithmetic.parquet") and "I know this one: the answer is 29." in right
        run.screenshot("compare-view", ".ors-lab .ol-cmp")
        run.screenshot("compare-view-detail", ".ors-lab .ol-cmp-detail")
    assert not run.problems, run.report()
    assert WIDGET_MIME
