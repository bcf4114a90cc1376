"""The recorder under SIGKILL: what a killed recording leaves is a readable, gap-free partial trace.

A child process (``CHILD``, run with ``python -c``) records a steady stream of synthetic events and
reports, every 50 ms, how many it has emitted and when (``time.monotonic()``, which is the same
clock in every process on Linux). The parent kills it with SIGKILL at a seeded random moment and
then reads what is on disk. The recorder promises every event emitted about one second before the
kill; the tests allow 1.2 s.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pytest

from ors_lab.analysis import Trace, load_trace
from ors_lab.recording import Recorder
from ors_lab.recording.parts import parts_dir
from ors_lab.recording.reading import read_part

REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

pytestmark = pytest.mark.serial  # kills timed against the wall clock, and peak memory

KILL_REPETITIONS = 5
KILL_WINDOW_S = (0.5, 3.0)  # the kill comes this long after the child starts emitting
PROMISE_S = 1.2  # events reported this long before the kill must be in the trace (1 s + margin)
RATE = 4000  # events per second the child emits
REPORT_S = 0.05

CHILD = """
import sys, time
from ors_lab.events import SSEEvent
from ors_lab.recording import Recorder

path, mode, rate, report_s = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
rec = Recorder(path)
print("ready", flush=True)
start = next_report = time.monotonic()
seq = 0
while mode == "kill" or seq < rate / 2:
    for _ in range(20):
        rec.record(SSEEvent(session_id=f"s{seq // 1000}", call=seq // 100 % 1000, event="chunk", data="x" * 50))
        seq += 1
    now = time.monotonic()
    if now >= next_report:
        print(seq, now, flush=True)  # every event with seq < this one was emitted by `now`
        next_report += report_s
    delay = start + seq / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
rec.close()
print(seq, time.monotonic(), flush=True)
"""

MEMORY_EVENTS = 300_000
MEMORY_PART_ROWS = 10_000
MEMORY_BOUND = 150 * 2**20

# The baseline is taken after the imports and one tiny Parquet write and read: pyarrow's first
# Parquet write adds about 55 MB of RSS once per process, whatever is written, with any codec.
MEMORY_CHILD = """
import json, sys
import psutil
import pyarrow.parquet as pq
from ors_lab.events import SSEEvent
from ors_lab.recording import Recorder
from ors_lab.recording.schema import SCHEMA

path, events, part_rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pq.write_table(SCHEMA.empty_table(), path + ".warm")
pq.read_table(path + ".warm")
baseline = psutil.Process().memory_info().rss
rec = Recorder(path, part_rows=part_rows)
for i in range(events):
    rec.record(SSEEvent(session_id=f"s{i // 1000}", call=i // 100 % 1000, event="chunk", data="x" * 50))
def peak():  # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the (large) parent across exec
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024
emitting = peak()
rec.close()
closing = peak()
print(json.dumps({"baseline": baseline, "emitting": emitting, "closing": closing}))
"""


def _start_child(path: Path, mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), mode, str(RATE), str(REPORT_S)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=CHILD_ENV,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":  # imports done, Recorder made
        proc.kill()
        _, stderr = proc.communicate(timeout=10)
        pytest.fail(f"the recording child did not start:\n{stderr[-2000:]}")
    return proc


def _reports(stdout: str) -> list[tuple[int, float]]:
    """The child's (events emitted, monotonic time) lines."""
    return [(int(n), float(t)) for n, t in (line.split() for line in stdout.splitlines())]


def _duckdb_rows(path: Path) -> int:
    with duckdb.connect() as con:
        row = con.execute(f"SELECT count(*) FROM read_parquet('{path}')").fetchone()
    assert row is not None
    return int(row[0])


def _seq_is_0_to_n(trace: Trace) -> bool:
    """True when the trace's seq column is exactly 0, 1, ..., len - 1, in that order."""
    return bool(np.array_equal(trace.table["seq"].to_numpy(), np.arange(len(trace))))


@pytest.mark.parametrize("repetition", range(KILL_REPETITIONS))
def test_sigkill_leaves_a_readable_gap_free_partial_trace(tmp_path: Path, repetition: int) -> None:
    """After SIGKILL, the parts load as a gap-free partial trace with every event emitted 1.2 s before the kill."""
    path = tmp_path / "run.parquet"
    # Stratified: repetition r is killed at a seeded random moment in its own slice of the window,
    # so the repetitions together cover all of it.
    low, high = KILL_WINDOW_S
    width = (high - low) / KILL_REPETITIONS
    start = low + repetition * width
    delay = random.Random(f"ors-lab-crash-{repetition}").uniform(start, start + width)
    proc = _start_child(path, "kill")
    assert proc.stdout is not None
    first = proc.stdout.readline()  # its first report: it is emitting (a loaded machine can take a while to start)
    time.sleep(delay)
    killed_at = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=10)
    stdout = first + stdout
    assert proc.returncode == -signal.SIGKILL, stderr[-2000:]
    reports = _reports(stdout)
    assert reports, "the child reported nothing before the kill"

    trace = load_trace(path)
    assert trace.partial is True
    assert not path.exists()
    rows = len(trace)
    assert _seq_is_0_to_n(trace), f"seq is not 0..{rows - 1} in order"
    promised = max((n for n, t in reports if t <= killed_at - PROMISE_S), default=0)
    assert rows >= promised, (
        f"killed {delay:.2f} s in: {rows} events on disk, but {promised} were emitted {PROMISE_S} s before the kill"
    )

    # Only whole parts count: every file is a numbered part, a hidden temporary one, or the writer's
    # lock, and the trace is exactly the numbered parts.
    parts = parts_dir(path)
    names = sorted(p.name for p in parts.iterdir())
    numbered = [n for n in names if n.startswith("part-") and n.endswith(".arrow")]
    hidden = [n for n in names if n not in numbered]
    assert all(n == ".lock" or (n.startswith(".part-") and n.endswith(".arrow.tmp")) for n in hidden), names
    assert numbered == [f"part-{i:09d}.arrow" for i in range(len(numbered))]
    assert rows == sum(read_part(parts / n).num_rows for n in numbered)

    # A torn temporary part, as a kill in the middle of writing one leaves, is not picked up.
    if numbered:
        torn = parts / f".part-{len(numbered):09d}.arrow.tmp"
        torn.write_bytes((parts / numbered[-1]).read_bytes()[:100])
    assert len(load_trace(path)) == rows

    # Appending nothing compacts the parts into the one Parquet file, which DuckDB reads whole.
    Recorder(path, append=True).close()
    assert not parts.exists()
    assert _duckdb_rows(path) == rows
    assert load_trace(path).table["seq"].to_pylist() == trace.table["seq"].to_pylist()


def test_normal_close_leaves_one_complete_file(tmp_path: Path) -> None:
    """A recording that closes normally leaves the compacted file, no parts directory, and partial False."""
    path = tmp_path / "run.parquet"
    proc = _start_child(path, "close")
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr[-2000:]
    emitted = _reports(stdout)[-1][0]
    assert not parts_dir(path).exists()
    trace = load_trace(path)
    assert trace.partial is False
    assert len(trace) == emitted
    assert _seq_is_0_to_n(trace)


def test_memory_stays_bounded_while_recording(tmp_path: Path) -> None:
    """Recording 300,000 events (part_rows=10,000) keeps them all with peak RSS < 150 MB over the baseline."""
    path = tmp_path / "big.parquet"
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD, str(path), str(MEMORY_EVENTS), str(MEMORY_PART_ROWS)],
        capture_output=True,
        text=True,
        env=CHILD_ENV,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    trace = load_trace(path)
    assert trace.partial is False
    assert len(trace) == MEMORY_EVENTS
    assert _seq_is_0_to_n(trace)
    emitting, closing = (figures[key] - figures["baseline"] for key in ("emitting", "closing"))
    assert max(emitting, closing) < MEMORY_BOUND, (
        f"peak RSS grew by {emitting / 2**20:.0f} MB while emitting, {closing / 2**20:.0f} MB by the end of close()"
    )
