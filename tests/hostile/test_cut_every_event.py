"""A multi-chunk /call cut at every event, on both reference servers: the result is exact, the tool ran once.

The `tally_big` tool counts each run in its server process and returns a result of several 4096-
character chunks (non-ASCII, runs of spaces). A cutting proxy forwards a first `/call` response up
to a chosen point, at each event boundary and inside each event, then drops the connection; resumes
pass untouched. A cut after `task_id` must be resumed into the exact result with the tool run once;
a cut before it must raise `OutcomeUnknownError`, the tool having run at most once. The counts are
read straight from the server, not through the proxy.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from ors_lab import AsyncClient
from ors_lab.client.policy import RetryPolicy
from ors_lab.demo.launch import ServerProcess
from ors_lab.events import SSEEvent
from ors_lab.protocol.errors import OutcomeUnknownError
from tests.cutting_proxy import CuttingProxy
from tests.envs import common

N_CHARS = 9000  # about 9100 characters of result JSON: task_id, chunk, chunk, end
INTO = 25  # bytes into an event: past "event: chunk\r\ndata: ", inside its data (inside the id of task_id)
FAST = RetryPolicy(backoff=0.01, max_backoff=0.05)


async def test_cut_at_every_event_gives_the_exact_result_and_runs_the_tool_once(
    reference_server: ServerProcess, cutting_proxy: Callable[..., CuttingProxy]
) -> None:
    """Cut at and inside every event of a multi-chunk /call: exact result and one run after task_id; else unknown."""
    proxy = cutting_proxy(reference_server.url, cut_after_events=0)
    expected = common.tally_big_text(N_CHARS)
    async with (
        AsyncClient(reference_server.url, retry=FAST) as direct,
        AsyncClient(proxy.url, retry=FAST) as through,
    ):
        counter = direct.environment("lab").session(split="train", index=0)
        caller = through.environment("lab").session(split="train", index=0)
        async with counter, caller:
            events: list[str] = []
            with direct.events.subscribe(lambda e: events.append(e.event) if isinstance(e, SSEEvent) else None):
                whole = await counter.call("tally_big", {"key": uuid.uuid4().hex, "n_chars": N_CHARS})
            assert whole.text == expected
            assert events[0] == "task_id"
            assert events[-1] == "end"
            assert events.count("chunk") >= 2, events  # a multi-chunk result
            total = len(events)
            assert total == 4, events  # task_id, chunk, chunk, end on both servers

            cases = [(n, 0) for n in range(total + 1)] + [(n, INTO) for n in range(total)]
            for n, into in cases:
                proxy.cut_after_events, proxy.cut_into = n, into
                calls, cuts, resumes = proxy.calls, proxy.cuts, proxy.resumes
                key = uuid.uuid4().hex
                where = f"cut after {n} of {total} events, {into} bytes into the next, on {reference_server}"
                if n == 0:  # the task_id event is not whole: the client cannot know whether the tool ran
                    with pytest.raises(OutcomeUnknownError):
                        await caller.call("tally_big", {"key": key, "n_chars": N_CHARS})
                    runs = int((await counter.call("tally_count", {"key": key})).text)
                    assert runs <= 1, where
                    assert (proxy.calls, proxy.resumes) == (calls + 1, resumes), where  # never sent again
                else:
                    result = await caller.call("tally_big", {"key": key, "n_chars": N_CHARS})
                    assert result.text == expected, where
                    assert result.ok, where
                    runs = int((await counter.call("tally_count", {"key": key})).text)
                    assert runs == 1, where
                    resumed = 0 if n == total else 1  # a cut after `end` leaves the result whole
                    assert (proxy.calls, proxy.resumes) == (calls + 1 + resumed, resumes + resumed), where
                assert proxy.cuts == cuts + 1, where
