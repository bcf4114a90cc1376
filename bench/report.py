"""The HTML report's size and opening time, on a 1,000- and a 10,000-episode run.

    python bench/report.py             # both runs, 3 opens each in headless Chromium
    python bench/report.py --check     # exit 1 if a target is missed

The traces: ``recordings/demo.parquet`` (the demo agent on the demo environments, thinking aloud
word by word: 40 episodes of about 121 rows) copied 25 and 250 times, each copy with session ids,
tasks and times of its own (task indices shifted by 10 a copy, in the rows and in the episodes'
records; times after the copy before): 1,000 and 10,000 episodes, 121,000 and 1.2 million rows,
as if the demo agent had run 2 rollouts of 500 or 5,000 tasks one copy after another.

For each: ``trace.to_html(path)`` (timed, reported: the trace is loaded before), the file's size,
and opening it from ``file://`` in Debian's Chromium (Playwright, every request but the file
aborted): from the start of navigation to the page's ``ors-lab-ready`` mark (its data unpacked,
every view drawn), the median of 3 fresh pages; then a click on an episode of the list until its
timeline is on screen (reported; the first click unpacks a chunk of timelines).

Targets: 1,000 episodes in < 10 MB, opening in < 2 s; 10,000 episodes opening in < 2 s (it holds
the timelines of 2,000 of them, the default, and says so).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import ors_lab as ol  # noqa: E402

SIZE_TARGET_MB = 10.0
OPEN_TARGET_S = 2.0
OPENS = 3
RUNS = (1_000, 10_000)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]


DEMO = REPO_ROOT / "recordings" / "demo.parquet"
GROUP_ROWS = 131_072  # rows written at a time: memory stays bounded however many copies are made


def demo_run(episodes: int, path: Path) -> Path:
    """``recordings/demo.parquet`` copied until it holds ``episodes`` episodes, each copy its own tasks and times."""
    per_copy = pc.sum(pc.equal(pq.read_table(DEMO, columns=["kind"])["kind"], "episode")).as_py()
    return copy_trace(DEMO, path, episodes // per_copy)


def copy_trace(source: Path, path: Path, copies: int, *, ors_only: bool = False, new_runs: bool = False) -> Path:
    """``source`` copied ``copies`` times into ``path``, written a few copies at a time (bounded memory).

    Copy ``n`` has session ids suffixed ``-n``, task indices shifted by 10n (in the rows, in the
    episodes' records and in the ``/create`` requests), seq, times and exchange numbers after those
    of the copy before, and, with ``new_runs``, run ids suffixed ``-n`` (a trace appended to n
    times). ``ors_only`` keeps only the ORS exchanges (what a replay server serves).
    """
    table = pq.read_table(source)
    if ors_only:
        table = table.filter(pc.and_(pc.is_valid(table["exchange"]), pc.not_equal(table["layer"], "agent")))
    rows, span = table.num_rows, pc.max(table["t_ns"]).as_py() + 1
    exchanges = (pc.max(table["exchange"]).as_py() or 0) + 1
    kinds, urls = table["kind"].to_pylist(), table["url"].to_pylist()
    data, bodies, sessions = table["data"].to_pylist(), table["body"].to_pylist(), table["session_id"].to_pylist()
    with pq.ParquetWriter(path, table.schema) as writer:
        batch: list[pa.Table] = []
        for n in range(copies):
            columns = {
                "session_id": pa.array([None if s is None else f"{s}-{n}" for s in sessions], pa.string()),
                "seq": pc.add(table["seq"], n * rows),
                "t_ns": pc.add(table["t_ns"], n * span),
                "exchange": pc.add(table["exchange"], n * exchanges),
                "task_index": pc.add(table["task_index"], 10 * n),
                "data": pa.array(_records(kinds, data, sessions, n), pa.large_string()),
                "body": pa.array(_bodies(kinds, urls, bodies, sessions, n), pa.large_binary()),
            }
            if new_runs:
                columns["run_id"] = pc.binary_join_element_wise(table["run_id"], pa.scalar(f"-{n}"), "")
            part = table
            for name, column in columns.items():
                index = table.schema.get_field_index(name)
                part = part.set_column(index, table.schema.field(index), column.cast(table.schema.field(index).type))
            batch.append(part)
            if sum(t.num_rows for t in batch) >= GROUP_ROWS or n == copies - 1:
                writer.write_table(pa.concat_tables(batch), row_group_size=GROUP_ROWS)
                batch = []
    return path


def _records(kinds: list[str], data: list[str | None], sessions: list[str | None], n: int) -> list[str | None]:
    """The ``data`` column of copy ``n``: each episode's record names its copy's task and session."""
    out = []
    for kind, text, sid in zip(kinds, data, sessions, strict=True):
        if kind == "episode" and text is not None:  # the record an evaluation resumes from
            record = json.loads(text)
            record.update(task_index=record["task_index"] + 10 * n, session_id=f"{sid}-{n}")
            text = json.dumps(record, separators=(",", ":"))
        out.append(text)
    return out


def _bodies(
    kinds: list[str], urls: list[str | None], bodies: list[bytes | None], sessions: list[str | None], n: int
) -> list[bytes | None]:
    """The ``body`` column of copy ``n``: a ``/create`` names its copy's task, and its answer its copy's session."""
    out = []
    for kind, url, body, sid in zip(kinds, urls, bodies, sessions, strict=True):
        if body and url is not None and url.endswith("/create"):
            if kind == "request":
                request = json.loads(body)
                if isinstance(request.get("index"), int):
                    request["index"] += 10 * n
                body = json.dumps(request, separators=(",", ":")).encode()
            elif kind == "response" and sid is not None:
                body = body.replace(sid.encode(), f"{sid}-{n}".encode())
        out.append(body)
    return out


def open_in_chromium(page_path: Path, scratch: Path) -> dict[str, float]:
    """Seconds from navigation to the ready mark, over OPENS fresh pages; then a click until a timeline is drawn."""
    from playwright.sync_api import sync_playwright

    env = {**os.environ, "XDG_CONFIG_HOME": str(scratch / "config"), "XDG_CACHE_HOME": str(scratch / "cache")}
    opens, click = [], 0.0
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS, env=env)
        try:
            for n in range(OPENS):
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                errors: list[str] = []
                page.on("pageerror", lambda error: errors.append(str(error)))  # noqa: B023
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)  # noqa: B023
                page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                           else route.abort())  # fmt: skip
                page.goto(page_path.as_uri())
                page.wait_for_function("document.documentElement.dataset.orsLab", timeout=60_000)
                assert page.evaluate("document.documentElement.dataset.orsLab") == "ready", errors
                opens.append(page.evaluate("performance.getEntriesByName('ors-lab-ready')[0].startTime") / 1000)
                if n == OPENS - 1:
                    started = time.perf_counter()
                    page.locator("table.ol-tr-list tbody tr").nth(3).click()
                    page.wait_for_selector(".ol-tr-item", timeout=30_000)
                    click = time.perf_counter() - started
                assert not errors, errors
                page.close()
        finally:
            browser.close()
    return {"open_s": statistics.median(opens), "open_max_s": max(opens), "click_s": click}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="ors-lab-bench-report-") as tmp:
        scratch = Path(tmp)
        for episodes in RUNS:
            trace_path = demo_run(episodes, scratch / f"demo-{episodes}.parquet")
            trace = ol.load_trace(trace_path)
            started = time.perf_counter()
            report = trace.to_html(scratch / f"demo-{episodes}.html")
            built = time.perf_counter() - started
            opened = open_in_chromium(report.path, scratch)
            row = {"episodes": episodes, "rows": len(trace), "build_s": built, "mb": report.size / 2**20,
                   "detailed": report.detailed, **opened}  # fmt: skip
            print(json.dumps(row), flush=True)
            results.append(row)
    print()
    print(
        "| episodes | trace rows | report size | timelines held | built in | opens in (median of 3, max) "
        "| a click to a timeline |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['episodes']:,} | {r['rows']:,} | {r['mb']:.1f} MB | {r['detailed']:,} | {r['build_s']:.1f} s | "
              f"{r['open_s']:.2f} s ({r['open_max_s']:.2f}) | {r['click_s'] * 1000:.0f} ms |")  # fmt: skip
    print()
    missed = 0
    for r in results:
        checks = [("open < 2 s", r["open_s"] < OPEN_TARGET_S)]
        if r["episodes"] == 1_000:
            checks.append(("size < 10 MB", r["mb"] < SIZE_TARGET_MB))
        for name, ok in checks:
            print(f"{r['episodes']:,} episodes, {name}: {'met' if ok else 'MISSED'}")
            missed += not ok
    return 1 if missed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
