"""Trace fuzzing: random byte flips, truncations, metadata and cell edits of a compacted trace and of
the parts of an unfinished one give a TraceFormatError or a valid load, never a crash or another error.

Every reader runs on each damaged copy: ``load_trace`` (strict, and with ``skip_bad_parts=True``),
every frame, the replay index (``Recording``, ``ReplayEngine``), ``ors-lab show``'s summary, and an
append that compacts. They run in one long-lived child process (``WORKER``), so a SIGSEGV is a
failed example naming its input, not a dead pytest; a dead worker is started again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ors_lab as ol
from ors_lab.events import ChunkEvent, ResultEvent
from ors_lab.recording.parts import parts_dir
from tests import traces

REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
FUZZ = settings(database=None, deadline=None, max_examples=30, suppress_health_check=[HealthCheck.too_slow])

WORKER = r"""
import json, sys, traceback
import ors_lab as ol
from ors_lab.analysis.show import summarize
from ors_lab.replay.engine import ReplayEngine
from ors_lab.replay.recorded import Recording

def read(path, skip):
    trace = ol.load_trace(path, skip_bad_parts=skip)
    for name in ("events", "calls", "sessions", "steps", "episodes", "tasks", "errors"):
        getattr(trace, name)
    trace.summary()
    summarize(trace)
    Recording(trace, agent=True)
    ReplayEngine(trace, speed=0)  # builds Recording(trace) and the task index
    return len(trace)

print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    outcome = {}
    for step in ("strict", "skip", "append"):
        if step == "skip" and isinstance(outcome["strict"], int):
            continue  # nothing to skip: the same load again
        try:
            if step == "append":
                ol.Recorder(job["path"], append=True).close()
                outcome[step] = read(job["path"], False)
            else:
                outcome[step] = read(job["path"], step == "skip")
        except ol.TraceFormatError as exc:
            outcome[step] = "TraceFormatError"
        except Exception as exc:
            outcome[step] = "".join(traceback.format_exception(exc))
            break
    print(json.dumps(outcome), flush=True)
"""


class Worker:
    """The child process that reads damaged traces; started again when it dies."""

    def __init__(self, code: str = WORKER) -> None:
        self.code = code
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", self.code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=CHILD_ENV)  # fmt: skip
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc

    def read(self, path: Path) -> dict[str, Any]:
        """What each reader made of the trace at ``path``; ``{"died": code}`` when the worker died on it."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"path": str(path)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait(timeout=30)
            self.close()
            return {"died": code}
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            assert proc.stdin is not None and proc.stdout is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
            proc.wait(timeout=30)
            proc.stdout.close()


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    made = Worker()
    yield made
    made.close()


def _record(rec: ol.Recorder, session: str) -> None:
    """One episode's rows: a /create and a /call with their exchanges, a result, and its episode row."""
    sse = '{"content-type":"text/event-stream"}'
    index = int(session[1:])
    create = json.dumps({"env_name": "lab", "split": "test", "index": index}).encode()
    traces.exchange(rec, "POST", "http://127.0.0.1:1/create", 200, session_id=session, exchange=0, body=create,
                    headers="{}", response_body=b'{"sid":"x"}')  # fmt: skip
    traces.open_(rec, session, "lab", "test", index)
    for call in range(2):
        wire = {"session_id": session, "call": call, "attempt": 1, "exchange": 1 + call}
        traces.exchange(rec, "POST", "http://127.0.0.1:1/lab/call", 200, body=b'{"name":"step","input":{"value":1}}',
                        headers=sse, **wire)  # fmt: skip
        traces.record(rec, ChunkEvent(size=40, **wire))
        for name, data in (("task_id", "t"), ("chunk", '{"ok":true,"reward":1.0,"finished":false}'), ("end", "")):
            traces.sse(rec, name, data, **wire)
        traces.comment(rec, " ping", **wire)
        traces.record(rec, ResultEvent(session_id=session, call=call, task_id="t", ok=True, reward=1.0,
                                       finished=call == 1))  # fmt: skip
    traces.episode(rec, session_id=session, rollout=0, environment="lab", split="test", task_index=index, reward=2.0,
                   total_reward=2.0, final_reward=1.0, steps=2)  # fmt: skip
    traces.close(rec, session)


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A compacted trace of three episodes, and the same left as parts (one per episode) by a killed run."""
    root = tmp_path_factory.mktemp("fuzz")
    compacted = root / "compacted" / "run.parquet"
    compacted.parent.mkdir()
    with ol.Recorder(compacted) as rec:
        for session in ("s0", "s1", "s2"):
            _record(rec, session)
    unfinished = root / "unfinished" / "run.parquet"
    unfinished.parent.mkdir()
    code = (
        "import os, sys, ors_lab as ol\n"
        "from tests.hostile.test_fuzz_trace import _record\n"
        "rec = ol.Recorder(sys.argv[1], flush_interval=3600)\n"
        "for s in ('s0', 's1', 's2'):\n"
        "    _record(rec, s); rec.flush()\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(unfinished)], env=CHILD_ENV, timeout=120, check=True)
    assert len(list(parts_dir(unfinished).glob("part-*.arrow"))) == 3
    return {"compacted": compacted, "unfinished": unfinished}


def _copy(original: Path) -> tuple[Path, Path]:
    """A fresh copy of the trace (file or parts) in a new folder; the folder and the trace's path."""
    folder = Path(tempfile.mkdtemp(prefix="fuzz-"))
    path = folder / original.name
    if original.is_file():
        shutil.copy(original, path)
    else:
        shutil.copytree(parts_dir(original), parts_dir(path))
        (parts_dir(path) / ".lock").unlink(missing_ok=True)
    return folder, path


