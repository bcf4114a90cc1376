"""Expected failures of the ``ors-lab`` command, run as a user runs it: one line on stderr, no traceback.

Each case runs the installed console script in its own process: a missing trace, files that are
not traces, a port in use (nothing left behind), a server nobody listens on, a user's first
mistakes (an unknown environment or split, a URL without http://, a trace already there), and
Ctrl-C; ``--debug`` shows the traceback too.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import ors_lab as ol
from ors_lab.demo.launch import ServerProcess
from ors_lab.events import DisconnectEvent
from tests.conftest import REPO_ROOT

_SCRIPT = shutil.which("ors-lab", path=str(Path(sys.executable).parent))
CLI = [_SCRIPT] if _SCRIPT else [sys.executable, "-m", "ors_lab.cli"]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                          env={**ENV, **(env or {})}, check=False)  # fmt: skip


def assert_one_line(done: subprocess.CompletedProcess[str], command: str, *needles: str) -> None:
    """Exit status 1 and one line on stderr, ``ors-lab COMMAND: ...``, naming what went wrong."""
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"ors-lab {command}: "), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that something else listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_bad_trace_files_are_one_line_each(tmp_path: Path) -> None:
    """show on a missing trace, a text file, random bytes and a Parquet file that is no trace: one line, status 1."""
    (tmp_path / "text.parquet").write_text("hello\n")
    (tmp_path / "random.parquet").write_bytes(os.urandom(4096))
    pd.DataFrame({"a": [1, 2]}).to_parquet(tmp_path / "table.parquet")
    for name in ("missing.parquet", "text.parquet", "random.parquet", "table.parquet"):
        assert_one_line(run("show", name, cwd=tmp_path), "show", name)


@pytest.mark.parametrize("command", ["show", "check", "replay", "report"])
def test_a_missing_trace_is_named(tmp_path: Path, command: str) -> None:
    """show, check, replay and report of a path with no trace: `no trace at PATH`, and nothing made."""
    done = run(command, "runs/missing.parquet", cwd=tmp_path)
    assert_one_line(done, command)
    assert done.stderr == f"ors-lab {command}: no trace at runs/missing.parquet\n"
    assert list(tmp_path.iterdir()) == []


def test_a_report_over_its_trace_or_of_no_timelines_is_one_line(tmp_path: Path) -> None:
    """report -o the trace itself: one line, the trace untouched; --timelines -1: a usage error."""
    shutil.copy(REPO_ROOT / "recordings" / "demo.parquet", tmp_path / "run.parquet")
    before = (tmp_path / "run.parquet").read_bytes()
    done = run("report", "run.parquet", "-o", "run.parquet", cwd=tmp_path)
    assert_one_line(done, "report")
    assert done.stderr == "ors-lab report: run.parquet is the trace itself: write the report elsewhere, e.g. run.html\n"
    assert (tmp_path / "run.parquet").read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "run.parquet"
    ]
    usage = run("report", "run.parquet", "--timelines", "-1", cwd=tmp_path)
    assert usage.returncode == 2 and "expected a whole number, 0 or more, not '-1'" in usage.stderr


def test_debug_shows_the_traceback_before_the_line(tmp_path: Path) -> None:
    """`ors-lab --debug` and ORS_LAB_DEBUG=1 print the traceback, then the same one line; status 1 still."""
    for done in (run("--debug", "show", "missing.parquet", cwd=tmp_path),
                 run("show", "missing.parquet", cwd=tmp_path, env={"ORS_LAB_DEBUG": "1"})):  # fmt: skip
        assert done.returncode == 1
        assert done.stderr.startswith("Traceback (most recent call last):")
        assert "TraceNotFoundError: no trace at missing.parquet" in done.stderr
        assert done.stderr.splitlines()[-1] == "ors-lab show: no trace at missing.parquet"


def test_a_corrupted_trace_is_one_line(tmp_path: Path) -> None:
    """check on a real trace with its data and footer overwritten by random bytes: one line, status 1."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path) as rec:
        for i in range(200):
            rec.record(DisconnectEvent(error=f"row {i} " * 20))
    data, noise = bytearray(path.read_bytes()), random.Random(16)
    middle = len(data) // 2
    data[middle - 64 : middle + 64] = noise.randbytes(128)  # in the column data
    data[-200:-8] = noise.randbytes(192)  # in the footer's metadata
    path.write_bytes(bytes(data))
    assert_one_line(run("check", "run.parquet", cwd=tmp_path), "check", "run.parquet")


