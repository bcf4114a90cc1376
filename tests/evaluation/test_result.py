"""EvalResult: the frames of a run's rows (the builders of ors_lab.analysis), its summary and its one-line repr."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ors_lab.analysis import frames
from ors_lab.evaluation import EvalResult
from tests.analysis.synthetic import Episode, record

RUN = [Episode(0, 0, [1.0]), Episode(0, 1, [0.0]), Episode(0, 2, [1.0]), Episode(1, 0, [0.0], error="boom"),
       Episode(1, 1, [0.0]), Episode(1, 2, [0.0])]  # fmt: skip


@pytest.fixture
def result(tmp_path: Path) -> EvalResult:
    """The run's rows as an evaluation keeps them (here, from a trace), as its result."""
    table = record(tmp_path / "run.parquet", RUN).table
    return EvalResult(table, environment="lab", split="test", rollouts=3, elapsed_s=2.0)


def test_frames_have_the_declared_columns_and_dtypes(result: EvalResult) -> None:
    """episodes, steps, tasks, errors and summary have exactly their declared columns, Arrow-backed."""
    ks = frames.pass_columns([1, 3])
    for frame, declared in (
        (result.episodes, frames.EPISODES_COLUMNS),
        (result.steps, frames.STEPS_COLUMNS),
        (result.errors, frames.ERRORS_COLUMNS),
        (result.tasks, {**frames.TASKS_COLUMNS, **ks}),
        (result.summary(), {**frames.SUMMARY_COLUMNS, **ks, "elapsed_s": frames.SUMMARY_COLUMNS["mean_reward"]}),
    ):
        assert dict(frame.dtypes) == {name: pd.ArrowDtype(kind) for name, kind in declared.items()}


def test_the_result_is_the_trace_seen_through_the_same_builders(result: EvalResult, tmp_path: Path) -> None:
    """The result's episodes, steps and tasks are the builders' frames of its rows."""
    assert result.episodes.equals(frames.episodes_frame(result.table))
    assert result.steps.equals(frames.steps_frame(result.table))
    assert result.tasks.equals(frames.tasks_frame(result.episodes, [1, 3]))
    assert len(result) == 6 and result.pass_at(3).tolist() == [1.0, 0.0]


def test_summary_and_repr(result: EvalResult) -> None:
    """summary() is one row over all episodes, with the time taken and the types of the errors; the repr says
    the run in one line."""
    summary = result.summary().iloc[0]
    assert (summary["episodes"], summary["tasks"], summary["errors"], summary["elapsed_s"]) == (6, 2, 1, 2.0)
    assert summary["error_types"] == "ToolError ×1"
    assert summary["mean_reward"] == pytest.approx(1 / 3)
    assert summary["pass@3"] == pytest.approx(0.5)
    assert repr(result) == (
        "EvalResult(lab/test: 6 episodes over 2 tasks x 3 rollouts; mean reward 0.333 ± 0.211; "
        "pass@1 0.333, pass@3 0.500; 1 errors: ToolError ×1)"
    )
    text = result.table_text()
    assert "pass@3           0.500" in text and "elapsed_s        2.0" in text
    assert "error_types      ToolError ×1" in text
    assert "input_tokens" not in text  # no agent reported usage


SMALL = [Episode(task, rollout, [0.05, None, 0.1]) for task in range(2) for rollout in range(2)]
"""Four episodes of 0.15 each in small steps (a port's shift): none reaches success_threshold=1.0."""


def test_small_rewards_below_the_threshold_name_it_in_the_summary_card_and_text(tmp_path: Path) -> None:
    """Rewards of 0.15 against the default success_threshold=1.0: success and pass@k are 0, and the summary,
    ors-lab eval's text and the notebook's card say why, with the threshold the run used; below it, no note."""
    table = record(tmp_path / "small.parquet", SMALL).table
    strict = EvalResult(table, environment="port", split="test", rollouts=2, success_threshold=1.0)
    note = strict.summary().iloc[0]["note"]
    assert note == (
        "success and pass@k are 0: no episode reached success_threshold=1.0, though 4 of 4 earned a positive reward "
        "(the highest 0.15); pass evaluate(..., success_threshold=) the reward a success earns"
    )
    assert f"  note             {note}" in strict.table_text().splitlines()
    assert note in strict._repr_html_()
    sessions = record(tmp_path / "sessions.parquet", SMALL, evaluated=False).table  # success decided here
    lenient = EvalResult(sessions, environment="port", split="test", rollouts=2, success_threshold=0.1)
    assert lenient.summary().iloc[0]["pass@2"] == 1.0 and pd.isna(lenient.summary().iloc[0]["note"])
    assert "note" not in lenient.table_text() and "success_threshold" not in lenient._repr_html_()


def test_an_empty_result(tmp_path: Path) -> None:
    """A run with no episodes has empty frames and says so."""
    empty = EvalResult(record(tmp_path / "empty.parquet", []).table, environment="lab", split="test", rollouts=1)
    assert repr(empty) == "EvalResult(lab/test: no episodes)"
    assert empty.episodes.empty and empty.tasks.empty and empty.steps.empty


def test_html_shows_rewards_and_errors_first_then_the_tasks_and_ids_last(result: EvalResult) -> None:
    """_repr_html_: a card (mean ± stderr, pass@k, errors; the trace last), the errors, a grid, the per-task table."""
    result.trace, result.agent = "runs/x.parquet", "my_policy"
    html = result._repr_html_()
    body = html[html.index("</style>") :]
    order = [body.index(text) for text in ("mean reward", "pass@1", "pass@3", "errors", "episodes", "agent", "trace",
                                           "last errors", 'class="ol-cell"', "<th>task</th>")]  # fmt: skip
    assert order == sorted(order)
    assert "0.333 ± 0.211" in body and "6 (2 tasks x 3 rollouts)" in body and "runs/x.parquet" in body
    assert "boom" in body and body.count('class="ol-cell"') == 6
    assert body.count("<tr>") >= 2 + 2  # the error and the two tasks, besides the card's rows


def test_an_empty_result_shows_itself(tmp_path: Path) -> None:
    """An empty result's HTML says no episodes ran."""
    empty = EvalResult(record(tmp_path / "empty.parquet", []).table, environment="lab", split="test", rollouts=1)
    assert "0 (0 tasks x 1 rollouts)" in empty._repr_html_()
