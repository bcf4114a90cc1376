"""The live feed on the wire: what its readers get, in what order, with which ids, when, and at what cost to the run.

Every test runs a real evaluation (the demo agent on the demo environments, on the ors-sdk server)
with a real ``Feed`` on 127.0.0.1, read over real connections by the project's SSE decoder and by
httpx2's SSE reader (``tests/feed/feeds.py``).
"""

from __future__ import annotations

import fcntl
import gc
import socket
import statistics
import termios
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import ors_lab as ol
from ors_lab.demo.agent import DemoAgent
from ors_lab.demo.launch import ServerProcess
from ors_lab.events import AgentEvent, Event, EventStream, TextDeltaEvent, event_from_wire
from ors_lab.feed import FEED_KINDS
from ors_lab.protocol.sse import ServerSentEvent, SSEComment
from ors_lab.recording.parts import parts_dir
from ors_lab.replay.proxy import serve_proxy
from ors_lab.viewer.feed_state import FeedState
from tests.feed.feeds import (
    comments_of,
    data,
    events_of,
    httpx2_events,
    in_thread,
    number,
    pairs,
    read_feed,
    wait_for_readers,
)
from tests.notebook.test_run_view import figures

pytestmark = pytest.mark.timeout(120)

DELTAS = {"text-delta": ("id", "delta"), "reasoning-delta": ("id", "delta"),
          "tool-input-delta": ("tool_call_id", "input_text_delta")}  # fmt: skip


@pytest.fixture
def guessing(demo_server: ServerProcess) -> Any:
    """The demo's `guessing` environment (the demo agent halves the range, thinking aloud word by word)."""
    with ol.Client(demo_server.url) as client:
        yield client.environment("guessing")


def run(env: Any, feed: ol.Feed | int, **options: Any) -> ol.EvalResult:
    """The demo agent on 3 tasks x 2 rollouts of `env`, with `feed`, no progress shown."""
    return ol.evaluate(env, DemoAgent(), split="test", tasks=3, rollouts=2, feed=feed, progress=False, **options)


def joined(events: list[Event]) -> tuple[dict[str | None, list[str]], dict[tuple[str | None, str], str]]:
    """Per session, the kinds of its events but deltas; per (session, part), the text of its deltas joined."""
    kinds: dict[str | None, list[str]] = defaultdict(list)
    texts: dict[tuple[str | None, str], str] = defaultdict(str)
    for event in events:
        spec = DELTAS.get(event.kind)
        if spec is None:
            kinds[event.session_id].append(event.kind)
        else:
            texts[(event.session_id, getattr(event, spec[0]))] += getattr(event, spec[1])
    return kinds, texts


