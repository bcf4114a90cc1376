"""The sync face in a notebook: ``evaluate`` inside a running Jupyter kernel against ``await aevaluate``.

    python bench/kernel_sync.py                    # 1,200 episodes a run, 6 rounds, views off and on: about 6 minutes
    python bench/kernel_sync.py --rounds 1 --episodes 300   # a smoke test
    python bench/kernel_sync.py --profile          # one run of each face under cProfile: the CPU by module
    python bench/kernel_sync.py --check            # exit 1 if a target is missed
    git worktree add /tmp/before COMMIT            # another checkout: its sync face measured beside ours
    python bench/kernel_sync.py --baseline /tmp/before

What it does:

1. **Server.** The quiz environment of ``bench/quiz_env.py`` on a live ors-sdk server (its own process, so its
   CPU is not the kernel's); ``--server replay``: those episodes recorded once, then each run against a fresh
   ``ors-lab replay SOURCE --speed 0`` (a faster server: more of the kernel's CPU is the harness's).
2. **Two real kernels** of this venv (``tests/notebook/kernel.py``; Jupyter state in a temporary directory),
   one per face, so that neither face runs on what the other left in its process: ``sync`` runs
   ``ol.evaluate(env, ...)`` with ``env`` from a sync ``ol.Client`` (what a notebook user types), ``async`` runs
   ``await ol.aevaluate(env, ...)`` with ``env`` from an ``ol.AsyncClient``. The same episodes both ways: the
   scripted quiz policy (prompt, ``blob`` twice, ``answer``; every reward checked), 6 tasks x N/6 rollouts,
   concurrency 32, recorded (``record=`` a new trace each run), with ``ol.live_views("off")`` and with
   ``"widgets"`` (the dashboard drawn, its messages sent on iopub as to a browser).
3. **Rounds.** Each round runs the four (face, views) runs, the faces' order reversed every other round. A run
   times itself inside the cell: the kernel process's CPU (``time.process_time``: every thread of the kernel,
   the recorder's writer among them) and wall time around the ``evaluate`` call.
4. **Figures.** Per views mode: CPU ms per episode of each face (pooled: summed CPU over summed episodes), and
   sync ÷ async: pooled, with the rounds' own ratios (min-max) and a bootstrap 95% interval of their median.
   **Target**: sync ÷ async, pooled, at most 1.2 with views off and with the dashboard.

``--profile`` runs each face once, views off, with its kernel's thread under cProfile timed by that thread's CPU clock
(``time.thread_time``: waits are not counted, and every Python call is inflated), and prints the own time summed by
module: where the CPU goes.

``--baseline CHECKOUT`` adds a third kernel running the sync face with that checkout's ``ors_lab`` (first on the
kernel's path) in the same rounds: ``sync-baseline`` ÷ ``async`` is the figure before a change, in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pstats
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0] or ".").resolve() == REPO_ROOT / "bench":
    sys.path[0] = str(REPO_ROOT)
elif str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.evaluate import CONCURRENCY, ENV_NAME, _rollouts, record_source, start_replay  # noqa: E402
from bench.quiz_data import SPLIT  # noqa: E402
from bench.recording import median_interval  # noqa: E402
from bench.scale import verdicts_said  # noqa: E402
from bench.views import kernel_environment  # noqa: E402
from tests.notebook.kernel import Kernel  # noqa: E402  (the real-kernel harness of the tests)

FACES = ("async", "sync")
VIEWS = ("off", "widgets")
TARGET = 1.2  # sync ÷ async CPU per episode, at most

SETUP = """
import cProfile, json, time
import ors_lab as ol
from bench.evaluate import quiz_policy
"""

OPEN = {
    "sync": "with ol.Client({url!r}) as _client:",
    "async": "async with ol.AsyncClient({url!r}) as _client:",
}
CALL = {
    "sync": "ol.evaluate",
    "async": "await ol.aevaluate",
}
RUN = """
ol.live_views({views!r})
{open}
    _env = _client.environment({env!r})
    _profile = cProfile.Profile(time.thread_time) if {profile!r} else None  # the loop thread's CPU, not waits
    _t0, _c0 = time.monotonic(), time.process_time()
    _profile and _profile.enable()
    _result = {call}(_env, quiz_policy, split={split!r}, rollouts={rollouts}, concurrency={concurrency},
                     record={record!r})
    _profile and _profile.disable()
    _out = {{"wall": time.monotonic() - _t0, "cpu": time.process_time() - _c0, "episodes": len(_result.episodes),
             "errors": int(_result.episodes["error"].notna().sum()),
             "bad": int((_result.episodes["reward"] != 1.0).sum())}}
    _profile and _profile.dump_stats({stats!r})
