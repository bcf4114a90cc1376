"""Runs compared task by task (``ol.compare``): every figure against an independent computation and scipy.

The runs are real traces: the committed ``recordings/`` ones, and evaluations recorded here from synthetic
episodes whose rewards are chosen (``tests/analysis/synthetic.py``: the events a client and an evaluation
publish, through a real ``Recorder``). scipy's ``permutation_test`` and ``bootstrap`` are the oracle, in the
tests only.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import bootstrap, permutation_test

import ors_lab as ol
from ors_lab.analysis.paired import EXACT_TASKS, RESAMPLES, SEED, Z, paired, sign_flip_p, tasks_needed
from tests.analysis.synthetic import Episode, record
from tests.conftest import REPO_ROOT

DEMO = REPO_ROOT / "recordings" / "demo.parquet"
OPENAI = REPO_ROOT / "recordings" / "openai-arithmetic.parquet"
FIGURES = ["tasks", "mean_delta", "stderr", "ci_low", "ci_high", "p_value", "wins", "losses", "ties"]


def run(path: Path, rewards: dict[int, list[float]], environment: str = "lab") -> ol.Trace:
    """A recorded evaluation: task -> the reward of each of its rollouts (one step each)."""
    episodes = [Episode(task, rollout, [reward], environment=environment)
                for task, values in rewards.items() for rollout, reward in enumerate(values)]  # fmt: skip
    return record(path, episodes)


def scipy_p(deltas: list[float], resamples: float = np.inf) -> float:
    """scipy's two-sided permutation test of the mean of one sample: its signs flipped."""
    result = permutation_test((np.array(deltas),), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
                              n_resamples=resamples, alternative="two-sided", rng=7)  # fmt: skip
    return float(result.pvalue)


def exact_p(deltas: list[float]) -> float:
    """Every sign vector, by brute force: the share whose |sum| is at least the observed |sum|."""
    observed = abs(sum(deltas))
    hits = sum(abs(sum(s * d for s, d in zip(signs, deltas, strict=True))) >= observed - 1e-9
               for signs in itertools.product((1, -1), repeat=len(deltas)))  # fmt: skip
    return hits / 2 ** len(deltas)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[ol.Trace, ol.Trace, dict[int, list[float]],
                                                            dict[int, list[float]]]:  # fmt: skip
    """Two runs over 40 shared tasks and a few of their own, rollouts differing (3 in the baseline, 2 in the
    candidate; one task 1 rollout in the candidate), rewards in {0, 0.5, 1}."""
    rng = random.Random(5)
    base = {task: [rng.choice([0.0, 0.5, 1.0]) for _ in range(3)] for task in range(42)}  # 40, 41: baseline only
    cand = {task: [rng.choice([0.0, 0.5, 1.0, 1.0]) for _ in range(2)] for task in range(40)}
    cand[7] = [1.0]
    cand[50] = [1.0, 1.0]  # candidate only
    folder = tmp_path_factory.mktemp("compare")
    return run(folder / "base.parquet", base), run(folder / "cand.parquet", cand), base, cand


# -- the figures, against an independent computation -------------------------------------------------------


def test_every_figure_equals_an_independent_computation(pair: tuple) -> None:
    """Per-task means over each run's own rollouts, differenced; mean, sample sd / sqrt(n), the normal interval
    with z = 1.959964, wins / losses / ties, and the permutation p of scipy (randomized: within sampling error)."""
    base_trace, cand_trace, base, cand = pair
    shared = sorted(set(base) & set(cand))
    deltas = [statistics.fmean(cand[t]) - statistics.fmean(base[t]) for t in shared]
    summary = ol.compare(base_trace, cand_trace).summary()
    mean, sd = statistics.fmean(deltas), statistics.stdev(deltas)
    assert summary["tasks"] == len(shared) == 40
    assert summary["mean_delta"] == pytest.approx(mean, abs=1e-12)
    assert summary["stderr"] == pytest.approx(sd / math.sqrt(40), abs=1e-12)
    assert summary["ci_low"] == pytest.approx(mean - 1.959964 * sd / math.sqrt(40), abs=1e-12)
    assert summary["ci_high"] == pytest.approx(mean + 1.959964 * sd / math.sqrt(40), abs=1e-12)
    assert (summary["wins"], summary["losses"], summary["ties"]) == (sum(d > 0 for d in deltas),
                                                                     sum(d < 0 for d in deltas),
                                                                     sum(d == 0 for d in deltas))  # fmt: skip
    oracle = scipy_p(deltas, 20_000)
    assert abs(summary["p_value"] - oracle) < 4 * math.sqrt(oracle * (1 - oracle) * (1 / RESAMPLES + 1 / 20_000)) + 1e-3
    assert summary["baseline_mean"] == pytest.approx(statistics.fmean(statistics.fmean(base[t]) for t in shared))
    assert summary["p_method"] == f"10,000 random sign vectors, seed {SEED}" and summary["warning"] is None


