"""Reading traces back: `load_trace` answers a path that holds no trace, a damaged part and hand-edited
metadata with TraceFormatError naming the file and what is wrong, and never crashes the process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import ors_lab
from ors_lab.analysis.trace import GROUPS_AT_ONCE
from ors_lab.events import RequestEvent, ResponseEvent
from ors_lab.recording.columns import EPISODE_COLUMNS, METADATA_CREATED, METADATA_SCHEMA_VERSION, METADATA_SERVERS
from ors_lab.recording.parts import parts_dir
from tests.traces import record

REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


@pytest.mark.parametrize("path", ["", "."])
def test_a_path_without_a_file_name_is_no_trace(path: str) -> None:
    """`load_trace("")` and `load_trace(".")` raise TraceFormatError ("no trace at ..."), not a pathlib ValueError."""
    with pytest.raises(ors_lab.TraceFormatError, match="no trace at"):
        ors_lab.load_trace(path)


RECORD_IN_PARTS = """
import os, sys, ors_lab
from ors_lab.events import RequestEvent, ResultEvent
rec = ors_lab.Recorder(sys.argv[1], flush_interval=3600)
for n in range(3):
    for call in range(4):
        rec.record(RequestEvent(session_id=f"s{n}", call=call, method="POST", url="http://127.0.0.1:1/lab/call",
                                body=b'{"name":"step","input":{"value":1}}'))
        rec.record(ResultEvent(session_id=f"s{n}", call=call, task_id=None, ok=True, reward=1.0, finished=call == 3))
    rec.flush()
os._exit(0)  # as a killed run: the parts stay, and no one holds them
"""


@pytest.fixture(scope="module")
def parts_of_a_killed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recording left as parts by a process that died before close(): one part per session, four calls each."""
    path = tmp_path_factory.mktemp("killed") / "run.parquet"
    subprocess.run([sys.executable, "-c", RECORD_IN_PARTS, str(path)], env=CHILD_ENV, timeout=120, check=True)
    return path


def _record_in_parts(path: Path, source: Path) -> None:
    shutil.copytree(parts_dir(source), parts_dir(path))


def _break_run_id_offsets(part: Path) -> None:
    """Flip the first byte of the ``run_id`` column's offsets in an Arrow part: a reader that trusts them
    reads far past the end of the mapped file."""
    data = part.read_bytes()
    buffer = pa.py_buffer(data)
    batch = pa.ipc.open_file(buffer).get_batch(0)
    offsets = batch.column(batch.schema.get_field_index("run_id")).buffers()[1]
    assert offsets is not None
    position = offsets.address - buffer.address
    changed = bytearray(data)
    changed[position] ^= 0xFF
    part.write_bytes(bytes(changed))


READ_ALL = """
import sys, ors_lab
try:
    trace = ors_lab.load_trace(sys.argv[1])
    trace.calls, trace.episodes
    print("loaded", len(trace))
except ors_lab.TraceFormatError as exc:
    print("TraceFormatError", exc)
"""


