"""Scale on one machine: open sessions, traces and replay as they grow, in one run.

    .venv/bin/python bench/scale.py                  # all three parts, full sizes (about 6 minutes; 7 the first time)
    .venv/bin/python bench/scale.py --only replay    # one part (sessions, trace or replay)
    .venv/bin/python bench/scale.py --quick          # the two smaller sizes of each, one round
    .venv/bin/python bench/scale.py --check          # exit 1 if a target is missed

The parts, each measured in fresh interpreters so that each figure's memory is its own:

- **sessions** (``scale_sessions.py``): 10 / 2,000 / 10,000 sessions held open by one client
  under ``ulimit -n 1024`` against an ors-sdk server: open errors, time to open, RSS per session,
  CPU per ping, the client's fds and both sides' connections.
- **trace** (``scale_trace.py``): synthetic traces of 10k / 100k / 1M episodes in the recorder's
  schema: file size, ``load_trace``, the episodes, tasks, steps and calls tables (wall, CPU, peak
  RSS over the child's baseline).
- **replay** (``scale_replay.py``): ``ReplayEngine`` / ``ReplayServer`` loading copies of the demo
  trace of 1k / 10k / 100k sessions: load time, CPU per 1k sessions, KB per session, peak RSS; a
  stateless request's and a ``/create``'s cost; and the 1k copy played with 0 mismatches.

Each part prints its table with the growth law of each figure (the exponent k of figure ~ size**k:
constant, sublinear, linear or worse), then the targets of the part, met or MISSED.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import scale_replay, scale_sessions, scale_trace

PARTS = ("sessions", "trace", "replay")


def sessions(quick: bool) -> list[tuple[str, bool]]:
    rows = scale_sessions.measure(scale_sessions.SIZES[:2] if quick else scale_sessions.SIZES)
    print(scale_sessions.sessions_table(rows))
    largest = max(rows, key=lambda row: row["sessions"])
    return [
        (f"{largest['sessions']:,} open sessions under ulimit -n {scale_sessions.CLIENT_FD_LIMIT}: 0 errors",
         all(row["open_errors"] == 0 and row["close_errors"] == 0 for row in rows)),
    ]  # fmt: skip


def trace(quick: bool) -> list[tuple[str, bool]]:
    sizes = scale_trace.SIZES[:2] if quick else scale_trace.SIZES
    rows = scale_trace.measure(sizes, rounds=1 if quick else 2)
    print(scale_trace.table(rows))
    for figure, law in scale_trace.growth(rows).items():
        print(f"  {figure}: {law}")
    return scale_trace.targets(rows)


def replay(quick: bool) -> list[tuple[str, bool]]:
    sizes = scale_replay.SIZES[:2] if quick else scale_replay.SIZES
    return scale_replay.report(scale_replay.measure(1 if quick else 3, sizes))


MEASURES: dict[str, Callable[[bool], list[tuple[str, bool]]]] = {"sessions": sessions, "trace": trace, "replay": replay}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=PARTS, action="append", help="run this part (repeatable); default: all")
    parser.add_argument("--quick", action="store_true", help="the two smaller sizes of each part, one round")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    verdicts: list[tuple[str, bool]] = []
    for part in args.only or PARTS:
        started = time.monotonic()
        print(f"\n## {part}\n", flush=True)
        verdicts += MEASURES[part](args.quick)
        print(f"\n({part}: {time.monotonic() - started:.0f} s)", flush=True)
    return verdicts_said(verdicts, args.check)


def verdicts_said(verdicts: list[tuple[str, bool]], check: bool) -> int:
    """Print a met / MISSED line per target; the exit status: 1 if ``check`` and one is missed."""
    print()
    for name, met in verdicts:
        print(f"{'met' if met else 'MISSED'}: {name}")
    return 1 if check and not all(met for _, met in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
