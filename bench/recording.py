"""Recording benchmark: what recording costs the client, how fast the recorder writes, how fast traces load.

    python bench/recording.py              # 60 overhead rounds (240 segments), 1M-event writes: about 6 minutes
    python bench/recording.py --quick      # 1 round of small segments, 200k-event writes (a smoke test, noisy)
    python bench/recording.py --check      # exit 1 if a target is missed
    python bench/recording.py --control    # the overhead method checked: a plain client in both slots

Three measurements, each in subprocesses of this script (``--worker ...``), so imports, heaps and
peak RSS never mix:

1. **Recording overhead.** The quiz workload of ``bench/client.py`` (open, prompt, 2 x ``blob``,
   ``answer``, close; every result checked) with our ``AsyncClient`` at concurrency 32, without a
   recorder and with ``recorder=Recorder(...)``. Each mode runs in its own long-lived worker against
   its own freshly started ors-sdk server, and the two take turns, one segment of 150 episodes
   (about a second) at a time: each round runs plain, recorded, recorded, plain (the next round
   recorded, plain, plain, recorded), so the segments compared are seconds apart and a drift of
   the machine's speed within a round cancels out. Every 6 rounds both servers and both workers
   start afresh (the ors-sdk server keeps each result 60 s, so its CPU per request drifts over a
   long run). The figure is the median over all rounds of the round's recorded ÷ plain
   episodes/s (the mean of its two segments of each), with a bootstrap 95% interval: on a host
   whose speed swings, the interval says how far one run can be trusted. A recorded segment ends
   when its last row is in a part on disk, so the writing is counted. At the end the recorded
   worker closes the recorder and checks the trace (one finished episode with reward 1.0 per
   episode run), so a recorder that drops events cannot post a good figure.
2. **Sustained write rate.** Synthetic events through ``Recorder.record`` until ``close()`` returns
   (compaction included), bytes per event of the compacted file, and the peak RSS over the
   baseline (``ru_maxrss``, after the imports and one tiny Parquet write, which costs pyarrow about
   55 MB once per process whatever is written). Two shapes of events: ``chunk`` (one SSE event row
   with 50 bytes of data, as in tests/recording/test_crash.py) and ``episode`` (the 29 events our
   client publishes for one quiz episode: requests and responses with headers and bodies, SSE
   chunks and events, results, open and close; a new session id per episode).
3. **Loading.** ``load_trace(path).events`` on the 1M-event ``episode`` trace of (2), against a bare
   ``pyarrow.parquet.read_table(path).to_pandas()`` of the same file, interleaved, median of
   several runs each.

Targets: overhead >= 0.97; peak RSS for 1M events < 150 MB over the baseline; loading <= 1.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
# Run as `python bench/recording.py`, sys.path[0] is bench/ itself; put the repo root there instead.
if sys.path and Path(sys.path[0] or ".").resolve() == REPO_ROOT / "bench":
    sys.path[0] = str(REPO_ROOT)
elif str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.client import (  # noqa: E402
    QUIET_BUDGET_S,
    QUIET_CORES,
    QuietWaiter,
    _ours,
    machine_busy_s,
    process_cpu_s,
    run_batch,
    run_worker,
    worker_env,
)

CONCURRENCY = 32
TARGET_OVERHEAD = 0.97  # recorded ÷ plain episodes/s, at least (issue "The hot path")
ROUNDS = 60  # overhead rounds of 4 segments each, all counted
ROUNDS_PER_BLOCK = 6  # rounds between fresh servers and fresh workers
SEGMENT = 150  # measured episodes per segment
BOOTSTRAP = 10_000  # resamples of the rounds for the interval around their median
TARGET_RSS_MB = 150.0  # peak RSS over the baseline while recording 1M events, below
TARGET_LOAD = 1.5  # load_trace(path).events ÷ read_table(path).to_pandas(), at most
WORKER_TIMEOUT = 300.0
MB = 2**20


# --------------------------------------------------------------------------------------------
# 1. Recording overhead: the quiz episodes of bench/client.py, with and without a recorder


def quiz_episodes(url: str, recorder: Any) -> Any:
    """bench/client.py's episode for our client, with ``recorder=`` passed to the client."""
    return _ours(url, recorder)


