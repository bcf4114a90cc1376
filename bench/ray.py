"""Ray backend benchmark: what a Ray run costs against a local one, and what it gains when the agent is the
bottleneck.

    python bench/ray.py                        # 2,000 episodes for the overhead, 300 for the CPU policy, 3 rounds
    python bench/ray.py --episodes 600 --cpu-episodes 120 --rounds 1   # a smoke test
    python bench/ray.py --check                # exit 1 if a target is missed

What it does (one process: one loopback-only local Ray cluster of 2 CPUs, started once):

1. **Source trace.** As ``bench/evaluate.py``: the scripted quiz policy over ``bench/quiz_env.py`` on a
   live ors-sdk server, recorded; only the material to replay.
2. **Overhead.** The same ``--episodes`` run, recorded into a trace, against a fresh
   ``ors-lab replay SOURCE --speed 0`` (its own process), concurrency 32: the local backend, and Ray
   with 1 worker (1 CPU). Reported: the whole run's wall time, the steady-state episodes/s (the
   episodes ended between the 10th and the 90th percentile of the run, over the time between them:
   Ray's per-run fixed cost, its actor starting, stays out), the time to the first episode, the
   driver's CPU per episode, and Ray's fixed cost of ``ray.init`` and ``ray.shutdown()`` on their own.
3. **CPU-bound agent.** The quiz policy spending 20 ms of CPU (a busy loop on the thread's CPU clock)
   before each of its 3 steps, ``--cpu-episodes`` episodes, not recorded: the local backend, and Ray
   with 2 workers (1 CPU each), steady-state episodes/s each.
4. **Targets.** Ray 1 worker's steady-state episodes/s >= 0.9x the local backend's (median of rounds);
   Ray 2 workers >= 1.6x the local backend's with the CPU-bound policy.

Rounds run the backends in turns (order reversed every other round). Other work on the machine moves
wall figures: read the medians, the intervals and the CPU per episode together.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
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

from bench.evaluate import CONCURRENCY, ENV_NAME, _check, _rollouts, quiz_policy, record_source, start_replay  # noqa: E402
from bench.quiz_data import SPLIT  # noqa: E402

POLICY_CPU_S = 0.020
STEPS = 3  # tool calls of a quiz episode, each after the policy's 20 ms
TARGET_OVERHEAD = 0.9
TARGET_SCALING = 1.6


def cpu_quiz_policy(obs: Any) -> Any:
    """The quiz policy after 20 ms of this thread's CPU (a model's forward pass, say)."""
    start = time.thread_time()
    while time.thread_time() - start < POLICY_CPU_S:
        pass
    return quiz_policy(obs)


class Clock:
    """``subscribe=``: the monotonic time each episode ended."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def __call__(self, event: Any) -> None:
        if event.type == "episode":
            self.ends.append(time.monotonic())


def steady(ends: list[float]) -> float:
    """Episodes/s between the 10th and the 90th percentile of the episodes' ends."""
    ends = sorted(ends)
    lo, hi = len(ends) // 10, (9 * len(ends)) // 10
    return (hi - lo) / (ends[hi] - ends[lo])


def one_run(
    source: Path, tmp: Path, name: str, policy: Any, episodes: int, backend: Any, record: bool
) -> dict[str, Any]:
    """One measured evaluation against a fresh replay server."""
    from ors_lab import Client, load_trace
    from ors_lab.evaluation import evaluate

    proc, url = start_replay(source, tmp / f"{name}.replay.log")
    clock = Clock()
    out = tmp / f"{name}.parquet"
    try:
        cpu0, wall0 = time.process_time(), time.monotonic()
        with Client(url) as client:
            shipped: list[Any] = []  # every event of a local run: what Ray workers would pickle to the driver
            if backend is None and record:
                client.events.subscribe(shipped.append)
            result = evaluate(client.environment(ENV_NAME), policy, split=SPLIT, rollouts=_rollouts(episodes),
                              concurrency=CONCURRENCY, record=out if record else None, resume=False, progress=False,
                              subscribe=clock, backend=backend)  # fmt: skip
        wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
    finally:
        if backend is not None:
            backend.close()  # each round starts its workers again: the whole run's figure includes their start
        proc.terminate()
        proc.wait(timeout=30)
    _check(result)
    n = len(result.episodes)
    pickled = len(pickle.dumps(shipped, protocol=5)) / n if shipped else None
    events = len(shipped) / n if shipped else None
    trace_bytes = out.stat().st_size if record else None
    rows = len(load_trace(out).table) if record else None
    out.unlink(missing_ok=True)
    return {"episodes": n, "wall": wall, "eps": n / wall, "steady": steady(clock.ends),
            "first_s": min(clock.ends) - wall0, "driver_cpu_ms": 1000 * cpu / n,
            "trace_bytes_per_episode": None if trace_bytes is None else trace_bytes / n,
            "trace_rows_per_episode": None if rows is None else rows / n,
            "pickled_bytes_per_episode": pickled, "events_per_episode": events}  # fmt: skip


