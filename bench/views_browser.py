"""Live views in a real JupyterLab (headless Debian Chromium): a click during a run, a big trace opening.

    python bench/views_browser.py              # 2,000-episode run with 5 clicks; 10,000-episode trace, 3 opens
    python bench/views_browser.py --check      # exit 1 if a target is missed

What it does, in JupyterLab on 127.0.0.1 driven by Playwright (``tests/notebook/lab.py``, the
harness of the browser tests), each notebook opened and Run All picked as a person does:

1. **A click while a run goes on.** A notebook evaluates the quiz policy over 2,000 recorded
   episodes against ``ors-lab replay --speed 0`` (in its own process) with the dashboard drawn.
   While the cell runs, the bench clicks a finished cell of the tasks x rollouts grid and times
   the click until that episode's transcript is on screen, 5 times, each on another cell. The run
   must still be going after each click (else the figure would not be "during a run").
   Target: every click < 500 ms.
2. **A 10,000-episode trace opening.** ``recordings/demo.parquet`` copied to 10,000 episodes
   (``bench/trace_view.py: demo_copies``, 1.2 million rows). One cell loads it, the next displays
   it; the time from the first cell's end (its prompt number drawn) to the viewer's first page of
   rows drawn is the opening: the kernel building the view and the browser drawing it. Median of
   3 opens, each in a fresh kernel. Target: < 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0] or ".").resolve() == REPO_ROOT / "bench":
    sys.path[0] = str(REPO_ROOT)
elif str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import nbformat  # noqa: E402

from bench.evaluate import CONCURRENCY, ENV_NAME, _rollouts, record_source, start_replay  # noqa: E402
from bench.quiz_data import SPLIT  # noqa: E402
from bench.trace_view import demo_copies  # noqa: E402
from tests.notebook.lab import MARKER, JupyterLab  # noqa: E402

CLICK_TARGET_S = 0.5
OPEN_TARGET_S = 2.0
CLICKS = 5
OPENS = 3


def notebook(path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def clicks_during_a_run(lab: JupyterLab, source: Path, scratch: Path, episodes: int) -> list[float]:
    """Seconds from a click on a finished grid cell to its transcript on screen, while the run goes on."""
    proc, url = start_replay(source, scratch / "replay.log")
    try:
        path = notebook(
            scratch / "run.ipynb",
            f"import sys\nsys.path.insert(0, {str(REPO_ROOT)!r})\nimport ors_lab as ol\n"
            "from bench.evaluate import quiz_policy",
            f"with ol.Client({url!r}) as client:\n"
            f"    result = ol.evaluate(client.environment({ENV_NAME!r}), quiz_policy, split={SPLIT!r}, "
            f"rollouts={_rollouts(episodes)}, concurrency={CONCURRENCY})",
            f"print({MARKER!r})",
        )
        seconds: list[float] = []
        with lab.run_all(path, name="bench-click", timeout=600) as run:
            page = run.page
            page.wait_for_function("() => document.querySelectorAll('.ol-run .ol-cell:not(.ol-pending)').length > 20",
                                   timeout=300_000)  # fmt: skip
            for n in range(CLICKS):
                keys = page.eval_on_selector_all(
                    ".ol-run .ol-cell:not(.ol-pending)", "es => es.map(e => e.dataset.key)"
                )
                key = keys[(n * 7919) % len(keys)]
                started = time.monotonic()
                page.locator(f".ol-run .ol-cell[data-key='{key}']").click()
                task, rollout = key.split("/")
                page.wait_for_function(
                    "(want) => { const t = document.querySelector('.ol-run-transcript');"
                    " return t && t.offsetParent !== null && t.textContent.includes(want)"
                    " && t.querySelector('.ol-run-transcript-body').textContent.length > 0; }",
                    arg=f"task {task} · rollout {rollout}",
                    timeout=10_000,
                )
                seconds.append(time.monotonic() - started)
                done = page.eval_on_selector(".ol-run-progress", "e => e.textContent")
                if not run.running() or done.startswith(f"{episodes}/"):
                    raise SystemExit(f"the run ended before click {n + 1} was timed ({done}): use more episodes")
                time.sleep(0.3)
            run.finish()
        if run.problems:
            raise SystemExit(run.report())
        return seconds
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def trace_opening(lab: JupyterLab, trace: Path, scratch: Path, n: int) -> float:
    """Seconds from the loading cell's end to the viewer's first page of rows drawn."""
    path = notebook(
        scratch / f"open-{n}.ipynb",
        f"import ors_lab as ol\ntrace = ol.load_trace({str(trace)!r})",
        "trace",
        f"print({MARKER!r})",
    )
    with lab.run_all(path, name=f"bench-open-{n}", timeout=300) as run:
        page = run.page
        page.wait_for_function(
            "() => { const p = document.querySelectorAll('.jp-CodeCell .jp-InputPrompt');"
            " return p.length && /\\[1\\]/.test(p[0].textContent); }",
            timeout=120_000,
            polling=10,
        )
        loaded = time.monotonic()
        page.wait_for_function(
            "() => document.querySelectorAll('.ol-tr-list tbody tr').length > 0", timeout=60_000, polling=10
        )
        seconds = time.monotonic() - loaded
        run.finish()
    if run.problems:
        raise SystemExit(run.report())
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=2_000)
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ors-lab-bench-browser-") as tmp:
        scratch = Path(tmp)
        source = scratch / "source.parquet"
        record_source(source, args.episodes)
        big = demo_copies(scratch / "demo-10k.parquet")
        with JupyterLab(scratch / "lab") as lab:
            clicks = clicks_during_a_run(lab, source, scratch, args.episodes)
            opens = [trace_opening(lab, big, scratch, n) for n in range(OPENS)]
    print("| measure | median | max | target |\n|---|---:|---:|---|")
    click, opening = statistics.median(clicks), statistics.median(opens)
    print(f"| click on a grid cell -> its transcript, during a {args.episodes:,}-episode run ({CLICKS} clicks) | "
          f"{1000 * click:.0f} ms | {1000 * max(clicks):.0f} ms | < {1000 * CLICK_TARGET_S:.0f} ms |")  # fmt: skip
    print(f"| 10,000-episode trace: loading cell done -> first page of the viewer drawn ({OPENS} opens) | "
          f"{opening:.2f} s | {max(opens):.2f} s | < {OPEN_TARGET_S:g} s |")  # fmt: skip
    click_met, open_met = max(clicks) < CLICK_TARGET_S, statistics.median(opens) < OPEN_TARGET_S
    print(f"\nclicks: {', '.join(f'{1000 * s:.0f} ms' for s in clicks)}: {'met' if click_met else 'MISSED'}")
    print(f"opens: {', '.join(f'{s:.2f} s' for s in opens)}: {'met' if open_met else 'MISSED'}")
    return 1 if args.check and not (click_met and open_met) else 0


if __name__ == "__main__":
    sys.exit(main())