def _target(path: Path, which: int) -> Path:
    """The file to damage: the compacted trace, or one of the parts."""
    if path.is_file():
        return path
    files = sorted(parts_dir(path).glob("part-*"))
    return files[which % len(files)]


def _check(worker: Worker, path: Path, what: str) -> None:
    outcome = worker.read(path)
    assert "died" not in outcome, f"the readers died ({outcome['died']}) on {what}"
    for step, result in outcome.items():
        assert isinstance(result, int) or result == "TraceFormatError", f"{step} on {what}:\n{result}"


flips = st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=4)


@FUZZ
@given(kind=st.sampled_from(["compacted", "unfinished"]), which=st.integers(0, 2), changes=flips)
def test_flipped_bytes(worker: Worker, originals: dict[str, Path], kind: str, which: int, changes: list[Any]) -> None:
    """Bytes of the trace file or of a part XOR-ed: a valid load or a TraceFormatError, never a crash."""
    folder, path = _copy(originals[kind])
    try:
        target = _target(path, which)
        data = bytearray(target.read_bytes())
        for where, mask in changes:
            data[int(where * len(data))] ^= mask
        target.write_bytes(bytes(data))
        _check(worker, path, f"{target.name} of the {kind} trace with bytes changed: {changes}")
    finally:
        shutil.rmtree(folder)


@FUZZ
@given(kind=st.sampled_from(["compacted", "unfinished"]), which=st.integers(0, 2), keep=st.floats(0, 1))
def test_truncated(worker: Worker, originals: dict[str, Path], kind: str, which: int, keep: float) -> None:
    """The trace file or a part cut short (as a full disk or a bad copy leaves it): a valid load or TraceFormatError."""
    folder, path = _copy(originals[kind])
    try:
        target = _target(path, which)
        data = target.read_bytes()
        target.write_bytes(data[: int(keep * len(data))])
        _check(worker, path, f"{target.name} of the {kind} trace cut at {keep:.4f}")
    finally:
        shutil.rmtree(folder)


METADATA_KEYS = ["ors_lab.schema_version", "ors_lab.version", "ors_lab.created", "ors_lab.run_id", "ors_lab.servers",
                 "ors_lab.partial", "ARROW:schema"]  # fmt: skip
TEXT_COLUMNS = ["headers", "data", "input", "task", "url", "kind", "layer", "event", "session_id", "body"]
values = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.sampled_from([b"", b"[", b"{}", b"[1]", b'["http://x"]', b"2", b"999", b"\xff\xfe", b"null", b'{"a":'])
)


def _rewrite(target: Path, table: pa.Table) -> None:
    """Write ``table`` back as a foreign tool would: every column nullable, the edited metadata as given."""
    table = table.cast(pa.schema([field.with_nullable(True) for field in table.schema], metadata=table.schema.metadata))
    if target.suffix == ".arrow":
        with pa.ipc.new_file(target, table.schema) as writer:
            writer.write_table(table)
    else:
        pq.write_table(table, target)


@FUZZ
@given(
    kind=st.sampled_from(["compacted", "unfinished"]),
    which=st.integers(0, 2),
    edits=st.lists(st.tuples(st.sampled_from(METADATA_KEYS), values), min_size=1, max_size=3),
    cells=st.lists(st.tuples(st.sampled_from(TEXT_COLUMNS), st.integers(0, 100), values), max_size=3),
)
def test_edited_metadata_and_cells(
    worker: Worker, originals: dict[str, Path], kind: str, which: int, edits: list[Any], cells: list[Any]
) -> None:
    """Metadata keys removed or set to junk, text cells set to junk (as a hand or a foreign tool edits them):
    a valid load or a TraceFormatError."""
    folder, path = _copy(originals[kind])
    try:
        target = _target(path, which)
        table = ol.load_trace(path).table if target == path else _read_any(target)
        metadata = dict(table.schema.metadata or {})
        for key, value in edits:
            if value is None:
                metadata.pop(key.encode(), None)
            else:
                metadata[key.encode()] = value
        for column, row, value in cells:
            index = table.schema.get_field_index(column)
            cells_now = table[column].to_pylist()
            text = None if value is None else value if column == "body" else value.decode("utf-8", "replace")
            cells_now[row % len(cells_now)] = text
            field = table.schema.field(index)
            table = table.set_column(index, field, pa.array(cells_now, field.type))
        _rewrite(target, table.replace_schema_metadata(metadata))
        _check(worker, path, f"{target.name} of the {kind} trace with metadata {edits} and cells {cells}")
    finally:
        shutil.rmtree(folder)


def _read_any(part: Path) -> pa.Table:
    from ors_lab.recording.reading import read_part

    return read_part(part)


def test_the_worker_reports_a_crash(tmp_path: Path) -> None:
    """The harness itself: a reader that dies (here by abort()) is reported as a death, not as a pass."""
    probe = Worker("import os, sys\nprint('ready', flush=True)\nsys.stdin.readline()\nos.abort()\n")
    try:
        assert probe.read(tmp_path / "x.parquet") == {"died": -6}
    finally:
        probe.close()
