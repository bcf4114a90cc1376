"""Comparing runs: two 100,000-episode traces compared, and what a live baseline costs the dashboard.

    python bench/compare.py                    # both parts: about 5 minutes (the traces are made once, cached)
    python bench/compare.py --only traces      # two 100,000-episode traces compared, 3 rounds
    python bench/compare.py --only live --rounds 1 --episodes 600      # a smoke test of the live part
    python bench/compare.py --check            # exit 1 if a target is missed

1. **Two 100,000-episode traces** (``bench/scale_trace.py``'s: the recorded OpenAI run's ORS and evaluation rows
   copied 5,000 times, 50,000 tasks x 2 rollouts, 1.9 million rows each; the candidate's rewards another pattern
   of 1.0 and 0.0, so its per-task deltas are -1 .. 1). Each round, in a fresh interpreter (its imports warmed
   on a committed trace first, its peak memory its own): ``ol.compare(base, cand)`` and every metric's
   ``summary()`` and the ``tasks`` frame, timed (wall and CPU) with the peak RSS over the interpreter's before
   it; then the comparison's page (``to_html``), reported without a target. Targets: <= 2 s and <= 1 GB.
2. **A live baseline's cost to the dashboard** (``bench/views.py``'s harness): the same evaluation cell in one
   real kernel, with ``ol.live_views("widgets")`` (the dashboard drawn and updated, its messages out on iopub),
   2,000 recorded quiz episodes against ``ors-lab replay --speed 0``, c=32, with ``baseline=`` the recorded run
   itself and without, the order turned each round. Target: episodes/s with the baseline >= 0.95 x without,
   pooled over the rounds (summed episodes over summed seconds), with the per-round range. Beside it, the
   machine-independent part: the dashboard's own CPU per episode (``fold``: 2,004 outcomes of 6 tasks x 334
   rollouts folded by a ``RunState``, a snapshot made and encoded every 20, as the throttle does), with and
   without a baseline, median of 5 rounds.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0] or ".").resolve() == REPO_ROOT / "bench":
    sys.path[0] = str(REPO_ROOT)
elif str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench import scale_trace  # noqa: E402

EPISODES = 100_000
TARGET_S, TARGET_MB, TARGET_RATIO = 2.0, 1024.0, 0.95


def traces(episodes: int = EPISODES) -> tuple[Path, Path]:
    """The baseline and the candidate traces, written once (cached beside ``scale_trace``'s)."""
    from ors_lab.recording.columns import SCHEMA_VERSION

    base = scale_trace.trace_path(episodes)
    cand = scale_trace.CACHE / f"episodes-{episodes}-v{SCHEMA_VERSION}-candidate.parquet"
    if not cand.is_file():
        scale_trace.write_trace(episodes, cand, shift=1)
    return base, cand


def child(base: str, cand: str, page: str) -> dict[str, Any]:
    """In this interpreter: compare, every metric's summary and the tasks frame; then the page."""
    import ors_lab as ol

    ol.compare(REPO_ROOT / "recordings" / "demo.parquet", REPO_ROOT / "recordings" / "openai-arithmetic.parquet")
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started, cpu = time.perf_counter(), time.process_time()
    comparison = ol.compare(base, cand)
    summaries = {metric: comparison.summary(metric) for metric in comparison.metrics}
    tasks = len(comparison.tasks)
    out: dict[str, Any] = {"compare_s": time.perf_counter() - started, "compare_cpu_s": time.process_time() - cpu,
                           "rss_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline) / 1024,
                           "tasks": tasks, "mean_delta": float(summaries["reward"]["mean_delta"]),
                           "p_value": float(summaries["reward"]["p_value"])}  # fmt: skip
    started = time.perf_counter()
    written = comparison.to_html(page)
    out.update(page_s=time.perf_counter() - started, page_mb=written.size / 2**20)
    return out


def measure_traces(rounds: int) -> list[dict[str, Any]]:
    base, cand = traces()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ors-lab-bench-compare-") as tmp:
        for round_ in range(rounds):
            command = [sys.executable, __file__, "--child", str(base), str(cand), str(Path(tmp) / "cmp.html")]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
            if done.returncode:
                raise SystemExit(f"the comparison failed: {done.stderr[-3000:]}")
            row = json.loads(done.stdout.splitlines()[-1])
            print(f"round {round_ + 1}: {json.dumps(row)}", flush=True)
            rows.append(row)
    return rows


def fold(baseline: bool, tasks: int = 6, rollouts: int = 334) -> float:
    """The dashboard's CPU µs per episode: a ``RunState`` fed the outcomes, a JSON snapshot every 20."""
    from ors_lab.events import BaselineEvent, EpisodeEvent
    from ors_lab.viewer.run import RunState

    keys = [(task, rollout) for task in range(tasks) for rollout in range(rollouts)]
    events = [EpisodeEvent(session_id=f"s{t}-{r}", rollout=r, environment="quiz", split="test", task_index=t,
                           reward=float(r % 2), total_reward=None, final_reward=None, finished=True, success=r % 2 == 1,
                           finish_reason="stop", steps=3, started=0.0, duration_s=0.1) for t, r in keys]  # fmt: skip
    state = RunState("quiz", "test", keys)
    if baseline:
        state.apply(BaselineEvent(name="b", environment="quiz", split="test",
                                  tasks=[[t, [1.0] * rollouts, rollouts] for t in range(tasks)]))  # fmt: skip
    started = time.process_time()
    for n, event in enumerate(events):
        state.apply(event)
        if n % 20 == 0:
            json.dumps(state.snapshot())
    return 1e6 * (time.process_time() - started) / len(events)


def measure_live(rounds: int, episodes: int) -> dict[str, list[dict[str, Any]]]:
    from bench.evaluate import _rollouts, record_source
    from bench.views import SETUP, kernel_environment, measure
    from tests.notebook.kernel import Kernel

    modes = ("baseline", "plain")
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="ors-lab-bench-compare-live-") as tmp:
        source = Path(tmp) / "source.parquet"
        seconds = record_source(source, episodes)
        print(f"source trace: {_rollouts(episodes) * 6} live episodes recorded in {seconds:.1f} s", flush=True)
        kernel_environment(Path(tmp) / "jupyter")
        extra = {"baseline": f", baseline={str(source)!r}", "plain": ""}
        with Kernel(cwd=REPO_ROOT) as kernel:
            kernel.run(SETUP)
            for mode in modes:  # warm-up: imports, first views
                measure(kernel, source, "widgets", min(episodes, 300), extra[mode])
            for round_ in range(rounds):
                for mode in modes if round_ % 2 == 0 else tuple(reversed(modes)):
                    run = measure(kernel, source, "widgets", episodes, extra[mode])
                    runs[mode].append(run)
                    print(f"round {round_ + 1} {mode:<8} {run['eps']:7.1f} episodes/s  {run['cpu_ms']:.3f} kernel CPU "
                          f"ms/episode  {run['rate']:5.1f} view messages/s", flush=True)  # fmt: skip
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("traces", "live"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=2_000, help="episodes of each live run")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    met = True
    if args.only in (None, "traces"):
        rows = measure_traces(args.rounds)
        wall = [r["compare_s"] for r in rows]
        rss = [r["rss_mb"] for r in rows]
        cpu = statistics.median(r["compare_cpu_s"] for r in rows)
        print("\n| measure | median | range |\n|---|---:|---:|")
        spread = f"{min(wall):.2f}-{max(wall):.2f}"
        print(f"| compare + summaries + tasks, wall s | {statistics.median(wall):.2f} | {spread} |")
        print(f"| its CPU s (µs per episode of the two traces) | {cpu:.2f} ({1e6 * cpu / (2 * EPISODES):.1f}) | |")
        print(f"| peak RSS over the interpreter's, MB | {statistics.median(rss):.0f} | {min(rss):.0f}-{max(rss):.0f} |")
        print(f"| the page (to_html), s / MB | {statistics.median(r['page_s'] for r in rows):.2f} / "
              f"{rows[0]['page_mb']:.1f} | |")  # fmt: skip
        ok = statistics.median(wall) <= TARGET_S and max(rss) <= TARGET_MB
        met &= ok
        print(f"\ntwo {EPISODES:,}-episode traces ({rows[0]['tasks']:,} paired tasks) compared in "
              f"{statistics.median(wall):.2f} s (median), {max(rss):.0f} MB at most; target <= {TARGET_S:g} s and <= "
              f"{TARGET_MB:.0f} MB: {'met' if ok else 'MISSED'}")  # fmt: skip
    if args.only in (None, "live"):
        runs = measure_live(args.rounds, args.episodes)
        pooled = {mode: sum(r["episodes"] for r in rs) / sum(r["wall"] for r in rs) for mode, rs in runs.items()}
        ratio = pooled["baseline"] / pooled["plain"]
        per_round = [b["eps"] / p["eps"] for b, p in zip(runs["baseline"], runs["plain"], strict=True)]
        cpu = {mode: statistics.median(r["cpu_ms"] for r in rs) for mode, rs in runs.items()}
        print("\n| measure | dashboard with a baseline | dashboard |\n|---|---:|---:|")
        print(f"| episodes/s (pooled over {args.rounds} rounds) | {pooled['baseline']:.1f} | {pooled['plain']:.1f} |")
        print(f"| kernel CPU ms per episode (median) | {cpu['baseline']:.3f} | {cpu['plain']:.3f} |")
        folds = {mode: statistics.median(fold(mode == "baseline") for _ in range(5)) for mode in ("baseline", "plain")}
        print(f"| the dashboard's own fold, CPU µs per episode (median of 5) | {folds['baseline']:.1f} | "
              f"{folds['plain']:.1f} |")  # fmt: skip
        ok = ratio >= TARGET_RATIO
        met &= ok
        print(f"\nwith ÷ without a baseline, episodes/s: {ratio:.3f} pooled (rounds {min(per_round):.3f}-"
              f"{max(per_round):.3f}); target >= {TARGET_RATIO}: {'met' if ok else 'MISSED'}")  # fmt: skip
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