def test_a_damaged_part_is_a_trace_format_error_not_a_crash(tmp_path: Path, parts_of_a_killed_run: Path) -> None:
    """One flipped byte in an Arrow part: TraceFormatError naming the part (it used to be SIGSEGV in .calls)."""
    path = tmp_path / "run.parquet"
    _record_in_parts(path, parts_of_a_killed_run)
    bad = parts_dir(path) / "part-000000001.arrow"
    _break_run_id_offsets(bad)
    done = subprocess.run([sys.executable, "-c", READ_ALL, str(path)], capture_output=True, text=True, env=CHILD_ENV,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, f"the reader died with {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.startswith(f"TraceFormatError {bad} is not a readable Arrow IPC file"), done.stdout
    assert "skip_bad_parts=True" in done.stdout


def test_the_other_parts_load_when_asked_and_the_skipped_one_is_named(
    tmp_path: Path, parts_of_a_killed_run: Path
) -> None:
    """skip_bad_parts=True loads every good part and names the skipped one in trace.skipped; nothing else is lost."""
    path = tmp_path / "run.parquet"
    _record_in_parts(path, parts_of_a_killed_run)
    bad = parts_dir(path) / "part-000000001.arrow"
    _break_run_id_offsets(bad)
    trace = ors_lab.load_trace(path, skip_bad_parts=True)
    assert list(trace.skipped) == [str(bad)]
    assert "is not a readable Arrow IPC file" in trace.skipped[str(bad)]
    assert trace.metadata["skipped"] == [str(bad)]
    assert sorted(set(trace.table["session_id"].to_pylist())) == ["s0", "s2"]
    assert len(trace.calls) == 8
    with pytest.raises(ors_lab.TraceFormatError, match=r"part-000000001\.arrow"):
        ors_lab.Recorder(path, append=True)  # appending would lose the bad part's rows: refused, nothing changed
    assert bad.exists() and not path.exists()


def test_a_damaged_compacted_trace_skips_only_its_bad_row_groups(tmp_path: Path, parts_of_a_killed_run: Path) -> None:
    """A compacted trace with a damaged row group: TraceFormatError; skip_bad_parts=True reads the other row groups."""
    path = tmp_path / "run.parquet"
    table = pq.read_table(_compacted(tmp_path / "src.parquet", parts_of_a_killed_run))
    pq.write_table(table, path, row_group_size=8, compression="none")
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 3
    column = meta.row_group(1).column(meta.schema.names.index("session_id"))
    data = bytearray(path.read_bytes())
    start = column.data_page_offset
    data[start : start + 40] = b"\xff" * 40  # the page header: the row group cannot be decoded
    path.write_bytes(bytes(data))
    trace = ors_lab.load_trace(path)  # its footer is whole: the damage is found when the rows are read
    with pytest.raises(ors_lab.TraceFormatError, match=rf"(?s){path} row group 1 is not readable.*skip_bad_parts=True"):
        _ = trace.table
    trace = ors_lab.load_trace(path, skip_bad_parts=True)
    assert list(trace.skipped) == [f"{path} row group 1"]
    assert trace.table["seq"].to_pylist() == [*range(8), *range(16, 24)]


def _compacted(path: Path, source: Path) -> Path:
    _record_in_parts(path, source)
    ors_lab.Recorder(path, append=True).close()
    return path


def _edit_metadata(path: Path, **changes: bytes | None) -> None:
    table = pq.read_table(path)
    metadata = dict(table.schema.metadata or {})
    for key, value in changes.items():
        name = {"version": METADATA_SCHEMA_VERSION, "servers": METADATA_SERVERS, "created": METADATA_CREATED}[key]
        if value is None:
            metadata.pop(name, None)
        else:
            metadata[name] = value
    pq.write_table(table.replace_schema_metadata(metadata), path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"servers": b"[not json"}, r"metadata ors_lab.servers that is not JSON"),
        ({"servers": b'{"a": 1}'}, r"metadata ors_lab.servers that is not a JSON list of URLs"),
        ({"servers": b"[1, 2]"}, r"metadata ors_lab.servers that is not a JSON list of URLs"),
        ({"created": b"\xff\xfe"}, r"metadata b'ors_lab.created' that is not UTF-8 text"),
        ({"version": b"\xff"}, r"metadata b'ors_lab.schema_version' that is not UTF-8 text"),
        ({"version": None}, r"is Parquet but not an ors_lab trace"),
    ],
    ids=["servers-not-json", "servers-object", "servers-numbers", "created-not-utf8", "version-not-utf8", "no-version"],
)
def test_hand_edited_metadata_is_a_trace_format_error(
    tmp_path: Path, parts_of_a_killed_run: Path, changes: dict[str, bytes], message: str
) -> None:
    """Metadata that is not UTF-8, servers not a JSON list: TraceFormatError with the path, on load and on append."""
    path = _compacted(tmp_path / "run.parquet", parts_of_a_killed_run)
    _edit_metadata(path, **changes)
    with pytest.raises(ors_lab.TraceFormatError, match=message) as caught:
        ors_lab.load_trace(path)
    assert str(path) in str(caught.value)
    with pytest.raises(ors_lab.TraceFormatError, match=message):
        ors_lab.Recorder(path, append=True)
    assert path.is_file() and not any(parts_dir(path).glob("part-*"))


