"""Client benchmark: full ORS episodes per second and client CPU per episode, ours vs the official clients.

    python bench/client.py                 # 3 rounds, c=1 and c=32, about 2.5 minutes
    python bench/client.py --quick         # 1 round, small batches (a smoke test, noisy figures)
    python bench/client.py --check         # exit 1 if a target at c=32 is missed
    python bench/client.py --profile       # our client at c=32 under cProfile, in this process

One ors-sdk reference server (`bench.quiz_env:ENVIRONMENTS`, started with
`ors_lab.demo.launch.serve`) serves every batch of the run. An episode opens a session on one
of the 6 quiz tasks, gets the prompt, calls `blob{n: 200}` twice and `answer` once (with the
right answer), and closes the session; every result is checked (200 characters, reward 0.0, not
finished; then reward 1.0, finished), so a broken client cannot post a good figure.

Each (client, concurrency) batch runs in its own subprocess (this script with `--worker`), so
imports and `time.process_time()` do not mix. The worker runs a warm-up batch (in its second
half it counts the HTTP requests and new TCP connections, by wrapping aiohttp's
`ClientRequest.send` and `TCPConnector._create_connection`, which all three clients go through),
then the measured batch, timed with `perf_counter` and `process_time`; around the measured batch
it reads the server's CPU time and the machine's busy time from /proc, so other processes' load
is visible. Batches are interleaved (every client at c=1, then every client at c=32, in a
rotated order each round), the parent waits (a little) for a quiet machine before each batch, and
the table shows medians over the rounds' clean batches, because the server and the client share
the machine's 2 cores. See bench/README.md for what the figures mean and the figures measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
# Run as `python bench/client.py`, sys.path[0] is bench/ itself; put the repo root there instead,
# so `bench.*` imports and nothing in bench/ shadows a top-level module.
if sys.path and Path(sys.path[0] or ".").resolve() == REPO_ROOT / "bench":
    sys.path[0] = str(REPO_ROOT)
elif str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.quiz_data import SPLIT, TASKS, expected_answer  # noqa: E402  (the workers must not import an SDK)

CLIENTS = ("ours", "ors-sdk", "openreward")
LABELS = {
    "ours": "ors_lab `AsyncClient` (ours)",
    "ors-sdk": "ors-sdk `AsyncORS`",
    "openreward": "openreward `AsyncOpenReward` (variant given)",
}
ENV_NAME = "quiz"
BLOB_CHARS = 200
TARGET_SPEEDUP = 2.0  # ours / best official, episodes/s at c=32 (issue "The hot path")
TARGET_CPU_RATIO = 0.4  # ours / best official, client CPU ms per episode at c=32 (issue "The hot path")
WORKER_TIMEOUT = 300.0
QUIET_CORES = 0.3  # before a batch, wait (within a budget) until other load is below this
QUIET_BUDGET_S = 15.0  # total waiting for quiet per run
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

NEW_CONNECTIONS = "(new TCP connections)"

Episode = Callable[[int], Awaitable[None]]


class BadEpisode(AssertionError):
    """An episode's results were not the expected ones."""


# --------------------------------------------------------------------------------------------
# Checking results (the same checks for every client)


def _check_blob(text: str, reward: float | None, finished: bool) -> None:
    if len(text) != BLOB_CHARS or reward != 0.0 or finished:
        raise BadEpisode(f"blob gave {len(text)} chars, reward {reward!r}, finished {finished!r}")


def _check_answer(reward: float | None, finished: bool) -> None:
    if reward != 1.0 or not finished:
        raise BadEpisode(f"answer gave reward {reward!r}, finished {finished!r}")


def _check_prompt(text: str, index: int) -> None:
    if str(TASKS[index]["question"]) not in text:
        raise BadEpisode(f"prompt {text[:80]!r} is not task {index}'s")


# --------------------------------------------------------------------------------------------
# The three clients: each an async context manager yielding its episode function


