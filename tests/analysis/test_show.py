"""`ors-lab show TRACE` and `summarize`: a recorded run's numbers, as plain aligned text."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import ors_lab
from ors_lab.analysis.show import summarize
from ors_lab.demo.launch import ServerProcess
from ors_lab.recording.columns import SCHEMA_VERSION
from ors_lab.recording.parts import parts_dir
from tests.envs import common
from tests.scripted_demo import guess_by_bisection, solve_arithmetic

CLI = [sys.executable, "-m", "ors_lab.cli"]
PING_INTERVAL = 0.1


def sections(summary: str) -> dict[str, list[list[str]]]:
    """The summary's sections by title; each line split into cells at runs of two or more spaces."""
    out: dict[str, list[list[str]]] = {}
    for block in summary.strip().split("\n\n"):
        title, *lines = block.splitlines()
        out[title] = [re.split(r"\s{2,}", line.strip()) for line in lines]
    return out


def header(summary: str) -> dict[str, str]:
    """The first block of the summary, `name  value` lines, as a dict."""
    first = summary.split("\n\n", 1)[0]
    pairs = [re.split(r"\s{2,}", line, maxsplit=1) for line in first.splitlines()]
    return {pair[0]: pair[1] for pair in pairs}


def row(table: list[list[str]], *first: str) -> list[str]:
    """The row of `table` whose first cells are `first`."""
    return next(cells for cells in table if tuple(cells[: len(first)]) == first)


@dataclass
class Run:
    """A trace of a demo run and what the client saw."""

    path: Path
    url: str
    guesses: int


