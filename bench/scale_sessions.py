"""Open sessions at scale: what 10, 2,000 and 10,000 open sessions cost one client under ``ulimit -n 1024``,
and episodes/s with the client's bounded connections against unbounded ones.

    .venv/bin/python bench/scale_sessions.py                # 10 / 2,000 / 10,000 sessions: about 2-3 minutes
    .venv/bin/python bench/scale_sessions.py --unbounded    # the same with connections=None (the client before)
    .venv/bin/python bench/scale_sessions.py --throughput   # episodes/s, connections=512 vs None, c=32 and 512
    .venv/bin/python bench/scale_sessions.py --check        # exit 1 if a size had an error

**Sessions** (``measure() -> list[dict]``, one row per size, for ``bench/scale.py``). Each size gets a
fresh ors-sdk server (``bench/quiz_env.py``) in its own process, with this process's high fd limit,
and a client in a fresh interpreter (``--worker``) that first lowers its own ``RLIMIT_NOFILE`` to
1024. The client opens the sessions all at once (timed), then leaves them to their keep-alive
pings (every ``PING_INTERVAL`` s, the client's default) for a fixed ``WINDOW``, then closes them,
64 at a time as its own ``aclose`` does (each delete has 10 s once sent; 10,000 at once would ask
the server for more than it deletes in 10 s on a loaded machine).
A thread samples, every 20 ms, the client's file descriptors, its sockets to the server
(``/proc/net/tcp``) and the server's sockets (``/proc/PID/fd``, its listening socket left out).
Each row: sessions, open errors (any failed open, ping shortfall aside), pings per session in the
window, time to open, RSS per session (after the window, over before the opens), the event loop
thread's CPU per ping (the window's CPU over its pings; the sampler's CPU is its own thread's, not
counted), the peaks of client fds, client connections and server connections, close errors.
``growth(rows)`` gives each figure's law from the two largest sizes: the exponent k of
figure ~ sessions**k, read as falling (k < -0.3), constant (|k| < 0.3), sublinear, linear (0.7-1.3)
or worse.

**Throughput** (``--throughput``): our client's quiz episode (``bench/client.py``'s) at
concurrency 32 and 512, with ``connections`` at its default and ``None``, in turns within each
round (the order swapped every other round), each batch in a fresh interpreter against a fresh
server. Per round and concurrency, the ratio of episodes/s default ÷ unbounded; reported: the
median ratio and its range over the rounds, and the client CPU per episode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0] or ".").resolve() == REPO_ROOT / "bench":
    sys.path[0] = str(REPO_ROOT)
elif str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.client import run_batch, run_worker  # noqa: E402
from tests.sockets import connections_to, socket_inodes  # noqa: E402  (the tests' socket counting)

SIZES = (10, 2_000, 10_000)
CLIENT_FD_LIMIT = 1024
PING_INTERVAL = 10.0  # the client's default
WINDOW = 15.0  # seconds the open sessions are left to their pings: one ping each (the first comes 10 s after its open)
SAMPLE_EVERY = 0.02
ENV_NAME = "quiz"
LEVELS = (32, 512)
THROUGHPUT_ROUNDS = 5
BATCH = {32: (96, 600), 512: (512, 2048)}  # concurrency -> (warm-up, measured) episodes
FIGURES = (
    "open_errors", "open_s", "rss_kb_per_session", "cpu_ms_per_ping", "client_fds_peak",
    "client_connections_peak", "server_connections_peak",
)  # fmt: skip


# --------------------------------------------------------------------------------------------
# Counting sockets


class Sampler(threading.Thread):
    """Samples the client's fds, its connections to the server and the server's sockets; keeps the peaks,
    and the peak of client connections in each ``phase`` (opening, holding, closing)."""

    def __init__(self, port: int, server_pid: int) -> None:
        super().__init__(daemon=True)
        self.port, self.server_pid = port, server_pid
        self.server_base = len(socket_inodes(server_pid))  # its listening socket (and nothing else yet)
        self.fds = self.connections = self.server = 0
        self.phase = "opening"
        self.by_phase: dict[str, int] = {}
        self.missed = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(SAMPLE_EVERY):
            self.sample()

    def sample(self) -> None:
        try:
            self._sample()
        except OSError:  # out of file descriptors (unbounded connections): no sample this time
            self.missed += 1

    def _sample(self) -> None:
        self.fds = max(self.fds, len(os.listdir("/proc/self/fd")))
        connections, phase = connections_to(self.port), self.phase
        self.connections = max(self.connections, connections)
        self.by_phase[phase] = max(self.by_phase.get(phase, 0), connections)
        self.server = max(self.server, len(socket_inodes(self.server_pid)) - self.server_base)


# --------------------------------------------------------------------------------------------
# The sessions worker (a fresh interpreter under ulimit -n 1024)


def _rss(statm: int) -> int:
    """Resident bytes, from ``/proc/self/statm`` opened beforehand (reading it then needs no free fd)."""
    return int(os.pread(statm, 200, 0).split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def hold_sessions(url: str, sessions: int, connections: int | None, sampler: Sampler) -> dict[str, Any]:
    """Open ``sessions`` at once, leave them to their pings for ``WINDOW`` s, close them; the row's figures."""
    import ors_lab
    from ors_lab.client.aclient import CLOSING_DELETES

    async with ors_lab.AsyncClient(url, connections=connections, ping_interval=PING_INTERVAL) as client:
        await client.health()
        env = client.environment(ENV_NAME)
        opened = [env.session(split="test", index=i % 6, view=False) for i in range(sessions)]
        statm = os.open("/proc/self/statm", os.O_RDONLY)
        rss0 = _rss(statm)
        started = time.perf_counter()
        failed = [r for r in await asyncio.gather(*(s.open() for s in opened), return_exceptions=True) if r is not None]
        open_s = time.perf_counter() - started
        sampler.phase = "holding"
        pings0, cpu0 = sum(s.pings for s in opened), time.thread_time()
        await asyncio.sleep(WINDOW)
        pings, cpu = sum(s.pings for s in opened) - pings0, time.thread_time() - cpu0
        rss1 = _rss(statm)
        os.close(statm)
        sampler.phase = "closing"
        turns = asyncio.Semaphore(CLOSING_DELETES)  # as the client's own close: so many deletes at once

        async def close(session: ors_lab.AsyncSession) -> None:
            async with turns:
                await session.close()

        closed = [r for r in await asyncio.gather(*(close(s) for s in opened), return_exceptions=True) if r is not None]
    return {
        "sessions": sessions,
        "connections": connections,
        "open_errors": len(failed),
        "first_error": repr(failed[0])[:300] if failed else None,
        "first_close_error": repr(closed[0])[:300] if closed else None,
        "open_s": open_s,
        "pings_per_session": pings / sessions,
        "rss_kb_per_session": (rss1 - rss0) / 1024 / sessions,
        "cpu_ms_per_ping": 1000 * cpu / pings if pings else None,
        "close_errors": len(closed),
        "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    }


def sessions_worker(args: argparse.Namespace) -> dict[str, Any]:
    resource.setrlimit(resource.RLIMIT_NOFILE, (CLIENT_FD_LIMIT, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    sampler = Sampler(args.port, args.server_pid)
    sampler.start()
    connections = None if args.connections == "none" else int(args.connections)
    row = asyncio.run(hold_sessions(args.url, args.sessions, connections, sampler))
    sampler.stopped.set()
    sampler.join()
    return row | {
        "client_fds_peak": sampler.fds,
        "client_connections_peak": sampler.connections,
        "server_connections_peak": sampler.server,
        "client_connections_by_phase": sampler.by_phase,
        "samples_missed": sampler.missed,
    }


def measure(sizes: tuple[int, ...] = SIZES, connections: int | str | None = "default") -> list[dict[str, Any]]:
    """One row per size: a fresh server, and a client under ``ulimit -n 1024`` holding that many sessions."""
    from ors_lab.client.wire import DEFAULT_CONNECTIONS
    from ors_lab.demo.launch import serve

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the server (a child) gets the high limit
    limit = DEFAULT_CONNECTIONS if connections == "default" else connections
    rows = []
    try:
        for sessions in sizes:
            with serve("bench.quiz_env:ENVIRONMENTS", sdk="ors-sdk") as server:
                rows.append(run_worker(
                    str(Path(__file__).resolve()), "--worker", "--url", server.url, "--port", str(server.port),
                    "--server-pid", str(server.pid), "--sessions", str(sessions),
                    "--connections", "none" if limit is None else str(limit),
                ) | {"server_fd_limit": hard})  # fmt: skip
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return rows


def growth(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Each figure's growth law, from the two largest sizes: figure ~ sessions**k."""
    small, large = sorted(rows, key=lambda row: row["sessions"])[-2:]
    laws = {}
    for figure in FIGURES:
        a, b = small.get(figure), large.get(figure)
        if a is None or b is None:
            laws[figure] = "?"
        elif a <= 0 or b <= 0:
            laws[figure] = "constant (0)" if a == b == 0 else "?"
        else:
            k = math.log(b / a) / math.log(large["sessions"] / small["sessions"])
            law = "falling" if k < -0.3 else "constant" if k < 0.3 else "sublinear" if k < 0.7 else "linear"
            law = law if k <= 1.3 else "worse"
            laws[figure] = f"{law} (k={k:.2f})"
    return laws


def sessions_table(rows: list[dict[str, Any]]) -> str:
    head = ["sessions", "open errors", "time to open s", "RSS KB/session", "CPU ms/ping", "pings/session",
            "client fds (peak)", "client connections (peak)", "server connections (peak)", "close errors"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for r in rows:
        cpu = "–" if r["cpu_ms_per_ping"] is None else f"{r['cpu_ms_per_ping']:.3f}"
        cells = [f"{r['sessions']:,}", str(r["open_errors"]), f"{r['open_s']:.2f}", f"{r['rss_kb_per_session']:.1f}",
                 cpu, f"{r['pings_per_session']:.2f}", str(r["client_fds_peak"]), str(r["client_connections_peak"]),
                 str(r["server_connections_peak"]), str(r["close_errors"])]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    laws = growth(rows)
    lines.append("| growth law | " + " | ".join([laws["open_errors"], laws["open_s"], laws["rss_kb_per_session"],
                 laws["cpu_ms_per_ping"], "", laws["client_fds_peak"], laws["client_connections_peak"],
                 laws["server_connections_peak"], ""]) + " |")  # fmt: skip
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Throughput: bounded connections against unbounded


def throughput_worker(args: argparse.Namespace) -> dict[str, Any]:
    from bench.client import _ours

    connections = None if args.connections == "none" else int(args.connections)

    async def go() -> dict[str, Any]:
        warmup, episodes = BATCH[args.concurrency]
        async with _ours(args.url, connections=connections) as episode:
            await run_batch(episode, warmup, args.concurrency)
            batch = await run_batch(episode, episodes, args.concurrency, first=warmup)
        return {"eps": batch.episodes / batch.wall_s, "cpu_ms": 1000 * batch.cpu_s / batch.episodes,
                "bad": batch.bad[:3], "bad_count": len(batch.bad)}  # fmt: skip

    return asyncio.run(go())


def throughput(rounds: int = THROUGHPUT_ROUNDS, bound: int | None = None) -> dict[int, dict[str, Any]]:
    """Per concurrency: the per-round ratios ``bound`` (default: the client's default) ÷ unbounded
    (episodes/s), and the batches."""
    from ors_lab.client.wire import DEFAULT_CONNECTIONS
    from ors_lab.demo.launch import serve

    modes = (str(bound or DEFAULT_CONNECTIONS), "none")
    out: dict[int, dict[str, Any]] = {c: {"ratios": [], "batches": []} for c in LEVELS}
    for round_number in range(rounds):
        for c in LEVELS:
            eps = {}
            for mode in modes if round_number % 2 == 0 else modes[::-1]:
                with serve("bench.quiz_env:ENVIRONMENTS", sdk="ors-sdk") as server:
                    r = run_worker(str(Path(__file__).resolve()), "--throughput-worker", "--url", server.url,
                                   "--concurrency", str(c), "--connections", mode)  # fmt: skip
                eps[mode] = r["eps"]
                out[c]["batches"].append(
                    r | {"connections": mode, "bounded": mode != "none", "round": round_number + 1}
                )
                print(f"  round {round_number + 1} c={c:<3} connections={mode:<4} {r['eps']:7.1f} episodes/s "
                      f"{r['cpu_ms']:5.2f} client CPU ms/ep" + (f"  BAD {r['bad_count']}" if r["bad_count"] else ""),
                      flush=True)  # fmt: skip
            out[c]["ratios"].append(eps[modes[0]] / eps["none"])
    return out


def print_throughput(out: dict[int, dict[str, Any]]) -> bool:
    """The ratio table; True when every batch's episodes were all good."""
    bound = next(b["connections"] for cell in out.values() for b in cell["batches"] if b["bounded"])
    print(
        f"\n| concurrency | episodes/s connections={bound} ÷ unbounded: median (min-max over rounds) "
        f"| episodes/s {bound} / unbounded (medians) | client CPU ms/ep {bound} / unbounded (medians) |"
    )
    print("|---:|---|---|---|")
    good = True
    for c, cell in out.items():
        ratios = cell["ratios"]
        eps, cpu = {}, {}
        for bounded in (True, False):
            batches = [b for b in cell["batches"] if b["bounded"] is bounded]
            eps[bounded] = statistics.median(b["eps"] for b in batches)
            cpu[bounded] = statistics.median(b["cpu_ms"] for b in batches)
        good = good and not any(b["bad_count"] for b in cell["batches"])
        ratio = f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} rounds)"
        print(f"| {c} | {ratio} | {eps[True]:.1f} / {eps[False]:.1f} | {cpu[True]:.2f} / {cpu[False]:.2f} |")
    return good


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unbounded", action="store_true", help="hold the sessions with connections=None")
    parser.add_argument("--throughput", action="store_true", help="episodes/s, connections=512 vs None")
    parser.add_argument("--rounds", type=int, default=THROUGHPUT_ROUNDS)
    parser.add_argument("--bound", type=int, help="--throughput: the bound to compare (default: the client's)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a size had an error")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--throughput-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sessions", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--connections", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(sessions_worker(args)))
        return 0
    if args.throughput_worker:
        print(json.dumps(throughput_worker(args)))
        return 0
    if args.throughput:
        print(f"ors-sdk server, fresh per batch; {args.rounds} rounds; episodes (warm-up, measured): {BATCH}")
        return 0 if print_throughput(throughput(args.rounds, args.bound)) or not args.check else 1
    connections: int | str | None = None if args.unbounded else "default"
    print(f"sessions {SIZES}, client under ulimit -n {CLIENT_FD_LIMIT}, connections={connections}, "
          f"pings every {PING_INTERVAL:g} s, window {WINDOW:g} s", flush=True)  # fmt: skip
    rows = measure(connections=connections)
    print(sessions_table(rows))
    for row in rows:
        print(
            f"  {row['sessions']:,} sessions: client connections at most {row['client_connections_by_phase']} "
            f"by phase; {row['samples_missed']} samples missed (no free fd)"
        )
        for kind in ("first_error", "first_close_error"):
            if row[kind]:
                print(f"  {row['sessions']:,} sessions, {kind.replace('_', ' ')}: {row[kind]}")
    errors = sum(row["open_errors"] + row["close_errors"] for row in rows)
    return 1 if args.check and errors else 0


if __name__ == "__main__":
    sys.exit(main())