def test_both_decoders_read_the_run_in_order_with_ids(guessing: Any) -> None:
    """Our decoder and httpx2's read the same events: a snapshot, then every event of the run numbered from 1, the
    agent's and the tool results in the seed's words, deltas joined per part, then `end`."""
    published: list[AgentEvent] = []
    with ol.Feed(0) as feed:
        ours, theirs = in_thread(lambda: read_feed(feed.url)), in_thread(lambda: httpx2_events(feed.url))
        wait_for_readers(feed, 2)
        result = run(guessing, feed, subscribe=published.append)
        items, other = ours.result(30), theirs.result(30)
    events = events_of(items)
    assert list(pairs(items)) == [(e.event, e.id, e.data) for e in other]
    head, ready, plan = events[:3]
    assert (head.event, head.id, data(head)["events"]) == ("snapshot", "", 0)  # nothing had happened yet
    assert (ready.event, ready.id) == ("snapshot-end", f"{feed.epoch}-0")
    assert data(plan) | {"startedAt": 0} == {
        "type": "run", "environment": "guessing", "split": "test", "agent": "DemoAgent(pace=0.0)",
        "label": "eval guessing/test", "total": 6, "keys": [[t, r] for t in range(3) for r in range(2)],
        "startedAt": 0, "resumed": 0}  # fmt: skip
    live = events[2:]
    assert [e.id for e in live] == [f"{feed.epoch}-{n}" for n in range(1, len(live) + 1)]
    assert live[-1].event == "end" and data(live[-1]) | {"elapsedS": 0} == {
        "type": "end", "status": "finished", "elapsedS": 0, "done": 6, "total": 6, "errors": 0}  # fmt: skip
    assert data(live[-2]) | {"elapsedS": 0, "rate": 0} == {
        "type": "progress", "done": 6, "total": 6, "resumed": 0, "running": 0, "errors": 0, "meanReward": 1.0,
        "successRate": 1.0, "elapsedS": 0, "rate": 0}  # fmt: skip
    wired = [event_from_wire(e.event, data(e)) for e in live if e.event in FEED_KINDS]
    assert {e.event for e in live} - set(FEED_KINDS) == {"run", "progress", "end"}
    assert sum(e.kind == "result" for e in wired) == len(result.steps)
    agent = [e for e in wired if e.kind != "result"]
    assert joined(agent) == joined(list(published))  # every event, every character of every part
    assert sum(e.kind in DELTAS for e in agent) < sum(e.kind in DELTAS for e in published) / 5  # joined per part
    assert [e for e in agent if e.kind not in DELTAS] == [e for e in published if e.kind not in DELTAS]
    episodes = {e.session_id: e for e in agent if e.kind == "episode"}
    assert sorted(e.reward for e in episodes.values()) == sorted(result.episodes["reward"])


@pytest.mark.serial  # wall-clock timing
def test_a_quiet_feed_heartbeats_at_its_interval() -> None:
    """With nothing to send, a reader gets a `: heartbeat` comment every `heartbeat` seconds (0.2 here)."""
    times: list[float] = []

    def four(items: list[Any]) -> bool:
        if isinstance(items[-1], SSEComment):
            times.append(time.monotonic())
        return len(times) == 4

    with ol.Feed(0, heartbeat=0.2) as feed:
        started = time.monotonic()
        items = read_feed(feed.url, until=four, timeout=10)
    assert [e.event for e in events_of(items)] == ["snapshot", "snapshot-end"]
    assert comments_of(items) == [" heartbeat"] * 4
    gaps = [later - earlier for earlier, later in zip([started, *times], times, strict=False)]
    assert all(0.15 <= gap <= 0.7 for gap in gaps), gaps


def test_a_feed_heartbeats_every_15_seconds_by_default() -> None:
    """The default heartbeat is the seed's streams' 15 s (that a feed heartbeats at its interval: the test above)."""
    feed = ol.Feed(0)
    assert feed.heartbeat == 15.0
    feed.close()


def test_a_reader_reconnecting_with_last_event_id_misses_nothing(guessing: Any) -> None:
    """A reader that leaves after 40 events and comes back with `Last-Event-ID` gets exactly the rest, no snapshot."""
    with ol.Feed(0) as feed:
        whole = in_thread(lambda: read_feed(feed.url))
        first = in_thread(lambda: read_feed(feed.url, until=lambda items: len(events_of(items)) == 40))
        wait_for_readers(feed, 2)
        run(guessing, feed)
        part, everything = first.result(30), whole.result(30)
        last = events_of(part)[-1].id
        rest = read_feed(feed.url, last_id=last)
    assert number(last) == 38 and events_of(rest)[0].id == f"{feed.epoch}-39"
    assert list(pairs(part)) + list(pairs(rest)) == list(pairs(everything))