def writer_cpu_s(recorder: Any) -> float:
    """User + system CPU seconds of the recorder's writer thread so far (0 without a recorder)."""
    if recorder is None:
        return 0.0
    import psutil

    native_id = recorder._writer.native_id
    return sum(t.user_time + t.system_time for t in psutil.Process().threads() if t.id == native_id)


async def overhead_worker(args: argparse.Namespace) -> None:
    """One mode, plain or recorded, on its own server: warm up, then one measured segment per stdin line.

    Speaks JSON lines on stdout: ``ready`` after the warm-up, one result per segment (a line holding
    a number of episodes), and, at the end of stdin, a closing line (recorded: the recorder closed
    and its trace checked, one finished episode with reward 1.0 per episode run).
    """
    # Both modes start from the same heap: ors_lab's recording modules, and pandas. The recorder's
    # first Arrow conversion imports pandas (pyarrow loads it lazily when it converts a list), and
    # an ors_lab process has it anyway (load_trace, evaluate and notebooks use DataFrames); a plain
    # worker without it ran with 27,000 fewer objects for every full garbage collection to scan.
    import pandas  # noqa: F401
    import pyarrow as pa

    from ors_lab.analysis import load_trace
    from ors_lab.recording import Recorder

    pa.array([0])  # what loads pandas in the recorder, done in both modes
    from ors_lab.recording.parts import PART_GLOB

    def reply(message: dict[str, Any]) -> None:
        print(json.dumps(message), flush=True)

    path = Path(args.dir) / f"overhead-{os.getpid()}.parquet"
    recorder = Recorder(path) if args.mode == "recorded" else None
    # a recorded segment ends when its last row is in a part on disk, so no writing is left out
    drain = (lambda: asyncio.to_thread(recorder.flush)) if recorder is not None else None
    loop = asyncio.get_running_loop()
    bad: list[str] = []
    async with quiz_episodes(args.url, recorder) as episode:
        warm = await run_batch(episode, args.warmup, args.concurrency)
        bad += warm.bad
        # The process's first part write sets up pyarrow's IPC writer once; let it land here.
        if recorder is not None:
            for _ in range(60):
                if any(recorder.parts.glob(PART_GLOB)):
                    break
                await asyncio.sleep(0.05)
        run = args.warmup
        reply({"ready": True})
        # read stdin off the loop, so the client's connections stay served between segments
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            episodes = int(line)
            parts0 = len(list(recorder.parts.glob(PART_GLOB))) if recorder is not None else 0
            writer0 = writer_cpu_s(recorder)
            server0, machine0 = process_cpu_s(args.server_pid), machine_busy_s()
            batch = await run_batch(episode, episodes, args.concurrency, first=run, drain=drain)
            server1, machine1 = process_cpu_s(args.server_pid), machine_busy_s()
            writer1 = writer_cpu_s(recorder)
            run += episodes
            bad += batch.bad
            server_cpu = None if server0 is None or server1 is None else server1 - server0
            outside = (machine1 - machine0) - batch.cpu_s - (server_cpu or 0.0)
            segment: dict[str, Any] = {
                "mode": args.mode,
                "eps": batch.episodes / batch.wall_s,
                "cpu_ms": 1000 * batch.cpu_s / batch.episodes,
                "server_cpu_ms": None if server_cpu is None else 1000 * server_cpu / batch.episodes,
                "server_busy": None if server_cpu is None else server_cpu / batch.wall_s,
                "outside_cores": max(0.0, outside) / batch.wall_s,
                "bad": batch.bad,
            }
            if recorder is not None:
                parts1 = len(list(recorder.parts.glob(PART_GLOB)))
                segment["parts_per_s"] = (parts1 - parts0) / batch.wall_s
                segment["writer_cpu_ms"] = 1000 * (writer1 - writer0) / batch.episodes
            reply(segment)
    closing: dict[str, Any] = {"mode": args.mode, "bad": bad}
    if recorder is not None:
        started = time.perf_counter()
        recorder.close()
        close_s = time.perf_counter() - started
        trace = load_trace(path)
        episodes_run = trace.episodes
        good = int((episodes_run["finished"].astype(bool) & (episodes_run["final_reward"] == 1.0)).sum())
        if trace.partial or len(episodes_run) != run or good != run:
            bad.append(f"the trace holds {good} good episodes of {len(episodes_run)}, {run} were run")
        closing |= {
            "close_s": close_s,
            "rows_per_episode": len(trace) / run,
            "bytes_per_episode": path.stat().st_size / run,
        }
        path.unlink()
    reply(closing)


