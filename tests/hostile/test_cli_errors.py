"""Expected failures of the ``ors-lab`` command, run as a user runs it: one line on stderr, no traceback.

Each case runs the installed console script in its own process: a missing trace, files that are
not traces, a port in use (nothing left behind), a server nobody listens on, and Ctrl-C.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import ors_lab as ol
from tests.conftest import REPO_ROOT

_SCRIPT = shutil.which("ors-lab", path=str(Path(sys.executable).parent))
CLI = [_SCRIPT] if _SCRIPT else [sys.executable, "-m", "ors_lab.cli"]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=ENV, check=False)


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


def test_a_corrupted_trace_is_one_line(tmp_path: Path) -> None:
    """check on a real trace with its data and footer overwritten by random bytes: one line, status 1."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path) as rec:
        for i in range(200):
            rec.emit("note", error=f"row {i} " * 20)
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


def test_an_unreachable_server_is_one_line(tmp_path: Path, closed_port: int) -> None:
    """eval against a port nobody listens on: one line, status 1."""
    url = f"http://127.0.0.1:{closed_port}"
    args = ["eval", url, "--env", "lab", "--agent", "tests.evaluation.policies:lab_policy", "--out", "x.parquet"]
    assert_one_line(run(*args, cwd=tmp_path), "eval", f"127.0.0.1:{closed_port}")


def test_ctrl_c_is_one_line_and_status_130(tmp_path: Path) -> None:
    """Ctrl-C while eval waits on a server that never answers: `interrupted`, status 130."""
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        args = ["eval", url, "--env", "lab", "--agent", "tests.evaluation.policies:lab_policy", "--out", "x.parquet"]
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
