"""Reading a live feed from another process: a URL that is no feed, a stream that breaks and is read again, one that
breaks just before the run's end, and a feed that is gone."""

from __future__ import annotations

import asyncio
import importlib
import socket
import time
from concurrent.futures import Future
from typing import Any

import httpx2
import pytest

import ors_lab as ol
from ors_lab.agents.policy import Observation, ToolCall
from ors_lab.demo.launch import ServerProcess
from ors_lab.events import EventStream
from ors_lab.feed import FeedReader, feed_url
from ors_lab.feed.server import PATH
from ors_lab.viewer.feed_state import FeedState
from tests.cutting_proxy import CuttingProxy
from tests.evaluation.policies import lab_policy
from tests.feed.feeds import in_thread, read_feed
from tests.notebook.test_run_view import figures

pytestmark = pytest.mark.timeout(120)


def test_a_url_that_is_no_feed_says_so(demo_server: ServerProcess) -> None:
    """Nothing listening, something else than a feed, no scheme: each a typed error that says what to give."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(ol.ConnectionFailedError, match=f"cannot reach the live feed at http://127.0.0.1:{port}/events: "
                                                       "connection refused"):  # fmt: skip
        ol.watch(f"http://127.0.0.1:{port}")
    not_a_feed = "/list_environments is not a live feed: it answered 200 application/json, where a feed answers 200 "
    with pytest.raises(ol.MalformedResponseError, match=not_a_feed + "text/event-stream"):
        ol.watch(demo_server.url + "/list_environments")
    with pytest.raises(ol.InvalidURLError, match=r"did you mean 'http://127\.0\.0\.1:8765'"):
        ol.watch("127.0.0.1:8765")
    assert feed_url("http://127.0.0.1:8765/") == "http://127.0.0.1:8765/events"
    assert feed_url("http://127.0.0.1:8765/events") == "http://127.0.0.1:8765/events"


async def pausing_policy(obs: Observation) -> ToolCall | None:
    """`lab_policy`, after 0.4 s: the feed goes quiet for longer than the reader below waits."""
    await asyncio.sleep(0.4)
    return lab_policy(obs)


def test_a_broken_stream_is_read_again_from_where_it_broke(ors_sdk_server: ServerProcess) -> None:
    """A reader that counts 0.2 s of silence as a broken stream reconnects during every quiet spell, with
    Last-Event-ID: it ends with the whole run, without a reset."""
    state = FeedState("")
    with ol.Client(ors_sdk_server.url) as client, ol.Feed(0, heartbeat=5) as feed:
        reader = FeedReader(feed.url, state.take, idle=0.2).start()
        reader.wait_ready()
        result = ol.evaluate(client.environment("lab"), pausing_policy, split="train", rollouts=2, concurrency=2,
                             feed=feed, progress=False)  # fmt: skip
        # read to its end while the feed is up (a reader between two connections when the feed closes is
        # waited for: test_a_watcher_cut_off_just_before_the_end_comes_back_for_it)
        assert reader.wait(10) and reader.status == "ended"
    assert reader.connections >= 3 and state.resets == 0
    assert state.run is not None
    snap: dict[str, Any] = state.run.snapshot()
    assert {name: snap[name] for name in ("done", "mean", "stderr", "pass", "errors", "tokens")} == figures(result)


class CutBeforeEnd(ol.Feed):
    """A feed that, just before it sends a run's `end`, has its `proxy` cut every reader's connection (and hold their
    next ones), and goes on once it has seen them hang up: they had everything but the run's last events."""

    proxy: CuttingProxy

    def end(self, status: str = "finished") -> None:
        self.proxy.drop(hold=True)
        until(lambda: self.readers == 0, "the feed saw its readers hang up")
        super().end(status)


