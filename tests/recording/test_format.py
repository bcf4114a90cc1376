"""The trace format as docs/trace-format.md states it: documented, plain Parquet, declared frames, clear errors."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyarrow import ipc

import ors_lab
from ors_lab.analysis import frames
from ors_lab.demo.env import guessing_tasks
from ors_lab.demo.launch import ServerProcess
from ors_lab.events import PingEvent, RequestEvent
from ors_lab.recording.columns import (
    COLUMNS,
    EPISODE_COLUMNS,
    KIND_LAYER,
    LAYERS,
    METADATA_CREATED,
    METADATA_RUN_ID,
    METADATA_SCHEMA_VERSION,
    METADATA_SERVERS,
    METADATA_VERSION,
    SCHEMA_VERSION,
)
from ors_lab.recording.parts import parts_dir
from ors_lab.recording.schema import AGENT_KINDS, SCHEMA
from tests.envs import common
from tests.scripted_demo import guess_by_bisection, solve_arithmetic

DOC = Path(__file__).resolve().parents[2] / "docs" / "trace-format.md"
DECLARED: dict[str, dict[str, pa.DataType]] = {"events": {field.name: field.type for field in SCHEMA}, **frames.FRAMES}


# -- reading the document ------------------------------------------------------------------------


def doc_table(heading: str) -> list[dict[str, str]]:
    """The first Markdown table after the line starting with `heading`, as dicts (backticks stripped)."""
    lines = DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("#") and rows == []:
            break  # the next heading came before any table
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    header, _rule, *body = rows
    assert all(len(row) == len(header) for row in body), f"a row of the table under {heading!r} has stray '|'"
    return [{name: cell.strip("`") for name, cell in zip(header, row, strict=True)} for row in body]


def doc_blocks(language: str) -> list[str]:
    """Every fenced code block of `language` in the document."""
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


# -- recording ----------------------------------------------------------------------------------


@dataclass
class DemoRun:
    """A trace recorded from the demo server, and what the client itself received."""

    path: Path
    url: str
    guesses: list[ors_lab.ToolResult]
    arithmetic: list[ors_lab.ToolResult]
    started: dt.datetime
    ended: dt.datetime

    @property
    def results(self) -> list[ors_lab.ToolResult]:
        """Every result the client got, in order."""
        return self.guesses + self.arithmetic


@pytest.fixture(scope="module")
def demo_run(demo_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """Guessing test/0 by bisection (split and index), arithmetic test/0 solved (task spec), one HTTP 400."""
    path = tmp_path_factory.mktemp("format") / "run.parquet"
    started = dt.datetime.now(dt.UTC)
    with ors_lab.Recorder(path) as rec, ors_lab.Client(demo_server.url, recorder=rec) as client:
        with pytest.raises(ors_lab.TaskIndexError, match="no task 99"):  # an HTTP 400
            client.environment("guessing").task("test", 99)
        with client.environment("guessing").session(split="test", index=0) as session:
            guesses = guess_by_bisection(session)
        arithmetic = client.environment("arithmetic")
        with arithmetic.session(task=arithmetic.task("test", 0)) as session:
            solved = solve_arithmetic(session)
    return DemoRun(path, demo_server.url, guesses, solved, started, dt.datetime.now(dt.UTC))


@pytest.fixture(scope="module")
def empty_trace(tmp_path_factory: pytest.TempPathFactory) -> ors_lab.Trace:
    """A recorder closed without any event."""
    path = tmp_path_factory.mktemp("empty") / "empty.parquet"
    ors_lab.Recorder(path).close()
    return ors_lab.load_trace(path)


@pytest.fixture
def crash_trace(reference_server: ServerProcess, tmp_path: Path) -> ors_lab.Trace:
    """A lab session whose first call raised on the server (`crash`), then a correct `submit`."""
    path = tmp_path / "crash.parquet"
    with ors_lab.Recorder(path) as rec, ors_lab.Client(reference_server.url, recorder=rec) as client:
        with client.environment("lab").session(split="train", index=0) as session:
            with pytest.raises(ors_lab.ToolError, match=common.CRASH_MESSAGE):
                session.call("crash")
            assert session.call("submit", {"answer": "4"}).reward == 1.0
    return ors_lab.load_trace(path)


# -- the document matches the code ---------------------------------------------------------------


def test_every_schema_column_is_in_the_column_table_and_nothing_else() -> None:
    """The column table lists exactly the schema's columns, in schema order, with their Arrow types."""
    table = doc_table("## Columns")
    assert [row["column"] for row in table] == list(COLUMNS)
    assert {row["column"]: row["Arrow type"] for row in table} == {f.name: str(f.type) for f in SCHEMA}


