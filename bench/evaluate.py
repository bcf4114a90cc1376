"""Evaluation harness benchmark: 10,000 scripted episodes against a ReplayServer at speed 0, the harness
against the bare client over the same episodes.

    python bench/evaluate.py                 # record the source trace (live), then 2 rounds of the three modes
    python bench/evaluate.py --episodes 2000 --rounds 1   # smaller, for a smoke test
    python bench/evaluate.py --check         # exit 1 if a target is missed

What it does:

1. **Source trace.** ``evaluate`` runs the scripted quiz policy (prompt, ``blob`` twice,
   ``answer``; every reward checked) over the quiz environment of ``bench/quiz_env.py`` on a live
   ors-sdk server, 6 tasks x N/6 rollouts, recorded. This is only the material to replay.
2. **Measured runs**, each in a fresh interpreter (``--worker``) against a fresh
   ``ors-lab replay SOURCE --speed 0`` in its own process (so its CPU is not ours), concurrency 32,
   the same requests in each mode:
   - ``bare``: our ``AsyncClient`` alone runs the episodes (num_tasks; per episode open, prompt,
     tools, ``blob`` twice, ``answer``, close; every result checked), with no events made;
   - ``harness``: ``evaluate`` of the quiz policy, not recorded (client, agent plumbing, evaluator,
     event stream, the rows its result keeps);
   - ``recorded``: the same with ``record=Recorder(...)`` (the recorder too), closed inside the
     measurement. Its writer thread's CPU (converting rows to Arrow, writing parts) and the CPU of
     ``close()`` (the last part and compaction) are also reported on their own.
   Rounds run the modes in turns (the order reversed every other round). Reported per mode:
   episodes/s and the process's CPU per episode; per round, harness ÷ bare and recorded ÷ bare.
3. **Targets.** The recorded harness's CPU per episode at most 1.5x the bare client's (median of
   the rounds). Memory must not grow with the number of episodes beyond the result's rows: the
   RSS growth per episode of the recorded run (first warm sample to last, sampled every 1,000
   episodes) at most 2x the bytes per episode of the Arrow rows its result keeps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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

from bench.client import process_cpu_s  # noqa: E402
from bench.quiz_data import SPLIT, TASKS, expected_answer  # noqa: E402

ENV_NAME = "quiz"
CONCURRENCY = 32
BLOB_CHARS = 200
SAMPLE_EVERY = 1_000
MODES = ("bare", "harness", "recorded")
TARGET_RATIO = 1.5  # the recorded harness's CPU per episode, at most this many times the bare client's
TARGET_GROWTH = 2.0  # RSS growth per episode, at most this many times the result's rows per episode
MB = 2**20


def quiz_policy(obs: Any) -> Any:
    """The quiz episode of bench/client.py as a policy: blob, blob, answer; checks what comes back."""
    from ors_lab.agents.policy import ToolCall

    if obs.step == 0:
        _check_prompt(obs.prompt, obs.index)
    if obs.step < 2:
        if obs.step:
            _check_blob(obs.last.text, obs.last.reward)
        return ToolCall("blob", {"n": BLOB_CHARS})
    return ToolCall("answer", {"answer": expected_answer(obs.index)})


def _check_prompt(prompt: str, index: int) -> None:
    assert prompt.startswith(TASKS[index]["question"]), prompt


def _check_blob(text: str, reward: float | None) -> None:
    assert text == ("0123456789" * 20)[:BLOB_CHARS], text[:40]
    assert reward == 0.0, reward


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


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def bare(url: str, episodes: int, sample: Any) -> int:
    """The same episodes as the harness runs, by our AsyncClient alone: the baseline."""
    from collections import deque

    from ors_lab import AsyncClient

    async with AsyncClient(url) as client:
        env = client.environment(ENV_NAME)
        await env.num_tasks(SPLIT)
        pairs = deque((index, rollout) for index in range(len(TASKS)) for rollout in range(_rollouts(episodes)))
        done = 0

        async def lane() -> None:
            nonlocal done
            while pairs:
                index, _ = pairs.popleft()
                async with env.session(split=SPLIT, index=index, view=False) as session:  # as evaluate's
                    _check_prompt((await session.prompt())[0].text, index)  # type: ignore[union-attr]
                    await session.tools()
                    for _ in range(2):
                        blob = await session.call("blob", {"n": BLOB_CHARS})
                        _check_blob(blob.text, blob.reward)
                    answer = await session.call("answer", {"answer": expected_answer(index)})
                    assert answer.reward == 1.0, answer
                    assert answer.finished, answer
                done += 1
                sample(done)

        await asyncio.gather(*(lane() for _ in range(CONCURRENCY)))
    return done


def start_replay(source: str | Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``ors-lab replay SOURCE --speed 0`` in its own process (its CPU is not ours); returns it and its URL."""
    with log.open("w") as sink:  # a file, not a pipe: the server prints what went unplayed when it stops
        proc = subprocess.Popen([sys.executable, "-m", "ors_lab.cli", "replay", str(source), "--speed", "0"],
                                stdout=sink, stderr=subprocess.STDOUT, cwd=REPO_ROOT)  # fmt: skip
    deadline = time.monotonic() + 120
    while " at http://" not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    line = log.read_text().splitlines()[0] if log.read_text() else ""
    url = line.rsplit(" at ", 1)[-1].strip()
    if not url.startswith("http://127.0.0.1:"):
        proc.terminate()
        raise SystemExit(f"the replay server did not start:\n{log.read_text()[-2000:]}")
    return proc, url


