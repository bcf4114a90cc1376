"""How replay scales: loading a trace of 1k, 10k and 100k sessions, and the cost of a lookup in it.

    python bench/scale_replay.py             # 3 rounds of each size and face, then a 1k-session replay played
    python bench/scale_replay.py --rounds 1  # one round: a quicker, noisier look

The traces: the ORS exchanges of ``recordings/demo.parquet`` (the demo agent on the demo
environments: 40 sessions of about 9.5 exchanges and 32 rows) copied 25, 250 and 2,500 times
by ``bench.report.copy_trace`` (each copy its own session ids, run id, exchange numbers, seq, times
and task indices), written a few copies at a time and kept under ``build/`` for the next run.

Each measurement runs in a fresh interpreter (``--worker``), so its RSS is its own: the baseline is
taken after the imports and a warm-up replay of the small trace (for ``ReplayServer``, a server started
and stopped on it); then ``ReplayEngine(path)`` (or ``ReplayServer(path).start()``) is timed (wall and
CPU seconds), RSS is read again (after a ``gc.collect()``), and the peak is the process's high-water
mark. Lookups, on the engine, in µs per request (wall and CPU): a stateless request (``num_tasks``)
asked as often as the trace recorded it (25 to 2,000 times: each ask plays a recorded exchange not played before), 1,000
``/create``s each claiming a session, and 200 ``/create``s of a task the trace does not hold (a
mismatch naming the nearest unclaimed sessions). Each figure's growth law is fitted over the sizes (the exponent of
n, least squares on logs): about 0 is constant, about 1 linear.

Then the 1k-session trace is played: the demo agent evaluated against ``ReplayServer`` at speed 0
on both environments with ``tasks=None`` (every recorded episode), counting mismatches and the
recorded requests left unplayed.

Targets: load time per session constant from 1k to 100k; at most 10 KB of RSS per session; lookups
constant; the 100k-session trace loads in under 5 s; the played run has no mismatch.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.client import run_worker  # noqa: E402
from bench.recording import median_interval  # noqa: E402
from bench.report import DEMO, copy_trace  # noqa: E402

SIZES = (1_000, 10_000, 100_000)
FACES = ("ReplayEngine", "ReplayServer")
PER_COPY = 40  # sessions in recordings/demo.parquet
BUILD = REPO_ROOT / "build" / "scale_replay"
STATELESS_ASKS, CREATES, UNMATCHED = 2_000, 1_000, 200
LOAD_TARGET_S, KB_TARGET = 5.0, 10.0
LOOKUPS = ("stateless_us", "create_us", "unmatched_create_us")
FIGURES = ("load_s", "cpu_s", "s_per_1k", "cpu_s_per_1k", "rss_mb", "kb_per_session", "peak_mb", *LOOKUPS,
           *(f"{name}_cpu" for name in LOOKUPS))  # fmt: skip


def trace_of(sessions: int) -> Path:
    """The copied trace of ``sessions`` sessions, built once under ``build/``."""
    path = BUILD / f"demo-ors-{sessions}.parquet"
    if not path.exists() or path.stat().st_mtime < DEMO.stat().st_mtime:
        BUILD.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".tmp")
        copy_trace(DEMO, partial, sessions // PER_COPY, ors_only=True, new_runs=True)
        partial.rename(path)
    return path


# --------------------------------------------------------------------------------------------
# The worker: one load in a fresh interpreter


def _rss_mb() -> tuple[float, float]:
    """(RSS, peak RSS) of this process in MB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def load_worker(face: str, path: Path, sessions: int) -> dict[str, Any]:
    import ors_lab as ol
    from ors_lab.replay.engine import ReplayEngine

    ReplayEngine(DEMO, speed=0)  # imports and first-use costs go into the baseline
    if face == "ReplayServer":  # and the server's: its imports (uvicorn...) and thread, some 4 MB whatever the trace
        ol.ReplayServer(DEMO, speed=0).start().stop()
    gc.collect()
    base, _ = _rss_mb()
    started, cpu = time.perf_counter(), time.process_time()
    if face == "ReplayServer":
        server = ol.ReplayServer(path, speed=0).start()
        engine = server.engine
    else:
        engine = ReplayEngine(path, speed=0)
    load_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    gc.collect()
    rss, peak = _rss_mb()
    out = {"face": face, "sessions": sessions, "load_s": load_s, "cpu_s": cpu_s, "s_per_1k": load_s / sessions * 1000,
           "cpu_s_per_1k": cpu_s / sessions * 1000,
           "rss_mb": rss - base, "kb_per_session": (rss - base) * 1024 / sessions, "peak_mb": peak - base}  # fmt: skip
    if face == "ReplayServer":
        server.stop()
        return out
    return {**out, **lookups(engine)} if face == "ReplayEngine" else out