# --------------------------------------------------------------------------------------------
# 2. Sustained write rate and peak RSS: synthetic events


URL = "http://127.0.0.1:8080"
REQUEST_HEADERS = {
    "host": "127.0.0.1:8080",
    "accept": "*/*",
    "accept-encoding": "gzip, deflate",
    "connection": "keep-alive",
    "user-agent": "ors-lab/0.1.0",
}
JSON_HEADERS = {
    "date": "Mon, 30 Nov 2026 02:19:36 GMT",
    "server": "uvicorn",
    "content-length": "42",
    "content-type": "application/json",
}
SSE_HEADERS = {
    "date": "Mon, 30 Nov 2026 02:19:36 GMT",
    "server": "uvicorn",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-accel-buffering": "no",
    "content-type": "text/event-stream; charset=utf-8",
    "transfer-encoding": "chunked",
}
PROMPT = b'[{"text":"What is 7 + 8? Call answer with just the number.","detail":null,"type":"text"}]'
BLOB_END = (
    '{"ok":true,"output":{"blocks":[{"text":"' + "0123456789" * 20 + '","detail":null,"type":"text"}],'
    '"metadata":null,"reward":0.0,"finished":false}}'
)
ANSWER_END = (
    '{"ok":true,"output":{"blocks":[{"text":"Correct!","detail":null,"type":"text"}],'
    '"metadata":null,"reward":1.0,"finished":true}}'
)
CALLS = (
    (b'{"name":"blob","input":{"n":200}}', BLOB_END, 341),
    (b'{"name":"blob","input":{"n":200}}', BLOB_END, 341),
    (b'{"name":"answer","input":{"answer":"15"}}', ANSWER_END, 148),
)


def episode_events(i: int) -> Iterator[Any]:
    """The 29 typed events our AsyncClient publishes for one quiz episode, as it publishes them."""
    import httpx2

    from ors_lab.events import (
        ChunkEvent,
        CloseEvent,
        OpenEvent,
        RequestEvent,
        ResponseEvent,
        ResultEvent,
        SSEEvent,
    )

    def headers(values: dict[str, str]) -> httpx2.Headers:
        return httpx2.Headers(list(values.items()))

    sid = f"{i:032x}"
    plain = headers({**REQUEST_HEADERS, "x-session-id": sid})
    json_request = headers({**REQUEST_HEADERS, "x-session-id": sid, "content-type": "application/json"})
    sse_request = headers({**REQUEST_HEADERS, "x-session-id": sid, "content-type": "application/json",
                           "accept": "text/event-stream"})  # fmt: skip
    json_answer, sse_answer = headers(JSON_HEADERS), headers(SSE_HEADERS)
    sid_body = b'{"sid":"%s"}' % sid.encode()
    create = b'{"env_name":"quiz","split":"test","index":%d}' % (i % 6)
    yield RequestEvent(session_id=sid, attempt=1, method="POST", url=URL + "/create", headers=json_request, body=create)
    yield ResponseEvent(session_id=sid, attempt=1, status=200, headers=json_answer, ttfb_ns=4_000_000, body=sid_body)
    yield OpenEvent(session_id=sid, environment="quiz", split="test", task_index=i % 6)
    yield RequestEvent(session_id=sid, attempt=1, method="GET", url=URL + "/quiz/prompt", headers=plain, body=b"")
    yield ResponseEvent(session_id=sid, attempt=1, status=200, headers=json_answer, ttfb_ns=2_000_000, body=PROMPT)
    for call, (body, end, size) in enumerate(CALLS, 1):
        task_id = f"{i:028x}{call:04x}"
        at = {"session_id": sid, "attempt": 1, "call": call}
        yield RequestEvent(**at, method="POST", url=URL + "/quiz/call", headers=sse_request, body=body)
        yield ResponseEvent(**at, status=200, headers=sse_answer, ttfb_ns=2_000_000)
        yield ChunkEvent(**at, size=58)
        yield SSEEvent(**at, event="task_id", data=task_id)
        yield ChunkEvent(**at, size=size)
        yield SSEEvent(**at, event="end", data=end)
        finished = call == len(CALLS)
        yield ResultEvent(session_id=sid, call=call, task_id=task_id, ok=True, reward=1.0 if finished else 0.0,
                          finished=finished)  # fmt: skip
    yield RequestEvent(session_id=sid, attempt=1, method="POST", url=URL + "/delete", headers=plain, body=b"")
    yield ResponseEvent(session_id=sid, attempt=1, status=200, headers=json_answer, ttfb_ns=3_000_000, body=sid_body)
    yield CloseEvent(session_id=sid)