def test_never_null_columns_are_marked_so() -> None:
    """Exactly the schema's non-nullable columns are marked *Never null.* in the column table."""
    marked = {row["column"] for row in doc_table("## Columns") if "*Never null.*" in row["meaning"]}
    assert marked == {field.name for field in SCHEMA if not field.nullable}


def test_every_kind_is_documented_with_its_layer() -> None:
    """The kinds table is KIND_LAYER exactly, every layer is described, and the agent kinds are listed in order."""
    kinds = doc_table("## Layers and kinds")
    assert {row["kind"]: row["layer"] for row in kinds} == KIND_LAYER
    text = DOC.read_text()
    for layer in LAYERS:
        assert f"- `{layer}`: " in text, layer
    agent = doc_table("The `agent` layer's kinds")
    listed = [kind for row in agent for kind in row["agent kind"].split("`, `")]
    assert listed == list(AGENT_KINDS)


def test_every_metadata_key_is_documented() -> None:
    """The metadata table lists every key the recorder writes."""
    keys = {row["key"] for row in doc_table("## File-level metadata")}
    written = {METADATA_SCHEMA_VERSION, METADATA_VERSION, METADATA_CREATED, METADATA_SERVERS, METADATA_RUN_ID}
    assert {key.decode() for key in written} | {"ors_lab.partial"} <= keys


@pytest.mark.parametrize("name", list(frames.FRAMES))
def test_derived_frame_tables_match_their_declared_columns(name: str) -> None:
    """Each derived DataFrame's table in the document lists its declared columns, in order, with their types."""
    table = doc_table(f"### `trace.{name}")
    assert [(row["column"], row["Arrow type"]) for row in table] == [
        (column, str(kind)) for column, kind in DECLARED[name].items()
    ]


def test_the_documented_sql_runs_on_a_recorded_trace(demo_run: DemoRun) -> None:
    """Every SQL example (but the partial-trace one) runs in DuckDB; the rewards-per-tool one adds up."""
    blocks = [block for block in doc_blocks("sql") if ".parts" not in block]
    assert len(blocks) >= 4
    outputs = {block: duckdb.sql(block.replace("run.parquet", str(demo_run.path))).fetchall() for block in blocks}
    per_tool = next(rows for block, rows in outputs.items() if "GROUP BY environment, tool" in block)
    guess = next(row for row in per_tool if row[:2] == ("guessing", "guess"))
    assert guess[2:5] == (len(demo_run.guesses), len(demo_run.guesses), 1.0)
    http_errors = next(rows for block, rows in outputs.items() if "r.status >= 400" in block)
    assert http_errors == [(400, "POST", f"{demo_run.url}/guessing/task", '{"detail":"Invalid index"}')]


# -- plain Parquet ------------------------------------------------------------------------------


def test_duckdb_reads_what_the_client_received(demo_run: DemoRun) -> None:
    """DuckDB alone counts the result rows and sums their rewards as the client saw them."""
    [(count, total)] = duckdb.sql(
        f"select count(*), sum(reward) from read_parquet('{demo_run.path}') where kind = 'result'"
    ).fetchall()
    assert count == len(demo_run.results)
    assert total == sum(result.reward or 0.0 for result in demo_run.results)
    seqs = duckdb.sql(f"select seq from read_parquet('{demo_run.path}')").fetchall()
    assert [seq for (seq,) in seqs] == list(range(len(seqs)))  # stored in seq order, without gaps