def test_null_in_a_never_null_column_is_a_trace_format_error(tmp_path: Path, parts_of_a_killed_run: Path) -> None:
    """A foreign trace with a null seq: TraceFormatError naming the column, not a pandas error later."""
    path = _compacted(tmp_path / "run.parquet", parts_of_a_killed_run)
    table = pq.read_table(path)
    seq = pa.array([None, *table["seq"].to_pylist()[1:]], pa.int64())
    table = table.set_column(table.schema.get_field_index("seq"), pa.field("seq", pa.int64()), seq)
    pq.write_table(table, path)
    trace = ors_lab.load_trace(path)  # the rows are read (and cast) when asked for
    with pytest.raises(ors_lab.TraceFormatError, match=r"Casting field 'seq' with null values"):
        _ = trace.events


def test_garbled_rows_are_a_trace_format_error_in_frames_and_replay(tmp_path: Path) -> None:
    """An episode row whose record (data) is not JSON in a trace older than the episode columns, a response whose
    headers are not JSON: TraceFormatError with the path, when the episodes and the replay read them."""
    from ors_lab.replay.recorded import Recording

    recorded = tmp_path / "recorded.parquet"
    with ors_lab.Recorder(recorded) as rec:
        record(rec, RequestEvent(session_id="s", method="POST", url="http://127.0.0.1:1/create", exchange=0,
                                 body=b'{"env_name":"lab","split":"test","index":0}'))  # fmt: skip
        record(rec, ResponseEvent(session_id="s", status=200, exchange=0, headers='["not", "a", "mapping"]'))
        # emit: the episode row of a trace older than the episode columns, written by hand; no typed event makes it
        rec.emit("episode", layer="agent", session_id="s", data='{"success": true}', environment="lab",
                 split="test", task_index=0, ok=True)  # fmt: skip
    table = pq.read_table(recorded).drop_columns(list(EPISODE_COLUMNS))
    data = pc.if_else(pc.equal(table["kind"], "episode"), "{not json", table["data"])
    table = table.set_column(table.schema.get_field_index("data"), "data", data.cast(pa.large_string()))
    path = tmp_path / "run.parquet"
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, METADATA_SCHEMA_VERSION: b"5"}), path)
    trace = ors_lab.load_trace(path)
    with pytest.raises(ors_lab.TraceFormatError, match=f"{path}.*episode row's record is not a JSON object"):
        _ = trace.episodes
    with pytest.raises(ors_lab.TraceFormatError, match=f"{path}.*headers"):
        Recording(trace)


def test_an_episode_row_written_by_hand_gets_its_figures_from_its_record(tmp_path: Path) -> None:
    """``emit("episode", data=record)`` fills the typed episode columns from the record, as an evaluation's rows
    hold them; a record that is not a JSON object is refused (TypeError) and nothing of the row is kept."""
    path = tmp_path / "run.parquet"
    record = {"success": True, "total_reward": 2.0, "final_reward": 1.0, "finish_reason": "stop",
              "duration_s": 0.5, "started": 1.7e9, "error_type": None}  # fmt: skip
    with ors_lab.Recorder(path) as rec:  # emit: its episode rows given as a record are what this test pins
        rec.emit("episode", layer="agent", session_id="s", data=json.dumps(record), environment="lab",
                 split="test", task_index=0, reward=1.0, ok=True)  # fmt: skip
        for bad in ("{not json", "[1, 2]", '{"success": "very"}'):
            with pytest.raises(TypeError, match=r"episode row|success"):
                rec.emit("episode", layer="agent", session_id="t", data=bad)
    table = ors_lab.load_trace(path).table
    assert table.num_rows == 1
    assert {name: table[name][0].as_py() for name in EPISODE_COLUMNS} == record
    (episode,) = ors_lab.load_trace(path).episodes.to_dict("records")
    assert (episode["success"], episode["total_reward"], episode["finish_reason"]) == (True, 2.0, "stop")