@pytest.mark.parametrize("command", ["proxy", "replay"])
def test_a_port_in_use_is_one_line_and_leaves_nothing(tmp_path: Path, taken_port: int, command: str) -> None:
    """proxy and replay on a port in use: one line naming the port, status 1, no trace or parts left behind."""
    trace = tmp_path / "served.parquet"
    with ol.Recorder(trace):
        pass
    if command == "proxy":
        args = ["proxy", "http://127.0.0.1:9", "--out", "new.parquet"]
    else:
        args = ["replay", "served.parquet"]
    before = sorted(p.name for p in tmp_path.iterdir())
    done = run(*args, "--port", str(taken_port), cwd=tmp_path)
    assert_one_line(done, command, f"127.0.0.1:{taken_port}", "in use")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


LAB_POLICY = ["--agent", "tests.evaluation.policies:lab_policy"]


def test_an_unreachable_server_is_one_line(tmp_path: Path, closed_port: int) -> None:
    """eval against a port nobody listens on: one line saying the server cannot be reached, status 1, no trace."""
    url = f"http://127.0.0.1:{closed_port}"
    args = ["eval", url, "--env", "lab", "--split", "test", *LAB_POLICY, "--out", "x.parquet"]
    assert_one_line(run(*args, cwd=tmp_path), "eval", f"cannot reach the ORS server at {url}: connection refused")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["{url}", "--env", "nope"], "unknown environment 'nope' at {url}; its environments: lab, echo"),
        (["{url}", "--env", "lab", "--split", "nope"], "unknown split 'nope' of environment 'lab'; its splits: "
                                                       "train, test"),
        (["{url}", "--env", "lab", "--split", "test", "--tasks", "9"], "tasks=9: split 'test' of 'lab' has 2 tasks"),
        (["{host}", "--env", "lab"], "'{host}' is not a server URL: it has no http:// or https://; did you mean "
                                     "'http://{host}'?"),
    ],
    ids=["unknown-environment", "unknown-split", "too-many-tasks", "no-scheme"],
)  # fmt: skip
def test_a_users_first_mistakes_are_one_line_and_leave_nothing(
    tmp_path: Path, ors_sdk_server: ServerProcess, args: list[str], line: str
) -> None:
    """eval with an unknown environment or split, too many tasks, or a URL without http://: one line saying what
    there is, status 1, and neither the trace nor the directories made for it are left behind."""
    url, host = ors_sdk_server.url, ors_sdk_server.url.removeprefix("http://")
    done = run("eval", *[a.format(url=url, host=host) for a in args], *LAB_POLICY, "--out", "runs/new/x.parquet",
               cwd=tmp_path)  # fmt: skip
    assert_one_line(done, "eval")
    assert done.stderr == f"ors-lab eval: {line.format(url=url, host=host)}\n"
    assert list(tmp_path.iterdir()) == []