def test_the_stderr_agrees_with_scipys_bootstrap(pair: tuple) -> None:
    """The CLT standard error of the mean delta is the bootstrap's (scipy), up to its plug-in variance and noise."""
    base_trace, cand_trace, base, cand = pair
    deltas = [statistics.fmean(cand[t]) - statistics.fmean(base[t]) for t in sorted(set(base) & set(cand))]
    boot = bootstrap((np.array(deltas),), np.mean, n_resamples=20_000, method="percentile", rng=11)
    stderr = ol.compare(base_trace, cand_trace).summary()["stderr"]
    n = len(deltas)
    assert stderr * math.sqrt((n - 1) / n) == pytest.approx(boot.standard_error, rel=0.05)


def test_tasks_hold_each_runs_mean_and_rollouts(pair: tuple) -> None:
    """One row per paired task: each run's mean over its own rollouts (3 against 2, and 1), the delta, its spread
    sqrt(var_b / n_b + var_c / n_c) (none where a run had one rollout)."""
    base_trace, cand_trace, base, cand = pair
    tasks = ol.compare(base_trace, cand_trace).tasks.set_index("task_index")
    assert list(tasks.index) == list(range(40))
    for task in (0, 7, 39):
        row = tasks.loc[task]
        assert row["baseline_mean"] == pytest.approx(statistics.fmean(base[task]))
        assert row["candidate_mean"] == pytest.approx(statistics.fmean(cand[task]))
        assert (row["baseline_rollouts"], row["candidate_rollouts"]) == (3, len(cand[task]))
    spread = math.sqrt(statistics.variance(base[0]) / 3 + statistics.variance(cand[0]) / 2)
    assert tasks.loc[0, "delta_stderr"] == pytest.approx(spread)
    assert pd.isna(tasks.loc[7, "delta_stderr"])


def test_unpaired_tasks_are_counted_and_listed(pair: tuple) -> None:
    """Tasks only one run has are listed with the run that has them, and counted in the summary."""
    base_trace, cand_trace, _, _ = pair
    comparison = ol.compare(base_trace, cand_trace)
    unpaired = comparison.unpaired
    assert sorted(zip(unpaired["task_index"], unpaired["only_in"], strict=True)) == [
        (40, "baseline"), (41, "baseline"), (50, "candidate")]  # fmt: skip
    assert comparison.summary()["unpaired"] == 3 and list(unpaired["episodes"]) == [3, 3, 2]


def test_success_and_pass_at_k_are_each_tasks_own_estimate_differenced(pair: tuple) -> None:
    """Success rate and pass@k (k the fewest rollouts of a paired task: 1 here, 2 when given) per task, differenced."""
    base_trace, cand_trace, base, cand = pair
    comparison = ol.compare(base_trace, cand_trace, k=2)
    assert comparison.metrics == ("reward", "success", "pass@2") and ol.compare(base_trace, cand_trace).k == 1

    def rate(values: list[float]) -> float:
        return sum(v >= 1.0 for v in values) / len(values)

    def pass_at(values: list[float], k: int) -> float | None:
        n, c = len(values), sum(v >= 1.0 for v in values)
        return None if k > n else 1 - math.comb(n - c, k) / math.comb(n, k)

    shared = sorted(set(base) & set(cand))
    success = [rate(cand[t]) - rate(base[t]) for t in shared]
    passes = [b - a for t in shared
              if (a := pass_at(base[t], 2)) is not None and (b := pass_at(cand[t], 2)) is not None]  # fmt: skip
    assert len(passes) == 39  # task 7 ran once in the candidate: no pass@2 of it
    for metric, deltas in (("success", success), ("pass@2", passes)):
        summary = comparison.summary(metric)
        assert summary["tasks"] == len(deltas) and summary["metric"] == metric
        assert summary["mean_delta"] == pytest.approx(statistics.fmean(deltas), abs=1e-12)
        assert summary["stderr"] == pytest.approx(statistics.stdev(deltas) / math.sqrt(len(deltas)), abs=1e-12)
    assert comparison.summary("pass@k")["metric"] == "pass@2"
    kept = [t for t in shared if pass_at(cand[t], 2) is not None]
    assert comparison.summary("pass@2")["baseline_mean"] == pytest.approx(statistics.fmean(pass_at(base[t], 2)
                                                                                           for t in kept))  # fmt: skip


