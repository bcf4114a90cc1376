"""One writer per trace: a second recorder on a trace being written is refused, naming the holder;
a holder killed with SIGKILL does not keep the trace locked."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import ors_lab as ol
from ors_lab.protocol import TraceLockedError
from ors_lab.recording.lock import holder_of
from ors_lab.recording.parts import parts_dir
from tests.traces import comment

REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

HOLDER = """
import sys, time, ors_lab as ol
from ors_lab.events import CommentEvent
rec = ol.Recorder(sys.argv[1], run_id="holder", append=True, flush_interval=0.05)
for n in range(3):
    rec.record(CommentEvent(comment=f"holder {n}"))
rec.flush()
print("holding", flush=True)
time.sleep(60)
"""


def _holder(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True,
                            env=CHILD_ENV)  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "holding":
        proc.kill()
        proc.wait(timeout=10)
        pytest.fail(f"the holding child did not start: {line!r}")
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.stdout is not None
    proc.stdout.close()


def test_a_second_recorder_in_another_thread_is_refused(tmp_path: Path) -> None:
    """Two appending recorders on one trace (two threads): the second raises TraceLockedError naming the first."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path, run_id="first") as rec:
        comment(rec, "first")
        caught: list[BaseException] = []

        def second() -> None:
            try:
                ol.Recorder(path, run_id="second", append=True).close()
            except BaseException as exc:  # handed to the test thread
                caught.append(exc)

        thread = threading.Thread(target=second)
        thread.start()
        thread.join(30)
        assert len(caught) == 1 and isinstance(caught[0], TraceLockedError), caught
        error = caught[0]
        assert isinstance(error, ol.TraceFormatError)
        assert error.holder["pid"] == os.getpid() and error.holder["run_id"] == "first"
        assert f"process {os.getpid()} on {socket.gethostname()} (run first), recording since" in str(error)
        comment(rec, "still first")
    assert ol.load_trace(path).table["comment"].to_pylist() == ["first", "still first"]


def test_overwrite_and_a_new_recorder_do_not_touch_a_trace_being_written(tmp_path: Path) -> None:
    """overwrite=True and a plain Recorder on a trace being written are refused too, and remove nothing."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path, run_id="first", flush_interval=3600) as rec:
        comment(rec, "kept")
        rec.flush()
        for options in ({"overwrite": True}, {}):
            with pytest.raises(TraceLockedError, match="one writer per trace"):
                ol.Recorder(path, **options)
        assert len(list(parts_dir(path).glob("part-*"))) == 1
    assert ol.load_trace(path).table["comment"].to_pylist() == ["kept"]


def test_a_second_process_is_refused_and_a_killed_holder_is_taken_over(tmp_path: Path) -> None:
    """Another process holding the trace: TraceLockedError with its pid and host; after SIGKILL, append takes over."""
    path = tmp_path / "run.parquet"
    proc = _holder(path)
    try:
        with pytest.raises(TraceLockedError) as caught:
            ol.Recorder(path, run_id="second", append=True)
        assert caught.value.holder["pid"] == proc.pid
        assert caught.value.holder["host"] == socket.gethostname()
        assert f"process {proc.pid} on {socket.gethostname()} (run holder)" in str(caught.value)
        assert holder_of(parts_dir(path)) == caught.value.holder
    finally:
        _kill(proc)
    assert (parts_dir(path) / ".lock").exists()  # the dead holder's lock file is still there
    with ol.Recorder(path, run_id="second", append=True) as rec:
        comment(rec, "second 0")
    table = ol.load_trace(path).table
    assert table["comment"].to_pylist() == ["holder 0", "holder 1", "holder 2", "second 0"]
    assert table["seq"].to_pylist() == [0, 1, 2, 3]


def test_two_concurrent_appends_lose_nothing(tmp_path: Path) -> None:
    """Two recorders racing to append to one trace: exactly one records, the other is refused; no row is lost."""
    path = tmp_path / "run.parquet"
    with ol.Recorder(path, run_id="base") as rec:
        comment(rec, "base")
    barrier = threading.Barrier(2)
    outcomes: dict[str, BaseException | None] = {}

    def run(name: str) -> None:
        barrier.wait()
        try:
            with ol.Recorder(path, run_id=name, append=True, flush_interval=0.01) as rec:
                for n in range(200):
                    comment(rec, f"{name} {n}")
            outcomes[name] = None
        except TraceLockedError as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    winners = [name for name, error in outcomes.items() if error is None]
    assert len(outcomes) == 2 and len(winners) >= 1
    table = ol.load_trace(path).table
    assert table["seq"].to_pylist() == list(range(table.num_rows))
    assert table.num_rows == 1 + 200 * len(winners)
