"""``notebooks/05-marimo.py`` in marimo, in headless Chromium: live while its cells run, and in its HTML export.

One ``marimo run`` server (127.0.0.1, a token) and one browser for the module. The page is opened once and watched
while the notebook runs (``marimo_run``: DOM samples of the dashboard as it goes); ``marimo export html`` runs
once and its page is opened from disk (``marimo_export``). Both pages reach nothing beyond this machine: every
other request is refused and kept (``tests.notebook.marimo.offline_context``), and the tests assert there was
none. marimo's own front end, which an exported page loads from marimo's CDN, is answered from the installed
marimo package.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.notebook.lab import CHROMIUM, CHROMIUM_ARGS, REPO_ROOT, screenshot_dir
from tests.notebook.marimo import MarimoServer, Offline, export_html, figures, offline_context

NOTEBOOK = REPO_ROOT / "notebooks" / "05-marimo.py"
MARKER = "notebook ok"
PROGRESS = ".ol-run .ol-run-progress"
CARD = ".ol-card:has(table.ol-kv):has-text('success rate')"
"""The EvalResult's card (the dashboard says "success", the card "success rate")."""


@dataclass
class Sample:
    """The dashboard at one moment: episodes done of all, its status, and the text of its now-running panes."""

    done: int
    total: int
    status: str
    panes: str


@dataclass
class Watched:
    """A page watched while the notebook ran: its samples, what it tried to fetch off this machine, its errors."""

    page: Page
    offline: Offline
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    server_pid: int = 0

    def shot(self, name: str, selector: str | None = None) -> Path:
        path = screenshot_dir() / f"{name}.png"
        if selector is None:
            self.page.screenshot(path=str(path), full_page=True)
        else:
            self.page.locator(selector).first.screenshot(path=str(path))
        return path


def _sample(page: Page) -> Sample | None:
    progress = page.locator(PROGRESS)
    if not progress.count():
        return None
    text = progress.first.text_content() or ""
    done, _, rest = text.partition("/")
    total = rest.split(" ", 1)[0]
    if not (done.isdigit() and total.isdigit()):
        return None
    status = page.locator(".ol-run .ol-pill").first.text_content() or ""
    panes = page.locator(".ol-run .ol-run-panes").first.text_content() or ""
    return Sample(int(done), int(total), status, panes)


def _until(page: Page, check: object, timeout: float, what: str) -> Sample:
    """Sample the dashboard every 50 ms until ``check(sample)`` holds; that sample."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sample = _sample(page)
        if sample is not None and check(sample):  # type: ignore[operator]
            return sample
        page.wait_for_timeout(50)
    raise AssertionError(f"the dashboard never showed {what} within {timeout:g} s (last: {_sample(page)})")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Debian Chromium for the module."""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def marimo_run(browser: Browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Watched]:
    """``marimo run`` of the notebook, opened in the browser and watched until its last cell shows the marker."""
    started = time.monotonic()
    with MarimoServer(NOTEBOOK, tmp_path_factory.mktemp("marimo-run")) as server:
        with offline_context(browser, (server.base,)) as (context, offline):
            page = context.new_page()
            watched = Watched(page, offline, server_pid=server.process.pid if server.process else 0)
            page.on("pageerror", lambda error: watched.errors.append(f"page error: {error}"))
            page.on("console", lambda m: watched.errors.append(f"console: {m.text}") if m.type == "error" else None)
            watched.timings["server_start_s"] = server.start_s
            page.goto(server.url)
            first = _until(page, lambda s: 0 < s.done < s.total and s.panes, 120, "an episode done and one running")
            watched.samples.append(first)
            watched.shot("marimo-dashboard-mid-run", ".ol-run")
            watched.samples.append(_until(page, lambda s: s.done > first.done, 60, "more episodes done"))
            page.get_by_text(MARKER, exact=True).wait_for(timeout=180_000)
            watched.samples.append(_until(page, lambda s: s.done == s.total, 10, "every episode done"))
            watched.timings["run_s"] = time.monotonic() - started
            watched.shot("marimo-notebook")
            watched.shot("marimo-dashboard", ".ol-run")
            yield watched
            watched.timings["module_s"] = time.monotonic() - started
            print(f"marimo run: {watched.timings}")


def test_the_dashboard_advances_while_its_cell_runs(marimo_run: Watched) -> None:
    """Two DOM samples taken while the evaluating cell runs show more episodes done, the run still going."""
    first, second, final = marimo_run.samples
    assert 0 < first.done < second.done < first.total, (first, second)
    assert second.status == "running" and first.panes, (first, second)
    assert final.done == final.total == 30 and final.status == "finished", final


def test_the_dashboards_final_figures_are_the_eval_results(marimo_run: Watched) -> None:
    """At the end the dashboard shows the figures the EvalResult's card shows: mean ± stderr, pass@k, success,
    errors, episodes."""
    page = marimo_run.page
    dashboard = figures(page.locator(".ol-run").first.inner_text())
    card = figures(page.locator(CARD).first.inner_text())
    assert set(dashboard) == {"mean", "pass@1", "pass@3", "success", "errors", "episodes"}, dashboard
    assert dashboard == card, (dashboard, card)
    assert dashboard["episodes"] == "30" and 0 < float(dashboard["mean"].split(" ")[0]) < 1, dashboard