def worker(source: str, out: str, episodes: int, mode: str) -> dict[str, Any]:
    """Step 2, in a fresh interpreter: the replay server in its own process, one mode here."""
    import pandas  # noqa: F401  (every ors_lab process that looks at results has it)

    from ors_lab import Client, Recorder
    from ors_lab.evaluation import evaluate

    proc, url = start_replay(source, Path(out).with_suffix(f".{mode}.replay.log"))
    samples: list[tuple[int, int]] = []

    def sample(finished: int) -> None:
        if finished % SAMPLE_EVERY == 0:
            samples.append((finished, _rss()))

    def on_episode(event: Any) -> None:
        if event.type == "episode":
            on_episode.count += 1  # type: ignore[attr-defined]
            sample(on_episode.count)  # type: ignore[attr-defined]

    on_episode.count = 0  # type: ignore[attr-defined]
    row_bytes = 0.0
    try:
        frames_ms = writer_cpu = close_cpu = None
        cpu0, wall0 = time.process_time(), time.monotonic()
        if mode == "bare":
            n = asyncio.run(bare(url, episodes, sample))
            wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
        else:
            recorder = Recorder(out) if mode == "recorded" else None  # given, so its parts are timed apart
            with Client(url) as client:
                result = evaluate(client.environment(ENV_NAME), quiz_policy, split=SPLIT,
                                  rollouts=_rollouts(episodes), concurrency=CONCURRENCY,
                                  record=recorder, progress=False, subscribe=on_episode)  # fmt: skip
            if recorder is not None:
                writer_cpu = _thread_cpu_s(recorder._writer.native_id)  # converting, writing parts
                close0 = time.process_time()
                recorder.close()  # the last part, and compaction
                close_cpu = time.process_time() - close0
            wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
            frames0 = time.process_time()
            n = len(result.episodes)  # the frames are built when asked for: timed on their own
            result.tasks, result.steps  # noqa: B018
            frames_ms = 1000 * (time.process_time() - frames0) / n
        server_cpu = process_cpu_s(proc.pid)
        if mode != "bare":
            _check(result)
            row_bytes = result.table.nbytes / n
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    growth = None
    if len(samples) >= 2:
        (first_n, first_rss), (last_n, last_rss) = samples[1] if len(samples) > 2 else samples[0], samples[-1]
        growth = (last_rss - first_rss) / max(last_n - first_n, 1)
    return {
        "mode": mode,
        "episodes": n,
        "eps": n / wall,
        "cpu_ms": 1000 * cpu / n,
        "replay_server_cpu_ms": None if server_cpu is None else 1000 * server_cpu / n,
        "frames_ms": frames_ms,
        "writer_ms": None if writer_cpu is None else 1000 * writer_cpu / n,
        "close_ms": None if close_cpu is None else 1000 * close_cpu / n,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "samples": samples,
        "growth_bytes_per_episode": growth,
        "result_row_bytes": row_bytes,
        "trace_events": _events(out) if mode == "recorded" else None,
    }


