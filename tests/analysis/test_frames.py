"""The run's DataFrames from a trace's rows (steps, episodes, tasks, errors, summary), on runs of known numbers."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ors_lab as ol
from ors_lab.analysis import frames
from ors_lab.analysis.trace import GROUPS_AT_ONCE
from ors_lab.events import EpisodeEvent, EventStream, StartEvent
from ors_lab.recording import Recorder
from ors_lab.recording.parts import parts_dir
from ors_lab.recording.recorder import DICTIONARY_COLUMNS
from tests.analysis import frames_before
from tests.analysis.synthetic import Episode, events, record

REPO_ROOT = Path(__file__).resolve().parents[2]

RUN = [
    Episode(0, 0, [0.0, 1.0]),
    Episode(0, 1, [0.0, 0.0], finished=False),
    Episode(0, 2, [1.0]),
    Episode(1, 0, [0.5], error="boom"),
    Episode(1, 1, [None, 0.25], crashes=1),
    Episode(1, 2, [], finished=False),
]


def test_an_evaluations_episodes_are_what_it_recorded(tmp_path: Path) -> None:
    """Each episode row: the recorded reward, success, finish reason and error; steps and errors from its rows."""
    trace = record(tmp_path / "run.parquet", RUN[::-1])  # recorded out of order: the frame is in task, rollout order
    episodes = trace.episodes
    keys = list(zip(episodes["task_index"], episodes["rollout"], strict=True))
    assert keys == [(t, r) for t in (0, 1) for r in range(3)]
    assert episodes["reward"].tolist() == [1.0, 0.0, 1.0, 0.0, 0.25, 0.0]
    assert episodes["total_reward"].tolist()[:5] == [1.0, 0.0, 1.0, 0.5, 0.25]
    assert pd.isna(episodes["total_reward"].iloc[5]) and pd.isna(episodes["final_reward"].iloc[5])
    assert episodes["success"].tolist() == [True, False, True, False, False, False]
    assert episodes["finished"].tolist() == [True, False, True, True, True, False]
    assert episodes["steps"].tolist() == [2, 2, 1, 1, 2, 0]
    assert episodes["errors"].tolist() == [0, 0, 0, 0, 1, 0]
    assert episodes["finish_reason"].tolist() == ["stop", "stop", "stop", "error", "stop", "stop"]
    assert episodes["error"].fillna("-").tolist() == ["-", "-", "-", "boom", "-", "-"]
    assert episodes["error_type"].fillna("-").tolist() == ["-", "-", "-", "ToolError", "-", "-"]
    assert (episodes["duration_s"] == 0.5).all() and episodes["started"].notna().all()
    assert episodes["session_id"].tolist() == [e.session_id for e in RUN]


def test_steps_are_the_calls_that_returned(tmp_path: Path) -> None:
    """A step per result (calls that raised are not steps), numbered per episode, with the episode's rollout."""
    steps = record(tmp_path / "run.parquet", RUN).steps
    crashed = steps[steps["session_id"] == RUN[4].session_id]
    assert (crashed["step"].tolist(), crashed["call"].tolist()) == ([1, 2], [2, 3])
    assert pd.isna(crashed["reward"].iloc[0]) and crashed["reward"].iloc[1] == 0.25
    assert steps.groupby("session_id", sort=False)["step"].max().tolist() == [2, 2, 1, 1, 2]
    assert steps["rollout"].tolist() == [0, 0, 1, 1, 2, 0, 1, 1]
    assert steps["tool"].unique().tolist() == ["step"]


def test_sessions_no_evaluation_ran_reduce_their_steps(tmp_path: Path) -> None:
    """A bare client's sessions: reward is the steps' sum (or the reduction asked), success by the threshold."""
    trace = record(tmp_path / "run.parquet", RUN, evaluated=False)
    episodes = trace.episodes
    assert episodes["rollout"].isna().all() and episodes["finish_reason"].isna().all()
    assert episodes["reward"].tolist() == [1.0, 0.0, 1.0, 0.5, 0.25, 0.0]
    assert episodes["success"].tolist() == [True, False, True, False, False, False]
    final = frames.episodes_frame(trace.table, reward="final", success_threshold=0.5)
    assert final["reward"].tolist() == [1.0, 0.0, 1.0, 0.5, 0.25, 0.0]
    assert final["success"].tolist() == [True, False, True, True, False, False]
    largest = frames.episodes_frame(trace.table, reward=lambda steps: len(steps))
    assert largest["reward"].tolist() == [2.0, 2.0, 1.0, 1.0, 2.0, 0.0]
    assert (episodes["started"] <= episodes["started"] + pd.to_timedelta(episodes["duration_s"], unit="s")).all()