def test_a_grid_cell_opens_its_transcript(marimo_run: Watched) -> None:
    """A click on a cell of the dashboard's grid opens that episode's transcript."""
    page = marimo_run.page
    page.locator(".ol-run .ol-cell[data-key='0/0']").first.click()
    transcript = page.locator(".ol-run-transcript").first
    transcript.wait_for(state="visible", timeout=10_000)
    text = transcript.text_content() or ""
    assert "task 0" in text and "rollout 0" in text and "guess" in text, text
    marimo_run.shot("marimo-transcript", ".ol-run")


def test_the_trace_viewer_opens_an_episodes_timeline(marimo_run: Watched) -> None:
    """The run's trace shows as the viewer; a click on an episode has the kernel send its timeline."""
    page = marimo_run.page
    rows = page.locator(".ol-tr-list tbody tr")
    assert rows.count() == 25, rows.count()  # the first page of the 30 episodes
    rows.nth(1).click()
    timeline = page.locator(".ol-tr-timeline").first
    timeline.wait_for(timeout=20_000)
    text = timeline.text_content() or ""
    assert "POST /create" in text and "reward" in text, text[:1000]
    marimo_run.shot("marimo-trace", ".ol-tr-panel")


def test_the_session_and_the_comparison_are_drawn(marimo_run: Watched) -> None:
    """The session's view ends closed with its three calls; the comparison's view opens a task's two runs."""
    page = marimo_run.page
    assert page.locator(".ol-session .ol-session-state").first.text_content() == "closed"
    assert "3 steps" in (page.locator(".ol-session .ol-session-totals").first.text_content() or "")
    page.locator(".ol-cmp-bar").first.click()
    page.locator(".ol-cmp-side").nth(1).wait_for(timeout=20_000)
    sides = [page.locator(".ol-cmp-side").nth(n).inner_text() for n in range(2)]
    assert sides[0].startswith("openai-arithmetic.parquet") and sides[1].startswith("claude-arithmetic.parquet")
    marimo_run.shot("marimo-comparison", ".ol-cmp")


def test_marimo_binds_loopback_and_the_page_fetches_nothing_else(marimo_run: Watched) -> None:
    """The server listens on 127.0.0.1 only; the page asked for nothing off it and raised no error."""
    listening = [c.laddr for p in [psutil.Process(marimo_run.server_pid)] for c in p.net_connections("inet")
                 if c.status == psutil.CONN_LISTEN]  # fmt: skip
    assert listening and all(address.ip == "127.0.0.1" for address in listening), listening
    assert marimo_run.offline.requests_off == [], marimo_run.offline.requests_off
    assert marimo_run.errors == [], marimo_run.errors


@dataclass
class Exported:
    """The notebook's ``marimo export html`` page, opened from disk."""

    html: str
    page: Page
    offline: Offline
    errors: list[str]
    export_s: float


@pytest.fixture(scope="module")
def marimo_export(browser: Browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    """``marimo export html`` of the notebook, its page opened from disk with nothing beyond this machine."""
    path, seconds = export_html(NOTEBOOK, tmp_path_factory.mktemp("marimo-export"))
    with offline_context(browser) as (context, offline):
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
        page.goto(path.as_uri())
        page.locator(PROGRESS).first.wait_for(timeout=60_000)
        page.get_by_text(MARKER, exact=True).wait_for(timeout=30_000)
        page.screenshot(path=str(screenshot_dir() / "marimo-export.png"), full_page=True)
        print(f"marimo export html: {seconds:.1f} s, {path.stat().st_size:,} bytes")
        yield Exported(path.read_text(encoding="utf-8"), page, offline, errors, seconds)


def test_the_export_holds_the_final_figures(marimo_export: Exported) -> None:
    """The exported file holds the dashboard's last state and the card; drawn, their figures agree."""
    assert "30/30 episodes" in marimo_export.html and "success rate" in marimo_export.html
    page = marimo_export.page
    dashboard = figures(page.locator(".ol-run").first.inner_text())
    assert len(dashboard) == 6 and dashboard == figures(page.locator(CARD).first.inner_text()), dashboard
    assert (page.locator(".ol-run .ol-pill").first.text_content() or "") == "finished"


def test_the_exported_page_works_from_disk_with_nothing_fetched(marimo_export: Exported) -> None:
    """Opened from disk, the export draws every view (the session, the dashboard and its grid, the trace viewer,
    the comparison) with no request beyond marimo's own front end: the views' script, style and data are inside."""
    page = marimo_export.page
    assert page.locator(".ol-session").count() == 1 and page.locator(".ol-run .ol-cell").count() == 30
    assert page.locator(".ol-tr-list tbody tr").count() == 25 and page.locator(".ol-cmp-bar").count() > 0
    assert marimo_export.offline.requests_off == [], marimo_export.offline.requests_off
    assert marimo_export.offline.served_locally > 0  # marimo's own front end, answered from the installed package
    assert marimo_export.errors == [], marimo_export.errors
