"""Recorder CPU per row, without a server: what recording adds to the client's CPU, by thread.

    .venv/bin/python bench/recorder_cpu.py                  # 7 runs of 300 episodes (8,700 rows): ~10 s
    .venv/bin/python bench/recorder_cpu.py --episodes 600 --runs 9

Emits the 29 rows per quiz episode that bench/recording.py's ``episode_events`` describes (headers
as ``httpx2.Headers``, as our client passes them) through ``Recorder.emit``, and does the writer's
work for parts of 100 episodes (about what it takes per 0.5 s flush in the overhead benchmark).
Times, with ``time.thread_time`` in this one thread, the ``emit`` calls (the event loop's share:
stamping, context and redaction, storing each value in its column's buffers) and the writer's
share (taking the buffers as Arrow arrays, writing the part).
Prints the fastest run's CPU microseconds per row and milliseconds per episode: CPU time, and the
fastest of several runs, so that other load on the machine affects the figures little.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import httpx2  # noqa: E402

from bench.recording import episode_events  # noqa: E402
from ors_lab.recording import Recorder  # noqa: E402

PART_EPISODES = 100
ROWS_PER_EPISODE = 29


def client_rows(episodes: int) -> list[tuple[str, dict[str, Any]]]:
    """The emitted (kind, fields), with header dicts turned into httpx2.Headers as the client sends them."""
    rows = []
    for i in range(episodes):
        for kind, fields in episode_events(i):
            if "headers" in fields:
                fields["headers"] = httpx2.Headers(list(fields["headers"].items()))
            rows.append((kind, fields))
    return rows


def run(rows: list[tuple[str, dict[str, Any]]], path: Path) -> tuple[float, float]:
    """CPU seconds of the emit calls and of the part writes, for all rows."""
    rec = Recorder(path, flush_interval=3600, part_rows=10**9)  # the writer thread idles; its work is done here
    emit, part = rec.emit, ROWS_PER_EPISODE * PART_EPISODES
    emit_s = write_s = 0.0
    for start in range(0, len(rows), part):
        t0 = time.thread_time()
        for kind, fields in rows[start : start + part]:
            emit(kind, **fields)
        t1 = time.thread_time()
        rec._write_part(*rec._take_tables())
        t2 = time.thread_time()
        emit_s, write_s = emit_s + t1 - t0, write_s + t2 - t1
    rec.close()
    return emit_s, write_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    rows = client_rows(args.episodes)
    with tempfile.TemporaryDirectory(prefix="ors-lab-recorder-cpu-") as tmp:
        run(client_rows(PART_EPISODES), Path(tmp) / "warm-up.parquet")  # imports, pyarrow's first write
        emit_s, write_s = min((run(rows, Path(tmp) / f"run-{i}.parquet") for i in range(args.runs)), key=sum)
    figures = {"emit (event loop)": emit_s, "writer": write_s, "both": emit_s + write_s}
    for label, seconds in figures.items():
        print(f"{label:<22} {1e6 * seconds / len(rows):6.2f} us/row  {1e3 * seconds / args.episodes:6.3f} ms/episode")


if __name__ == "__main__":
    main()