def test_polars_reads_what_the_client_received(demo_run: DemoRun) -> None:
    """Polars alone reads every column, and the results' rewards and finished flags in order."""
    frame = pl.read_parquet(demo_run.path)
    assert frame.columns == list(COLUMNS)
    results = frame.filter(pl.col("kind") == "result")
    assert results["reward"].to_list() == [result.reward for result in demo_run.results]
    assert results["finished"].to_list() == [result.finished for result in demo_run.results]


def test_plain_pandas_reads_it_without_ors_lab(demo_run: DemoRun) -> None:
    """`pd.read_parquet` in a fresh process, with no ors_lab import, gets the results and their rewards."""
    code = textwrap.dedent(
        f"""
        import json, sys
        import pandas as pd
        events = pd.read_parquet({str(demo_run.path)!r})
        results = events[events["kind"] == "result"]
        print(json.dumps([list(events.columns), results["reward"].tolist(), "ors_lab" in sys.modules]))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    columns, rewards, imported = json.loads(done.stdout)
    assert columns == list(COLUMNS)
    assert [None if r != r else r for r in rewards] == [result.reward for result in demo_run.results]  # NaN → None
    assert imported is False


def test_file_metadata_names_version_creation_and_server(demo_run: DemoRun) -> None:
    """The Parquet metadata holds the schema version, ors_lab version, creation time and server origin."""
    metadata = pq.read_schema(demo_run.path).metadata
    assert metadata[METADATA_SCHEMA_VERSION] == SCHEMA_VERSION.encode()
    assert metadata[METADATA_VERSION] == ors_lab.__version__.encode()
    created = dt.datetime.fromisoformat(metadata[METADATA_CREATED].decode())
    assert demo_run.started <= created <= demo_run.ended
    assert json.loads(metadata[METADATA_SERVERS]) == [demo_run.url]
    assert metadata[b"ors_lab.partial"] == b"false"
    run_ids = pq.read_table(demo_run.path, columns=["run_id"])["run_id"].unique().to_pylist()
    assert run_ids == [metadata[METADATA_RUN_ID].decode()]
    trace = ors_lab.load_trace(demo_run.path)
    assert trace.metadata == {
        "schema_version": SCHEMA_VERSION,
        "ors_lab_version": ors_lab.__version__,
        "created": created.isoformat(),
        "servers": [demo_run.url],
        "run_id": metadata[METADATA_RUN_ID].decode(),
        "partial": False,
        "skipped": [],
    }


def test_the_documented_partial_recipes_read_an_unclosed_recording(tmp_path: Path) -> None:
    """While recording, the parts read in seq order with DuckDB, Polars, pandas and load_trace, as documented."""
    path = tmp_path / "run.parquet"
    rec = ors_lab.Recorder(path, flush_interval=0.02)
    try:
        for n in range(3):
            rec.record(PingEvent(session_id="s"))
            wait_for(lambda n=n: len(list(parts_dir(path).glob("part-*.arrow"))) > n)
        parts = parts_dir(path)
        (parts / ".part-000000009.arrow.tmp").write_bytes(b"half a part")  # what a kill mid-write leaves
        recording = ds.dataset(parts, format="arrow")  # noqa: F841 (DuckDB finds it by its name)
        assert duckdb.sql("SELECT seq FROM recording ORDER BY seq").fetchall() == [(0,), (1,), (2,)]
        assert pl.read_ipc(f"{parts}/part-*.arrow").sort("seq")["seq"].to_list() == [0, 1, 2]
        frames = map(pd.read_feather, sorted(parts.glob("part-*.arrow")))
        assert pd.concat(frames).sort_values("seq")["seq"].tolist() == [0, 1, 2]
        trace = ors_lab.load_trace(path)
        assert trace.partial and trace.events["seq"].tolist() == [0, 1, 2]
        assert ipc.open_file(parts / "part-000000000.arrow").schema.metadata[b"ors_lab.partial"] == b"true"
    finally:
        rec.close()
    assert not parts_dir(path).exists() and not ors_lab.load_trace(path).partial


def test_a_partial_trace_names_every_server_its_parts_saw(tmp_path: Path) -> None:
    """`load_trace` of a partial trace lists the servers of all its parts, not only the first part's."""
    path = tmp_path / "run.parquet"
    rec = ors_lab.Recorder(path, flush_interval=0.02)
    try:
        rec.record(RequestEvent(method="GET", url="http://first.example:1/health"))
        wait_for(lambda: len(list(parts_dir(path).glob("part-*.arrow"))) == 1)
        rec.record(RequestEvent(method="GET", url="http://second.example:2/health"))
        wait_for(lambda: len(list(parts_dir(path).glob("part-*.arrow"))) == 2)
        assert ors_lab.load_trace(path).metadata["servers"] == ["http://first.example:1", "http://second.example:2"]
    finally:
        rec.close()


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll `condition` until it holds, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# -- declared DataFrames ------------------------------------------------------------------------


def frame_of(trace: ors_lab.Trace, name: str) -> pd.DataFrame:
    value = getattr(trace, name)
    return value() if callable(value) else value  # summary() is a method


def assert_declared(trace: ors_lab.Trace) -> None:
    """Every DataFrame of `trace` has its declared columns, in order, as `pd.ArrowDtype(type)` (and
    `tasks` and `summary` a pass@k column per k)."""
    ks = frames.default_ks(trace.episodes)
    for name, declared in DECLARED.items():
        columns = {**declared, **frames.pass_columns(ks)} if name in ("tasks", "summary") else declared
        frame = frame_of(trace, name)
        assert list(frame.columns) == list(columns), name
        assert dict(frame.dtypes) == {column: pd.ArrowDtype(kind) for column, kind in columns.items()}, name


def test_frames_of_a_recorded_run_have_the_declared_dtypes(demo_run: DemoRun) -> None:
    """events, calls, sessions, steps and episodes of a real run have exactly their declared dtypes."""
    assert_declared(ors_lab.load_trace(demo_run.path))


def test_frames_of_an_empty_trace_have_the_declared_dtypes(empty_trace: ors_lab.Trace) -> None:
    """A recorder closed with no events gives empty frames with the same declared dtypes."""
    assert len(empty_trace) == 0
    assert_declared(empty_trace)
    for name in DECLARED:
        if name != "summary":  # one row, whatever the trace holds
            assert frame_of(empty_trace, name).empty, name
    assert empty_trace.summary()["episodes"].tolist() == [0]


def test_frames_of_a_trace_with_a_call_that_raised(crash_trace: ors_lab.Trace) -> None:
    """A call that raised is a call_error call and an episode error, not a step; dtypes stay declared."""
    assert_declared(crash_trace)
    calls = crash_trace.calls
    assert calls["tool"].tolist() == ["crash", "submit"]
    assert calls["outcome"].tolist() == ["call_error", "result"]
    assert calls["error"].iloc[0] == f"ToolError: {common.CRASH_MESSAGE}"
    assert calls["task_id"].notna().all()
    steps = crash_trace.steps
    assert steps[["step", "call", "tool", "reward"]].values.tolist() == [[1, 2, "submit", 1.0]]
    (episode,) = crash_trace.episodes.to_dict("records")
    assert (episode["steps"], episode["errors"], episode["total_reward"], episode["finished"]) == (1, 1, 1.0, True)
    assert crash_trace.sessions["errors"].tolist() == [1] and crash_trace.sessions["calls"].tolist() == [2]


# -- values of a known episode -------------------------------------------------------------------


def test_guessing_by_bisection_reduces_to_one_rewarded_finished_episode(demo_run: DemoRun) -> None:
    """Bisection: rewards 0.0 until the last guess's 1.0, finished only then; the episode totals 1.0."""
    trace = ors_lab.load_trace(demo_run.path)
    n = len(demo_run.guesses)
    secret = guessing_tasks("test")[0]["secret"]
    assert 1 < n <= 7

    calls = trace.calls[trace.calls["environment"] == "guessing"]
    assert calls["call"].tolist() == list(range(1, n + 1))
    assert calls["tool"].tolist() == ["guess"] * n
    assert json.loads(calls["input"].iloc[-1]) == {"number": secret}
    assert calls["outcome"].tolist() == ["result"] * n
    assert calls["ok"].tolist() == [True] * n
    assert calls["reward"].tolist() == [0.0] * (n - 1) + [1.0]
    assert calls["finished"].tolist() == [False] * (n - 1) + [True]
    assert calls["task_id"].tolist() == [result.task_id for result in demo_run.guesses]
    assert (calls["attempts"] == 1).all() and (calls["chunks"] >= 1).all() and (calls["bytes"] > 0).all()
    assert (calls["duration_ms"] >= calls["ttfb_ms"]).all() and (calls["ttfb_ms"] > 0).all()

    steps = trace.steps[trace.steps["environment"] == "guessing"]
    assert steps["step"].tolist() == list(range(1, n + 1))
    assert steps["reward"].tolist() == [0.0] * (n - 1) + [1.0]
    assert steps[["split", "task_index"]].drop_duplicates().values.tolist() == [["test", 0]]

    episodes = trace.episodes.set_index("environment")
    guessing = episodes.loc["guessing"]
    assert (guessing["steps"], guessing["errors"]) == (n, 0)
    assert guessing["total_reward"] == guessing["final_reward"] == 1.0
    assert guessing["finished"]
    arithmetic = episodes.loc["arithmetic"]
    assert (arithmetic["steps"], arithmetic["total_reward"], arithmetic["final_reward"]) == (2, 1.0, 1.0)
    assert json.loads(arithmetic["task"])["id"] == "arithmetic-test-0"
    assert pd.isna(arithmetic["split"]) and pd.isna(arithmetic["task_index"])  # opened with a task spec

    sessions = trace.sessions.set_index("environment")
    assert sessions.loc["guessing", "calls"] == n
    assert (sessions["closed"] >= sessions["opened"]).all()


# -- load_trace errors ---------------------------------------------------------------------------


def _write_wrong_version(path: Path) -> None:
    """A trace-shaped Parquet file whose schema version is "999"."""
    metadata = {METADATA_SCHEMA_VERSION: b"999"}
    pq.write_table(SCHEMA.empty_table().replace_schema_metadata(metadata), path)


def test_a_version_2_trace_loads_with_a_null_rollout(demo_run: DemoRun, tmp_path: Path) -> None:
    """A trace written before the rollout column (version 2) still loads, its rollout null."""
    table = pq.read_table(demo_run.path)
    metadata = {**table.schema.metadata, METADATA_SCHEMA_VERSION: b"2"}
    old = tmp_path / "old.parquet"
    pq.write_table(table.drop_columns(["rollout"]).replace_schema_metadata(metadata), old)
    trace = ors_lab.load_trace(old)
    assert trace.table.num_rows == table.num_rows
    assert trace.table["rollout"].null_count == table.num_rows
    assert trace.table.schema.names == table.schema.names


@pytest.mark.parametrize(
    ("version", "added"),
    [("3", ["input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens"]), ("4", ["worker"])],
    ids=["version-3-tokens", "version-4-worker"],
)
def test_an_older_trace_loads_with_the_later_columns_null(
    demo_run: DemoRun, tmp_path: Path, version: str, added: list[str]
) -> None:
    """A trace written before the token columns (version 3) or the worker column (version 4) still loads,
    those columns null, its frames whole."""
    table = pq.read_table(demo_run.path)
    metadata = {**table.schema.metadata, METADATA_SCHEMA_VERSION: version.encode()}
    old = tmp_path / "old.parquet"
    pq.write_table(table.drop_columns(added).replace_schema_metadata(metadata), old)
    trace = ors_lab.load_trace(old)
    assert trace.table.schema.names == table.schema.names
    assert all(trace.table[name].null_count == table.num_rows for name in added)
    assert trace.episodes.equals(ors_lab.load_trace(demo_run.path).episodes)


def test_a_version_5_trace_reads_its_episode_columns_from_its_records(
    demo_server: ServerProcess, tmp_path: Path
) -> None:
    """A trace written before the episode columns (version 5) loads with them read from its episode rows'
    records: the values the recorder writes today, on the episode rows only, in every read (the whole table, a
    projected select, the frames)."""
    from ors_lab.demo.agent import DemoAgent

    path = tmp_path / "run.parquet"
    with ors_lab.Client(demo_server.url) as client:
        ors_lab.evaluate(client.environment("guessing"), DemoAgent(pace=0), split="test", tasks=[0, 1, 2, 3],
                         rollouts=2, max_steps=4, record=path, progress=False)  # fmt: skip  # some episodes fail
    table = pq.read_table(path)
    episode_rows = pc.equal(table["kind"], "episode")
    assert pc.sum(episode_rows).as_py() == 8
    assert table["success"].null_count == table.num_rows - 8
    metadata = {**table.schema.metadata, METADATA_SCHEMA_VERSION: b"5"}
    old = tmp_path / "old.parquet"
    pq.write_table(table.drop_columns(list(EPISODE_COLUMNS)).replace_schema_metadata(metadata), old, row_group_size=97)
    trace = ors_lab.load_trace(old)
    assert trace.table.select(list(EPISODE_COLUMNS)).equals(table.select(list(EPISODE_COLUMNS)))
    selected = ors_lab.load_trace(old).select(["session_id", "success", "finish_reason"], kinds=["episode"])
    assert selected.equals(table.filter(episode_rows).select(["session_id", "success", "finish_reason"]))
    episodes = ors_lab.load_trace(old).episodes
    assert episodes.equals(ors_lab.load_trace(path).episodes)
    assert set(episodes["success"]) == {True, False}  # both kinds of episode


def test_an_older_traces_record_longer_than_a_json_block_is_read(tmp_path: Path) -> None:
    """A version 5 trace whose episode record is longer than Arrow's JSON reader's default block (1 MB, here a
    3 MB error message) gives its episode columns like the others."""
    path = tmp_path / "run.parquet"
    records = [{"success": n != 1, "total_reward": float(n), "error": "x" * (3_000_000 if n == 1 else 10)}
               for n in range(3)]  # fmt: skip
    with ors_lab.Recorder(path) as rec:
        for n, record in enumerate(records):  # emit: a version 5 episode row is its record only, as no event is
            rec.emit("episode", layer="agent", session_id=f"s{n}", data=json.dumps(record))
    table = pq.read_table(path)
    old = tmp_path / "old.parquet"
    metadata = {**table.schema.metadata, METADATA_SCHEMA_VERSION: b"5"}
    pq.write_table(table.drop_columns(list(EPISODE_COLUMNS)).replace_schema_metadata(metadata), old)
    read = ors_lab.load_trace(old).select(["success", "total_reward"], kinds=["episode"])
    assert read.to_pylist() == [{"success": r["success"], "total_reward": r["total_reward"]} for r in records]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (None, r"^no trace at .*missing\.parquet$"),
        (lambda p: p.write_text("not parquet at all\n"), r"is not a readable Parquet file"),
        (lambda p: pd.DataFrame({"a": [1, 2]}).to_parquet(p), r"is Parquet but not an ors_lab trace"),
        (_write_wrong_version, r"has trace schema version 999; this ors_lab reads versions 2, 3, 4, 5, 6$"),
    ],
    ids=["missing", "not-parquet", "not-a-trace", "wrong-version"],
)
def test_load_trace_errors_say_what_is_wrong(tmp_path: Path, make: Callable[[Path], Any] | None, message: str) -> None:
    """A missing path, a non-Parquet file, a foreign Parquet file and a wrong version raise TraceFormatError."""
    path = tmp_path / "missing.parquet"
    if make is not None:
        make(path)
    with pytest.raises(ors_lab.TraceFormatError, match=message) as caught:
        ors_lab.load_trace(path)
    assert str(path) in str(caught.value)