def lookups(engine: Any) -> dict[str, float]:
    """µs per stateless request, per /create that claims a session, per /create the trace cannot answer
    (wall and CPU: the CPU figure does not count the time other processes take the cores)."""
    recording = engine.recording
    method, path, body = recording.requests([recording.stateless[0]])[0]
    recorded = sum(request == (method, path, body) for request in recording.requests(list(recording.stateless)))
    bodies = recording.bodies(recording.create_rows[-CREATES:].tolist())  # the last: no earlier ones claimed
    unknown = b'{"env_name":"arithmetic","split":"test","index":1000000000}'
    asks = {
        # as often as recorded (at most STATELESS_ASKS): each ask plays a recorded exchange not played before
        "stateless_us": [(method, path, {}, body, 200)] * min(STATELESS_ASKS, recorded),
        "create_us": [("POST", "/create", {"x-session-id": f"live-{n}"}, b, 200) for n, b in enumerate(bodies)],
        "unmatched_create_us": [("POST", "/create", {"x-session-id": f"none-{n}"}, unknown, 400)
                                for n in range(UNMATCHED)],
    }  # fmt: skip
    out = {}
    for name, requests in asks.items():
        started, cpu = time.perf_counter(), time.process_time()
        for method, path, headers, body, status in requests:
            assert engine.handle(method, path, headers, body).status == status
        out[name] = (time.perf_counter() - started) / len(requests) * 1e6
        out[f"{name}_cpu"] = (time.process_time() - cpu) / len(requests) * 1e6
    return out


def play_worker(path: Path) -> dict[str, Any]:
    """The demo agent evaluated against the replay of ``path``, every recorded episode of both environments."""
    import ors_lab as ol
    from ors_lab.demo.agent import DemoAgent

    played, failed, started = 0, [], time.perf_counter()
    with ol.ReplayServer(path, speed=0) as server, ol.Client(server.url) as client:
        for name, steps in (("arithmetic", 50), ("guessing", 5)):
            result = ol.evaluate(client.environment(name), DemoAgent(pace=0), split="test", rollouts=2,
                                 max_steps=steps, concurrency=32)  # fmt: skip
            played += len(result.episodes)
            failed += [str(e) for e in result.errors["error"].tolist()] if len(result.errors) else []
        unplayed = server.unplayed()
    mismatches = sum("no recorded request matches" in text for text in failed)
    return {"episodes": played, "errors": len(failed), "mismatches": mismatches, "unplayed": len(unplayed),
            "seconds": time.perf_counter() - started, "first_errors": failed[:3]}  # fmt: skip


# --------------------------------------------------------------------------------------------
# The parent


