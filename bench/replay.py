"""Replay benchmark: how fast ReplayServer serves, and how faithfully it keeps time.

    python bench/replay.py [--quick]

1. Throughput. A trace of SESSIONS sessions x CALLS ``blob{n:200}`` calls is recorded against the
   ors-sdk reference server. Then, in one run and interleaved over rounds, the same workload (the
   same sessions and calls, our AsyncClient at concurrency 32) runs against a freshly started
   ors-sdk server and against ``ors-lab replay TRACE --speed 0`` (each in its own process). Reported:
   tool calls per second and server CPU per call; target: replay >= 3x the reference server.
2. Timing fidelity at speed 1. A trace of calls to ``wait{seconds}`` (5-30 ms, so each stream has a
   gap between its ``task_id`` and its ``end``), plus the gap from each request to its response head,
   is replayed at speed 1 with recording on; |replayed gap - recorded gap| over >= 1,000 gaps,
   median and p99. Targets: median <= 1 ms, p99 <= 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ors_lab as ol  # noqa: E402
from bench.quiz_data import SPLIT, TASKS  # noqa: E402
from ors_lab.demo.launch import serve  # noqa: E402

ENVS = "bench.quiz_env:ENVIRONMENTS"
CONCURRENCY = 32


async def workload(url: str, sessions: int, calls: int, recorder: Any = None) -> tuple[int, float]:
    """`sessions` sessions, `calls` blob calls each, 32 at a time; returns (calls made, seconds)."""
    async with ol.AsyncClient(url, recorder=recorder) as client:
        env = client.environment("quiz")
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(index: int) -> int:
            async with gate, env.session(split=SPLIT, index=index % len(TASKS), view=False) as session:
                for _ in range(calls):
                    result = await session.call("blob", {"n": 200})
                    assert result.ok, result
                    assert len(result.text) == 200, result
            return calls

        started = time.perf_counter()
        done = await asyncio.gather(*(one(i) for i in range(sessions)))
        return sum(done), time.perf_counter() - started


def record_workload(path: Path, sessions: int, calls: int) -> None:
    with serve(ENVS) as server, ol.Recorder(path) as rec:
        asyncio.run(workload(server.url, sessions, calls, rec))


def replay_process(trace: Path, speed: float) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "ors_lab.cli", "replay", str(trace), "--speed", str(speed)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+", line)
    if not found:
        proc.kill()
        raise RuntimeError(f"ors-lab replay did not start: {line!r}")
    return proc, found.group(0)


def measure(url: str, pid: int, sessions: int, calls: int) -> dict[str, float]:
    server = psutil.Process(pid)
    cpu0 = sum(server.cpu_times()[:2])
    made, seconds = asyncio.run(workload(url, sessions, calls))
    cpu = sum(server.cpu_times()[:2]) - cpu0
    return {"calls_s": made / seconds, "server_cpu_ms": 1000 * cpu / made}


def throughput(trace: Path, sessions: int, calls: int, rounds: int) -> dict[str, list[dict[str, float]]]:
    results: dict[str, list[dict[str, float]]] = {"ors-sdk server": [], "ReplayServer speed 0": []}
    for round_number in range(rounds):
        order = list(results) if round_number % 2 == 0 else list(reversed(results))
        for name in order:
            if name == "ors-sdk server":
                with serve(ENVS) as server:
                    r = measure(server.url, server.pid, sessions, calls)
            else:
                proc, url = replay_process(trace, 0)
                try:
                    r = measure(url, proc.pid, sessions, calls)
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
                    if proc.stdout is not None:
                        proc.stdout.close()
            results[name].append(r)
            print(f"  round {round_number + 1} {name:<22} {r['calls_s']:8.1f} calls/s "
                  f"{r['server_cpu_ms']:6.3f} server CPU ms/call", flush=True)  # fmt: skip
    return results


async def timing_workload(url: str, waits: list[float], recorder: Any = None) -> None:
    async with (
        ol.AsyncClient(url, recorder=recorder) as client,
        client.environment("quiz").session(split=SPLIT, index=0, view=False) as session,
    ):
        for seconds in waits:
            assert (await session.call("wait", {"seconds": seconds})).text == "waited"


def gaps(path: Path) -> list[float]:
    """Per call: response head → task_id → end gaps, and request → response head, in seconds."""
    events = ol.load_trace(path).events
    rows = events[events["call"].notna() & events["kind"].isin(["request", "response", "event"])]
    out: list[float] = []
    for _, call in rows.groupby(["session_id", "call"], sort=False):
        times = list(call["t_ns"])
        out.extend((b - a) / 1e9 for a, b in itertools.pairwise(times))
    return out


def fidelity(folder: Path, count: int) -> tuple[float, float, int]:
    rng = random.Random(7)
    waits = [round(rng.uniform(0.005, 0.03), 4) for _ in range(count)]
    recorded, replayed = folder / "timing.parquet", folder / "timing-replayed.parquet"
    with serve(ENVS) as server, ol.Recorder(recorded) as rec:
        asyncio.run(timing_workload(server.url, waits, rec))
    proc, url = replay_process(recorded, 1.0)
    try:
        with ol.Recorder(replayed) as rec:
            asyncio.run(timing_workload(url, waits, rec))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    before, after = gaps(recorded), gaps(replayed)
    assert len(before) == len(after), (len(before), len(after))
    errors = sorted(abs(a - b) * 1000 for a, b in zip(before, after, strict=True))
    return statistics.median(errors), errors[int(0.99 * (len(errors) - 1))], len(errors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short run (fewer calls and rounds)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    sessions, calls, rounds, timed = (64, 10, 1, 400) if args.quick else (96, 20, 3, 1100)
    os.environ.setdefault("NO_PROXY", "127.0.0.1")
    with tempfile.TemporaryDirectory(prefix="ors-lab-bench-") as tmp:
        folder = Path(tmp)
        trace = folder / "workload.parquet"
        record_workload(trace, sessions, calls)
        print(f"recorded {sessions} sessions x {calls} calls; throughput at concurrency {CONCURRENCY}:", flush=True)
        results = throughput(trace, sessions, calls, rounds)
        median, p99, n = fidelity(folder, timed // 3 + 1)
    table = {name: (statistics.median(r["calls_s"] for r in rs), statistics.median(r["server_cpu_ms"] for r in rs))
             for name, rs in results.items()}  # fmt: skip
    ratio = table["ReplayServer speed 0"][0] / table["ors-sdk server"][0]
    print("\n| server | tool calls/s (c=32) | server CPU ms/call |\n|---|---:|---:|")
    for name, (speed, cpu) in table.items():
        print(f"| {name} | {speed:.0f} | {cpu:.3f} |")
    print(f"\nreplay / reference calls per second = {ratio:.2f} (target >= 3: {'met' if ratio >= 3 else 'MISSED'})")
    verdict = {True: "met", False: "MISSED"}
    print(f"timing fidelity at speed 1 over {n} gaps: median {median:.3f} ms (target <= 1: {verdict[median <= 1]}), "
          f"p99 {p99:.3f} ms (target <= 5: {verdict[p99 <= 5]})")  # fmt: skip
    missed = ratio < 3 or median > 1 or p99 > 5
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
