"""Every notebook runs to its last line as a person runs it: Run All, every cell queued at once.

Run All from JupyterLab's Run menu in headless Chromium (and from Notebook 7's, for the notebooks with
live views) queues every execute_request at once, which shows the bugs that appear only when later cells
already wait in the kernel's queue. nbval (``make test``) runs them another way, cell by cell, comparing
the stored outputs. A notebook's own DOM checks go in ``CHECKS``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbval.plugin import get_sanitize_patterns

from tests.notebook.kernel import COUNTING_STATE
from tests.notebook.lab import MARKER, REPO_ROOT, JupyterLab, LabRun

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
SANITIZE = REPO_ROOT / "notebooks" / "nbval_sanitize.cfg"

PROGRESS = re.compile(r"^(\d+)/(\d+) episodes")
MEAN = re.compile(r"mean reward\s*([\d.]+ ± [\d.]+)")


def _check_explore(run: LabRun) -> None:
    """The live session view: drawn as a widget, its calls and rewards shown, and closed at the end."""
    run.finish()
    sessions = run.page.locator(".ors-lab .ol-session")
    assert sessions.count() >= 1, run.report()
    states = run.page.eval_on_selector_all(".ol-session-state", "es => es.map(e => e.textContent)")
    assert "closed" in states, states
    steps = run.page.locator(".ol-session-step").count()
    assert steps >= 1, run.report()
    run.screenshot(f"{run.name}-session", ".ors-lab .ol-session")


def _run_sample(run: LabRun) -> tuple[int, str]:
    """The first dashboard's episodes done, and the text of its now-running panes."""
    sample: list[Any] = run.page.evaluate(
        """() => { const d = document.querySelector('.ol-run-progress');
                   const p = document.querySelector('.ol-run-panes');
                   return [d ? d.textContent : '', p ? p.textContent : '']; }"""
    )
    found = PROGRESS.match(sample[0])
    return (int(found.group(1)) if found else -1), sample[1]


def _check_evaluate(run: LabRun) -> None:
    """While the evaluation runs, two samples show progress and the streaming panes advancing; at the end each
    dashboard's numbers are those of the EvalResult the next cell shows, and the Claude replay's transcript holds
    the model's thinking, text and call."""
    run.page.wait_for_function(
        """() => { const d = document.querySelector('.ol-run-progress');
                   const m = d && d.textContent.match(/^(\\d+)\\/(\\d+) episodes/);
                   return m && +m[1] > 0 && +m[1] < +m[2]; }""",
        timeout=120_000,
    )
    first_done, first_panes = _run_sample(run)
    run.screenshot(f"{run.name}-mid-run", ".ors-lab .ol-run")
    run.page.wait_for_function(
        f"""() => {{ const d = document.querySelector('.ol-run-progress');
                    const p = document.querySelector('.ol-run-panes');
                    const m = d && d.textContent.match(/^(\\d+)\\//);
                    return m && +m[1] > {first_done} && p && p.textContent !== {first_panes!r}; }}""",
        timeout=60_000,
    )
    second_done, second_panes = _run_sample(run)
    assert 0 < first_done < second_done, (first_done, second_done)
    assert first_panes and second_panes and first_panes != second_panes
    run.finish()
    dashboards = run.page.eval_on_selector_all(".ol-run", "es => es.map(e => e.textContent)")
    results = run.page.eval_on_selector_all(
        ".jp-OutputArea-output[data-mime-type='text/html'] > .ors-lab", "es => es.map(e => e.textContent)"
    )  # the EvalResults' cards (a dashboard's static twin is a .ol-twin around its .ors-lab)
    assert run.page.locator(".ol-twin").count() == 3 and not run.page.locator(".ol-twin:visible").count()
    assert len(dashboards) == 3, dashboards
    assert [d.count(n) for d, n in zip(dashboards, ["30/30 episodes", "20/20 episodes", "20/20 episodes"],
                                       strict=True)] == [1, 1, 1], dashboards  # fmt: skip
    for dashboard, shown in zip(dashboards, [r for r in results if "mean reward" in r][:3], strict=True):
        dash_mean, result_mean = MEAN.search(dashboard), MEAN.search(shown)
        assert dash_mean and result_mean and dash_mean.group(1) == result_mean.group(1), (dashboard, shown)
    run.page.locator(".ol-run .ol-cell[data-key='0/0']").first.click()
    run.page.wait_for_selector(".ol-run-transcript:visible", timeout=5_000)
    transcript = run.page.locator(".ol-run-transcript").first.text_content() or ""
    assert "task 0" in transcript and "guess" in transcript, transcript
    # the SDK-built Claude agent's replay (llm_client, llm_replay=): its thinking, text and call in the transcript
    run.page.locator(".ol-run").nth(2).locator(".ol-cell[data-key='0/0']").click()
    claude = run.page.locator(".ol-run").nth(2).locator(".ol-run-transcript")
    claude.wait_for(state="visible", timeout=5_000)
    said = claude.text_content() or ""
    assert "I know this one" in said and "I will submit 130." in said and "submit" in said, said
    run.screenshot(f"{run.name}-transcript", ".ors-lab .ol-run")