def test_tasks_aggregate_their_episodes(tmp_path: Path) -> None:
    """Per task: mean reward, its standard error, success and finished rates, pass@1 and pass@3, errors."""
    tasks = record(tmp_path / "run.parquet", RUN).tasks.set_index("task_index")
    assert list(tasks.columns[-2:]) == ["pass@1", "pass@3"]
    assert tasks.loc[0, "episodes"] == 3 and tasks.loc[0, "mean_reward"] == pytest.approx(2 / 3)
    assert tasks.loc[0, "stderr"] == pytest.approx(math.sqrt((1 / 3) / 3))
    assert tasks.loc[0, "pass@1"] == pytest.approx(2 / 3) and tasks.loc[0, "pass@3"] == 1.0
    assert tasks.loc[1, "success_rate"] == 0.0 and tasks.loc[1, "errors"] == 1 and tasks.loc[1, "pass@3"] == 0.0
    assert tasks.loc[1, "finished_rate"] == pytest.approx(2 / 3)
    assert tasks.loc[0, "mean_steps"] == pytest.approx(5 / 3)
    assert tasks["input_tokens"].isna().all()


def test_summary_is_the_run_in_one_row(tmp_path: Path) -> None:
    """summary(): episodes, tasks, the mean reward and its stderr over all episodes, pass@k averaged over tasks."""
    trace = record(tmp_path / "run.parquet", RUN)
    row = trace.summary().iloc[0]
    counts = (row["environments"], row["splits"], row["episodes"], row["tasks"], row["errors"])
    assert counts == ("lab", "test", 6, 2, 1)
    assert row["mean_reward"] == pytest.approx(2.25 / 6)
    assert row["pass@3"] == pytest.approx(0.5) and row["pass@1"] == pytest.approx((2 / 3 + 0) / 2)
    assert trace.errors["error"].tolist() == ["boom"]


SMALL = [
    Episode(0, 0, [0.05, None, 0.1]),
    Episode(0, 1, [0.02]),
    Episode(1, 0, [0.0]),
    Episode(1, 1, [0.3], error="boom"),
]
"""Dense small rewards (a port's 0.15 a shift): none reaches the default success_threshold of 1.0."""


def test_small_rewards_that_never_succeed_say_why_and_name_the_argument(tmp_path: Path) -> None:
    """No success while rewards are positive: summary()["note"] says so (the episodes without error that earned a
    positive reward, the highest) and names success_threshold=, and the summary shows it; otherwise no note."""
    summary = record(tmp_path / "small.parquet", SMALL).summary()
    row = summary.iloc[0]
    assert (row["success_rate"], row["pass@1"], row["pass@2"]) == (0.0, 0.0, 0.0)
    note = row["note"]
    assert note == (
        "success and pass@k are 0: no episode reached the success threshold (success_threshold=, 1.0 by default), "
        "though 2 of 4 earned a positive reward (the highest 0.15); pass evaluate(..., success_threshold=) the reward "
        "a success earns"
    )
    assert any(line.split(maxsplit=1) == ["note", note] for line in repr(summary).splitlines())
    assert f"<td>{note}</td>" in summary._repr_html_()
    assert pd.isna(record(tmp_path / "run.parquet", RUN).summary().iloc[0]["note"])  # a success: nothing to say
    zeros = [Episode(0, 0, [0.0]), Episode(0, 1, [None])]
    assert pd.isna(record(tmp_path / "zeros.parquet", zeros).summary().iloc[0]["note"])  # no reward to lower it to
    assert "note" not in repr(record(tmp_path / "zeros2.parquet", zeros).summary())


def test_what_the_summary_shows_is_what_indexes_it(tmp_path: Path) -> None:
    """Every label the summary's table shows, as text and as HTML, indexes summary() to the value shown
    (no header such as `value` that raises KeyError)."""
    for trace in (record(tmp_path / "run.parquet", RUN), record(tmp_path / "small.parquet", SMALL)):
        summary = trace.summary()
        shown = [line.split(maxsplit=1) for line in repr(summary).splitlines()]
        for label, *text in shown:
            value = summary[label].iloc[0]
            assert text == [f"{value:.4g}" if isinstance(value, float) else str(value)], label
        headers = re.findall(r"<th>(.*?)</th>", summary._repr_html_())
        assert headers == [label for label, *_ in shown] and "mean_reward" in headers
        assert summary.vertical()["value"].tolist() == [text for _, text in shown]


def test_an_episode_that_failed_before_its_session_opened_is_an_episode(tmp_path: Path) -> None:
    """An evaluation's episode whose session never opened (only start and episode rows) is a row, with its error."""
    path = tmp_path / "run.parquet"
    stream = EventStream()
    with Recorder(path) as recorder:
        stream.subscribe(recorder)
        stream.publish(StartEvent(session_id="s", rollout=0, message_id="s", environment="lab", split="test",
                                  task_index=4))  # fmt: skip
        stream.publish(EpisodeEvent(session_id="s", rollout=0, environment="lab", split="test", task_index=4,
                                    reward=0.0, total_reward=None, final_reward=None, finished=False, success=False,
                                    finish_reason="error", steps=0, started=1.0, duration_s=0.1, error="HTTP 404",
                                    error_type="ServerError"))  # fmt: skip
    from ors_lab import load_trace

    (episode,) = load_trace(path).episodes.to_dict("records")
    assert (episode["task_index"], episode["rollout"], episode["error"], episode["steps"]) == (4, 0, "HTTP 404", 0)
    assert episode["started"] == pd.Timestamp(1.0, unit="s", tz="UTC")


