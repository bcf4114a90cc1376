"""The harness against the server it drives, and how soon a run starts (issue "The hot path").

    python bench/hot_path.py                 # 3 rounds of the four modes, then 5 start-ups: about 3 minutes
    python bench/hot_path.py --quick         # 1 round of 600 episodes, 3 start-ups: a smoke test
    python bench/hot_path.py --check         # exit 1 if a target is missed
    python bench/hot_path.py --profile       # the harness, recorded, under cProfile: its CPU by part
    python bench/hot_path.py --baseline /tmp/before   # also another checkout (git worktree add /tmp/before REV)

**The ratio.** Each round starts a fresh ors-sdk reference server (`bench.quiz_env:ENVIRONMENTS`) and runs
each mode in a fresh interpreter (`--worker`), in turns (the order rotated each round), c=32: an episode
opens a session on one of the 6 quiz tasks, reads its prompt and tools, calls `answer` once with the right
answer (reward 1.0, checked), and closes it. After a warm-up of 120 episodes, 1,800 are measured:

- `bare`: our `AsyncClient` alone runs the episodes, no event made (the client);
- `harness`: `aevaluate` of an agent making that one call, not recorded (+ events, agent plumbing, evaluator);
- `recorded`: the same with `record=` (+ the recorder: its subscriber on the loop, and its writer thread);
- `sync`: `ol.evaluate`, recorded, from plain Python (the sync face's own loop thread).

Figures: our process's CPU per episode (all its threads, `process_time`), the recorder's writer thread's
apart (its `/proc` task), the server's CPU per episode (its `/proc`), episodes/s and HTTP requests per
episode. The yardstick: **recorded CPU per episode ÷ the server's, at most 0.5**.

**The start-up.** In a fresh interpreter, with `import ors_lab` done and a connected `Client`, the time from
calling `ol.evaluate(..., record=...)` to its agent's first call (the first line of `run`); target <= 100 ms.

**The parts** (`--profile`): the recorded harness under cProfile (timed by the main thread's CPU clock, not the
wall clock, which would charge a syscall for the time it waited), its CPU by the package the time is spent
in (ors_lab's parts; the HTTP libraries and asyncio counted as the client's), scaled to the unprofiled
figure; the writer thread is measured apart (cProfile sees the main thread only).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0] or ".").resolve() == REPO_ROOT / "bench":
    sys.path[0] = str(REPO_ROOT)
elif str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.client import count_requests, load_now, process_cpu_s  # noqa: E402
from bench.quiz_data import SPLIT, TASKS, expected_answer  # noqa: E402

MODES = ("bare", "harness", "recorded", "sync")
CONCURRENCY = 32
WARMUP = 120
EPISODES = 1_800
RATIO_TARGET = 0.5
START_TARGET_MS = 100.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Answer:
    """The agent: one call, the right answer."""

    async def run(self, episode: Any) -> None:
        result = await episode.call("answer", {"answer": expected_answer(episode.index)})
        assert result.reward == 1.0, result
        assert result.finished, result


def thread_cpu_s(name: str) -> float:
    """CPU seconds of this process's thread called ``name`` so far (its /proc task), 0 when it is not there."""
    for thread in threading.enumerate():
        if thread.name == name and thread.native_id is not None:
            try:
                stat = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
            except OSError:
                return 0.0
            fields = stat.rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return 0.0


