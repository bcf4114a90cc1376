"""The live feed's cost to the run: nobody reading, a stalled reader, and no feed at all.

    python bench/feed.py               # 20 rounds of the three modes, about 2 minutes
    python bench/feed.py --rounds 4    # a smoke test
    python bench/feed.py --check       # exit 1 if the target is missed

One process evaluates the demo agent on the demo's ``guessing`` environment (the ors-sdk server on
127.0.0.1, a process of its own), 20 episodes a round (10 tasks x 2 rollouts, concurrency 8), in
three modes, their order turned each round:

- ``off``: no feed;
- ``alone``: ``feed=`` a ``Feed`` nobody reads;
- ``stalled``: ``feed=`` a ``Feed`` with one reader that connected and never reads. Before the rounds,
  a burst of 10 MB of events fills its connection's buffers (twice the most the kernel's TCP send
  buffer grows to, ``tcp_wmem``), so its server waits on it from the first round on; after the
  rounds, it reads, and must get a ``reset``: it was dropped, not waited for.

Two agents: ``pace 0`` (the demo agent at full speed: the run is as fast as the server and our CPU
allow) and ``pace 1 ms`` (1 ms between its words, the pace the test uses). Per round and mode:
episodes/s of the run (``EvalResult.elapsed_s``) and the CPU of our process per episode (every
thread: the run's, the feed's drain thread, its HTTP server's). Garbage collection is off during a
round. Reported: medians over the rounds, and the medians of the per-round ratios.

Target: a stalled reader costs the run nothing, ``stalled`` ÷ ``alone`` episodes/s >= 0.95 (the
median of the per-round ratios), for both agents.
"""

from __future__ import annotations

import argparse
import gc
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import ors_lab as ol  # noqa: E402
from ors_lab.demo.agent import DemoAgent  # noqa: E402
from ors_lab.demo.launch import serve  # noqa: E402
from ors_lab.events import EventStream, TextDeltaEvent  # noqa: E402

TARGET = 0.95
MODES = ("off", "alone", "stalled")
PACES = (0.0, 0.001)


def stall(feed: ol.Feed) -> socket.socket:
    """A reader of ``feed`` that never reads, its connection's buffers full."""
    reader = socket.socket()
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    reader.connect(("127.0.0.1", feed.port))
    reader.sendall(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    while not feed.readers:
        time.sleep(0.01)
    most = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    burst = EventStream()
    feed.begin(burst, environment="filler", split="-", keys=[])
    for n in range(2 * most // 100_000 + 10):
        burst.publish(TextDeltaEvent(session_id=f"s{n}", id="t", delta="x" * 100_000))
    feed.end()
    time.sleep(0.5)
    return reader


def reset_after(reader: socket.socket) -> int:
    """Read the stalled reader's stream until its ``reset``; the bytes it had been holding."""
    reader.settimeout(30)
    received = b""
    while b"\nevent: reset\n" not in received:
        chunk = reader.recv(1 << 20)
        if not chunk:
            raise SystemExit("the stalled reader's stream ended before a reset")
        received += chunk
    return len(received)


def one(env: Any, pace: float, feed: ol.Feed | None) -> tuple[float, float]:
    """One round: episodes/s and our CPU ms per episode."""
    gc.collect()
    gc.disable()
    try:
        cpu = time.process_time()
        result = ol.evaluate(env, DemoAgent(pace=pace), split="test", rollouts=2, feed=feed, progress=False)
        cpu = time.process_time() - cpu
    finally:
        gc.enable()
    episodes = len(result.episodes)
    assert episodes == 20
    assert result.elapsed_s is not None
    return episodes / result.elapsed_s, 1000 * cpu / episodes


def measure(env: Any, pace: float, rounds: int) -> dict[str, Any]:
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpus: dict[str, list[float]] = {mode: [] for mode in MODES}
    with ol.Feed(0) as alone, ol.Feed(0, buffer=500) as stalled:
        reader = stall(stalled)
        feeds = {"off": None, "alone": alone, "stalled": stalled}
        one(env, pace, None)  # warm up
        for n in range(rounds):
            order = MODES[n % 3 :] + MODES[: n % 3]
            for mode in order if n % 2 else tuple(reversed(order)):
                rate, cpu = one(env, pace, feeds[mode])
                rates[mode].append(rate)
                cpus[mode].append(cpu)
            print(f"  pace {pace * 1000:g} ms, round {n + 1}: "
                  + ", ".join(f"{m} {rates[m][-1]:.1f}/s {cpus[m][-1]:.2f} ms" for m in MODES), flush=True)  # fmt: skip
        held = reset_after(reader)
        reader.close()

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(rates[a], rates[b], strict=True))

    return {"pace": pace, "rate": {m: statistics.median(rates[m]) for m in MODES},
            "cpu": {m: statistics.median(cpus[m]) for m in MODES}, "stalled/alone": ratio("stalled", "alone"),
            "alone/off": ratio("alone", "off"), "spread": (min(rates["stalled"]), max(rates["stalled"])),
            "held": held}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds of the three modes per agent (default 20)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is missed")
    args = parser.parse_args()
    results = []
    with serve() as server, ol.Client(server.url) as client:
        env = client.environment("guessing")
        for pace in PACES:
            results.append(measure(env, pace, args.rounds))
    print("\n| agent | episodes/s off / alone / stalled | CPU ms/episode off / alone / stalled "
          "| stalled ÷ alone | alone ÷ off |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for r in results:
        rate, cpu = r["rate"], r["cpu"]
        print(f"| pace {r['pace'] * 1000:g} ms | {rate['off']:.1f} / {rate['alone']:.1f} / {rate['stalled']:.1f} "
              f"| {cpu['off']:.2f} / {cpu['alone']:.2f} / {cpu['stalled']:.2f} | {r['stalled/alone']:.3f} "
              f"| {r['alone/off']:.3f} |")  # fmt: skip
    missed = False
    for r in results:
        ok = r["stalled/alone"] >= TARGET
        missed |= not ok
        print(f"pace {r['pace'] * 1000:g} ms: stalled ÷ alone {r['stalled/alone']:.3f} (target >= {TARGET}): "
              f"{'met' if ok else 'MISSED'}; the stalled reader held {r['held']:,} bytes, then got its reset")
    return 1 if missed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
