"""Recorder CPU per row: ours (pure Python) beside another checkout's recorder (the C one), in one run.

    .venv/bin/python bench/recorder_cpu.py                       # ours alone: about 30 s
    git worktree add /tmp/c-recorder c3430ab                     # the last commit with the recorder in C
    (cd /tmp/c-recorder && /path/to/.venv/bin/python setup.py build_ext --inplace)
    .venv/bin/python bench/recorder_cpu.py --baseline /tmp/c-recorder --rounds 5

What a row costs the process that records it, without the noise of a server sharing the cores:

1. **Capture.** A worker (a fresh interpreter, with one checkout's ``ors_lab`` first on its path)
   runs the quiz episodes of ``bench/client.py`` against an ors-sdk server with a capturing
   subscriber: ours keeps the typed events its client publishes; the baseline keeps the
   ``(kind, fields)`` its client emitted. So each recorder is fed what its own client gives it.
2. **Measure.** The worker then records the captured episodes through a fresh ``Recorder``, timing
   in its one thread (``time.thread_time``) all of the recorder's work: ``record`` (``emit``)
   per row, and, for every 100 episodes (about a 0.5 s flush in the overhead benchmark), the
   writer's work of taking the rows, converting them to Arrow and writing the part. The writer
   thread idles; its work is done in line so it is counted. Several runs; the fastest is kept
   (CPU time, and the fastest of several, so other load affects the figure little).
3. **Rounds.** With ``--baseline``, each round runs one worker of each, in turns; the figures are
   the medians over the rounds, with the ratio per round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

PART_EPISODES = 100
WARMUP = 50


def _capture(url: str, episodes: int) -> tuple[list[Any], bool]:
    """Run quiz episodes with a capturing subscriber; what was captured, and whether it is events (ours)."""
    import ors_lab
    from bench.client import _ours, run_batch

    captured: list[Any] = []
    typed = hasattr(ors_lab, "EventStream")

    class Sink:  # the baseline's recorder= took .emit(kind, **fields)
        def emit(self, kind: str, /, **fields: Any) -> None:
            captured.append((kind, fields))

    async def main() -> None:
        async with _ours(url, captured.append if typed else Sink()) as episode:
            await run_batch(episode, WARMUP, 32)
            captured.clear()
            batch = await run_batch(episode, episodes, 32)
            if batch.bad:
                raise SystemExit(f"bad episodes: {batch.bad[:3]}")

    asyncio.run(main())
    return captured, typed


def _record(rows: list[Any], typed: bool, path: Path, per_part: int) -> tuple[float, float]:
    """CPU seconds of the recorder's per-row calls and of its part writes, recording ``rows``."""
    from ors_lab import Recorder

    rec = Recorder(path, flush_interval=3600, part_rows=10**9)  # the writer thread idles; its work is done here
    if typed:
        take = lambda: rec._write_part(rec._rows.convert(rec._rows.swap()), rec._metadata(partial=True))  # noqa: E731
        put = rec.record
    else:
        take = lambda: rec._write_part(*rec._take_tables())  # noqa: E731
        put = None
    per_row = write = 0.0
    for start in range(0, len(rows), per_part):
        chunk = rows[start : start + per_part]
        t0 = time.thread_time()
        if put is not None:
            for event in chunk:
                put(event)
        else:
            for kind, fields in chunk:
                rec.emit(kind, **fields)
        t1 = time.thread_time()
        take()
        t2 = time.thread_time()
        per_row, write = per_row + t1 - t0, write + t2 - t1
    rec.close()
    return per_row, write


def worker(args: argparse.Namespace) -> dict[str, Any]:
    if args.code:
        sys.path.insert(0, args.code)  # this checkout's ors_lab, ahead of ours
    import pandas  # noqa: F401  (every ors_lab process that looks at results has it)

    import ors_lab

    rows, typed = _capture(args.url, args.episodes)
    per_part = len(rows) * PART_EPISODES // args.episodes
    with tempfile.TemporaryDirectory(prefix="ors-lab-recorder-cpu-") as tmp:
        _record(rows[:per_part], typed, Path(tmp) / "warm-up.parquet", per_part)  # pyarrow's first write
        runs = [_record(rows, typed, Path(tmp) / f"run-{i}.parquet", per_part) for i in range(args.runs)]
    per_row, write = min(runs, key=sum)
    return {
        "code": str(Path(ors_lab.__file__).parents[1]),
        "rows": len(rows),
        "episodes": args.episodes,
        "record_us": 1e6 * per_row / len(rows),
        "write_us": 1e6 * write / len(rows),
        "both_us": 1e6 * (per_row + write) / len(rows),
        "episode_ms": 1e3 * (per_row + write) / args.episodes,
    }


def spawn(url: str, code: str | None, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--worker", "--url", url, "--episodes", str(args.episodes),
               "--runs", str(args.runs)]  # fmt: skip
    if code:
        command += ["--code", code]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"worker for {code or 'ours'} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=600, help="episodes captured and recorded (default 600)")
    parser.add_argument("--runs", type=int, default=5, help="recordings per worker; the fastest counts (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="workers of each checkout, in turns (default 3)")
    parser.add_argument("--baseline", metavar="DIR", help="another checkout of ors_lab to measure beside ours")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--code", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    from ors_lab.demo.launch import serve

    labels = {"ours": None, "baseline": args.baseline} if args.baseline else {"ours": None}
    results: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    with serve("bench.quiz_env:ENVIRONMENTS", env={"PYTHONPATH": str(REPO_ROOT)}) as server:
        for round_ in range(args.rounds):
            order = list(labels) if round_ % 2 == 0 else list(reversed(labels))
            for label in order:
                result = spawn(server.url, labels[label], args)
                results[label].append(result)
                print(f"round {round_ + 1} {label:<8} {result['rows'] / result['episodes']:.1f} rows/episode  "
                      f"record {result['record_us']:.2f} us/row + write {result['write_us']:.2f} us/row = "
                      f"{result['both_us']:.2f} us/row, {result['episode_ms']:.3f} ms/episode  ({result['code']})",
                      flush=True)  # fmt: skip
    print("\n| recorder | rows/episode | record us/row | write us/row | CPU us/row | CPU ms/episode |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, runs in results.items():
        median = {key: statistics.median(r[key] for r in runs) for key in ("record_us", "write_us", "both_us",
                                                                             "episode_ms")}  # fmt: skip
        rows = runs[0]["rows"] / runs[0]["episodes"]
        print(f"| {label} | {rows:.1f} | {median['record_us']:.2f} | {median['write_us']:.2f} | "
              f"{median['both_us']:.2f} | {median['episode_ms']:.3f} |")  # fmt: skip
    if args.baseline:
        ratios = [ours["both_us"] / base["both_us"] for ours, base in zip(results["ours"], results["baseline"],
                                                                              strict=True)]  # fmt: skip
        print(
            f"\nours / baseline CPU per row, per round: {', '.join(f'{r:.2f}' for r in ratios)}; "
            f"median {statistics.median(ratios):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