@contextlib.asynccontextmanager
async def _ours(url: str, recorder: Any = None, **options: Any) -> AsyncIterator[Episode]:
    """Our client's episode; ``options`` go to ``AsyncClient`` (``connections=`` in ``bench/scale_sessions.py``)."""
    import ors_lab

    async with ors_lab.AsyncClient(url, recorder=recorder, **options) as client:
        env = client.environment(ENV_NAME)

        async def episode(i: int) -> None:
            index = i % len(TASKS)
            # view=False: the client is measured, not a live view of each session (a notebook feature)
            async with env.session(split=SPLIT, index=index, view=False) as session:
                prompt = await session.prompt()
                _check_prompt(prompt[0].text, index)  # type: ignore[union-attr]
                for _ in range(2):
                    r = await session.call("blob", {"n": BLOB_CHARS})
                    if not r.ok:
                        raise BadEpisode(f"blob failed: {r.error}")
                    _check_blob(r.blocks[0].text, r.reward, r.finished)  # type: ignore[union-attr]
                r = await session.call("answer", {"answer": expected_answer(index)})
                if not r.ok:
                    raise BadEpisode(f"answer failed: {r.error}")
                _check_answer(r.reward, r.finished)

        yield episode


async def _official_episode(session: Any, index: int) -> None:
    """The episode, through an official client's session (both SDKs name things alike)."""
    prompt = await session.get_prompt()
    _check_prompt(prompt[0].text, index)
    for _ in range(2):
        out = await session.call_tool("blob", {"n": BLOB_CHARS})
        _check_blob(out.blocks[0].text, out.reward, out.finished)
    out = await session.call_tool("answer", {"answer": expected_answer(index)})
    _check_answer(out.reward, out.finished)


@contextlib.asynccontextmanager
async def _ors_sdk(url: str) -> AsyncIterator[Episode]:
    from ors.client import AsyncORS

    client = AsyncORS(base_url=url)
    env = client.environment(ENV_NAME)
    # session(split=, index=) does not send env_name (it would use the server's default env), so
    # sessions are opened from Task objects fetched here, outside the timed batches.
    tasks = [await env.get_task(SPLIT, i) for i in range(len(TASKS))]

    async def episode(i: int) -> None:
        async with env.session(task=tasks[i % len(TASKS)]) as session:
            await _official_episode(session, i % len(TASKS))

    try:
        yield episode
    finally:  # AsyncORS has no close(); close its aiohttp sessions and connector by hand
        api = client.environments
        for session in api._clients.values():
            await session.close()
        api._clients.clear()
        if api._connector is not None:
            await api._connector.close()
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def _openreward(url: str) -> AsyncIterator[Episode]:
    os.environ.setdefault("OPENREWARD_DISABLE_UPDATE_CHECK", "1")
    from openreward import AsyncOpenReward

    client = AsyncOpenReward()
    # base_url= points it at our server instead of sessions.openreward.ai; variant= makes it use
    # /quiz/... paths (without it every request goes through the server's 308 redirect).
    env = client.environments.get(ENV_NAME, variant=ENV_NAME, base_url=url)

    async def episode(i: int) -> None:
        async with env.session(split=SPLIT, index=i % len(TASKS)) as session:
            await _official_episode(session, i % len(TASKS))

    try:
        yield episode
    finally:
        await client.environments.aclose()


FACTORIES = {"ours": _ours, "ors-sdk": _ors_sdk, "openreward": _openreward}


# --------------------------------------------------------------------------------------------
# Running a batch


@dataclass
class Batch:
    """What one batch of episodes did."""

    episodes: int
    wall_s: float
    cpu_s: float
    bad: list[str] = field(default_factory=list)


async def run_batch(
    episode: Episode,
    episodes: int,
    concurrency: int,
    first: int = 0,
    drain: Callable[[], Awaitable[None]] | None = None,
) -> Batch:
    """Run `episodes` episodes, `concurrency` at a time; time the batch (wall and CPU).

    `drain`, if given, is awaited after the last episode, inside the timed window (the recording
    benchmark waits there until the recorder has written every row of the batch).
    """
    numbers = iter(range(first, first + episodes))
    bad: list[str] = []

    async def lane() -> None:
        for i in numbers:
            try:
                await episode(i)
            except Exception as exc:  # a failed episode is counted, and the run goes on
                bad.append(f"episode {i}: {type(exc).__name__}: {exc}")

    gc.collect()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    if drain is not None:
        await drain()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return Batch(episodes, wall, cpu, bad)