def until(done: Any, what: str, timeout: float = 10.0) -> None:
    """Wait until `done()` (a condition the test waits for, not a guess of how long it takes)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.01)


def closing_for_sure(feed: ol.Feed, closing: Future[None]) -> None:
    """Return once `feed` is past the point where it serves a new reader as if it were open: it no longer serves at
    all, or it serves closed (a reader's stream ends after the snapshot) while its `close()` has not returned."""
    deadline = time.monotonic() + 10
    while True:
        try:
            read_feed(feed.url, until=lambda items: False, timeout=10)  # ends only once the feed is closed
        except httpx2.TransportError:
            return  # it stopped serving
        if not closing.done():
            return  # closed, and still serving: its close() waits
        assert time.monotonic() < deadline, "the closed feed went on serving"


def test_a_watcher_cut_off_just_before_the_end_comes_back_for_it(
    ors_sdk_server: ServerProcess, cutting_proxy: Any
) -> None:
    """A watcher whose connection breaks just before the run's `end`, and whose next attempt reaches the feed only
    once the feed is closing, ends with the run's final state: the closing feed waits for it to come back."""
    with ol.Client(ors_sdk_server.url) as client, CutBeforeEnd(0) as feed:
        feed.proxy = proxy = cutting_proxy(feed.url.removesuffix(PATH))
        with ol.watch(proxy.url) as watching:
            result = ol.evaluate(client.environment("lab"), lab_policy, split="train", rollouts=2, feed=feed,
                                 progress=False)  # fmt: skip
            until(lambda: proxy.held == 1, "the watcher tried again")  # and waits in the proxy
            closing = in_thread(feed.close)  # as evaluate(feed=PORT) closes its own feed, right after the end
            closing_for_sure(feed, closing)
            proxy.release()  # the watcher's attempt reaches the feed now
            assert watching.wait(10) and watching.reader.status == "ended", watching.state.text()
            closing.result(10)
    assert watching.reader.connections == 2
    assert watching.state.run is not None
    snap: dict[str, Any] = watching.state.run.snapshot()
    assert snap["status"] == "finished"
    assert {name: snap[name] for name in ("done", "mean", "stderr", "pass", "errors", "tokens")} == figures(result)


def test_a_reader_whose_feed_is_gone_says_the_run_s_final_state_is_unknown(cutting_proxy: Any) -> None:
    """A reader cut off from its feed for good before the run's end gives up after its patience and says why: the
    feed went away before the end reached it, so the state it shows is not the run's final one."""
    state = FeedState("")

    def status(name: str, error: str | None) -> None:
        state.status, state.error = name, error

    with ol.Feed(0) as feed:
        proxy = cutting_proxy(feed.url.removesuffix(PATH))
        reader = FeedReader(proxy.url, state.take, on_status=status, patience=1).start()
        reader.wait_ready()
        feed.begin(EventStream(), environment="lab", split="train", keys=[(0, 0)])
        until(lambda: state.run is not None, "the reader read the run's start")
        proxy.close()  # its listener too: nothing answers there any more
        assert reader.wait(10) and reader.status == "lost"
    gone = ("the live feed went away before the run's end reached this reader (connection refused, for 1 s): "
            "its final state is unknown")  # fmt: skip
    assert reader.error == gone
    assert state.text().endswith(f"  [feed lost: {gone}]")


MOVED_ABOVE = [
    ("FeedState", "ors_lab.viewer.feed_state"),
    ("Watch", "ors_lab.notebook.watch"),
    ("WatchPage", "ors_lab.viewer.watch"),
    ("serve_watch", "ors_lab.viewer.watch"),
    ("watch", "ors_lab.notebook.watch"),
]


@pytest.mark.parametrize(("name", "home"), MOVED_ABOVE)
def test_the_names_that_moved_above_the_feed_still_work_with_a_deprecation_warning(name: str, home: str) -> None:
    """The feed's old names of what moved to the viewer and the notebook give the moved object and say where it is."""
    import ors_lab.feed

    with pytest.warns(DeprecationWarning, match=rf"ors_lab\.feed\.{name} moved to {home}\.{name}"):
        old = getattr(ors_lab.feed, name)
    assert old is getattr(importlib.import_module(home), name)
    assert name not in ors_lab.feed.__all__
    with pytest.raises(AttributeError, match="no attribute 'FeedStates'"):
        ors_lab.feed.FeedStates  # noqa: B018
