"""Live views benchmark: an evaluation with its dashboard drawn in a real Jupyter kernel, against none.

    python bench/views.py                    # 2,000 episodes, 3 rounds of (dashboard, no view)
    python bench/views.py --rounds 1 --episodes 600     # a smoke test
    python bench/views.py --check            # exit 1 if a target is missed

What it does:

1. **Source trace.** The quiz policy over ``bench/quiz_env.py`` on a live ors-sdk server, recorded
   (``bench/evaluate.py: record_source``): the material to replay.
2. **Measured runs** in one real kernel (``jupyter_client``, the kernel of this venv, Jupyter state
   in a temporary directory) against ``ors-lab replay SOURCE --speed 0`` in its own process,
   concurrency 32. Each round runs the same ``ol.evaluate(...)`` cell twice, once with
   ``ol.live_views("widgets")`` (the dashboard is displayed and updated, its messages go out on
   iopub as they would to a browser) and once with ``ol.live_views("off")``, the order alternating.
   The cell times itself (wall and the kernel's CPU); the messages it sent are read from iopub:
   widget updates (``comm_msg``), displays and display updates.
3. **Targets.** Episodes/s with the dashboard >= 0.95x without (pooled over the rounds: the ratio
   of the summed episodes over the summed seconds, with the per-round range); messages from the
   kernel for the view <= 20 per second of the run.

The browser side (a click on a grid cell while a run goes on; a 10,000-episode trace opening in
the viewer) is measured by ``bench/views_browser.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0] or ".").resolve() == REPO_ROOT / "bench":
    sys.path[0] = str(REPO_ROOT)
elif str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.evaluate import CONCURRENCY, ENV_NAME, _rollouts, record_source, start_replay  # noqa: E402
from bench.quiz_data import SPLIT  # noqa: E402
from tests.notebook.kernel import Cell, Kernel  # noqa: E402  (the real-kernel harness of the tests)

MODES = ("widgets", "off")
TARGET_RATIO = 0.95  # episodes/s with the dashboard, at least this share of the run with no view
TARGET_RATE = 20.0  # kernel-to-browser messages per second of the run, at most

SETUP = """
import json, time
import ors_lab as ol
from bench.evaluate import quiz_policy
"""

RUN = """
ol.live_views({mode!r})
with ol.Client({url!r}) as _client:
    _env = _client.environment({env!r})
    _t0, _c0 = time.monotonic(), time.process_time()
    _result = ol.evaluate(_env, quiz_policy, split={split!r}, rollouts={rollouts}, concurrency={concurrency}{extra})
    _out = {{"wall": time.monotonic() - _t0, "cpu": time.process_time() - _c0, "episodes": len(_result.episodes)}}
"""

REPORT = "print(json.dumps(_out)); print(json.dumps({'errors': int(_result.episodes['error'].notna().sum())}))"


def view_messages(cell: Cell) -> dict[str, int]:
    """The cell's messages a browser would get for its views, by kind."""
    return {kind: len(cell.of(kind)) for kind in ("comm_msg", "display_data", "update_display_data", "comm_open")}


def measure(kernel: Kernel, source: Path, mode: str, episodes: int, extra: str = "") -> dict[str, Any]:
    """One run against a fresh replay server (a recorded episode is served once); ``extra``: more of evaluate's
    keywords (``bench/compare.py``: ``, baseline=...``)."""
    proc, url = start_replay(source, source.with_suffix(".replay.log"))
    try:
        code = RUN.format(mode=mode, url=url, env=ENV_NAME, split=SPLIT, rollouts=_rollouts(episodes),
                          concurrency=CONCURRENCY, extra=extra)  # fmt: skip
        cell = kernel.run(code, timeout=1800)
        report = kernel.run(REPORT)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    if cell.problems() or report.problems():
        raise SystemExit(f"the kernel failed in mode {mode}: {cell.problems() + report.problems()}")
    lines = [json.loads(line) for line in report.stdout().strip().splitlines()]
    out = lines[0] | lines[1]
    if out["errors"]:
        raise SystemExit(f"{out['errors']} episodes failed in mode {mode}")
    counts = view_messages(cell)
    sent = sum(counts.values())
    if mode == "widgets" and not (counts["display_data"] and counts["comm_msg"]):
        raise SystemExit(f"the dashboard was not drawn (messages {counts}): nothing to measure")
    return out | {
        "mode": mode,
        "eps": out["episodes"] / out["wall"],
        "cpu_ms": 1000 * out["cpu"] / out["episodes"],
        "messages": counts,
        "rate": sent / out["wall"],
    }