def test_past_the_buffer_a_reader_gets_a_reset_with_the_run_so_far(guessing: Any) -> None:
    """An id older than the buffer (or another feed's) gets `reset`: the run so far as events, the dashboard whole."""
    with ol.Feed(0, buffer=20) as feed:
        result = run(guessing, feed)
        ended = lambda items: isinstance(items[-1], ServerSentEvent) and items[-1].event == "snapshot-end"  # noqa: E731
        lost = events_of(read_feed(feed.url, last_id=f"{feed.epoch}-1", until=ended))
        foreign = events_of(read_feed(feed.url, last_id="0123abcd-5", until=ended))
        kept = events_of(read_feed(feed.url, last_id=f"{feed.epoch}-{number(feed.last_id) - 5}"))
    head = data(lost[0])
    assert lost[0].event == "reset" and head["asked"] == f"{feed.epoch}-1" and head["lastEventId"] == feed.last_id
    assert [e.event for e in lost[1:]] == ["run", *["episode"] * 6, "end", "snapshot-end"]
    assert head["events"] == 8 and lost[-1].id == feed.last_id
    assert foreign[0].event == "reset" and data(foreign[0])["asked"] == "0123abcd-5"
    newest = number(feed.last_id)
    assert [e.id for e in kept] == [f"{feed.epoch}-{n}" for n in range(newest - 4, newest + 1)]
    state = FeedState(feed.url)
    for event in lost:
        state.take(event.event, data(event))
    assert state.run is not None and state.resets == 1
    snap = state.run.snapshot()
    assert {name: snap[name] for name in ("done", "mean", "stderr", "pass", "errors", "tokens")} == figures(result)
    assert snap["status"] == "finished" and snap["grid"]["cells"] == "U" * 6