# -- the permutation test ------------------------------------------------------------------------------------


@pytest.mark.parametrize("deltas", [
    [0.5, -0.25, 1.0, 0.0, 0.75],  # a zero among them
    [0.5, 0.5, -0.5, 0.5, 0.5, 0.5],  # ties in |d|
    [1.0, -1.0],  # the observed sum is 0
    [0.1 * n - 0.45 for n in range(12)],  # sums equal but for rounding
    [round(math.sin(n), 3) for n in range(EXACT_TASKS)],  # 20 tasks: still exact
])  # fmt: skip
def test_the_exact_test_is_scipys_and_brute_forces(deltas: list[float]) -> None:
    """Up to 20 tasks, p enumerates every sign vector: scipy's exact permutation test, and a brute force (at 20 tasks
    a matrix of every sign vector, scipy's million resamples taking it half a minute on a busy machine)."""
    p = sign_flip_p(deltas)
    if len(deltas) <= 12:
        assert p == pytest.approx(scipy_p(deltas), abs=1e-12)
        assert p == pytest.approx(exact_p(deltas), abs=1e-12)
    else:
        signs = ((np.arange(2 ** len(deltas))[:, None] >> np.arange(len(deltas))) & 1) * 2 - 1
        sums = signs @ np.array(deltas)
        assert p == pytest.approx(float(np.mean(np.abs(sums) >= abs(sum(deltas)) - 1e-9)), abs=1e-12)
    assert paired(deltas).p_method == f"exact: all 2^{len(deltas)} sign vectors"


def test_above_twenty_tasks_the_p_is_seeded_resampling_near_the_exact_one() -> None:
    """22 tasks: 10,000 seeded random sign vectors, (1 + hits) / 10,001, within sampling error of the exact p (all
    4 million vectors, by numpy); the same p again; continuous and repeated deltas alike."""
    rng = np.random.default_rng(3)
    for deltas in (rng.normal(0.15, 0.5, 22), rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], 22)):
        sums = np.zeros(1)
        for d in deltas:
            sums = np.concatenate([sums + d, sums - d])
        exact = float(np.mean(np.abs(sums) >= abs(deltas.sum()) - 1e-9))
        p = sign_flip_p(deltas.tolist())
        assert abs(p - exact) < 4 * math.sqrt(exact * (1 - exact) / RESAMPLES) + 1 / (RESAMPLES + 1)
        assert sign_flip_p(deltas.tolist()) == p and p * (RESAMPLES + 1) == pytest.approx(round(p * (RESAMPLES + 1)))


# -- the cases the issue names -------------------------------------------------------------------------------


def test_a_run_compared_with_itself_gives_zero_zero_and_p_one(pair: tuple) -> None:
    """Every metric of a run against itself: mean delta 0, stderr 0, p 1, every task a tie (a committed trace too)."""
    for trace in (pair[0], ol.load_trace(OPENAI)):
        comparison = ol.compare(trace, trace)
        for metric in comparison.metrics:
            summary = comparison.summary(metric)
            assert (summary["mean_delta"], summary["stderr"], summary["p_value"]) == (0.0, 0.0, 1.0), metric
            assert summary["ties"] == summary["tasks"] and summary["unpaired"] == 0
        assert comparison.names[1] == f"{comparison.names[0]} (2)"


