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
import queue
import statistics
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

from bench.evaluate import CONCURRENCY, ENV_NAME, _rollouts, record_source, start_replay  # noqa: E402
from bench.quiz_data import SPLIT  # noqa: E402

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
    _result = ol.evaluate(_env, quiz_policy, split={split!r}, rollouts={rollouts}, concurrency={concurrency})
    _out = {{"wall": time.monotonic() - _t0, "cpu": time.process_time() - _c0, "episodes": len(_result.episodes)}}
"""

REPORT = "print(json.dumps(_out)); print(json.dumps({'errors': int(_result.episodes['error'].notna().sum())}))"


class Kernel:
    """A real kernel of this venv, its Jupyter state in ``scratch``."""

    def __init__(self, scratch: Path) -> None:
        from jupyter_client.manager import KernelManager

        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), IPYTHONDIR=str(scratch / "ipython"),
                   JUPYTER_CONFIG_DIR=str(scratch / "cfg"), JUPYTER_DATA_DIR=str(scratch / "data"),
                   JUPYTER_RUNTIME_DIR=str(scratch / "rt"))  # fmt: skip
        env.pop("ORS_LAB_VIEWS", None)
        for name in ("ipython", "cfg", "data", "rt"):
            (scratch / name).mkdir(parents=True, exist_ok=True)
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env, cwd=str(REPO_ROOT))
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str, timeout: float = 1800) -> tuple[str, list[tuple[float, dict[str, Any]]]]:
        """Execute ``code``; returns its stdout and its iopub messages with their arrival times."""
        msg_id = self.client.execute(code, allow_stdin=False)
        stdout: list[str] = []
        messages: list[tuple[float, dict[str, Any]]] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.1))
            except queue.Empty:
                raise SystemExit(f"the kernel did not finish within {timeout} s:\n{code}") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            messages.append((time.monotonic(), msg))
            if kind == "error":
                raise SystemExit("the kernel raised:\n" + "\n".join(msg["content"]["traceback"])[-3000:])
            if kind == "stream" and msg["content"]["name"] == "stdout":
                stdout.append(msg["content"]["text"])
            if kind == "status" and msg["content"]["execution_state"] == "idle":
                return "".join(stdout), messages

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def view_messages(messages: list[tuple[float, dict[str, Any]]]) -> dict[str, int]:
    """The cell's messages a browser would get for its views, by kind."""
    counts = {"comm_msg": 0, "display_data": 0, "update_display_data": 0, "comm_open": 0}
    for _, msg in messages:
        if msg["msg_type"] in counts:
            counts[msg["msg_type"]] += 1
    return counts


def measure(kernel: Kernel, source: Path, mode: str, episodes: int) -> dict[str, Any]:
    """One run against a fresh replay server (a recorded episode is served once)."""
    proc, url = start_replay(source, source.with_suffix(".replay.log"))
    try:
        code = RUN.format(mode=mode, url=url, env=ENV_NAME, split=SPLIT, rollouts=_rollouts(episodes),
                          concurrency=CONCURRENCY)  # fmt: skip
        _, messages = kernel.run(code)
        stdout, _ = kernel.run(REPORT)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lines = [json.loads(line) for line in stdout.strip().splitlines()]
    out = lines[0] | lines[1]
    if out["errors"]:
        raise SystemExit(f"{out['errors']} episodes failed in mode {mode}")
    counts = view_messages(messages)
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
        kernel = Kernel(Path(tmp) / "jupyter")
        try:
            kernel.run(SETUP)
            measure(kernel, source, "off", min(args.episodes, 300))  # warm-up: imports, first views
            measure(kernel, source, "widgets", min(args.episodes, 300))
            for round_ in range(args.rounds):
                for mode in MODES if round_ % 2 == 0 else tuple(reversed(MODES)):
                    run = measure(kernel, source, mode, args.episodes)
                    runs[mode].append(run)
                    print(f"round {round_ + 1} {mode:<8} {run['eps']:7.1f} episodes/s  {run['cpu_ms']:.3f} kernel CPU "
                          f"ms/episode  {run['rate']:5.1f} view messages/s {run['messages']}", flush=True)  # fmt: skip
        finally:
            kernel.close()
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