def test_a_stalled_reader_does_not_slow_the_run(guessing: Any) -> None:
    """A reader that connects and never reads: the run's CPU per episode stays within 1/0.8 of a run nobody reads,
    and its episodes/s stay >= 0.5x (medians over 6 pairs of rounds, run in turns, of their ratios), and once it
    reads again it gets a `reset`: it was dropped, not waited for. A feed that waited for its reader would stall the
    run outright; one that spun on it would spend the CPU. The CPU is the figure held close, since the load of other
    processes (4 test workers on 2 cores) moves wall time by 2x between rounds and CPU time hardly at all; the 0.95
    throughput target is ``bench/feed.py``'s.

    The demo agent thinks aloud with 1 ms between words: each episode streams about 100 deltas (the 10 episodes
    at once), and its pace is set by the run's own event loop, so a feed that held up the loop or the GIL would
    show."""
    rates: dict[str, list[float]] = {"alone": [], "stalled": []}
    cpu: dict[str, list[float]] = {"alone": [], "stalled": []}
    agent = DemoAgent(pace=0.001)
    with ol.Feed(0) as alone, ol.Feed(0, buffer=500) as stalled, socket.socket() as reader:
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(("127.0.0.1", stalled.port))
        reader.sendall(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        wait_for_readers(stalled, 1)
        fill(stalled, reader)
        ol.evaluate(guessing, agent, split="test", concurrency=10, progress=False)  # warm up
        for round_ in range(6):
            order = [("alone", alone), ("stalled", stalled)]
            for name, feed in order if round_ % 2 else reversed(order):
                gc.collect()
                gc.disable()  # a collection in one round and not the other is not the feed's doing
                began = time.process_time()
                try:
                    result = ol.evaluate(guessing, agent, split="test", concurrency=10, feed=feed, progress=False)
                finally:
                    gc.enable()
                cpu[name].append(time.process_time() - began)
                assert len(result.episodes) == 10 and result.elapsed_s is not None
                rates[name].append(10 / result.elapsed_s)
        reader.settimeout(10)
        received = b""
        while b"\nevent: reset\n" not in received:  # after what the buffers held: it was stalled all along
            chunk = reader.recv(65536)
            assert chunk, "the stream ended before a reset"
            received += chunk
        assert stalled.readers == 1
    ratio = statistics.median(s / a for s, a in zip(rates["stalled"], rates["alone"], strict=True))
    cpu_ratio = statistics.median(a / s for s, a in zip(cpu["stalled"], cpu["alone"], strict=True))
    assert cpu_ratio >= 0.8 and ratio >= 0.5, (cpu_ratio, ratio, cpu, rates)


def fill(feed: ol.Feed, reader: socket.socket) -> None:
    """Send a stalled reader more than the kernel buffers of its connection can hold (twice the largest send buffer
    TCP may grow to), so that the feed's server holds the rest and waits on it: stalled for sure."""
    most = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])
    burst = EventStream()
    feed.begin(burst, environment="filler", split="-", keys=[])
    for n in range(2 * most // 100_000 + 10):  # a tool that printed megabytes, in one drain
        burst.publish(TextDeltaEvent(session_id=f"s{n}", id="t", delta="x" * 100_000))
    feed.end()
    deadline = time.monotonic() + 10
    while int.from_bytes(fcntl.ioctl(reader, termios.FIONREAD, b"\0\0\0\0"), "little") == 0:
        assert time.monotonic() < deadline, "the stalled reader got nothing"
        time.sleep(0.01)
    time.sleep(0.2)


def test_a_feed_recorded_through_the_proxy_replays_the_same_events(guessing: Any, tmp_path: Path) -> None:
    """`ors-lab proxy` in front of a feed records its stream (heartbeats too); the replay server serves it back,
    and our decoder reads the same events and comments from the replay as the reader behind the proxy did."""
    path = tmp_path / "feed.parquet"
    with ol.Feed(0, heartbeat=0.2) as feed, ol.Recorder(path) as recorder:
        with serve_proxy(feed.url.removesuffix("/events"), recorder) as proxy:
            direct = in_thread(lambda: read_feed(feed.url, until=lambda items: False))
            proxied = in_thread(lambda: read_feed(proxy + "/events", until=lambda items: False))
            wait_for_readers(feed, 2)
            time.sleep(0.5)  # a quiet spell: heartbeats
            run(guessing, feed)
            feed.close()  # the streams end
            seen, through = direct.result(30), proxied.result(30)
    assert events_of(through) == events_of(seen) and events_of(seen)[-1].event == "end"
    assert comments_of(through)[:2] == [" heartbeat"] * 2
    with ol.ReplayServer(path, speed=0) as replay:
        replayed = read_feed(replay.url + "/events", until=lambda items: False)
    assert replayed == through


def test_a_feed_port_in_use_fails_the_run_before_it_makes_anything(guessing: Any, tmp_path: Path) -> None:
    """`feed=PORT` on a taken port: an OSError naming it, before the trace exists; a feed that is no port: TypeError."""
    trace = tmp_path / "run.parquet"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            run(guessing, port, record=trace)
    assert not trace.exists() and not parts_dir(trace).exists()
    with pytest.raises(TypeError, match=r"feed takes a port number \(0: a free one\) or an ors_lab.Feed, not '8080'"):
        run(guessing, "8080")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"feed takes a port number on 127.0.0.1 \(0: a free one\), not 70000"):
        ol.Feed(70000)


def test_a_run_with_feed_port_says_its_url_and_closes_it_at_the_end(
    guessing: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`feed=0`: the URL is said on stderr as the run starts and is the result's `feed_url`; a reader gets the whole
    run and then the end of its stream; the port is let go."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/events"

    def reader() -> list[Any]:
        deadline = time.monotonic() + 10
        while True:
            try:
                return read_feed(url, until=lambda items: False)
            except OSError:  # not listening yet
                assert time.monotonic() < deadline
                time.sleep(0.01)

    reading = in_thread(reader)
    result = ol.evaluate(guessing, DemoAgent(pace=0.001), split="test", tasks=3, rollouts=2, feed=port)
    assert result.feed_url == url
    assert f"eval guessing/test: live feed at {url}\n" in capsys.readouterr().err
    items = reading.result(30)
    assert [e.event for e in events_of(items)][-2:] == ["progress", "end"]
    deadline = time.monotonic() + 5
    while True:
        with socket.socket() as again:
            if again.connect_ex(("127.0.0.1", port)) != 0:
                break
        assert time.monotonic() < deadline, "the feed still listens after its run"
        time.sleep(0.05)