def test_swapping_the_runs_negates_the_delta(pair: tuple) -> None:
    """Baseline and candidate swapped: the delta and its interval negated, the same stderr and p, wins and losses
    swapped."""
    base_trace, cand_trace, _, _ = pair
    ahead, back = ol.compare(base_trace, cand_trace), ol.compare(cand_trace, base_trace)
    for metric in ahead.metrics:
        a, b = ahead.summary(metric), back.summary(metric)
        assert b["mean_delta"] == -a["mean_delta"] and b["stderr"] == pytest.approx(a["stderr"], abs=1e-15)
        assert (b["ci_low"], b["ci_high"]) == pytest.approx((-a["ci_high"], -a["ci_low"]), abs=1e-12)
        assert b["p_value"] == a["p_value"]
        assert (b["wins"], b["losses"], b["ties"]) == (a["losses"], a["wins"], a["ties"])


def test_one_task(tmp_path: Path) -> None:
    """One paired task: its delta, no stderr or interval, p 1 (both signs as extreme), a warning."""
    base, cand = run(tmp_path / "a.parquet", {0: [0.0, 1.0]}), run(tmp_path / "b.parquet", {0: [1.0]})
    summary = ol.compare(base, cand).summary()
    assert (summary["tasks"], summary["mean_delta"], summary["p_value"], summary["wins"]) == (1, 0.5, 1.0, 1)
    assert summary["stderr"] is None and summary["ci_low"] is None and summary["ci_high"] is None
    assert "only 1 paired task" in summary["warning"]


def test_all_deltas_equal(tmp_path: Path) -> None:
    """Every task 0.5 better: stderr 0, the interval a point, p = 2 / 2^n (only all + or all − are as extreme)."""
    base = run(tmp_path / "a.parquet", {t: [0.5] for t in range(6)})
    cand = run(tmp_path / "b.parquet", {t: [1.0] for t in range(6)})
    summary = ol.compare(base, cand).summary()
    assert (summary["mean_delta"], summary["stderr"], summary["ci_low"], summary["ci_high"]) == (0.5, 0.0, 0.5, 0.5)
    assert summary["p_value"] == 2 / 2**6 and (summary["wins"], summary["ties"]) == (6, 0)


def test_ties_count_apart_and_move_nothing(tmp_path: Path) -> None:
    """Tied tasks are ties, count in n (so they shrink the mean and its stderr) and leave p as it is without them."""
    base = run(tmp_path / "a.parquet", {t: [0.0] for t in range(8)})
    cand = run(tmp_path / "b.parquet", {0: [1.0], 1: [1.0], 2: [0.0], 3: [1.0], 4: [0.0], 5: [0.0], 6: [0.0], 7: [0.0]})
    summary = ol.compare(base, cand).summary()
    assert (summary["wins"], summary["losses"], summary["ties"]) == (3, 0, 5)
    assert summary["mean_delta"] == 3 / 8 and summary["p_value"] == pytest.approx(exact_p([1.0, 1.0, 1.0]))


def test_several_candidates_give_a_frame_one_row_each(pair: tuple) -> None:
    """Two candidates: summary() is a DataFrame indexed by their names, each row the figures of its own pairing."""
    base_trace, cand_trace, _, _ = pair
    comparison = ol.compare(base_trace, cand_trace, base_trace, names=["old", "new", "same"])
    summary = comparison.summary()
    assert isinstance(summary, pd.DataFrame) and list(summary.index) == ["new", "same"]
    assert list(summary.loc["new", FIGURES]) == list(ol.compare(base_trace, cand_trace).summary()[FIGURES])
    assert summary.loc["same", "mean_delta"] == 0.0
    assert set(comparison.tasks["candidate"]) == {"new", "same"} and comparison.figures(candidate="same").p_value == 1


def test_the_episodes_side_by_side_pair_rollouts(pair: tuple) -> None:
    """The episodes of both runs by task and rollout: the baseline's third rollout has no candidate beside it."""
    base_trace, cand_trace, base, _ = pair
    episodes = ol.compare(base_trace, cand_trace).episodes
    task0 = episodes[episodes["task_index"] == 0]
    assert list(task0["rollout"]) == [0, 1, 2] and list(task0["baseline_reward"]) == base[0]
    assert task0["candidate_session_id"].isna().tolist() == [False, False, True]


