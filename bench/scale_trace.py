"""Traces analysed where they lie: load, episodes, tasks, steps and calls of 10k, 100k and 1M episodes.

    python bench/scale_trace.py                    # 10k, 100k and 1M episodes, 2 rounds each
    python bench/scale_trace.py --episodes 10000 100000 --rounds 3
    git worktree add /tmp/before COMMIT             # another checkout to compare the steps and calls with
    python bench/scale_trace.py --baseline /tmp/before --rounds 3    # 1M episodes, in turns: about 6 minutes

``measure()`` returns the rows (one per trace size and round) for ``bench/scale.py``; ``growth(rows)``
the growth law of each figure (constant, linear or worse) between the sizes measured.

The traces are written in bounded memory by ``write_trace``, with the real recorder's schema
(``SCHEMA``, this version: the recording is read by ``load_trace``, which gives its episode rows their
episode columns from their records), metadata and row groups (``COMPACT_ROWS`` rows each, the recorder's dictionary
columns): the ORS rows (http, sse, call, session) and the evaluation's ``start``, ``finish``
and ``episode`` rows of ``recordings/openai-arithmetic.parquet`` (20 episodes of a real agent: 2
rollouts of 10 tasks; about 19 rows an episode without the agent's streamed deltas), repeated
copy after copy, each copy with session ids (``<id>-<copy>``), seq, times and exchange numbers
after the copy before, task indices shifted by 10, and the episodes' rewards varied (1.0 or 0.0
by copy and episode, in the typed columns and the episode's record, whose success follows).
Traces are cached under ``build/bench/scale_trace/`` (gitignored), made once.

Each figure is measured in a fresh subprocess (``--child``), so that its peak memory is its own:
``ru_maxrss`` of the child after the work, minus its ``ru_maxrss`` after the imports (baseline).
``load_s`` is ``load_trace`` and ``len``; ``episodes_s`` is ``trace.episodes`` from a fresh load,
with ``episodes_rss_mb`` its peak over the baseline; ``tasks_s`` is ``trace.tasks`` once the
episodes are made (``tasks_total_s``: both); ``steps_s`` and ``calls_s`` are ``trace.steps`` and
``trace.calls`` from a fresh load, with ``steps_rss_mb`` and ``calls_rss_mb`` their peaks over the baseline.
CPU seconds are reported beside wall seconds.

``--baseline CHECKOUT`` measures ``steps`` and ``calls`` of the largest trace with this checkout's ``ors_lab`` and
with another's (each child with that one first on its path), in turns, the order reversed every other round.

Targets (1M episodes): load < 1 s; episodes < 10 s and < 2 GB over the baseline; tasks < 10 s; steps and calls
each < 2 GB over the baseline.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

SOURCE = REPO_ROOT / "recordings" / "openai-arithmetic.parquet"
CACHE = REPO_ROOT / "build" / "bench" / "scale_trace"
SIZES = (10_000, 100_000, 1_000_000)
KEEP = ("start", "finish", "episode")  # the evaluation's own rows kept beside the ORS rows
BLOCK = 1_000  # episodes written at a time
TARGETS = {"load_s": 1.0, "episodes_s": 10.0, "episodes_rss_mb": 2048.0, "tasks_s": 10.0, "steps_rss_mb": 2048.0,
           "calls_rss_mb": 2048.0}  # fmt: skip
FIGURES = ("file_mb", "bytes_per_episode", "rows", "load_s", "episodes_s", "episodes_rss_mb", "tasks_s",
           "steps_s", "steps_rss_mb", "calls_s", "calls_rss_mb")  # fmt: skip


def template() -> pa.Table:
    """The ORS rows and the evaluation's start, finish and episode rows of the recorded run, seq from 0, in this
    schema version (as ``load_trace`` reads it: an older trace's episode columns read from its records)."""
    import ors_lab as ol
    from ors_lab.recording.columns import METADATA_SCHEMA_VERSION, SCHEMA_VERSION

    table = ol.load_trace(SOURCE).table
    table = table.replace_schema_metadata({**table.schema.metadata, METADATA_SCHEMA_VERSION: SCHEMA_VERSION.encode()})
    keep = pc.or_(pc.not_equal(table["layer"], "agent"), pc.is_in(table["kind"], value_set=pa.array(KEEP)))
    table = table.filter(keep)
    return table.set_column(table.schema.get_field_index("seq"), "seq", pa.array(np.arange(table.num_rows)))


def block(source: pa.Table, first: int, copies: int, shift: int = 0) -> pa.Table:
    """Copies ``first`` .. ``first + copies - 1`` of ``source``, each with its own ids, times, tasks and rewards
    (``shift``: another pattern of them, for a second run of the same tasks)."""
    rows, per_copy = source.num_rows, 20
    copy = np.repeat(np.arange(first, first + copies, dtype=np.int64), rows)
    tiled = pa.concat_tables([source] * copies)
    span = pc.max(source["t_ns"]).as_py() + 1
    exchanges = (pc.max(source["exchange"]).as_py() or 0) + 1
    suffix = pc.cast(pa.array(copy), pa.string())
    episode = pc.equal(tiled["kind"], "episode").to_numpy(zero_copy_only=False)
    number = np.cumsum(episode) - 1 + first * per_copy  # each episode row's number in the whole trace
    reward = np.where((number + shift) % 3 == 0, 0.0, 1.0)
    columns = {
        "session_id": pc.binary_join_element_wise(tiled["session_id"], suffix, "-"),
        "seq": pa.array(tiled["seq"].to_numpy() + copy * rows),
        "t_ns": pa.array(tiled["t_ns"].to_numpy() + copy * span),
        "exchange": pc.add(tiled["exchange"], pa.array(copy * exchanges)),
        "task_index": pc.add(tiled["task_index"], pa.array(copy * 10)),
        **{name: pc.if_else(pa.array(episode), pa.array(reward), tiled[name])
           for name in ("reward", "total_reward", "final_reward")},  # the other rows' nulls kept
        "success": pc.if_else(pa.array(episode), pa.array(reward >= 1.0), tiled["success"]),
        "data": _records(tiled, episode, reward, suffix),
    }
    for name, column in columns.items():
        tiled = tiled.set_column(tiled.schema.get_field_index(name), source.schema.field(name), column)
    return tiled


def _records(tiled: pa.Table, episode: np.ndarray, reward: np.ndarray, suffix: pa.Array) -> pa.Array:
    """The episode rows' records with their session, task and reward (and the success that follows)."""
    data = tiled["data"].to_pylist()
    sessions, tasks = tiled["session_id"].to_pylist(), tiled["task_index"].to_pylist()
    for n in np.flatnonzero(episode):
        record = json.loads(data[n])
        value = float(reward[n])
        copy = int(suffix[n].as_py())
        record.update(session_id=f"{sessions[n]}-{copy}", task_index=tasks[n] + 10 * copy,
                      reward=value, total_reward=value, final_reward=value, success=value >= 1.0)  # fmt: skip
        data[n] = json.dumps(record, separators=(",", ":"))
    return pa.array(data, pa.large_string())


def write_trace(episodes: int, path: Path, shift: int = 0) -> Path:
    """A trace of ``episodes`` episodes at ``path``, written a block at a time (see the module docstring; ``shift``:
    the rewards of another run of the same tasks)."""
    from ors_lab.recording.recorder import COMPACT_ROWS, DICTIONARY_COLUMNS

    source = template()
    copies = episodes // 20
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with pq.ParquetWriter(tmp, source.schema, compression="zstd", use_dictionary=DICTIONARY_COLUMNS) as writer:
        for first in range(0, copies, BLOCK // 20):
            writer.write_table(block(source, first, min(BLOCK // 20, copies - first), shift),
                               row_group_size=COMPACT_ROWS)
    tmp.replace(path)
    return path


def trace_path(episodes: int) -> Path:
    """The cached trace of ``episodes`` episodes, written first if missing."""
    from ors_lab.recording.columns import SCHEMA_VERSION

    path = CACHE / f"episodes-{episodes}-v{SCHEMA_VERSION}.parquet"
    return path if path.is_file() else write_trace(episodes, path)


# -- one figure in a fresh process ---------------------------------------------------------------------


def child(what: str, path: str) -> dict[str, Any]:
    """Measure ``what`` on the trace at ``path`` in this process: wall and CPU seconds, peak RSS over baseline."""
    import ors_lab as ol

    _ = ol.load_trace(str(REPO_ROOT / "recordings" / "demo.parquet")).tasks  # warm the imports (pandas, frames)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out: dict[str, Any] = {}
    started, cpu = time.perf_counter(), time.process_time()
    trace = ol.load_trace(path)
    out["rows"] = len(trace)
    out["load_s"] = time.perf_counter() - started
    if what != "load":
        if what == "tasks":
            _ = trace.episodes
        started, cpu = time.perf_counter(), time.process_time()
        frame = getattr(trace, what)
        out[f"{what}_s"] = time.perf_counter() - started
        out[f"{what}_rows"] = len(frame)
    out[f"{what}_cpu_s"] = time.process_time() - cpu
    out[f"{what}_rss_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline) / 1024
    return out


def _in_child(what: str, path: Path, timeout: float, checkout: Path | None = None) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", what, str(path)]
    if checkout is not None:
        command += ["--checkout", str(checkout)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {f"{what}_s": math.inf}
    if done.returncode != 0:
        raise RuntimeError(f"{what} on {path} failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def measure(sizes: tuple[int, ...] = SIZES, rounds: int = 2, timeout: float = 600.0) -> list[dict[str, Any]]:
    """One row per size and round: file size, rows, and each figure measured in a fresh subprocess."""
    rows = []
    for episodes in sizes:
        path = trace_path(episodes)
        for round_ in range(rounds):
            row: dict[str, Any] = {"episodes": episodes, "round": round_, "file_mb": path.stat().st_size / 2**20,
                                   "bytes_per_episode": path.stat().st_size / episodes}  # fmt: skip
            for what in ("load", "episodes", "tasks", "steps", "calls"):
                result = _in_child(what, path, timeout)
                row.setdefault("rows", result.get("rows"))
                row.update({k: v for k, v in result.items() if k.startswith(what)})
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def growth(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Each figure's growth law between the smallest and the largest size measured (medians over rounds):
    the exponent of episodes it grows with, named constant (< 0.3), linear (0.7 .. 1.3), or worse."""
    sizes = sorted({row["episodes"] for row in rows})
    laws: dict[str, str] = {}
    if len(sizes) < 2:
        return laws
    for figure in FIGURES:
        low, high = (_median(rows, size, figure) for size in (sizes[0], sizes[-1]))
        if low is None or high is None or low <= 0 or math.isinf(high):
            continue
        exponent = math.log(high / low) / math.log(sizes[-1] / sizes[0])
        name = "constant" if exponent < 0.3 else "sublinear" if exponent < 0.7 else "linear" if exponent <= 1.3 \
            else "worse"
        laws[figure] = f"{name} (x^{exponent:.2f})"
    return laws


def _median(rows: list[dict[str, Any]], episodes: int, figure: str) -> float | None:
    values = [row[figure] for row in rows if row["episodes"] == episodes and row.get(figure) is not None]
    return statistics.median(values) if values else None


def table(rows: list[dict[str, Any]]) -> str:
    """The medians (and the range over rounds) as a Markdown table, with the targets met or missed."""
    lines = ["| figure | " + " | ".join(f"{n:,} episodes" for n in sorted({r['episodes'] for r in rows})) + " |"]
    lines.append("|---|" + "---:|" * (len(lines[0].split("|")) - 3))
    for figure in (*FIGURES, "episodes_cpu_s", "tasks_cpu_s", "steps_cpu_s", "calls_cpu_s"):
        cells = []
        for episodes in sorted({r["episodes"] for r in rows}):
            values = [r[figure] for r in rows if r["episodes"] == episodes and r.get(figure) is not None]
            if not values:
                cells.append("-")
                continue
            target = TARGETS.get(figure) if episodes == 1_000_000 else None
            mark = "" if target is None else (" (met)" if statistics.median(values) < target else " (MISSED)")
            cells.append(f"{statistics.median(values):,.3g} [{min(values):,.3g}..{max(values):,.3g}]{mark}")
        lines.append(f"| {figure} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets(rows: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """Each target of ``TARGETS`` at the largest size measured (its median), met or not."""
    largest = max(row["episodes"] for row in rows)
    names = {"load_s": "load_trace", "episodes_s": "the episodes table", "episodes_rss_mb": "its peak RSS (MB)",
             "tasks_s": "the tasks table", "steps_rss_mb": "steps, peak RSS over the baseline (MB)",
             "calls_rss_mb": "calls, peak RSS over the baseline (MB)"}  # fmt: skip
    verdicts = []
    for figure, bound in TARGETS.items():
        value = _median(rows, largest, figure)
        verdicts.append((f"{largest:,} episodes: {names[figure]} {value if value is None else f'{value:,.3g}'} "
                         f"< {bound:g}", value is not None and value < bound))  # fmt: skip
    return verdicts


def compare(baseline: Path, episodes: int = SIZES[-1], rounds: int = 3) -> dict[str, list[dict[str, Any]]]:
    """``steps`` and ``calls`` of the trace of ``episodes`` with this checkout (``ours``) and ``baseline``, each in
    a fresh child, in turns (the order reversed every other round): one row per checkout, round and figure."""
    path, checkouts = trace_path(episodes), {"ours": REPO_ROOT, "baseline": baseline.resolve()}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in checkouts}
    for number in range(rounds):
        for what in ("steps", "calls"):
            for name in list(checkouts)[:: 1 if number % 2 == 0 else -1]:
                row = _in_child(what, path, 1800.0, checkouts[name])
                results[name].append({"what": what, **{key.removeprefix(f"{what}_"): value for key, value in
                                                        row.items() if key.startswith(what)}})  # fmt: skip
                print(json.dumps({"checkout": name, "round": number, **results[name][-1]}), flush=True)
    return results


def compared(results: dict[str, list[dict[str, Any]]]) -> str:
    """The medians (and ranges) of ``compare``'s rows as a Markdown table, and ours ÷ the baseline's."""
    lines = ["| frame | checkout | wall s | CPU s | peak RSS over the baseline (MB) |", "|---|---|---:|---:|---:|"]
    for what in ("steps", "calls"):
        for name, rows in results.items():
            cells = []
            for figure in ("s", "cpu_s", "rss_mb"):
                values = [row[figure] for row in rows if row["what"] == what]
                cells.append(f"{statistics.median(values):,.3g} [{min(values):,.3g}..{max(values):,.3g}]")
            lines.append(f"| {what} | {name} | " + " | ".join(cells) + " |")
        for figure in ("s", "cpu_s", "rss_mb"):
            ours, theirs = (statistics.median(row[figure] for row in results[name] if row["what"] == what)
                            for name in ("ours", "baseline"))  # fmt: skip
            lines.append(f"| {what} | ours ÷ baseline, {figure} | {ours / theirs:.2f} | | |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", type=Path, help="another checkout: its steps and calls beside ours, in turns")
    parser.add_argument("--child", nargs=2, metavar=("WHAT", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--checkout", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.checkout:  # that checkout's ors_lab first
            sys.path.insert(0, str(args.checkout))
        print(json.dumps(child(*args.child)))
        return 0
    if args.baseline:
        print(compared(compare(args.baseline, max(args.episodes), args.rounds)))
        return 0
    rows = measure(tuple(args.episodes), args.rounds)
    print()
    print(table(rows))
    print()
    for figure, law in growth(rows).items():
        print(f"{figure}: {law}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
