"""EvalResult: the reduction from steps to episodes and tasks, pass@k, and the declared DataFrames."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest

from ors_lab.evaluation.result import (
    EPISODES_COLUMNS,
    ERRORS_COLUMNS,
    STEPS_COLUMNS,
    TASKS_COLUMNS,
    EpisodeRecord,
    EvalResult,
    StepRecord,
    pass_at_k,
    reduce_reward,
)


def _brute_pass_at_k(n: int, c: int, k: int) -> float:
    """The share of all k-subsets of n samples (c of them successes) holding at least one success."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in subset) for subset in subsets) / len(subsets)


SMALL = [(n, c, k) for n in range(1, 7) for c in range(n + 1) for k in range(1, n + 1)]


@pytest.mark.parametrize(("n", "c", "k"), SMALL)
def test_pass_at_k_is_the_unbiased_estimator(n: int, c: int, k: int) -> None:
    """pass@k equals the exact share of k-subsets with a success, for every small n, c, k."""
    assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k))


def test_pass_at_k_beyond_n_is_unknown_and_k_must_be_positive() -> None:
    """k > n gives None (not enough samples); k < 1 is a ValueError."""
    assert pass_at_k(3, 1, 4) is None
    with pytest.raises(ValueError, match="k >= 1"):
        pass_at_k(3, 1, 0)


def _step(number: int, reward: float | None, finished: bool = False) -> StepRecord:
    return StepRecord(number, number, "t", "{}", True, reward, finished, None, 1.0)


def test_reductions() -> None:
    """sum, final and max over the rewards given; no reward at all counts 0.0 with NA totals."""
    steps = [_step(1, 0.5), _step(2, None), _step(3, 0.25, True)]
    assert reduce_reward(steps, "sum") == (0.75, 0.25, 0.75)
    assert reduce_reward(steps, "final") == (0.75, 0.25, 0.25)
    assert reduce_reward(steps, "max") == (0.75, 0.25, 0.5)
    assert reduce_reward(steps, lambda s: len(s)) == (0.75, 0.25, 3.0)
    assert reduce_reward([_step(1, None)], "sum") == (None, None, 0.0)


def _record(index: int, rollout: int, reward: float, *, error: str | None = None) -> EpisodeRecord:
    return EpisodeRecord(
        environment="env",
        split="test",
        task_index=index,
        rollout=rollout,
        session_id=f"s{index}-{rollout}",
        reward=reward,
        total_reward=reward,
        final_reward=reward,
        finished=error is None,
        success=reward >= 1.0,
        finish_reason="error" if error else "stop",
        duration_s=0.5,
        started=1_700_000_000.0,
        error=error,
        error_type=None if error is None else "ToolError",
        steps=(_step(1, reward, True),),
    )


RECORDS = [_record(0, 0, 1.0), _record(0, 1, 0.0), _record(0, 2, 1.0), _record(1, 0, 0.0, error="boom"),
           _record(1, 1, 0.0), _record(1, 2, 0.0)]  # fmt: skip


def test_frames_have_the_declared_columns_and_dtypes() -> None:
    """episodes, steps, tasks and errors have exactly their declared columns, Arrow-backed."""
    result = EvalResult(RECORDS, environment="env", split="test", rollouts=3)
    for frame, declared in (
        (result.episodes, EPISODES_COLUMNS),
        (result.steps, STEPS_COLUMNS),
        (result.errors, ERRORS_COLUMNS),
        (result.tasks, {**TASKS_COLUMNS, "pass@1": "float64", "pass@3": "float64"}),
    ):
        assert list(frame.columns) == list(declared)
        for name, kind in declared.items():
            assert isinstance(frame[name].dtype, pd.ArrowDtype), name
            assert str(frame[name].dtype.pyarrow_dtype) in (kind, kind.replace("float64", "double")), name


def test_tasks_aggregate_their_episodes() -> None:
    """Per task: mean reward, its standard error, success rate, pass@1 and pass@k, errors."""
    tasks = EvalResult(RECORDS, environment="env", split="test", rollouts=3).tasks.set_index("task_index")
    assert tasks.loc[0, "mean_reward"] == pytest.approx(2 / 3)
    assert tasks.loc[0, "stderr"] == pytest.approx(math.sqrt((1 / 3) / 3))
    assert tasks.loc[0, "pass@1"] == pytest.approx(2 / 3) and tasks.loc[0, "pass@3"] == 1.0
    assert tasks.loc[1, "success_rate"] == 0.0 and tasks.loc[1, "errors"] == 1
    assert tasks.loc[1, "finished_rate"] == pytest.approx(2 / 3)


def test_summary_and_repr() -> None:
    """summary() is one row over all episodes; the repr says the run in one line."""
    result = EvalResult(RECORDS, environment="env", split="test", rollouts=3, elapsed_s=2.0)
    summary = result.summary().iloc[0]
    assert (summary["episodes"], summary["tasks"], summary["errors"]) == (6, 2, 1)
    assert summary["mean_reward"] == pytest.approx(1 / 3)
    assert summary["pass@3"] == pytest.approx(0.5)
    assert repr(result) == (
        "EvalResult(env/test: 6 episodes over 2 tasks x 3 rollouts; mean reward 0.333 ± 0.211; "
        "pass@1 0.333, pass@3 0.500; 1 errors)"
    )
    assert "pass@3         0.500" in result.table()
    assert repr(EvalResult([], environment="env", split="test", rollouts=1)) == "EvalResult(env/test: no episodes)"


def test_an_episode_record_round_trips_through_json() -> None:
    """What the trace's episode row holds reads back as the same record (resume relies on it)."""
    record = RECORDS[3]
    assert EpisodeRecord.from_json(record.to_json()) == record