def write_worker(args: argparse.Namespace) -> dict[str, Any]:
    """Record args.events synthetic events of one shape, close; rate, size, peak RSS over the baseline."""
    import psutil
    import pyarrow.parquet as pq

    from ors_lab.events import SSEEvent
    from ors_lab.recording import Recorder
    from ors_lab.recording.schema import SCHEMA

    path = Path(args.path)
    warm = path.with_name("warm-up.parquet")
    pq.write_table(SCHEMA.empty_table(), warm)  # pyarrow's one-time cost of a first write (about 55 MB)
    pq.read_table(warm)
    warm.unlink()
    gc.collect()
    baseline = psutil.Process().memory_info().rss
    events = args.events
    started = time.perf_counter()
    recorder = Recorder(path, overwrite=True)
    record = recorder.record
    if args.shape == "chunk":
        for i in range(events):
            record(SSEEvent(session_id=f"s{i // 1000}", call=i // 100 % 1000, event="chunk", data="x" * 50))
    else:
        emitted = i = 0
        while emitted < events:
            for event in episode_events(i):
                record(event)
                emitted += 1
            i += 1
        events = emitted
    emitted_at = time.perf_counter()
    peak_emitting = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    recorder.close()
    closed_at = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    rows = pq.ParquetFile(path).metadata.num_rows
    if rows != events:
        raise SystemExit(f"the trace holds {rows} rows; {events} events were emitted")
    return {
        "shape": args.shape,
        "events": events,
        "rate": events / (closed_at - started),
        "emit_rate": events / (emitted_at - started),
        "close_s": closed_at - emitted_at,
        "bytes_per_event": path.stat().st_size / events,
        "rss_emitting_mb": (peak_emitting - baseline) / MB,
        "rss_mb": (peak - baseline) / MB,
        "baseline_mb": baseline / MB,
    }


# --------------------------------------------------------------------------------------------
# 3. Loading a trace


def load_worker(args: argparse.Namespace) -> dict[str, Any]:
    """Time load_trace(path).events, read_table().to_pandas() and the ArrowDtype variant, interleaved."""
    import pandas as pd
    import pyarrow.parquet as pq

    from ors_lab.analysis import load_trace

    path = Path(args.path)

    def ours() -> Any:
        return load_trace(path).events

    def bare() -> Any:
        return pq.read_table(path).to_pandas()

    def bare_arrow() -> Any:
        return pq.read_table(path).to_pandas(types_mapper=pd.ArrowDtype)

    ways = {"ours": ours, "bare": bare, "bare_arrow": bare_arrow}
    times: dict[str, list[float]] = {name: [] for name in ways}
    rows = len(ours())  # warm the page cache and the imports
    for run in range(args.runs):
        order = list(ways) if run % 2 == 0 else list(reversed(ways))
        for name in order:
            gc.collect()
            started = time.perf_counter()
            frame = ways[name]()
            times[name].append(time.perf_counter() - started)
            if len(frame) != rows:
                raise SystemExit(f"{name} gave {len(frame)} rows, not {rows}")
            del frame
    return {"rows": rows, "times": times} | {name: statistics.median(v) for name, v in times.items()}


# --------------------------------------------------------------------------------------------
# The parent


def spawn(*worker_args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run this script as a worker in a fresh interpreter; its JSON result."""
    return run_worker(str(Path(__file__).resolve()), *worker_args, env=env)


def fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """A bootstrap interval for the median of ``values`` (percentiles of resampled medians)."""
    if len(values) < 2:
        return None
    rng = random.Random(0)  # the same interval for the same rounds
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(BOOTSTRAP))
    tail = (1 - level) / 2
    return medians[int(tail * BOOTSTRAP)], medians[int((1 - tail) * BOOTSTRAP) - 1]


class OverheadWorker:
    """A long-lived overhead worker (this script with ``--worker overhead``): one mode, its own server."""

    def __init__(self, mode: str, server: Any, warmup: int, workdir: str) -> None:
        self.mode = mode
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (closed in __exit__)
        self.process = subprocess.Popen(
            [
                sys.executable, str(Path(__file__).resolve()), "--worker", "overhead", "--mode", mode,
                "--url", server.url, "--server-pid", str(server.pid), "--concurrency", str(CONCURRENCY),
                "--warmup", str(warmup), "--dir", workdir,
            ],
            cwd=REPO_ROOT, env=worker_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            text=True,
        )  # fmt: skip

    def read(self) -> dict[str, Any]:
        """The worker's next JSON line; a RuntimeError with its stderr if it dies or takes too long."""
        assert self.process.stdout is not None
        watchdog = threading.Timer(WORKER_TIMEOUT, self.process.kill)
        watchdog.start()
        try:
            line = self.process.stdout.readline()
        finally:
            watchdog.cancel()
        if not line:
            self.stderr.seek(0)
            status = self.process.wait()
            raise RuntimeError(f"the {self.mode} worker stopped (exit {status}):\n{self.stderr.read()[-3000:]}")
        message: dict[str, Any] = json.loads(line)
        return message

    def segment(self, episodes: int) -> dict[str, Any]:
        """Run one measured segment of ``episodes`` episodes; its figures."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{episodes}\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> dict[str, Any]:
        """End stdin; the worker's closing line (recorded: its trace checked)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        closing = self.read()
        self.process.wait(WORKER_TIMEOUT)
        return closing

    def __enter__(self) -> OverheadWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.stderr.close()


def round_ratio(segments: list[dict[str, Any]]) -> float | None:
    """A round's mean recorded ÷ mean plain episodes/s, over its good segments (None if a mode has none)."""
    eps = {mode: [r["eps"] for r in segments if r["mode"] == mode and not r["bad"]] for mode in ("plain", "recorded")}
    if not eps["plain"] or not eps["recorded"]:
        return None
    return statistics.mean(eps["recorded"]) / statistics.mean(eps["plain"])


def measure_overhead(
    rounds: int, warmup: int, episodes: int, workdir: str, quiet: QuietWaiter, control: bool = False
) -> dict[str, Any]:
    """Rounds of plain, recorded, recorded, plain segments (mirrored every other round), all counted.

    Each mode runs in its own long-lived worker against its own freshly started ors-sdk server, and
    the two take turns, one segment at a time, so the two segments compared are seconds apart. Every
    ``ROUNDS_PER_BLOCK`` rounds both servers and both workers start afresh (the ors-sdk server keeps
    each result 60 s, so its CPU per request drifts over a long run). The figure is the median of the
    rounds' ratios, with a bootstrap 95% interval. No round is kept or dropped by what one mode did.

    ``control`` runs a plain client in the recorded slot too: a check of the method, whose figure
    should be 1 within its interval.
    """
    from ors_lab.demo.launch import serve

    segments: list[dict[str, Any]] = []
    closings: list[dict[str, Any]] = []
    paired: list[float] = []
    for block, first_round in enumerate(range(0, rounds, ROUNDS_PER_BLOCK)):
        quiet.wait()
        modes = ("plain", "recorded") if block % 2 == 0 else ("recorded", "plain")  # which server starts first
        with contextlib.ExitStack() as stack:
            workers = {}
            for mode in modes:
                server = stack.enter_context(serve("bench.quiz_env:ENVIRONMENTS", sdk="ors-sdk"))
                runs = "plain" if control else mode
                workers[mode] = stack.enter_context(OverheadWorker(runs, server, warmup, workdir))
            for worker in workers.values():
                worker.read()  # ready: warmed up
            for round_number in range(first_round, min(rounds, first_round + ROUNDS_PER_BLOCK)):
                # mirrored every other round, and every other block starts with the other mode: the
                # servers slow down through a block, fastest at its start
                order = ("plain", "recorded", "recorded", "plain")
                if (round_number + block) % 2:
                    order = ("recorded", "plain", "plain", "recorded")
                this_round = [workers[mode].segment(episodes) | {"mode": mode} for mode in order]  # the slot's mode
                segments += this_round
                ratio = round_ratio(this_round)
                if ratio is not None:
                    paired.append(ratio)
                print(
                    f"  round {round_number + 1:3d}  "
                    + "  ".join(f"{r['mode']:<8} {r['eps']:6.1f}" for r in this_round)
                    + f"  episodes/s  ratio {fmt(ratio, 3)}"
                    + "".join(f"  BAD: {r['bad'][:2]}" for r in this_round if r["bad"]),
                    flush=True,
                )
            closings += [worker.close() for worker in workers.values()]
    good = [r for r in segments if not r["bad"]]
    by_mode = {mode: [r for r in good if r["mode"] == mode] for mode in ("plain", "recorded")}
    summary: dict[str, Any] = {
        "paired": paired,
        "bad": [b for r in closings for b in r["bad"]],
    }
    for mode, runs in by_mode.items():
        for key in ("eps", "cpu_ms", "server_cpu_ms", "server_busy", "outside_cores"):
            values = [r[key] for r in runs if r[key] is not None]
            summary[f"{mode}_{key}"] = statistics.median(values) if values else None
    for key in ("parts_per_s", "writer_cpu_ms"):
        values = [r[key] for r in by_mode["recorded"] if key in r]
        summary[key] = statistics.median(values) if values else None
    recorded_closings = [c for c in closings if c["mode"] == "recorded"]
    for key in ("rows_per_episode", "bytes_per_episode", "close_s"):
        values = [c[key] for c in recorded_closings if key in c]
        summary[key] = statistics.median(values) if values else None
    summary["ratio"] = statistics.median(paired) if paired else None
    summary["interval"] = median_interval(paired)
    summary["other_load"] = statistics.median(r["outside_cores"] for r in good) if good else None
    return summary


def benchmark(args: argparse.Namespace) -> int:
    if args.quick:
        rounds, warmup, episodes, events, load_runs = 1, 32, 64, 200_000, 3
    else:
        rounds, warmup, episodes, events, load_runs = args.rounds, 96, args.episodes, args.events, args.load_runs
    started = time.perf_counter()
    quiet = QuietWaiter(0.0 if args.quick else QUIET_BUDGET_S)
    control_note = "\n   CONTROL RUN: a plain client in the recorded slot too (its ratio should be 1)"
    control_note = control_note if args.control else ""
    with tempfile.TemporaryDirectory(prefix="ors-lab-bench-") as workdir:
        print(
            f"1. Recording overhead: our AsyncClient at c={CONCURRENCY}, {rounds} round(s) of 4 plain/recorded "
            f"segments of {episodes} episodes; each mode in its own worker on its own ors-sdk server, both "
            f"fresh every {ROUNDS_PER_BLOCK} rounds ({warmup} warm-up episodes each)" + control_note,
            flush=True,
        )
        overhead = measure_overhead(rounds, warmup, episodes, workdir, quiet, control=args.control)

        print(f"\n2. Sustained write rate: {events:,} synthetic events per shape", flush=True)
        writes = {}
        for shape in ("chunk", "episode"):
            path = str(Path(workdir) / f"write-{shape}.parquet")
            quiet.wait()
            w = spawn("--worker", "write", "--shape", shape, "--events", str(events), "--path", path)
            writes[shape] = w
            print(
                f"  {shape:<8} {w['events']:,} events: {w['rate']:,.0f} events/s to close ({w['emit_rate']:,.0f}/s "
                f"emitting, close {w['close_s']:.1f} s), {w['bytes_per_event']:.1f} B/event, peak RSS "
                f"+{w['rss_emitting_mb']:.0f} MB emitting, +{w['rss_mb']:.0f} MB by the end of close "
                f"(baseline {w['baseline_mb']:.0f} MB)",
                flush=True,
            )

        trace = str(Path(workdir) / "write-episode.parquet")
        print(f"\n3. Loading the {writes['episode']['events']:,}-event episode trace, {load_runs} runs each")
        quiet.wait()
        load = spawn("--worker", "load", "--path", trace, "--runs", str(load_runs))
        for name, label in (
            ("ours", "load_trace(path).events"),
            ("bare", "read_table(path).to_pandas()"),
            ("bare_arrow", "read_table(path).to_pandas(types_mapper=pd.ArrowDtype)"),
        ):
            print(f"  {label:<56} " + " ".join(f"{t:.3f}" for t in load["times"][name]) + " s", flush=True)
    elapsed = time.perf_counter() - started

    ratio = overhead["ratio"]
    extra_cpu = None
    if overhead["recorded_cpu_ms"] is not None and overhead["plain_cpu_ms"] is not None:
        extra_cpu = overhead["recorded_cpu_ms"] - overhead["plain_cpu_ms"]
    worst_rss = max(w["rss_mb"] for w in writes.values())
    load_ratio = load["ours"] / load["bare"]
    million = events >= 1_000_000
    checks = [
        ("recording overhead", ratio is not None and ratio >= TARGET_OVERHEAD, f">= {TARGET_OVERHEAD}"),
        ("peak RSS, 1M events", worst_rss < TARGET_RSS_MB, f"< {TARGET_RSS_MB:.0f} MB"),
        ("load_trace(...).events", load_ratio <= TARGET_LOAD, f"<= {TARGET_LOAD}x"),
    ]
    verdict = {name: "met" if ok else "MISSED" for name, ok, _ in checks}
    reaching = sum(p >= TARGET_OVERHEAD for p in overhead["paired"])
    other = overhead["other_load"]
    noisy = f"; NOISY: median other load {other:.2f} cores" if other is not None and other > QUIET_CORES else ""
    interval = overhead["interval"]
    spread = "" if interval is None else f"95% interval {interval[0]:.3f}-{interval[1]:.3f}; "
    rss_note = "" if million else f" (run with {events:,} events, not 1M)"

    print(f"\nMedians ({elapsed:.0f} s in all; other load is CPU busy outside the client and the server):\n")
    print("| figure | value | target | |")
    print("|---|---:|---|---|")
    rows = [
        (
            f"episodes/s, c={CONCURRENCY}, plain `AsyncClient`",
            fmt(overhead["plain_eps"]),
            "",
            f"{fmt(overhead['plain_cpu_ms'], 2)} client CPU ms/ep, other load "
            f"{fmt(overhead['plain_outside_cores'], 2)}",
        ),
        (
            f"episodes/s, c={CONCURRENCY}, `AsyncClient(recorder=Recorder(...))`",
            fmt(overhead["recorded_eps"]),
            "",
            f"{fmt(overhead['recorded_cpu_ms'], 2)} client CPU ms/ep, other load "
            f"{fmt(overhead['recorded_outside_cores'], 2)}",
        ),
        (
            f"**recording overhead**: recorded ÷ plain episodes/s (median over {len(overhead['paired'])} rounds)",
            fmt(ratio, 3),
            f">= {TARGET_OVERHEAD}",
            f"{verdict['recording overhead']} ({spread}{reaching} of {len(overhead['paired'])} rounds reach "
            f"{TARGET_OVERHEAD}){noisy}",
        ),
        (
            "the server's share of each segment busy, plain / recorded",
            f"{fmt(overhead['plain_server_busy'], 3)} / {fmt(overhead['recorded_server_busy'], 3)}",
            "",
            f"the bottleneck: its CPU ms/episode {fmt(overhead['plain_server_cpu_ms'], 2)} plain, "
            f"{fmt(overhead['recorded_server_cpu_ms'], 2)} recorded",
        ),
        (
            "client CPU ms/episode: recorded − plain (of which the writer thread)",
            f"{fmt(extra_cpu, 2)} ({fmt(overhead['writer_cpu_ms'], 2)})",
            "",
            "process CPU, all threads, per measured episode",
        ),
        (
            "trace rows per episode / bytes per episode",
            f"{fmt(overhead['rows_per_episode'])} / {fmt(overhead['bytes_per_episode'], 0)}",
            "",
            f"{fmt(overhead['parts_per_s'], 0)} parts written per second while recording; "
            f"close() {fmt(overhead['close_s'], 2)} s",
        ),
    ]
    for shape, w in writes.items():
        rows += [
            (
                f"write rate, `{shape}` events, emit → close (compaction included)",
                f"{w['rate']:,.0f} events/s",
                "",
                f"{w['emit_rate']:,.0f}/s while emitting; close() {w['close_s']:.1f} s",
            ),
            (f"bytes per event on disk, `{shape}`", f"{w['bytes_per_event']:.1f}", "", ""),
            (
                f"**peak RSS over the baseline**, {w['events']:,} `{shape}` events",
                f"+{w['rss_mb']:.0f} MB",
                f"< {TARGET_RSS_MB:.0f} MB",
                f"{'met' if w['rss_mb'] < TARGET_RSS_MB else 'MISSED'}{rss_note} "
                f"(+{w['rss_emitting_mb']:.0f} MB before close())",
            ),
        ]
    rows += [
        (
            f"**loading**: `load_trace(path).events` ÷ `read_table(path).to_pandas()`, {load['rows']:,} rows",
            f"{load_ratio:.2f}x",
            f"<= {TARGET_LOAD}x",
            f"{verdict['load_trace(...).events']} ({load['ours']:.3f} s vs {load['bare']:.3f} s)",
        ),
        (
            "`load_trace(path).events` ÷ `read_table(path).to_pandas(types_mapper=pd.ArrowDtype)`",
            f"{load['ours'] / load['bare_arrow']:.2f}x",
            "",
            f"{load['bare_arrow']:.3f} s: the same conversion without load_trace's checks",
        ),
    ]
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    for name, ok, target in checks:
        print(f"{name}: target {target}: {'met' if ok else 'MISSED'}")
    if args.control:
        print("(a control run: the recorded slot ran a plain client, so the overhead figure is not recording's)")
    if overhead["bad"]:
        print(f"\n{len(overhead['bad'])} BAD EPISODES or traces; their batches are left out: {overhead['bad'][:5]}")
    failed = bool(overhead["bad"]) or (args.check and not all(ok for _, ok, _ in checks))
    return 1 if failed else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python bench/recording.py")
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"overhead rounds of 4 segments each (default {ROUNDS})"
    )
    parser.add_argument(
        "--episodes", type=int, default=SEGMENT, help=f"measured episodes per overhead segment (default {SEGMENT})"
    )
    parser.add_argument("--events", type=int, default=1_000_000, help="synthetic events per write run (default 1M)")
    parser.add_argument("--load-runs", type=int, default=5, help="timed runs of each way of loading (default 5)")
    parser.add_argument("--quick", action="store_true", help="1 round, small batches, 200k events (smoke test)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument(
        "--control",
        action="store_true",
        help="a plain client in the recorded slot too: checks the method (its overhead figure should be 1)",
    )
    worker = parser.add_argument_group("worker (internal: one measurement in a subprocess)")
    worker.add_argument("--worker", choices=("overhead", "write", "load"), help=argparse.SUPPRESS)
    worker.add_argument("--mode", choices=("plain", "recorded"), help=argparse.SUPPRESS)
    worker.add_argument("--url", help=argparse.SUPPRESS)
    worker.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    worker.add_argument("--concurrency", type=int, default=CONCURRENCY, help=argparse.SUPPRESS)
    worker.add_argument("--warmup", type=int, default=96, help=argparse.SUPPRESS)
    worker.add_argument("--dir", help=argparse.SUPPRESS)
    worker.add_argument("--shape", choices=("chunk", "episode"), help=argparse.SUPPRESS)
    worker.add_argument("--path", help=argparse.SUPPRESS)
    worker.add_argument("--runs", type=int, default=5, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker == "overhead":
        asyncio.run(overhead_worker(args))
        return 0
    if args.worker == "write":
        print(json.dumps(write_worker(args)))
        return 0
    if args.worker == "load":
        print(json.dumps(load_worker(args)))
        return 0
    return benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