def _check_traces(run: LabRun) -> None:
    """The trace viewer lists the episodes; a click on one opens its timeline."""
    run.finish()
    rows = run.page.locator(".ol-tr-list tbody tr")
    assert rows.count() >= 10, run.report()
    rows.nth(1).click()
    run.page.wait_for_selector(".ol-tr-timeline", timeout=10_000)
    timeline = run.page.locator(".ol-tr-timeline").first.text_content() or ""
    assert "POST /create" in timeline and "session opened" in timeline and "reward" in timeline, timeline[:2000]
    run.page.locator(".ol-tr-panel").first.scroll_into_view_if_needed()
    run.screenshot(f"{run.name}-timeline", ".ors-lab .ol-tr-panel")


CHECKS: dict[str, Callable[[LabRun], None]] = {
    "01-explore": _check_explore,
    "02-evaluate": _check_evaluate,
    "03-traces": _check_traces,
}
"""A notebook's own checks in the browser, by notebook stem (``"02-evaluate"``).

A check is called with the run right after Run All, while the cells run: it may take DOM samples
as the run goes (``run.sample(selector)``, ``run.page``), then calls ``run.finish()`` (wait for the
marker line; idempotent) before it reads the final DOM. It asserts what it checks.
"""


def _stem(path: Path) -> str:
    return path.stem


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=_stem)
def test_run_all_in_jupyterlab(notebook: Path, jupyter_lab: JupyterLab) -> None:
    """Run All in JupyterLab: the marker printed, no error output, no cell left running, widgets drawn as views."""
    with jupyter_lab.run_all(notebook) as run:
        check = CHECKS.get(notebook.stem)
        if check is not None:
            check(run)
        run.finish()
    print(run.report())
    assert not run.problems, run.report()


@pytest.mark.parametrize("notebook", [nb for nb in NOTEBOOKS if nb.stem in CHECKS], ids=_stem)
def test_run_all_in_notebook7(notebook: Path, notebook7: JupyterLab) -> None:
    """The notebooks with live views, Run All in Notebook 7: the same checks as in JupyterLab."""
    with notebook7.run_all(notebook, name=f"{notebook.stem}-notebook7", app="notebook") as run:
        CHECKS[notebook.stem](run)
        run.finish()
    print(run.report())
    assert not run.problems, run.report()