def test_an_existing_trace_is_continued_refused_or_replaced_by_flags(
    tmp_path: Path, ors_sdk_server: ServerProcess
) -> None:
    """--no-resume on a trace names the flags that continue or replace it, and leaves it whole; a failed run
    that continues it keeps its episodes; --overwrite replaces it; --resume with --overwrite is a usage error."""
    args = ["eval", ors_sdk_server.url, "--env", "lab", "--split", "test", *LAB_POLICY, "--out", "x.parquet"]
    assert run(*args, "--tasks", "1", cwd=tmp_path).returncode == 0
    trace = tmp_path / "x.parquet"
    before = trace.read_bytes()
    done = run(*args, "--no-resume", cwd=tmp_path)
    assert_one_line(done, "eval")
    assert done.stderr == (
        "ors-lab eval: x.parquet already holds a trace; pass --resume to continue it or --overwrite to replace it\n"
    )
    assert trace.read_bytes() == before
    failed = run(*[("nope" if a == "lab" else a) for a in args], cwd=tmp_path)
    assert_one_line(failed, "eval", "unknown environment 'nope'")
    assert len(ol.load_trace(trace).episodes) == 1
    assert run(*args, "--resume", "--overwrite", cwd=tmp_path).returncode == 2
    replaced = run(*args, "--overwrite", "--split", "train", cwd=tmp_path)
    assert replaced.returncode == 0, replaced.stderr
    assert set(ol.load_trace(trace).episodes["split"]) == {"train"}


def test_replay_speed_is_a_multiplier(tmp_path: Path) -> None:
    """replay --speed -1 is a usage error that calls the speed a multiplier, not seconds."""
    done = run("replay", "x.parquet", "--speed", "-1", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(
        "argument --speed: expected a speed, a multiplier of 0 or more (1 keeps the recorded timing, "
        "2 is twice as fast, 0 does not wait), not '-1'"
    )


def test_a_proxy_for_no_url_refuses_to_start(tmp_path: Path) -> None:
    """proxy not-a-url ends at once with one line, instead of serving 502s; no trace is made."""
    done = run("proxy", "not-a-url", "--out", "p.parquet", cwd=tmp_path)
    assert_one_line(done, "proxy")
    assert done.stderr == (
        "ors-lab proxy: 'not-a-url' is not a server URL: it has no http:// or https://; did you mean "
        "'http://not-a-url'?\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_is_one_line_and_status_130(tmp_path: Path) -> None:
    """Ctrl-C while eval waits on a server that never answers: `interrupted`, status 130."""
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        args = ["eval", url, "--env", "lab", "--split", "test", *LAB_POLICY, "--out", "x.parquet"]
        proc = subprocess.Popen([*CLI, *args], stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=ENV)
        try:
            deadline = time.monotonic() + 30
            while not (tmp_path / "x.parquet.parts").exists() and time.monotonic() < deadline:
                time.sleep(0.05)  # the recorder is open: the run has started
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "ors-lab eval: interrupted", stderr
    assert "Traceback" not in stderr


def _echo_calls(url: str, recorder: Any = None) -> list[str]:
    with ol.Client(url, recorder=recorder, retry=ol.RetryPolicy(backoff=0.05)) as client:
        with client.environment("echo").session(split="dev", index=0, view=False) as session:
            return [session.call("echo", {"text": text}).text for text in ("a", "b")]


def test_an_injected_cut_is_no_traceback(tmp_path: Path, ors_sdk_server: ServerProcess) -> None:
    """replay --fault cut:1 cuts every /call stream as asked, the client resumes, and the replay logs nothing
    about the cuts it was asked for: no traceback, no ASGI error."""
    trace = tmp_path / "echo.parquet"
    with ol.Recorder(trace) as recorder:
        assert _echo_calls(ors_sdk_server.url, recorder) == ["a", "b"]
    args = ["replay", str(trace), "--speed", "0", "--fault", "cut:1,times=0"]
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        assert proc.stdout is not None
        url = re.search(r"http://127\.0\.0\.1:\d+", proc.stdout.readline())
        assert url, proc.stderr.read() if proc.stderr else ""
        sink: list[Any] = []
        assert _echo_calls(url.group(0), sink.append) == ["a", "b"]
        assert sum(1 for event in sink if event.kind == "retry" and event.reason == "resume") == 2
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert stderr == "", stderr
