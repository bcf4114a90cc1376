"""The committed notebooks show ors_lab's views with no kernel: nbconvert's HTML, in Chromium with JavaScript off.

Each committed notebook is converted as it is (its outputs and saved widget state, as ``jupyter nbconvert`` and
nbviewer draw it) and opened from disk with JavaScript disabled, as GitHub strips it, and every request refused.
nbconvert draws a widget's output as the widget's placeholder alone once the notebook holds its state; what shows
is each view's static twin beside it (``ors_lab.notebook.hosts``): the run's card, grid and per-task table, the
trace's card and first episodes, the session's card. Where the widget runs, its style sheet hides the twins: the
JupyterLab runs check that (``tests.notebook.lab``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import Page, Route, sync_playwright

from tests.notebook.lab import CHROMIUM, CHROMIUM_ARGS, REPO_ROOT, WIDGET_MIME, screenshot_dir
from tests.notebook.marimo import figures

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
TWIN = ".ol-twin"


@dataclass
class Static:
    """The notebooks' nbconvert pages, each opened with JavaScript off; what they asked for is refused and kept."""

    pages: dict[str, Page]
    requested: list[str] = field(default_factory=list)


def widget_outputs(notebook: Path) -> int:
    """How many widget outputs the committed notebook holds."""
    nb = nbformat.read(notebook, as_version=4)
    return sum(WIDGET_MIME in output.get("data", {}) for cell in nb.cells if cell.cell_type == "code"
               for output in cell.get("outputs", []))  # fmt: skip


@pytest.fixture(scope="module")
def static_pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Static]:
    """Every committed notebook through ``jupyter nbconvert --to html``, opened in Chromium with JavaScript off."""
    out = tmp_path_factory.mktemp("nbconvert")
    done = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "html", "--output-dir", str(out),
                           *map(str, NOTEBOOKS)], capture_output=True, text=True, timeout=180, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    static = Static({})

    def refuse(route: Route) -> None:
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            static.requested.append(route.request.url)
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(java_script_enabled=False, viewport={"width": 1280, "height": 1000})
            context.route("**/*", refuse)
            for notebook in NOTEBOOKS:
                page = context.new_page()
                page.goto((out / f"{notebook.stem}.html").as_uri())
                page.screenshot(path=str(screenshot_dir() / f"static-{notebook.stem}.png"), full_page=True)
                static.pages[notebook.stem] = page
            yield static
        finally:
            browser.close()


def test_every_widget_output_has_its_twin_shown(static_pages: Static) -> None:
    """Each widget output of each committed notebook has a visible static twin beside it, and nothing was fetched."""
    for notebook in NOTEBOOKS:
        page = static_pages.pages[notebook.stem]
        assert page.locator(f"{TWIN}:visible").count() == widget_outputs(notebook), notebook.name
        assert page.evaluate("() => document.scripts.length") > 0  # the page has scripts: they did not run
    assert sum(map(widget_outputs, NOTEBOOKS)) >= 5
    assert static_pages.requested == [], static_pages.requested


def test_the_runs_show_their_card_grid_and_tasks(static_pages: Static) -> None:
    """02-evaluate without a kernel or JavaScript: each run's twin shows its card, its grid and its per-task table,
    with the figures of the EvalResult the next cell shows."""
    page = static_pages.pages["02-evaluate"]
    twins = page.locator(TWIN)
    results = page.locator(f".jp-OutputArea-output:not(:has({TWIN})) .ol-card:has-text('success rate')")
    assert twins.count() == 3 and results.count() == 3
    for n, (episodes, tasks) in enumerate([(30, 10), (20, 10), (20, 10)]):
        twin = twins.nth(n)
        shown = figures(twin.inner_text())
        assert shown["episodes"] == str(episodes) and shown == figures(results.nth(n).inner_text()), shown
        assert twin.locator(".ol-cell:visible").count() == episodes  # the grid, a cell per episode
        assert twin.locator("table.ol-table:visible tbody tr").count() == tasks  # the per-task table


def test_the_trace_and_the_session_show_their_cards(static_pages: Static) -> None:
    """03-traces shows the trace's card and its first episodes; 01-explore the session's card, closed."""
    trace = static_pages.pages["03-traces"].locator(TWIN).first
    assert "episodes40" in trace.inner_text().replace(" ", "").replace("\n", "").replace("\t", "")
    assert trace.locator("table.ol-table tbody tr").count() >= 10
    sessions = static_pages.pages["01-explore"].locator(TWIN)
    assert sessions.count() >= 1 and "closed" in sessions.first.inner_text()