def test_readers_ignore_temporary_and_foreign_files_in_the_parts_folder(
    tmp_path: Path, parts_of_a_killed_run: Path
) -> None:
    """A half-written .tmp part, a stray file named part-x and the lock are not read as parts."""
    path = tmp_path / "run.parquet"
    _record_in_parts(path, parts_of_a_killed_run)
    parts = parts_dir(path)
    (parts / ".part-000000003.arrow.tmp").write_bytes(b"half")
    (parts / "part-notes.txt").write_text("mine")
    trace = ors_lab.load_trace(path)
    assert len(trace.calls) == 12 and not trace.skipped
    json.dumps(trace.metadata)  # plain values only


# -- read where it lies: the footer at load, the columns and row groups asked for when asked -------------


def _damage_column(path: Path, column: str, groups: range | None = None) -> None:
    """Overwrite the first page header of ``column`` in each row group (``groups``: all) so it cannot be decoded."""
    meta = pq.ParquetFile(path).metadata
    data = bytearray(path.read_bytes())
    for group in groups if groups is not None else range(meta.num_row_groups):
        chunk = meta.row_group(group).column(meta.schema.names.index(column))
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        data[start : start + 40] = b"\xff" * 40
    path.write_bytes(bytes(data))


@pytest.fixture
def demo_copy(tmp_path: Path) -> Path:
    """recordings/demo.parquet rewritten in row groups of 500 rows (as the recorder's, but more of them)."""
    path = tmp_path / "demo.parquet"
    pq.write_table(pq.read_table(REPO_ROOT / "recordings" / "demo.parquet"), path, row_group_size=500)
    return path


def test_load_reads_the_footer_and_no_row(demo_copy: Path) -> None:
    """Every column's pages damaged, the footer whole: load_trace, len, repr and metadata work, the first read fails."""
    for column in pq.read_schema(demo_copy).names:
        _damage_column(demo_copy, column)
    trace = ors_lab.load_trace(demo_copy)
    assert len(trace) == 4842 and "events=4842" in repr(trace) and trace.metadata["schema_version"] == "4"
    with pytest.raises(ors_lab.TraceFormatError, match=r"row group 0 is not readable"):
        trace.select(["kind"])


def test_frames_read_only_the_columns_they_need(demo_copy: Path) -> None:
    """The data and body columns damaged: the sessions and episodes' steps frames, which never read them, still
    come out whole; the episodes (their records are in data) say which row group they could not read."""
    before = ors_lab.load_trace(demo_copy)
    sessions, steps = before.sessions, before.steps
    _damage_column(demo_copy, "body")
    _damage_column(demo_copy, "data", range(3, 4))
    trace = ors_lab.load_trace(demo_copy)
    pd.testing.assert_frame_equal(trace.sessions, sessions)
    pd.testing.assert_frame_equal(trace.steps, steps)
    assert trace.select(["session_id", "reward"], kinds=["result"]).num_rows == 138
    with pytest.raises(ors_lab.TraceFormatError, match=rf"{demo_copy} row group 3 is not readable"):
        _ = trace.episodes


def test_a_damaged_row_group_found_at_first_access_is_a_trace_format_error(demo_copy: Path) -> None:
    """A row group whose pages are damaged loads, and is a TraceFormatError naming it where it is first read:
    the table, a frame, a projected read, a page of events; skip_bad_parts=True reads around it."""
    _damage_column(demo_copy, "session_id", range(5, 6))
    trace = ors_lab.load_trace(demo_copy)
    message = rf"{demo_copy} row group 5 is not readable"
    for read in (lambda: trace.table, lambda: trace.calls, lambda: trace.select(["session_id"]),
                 lambda: list(trace.event_pages(kinds=["open"]))):  # fmt: skip
        with pytest.raises(ors_lab.TraceFormatError, match=message):
            read()
    skipped = ors_lab.load_trace(demo_copy, skip_bad_parts=True)
    assert list(skipped.skipped) == [f"{demo_copy} row group 5"] and len(skipped.table) == 4842 - 500