def _thread_cpu_s(native_id: int | None) -> float | None:
    """A thread of this process: its CPU seconds so far (user + system), from /proc."""
    try:
        fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _events(path: str) -> int:
    import pyarrow.parquet as pq

    return int(pq.read_metadata(path).num_rows)


def _spawn(source: Path, out: Path, episodes: int, mode: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--episodes", str(episodes), "--worker", str(source), str(out), mode],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=1800, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the {mode} worker failed:\n{done.stderr[-3000:]}")
    out.unlink(missing_ok=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the three modes (default 2)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--worker", nargs=3, metavar=("SOURCE", "OUT", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker[:2], args.episodes, args.worker[2])))
        return 0
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="ors-lab-bench-") as tmp:
        source = Path(tmp) / "source.parquet"
        seconds = record_source(source, args.episodes)
        print(f"source trace: {_rollouts(args.episodes) * len(TASKS)} live episodes recorded in {seconds:.1f} s")
        for round_ in range(args.rounds):
            for mode in MODES if round_ % 2 == 0 else tuple(reversed(MODES)):
                result = _spawn(source, Path(tmp) / f"{mode}.parquet", args.episodes, mode)
                runs[mode].append(result)
                print(f"round {round_ + 1} {mode:<9} {result['eps']:7.1f} episodes/s  {result['cpu_ms']:.3f} CPU "
                      f"ms/episode  (replay server {result['replay_server_cpu_ms'] or 0:.2f})", flush=True)  # fmt: skip
    ratios = {
        mode: [run["cpu_ms"] / base["cpu_ms"] for run, base in zip(runs[mode], runs["bare"], strict=True)]
        for mode in ("harness", "recorded")
    }
    ratio = statistics.median(ratios["recorded"])
    recorded = runs["recorded"][-1]
    growth, row = recorded["growth_bytes_per_episode"], recorded["result_row_bytes"]
    memory_met = growth is not None and growth <= TARGET_GROWTH * row
    print("\n| measure | bare client | harness | harness, recorded |\n|---|---:|---:|---:|")
    for key, label, digits in (("eps", "episodes/s", 1), ("cpu_ms", "CPU ms per episode (our process)", 3),
                               ("replay_server_cpu_ms", "replay server CPU ms per episode", 2),
                               ("writer_ms", "of the CPU: the recorder's writer thread, ms per episode", 3),
                               ("close_ms", "of the CPU: Recorder.close() (last part, compaction), ms per episode", 3),
                               ("frames_ms", "building episodes, steps and tasks, CPU ms per episode", 3),
                               ("peak_rss_mb", "peak RSS (MB)", 1)):  # fmt: skip
        cells = [f"{statistics.median(r[key] or 0 for r in runs[mode]):,.{digits}f}" for mode in MODES]
        print(f"| {label} | {' | '.join(cells)} |")
    print(
        f"| CPU per episode ÷ the bare client's (per round) | 1 | "
        f"{', '.join(f'{r:.2f}' for r in ratios['harness'])} | {', '.join(f'{r:.2f}' for r in ratios['recorded'])} |"
    )
    print(
        f"\nepisodes per run {recorded['episodes']:,}; trace events {recorded['trace_events']:,}; "
        f"RSS every {SAMPLE_EVERY:,} episodes (MB, recorded): "
        + ", ".join(f"{n:,}: {rss / MB:.1f}" for n, rss in recorded["samples"])
    )
    shown = "not measured (fewer than two samples)" if growth is None else f"{growth:,.0f} B"
    print(f"RSS growth per episode, warm: {shown}; the result's rows: {row:,.0f} B per episode")
    met = ratio <= TARGET_RATIO
    print(
        f"\nharness, recorded ÷ bare client CPU per episode: {ratio:.2f} (median of {len(ratios['recorded'])} "
        f"rounds; target <= {TARGET_RATIO}: {'met' if met else 'MISSED'})"
    )
    print(f"memory target (growth <= {TARGET_GROWTH:g}x the result's rows): {'met' if memory_met else 'MISSED'}")
    return 1 if args.check and not (met and memory_met) else 0


if __name__ == "__main__":
    sys.exit(main())
