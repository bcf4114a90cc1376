"""Watching a run from elsewhere: ``ol.watch(url)`` in a real kernel, ``ors-lab watch URL`` in headless Chromium.

The run is real: the demo agent on the demo environments, evaluated with a feed by this process
(``ol.watch``) or by ``ors-lab eval --feed 0`` in a process of its own (``ors-lab watch``). The
browser is Debian's Chromium (Playwright, ``tests/notebook/lab.py``'s flags); screenshots go to
``$ORS_LAB_SCREENSHOTS`` (``build/screenshots``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

import ors_lab as ol
from ors_lab.demo.agent import DemoAgent
from ors_lab.demo.launch import ServerProcess
from tests.conftest import REPO_ROOT
from tests.feed.feeds import wait_for_readers
from tests.hostile.test_cli_errors import assert_one_line
from tests.hostile.test_cli_errors import run as run_cli
from tests.notebook.kernel import WIDGET_MIME, Kernel
from tests.notebook.lab import CHROMIUM, CHROMIUM_ARGS, screenshot_dir
from tests.notebook.test_run_view import figures

pytestmark = pytest.mark.timeout(180)

CLI = [sys.executable, "-m", "ors_lab.cli"]

WATCH_CELL = """
import json
import ors_lab as ol

watching = ol.watch({url!r})
watching.wait(90)
snap = watching.state.run.snapshot()
print(json.dumps({{name: snap[name] for name in ("done", "mean", "stderr", "pass", "errors", "tokens", "status")}}))
"""


def test_ol_watch_shows_the_dashboard_of_a_run_elsewhere_in_a_kernel(demo_server: ServerProcess) -> None:
    """In a kernel, `ol.watch(url)` displays the dashboard widget, updates it while the run goes on, and ends with
    the run's final figures (the EvalResult's) and its static summary."""
    with Kernel() as kernel, ol.Client(demo_server.url) as client, ol.Feed(0) as feed:
        cell = kernel.start(WATCH_CELL.format(url=feed.url))
        wait_for_readers(feed, 1, timeout=60)
        result = ol.evaluate(client.environment("guessing"), DemoAgent(pace=0.004), split="test", rollouts=3,
                             concurrency=4, feed=feed, progress=False)  # fmt: skip
        feed.close()
        kernel.finish(cell, timeout=90)
    assert cell.problems() == []
    [model] = cell.widget_models()
    updates = [u.state["data"] for u in cell.updates(model) if "data" in u.state and u.during]
    done = [data["done"] for data in updates if data]
    assert done == sorted(done) and any(0 < n < 30 for n in done) and done[-1] == 30  # seen part-way, to the end
    last = updates[-1]
    assert last["status"] == "finished" and last["grid"]["cells"] == "U" * 30
    printed = json.loads(cell.stdout())
    assert {name: printed[name] for name in ("done", "mean", "stderr", "pass", "errors", "tokens")} == figures(result)
    assert printed["status"] == "finished"
    [final] = [data for data in cell.outputs() if WIDGET_MIME in data][-1:]
    [static] = [data for data in cell.outputs() if "text/html" in data][-1:]  # the widget's twin
    assert final["text/plain"].startswith("eval guessing/test: 30/30 episodes")
    assert f"{printed['mean']:.3f} ± " in static["text/html"]


def lines(stream: IO[str], found: list[str]) -> threading.Thread:
    """Read ``stream``'s lines into ``found`` from a thread (a child's output, while it runs)."""

    def read() -> None:
        for line in stream:
            found.append(line.rstrip("\n"))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def said(found: list[str], pattern: str, timeout: float = 60.0) -> re.Match[str]:
    """The first line of ``found`` matching ``pattern``, waiting for it."""
    deadline = time.monotonic() + timeout
    while True:
        for line in list(found):
            match = re.search(pattern, line)
            if match:
                return match
        assert time.monotonic() < deadline, f"no line matches {pattern!r}: {found}"
        time.sleep(0.05)


def done_of(page: Any) -> int:
    """The episodes done, as the dashboard's progress line shows them (``N/M episodes · ...``)."""
    text = page.locator(".ol-run-progress").inner_text()
    return int(text.split("/")[0])


