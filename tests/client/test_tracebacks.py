"""A failing test's traceback points at the test's own line: ors_lab's frames are hidden (``__tracebackhide__``).

A user's test file is run by pytest in its own process, as the user runs it: a replay mismatch met
through the sync client (the private loop thread), through the sync client inside a running loop
(nest_asyncio2's frames too), and through the async client; each report shows the test's line and the
error's message, and no frame of the library or of the event loop's machinery under the user's line.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

PLUGINS_OFF = ["-p", "no:nbval", "-p", "no:hypothesispytest"]
"""Plugins of this repository's test stack, which the user's project has no use for: off, as they take 2 of the
child's 3 seconds to start (ors_lab's pytest plugin and pytest-asyncio load as usual)."""

USER_TESTS = '''
import asyncio

import ors_lab as ol

TRACE = {trace!r}


def client():
    return ol.Client("http://replay", transport=ol.ReplayTransport(TRACE))


def test_sync():
    with client() as c:
        c.environment("guessing").task("nope", 99)  # the user's line


def test_sync_in_a_running_loop():
    async def main():
        with client() as c:
            c.environment("guessing").tools()  # the user's line, in a loop

    asyncio.run(main())


def test_async():
    async def main():
        async with ol.AsyncClient("http://replay", transport=ol.ReplayTransport(TRACE)) as c:
            await c.environment("guessing").splits()  # the user's line, async

    asyncio.run(main())


def test_missing_trace():
    ol.load_trace("missing.parquet")  # the user's line, a trace
'''


def test_a_failing_tests_traceback_shows_its_line_and_the_message(tmp_path: Path) -> None:
    """pytest's report of each failing test: the test's line, the error and its message; no frame of ors_lab
    (aclient.py, sync.py, runner.py, the trace loader), and none at all under the test's line."""
    (tmp_path / "test_user.py").write_text(USER_TESTS.format(trace=str(REPO_ROOT / "recordings" / "demo.parquet")))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *PLUGINS_OFF, "test_user.py"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    out = done.stdout
    assert "4 failed" in out, out
    reports = out.split("= FAILURES =")[1].split("short test summary")[0]
    for name, line, error in [
        ("test_sync", 'c.environment("guessing").task("nope", 99)  # the user\'s line', "ReplayMismatchError"),
        ("test_sync_in_a_running_loop", "# the user's line, in a loop", "ReplayMismatchError"),
        ("test_async", "# the user's line, async", "ReplayMismatchError"),
        ("test_missing_trace", "# the user's line, a trace", "TraceNotFoundError: no trace at missing.parquet"),
    ]:
        report = reports.split(f"_ {name} _")[1].split("\n____")[0]
        assert line in report and error in report, report
        assert "no recorded request matches" in report or "TraceNotFoundError" in report, report
        assert "ors_lab/" not in report, report  # no frame of the library (asyncio's above the line are the user's)
        after = report.rsplit(line, 1)[1]  # below the user's line: the message, then where it was (the test file)
        assert re.findall(r"^(\S+\.py):\d+", after, re.MULTILINE) == ["test_user.py"], report
        assert "During handling of the above exception" not in report, report