def test_every_notebook_ends_with_the_marker() -> None:
    """Each notebook's last cell prints the marker the runs wait for, and its stored output holds it."""
    for path in NOTEBOOKS:
        last = [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"][-1]
        printed = "".join(output.get("text", "") for output in last.outputs)
        assert MARKER in last.source and MARKER in printed, path.name


def test_the_runs_report_a_failing_notebook(tmp_path: Path, jupyter_lab: JupyterLab) -> None:
    """A notebook that fails half-way fails its run: the stderr, the error, the cells that never ran, no marker."""
    cells = [
        "import ipywidgets\nipywidgets.VBox([ipywidgets.IntSlider(3)])",
        "import sys\nprint('a warning', file=sys.stderr)",
        "raise ValueError('broken on purpose')",
        f"print({MARKER!r})",
    ]
    notebook = tmp_path / "broken.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, notebook)

    with jupyter_lab.run_all(notebook, name="self-test-broken", timeout=60) as run:
        run.finish()
        sliders = run.page.locator(".jp-OutputArea-output .widget-slider").count()
    report = run.report()
    assert sliders == 1, report  # the widget drawn as a view
    assert not any("widget" in p for p in run.problems), report
    assert any("a warning" in p for p in run.problems), report
    assert any("ValueError" in p and "broken on purpose" in p for p in run.problems), report
    assert any("never ran" in p and "[3]" in p for p in run.problems), report
    assert any(repr(MARKER) in p for p in run.problems), report
    assert any(path.name == "self-test-broken-FAILED.png" for path in run.screenshots), report


def test_the_sanitize_file_reads_as_nbval_reads_it() -> None:
    """Every regex: line of the sanitize file pairs with a replace: line, compiles, and masks what varies."""
    text = SANITIZE.read_text()
    patterns = get_sanitize_patterns(text)
    assert len(patterns) == text.count("\nregex: ") and patterns
    samples = {
        "sid='55c5b4af86fd4bf380e844c68e7b588d'": "sid='HEXID'",
        "task 0f8c2a8e-59c4-4c1e-9d7e-1b2a3c4d5e6f": "task UUID",
        "at 2026-12-01 20:36:31.765": "at YYYY-MM-DD HH:MM:SS",
        "http://127.0.0.1:38123/": "http://127.0.0.1:PORT/",
        "wrote /tmp/tmpab_12x/test_x.py": "wrote /tmp/TMPDIR/test_x.py",
        "2 passed in 0.52s": "2 passed in N.NN s",
        "took 12.5 ms": "took N.NN ms",
        "30/30 episodes  41.3/s  1,200 tok/s": "30/30 episodes  N/s  N tok/s",
        "ETA 0:12, mean": "ETA N, mean",
        "reward 1.000 after 6 steps": "reward 1.000 after 6 steps",
    }
    for raw, want in samples.items():
        got = raw
        for regex, replace in patterns:
            got = re.sub(regex, replace, got)
        assert got == want, (raw, got)


LIVE = f"""
{COUNTING_STATE}
stream = EventStream()
view = LiveView(Count())
view.attach(stream)
view.show()
pump(stream, events=20_000, seconds=3.0)
view.close()
"""


def test_a_live_view_advances_in_the_browser_while_its_cell_runs(tmp_path: Path, jupyter_lab: JupyterLab) -> None:
    """Two DOM samples taken while the cell runs show the view advancing; the end shows the final state."""
    notebook = tmp_path / "live.ipynb"
    cells = [LIVE, f"print({MARKER!r})"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, notebook)
    counted = "e => Number(e.textContent.split(' ')[0])"
    started = f"() => {{ const e = document.querySelector('.ors-lab pre'); return e && ({counted})(e) > 0; }}"
    with jupyter_lab.run_all(notebook, name="self-test-live", timeout=60) as run:
        run.page.wait_for_function(started, timeout=30_000)
        first = run.sample(".ors-lab pre", counted)
        advanced = f"() => ({counted})(document.querySelector('.ors-lab pre')) > {first}"
        run.page.wait_for_function(advanced, timeout=2_500)  # the next update (10 a second, slower under load)
        second = run.sample(".ors-lab pre", counted)
        still_running = run.running()
        run.screenshot("self-test-live-mid", ".ors-lab")
        run.finish()
        final = run.sample(".ors-lab pre", "e => e.textContent")
    assert not run.problems, run.report()
    assert still_running and 0 < first < second < 20_000, (first, second)
    assert final == "20000 events"
    with pytest.raises(RuntimeError, match="no running event loop"):  # Playwright's loop went with the run
        asyncio.get_running_loop()
