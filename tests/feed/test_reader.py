"""Reading a live feed from another process: a URL that is no feed, and a stream that breaks and is read again."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

import ors_lab as ol
from ors_lab.agents.policy import Observation, ToolCall
from ors_lab.demo.launch import ServerProcess
from ors_lab.feed import FeedReader, FeedState, feed_url
from tests.evaluation.policies import lab_policy
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
    with pytest.raises(ol.MalformedResponseError, match=r"/list_environments is not a live feed: it answered 200 "
                                                        "application/json, where a feed answers 200 text/event-stream"):
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
        # the feed stays up until the reader has read its end: a reader between two connections when the
        # feed closes cannot reach it again (docs/feed.md: a feed serves while its run does)
        assert reader.wait(10) and reader.status == "ended"
    assert reader.connections >= 3 and state.resets == 0
    assert state.run is not None
    snap: dict[str, Any] = state.run.snapshot()
    assert {name: snap[name] for name in ("done", "mean", "stderr", "pass", "errors", "tokens")} == figures(result)