@contextlib.contextmanager
def count_requests() -> Iterator[Counter[str]]:
    """Count every HTTP request sent (redirect hops included), by method and path: through aiohttp (the official
    clients) and through ors_lab's own wire (``WireTransport``).

    The key NEW_CONNECTIONS counts the TCP connections opened (keep-alive reuse makes it small).
    """
    from aiohttp import TCPConnector, client_reqrep

    try:
        from ors_lab.client.wire import WireTransport
    except ImportError:  # a checkout of ors_lab from before its own wire (bench/hot_path.py --baseline): aiohttp's
        WireTransport = type("NoWire", (), {"handle_async_request": None, "_connect": None})

    counts: Counter[str] = Counter()
    original_send, original_connect = client_reqrep.ClientRequest.send, TCPConnector._create_connection
    original_handle, original_wire_connect = WireTransport.handle_async_request, WireTransport._connect

    async def send(self: Any, conn: Any) -> Any:
        counts[f"{self.method} {self.url.path}"] += 1
        return await original_send(self, conn)

    async def create_connection(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[NEW_CONNECTIONS] += 1
        return await original_connect(self, *args, **kwargs)

    async def handle(self: Any, request: Any) -> Any:
        counts[f"{request.method} {request.url.path}"] += 1
        return await original_handle(self, request)

    async def wire_connect(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[NEW_CONNECTIONS] += 1
        return await original_wire_connect(self, *args, **kwargs)

    client_reqrep.ClientRequest.send = send  # type: ignore[method-assign]
    TCPConnector._create_connection = create_connection  # type: ignore[method-assign]
    WireTransport.handle_async_request = handle  # type: ignore[method-assign]
    WireTransport._connect = wire_connect  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        client_reqrep.ClientRequest.send = original_send  # type: ignore[method-assign]
        TCPConnector._create_connection = original_connect  # type: ignore[method-assign]
        WireTransport.handle_async_request = original_handle  # type: ignore[method-assign]
        WireTransport._connect = original_wire_connect  # type: ignore[method-assign]


def machine_busy_s() -> float:
    """CPU seconds all cores have spent busy since boot (from /proc/stat; not idle, not iowait)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    return (sum(fields) - fields[3] - fields[4]) / CLOCK_TICKS


def process_cpu_s(pid: int | None) -> float | None:
    """User + system CPU seconds of process `pid` so far (from /proc), or None."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14 and 15)


async def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One client, one concurrency: warm up (counting requests in its second half), then measure."""
    first_half = args.warmup // 2
    async with FACTORIES[args.worker](args.url) as episode:
        fill = await run_batch(episode, first_half, args.concurrency)  # fills the connection pool
        with count_requests() as counts:  # steady state: requests and new connections per episode
            warm = await run_batch(episode, args.warmup - first_half, args.concurrency, first=first_half)
        server0, machine0 = process_cpu_s(args.server_pid), machine_busy_s()
        batch = await run_batch(episode, args.episodes, args.concurrency, first=args.warmup)
        server1, machine1 = process_cpu_s(args.server_pid), machine_busy_s()
    requests = sum(n for kind, n in counts.items() if kind != NEW_CONNECTIONS)
    server_cpu = None if server0 is None or server1 is None else server1 - server0
    # Busy CPU on the machine that was neither this client nor the server: other processes' load.
    outside = (machine1 - machine0) - batch.cpu_s - (server_cpu or 0.0)
    return {
        "client": args.worker,
        "concurrency": args.concurrency,
        "episodes": batch.episodes,
        "eps": batch.episodes / batch.wall_s,
        "cpu_ms": 1000 * batch.cpu_s / batch.episodes,
        "server_cpu_ms": None if server_cpu is None else 1000 * server_cpu / batch.episodes,
        "outside_cores": max(0.0, outside) / batch.wall_s,
        "requests": requests / warm.episodes if warm.episodes else None,
        "request_kinds": {k: v / warm.episodes for k, v in sorted(counts.items())} if warm.episodes else {},
        "bad": fill.bad + warm.bad + batch.bad,
    }


# --------------------------------------------------------------------------------------------
# The parent: one server, interleaved worker subprocesses, medians, the table


def worker_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker subprocess: the repo importable, loopback unproxied, no update checks."""
    child_env = dict(os.environ, OPENREWARD_DISABLE_UPDATE_CHECK="1", NO_PROXY="127.0.0.1,localhost", **(env or {}))
    child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), child_env.get("PYTHONPATH")]))
    return child_env