def _median(runs: list[dict[str, Any]], key: str) -> str:
    values = [run[key] for run in runs]
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=2_000)
    parser.add_argument("--cpu-episodes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--only", choices=("overhead", "cpu"), help="run only these two backends")
    args = parser.parse_args(argv)
    from ors_lab.evaluation.ray import RayBackend, start_local

    modes = {
        "local": ("overhead", None),
        "ray-1": ("overhead", RayBackend(workers=1, cpus=1)),
        "cpu-local": ("cpu", None),
        "cpu-ray-2": ("cpu", RayBackend(workers=2, cpus=1)),
    }
    if args.only is not None:
        modes = {name: mode for name, mode in modes.items() if mode[0] == args.only}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in modes}
    with tempfile.TemporaryDirectory(prefix="ors-lab-bench-") as name:
        tmp = Path(name)
        source = tmp / "source.parquet"
        seconds = record_source(source, args.episodes)
        print(f"source trace: {_rollouts(args.episodes) * 6} live episodes recorded in {seconds:.1f} s", flush=True)
        started = time.monotonic()
        cluster = start_local(cpus=2)
        init_s = time.monotonic() - started
        print(f"ray.init (local, loopback only): {init_s:.1f} s", flush=True)
        try:
            for round_ in range(args.rounds):
                order = list(modes) if round_ % 2 == 0 else list(reversed(modes))
                for mode in order:
                    kind, backend = modes[mode]
                    policy, episodes = (quiz_policy, args.episodes) if kind == "overhead" else (
                        cpu_quiz_policy, args.cpu_episodes)  # fmt: skip
                    run = one_run(source, tmp, mode, policy, episodes, backend, record=kind == "overhead")
                    runs[mode].append(run)
                    print(f"round {round_ + 1} {mode:<10} {run['episodes']} episodes in {run['wall']:.1f} s; "
                          f"steady {run['steady']:.1f} episodes/s; first episode after {run['first_s']:.2f} s; "
                          f"driver CPU {run['driver_cpu_ms']:.2f} ms/episode", flush=True)  # fmt: skip
        finally:
            stopped = time.monotonic()
            cluster.close()
            stop_s = time.monotonic() - stopped
    niceness = os.environ.get("RAY_worker_niceness", "15")  # noqa: SIM112  # Ray's own name
    print(f"ray.shutdown(): {stop_s:.1f} s; Ray workers' niceness {niceness}")
    print("\n| run | episodes/s, steady (median, range) | episodes/s, whole run | first episode after, s | "
          "driver CPU ms/episode |\n|---|---:|---:|---:|---:|")  # fmt: skip
    for mode, values in runs.items():
        print(f"| {mode} | {_median(values, 'steady')} | {_median(values, 'eps')} | {_median(values, 'first_s')} | "
              f"{_median(values, 'driver_cpu_ms')} |")  # fmt: skip
    verdicts = []
    if "ray-1" in runs:
        trace = [run["trace_bytes_per_episode"] for run in runs["ray-1"]]
        rows = [run["trace_rows_per_episode"] for run in runs["ray-1"]]
        local = runs["local"][-1]
        print(f"\ntrace per episode (ray-1, compacted): {statistics.median(trace):,.0f} bytes, "
              f"{statistics.median(rows):.1f} rows (events); events a worker ships per episode: "
              f"{local['events_per_episode']:.1f}, pickled {local['pickled_bytes_per_episode']:,.0f} bytes "
              "(measured on the local run's events)")  # fmt: skip
        verdicts.append(_verdict("Ray 1 worker ÷ local, steady episodes/s", runs["ray-1"], runs["local"],
                                 TARGET_OVERHEAD))  # fmt: skip
    if "cpu-ray-2" in runs:
        for mode in ("cpu-local", "cpu-ray-2"):
            cores = [run["steady"] * STEPS * POLICY_CPU_S for run in runs[mode]]
            print(f"{mode}: the policy's CPU per wall second (cores busy with it): {statistics.median(cores):.2f}")
        verdicts.append(_verdict("Ray 2 workers ÷ local, 20 ms CPU per step", runs["cpu-ray-2"], runs["cpu-local"],
                                 TARGET_SCALING))  # fmt: skip
    return 1 if args.check and not all(verdicts) else 0


def _verdict(label: str, ray: list[dict[str, Any]], local: list[dict[str, Any]], target: float) -> bool:
    ratios = [mine["steady"] / theirs["steady"] for mine, theirs in zip(ray, local, strict=True)]
    ratio = statistics.median(ratios)
    print(f"{label}: {ratio:.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)}; target >= {target}: "
          f"{'met' if ratio >= target else 'MISSED'})")  # fmt: skip
    return ratio >= target


if __name__ == "__main__":
    sys.exit(main())