# -- the frames built by Arrow where the trace lies are the frames built before, from the whole table -----

FRAMES = ("calls", "sessions", "steps", "episodes", "tasks", "errors", "transcripts")


def _before(table: pa.Table) -> dict[str, pd.DataFrame]:
    """Every frame of ``table`` as the builders before (pandas over the whole table) made it."""
    episodes = frames_before.episodes_frame(table)
    return {
        "calls": frames_before.calls_frame(table),
        "sessions": frames_before.sessions_frame(table),
        "steps": frames_before.steps_frame(table),
        "episodes": episodes,
        "tasks": frames_before.tasks_frame(episodes),
        "errors": frames_before.errors_frame(episodes),
        "transcripts": frames_before.transcripts_frame(table),
        "summary": pd.DataFrame(frames_before.summary_frame(episodes)),
        "listing": frames_before.listing_frame(table),
    }


def _assert_same_frames(path: Path) -> None:
    """Each frame of the trace at ``path``, read where it lies, and of its rows in memory (as an evaluation
    keeps them), equals the frame built before: columns, dtypes, values and order."""
    before = _before(ol.load_trace(path).table)
    trace = ol.load_trace(path)  # a fresh trace: its frames read the file, never the whole table
    now = {name: getattr(trace, name) for name in FRAMES}
    assert "table" not in trace.__dict__
    now["summary"] = pd.DataFrame(trace.summary())
    now["listing"] = frames.listing_frame(trace)
    table = ol.load_trace(path).table
    in_memory = {"episodes": frames.episodes_frame(table), "steps": frames.steps_frame(table),
                 "calls": frames.calls_frame(table), "listing": frames.listing_frame(table)}  # fmt: skip
    for name, frame in [*now.items(), *in_memory.items()]:
        pd.testing.assert_frame_equal(frame, before[name], check_exact=True, obj=f"{path.name} {name}")
    assert frames.finished_episodes(trace) == frames_before.finished_episodes(table)
    assert len(before["episodes"]) > 0


@pytest.mark.parametrize("name", ["demo.parquet", "openai-arithmetic.parquet", "claude-arithmetic.parquet"])
def test_recorded_runs_make_the_same_frames_as_before(name: str) -> None:
    """The real recordings (a streaming demo agent, an LLM agent with tokens): every frame as it was."""
    _assert_same_frames(REPO_ROOT / "recordings" / name)


@pytest.mark.parametrize("evaluated", [True, False], ids=["evaluated", "sessions-only"])
def test_synthetic_runs_make_the_same_frames_as_before(tmp_path: Path, evaluated: bool) -> None:
    """Errors, crashes, steps without rewards, rewards like 0.1 + 0.2; with and without the evaluation's rows."""
    run = [*RUN, Episode(2, 0, [0.1, 0.2, 0.3]), Episode(2, 1, [0.7, None, 0.1], crashes=2)]
    record(tmp_path / "run.parquet", run, evaluated=evaluated)
    _assert_same_frames(tmp_path / "run.parquet")


@pytest.mark.parametrize("name", ["demo.parquet", "openai-arithmetic.parquet"])
def test_a_trace_read_in_many_pieces_makes_the_same_frames_as_before(tmp_path: Path, name: str) -> None:
    """A recording rewritten in row groups of 7 rows (dictionary-encoded as the recorder's), so that it is read in
    many pieces and its calls' rows straddle them: every frame as it was."""
    path = tmp_path / name
    pq.write_table(pq.read_table(REPO_ROOT / "recordings" / name), path, row_group_size=7,
                   use_dictionary=DICTIONARY_COLUMNS)  # fmt: skip
    assert pq.ParquetFile(path).num_row_groups > 4 * GROUPS_AT_ONCE
    _assert_same_frames(path)


def test_a_run_resumed_into_the_same_trace_makes_the_same_frames_as_before(tmp_path: Path) -> None:
    """Two runs in one trace (the second appended, as a resumed evaluation does): every frame as it was."""
    path = tmp_path / "run.parquet"
    record(path, RUN[:3])
    stream = EventStream()
    with Recorder(path, append=True) as recorder:
        stream.subscribe(recorder)
        for episode in [*RUN[3:], Episode(0, 1, [1.0])]:  # one episode again: the later row is the one kept
            for event in events(episode):
                stream.publish(event)
    assert len(set(pq.read_table(path, columns=["run_id"])["run_id"].to_pylist())) == 2
    _assert_same_frames(path)


def test_the_parts_of_an_unfinished_trace_make_the_same_frames_as_before(tmp_path: Path) -> None:
    """A recording still being written (its parts on disk, no compacted file yet): every frame as it was."""
    path = tmp_path / "run.parquet"
    stream = EventStream()
    recorder = Recorder(path)
    stream.subscribe(recorder)
    try:
        for episode in RUN:
            for event in events(episode):
                stream.publish(event)
            recorder.flush()  # a part per episode
        assert not path.exists() and len(list(parts_dir(path).glob("part-*"))) == len(RUN)
        assert ol.load_trace(path).partial
        _assert_same_frames(path)
    finally:
        recorder.close()