def run_worker(script: str, *worker_args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``script`` as a worker in a fresh interpreter; return the JSON of its last stdout line."""
    done = subprocess.run(
        [sys.executable, script, *worker_args],
        cwd=REPO_ROOT, env=worker_env(env), capture_output=True, text=True, timeout=WORKER_TIMEOUT, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"worker {worker_args[:2]} exited {done.returncode}:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def spawn_worker(
    client: str, url: str, server_pid: int, concurrency: int, episodes: int, warmup: int
) -> dict[str, Any]:
    """Run one batch in a fresh interpreter and return its JSON result."""
    return run_worker(
        str(Path(__file__).resolve()), "--worker", client, "--url", url, "--server-pid", str(server_pid),
        "--concurrency", str(concurrency), "--episodes", str(episodes), "--warmup", str(warmup),
    )  # fmt: skip


def load_now(sample_s: float = 0.4) -> float:
    """Busy cores on the machine over the next `sample_s` seconds (the server idles meanwhile)."""
    before = machine_busy_s()
    time.sleep(sample_s)
    return (machine_busy_s() - before) / sample_s


class QuietWaiter:
    """Before each batch, wait until the machine is quiet, up to a total budget per run."""

    def __init__(self, budget_s: float) -> None:
        self.deadline = time.monotonic() + budget_s if budget_s > 0 else 0.0
        self.budget_s = budget_s

    def wait(self) -> float:
        """Sample the load until it is below QUIET_CORES or the budget is spent; the last sample."""
        if self.budget_s <= 0:
            return 0.0
        load = load_now()
        while load > QUIET_CORES and time.monotonic() < self.deadline:
            load = load_now()
        return load


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def fmt(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def summarize(results: list[dict[str, Any]], levels: list[int]) -> dict[tuple[str, int], dict[str, Any]]:
    """Median of each figure over the rounds, per (client, concurrency)."""
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    for client in CLIENTS:
        for c in levels:
            # A batch with a bad episode does not count at all (the run still exits 1 for it).
            every = [r for r in results if r["client"] == client and r["concurrency"] == c and not r["bad"]]
            clean = [r for r in every if r["outside_cores"] <= QUIET_CORES]
            runs = clean or every
            if not runs:
                continue
            cells[client, c] = {
                key: median([r[key] for r in runs]) for key in ("eps", "cpu_ms", "server_cpu_ms", "requests")
            } | {
                "eps_range": (min(r["eps"] for r in runs), max(r["eps"] for r in runs)),
                "cpu_range": (min(r["cpu_ms"] for r in runs), max(r["cpu_ms"] for r in runs)),
                "kinds": runs[-1]["request_kinds"],
                "rounds": len(runs),
                "noisy": not clean,
            }
    return cells


def table(cells: dict[tuple[str, int], dict[str, Any]], levels: list[int]) -> str:
    head = ["client on the ors-sdk server"]
    for c in levels:
        head += [f"c={c} episodes/s", f"c={c} client CPU ms/episode", f"c={c} server CPU ms/episode"]
    head += ["HTTP requests/episode", f"new TCP connections/episode (c={levels[-1]})"]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for client in CLIENTS:
        row = [LABELS[client]]
        requests = None
        for c in levels:
            cell = cells.get((client, c))
            if cell is None:
                row += ["–", "–", "–"]
                continue
            mark = "*" if cell["noisy"] else ""
            row += [fmt(cell["eps"]) + mark, fmt(cell["cpu_ms"]) + mark, fmt(cell["server_cpu_ms"]) + mark]
            requests = requests if requests is not None else cell["requests"]
        last = cells.get((client, levels[-1]))
        connections = None if last is None else last["kinds"].get(NEW_CONNECTIONS, 0.0)
        row += [fmt(requests, 2), fmt(connections, 2)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def ratios(cells: dict[tuple[str, int], dict[str, Any]], c: int) -> tuple[float, float, str, str] | None:
    """(speed ratio, CPU ratio, best official by speed, best official by CPU) at concurrency c."""
    ours = cells.get(("ours", c))
    official = [(name, cells[name, c]) for name in CLIENTS[1:] if (name, c) in cells]
    if ours is None or not official:
        return None
    fastest = max(official, key=lambda item: item[1]["eps"])
    leanest = min(official, key=lambda item: item[1]["cpu_ms"])
    return ours["eps"] / fastest[1]["eps"], ours["cpu_ms"] / leanest[1]["cpu_ms"], fastest[0], leanest[0]


def benchmark(args: argparse.Namespace) -> int:
    from ors_lab.demo.launch import serve

    if args.quick:
        rounds, sizes = 1, {1: (10, 40), 32: (96, 160)}
    else:
        rounds = args.rounds
        big = args.episodes
        sizes = {1: (20, max(20, big // 4)), 32: (96, big)}
    levels = sorted(sizes)
    results: list[dict[str, Any]] = []
    quiet = QuietWaiter(0.0 if args.quick else QUIET_BUDGET_S)
    started = time.perf_counter()
    # Every batch gets a freshly started server: the ors-sdk server keeps each /call result for 60 s
    # with a sleeping task, so its CPU per request drifts upward with the calls of the last minute,
    # and a client measured after another would pay for the other's calls.
    print(f"ors-sdk server, fresh per batch; {rounds} round(s); episodes (warm-up, measured): {sizes}", flush=True)
    for round_number in range(rounds):
        order = CLIENTS[round_number % 3 :] + CLIENTS[: round_number % 3]
        for c in levels:
            warmup, episodes = sizes[c]
            for client in order:
                quiet.wait()
                with serve("bench.quiz_env:ENVIRONMENTS", sdk="ors-sdk") as server:
                    r = spawn_worker(client, server.url, server.pid, c, episodes, warmup)
                results.append(r)
                print(
                    f"  round {round_number + 1} c={c:<2} {client:<10} {r['eps']:7.1f} episodes/s "
                    f"{r['cpu_ms']:6.2f} client CPU ms/ep  {fmt(r['server_cpu_ms'], 2):>6} server CPU ms/ep  "
                    f"{fmt(r['requests'], 2)} req/ep  other load {r['outside_cores']:.2f} cores"
                    + (f"  BAD: {len(r['bad'])}" if r["bad"] else ""),
                    flush=True,
                )
    elapsed = time.perf_counter() - started
    cells = summarize(results, levels)
    print(
        f"\nMedians over the clean batches (other load <= {QUIET_CORES} cores) of {rounds} round(s); "
        f"* = no clean batch, median of all ({elapsed:.0f} s in all):\n"
    )
    print(table(cells, levels))
    print("\nSpread (min-max over the batches the medians use):")
    for (client, c), cell in cells.items():
        (e0, e1), (p0, p1) = cell["eps_range"], cell["cpu_range"]
        print(
            f"  {client:<10} c={c:<2} {e0:6.1f}-{e1:<6.1f} episodes/s  {p0:5.2f}-{p1:<5.2f} client CPU ms/ep  "
            f"({cell['rounds']} batch(es))"
        )
    print(
        "\nHTTP requests and new TCP connections per episode (counted in the second half of each client's warm-up"
        f" at c={levels[-1]}, after the connection pool has filled):"
    )
    for client in CLIENTS:
        cell = cells.get((client, levels[-1]))
        if cell:
            print(f"  {client:<10} " + ", ".join(f"{k} {v:.3g}" for k, v in cell["kinds"].items()))
    failed = False
    bad = [(r["client"], r["concurrency"], b) for r in results for b in r["bad"]]
    if bad:
        failed = True
        print(f"\n{len(bad)} BAD EPISODES (wrong results or errors); their batches are left out of the table:")
        for client, c, text in bad[:10]:
            print(f"  {client} c={c}: {text}")
    top = levels[-1]
    ratio = ratios(cells, top)
    if ratio is not None:
        speed, cpu, fastest, leanest = ratio
        speed_ok, cpu_ok = speed >= TARGET_SPEEDUP, cpu <= TARGET_CPU_RATIO
        print(
            f"\nc={top}: ours / best official ({fastest}) episodes/s = {speed:.2f} "
            f"(target >= {TARGET_SPEEDUP}: {'met' if speed_ok else 'MISSED'})\n"
            f"c={top}: ours / best official ({leanest}) client CPU per episode = {cpu:.2f} "
            f"(target <= {TARGET_CPU_RATIO}: {'met' if cpu_ok else 'MISSED'})"
        )
        if args.check and not (speed_ok and cpu_ok):
            failed = True
    return 1 if failed or (args.check and ratio is None) else 0


# --------------------------------------------------------------------------------------------
# --profile: our client at c=32 under cProfile, in this process


def profile(args: argparse.Namespace) -> int:
    from ors_lab.demo.launch import serve

    concurrency, episodes = 32, args.episodes

    async def go(url: str) -> tuple[Batch, cProfile.Profile]:
        # The default (wall-clock) timer: a CPU-time timer costs a syscall per event and doubles the
        # overhead, inflating the share of small functions called often. Waiting shows up in epoll.
        profiler = cProfile.Profile()
        async with _ours(url) as episode:
            await run_batch(episode, 64, concurrency)
            profiler.enable()
            batch = await run_batch(episode, episodes, concurrency, first=64)
            profiler.disable()
        return batch, profiler

    with serve("bench.quiz_env:ENVIRONMENTS", sdk="ors-sdk") as server:
        batch, profiler = asyncio.run(go(server.url))
    print(
        f"ours, c={concurrency}, {episodes} episodes under cProfile: {batch.episodes / batch.wall_s:.1f} episodes/s, "
        f"{1000 * batch.cpu_s / batch.episodes:.2f} client CPU ms/episode (profiler overhead included)"
        + (f"; {len(batch.bad)} BAD episodes, first: {batch.bad[0]}" if batch.bad else "")
    )
    print("(ncalls of a coroutine counts each resumption, not each call)")
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats(order).print_stats(25)
        text = _short_paths(out.getvalue())
        print(f"\n=== top 25 by {order} ===")
        print(text[text.find("   ncalls") :].rstrip() if "   ncalls" in text else text)
    print("\n=== own time (tottime) by package, waiting in epoll left out; C functions charged to their callers ===")
    totals = _tottime_by_package(pstats.Stats(profiler))
    idle = totals.pop(IDLE, 0.0)
    everything = sum(totals.values()) or 1.0
    rest = 0.0
    for package, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        if seconds / everything < 0.01:
            rest += seconds
            continue
        print(f"  {package:<28} {seconds:6.2f} s  {100 * seconds / everything:5.1f} %")
    print(f"  {'(the rest, each < 1 %)':<28} {rest:6.2f} s  {100 * rest / everything:5.1f} %")
    print(f"  {'(left out: waiting in epoll)':<28} {idle:6.2f} s")
    return 1 if batch.bad else 0


def _short_paths(text: str) -> str:
    """Profile listings with site-packages, the repo and the stdlib directory left out of paths."""
    import sysconfig

    for prefix in (sysconfig.get_paths()["purelib"], str(REPO_ROOT), sysconfig.get_paths()["stdlib"]):
        text = text.replace(prefix + os.sep, "")
    return text


IDLE = "(waiting in epoll)"


def _tottime_by_package(stats: pstats.Stats) -> dict[str, float]:
    """Own time of every profiled function, summed by the package (or stdlib module) it is in."""
    import sysconfig

    site, stdlib = sysconfig.get_paths()["purelib"] + os.sep, sysconfig.get_paths()["stdlib"] + os.sep
    totals: Counter[str] = Counter()

    def package_of(filename: str) -> str:
        if filename.startswith(site):
            return filename[len(site) :].split(os.sep, 1)[0]
        if filename.startswith(str(REPO_ROOT) + os.sep):
            return os.sep.join(Path(filename).relative_to(REPO_ROOT).parts[:2])
        if filename.startswith(stdlib):
            return "stdlib " + filename[len(stdlib) :].split(os.sep, 1)[0].removesuffix(".py")
        return filename

    for (filename, _line, name), (_cc, _nc, tottime, _ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if name == "<method 'poll' of 'select.epoll' objects>":
            totals[IDLE] += tottime
            continue
        if filename != "~":
            totals[package_of(filename)] += tottime
            continue
        # A C function (socket send, json, isinstance...): charge its time to the packages calling it.
        by_caller = {key: value[2] for key, value in callers.items()}
        known = sum(by_caller.values())
        for (caller_file, _l, _n), share in by_caller.items():
            totals[package_of(caller_file)] += tottime * share / known if known else 0.0
        if not known:
            totals["C functions"] += tottime
    return dict(totals)


# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python bench/client.py")
    parser.add_argument(
        "--episodes", type=int, default=500,
        help="measured episodes per batch at c=32 (c=1 batches run a quarter of it, at least 20); default 500",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the table shows medians (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 round of small batches (smoke test)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a c=32 target is missed")
    parser.add_argument("--profile", action="store_true", help="cProfile our client at c=32 in this process")
    worker_args = parser.add_argument_group("worker (internal: one batch in a subprocess)")
    worker_args.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    worker_args.add_argument("--url", help=argparse.SUPPRESS)
    worker_args.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    worker_args.add_argument("--concurrency", type=int, default=32, help=argparse.SUPPRESS)
    worker_args.add_argument("--warmup", type=int, default=96, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(asyncio.run(worker(args))))
        return 0
    if args.profile:
        return profile(args)
    return benchmark(args)


if __name__ == "__main__":
    sys.exit(main())