@pytest.fixture(scope="module")
def run(demo_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """An HTTP 400, guessing test/0 by bisection with pings, and arithmetic test/0 solved plus one unknown tool."""
    path = tmp_path_factory.mktemp("show") / "run.parquet"
    with ors_lab.Recorder(path) as rec:
        with ors_lab.Client(demo_server.url, recorder=rec, ping_interval=PING_INTERVAL) as client:
            with pytest.raises(ors_lab.ServerError):
                client.environment("guessing").task("test", 99)
            with client.environment("guessing").session(split="test", index=0) as session:
                time.sleep(3.5 * PING_INTERVAL)
                guesses = guess_by_bisection(session)
            arithmetic = client.environment("arithmetic")
            with arithmetic.session(task=arithmetic.task("test", 0)) as session:
                solve_arithmetic(session)
                assert not session.call("nope").ok
    return Run(path, demo_server.url, len(guesses))


def test_header_names_the_trace(run: Run) -> None:
    """The header gives the path, partial, run id, created, servers, schema version and event count."""
    trace = ors_lab.load_trace(run.path)
    lines = header(summarize(trace))
    assert lines["trace"] == str(run.path)
    assert lines["partial"] == "no"
    assert lines["run id"] == trace.events["run_id"].iloc[0]
    assert lines["created"] == trace.metadata["created"]
    assert lines["servers"] == run.url
    assert lines["schema version"] == f"{SCHEMA_VERSION} (written by ors_lab {ors_lab.__version__})"
    assert lines["events"].startswith(f"{len(trace)} (http ")


def test_sessions_calls_and_rewards_add_up(run: Run) -> None:
    """Environments, calls by tool and rewards by environment show the run's counts and means."""
    n = run.guesses
    summary = sections(summarize(ors_lab.load_trace(run.path)))
    environments = summary["Environments"]
    assert environments[0] == ["environment", "sessions", "unclosed", "calls", "errors"]
    assert row(environments, "arithmetic") == ["arithmetic", "1", "0", "3", "0"]
    assert row(environments, "guessing") == ["guessing", "1", "0", str(n), "0"]

    calls = summary["Calls by tool"]
    assert calls[0] == ["environment", "tool", "calls", "ok", "not ok", "errors", "mean reward"]
    assert row(calls, "guessing", "guess") == ["guessing", "guess", str(n), str(n), "0", "0", f"{1 / n:.3f}"]
    assert row(calls, "arithmetic", "calculator") == ["arithmetic", "calculator", "1", "1", "0", "0", "-"]
    assert row(calls, "arithmetic", "submit") == ["arithmetic", "submit", "1", "1", "0", "0", "1.000"]
    assert row(calls, "arithmetic", "nope") == ["arithmetic", "nope", "1", "0", "1", "0", "-"]

    rewards = summary["Rewards by environment"]
    assert row(rewards, "guessing") == ["guessing", "1", "100%", "1.000", "1.000", f"{n:.1f}"]
    assert row(rewards, "arithmetic") == ["arithmetic", "1", "100%", "1.000", "1.000", "3.0"]


def test_latency_percentiles_are_those_of_the_calls(run: Run) -> None:
    """p50/p90/p99 and max of call duration_ms and ttfb_ms match numpy's percentiles of the calls frame."""
    trace = ors_lab.load_trace(run.path)
    latency = sections(summarize(trace))["Latency (ms)"]
    assert latency[0] == ["measure", "n", "p50", "p90", "p99", "max"]
    for name in ("duration_ms", "ttfb_ms"):
        values = trace.calls[name].astype("float64").to_numpy()
        expected = [f"{v:.1f}" for v in [*np.percentile(values, [50, 90, 99]), values.max()]]
        assert row(latency, f"call {name}") == [f"call {name}", str(len(values)), *expected]


def test_pings_are_counted_per_session(run: Run) -> None:
    """The pings section counts the keep-alive ping rows and the sessions they came from."""
    trace = ors_lab.load_trace(run.path)
    pings = int((trace.events["kind"] == "ping").sum())
    assert pings >= 2
    lines = [" ".join(cells) for cells in sections(summarize(trace))["Pings"]]
    assert lines[0] == f"keep-alive pings {pings} in 1 of 2 sessions"
    assert lines[1].startswith("gap before a ping (s) p50 0.")
    assert lines[2] == "server pings (SSE comments) during tool calls 0"


def test_errors_show_http_statuses_with_their_request_and_detail(run: Run) -> None:
    """An HTTP 400 is counted and shown with its method, URL and the server's detail."""
    errors = [" ".join(cells) for cells in sections(summarize(ors_lab.load_trace(run.path)))["Errors"]]
    assert errors == ["HTTP statuses >= 400 1 (400 x1)", f"1 x 400 POST {run.url}/guessing/task: Invalid index"]


def test_calls_that_raised_are_errors(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """A tool that raised on the server is counted under errors, with its message, and in its tool's row."""
    path = tmp_path / "crash.parquet"
    with ors_lab.Recorder(path) as rec, ors_lab.Client(ors_sdk_server.url, recorder=rec) as client:
        with client.environment("lab").session(split="train", index=0) as session:
            for _ in range(2):
                with pytest.raises(ors_lab.ToolError):
                    session.call("crash")
    summary = summarize(ors_lab.load_trace(path))
    parsed = sections(summary)
    assert row(parsed["Calls by tool"], "lab", "crash") == ["lab", "crash", "2", "0", "0", "2", "-"]
    assert row(parsed["Rewards by environment"], "lab") == ["lab", "1", "0%", "-", "-", "0.0"]
    errors = [" ".join(cells) for cells in parsed["Errors"]]
    assert errors == ["calls that raised 2", f"2 x ToolError: {common.CRASH_MESSAGE}"]


def test_an_empty_trace_summarises_to_empty_sections(tmp_path: Path) -> None:
    """A trace with no events has a header, zero events, and (none) in every section."""
    path = tmp_path / "empty.parquet"
    ors_lab.Recorder(path).close()
    summary = summarize(ors_lab.load_trace(path))
    assert header(summary)["events"] == "0"
    assert header(summary)["servers"] == "-"
    parsed = sections(summary)
    titles = ["Environments", "Calls by tool", "Rewards by environment", "Latency (ms)", "Pings", "Errors"]
    assert list(parsed)[1:] == titles
    assert all(parsed[title] == [["(none)"]] for title in titles)


def test_a_partial_trace_says_so(demo_server: ServerProcess, tmp_path: Path) -> None:
    """An unclosed recording is summarised from its parts, marked partial, with the calls written so far."""
    path = tmp_path / "run.parquet"
    rec = ors_lab.Recorder(path, flush_interval=0.02)
    try:
        with ors_lab.Client(demo_server.url, recorder=rec) as client:
            with client.environment("guessing").session(split="test", index=0) as session:
                session.call("guess", {"number": 50})
        deadline = time.monotonic() + 5
        while ors_lab.load_trace(path).sessions["closed"].count() == 0:  # the close row reached a part
            assert time.monotonic() < deadline, "the parts never held the closed session"
            time.sleep(0.02)
        summary = summarize(ors_lab.load_trace(path))
    finally:
        rec.close()
    assert header(summary)["partial"] == f"yes: read from the parts of an unfinished recording in {parts_dir(path)}"
    assert row(sections(summary)["Calls by tool"], "guessing", "guess")[:4] == ["guessing", "guess", "1", "1"]


def test_cli_prints_the_summary(run: Run) -> None:
    """`python -m ors_lab.cli show PATH` exits 0 and prints exactly `summarize(load_trace(PATH))`."""
    done = subprocess.run([*CLI, "show", str(run.path)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == summarize(ors_lab.load_trace(run.path))
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no trace at {path}\n"), ("not parquet\n", "{path} is not a readable Parquet file")],
    ids=["missing", "not-parquet"],
)
def test_cli_on_a_bad_trace_exits_1_with_the_message(tmp_path: Path, content: str | None, message: str) -> None:
    """A missing or unreadable trace exits 1 with the TraceFormatError message on stderr, no traceback."""
    path = tmp_path / "bad.parquet"
    if content is not None:
        path.write_text(content)
    done = subprocess.run([*CLI, "show", str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("ors-lab show: " + message.format(path=path))
    assert "Traceback" not in done.stderr