class WriterClock:
    """The recorder's writer thread's CPU, read just before the thread ends (it ends with ``close()``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(0.005):
            self.seconds = max(self.seconds, thread_cpu_s("ors-lab-recorder"))

    def __enter__(self) -> WriterClock:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def bare(url: str, episodes: int, first: int) -> None:
    import ors_lab as ol

    async with ol.AsyncClient(url) as client:
        env = client.environment("quiz")
        slots = asyncio.Semaphore(CONCURRENCY)

        async def one(i: int) -> None:
            async with slots, env.session(split=SPLIT, index=i % len(TASKS), view=False) as session:
                await session.prompt()
                await session.tools()
                result = await session.call("answer", {"answer": expected_answer(i % len(TASKS))})
                assert result.reward == 1.0, result
                assert result.finished, result

        await asyncio.gather(*(one(i) for i in range(first, first + episodes)))


def run_mode(mode: str, url: str, episodes: int, path: str | None) -> None:
    """``episodes`` episodes of ``mode`` (rollouts of the 6 tasks)."""
    import ors_lab as ol

    rollouts = episodes // len(TASKS)
    if mode == "bare":
        asyncio.run(bare(url, episodes, 0))
    elif mode == "sync":
        with ol.Client(url) as client:
            ol.evaluate(
                client.environment("quiz"),
                Answer(),
                split=SPLIT,
                rollouts=rollouts,
                concurrency=CONCURRENCY,
                record=path,
                progress=False,
            )
    else:

        async def go() -> None:
            async with ol.AsyncClient(url) as client:
                await ol.aevaluate(
                    client.environment("quiz"),
                    Answer(),
                    split=SPLIT,
                    rollouts=rollouts,
                    concurrency=CONCURRENCY,
                    record=path if mode == "recorded" else None,
                    progress=False,
                )

        asyncio.run(go())


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One mode: a warm-up (requests counted), then the measured episodes."""
    if args.ors_lab:  # another checkout's ors_lab (--baseline): first on the path, before anything imports it
        sys.path.insert(0, args.ors_lab)
    folder = Path(tempfile.mkdtemp(prefix="ors-lab-hot-"))
    recorded = args.worker in ("recorded", "sync")
    with count_requests() as counts:
        run_mode(args.worker, args.url, WARMUP, str(folder / "warm.parquet") if recorded else None)
    requests = sum(n for kind, n in counts.items() if kind != "new connections") / WARMUP
    server0, cpu0, wall0 = process_cpu_s(args.server_pid), time.process_time(), time.perf_counter()
    with WriterClock() as writer:
        run_mode(args.worker, args.url, args.episodes, str(folder / "run.parquet") if recorded else None)
    server1, cpu1, wall1 = process_cpu_s(args.server_pid), time.process_time(), time.perf_counter()
    assert server0 is not None
    assert server1 is not None
    return {
        "mode": args.worker,
        "episodes": args.episodes,
        "cpu_ms": 1000 * (cpu1 - cpu0) / args.episodes,
        "writer_ms": 1000 * writer.seconds / args.episodes,
        "server_ms": 1000 * (server1 - server0) / args.episodes,
        "eps": args.episodes / (wall1 - wall0),
        "requests": requests,
    }


def start_worker(args: argparse.Namespace) -> dict[str, Any]:
    """A fresh process: ``import ors_lab``, a connected client, then ``evaluate`` until its agent's first call."""
    if args.ors_lab:
        sys.path.insert(0, args.ors_lab)
    import ors_lab as ol

    first: list[float] = []

    class Timed:
        async def run(self, episode: Any) -> None:
            if not first:
                first.append(time.perf_counter())
            await episode.call("answer", {"answer": expected_answer(episode.index)})

    folder = Path(tempfile.mkdtemp(prefix="ors-lab-start-"))
    with ol.Client(args.url) as client:
        env = client.environment("quiz")
        client.environments()  # connected
        started = time.perf_counter()
        ol.evaluate(env, Timed(), split=SPLIT, tasks=1, record=str(folder / "run.parquet"), progress=False)
    return {"start_ms": 1000 * (first[0] - started)}