def test_a_trace_of_many_batches_is_read_ahead_the_same_and_names_a_damaged_row_group(tmp_path: Path) -> None:
    """A trace of more row groups than are read at once (the next batch read while one is checked): the same rows
    and frames as the trace read in one batch; a damaged row group in a batch read ahead is named; a scan left
    early leaves no reading thread behind."""
    path = tmp_path / "demo.parquet"
    pq.write_table(pq.read_table(REPO_ROOT / "recordings" / "demo.parquet"), path, row_group_size=100)
    assert pq.ParquetFile(path).num_row_groups > 3 * GROUPS_AT_ONCE
    trace, whole = ors_lab.load_trace(path), ors_lab.load_trace(REPO_ROOT / "recordings" / "demo.parquet")
    columns = ["seq", "kind", "session_id", "reward"]
    assert trace.select(columns, kinds=["open", "result"]).equals(whole.select(columns, kinds=["open", "result"]))
    pd.testing.assert_frame_equal(trace.episodes, whole.episodes)
    pieces = ors_lab.load_trace(path).scan(["seq"])
    next(pieces)
    pieces.close()
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("ors_lab-read")]
    _damage_column(path, "session_id", range(37, 38))
    with pytest.raises(ors_lab.TraceFormatError, match=rf"{path} row group 37 is not readable"):
        ors_lab.load_trace(path).select(["session_id"])


def test_select_reads_columns_and_kinds_in_the_traces_order(demo_copy: Path) -> None:
    """select(columns, kinds=...) is the table's rows of those kinds with those columns, typed as the schema."""
    trace = ors_lab.load_trace(demo_copy)
    table = pq.read_table(demo_copy)
    wanted = table.filter(pa.compute.is_in(table["kind"], value_set=pa.array(["open", "result"])))
    chosen = trace.select(["seq", "session_id", "reward"], kinds=["open", "result"])
    assert chosen.to_pydict() == wanted.select(["seq", "session_id", "reward"]).to_pydict()
    assert chosen.schema.field("reward").type == pa.float64()
    assert trace.select(["seq"], kinds=["no-such-kind"]).num_rows == 0
    with pytest.raises(ValueError, match=r"no trace column 'sessoin_id'; the columns are run_id, seq"):
        trace.select(["sessoin_id"])
    assert "table" not in trace.__dict__  # nothing read whole


def test_event_pages_are_the_events_a_page_at_a_time(demo_copy: Path) -> None:
    """event_pages(rows): frames of at most that many rows that together are trace.events; filtered by kind,
    session and columns, they are the events so filtered."""
    trace = ors_lab.load_trace(demo_copy)
    pages = list(trace.event_pages(700))
    assert [len(page) for page in pages] == [700] * 6 + [642]
    pd.testing.assert_frame_equal(pd.concat(pages, ignore_index=True), trace.events)
    events = trace.events
    session = events.loc[events["kind"] == "open", "session_id"].iloc[3]
    mine = events[(events["session_id"] == session) & events["kind"].isin(["request", "result"])]
    paged = pd.concat(trace.event_pages(5, kinds=["request", "result"], sessions=[session], columns=["seq", "kind"]),
                      ignore_index=True)  # fmt: skip
    pd.testing.assert_frame_equal(paged, mine[["seq", "kind"]].reset_index(drop=True))


def test_events_of_a_trace_too_large_for_memory_are_refused(demo_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """trace.events above EVENTS_ROWS rows: TraceTooLargeError naming the trace and the paged and projected reads."""
    monkeypatch.setattr("ors_lab.analysis.trace.EVENTS_ROWS", 4_000)
    trace = ors_lab.load_trace(demo_copy)
    with pytest.raises(ors_lab.TraceTooLargeError, match=rf"{demo_copy} has 4,842 events.*event_pages.*select"):
        _ = trace.events
    assert len(trace.episodes) == 40  # the frames are built without it