def test_committed_traces_compare_on_the_tasks_they_share() -> None:
    """The demo agent against the OpenAI agent on the demo arithmetic tasks: 2 of the 10 shared tasks lost; the
    guessing tasks unpaired."""
    comparison = ol.compare(DEMO, OPENAI)
    summary = comparison.summary()
    assert (summary["tasks"], summary["losses"], summary["mean_delta"], summary["unpaired"]) == (10, 2, -0.2, 10)
    assert summary["p_value"] == exact_p([-1.0, -1.0])  # 8 ties: only the two losses' signs matter
    assert set(comparison.unpaired["environment"]) == {"guessing"}
    assert repr(comparison).startswith("Comparison(vs demo.parquet: openai-arithmetic.parquet: mean delta -0.200")


def test_a_trace_no_evaluation_ran_is_compared_by_its_sessions(tmp_path: Path) -> None:
    """Bare sessions (no episode rows): their steps reduced, as trace.episodes has them, are its episodes."""
    bare = [Episode(task, None, [0.5, 0.5]) for task in range(3)]
    base = record(tmp_path / "bare.parquet", bare, evaluated=False)
    cand = run(tmp_path / "b.parquet", {t: [1.0] for t in range(3)})
    summary = ol.compare(base, cand).summary()
    assert (summary["tasks"], summary["mean_delta"], summary["baseline_mean"]) == (3, 0.0, 1.0)


# -- planning ------------------------------------------------------------------------------------------------


def test_power_tells_the_tasks_needed() -> None:
    """n = ((z_0.975 + z_0.8) sd / delta)^2 rounded up; at the observed sd of a comparison, and by rollouts from the
    variance within tasks and between them."""
    assert tasks_needed(0.5, 0.1) == math.ceil(((1.959964 + 0.8416212) * 0.5 / 0.1) ** 2) == 197
    assert tasks_needed(0.5, -0.1, alpha=0.01, power=0.9) == math.ceil(((2.5758293 + 1.2815516) * 5) ** 2)
    with pytest.raises(ValueError, match="delta"):
        tasks_needed(0.5, 0.0)
    comparison = ol.compare(DEMO, OPENAI)
    power = comparison.power(delta=0.1)
    assert power.tasks == tasks_needed(comparison.figures().sd, 0.1) and power.rollouts == 2
    assert power.within == 0.0 and power.by_rollouts[1] == power.by_rollouts[16] == power.tasks  # no spread within


def test_power_splits_the_variance_by_rollouts(pair: tuple) -> None:
    """More rollouts per task shrink only the within-task part: fewer tasks needed, never below the between part's."""
    base_trace, cand_trace, _, _ = pair
    power = ol.compare(base_trace, cand_trace).power(delta=0.1)
    counts = list(power.by_rollouts.values())
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]
    assert counts[-1] >= tasks_needed(math.sqrt(power.between), 0.1) if power.between else True
    assert "tasks" in repr(power)


# -- bad input -----------------------------------------------------------------------------------------------


def test_bad_input_is_a_clear_error(pair: tuple, tmp_path: Path) -> None:
    """No candidate, a run of the wrong type, a missing trace, names of the wrong length, an unknown metric."""
    base_trace = pair[0]
    with pytest.raises(TypeError, match="a baseline and at least one candidate"):
        ol.compare(base_trace)
    with pytest.raises(TypeError, match=r"a trace.s path, an ors_lab\.Trace or an ors_lab\.EvalResult"):
        ol.compare(base_trace, 42)
    with pytest.raises(ol.TraceNotFoundError):
        ol.compare(base_trace, tmp_path / "none.parquet")
    with pytest.raises(ValueError, match="names has 1 names for 2 runs"):
        ol.compare(base_trace, base_trace, names=["one"])
    with pytest.raises(ValueError, match=r"the metrics: reward, success, pass@3"):
        ol.compare(base_trace, base_trace).summary("speed")
    with pytest.raises(ValueError, match=r"k \(of pass@k\)"):
        ol.compare(base_trace, base_trace, k=0)


def test_the_constants_are_the_issues() -> None:
    """The interval's z, the exact test's limit, the resamples and the seed the docs state."""
    assert (Z, EXACT_TASKS, RESAMPLES, SEED) == (1.959964, 20, 10_000, 241100640)