def kernel_environment(scratch: Path) -> None:
    """The kernel's Jupyter and IPython state in ``scratch``, out of $HOME; ors_lab from this checkout; views as by
    default."""
    for name, folder in (("IPYTHONDIR", "ipython"), ("JUPYTER_CONFIG_DIR", "cfg"), ("JUPYTER_DATA_DIR", "data"),
                         ("JUPYTER_RUNTIME_DIR", "rt")):  # fmt: skip
        (scratch / folder).mkdir(parents=True, exist_ok=True)
        os.environ[name] = str(scratch / folder)
    os.environ["PYTHONPATH"] = str(REPO_ROOT)
    os.environ.pop("ORS_LAB_VIEWS", None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="ors-lab-bench-views-") as tmp:
        source = Path(tmp) / "source.parquet"
        seconds = record_source(source, args.episodes)
        print(f"source trace: {_rollouts(args.episodes) * 6} live episodes recorded in {seconds:.1f} s", flush=True)
        kernel_environment(Path(tmp) / "jupyter")
        with Kernel(cwd=REPO_ROOT) as kernel:
            kernel.run(SETUP)
            measure(kernel, source, "off", min(args.episodes, 300))  # warm-up: imports, first views
            measure(kernel, source, "widgets", min(args.episodes, 300))
            for round_ in range(args.rounds):
                for mode in MODES if round_ % 2 == 0 else tuple(reversed(MODES)):
                    run = measure(kernel, source, mode, args.episodes)
                    runs[mode].append(run)
                    print(f"round {round_ + 1} {mode:<8} {run['eps']:7.1f} episodes/s  {run['cpu_ms']:.3f} kernel CPU "
                          f"ms/episode  {run['rate']:5.1f} view messages/s {run['messages']}", flush=True)  # fmt: skip
    pooled = {mode: sum(r["episodes"] for r in runs[mode]) / sum(r["wall"] for r in runs[mode]) for mode in MODES}
    ratio = pooled["widgets"] / pooled["off"]
    per_round = [w["eps"] / o["eps"] for w, o in zip(runs["widgets"], runs["off"], strict=True)]
    cpu = {mode: statistics.median(r["cpu_ms"] for r in runs[mode]) for mode in MODES}
    rate = max(r["rate"] for r in runs["widgets"])
    print("\n| measure | dashboard | no view |\n|---|---:|---:|")
    print(f"| episodes/s (pooled over {args.rounds} rounds) | {pooled['widgets']:.1f} | {pooled['off']:.1f} |")
    print(f"| kernel CPU ms per episode (median) | {cpu['widgets']:.3f} | {cpu['off']:.3f} |")
    print(f"| view messages per second (highest round) | {rate:.1f} | "
          f"{max(r['rate'] for r in runs['off']):.1f} |")  # fmt: skip
    ratio_met, rate_met = ratio >= TARGET_RATIO, rate <= TARGET_RATE
    print(f"\ndashboard ÷ no view, episodes/s: {ratio:.3f} pooled (rounds {min(per_round):.3f}-{max(per_round):.3f}); "
          f"target >= {TARGET_RATIO}: {'met' if ratio_met else 'MISSED'}")  # fmt: skip
    print(f"view messages per second: {rate:.1f}; target <= {TARGET_RATE:g}: {'met' if rate_met else 'MISSED'}")
    return 1 if args.check and not (ratio_met and rate_met) else 0


if __name__ == "__main__":
    sys.exit(main())