def spawn(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def interval(values: list[float]) -> str:
    return f"{min(values):.3f}-{max(values):.3f}" if values else "-"


def benchmark(args: argparse.Namespace) -> int:
    from ors_lab.demo.launch import serve

    rounds, episodes, starts = (1, 600, 3) if args.quick else (args.rounds, EPISODES, 5)
    checkouts = {"ours": None, **({"baseline": args.baseline} if args.baseline else {})}
    runs = [(checkout, mode) for mode in MODES for checkout in checkouts]
    results: list[dict[str, Any]] = []
    for round_ in range(rounds):
        order = runs[round_ % len(runs) :] + runs[: round_ % len(runs)]
        with serve("bench.quiz_env:ENVIRONMENTS", sdk="ors-sdk") as server:
            for checkout, mode in order:
                load_now()
                where = ["--ors-lab", checkouts[checkout]] if checkouts[checkout] else []
                result = spawn("--worker", mode, "--url", server.url, "--server-pid", str(server.pid),
                               "--episodes", str(episodes), *where)  # fmt: skip
                result.update(round=round_, checkout=checkout)
                results.append(result)
                print(
                    f"round {round_ + 1} {checkout:8s} {mode:9s} ours {result['cpu_ms']:.3f} ms/ep (writer "
                    f"{result['writer_ms']:.3f})  server {result['server_ms']:.3f} ms/ep  {result['eps']:.0f} ep/s  "
                    f"{result['requests']:.1f} requests/ep",
                    flush=True,
                )
    start_ms: dict[str, list[float]] = {checkout: [] for checkout in checkouts}
    with serve("bench.quiz_env:ENVIRONMENTS", sdk="ors-sdk") as server:
        for _ in range(starts):
            for checkout, path in checkouts.items():
                where = ["--ors-lab", path] if path else []
                start_ms[checkout].append(spawn("--start", "--url", server.url, *where)["start_ms"])
    by_run: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for result in results:
        by_run[(result["checkout"], result["mode"])].append(result)
    print(
        "\n| mode | CPU ms/episode (ours, all threads) | of it, the writer thread | server CPU ms/episode "
        "| ours ÷ server (rounds) | episodes/s | HTTP requests/episode |"
    )
    print("|---|---:|---:|---:|---|---:|---:|")
    for checkout, mode in runs:
        rows = by_run[(checkout, mode)]
        ratios = [r["cpu_ms"] / r["server_ms"] for r in rows]
        cpu, writer, server = (
            statistics.median(r[name] for r in rows) for name in ("cpu_ms", "writer_ms", "server_ms")
        )
        label = mode if checkout == "ours" else f"{mode} ({checkout})"
        print(
            f"| {label} | {cpu:.3f} | {writer:.3f} | {server:.3f}"
            f" | {statistics.median(ratios):.3f} ({interval(ratios)}) | {statistics.median(r['eps'] for r in rows):.0f}"
            f" | {statistics.median(r['requests'] for r in rows):.1f} |"
        )
    ratio = statistics.median(r["cpu_ms"] / r["server_ms"] for r in by_run[("ours", "recorded")])
    start = statistics.median(start_ms["ours"])
    for checkout, values in start_ms.items():
        which = "" if checkout == "ours" else f" ({checkout})"
        print(
            f"\nstart-up{which}: first agent call {statistics.median(values):.0f} ms after evaluate() "
            f"(median of {len(values)}; {min(values):.0f}-{max(values):.0f})"
        )
    verdicts = [
        (f"recorded evaluate, ours ÷ server CPU per episode <= {RATIO_TARGET}", ratio <= RATIO_TARGET, f"{ratio:.3f}"),
        (f"first agent call after evaluate() <= {START_TARGET_MS:.0f} ms", start <= START_TARGET_MS, f"{start:.0f} ms"),
    ]
    for name, met, figure in verdicts:
        print(f"{'met' if met else 'MISSED'}: {name}: {figure}")
    return 1 if args.check and not all(met for _, met, _ in verdicts) else 0


PARTS = (
    ("ors_lab/client", "client"),
    ("ors_lab/protocol", "client"),
    ("ors_lab/events", "events"),
    ("ors_lab/transcript", "events"),
    ("ors_lab/evaluation", "evaluator"),
    ("ors_lab/agents", "evaluator"),
    ("ors_lab/analysis", "evaluator"),
    ("ors_lab/viewer", "evaluator"),
    ("ors_lab/recording", "recorder"),
)


def part_of(file: str) -> str:
    for where, part in PARTS:
        if where in file:
            return part
    if "<ors_lab.events" in file:
        return "events"
    if "bench/" in file:
        return "the agent"
    return "client"  # the HTTP libraries, asyncio, sockets: the wire's


def profile(args: argparse.Namespace) -> int:
    from ors_lab.demo.launch import serve

    with serve("bench.quiz_env:ENVIRONMENTS", sdk="ors-sdk") as server:
        plain = spawn(
            "--worker", "recorded", "--url", server.url, "--server-pid", str(server.pid), "--episodes", str(EPISODES)
        )
        folder = Path(tempfile.mkdtemp(prefix="ors-lab-prof-"))
        run_mode("recorded", server.url, WARMUP, str(folder / "warm.parquet"))
        profiler = cProfile.Profile(time.thread_time)  # the main thread's CPU, not the wall clock (a blocked send)
        with WriterClock() as writer:
            profiler.enable()
            run_mode("recorded", server.url, EPISODES, str(folder / "run.parquet"))
            profiler.disable()
    stats = pstats.Stats(profiler)
    parts: Counter[str] = Counter()
    for (file, _, _), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        parts[part_of(file)] += own
    total = sum(parts.values())
    main_ms = plain["cpu_ms"] - plain["writer_ms"]
    print(
        f"recorded harness: {plain['cpu_ms']:.3f} ms/ep of CPU, {plain['writer_ms']:.3f} of it the writer thread "
        f"(profiled run: {1000 * writer.seconds / EPISODES:.3f}); the main thread's {main_ms:.3f} ms split by cProfile:"
    )
    print("\n| part | CPU ms/episode | share |\n|---|---:|---:|")
    for part, own in parts.most_common():
        print(f"| {part} | {main_ms * own / total:.3f} | {100 * own / total:.0f}% |")
    print(f"| writer thread | {plain['writer_ms']:.3f} | |")
    if args.top:
        stats.sort_stats("tottime").print_stats(args.top)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the four modes (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 round of 600 episodes, 3 start-ups (smoke test)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--profile", action="store_true", help="the recorded harness under cProfile, by part")
    parser.add_argument("--top", type=int, default=0, help="with --profile: also the N functions of most own time")
    parser.add_argument(
        "--baseline",
        metavar="CHECKOUT",
        help="also run another checkout's ors_lab (its root), in the same rounds, for a before/after",
    )
    parser.add_argument("--worker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--ors-lab", help=argparse.SUPPRESS)
    parser.add_argument("--start", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--episodes", type=int, default=EPISODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if args.start:
        print(json.dumps(start_worker(args)))
        return 0
    return profile(args) if args.profile else benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