"""
REPORT = "print(json.dumps(_out))"


def measure(kernel: Kernel, face: str, views: str, url: str, episodes: int, scratch: Path, *,
            profile: bool = False) -> dict[str, Any]:  # fmt: skip
    """One run of ``face`` with ``views`` in ``kernel``: its wall and CPU seconds, episodes, CPU ms per episode."""
    record = scratch / f"run-{len(list(scratch.glob('run-*')))}.parquet"
    kind = face.removesuffix("-baseline")
    code = RUN.format(views=views, open=OPEN[kind].format(url=url), env=ENV_NAME, profile=profile, call=CALL[kind],
                      split=SPLIT, rollouts=_rollouts(episodes), concurrency=CONCURRENCY, record=str(record),
                      stats=str(scratch / f"{face}-{views}.prof"))  # fmt: skip
    cell = kernel.run(code, timeout=1800)
    report = kernel.run(REPORT)
    if cell.problems() or report.problems():
        raise SystemExit(f"the {face} run failed: {cell.problems() + report.problems()}")
    out: dict[str, Any] = json.loads(report.stdout())
    if out["errors"] or out["bad"]:
        raise SystemExit(f"{face} ({views}): {out['errors']} failed episodes, {out['bad']} without reward 1")
    if views == "widgets" and not cell.widget_models():
        raise SystemExit(f"{face}: the dashboard was not drawn: nothing to measure")
    return out | {"face": face, "views": views, "cpu_ms": 1000 * out["cpu"] / out["episodes"]}


@contextlib.contextmanager
def fresh_replay(source: Path) -> Iterator[str]:
    """A fresh ``ors-lab replay SOURCE --speed 0`` for one run (a recorded episode is served once): its URL."""
    proc, url = start_replay(source, source.with_suffix(".replay.log"))
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def by_module(stats: Path, top: int = 24) -> list[tuple[str, float]]:
    """The profile's own time (tottime) summed by file, the largest first: where the CPU goes."""
    sums: dict[str, float] = {}
    for (filename, _, _), (_, _, own, _, _) in pstats.Stats(str(stats)).stats.items():  # type: ignore[attr-defined]
        name = filename.split("site-packages/")[-1].split("python3.11/")[-1].replace(str(REPO_ROOT) + "/", "")
        sums[name] = sums.get(name, 0.0) + own
    return sorted(sums.items(), key=lambda item: -item[1])[:top]


def pooled(runs: list[dict[str, Any]]) -> float:
    """CPU ms per episode over every run: summed CPU over summed episodes."""
    return 1000 * sum(run["cpu"] for run in runs) / sum(run["episodes"] for run in runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=1_200)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--profile", action="store_true", help="one run of each face under cProfile, views off")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--baseline", type=Path, help="another checkout: its sync face in a third kernel")
    parser.add_argument("--server", choices=("ors-sdk", "replay"), default="ors-sdk", help="what the runs talk to")
    args = parser.parse_args(argv)
    from ors_lab.demo.launch import serve

    faces = (*FACES, *(["sync-baseline"] if args.baseline else []))
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ors-lab-bench-kernel-sync-") as tmp, contextlib.ExitStack() as stack:
        scratch = Path(tmp)
        kernel_environment(scratch / "jupyter")
        if args.server == "replay":
            source = scratch / "source.parquet"
            record_source(source, args.episodes)
            serving: Callable[[], contextlib.AbstractContextManager[str]] = partial(fresh_replay, source)
        else:
            url = stack.enter_context(serve("bench.quiz_env:ENVIRONMENTS", env={"PYTHONPATH": str(REPO_ROOT)})).url
            serving = partial(contextlib.nullcontext, url)
        kernels: dict[str, Kernel] = {}
        for face in faces:
            checkout = args.baseline.resolve() if face == "sync-baseline" else REPO_ROOT
            os.environ["PYTHONPATH"] = str(checkout)  # the kernel's ors_lab (and bench) are this checkout's
            kernels[face] = stack.enter_context(Kernel(cwd=checkout))
        for face, kernel in kernels.items():
            kernel.run(SETUP)
            with serving() as url:
                measure(kernel, face, "widgets", url, min(args.episodes, 300), scratch)  # warm-up
        if args.profile:
            for face, kernel in kernels.items():
                with serving() as url:
                    run = measure(kernel, face, "off", url, args.episodes, scratch, profile=True)
                print(f"\n{face} under cProfile: {run['cpu_ms']:.2f} ms CPU per episode; own time by module (s):")
                for name, seconds in by_module(scratch / f"{face}-off.prof"):
                    print(f"  {seconds:7.3f}  {name}")
            return 0
        for number in range(args.rounds):
            for views in VIEWS:
                for face in faces if number % 2 == 0 else tuple(reversed(faces)):
                    with serving() as url:
                        runs.append(measure(kernels[face], face, views, url, args.episodes, scratch))
                    run = runs[-1]
                    print(f"round {number + 1} {face:<13} views {views:<7} {run['episodes'] / run['wall']:6.1f} "
                          f"episodes/s  {run['cpu_ms']:.3f} kernel CPU ms/episode", flush=True)  # fmt: skip
    print("\n| views | face | CPU ms/episode (pooled) | ÷ async, pooled | rounds (min-max) | 95% interval (median "
          "of rounds) |\n|---|---|---:|---:|---|---|")  # fmt: skip
    verdicts: list[tuple[str, bool]] = []
    for views in VIEWS:
        of = {face: [run for run in runs if run["face"] == face and run["views"] == views] for face in faces}
        print(f"| {views} | async | {pooled(of['async']):.3f} | | | |")
        for face in faces[1:]:
            ratio = pooled(of[face]) / pooled(of["async"])
            per_round = [s["cpu_ms"] / a["cpu_ms"] for s, a in zip(of[face], of["async"], strict=True)]
            interval = median_interval(per_round)
            shown = "–" if interval is None else f"{interval[0]:.3f}-{interval[1]:.3f}"
            print(f"| {views} | {face} | {pooled(of[face]):.3f} | {ratio:.3f} | {min(per_round):.3f}-"
                  f"{max(per_round):.3f} | {shown} |")  # fmt: skip
            if face == "sync":
                name = (f"sync ÷ async evaluate in a kernel, CPU per episode, views {views}: {ratio:.3f} "
                        f"(median of rounds {statistics.median(per_round):.3f}) <= {TARGET}")  # fmt: skip
                verdicts.append((name, ratio <= TARGET))
    return verdicts_said(verdicts, args.check)


if __name__ == "__main__":
    sys.exit(main())
