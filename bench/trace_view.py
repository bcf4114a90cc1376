"""Trace viewer benchmark: how long a 10,000-episode trace takes to open, page and open an episode.

    python bench/trace_view.py            # both traces, 5 runs each, and the first page drawn in Chromium
    python bench/trace_view.py --check    # exit 1 if the target is missed
    python bench/trace_view.py --no-browser

Two traces of 10,000 episodes, both written by the real recorder:

- ``demo x 250``: ``recordings/demo.parquet`` (the demo agent on the demo environments, thinking
  aloud word by word: 121 rows an episode) copied 250 times with new session ids and task
  indices, 1.2 million rows: what an evaluation of an agent that streams leaves;
- ``synthetic``: the events of ``tests/analysis/synthetic.py`` (start, create, open, 1 to 3
  steps, close, finish, episode) published into a ``Recorder``, 100,000 rows.

For each, in this process: ``load_trace`` (reported, not part of the target: the trace is loaded
before it is shown), then **opening the viewer**: ``trace.view()`` (the listing), the snapshot
as JSON, the static HTML and the text, which is what displaying the trace costs the kernel;
then a sorted and filtered page, an episode's timeline, and ``trace.transcripts`` (reported).
The first opening is timed cold (a fresh ``Trace``), then the median of the runs. With Chromium,
the first page is drawn by the real front end (``static/trace.js``) in a headless page.

Target: opening the viewer (kernel side plus drawing the first page) < 2 s for 10,000 episodes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import ors_lab as ol  # noqa: E402

TARGET_S = 2.0
EPISODES = 10_000


def demo_copies(path: Path) -> Path:
    """recordings/demo.parquet copied until it holds 10,000 episodes."""
    table = pq.read_table(REPO_ROOT / "recordings" / "demo.parquet")
    episodes = pc.sum(pc.equal(table["kind"], "episode")).as_py()
    copies, parts, rows = EPISODES // episodes, [], table.num_rows
    for n in range(copies):
        part = table.set_column(
            table.schema.get_field_index("session_id"),
            "session_id",
            pc.binary_join_element_wise(table["session_id"], pa.scalar(f"-{n}"), ""),
        )
        part = part.set_column(table.schema.get_field_index("seq"), "seq", pc.add(table["seq"], n * rows))
        part = part.set_column(
            table.schema.get_field_index("task_index"), "task_index", pc.add(table["task_index"], (n % 25) * 100)
        )
        parts.append(part)
    pq.write_table(pa.concat_tables(parts).replace_schema_metadata(table.schema.metadata), path)
    return path


def synthetic(path: Path) -> Path:
    """10,000 synthetic episodes published into a Recorder."""
    from ors_lab.events import EventStream
    from tests.analysis.synthetic import Episode, events

    stream = EventStream()
    with ol.Recorder(path) as recorder:
        stream.subscribe(recorder)
        for n in range(EPISODES):
            episode = Episode(n % 500, n // 500, [0.0, 0.5, 1.0][: 1 + n % 3], error="boom" if n % 97 == 0 else None)
            for event in events(episode):
                stream.publish(event)
    return path


def open_viewer(trace: ol.Trace) -> tuple[float, Any]:
    """Seconds to make the viewer's state and everything displaying it sends; the state."""
    started = time.perf_counter()
    state: Any = trace.view().state
    json.dumps(state.snapshot())
    state.html()
    state.text()
    return time.perf_counter() - started, state


def timed(work: Any) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def measure(name: str, path: Path, runs: int) -> dict[str, Any]:
    loads, opens, pages, timelines = [], [], [], []
    cold = None
    state: Any = None
    for run in range(runs):
        started = time.perf_counter()
        trace = ol.load_trace(path)
        loads.append(time.perf_counter() - started)
        seconds, state = open_viewer(trace)
        if run == 0:
            cold = seconds
        else:
            opens.append(seconds)
        page = {"page": 150, "size": 25, "sort": "duration_s", "desc": True, "filter": "test"}
        pages.append(timed(lambda state=state, page=page: state.request(page)))
        key = state.listing["session_id"].iloc[len(state.listing) // 2]
        timelines.append(timed(lambda state=state, key=key: state.request({"open": key})))
    transcripts = timed(lambda: ol.load_trace(path).transcripts)
    return {
        "trace": name,
        "rows": len(trace),
        "episodes": len(state.listing),
        "load_s": statistics.median(loads),
        "open_cold_s": cold,
        "open_s": statistics.median(opens) if opens else cold,
        "page_s": statistics.median(pages),
        "timeline_s": statistics.median(timelines),
        "transcripts_s": transcripts,
        "snapshot": state.snapshot(),
    }


def draw_first_page(snapshot: dict[str, Any]) -> float:
    """Milliseconds the real front end takes to draw the first page in headless Chromium."""
    from playwright.sync_api import sync_playwright

    from ors_lab.html import stylesheet
    from ors_lab.viewer.page import esm

    harness = """async (data) => {
      const widget = await import(URL.createObjectURL(new Blob([window.ESM], { type: "text/javascript" })));
      const model = { get: (k) => (k === "data" ? data : "trace"), on: () => {}, off: () => {}, send: () => {} };
      const started = performance.now();
      widget.default.render({ model, el: document.getElementById("out") });
      await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
      return performance.now() - started;
    }"""
    with tempfile.TemporaryDirectory() as home, sync_playwright() as playwright:
        env = {"XDG_CONFIG_HOME": f"{home}/config", "XDG_CACHE_HOME": f"{home}/cache", "HOME": home}
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", env=env)
        try:
            page = browser.new_page()
            page.set_content(f"<!doctype html><meta charset=utf-8><style>{stylesheet()}</style><div id=out></div>")
            page.evaluate("(source) => { window.ESM = source; }", esm())
            ms: float = page.evaluate(harness, snapshot)
            return ms
        finally:
            browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in (("demo x 250", demo_copies), ("synthetic", synthetic)):
            path = make(Path(tmp) / f"{name.split()[0]}.parquet")
            result = measure(name, path, args.runs)
            result["draw_ms"] = None if args.no_browser else draw_first_page(result["snapshot"])
            results.append(result)
            print(f"{name}: {json.dumps({k: v for k, v in result.items() if k != 'snapshot'})}", flush=True)
    print("\n| trace | rows | load_trace | open the viewer (cold / median) | first page drawn | a page | "
          "a timeline | transcripts |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    met = True
    for r in results:
        draw = "-" if r["draw_ms"] is None else f"{r['draw_ms']:.0f} ms"
        print(f"| {r['trace']} | {r['rows']:,} | {r['load_s']:.2f} s | {r['open_cold_s']:.2f} / {r['open_s']:.2f} s "
              f"| {draw} | {r['page_s'] * 1000:.0f} ms | {r['timeline_s'] * 1000:.0f} ms "
              f"| {r['transcripts_s']:.2f} s |")  # fmt: skip
        total = max(r["open_cold_s"], r["open_s"]) + (r["draw_ms"] or 0) / 1000
        met = met and total < TARGET_S
    print(f"\nopening a 10,000-episode trace < {TARGET_S} s: {'met' if met else 'MISSED'}")
    return 0 if met or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