def test_ors_lab_watch_shows_the_live_dashboard_in_a_browser(demo_server: ServerProcess, tmp_path: Path) -> None:
    """`ors-lab eval --feed 0` says its feed; `ors-lab watch FEED` serves a page whose dashboard advances while the
    run goes on and ends with its figures, drawn by the notebook's JavaScript, without a console error."""
    from playwright.sync_api import sync_playwright

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}  # fmt: skip
    run: subprocess.Popen[str] | None = None
    watch: subprocess.Popen[str] | None = None
    problems: list[str] = []
    readers: list[threading.Thread] = []
    run_err: list[str] = []
    watch_out: list[str] = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, env=env)  # first: slow
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)  # fmt: skip
            run = subprocess.Popen([*CLI, "eval", demo_server.url, "--env", "guessing", "--split", "test", "--agent",
                                    "tests.feed.agents:SLOW", "--rollouts", "3", "--concurrency", "2", "--out",
                                    str(tmp_path / "run.parquet"), "--feed", "0"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)  # fmt: skip
            readers.append(lines(run.stderr, run_err))  # type: ignore[arg-type]
            feed = said(run_err, r"eval guessing/test: live feed at (http://127\.0\.0\.1:\d+/events)$").group(1)
            watch = subprocess.Popen([*CLI, "watch", feed], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env)  # fmt: skip
            readers.append(lines(watch.stdout, watch_out))  # type: ignore[arg-type]
            page_url = said(watch_out, rf"^watching {re.escape(feed)} at (http://127\.0\.0\.1:\d+/)$").group(1)
            page.goto(page_url)
            page.wait_for_function("() => document.documentElement.dataset.orsLab === 'ready'", timeout=30_000)
            page.wait_for_function("() => document.querySelector('.ol-run-progress')?.textContent.includes('/30 ')")
            first = done_of(page)
            time.sleep(1.5)
            second = done_of(page)
            assert run.poll() is None and first < second < 30, (first, second)  # it advanced while the run went on
            page.screenshot(path=str(screenshot_dir() / "watch-live.png"), full_page=True)
            assert run.wait(timeout=120) == 0, run_err
            page.wait_for_function("() => document.getElementById('ors-lab-feed').dataset.status === 'ended'")
            assert done_of(page) == 30 and page.locator(".ol-pill").first.inner_text() == "finished"
            assert page.locator(".ol-run-mean-reward").inner_text() == "1.000 ± 0.000"
            page.locator('.ol-cell[data-key="4/1"]').click()  # a finished episode: its transcript from the server
            transcript = "() => document.querySelector('.ol-run-transcript-body')?.textContent.includes('Found it')"
            page.wait_for_function(transcript)
            page.screenshot(path=str(screenshot_dir() / "watch-ended.png"), full_page=True)
            browser.close()
        said(watch_out, r"^the run ended: eval guessing/test: 30/30 episodes")
    finally:
        for process in (run, watch):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
    assert run is not None and watch is not None and watch.wait(timeout=30) == 0
    for process in (run, watch):
        process.wait(timeout=30)
    for reader in readers:
        reader.join(timeout=10)
    for process in (run, watch):
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
    assert problems == []


def test_a_bad_feed_is_one_line_from_the_commands(demo_server: ServerProcess, tmp_path: Path) -> None:
    """`ors-lab watch` of a port nobody listens on, and `ors-lab eval --feed` on a port in use: one line, status 1,
    and no trace left behind."""
    with socket.socket() as taken, socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
        probe.close()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("watch", f"http://127.0.0.1:{closed}", cwd=tmp_path)
        assert_one_line(done, "watch", f"cannot reach the live feed at http://127.0.0.1:{closed}/events: "
                                       "connection refused")  # fmt: skip
        done = run_cli("eval", demo_server.url, "--env", "guessing", "--split", "test", "--agent",
                       "tests.feed.agents:SLOW", "--out", "runs/x.parquet", "--feed", str(port),
                       cwd=tmp_path)  # fmt: skip
        assert_one_line(done, "eval", f"cannot listen on 127.0.0.1:{port}", "in use")
    assert list(tmp_path.iterdir()) == []
    usage = run_cli("watch", "http://127.0.0.1:9/events", "--port", "70000", cwd=tmp_path)
    assert usage.returncode == 2 and "expected a port, 0 to 65535 (0: a free one), not '70000'" in usage.stderr
