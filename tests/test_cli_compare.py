"""``ors-lab compare BASE CAND... [-o cmp.html] [--fail-if-worse]``: the text table, the page, the CI gate.

The page is the one the command writes from two committed traces (``recordings/demo.parquet``: the demo
agent; ``recordings/openai-arithmetic.parquet``: the OpenAI-compatible agent on the same arithmetic tasks),
opened from ``file://`` in Debian's headless Chromium with every other request aborted
(``tests/analysis/test_report.py``'s ``opened``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ors_lab as ol
from tests.analysis.synthetic import Episode, record
from tests.analysis.test_report import opened
from tests.conftest import REPO_ROOT
from tests.notebook.lab import screenshot_dir

CLI = [sys.executable, "-m", "ors_lab.cli"]
DEMO = REPO_ROOT / "recordings" / "demo.parquet"
OPENAI = REPO_ROOT / "recordings" / "openai-arithmetic.parquet"

pytestmark = pytest.mark.timeout(180)


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "compare", *map(str, args)], capture_output=True, text=True, timeout=120, check=False)


def runs(tmp_path: Path, base: float, cand: float, tasks: int = 12) -> tuple[Path, Path]:
    """Two recorded evaluations of ``tasks`` tasks, 2 rollouts each: the rewards ``base`` and ``cand`` on even tasks,
    their halves on odd ones (so the deltas vary)."""
    paths = []
    for name, reward in (("base", base), ("cand", cand)):
        episodes = [Episode(task, rollout, [reward if task % 2 else reward / 2]) for task in range(tasks)
                    for rollout in range(2)]  # fmt: skip
        record(tmp_path / f"{name}.parquet", episodes)
        paths.append(tmp_path / f"{name}.parquet")
    return paths[0], paths[1]


def test_compare_prints_the_table_of_every_metric() -> None:
    """The table: the baseline, each candidate's line per metric with the figures of ol.compare, how p was computed,
    the unpaired tasks and the note of few tasks."""
    done = cli(DEMO, OPENAI)
    assert done.returncode == 0, done.stderr
    summary = ol.compare(DEMO, OPENAI).summary()
    lines = done.stdout.splitlines()
    assert lines[0] == "baseline: demo.parquet" and "candidate: openai-arithmetic.parquet" in lines
    reward = next(line.split() for line in lines if line.strip().startswith("reward"))
    interval = f"[{summary['ci_low']:+.3f}, {summary['ci_high']:+.3f}]"
    assert reward == ["reward", "10", "1.000", "0.800", "-0.200", f"{summary['stderr']:.3f}", *interval.split(), "0.5",
                      "0/2/8"]  # fmt: skip
    assert "  p: exact: all 2^10 sign vectors" in lines
    assert any(line.startswith("  unpaired: 10 tasks (10 only in the baseline") for line in lines)


def test_fail_if_worse_is_a_regression_gate(tmp_path: Path) -> None:
    """--fail-if-worse: exit 1 when the interval of the mean reward delta lies below 0, naming the candidate; 0 when
    it lies above (docs/comparing.md's pytest example gates the committed pair, whose interval holds 0)."""
    base, worse = runs(tmp_path, 1.0, 0.5)
    assert ol.compare(base, worse).summary()["ci_high"] < 0
    gated = cli(base, worse, "--fail-if-worse")
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert gated.stdout.endswith("worse than the baseline (the 95% interval of the mean reward delta lies below 0): "
                                 "cand.parquet\n")  # fmt: skip
    assert cli(worse, base, "--fail-if-worse").returncode == 0  # better
    missing = cli(base, tmp_path / "none.parquet")
    assert missing.returncode == 1 and missing.stderr.startswith("ors-lab compare: no trace at ")


@pytest.mark.browser  # through test_report's `opened`, which conftest's scan of this module does not see
def test_the_page_opens_from_disk_offline(tmp_path: Path) -> None:
    """`-o cmp.html` on two committed traces: a page that opens from file:// with every other request aborted, draws
    summary()'s figures, and on a click on a lost task shows both runs' transcripts, the first difference marked."""
    out = tmp_path / "pages" / "cmp.html"
    done = cli(DEMO, OPENAI, "-o", out)
    assert done.returncode == 0, done.stderr
    size = out.stat().st_size / 1024
    assert done.stdout.splitlines()[-1] == f"wrote {out} ({size:.0f} KB): 10 paired tasks, every one side by side"
    summary = ol.compare(DEMO, OPENAI).summary()
    with opened(out, tmp_path) as it:
        page = it.page
        shown = {row.get_attribute("data-figure"): json.loads(row.locator("td").get_attribute("data-value") or "null")
                 for row in page.locator(".ol-cmp-figures tr").all()}  # fmt: skip
        assert shown["mean_delta"] == summary["mean_delta"] and shown["p_value"] == summary["p_value"]
        assert shown["ci_low"] == [summary["ci_low"], summary["ci_high"]]
        assert shown["wins"] == [summary["wins"], summary["losses"], summary["ties"]]
        assert page.locator(".ol-cmp-bar").count() == page.locator(".ol-cmp-cell").count() == 10
        page.locator(".ol-cmp-cell[data-key='arithmetic/test/3']").click()
        page.locator(".ol-cmp-diff").first.wait_for()
        assert page.locator(".ol-cmp-banner").inner_text() == "first difference: step 1 (tool): calculator · submit"
        sides = page.locator(".ol-cmp-side")
        assert sides.count() == 2 and page.locator(".ol-cmp-diff").count() == 2
        assert "calculator" in sides.nth(0).locator(".ol-cmp-diff").inner_text()
        assert "submit({\"answer\": \"29\"})" in sides.nth(1).locator(".ol-cmp-diff").inner_text()
        page.screenshot(path=str(screenshot_dir() / "compare-page.png"), full_page=True)
        page.locator(".ol-cmp-cell[data-key='arithmetic/test/5']").click()  # the model answered in text: no step
        page.wait_for_function("() => document.querySelector('.ol-cmp-detail .ol-title').textContent.endsWith('/5')")
        assert page.locator(".ol-cmp-banner").inner_text() == "first difference: step 1 (steps): 2 steps · 0 steps"