def growth(rows: list[dict[str, Any]], face: str, figure: str) -> dict[str, Any] | None:
    """The exponent of n that ``figure`` grows with (least squares on logs over the sizes) and its law."""
    points = [(math.log(r["sessions"]), math.log(r[figure])) for r in rows
              if r["face"] == face and r.get(figure, 0) > 0]  # fmt: skip
    if len(points) < 2:
        return None
    mx, my = statistics.fmean(x for x, _ in points), statistics.fmean(y for _, y in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    law = "constant" if abs(slope) <= 0.15 else "linear" if 0.85 <= slope <= 1.15 else f"n^{slope:.2f}"
    return {"face": face, "figure": figure, "exponent": round(slope, 3), "law": law}


def measure(rounds: int = 3, sizes: tuple[int, ...] = SIZES, say: Any = print) -> list[dict[str, Any]]:
    """One row per (face, size): each figure's median over ``rounds`` fresh interpreters and its 95%
    interval; then one row per (face, figure): its growth law; then the 1k-session replay played."""
    paths = {n: trace_of(n) for n in sizes}
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for round_number in range(rounds):
        for face in FACES:
            for n in sizes:
                result = run_worker(str(Path(__file__).resolve()), "--worker", "load", face, str(paths[n]), str(n))
                runs.setdefault((face, n), []).append(result)
                say(f"  round {round_number + 1} {face:<12} {n:>7,} sessions: load {result['load_s']:6.2f} s, "
                    f"{result['kb_per_session']:5.2f} KB/session, peak +{result['peak_mb']:7.1f} MB"
                    + (f", stateless {result['stateless_us']:6.1f} µs, /create {result['create_us']:6.1f} µs, "
                       f"unmatched /create {result['unmatched_create_us']:6.1f} µs" if "create_us" in result else ""),
                    flush=True)  # fmt: skip
    rows: list[dict[str, Any]] = []
    for (face, n), results in runs.items():
        row: dict[str, Any] = {"bench": "replay", "face": face, "sessions": n, "rounds": len(results)}
        for figure in FIGURES:
            values = [r[figure] for r in results if figure in r]
            if values:
                row[figure] = statistics.median(values)
                row[f"{figure}_interval"] = median_interval(values) or (values[0], values[0])
        rows.append(row)
    laws = [law for face in FACES for figure in FIGURES if (law := growth(rows, face, figure)) is not None]
    played = run_worker(str(Path(__file__).resolve()), "--worker", "play", str(paths[min(sizes)]))
    return [*rows, *({"bench": "replay", **law} for law in laws),
            {"bench": "replay", "played_sessions": min(sizes), **played}]  # fmt: skip


def report(rows: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """Print the tables; the targets and whether each was met."""
    print("\n| face | sessions | " + " | ".join(FIGURES) + " |")
    print("|---|---:|" + "---:|" * len(FIGURES))
    sized = [r for r in rows if "sessions" in r and "face" in r]
    for r in sized:
        cells = [f"{r[f]:.3f} ({r[f + '_interval'][0]:.3f}-{r[f + '_interval'][1]:.3f})" if f in r else "–"
                 for f in FIGURES]  # fmt: skip
        print(f"| {r['face']} | {r['sessions']:,} | " + " | ".join(cells) + " |")
    print("\n| face | figure | exponent of n | growth |\n|---|---|---:|---|")
    for r in rows:
        if "law" in r:
            print(f"| {r['face']} | {r['figure']} | {r['exponent']} | {r['law']} |")
    played = next(r for r in rows if "played_sessions" in r)
    print(f"\nplayed the {played['played_sessions']:,}-session trace: {played['episodes']} episodes in "
          f"{played['seconds']:.1f} s, {played['mismatches']} mismatches, {played['errors']} errors, "
          f"{played['unplayed']} recorded requests unplayed")  # fmt: skip
    largest = max(r["sessions"] for r in sized)
    laws = {(r["face"], r["figure"]): r["law"] for r in rows if "law" in r}
    lookups = [f"{name}_cpu" for name in LOOKUPS]
    return [
        ("load CPU per session constant", all(laws.get((f, "cpu_s_per_1k")) == "constant" for f in FACES)),
        (f"at most {KB_TARGET} KB per session", all(r["kb_per_session"] <= KB_TARGET for r in sized)),
        ("lookups constant", all(laws.get(("ReplayEngine", f)) == "constant" for f in lookups)),
        (
            f"{largest:,} sessions load in < {LOAD_TARGET_S} s",
            all(r["load_s"] < LOAD_TARGET_S for r in sized if r["sessions"] == largest),
        ),
        ("the played replay has no mismatch", played["mismatches"] == 0 and played["errors"] == 0),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        kind, *rest = args.worker
        result = load_worker(rest[0], Path(rest[1]), int(rest[2])) if kind == "load" else play_worker(Path(rest[0]))
        print(json.dumps(result))
        return 0
    targets = report(measure(args.rounds))
    for name, met in targets:
        print(f"{'met' if met else 'MISSED'}: {name}")
    return 1 if args.check and not all(met for _, met in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
