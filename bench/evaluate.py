"""Evaluation harness benchmark: 10,000 scripted episodes against a ReplayServer at speed 0, recorded.

    python bench/evaluate.py                 # record the source trace (live), then the measured run
    python bench/evaluate.py --episodes 2000 # smaller, for a smoke test
    python bench/evaluate.py --check         # exit 1 if memory grows beyond the result rows

What it does:

1. **Source trace.** ``evaluate`` runs the scripted quiz policy (prompt, ``blob`` twice,
   ``answer``; every reward checked) over the quiz environment of ``bench/quiz_env.py`` on a live
   ors-sdk server, 6 tasks x N/6 rollouts, recorded. This is only the material to replay.
2. **Measured run**, in a fresh interpreter (``--worker``): ``ors-lab replay SOURCE --speed 0`` in
   its own process (so its CPU is not ours), and ``evaluate`` of the same policy against it with
   ``record=`` on, concurrency 32. Reported: episodes/s, the harness process's CPU per episode
   (client, agent, evaluator and recorder: everything in our process), the peak RSS, and RSS
   sampled every 1,000 finished episodes.
3. **Memory target**: memory must not grow with the number of episodes beyond the result rows.
   The figure is the RSS growth per episode between the first and the last sample (once warm),
   against the size of one episode's result rows (an ``EpisodeRecord`` with its steps, measured
   deeply); "met" when the growth per episode is at most 2x the rows' size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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

from bench.client import process_cpu_s  # noqa: E402
from bench.quiz_data import SPLIT, TASKS, expected_answer  # noqa: E402

ENV_NAME = "quiz"
CONCURRENCY = 32
BLOB_CHARS = 200
SAMPLE_EVERY = 1_000
TARGET_GROWTH = 2.0  # RSS growth per episode, at most this many times the size of its result rows
MB = 2**20


def quiz_policy(obs: Any) -> Any:
    """The quiz episode of bench/client.py as a policy: blob, blob, answer; checks what comes back."""
    from ors_lab.agents.policy import ToolCall

    if obs.step == 0:
        assert obs.prompt.startswith(TASKS[obs.index]["question"]), obs.prompt
    if obs.step < 2:
        if obs.step:
            assert obs.last.text == ("0123456789" * 20)[:BLOB_CHARS]
            assert obs.last.reward == 0.0
        return ToolCall("blob", {"n": BLOB_CHARS})
    return ToolCall("answer", {"answer": expected_answer(obs.index)})


def _rollouts(episodes: int) -> int:
    return max(1, -(-episodes // len(TASKS)))


def _check(result: Any) -> None:
    episodes = result.episodes
    bad = episodes[(episodes["reward"] != 1.0) | episodes["error"].notna()]
    if len(bad):
        raise SystemExit(f"{len(bad)} bad episodes, e.g.:\n{bad.head(3).to_string()}")


def record_source(path: Path, episodes: int) -> float:
    """Step 1: the live run that makes the trace to replay; returns its seconds."""
    from ors_lab import Client
    from ors_lab.demo.launch import serve
    from ors_lab.evaluation import evaluate

    env = {"PYTHONPATH": str(REPO_ROOT)}
    started = time.monotonic()
    with serve("bench.quiz_env:ENVIRONMENTS", env=env) as server, Client(server.url) as client:
        result = evaluate(client.environment(ENV_NAME), quiz_policy, split=SPLIT, rollouts=_rollouts(episodes),
                          concurrency=CONCURRENCY, record=path, progress=False)  # fmt: skip
    _check(result)
    return time.monotonic() - started


def _deep_size(value: Any, seen: set[int] | None = None) -> int:
    """Bytes held by an object and everything it references (each object once)."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in value.items())
    elif isinstance(value, list | tuple | set | frozenset):
        size += sum(_deep_size(v, seen) for v in value)
    elif hasattr(value, "__slots__"):
        size += sum(_deep_size(getattr(value, name), seen) for name in value.__slots__ if hasattr(value, name))
    return size


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(source: str, out: str, episodes: int) -> dict[str, Any]:
    """Step 2, in a fresh interpreter: the replay server in its own process, our harness here."""
    from ors_lab import Client
    from ors_lab.evaluation import evaluate

    log = Path(out).with_suffix(".replay.log")
    with log.open("w") as sink:  # a file, not a pipe: the server prints what went unplayed when it stops
        proc = subprocess.Popen([sys.executable, "-m", "ors_lab.cli", "replay", source, "--speed", "0"],
                                stdout=sink, stderr=subprocess.STDOUT, cwd=REPO_ROOT)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while " at http://" not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        line = log.read_text().splitlines()[0] if log.read_text() else ""
        url = line.rsplit(" at ", 1)[-1].strip()
        assert url.startswith("http://127.0.0.1:"), log.read_text()[-2000:]
        samples: list[tuple[int, int]] = []
        finished = 0

        def sample(event: Any) -> None:
            nonlocal finished
            if event.type == "episode":
                finished += 1
                if finished % SAMPLE_EVERY == 0:
                    samples.append((finished, _rss()))

        with Client(url) as client:
            env = client.environment(ENV_NAME)
            cpu0, wall0 = time.process_time(), time.monotonic()
            result = evaluate(env, quiz_policy, split=SPLIT, rollouts=_rollouts(episodes), concurrency=CONCURRENCY,
                              record=out, progress=False, subscribe=sample)  # fmt: skip
            wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
        server_cpu = process_cpu_s(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    _check(result)
    n = len(result)
    row_bytes = _deep_size(result.records[n // 2])
    (first_n, first_rss), (last_n, last_rss) = samples[1] if len(samples) > 2 else samples[0], samples[-1]
    growth = (last_rss - first_rss) / max(last_n - first_n, 1)
    return {
        "episodes": n,
        "eps": n / wall,
        "cpu_ms": 1000 * cpu / n,
        "replay_server_cpu_ms": None if server_cpu is None else 1000 * server_cpu / n,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "samples": samples,
        "growth_bytes_per_episode": growth,
        "result_row_bytes": row_bytes,
        "trace_events": _events(out),
    }


def _events(path: str) -> int:
    import pyarrow.parquet as pq

    return int(pq.read_metadata(path).num_rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--check", action="store_true", help="exit 1 if the memory target is missed")
    parser.add_argument("--worker", nargs=2, metavar=("SOURCE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.episodes)))
        return 0
    with tempfile.TemporaryDirectory(prefix="ors-lab-bench-") as tmp:
        source = Path(tmp) / "source.parquet"
        seconds = record_source(source, args.episodes)
        print(f"source trace: {_rollouts(args.episodes) * len(TASKS)} live episodes recorded in {seconds:.1f} s")
        done = subprocess.run(
            [sys.executable, __file__, "--episodes", str(args.episodes), "--worker", str(source),
             str(Path(tmp) / "measured.parquet")],
            capture_output=True, text=True, cwd=REPO_ROOT, timeout=1800, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        result = json.loads(done.stdout.strip().splitlines()[-1])
    growth, row = result["growth_bytes_per_episode"], result["result_row_bytes"]
    met = growth <= TARGET_GROWTH * row
    print(
        f"| measure | figure |\n|---|---:|\n"
        f"| episodes (scripted, ReplayServer speed 0, recorded, c={CONCURRENCY}) | {result['episodes']:,} |\n"
        f"| episodes/s | {result['eps']:.1f} |\n"
        f"| harness CPU per episode (ms) | {result['cpu_ms']:.2f} |\n"
        f"| replay server CPU per episode (ms, its own process) | {result['replay_server_cpu_ms'] or 0:.2f} |\n"
        f"| trace events written | {result['trace_events']:,} |\n"
        f"| peak RSS (MB) | {result['peak_rss_mb']:.1f} |\n"
        f"| RSS growth per episode, warm (bytes) | {growth:,.0f} |\n"
        f"| result rows per episode (bytes, deep size) | {row:,} |\n"
        "\nRSS every 1,000 episodes (MB): "
        + ", ".join(f"{n:,}: {rss / MB:.1f}" for n, rss in result["samples"])
        + f"\n\nmemory target (growth <= {TARGET_GROWTH:g}x the result rows): {'met' if met else 'MISSED'}"
    )
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
