"""The client's hostile cases (cases.py, test_client.py) again, with the client talking to the recording proxy
(``serve_proxy``) in front of the hostile server instead of to the server itself.

For every case: the client ends with the right result or a typed ``ORSError``, in bounded time and with a
bounded number of requests upstream; a first /call whose outcome is unknown reaches the upstream once; the
proxy logs no ASGI error, still serves a normal episode afterwards, and leaves a trace that loads and
records the failure. Where the proxy changes the outcome on purpose (a broken upstream answer becomes a
``502``, a drop before a /call's ``task_id`` a ``424`` marked ``x-ors-lab-outcome: unknown``, an endless
stream is ended at ``max_result_bytes``), the test says so and pins the proxy's documented behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pandas as pd
import pytest

import ors_lab as ol
from ors_lab.client import policy
from ors_lab.client.policy import RetryPolicy
from ors_lab.replay.proxy import OUTCOME_UNKNOWN_STATUS, serve_proxy
from tests.hostile.cases import (
    BOUND,
    BROKEN_CONNECTIONS,
    FAST,
    FIRST_CALL_DROPS,
    HUGE_TEXT,
    MALFORMED_CALL_STREAMS,
    NOT_JSON,
    ROUTES,
    TASK_ID,
    USES,
    WRONG_SHAPES,
    CutThenRefuse,
    call_once,
    huge_line_answer,
    starting,
    use_id,
    use_num_tasks,
    use_splits,
    use_tasks,
    use_tools,
)
from tests.hostile.server import (
    Answer,
    Events,
    Forever,
    HostileServer,
    Html,
    Json,
    Normal,
    Reply,
    Silence,
    Trickle,
    ping_frame,
    sse,
    task_id_frame,
)

LIMIT = 8 << 20  # the proxy's max_result_bytes here: room for the 4 MiB result, a bound on endless streams
ONCE = RetryPolicy(attempts=2, backoff=0.01, max_backoff=0.05)  # a 502 from the proxy is retried once


class _Errors(logging.Handler):
    """Keeps what uvicorn logs as errors (an exception in the ASGI app among them)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Proxied:
    """The proxy in front of the hostile server: ``url`` for the client, ``finish()`` to check and end it."""

    url: str
    path: Path
    upstream: HostileServer
    stack: contextlib.ExitStack
    errors: _Errors
    refused: bool = False  # the upstream stops listening in this test: the check expects the proxy's 502
    trace: ol.Trace | None = field(default=None, init=False)

    async def finish(self) -> ol.Trace:
        """The proxy is healthy after the case (a normal episode works through it, or a refused upstream is a
        quick 502), logged no ASGI error, and its trace loads; returns the trace."""
        if self.trace is not None:
            return self.trace
        try:
            if self.refused:
                async with ol.AsyncClient(self.url, retry=RetryPolicy(attempts=1)) as client:
                    with pytest.raises(ol.ServerError) as caught:
                        await asyncio.wait_for(client.environments(), BOUND)
                assert caught.value.status_code == 502
            else:
                self.upstream.reset()
                result = await call_once(self.url)
                assert (result.ok, result.reward) == (True, 1.0)
        finally:
            self.stack.close()
        assert [record.getMessage() for record in self.errors.records] == []
        self.trace = ol.load_trace(self.path)
        return self.trace


@contextlib.contextmanager
def proxied(upstream: HostileServer, path: Path, *, max_result_bytes: int = LIMIT) -> Iterator[Proxied]:
    """A recorder and a proxy in front of ``upstream``; uvicorn's error log collected."""
    stack = contextlib.ExitStack()
    with stack:
        recorder = stack.enter_context(ol.Recorder(path))
        url = stack.enter_context(serve_proxy(upstream.url, recorder, max_result_bytes=max_result_bytes))
        errors = _Errors()  # after the start: uvicorn's config resets its loggers' handlers
        logger = logging.getLogger("uvicorn.error")
        logger.addHandler(errors)
        stack.callback(logger.removeHandler, errors)
        yield Proxied(url, path, upstream, stack.pop_all(), errors)


@pytest.fixture
async def proxy(hostile_server: HostileServer, tmp_path: Path) -> AsyncIterator[Proxied]:
    """The proxy in front of the hostile server; after the test, ``finish()`` checks it (if the test did not)."""
    with proxied(hostile_server, tmp_path / "proxy.parquet") as made:
        yield made
        await made.finish()


def rows(trace: ol.Trace, kind: str) -> pd.DataFrame:
    events = trace.events
    return events[events["kind"] == kind]


def errors_of(trace: ol.Trace, kind: str) -> str:
    """Every ``error`` text of the rows of ``kind``, one per line."""
    return "\n".join(str(text) for text in rows(trace, kind)["error"].dropna())


def unanswered(trace: ol.Trace) -> list[int]:
    """The exchanges with a request row and neither a response nor a disconnect: what the trace lost."""
    events = trace.events
    asked = set(events.loc[events["kind"] == "request", "exchange"].dropna())
    ended = set(events.loc[events["kind"].isin(["response", "disconnect"]), "exchange"].dropna())
    return sorted(asked - ended)


class Noted(Answer):
    """Another answer, noting (``ended``) when it is over: the proxy hung up, or the answer ran out."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.ended = threading.Event()
        self.sent = 0

    def serve(self, exchange: Any) -> bool:
        send = exchange.send

        def counted(data: bytes) -> None:
            send(data)
            self.sent += len(data)

        exchange.send = counted
        try:
            return self.answer.serve(exchange)
        finally:
            self.ended.set()


async def hung_up(answer: Noted, within: float = 2.0) -> bool:
    """True once the answer is over, waiting at most ``within`` seconds."""
    return await asyncio.to_thread(answer.ended.wait, within)


# -- 1. "starting" and Retry-After pass through the proxy untouched ---------------------------------------------------


async def test_starting_with_tiny_retry_after_is_waited_out_by_wall_clock(
    proxy: Proxied, hostile_server: HostileServer
) -> None:
    """The proxy passes a 503 "starting" on with its headers: the client waits it out by the clock, at most every
    MIN_RETRY_WAIT s, then EnvironmentStartingError."""
    hostile_server.on("list_environments", starting("0"))
    started = time.monotonic()
    async with ol.AsyncClient(proxy.url, retry=RetryPolicy(starting_timeout=0.6)) as client:
        with pytest.raises(ol.EnvironmentStartingError):
            async with asyncio.timeout(BOUND):
                await client.environments()
    assert 0.5 <= time.monotonic() - started < 4.0
    assert hostile_server.count() <= 0.6 / policy.MIN_RETRY_WAIT + 2
    events = (await proxy.finish()).events
    asked = events.loc[(events["kind"] == "request") & events["url"].str.endswith("/list_environments"), "exchange"]
    answered = events[(events["kind"] == "response") & events["exchange"].isin(set(asked))]
    assert list(answered["status"]) == [503] * hostile_server.count("list_environments")


async def test_starting_then_ready_is_waited_out(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A "starting" answer through the proxy, then the real one: waited out beyond `attempts`."""
    hostile_server.on("list_environments", starting(), Normal())
    async with ol.AsyncClient(proxy.url, retry=RetryPolicy(attempts=1)) as client:
        assert await client.environments() == ["lab"]
    seen = [s.at for s in hostile_server.requests]
    assert len(seen) == 2
    assert all(b - a >= policy.MIN_RETRY_WAIT * 0.95 for a, b in itertools.pairwise(seen))


async def test_starting_with_a_huge_retry_after_is_capped(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A "starting" Retry-After of an hour, through the proxy, is cut to the time left of starting_timeout."""
    hostile_server.on("list_environments", starting("3600"))
    started = time.monotonic()
    async with ol.AsyncClient(proxy.url, retry=RetryPolicy(starting_timeout=0.8)) as client:
        with pytest.raises(ol.EnvironmentStartingError):
            async with asyncio.timeout(BOUND):
                await client.environments()
    assert 0.7 <= time.monotonic() - started < 3.5
    assert hostile_server.count() == 2


async def test_429_with_retry_after_zero_is_not_a_flood(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A 429 with Retry-After 0 through the proxy waits at least MIN_RETRY_WAIT between tries, `attempts` tries."""
    hostile_server.on("list_environments", Json({"detail": "slow down"}, status=429, headers={"retry-after": "0"}))
    async with ol.AsyncClient(proxy.url, retry=RetryPolicy(attempts=2, backoff=0.0)) as client:
        with pytest.raises(ol.ServerError) as caught:
            async with asyncio.timeout(BOUND):
                await client.environments()
    assert caught.value.status_code == 429
    seen = [s.at for s in hostile_server.requests]
    assert len(seen) == 2
    assert all(b - a >= policy.MIN_RETRY_WAIT * 0.95 for a, b in itertools.pairwise(seen))


async def test_starting_on_a_first_call_is_waited_out(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A first /call answered "starting" through the proxy is sent again once the environment is up."""
    hostile_server.on("call", starting(), Normal())
    result = await call_once(proxy.url)
    assert (result.ok, result.reward) == (True, 1.0)
    assert hostile_server.count("call") == 2
    results = rows(await proxy.finish(), "result")
    assert len(results) == 2  # this call's, and the health check's


# -- 2. a /call is re-sent only when the answer proves nothing ran ---------------------------------------------------


async def test_first_call_answered_5xx_is_outcome_unknown_and_not_resent(
    proxy: Proxied, hostile_server: HostileServer
) -> None:
    """A 5xx to a first /call, passed on by the proxy, raises OutcomeUnknownError; each tool runs once."""
    for runs, status in enumerate([500, 502, 503, 504], start=1):
        hostile_server.on("call", Json({"detail": "upstream hiccup"}, status=status, headers={"retry-after": "0"}))
        with pytest.raises(ol.OutcomeUnknownError) as caught:
            await call_once(proxy.url, retry=FAST)
        assert hostile_server.ran == runs
        assert (caught.value.status_code, caught.value.detail) == (status, "upstream hiccup")
    statuses = rows(await proxy.finish(), "response")["status"]
    assert {500, 502, 503, 504} <= set(statuses)


async def test_first_call_answered_429_is_sent_again(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A 429 to a first /call through the proxy proves nothing ran: it is sent again, and the result comes back."""
    hostile_server.on("call", Json({"detail": "busy"}, status=429, headers={"retry-after": "0"}), Normal())
    result = await call_once(proxy.url, retry=FAST)
    assert result.ok
    assert hostile_server.count("call") == 2


async def test_first_call_refused_with_4xx_is_a_server_error(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A 4xx (not 429) to a first /call through the proxy is a ServerError, sent once."""
    for runs, status in enumerate([400, 404, 422], start=1):
        hostile_server.on("call", Json({"detail": "no"}, status=status))
        with pytest.raises(ol.ServerError) as caught:
            await call_once(proxy.url, retry=FAST)
        assert not isinstance(caught.value, ol.OutcomeUnknownError)
        assert caught.value.status_code == status
        assert hostile_server.ran == runs


async def test_first_call_dropped_before_task_id_is_outcome_unknown(
    proxy: Proxied, hostile_server: HostileServer
) -> None:
    """The proxy's documented answer to a first /call dropped before task_id (with nothing, half a head, or a
    head): a 424 marked outcome unknown, which the client raises as OutcomeUnknownError and sends once; the
    trace records each drop and its call_error."""
    for runs, (name, answer) in enumerate(FIRST_CALL_DROPS.items(), start=1):
        hostile_server.on("call", answer)
        with pytest.raises(ol.OutcomeUnknownError) as caught:
            await call_once(proxy.url, retry=FAST)
        assert caught.value.status_code == OUTCOME_UNKNOWN_STATUS, name
        assert hostile_server.ran == runs, name
    trace = await proxy.finish()
    assert errors_of(trace, "call_error").count("OutcomeUnknownError") == len(FIRST_CALL_DROPS)
    assert len(rows(trace, "disconnect")) == len(FIRST_CALL_DROPS)
    assert unanswered(trace) == []


async def test_first_call_met_with_silence_is_outcome_unknown(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A first /call the upstream never answers costs the client's read timeout (the proxy waits as long as its
    client does), then OutcomeUnknownError; sent once; the proxy hangs up on the upstream when the client has
    gone, and records the call as dropped."""
    silence = Noted(Silence())
    hostile_server.on("call", silence)
    started = time.monotonic()
    with pytest.raises(ol.OutcomeUnknownError) as caught:
        await call_once(proxy.url, retry=FAST, timeout=0.5)
    assert time.monotonic() - started < 3.0
    assert isinstance(caught.value.__cause__, httpx2.TimeoutException)
    assert hostile_server.ran == 1
    assert await hung_up(silence)
    trace = await proxy.finish()
    assert "OutcomeUnknownError" in errors_of(trace, "call_error")
    assert unanswered(trace) == []


async def test_call_dropped_after_task_id_is_resumed_through_5xx(proxy: Proxied, hostile_server: HostileServer) -> None:
    """Dropped after task_id, the break reaches the client through the proxy; it resumes with the task_id through
    a 503; the tool ran once, and the trace has the drop and the result."""
    hostile_server.on("call", Events((task_id_frame(TASK_ID),), after="close"))
    hostile_server.on("resume", Json({}, status=503), Normal())
    result = await call_once(proxy.url, retry=FAST)
    assert (result.ok, result.task_id) == (True, TASK_ID)
    assert (hostile_server.ran, hostile_server.count("resume")) == (1, 2)
    trace = await proxy.finish()
    assert len(rows(trace, "disconnect")) == 1
    assert TASK_ID in set(rows(trace, "result")["task_id"])


async def test_resume_that_cannot_connect_is_a_failed_resume(proxy: Proxied, hostile_server: HostileServer) -> None:
    """Through the proxy a resume that cannot connect upstream is the proxy's 502 (retrying a resume is safe),
    so the client tries resume_attempts times, then ResumeFailedError with the task_id; the tool ran once."""
    proxy.refused = True
    hostile_server.on("call", CutThenRefuse())
    with pytest.raises(ol.ResumeFailedError) as caught:
        await call_once(proxy.url, retry=RetryPolicy(attempts=1, backoff=0.005, max_backoff=0.01, resume_attempts=2))
    assert caught.value.task_id == TASK_ID
    assert isinstance(caught.value.__cause__, ol.ServerError) and caught.value.__cause__.status_code == 502
    assert hostile_server.ran == 1
    assert "ConnectError" in errors_of(await proxy.finish(), "disconnect")


# -- 7. every failure is an ORSError -------------------------------------------------------------------------------


async def test_wrongly_shaped_json_is_a_malformed_response(proxy: Proxied, hostile_server: HostileServer) -> None:
    """Every wrongly shaped 200 JSON answer, passed on by the proxy, is a MalformedResponseError naming the request."""
    async with ol.AsyncClient(proxy.url, retry=FAST, timeout=2.0) as client:
        for use, route, body in WRONG_SHAPES:
            hostile_server.reset()
            hostile_server.on(route, Json(body))
            with pytest.raises(ol.MalformedResponseError) as caught:
                await use(client)
            assert caught.value.request is not None and route in str(caught.value.request.url), use_id(use)
            assert json.dumps(body)[:20] in str(caught.value)


async def test_a_200_that_is_not_json_is_a_malformed_response(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A 200 that is HTML, empty, cut or not UTF-8, to any request, passes the proxy byte for byte and raises
    MalformedResponseError, sent once."""
    async with ol.AsyncClient(proxy.url, retry=FAST, timeout=2.0) as client:
        for body, use in itertools.product(NOT_JSON, USES):
            hostile_server.reset()
            hostile_server.on(ROUTES[use], NOT_JSON[body])
            before = hostile_server.count(ROUTES[use])
            with pytest.raises(ol.MalformedResponseError, match="expected") as caught:
                await use(client)
            assert isinstance(caught.value.__cause__, ValueError), (body, use_id(use))
            assert hostile_server.count(ROUTES[use]) == before + 1, (body, use_id(use))


async def test_broken_connection_is_the_proxys_502(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A dropped, cut, non-HTTP or badly framed upstream answer becomes the proxy's 502 (documented: only a
    /call's drop is special), which the client retries `attempts` times for a request other than /call, then
    ServerError; the proxy logs no error and the trace records each drop."""
    uses = [use_tasks, use_splits, use_tools, use_num_tasks]  # one route per case, all at once
    for use, answer in zip(uses, BROKEN_CONNECTIONS.values(), strict=True):
        hostile_server.on(ROUTES[use], answer)
    async with ol.AsyncClient(proxy.url, retry=ONCE) as client:
        async with asyncio.timeout(BOUND):
            caught = await asyncio.gather(*(use(client) for use in uses), return_exceptions=True)
    for name, error in zip(BROKEN_CONNECTIONS, caught, strict=True):
        assert isinstance(error, ol.ServerError) and error.status_code == 502, (name, error)
        assert "upstream failed" in str(error), name
    assert [hostile_server.count(ROUTES[use]) for use in uses] == [2, 2, 2, 2]
    trace = await proxy.finish()
    assert len(rows(trace, "disconnect")) == 8
    assert unanswered(trace) == []


async def test_silent_server_is_a_connection_failed_error_after_the_read_timeout(
    proxy: Proxied, hostile_server: HostileServer
) -> None:
    """A server that never answers costs the client's read timeout through the proxy, then ConnectionFailedError;
    the proxy then hangs up on the upstream (it holds nothing for a client that has gone)."""
    silence = Noted(Silence())
    hostile_server.on("list_environments", silence)
    started = time.monotonic()
    async with ol.AsyncClient(proxy.url, timeout=0.5) as client:
        with pytest.raises(ol.ConnectionFailedError) as caught:
            await client.environments()
    assert time.monotonic() - started < 3.0
    assert isinstance(caught.value.__cause__, httpx2.TimeoutException)
    assert await hung_up(silence)
    assert unanswered(await proxy.finish()) == []


async def test_connection_refused_upstream_is_the_proxys_502(tmp_path: Path) -> None:
    """Nothing listening upstream: the proxy answers 502 at once (documented: nothing was sent, retrying is
    safe), the client retries `attempts` times, then ServerError(502), not a ConnectionFailedError."""
    with HostileServer() as gone:
        pass
    with proxied(gone, tmp_path / "proxy.parquet") as proxy:
        proxy.refused = True
        async with ol.AsyncClient(proxy.url, retry=RetryPolicy(attempts=2, backoff=0.05)) as client:
            with pytest.raises(ol.ServerError) as caught:
                await asyncio.wait_for(client.environments(), BOUND)
        assert caught.value.status_code == 502
        assert "ConnectError" in errors_of(await proxy.finish(), "disconnect")


async def test_call_refused_upstream_is_outcome_unknown_through_the_proxy(tmp_path: Path) -> None:
    """A /call the proxy could not pass on (upstream refused) is the proxy's 502; the client cannot tell a proxy's
    502 from a gateway's that came after the tool ran, so it raises OutcomeUnknownError and does not re-send:
    safe, though nothing ran. The tool ran zero times."""
    with HostileServer() as server, proxied(server, tmp_path / "proxy.parquet") as proxy:
        proxy.refused = True
        async with ol.AsyncClient(proxy.url, retry=RetryPolicy(attempts=1)) as client:
            session = client.environment("lab").session(split="test", index=0)
            await session.open()
            server.stop()  # closes the proxy's pooled connection too: the /call finds nothing to connect to
            with pytest.raises(ol.OutcomeUnknownError) as caught:
                await asyncio.wait_for(session.call("step"), BOUND)
            assert caught.value.status_code == 502
            with pytest.raises(ol.ServerError):
                await asyncio.wait_for(session.close(), BOUND)  # nothing to delete it on either
        assert server.ran == 0
        await proxy.finish()


async def test_malformed_call_streams_are_typed(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A /call stream that breaks the SSE/ORS framing (a chunk first, bad JSON, invalid UTF-8, a wrong result,
    two task_ids) passes the proxy and raises MalformedStreamError, sent once; the proxy records each call_error."""
    for runs, (name, frames, match) in enumerate(MALFORMED_CALL_STREAMS, start=1):
        hostile_server.on("call", Events(frames))
        with pytest.raises(ol.MalformedStreamError, match=match):
            await call_once(proxy.url, retry=FAST)
        assert hostile_server.ran == runs, name
    errors = errors_of(await proxy.finish(), "call_error")
    assert errors.count("MalformedStreamError") == len(MALFORMED_CALL_STREAMS)


async def test_html_200_on_call_is_a_malformed_stream(proxy: Proxied, hostile_server: HostileServer) -> None:
    """An HTML 200 answer to /call, passed on, raises MalformedStreamError ("expected an SSE stream"), sent once."""
    hostile_server.on("call", Html())
    with pytest.raises(ol.MalformedStreamError, match="expected an SSE stream"):
        await call_once(proxy.url, retry=FAST)
    assert hostile_server.ran == 1


async def test_huge_line_comes_back_whole(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A 4 MiB text on one data line, under the proxy's max_result_bytes, comes back exactly and is recorded."""
    hostile_server.on("call", huge_line_answer())
    result = await call_once(proxy.url)
    assert result.text == HUGE_TEXT and result.reward == 0.5
    assert 0.5 in set(rows(await proxy.finish(), "result")["reward"])


async def test_huge_line_over_the_proxys_bound_is_ended(hostile_server: HostileServer, tmp_path: Path) -> None:
    """The same 4 MiB line through a proxy with max_result_bytes=1 MiB: the proxy stops reading and ends the
    stream (documented); its closing blank line ends the unfinished `end` event first, so the client raises
    MalformedStreamError on a cut result (never a result); sent once; the proxy's call_error is recorded."""
    hostile_server.on("call", huge_line_answer())
    with proxied(hostile_server, tmp_path / "proxy.parquet", max_result_bytes=1 << 20) as proxy:
        with pytest.raises(ol.MalformedStreamError, match="not a valid RunToolOutput"):
            await call_once(proxy.url)
        assert hostile_server.ran == 1
        assert "max_result_bytes" in errors_of(await proxy.finish(), "call_error")


async def test_sync_client_lets_through_only_typed_errors(proxy: Proxied, hostile_server: HostileServer) -> None:
    """The sync Client through the proxy raises typed errors: MalformedResponseError, and the proxy's 502."""
    hostile_server.on("tasks", Html()).on("list_environments", BROKEN_CONNECTIONS["drop"])

    def run() -> list[BaseException]:
        errors = []
        with ol.Client(proxy.url, retry=ONCE) as sync:
            for use in (lambda: sync.environment("lab").tasks("test"), sync.environments):
                try:
                    use()
                except Exception as exc:
                    errors.append(exc)
        return errors

    html, dropped = await asyncio.to_thread(run)
    assert isinstance(html, ol.MalformedResponseError)
    assert isinstance(dropped, ol.ServerError) and dropped.status_code == 502


# -- 8. deadlines, and endless answers bounded -------------------------------------------------------------------------


async def test_trickled_answer_is_cut_at_the_request_deadline(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A body trickled a byte at a time reaches the proxy in time but the client not at all (the proxy passes a
    JSON answer on whole): the client's request_timeout cuts it (DeadlineExceededError), and the proxy then
    stops reading the trickle."""
    trickle = Noted(Trickle(Json(["lab"] * 20), every=0.05))
    hostile_server.on("list_environments", trickle)
    started = time.monotonic()
    async with ol.AsyncClient(proxy.url, timeout=1.0, request_timeout=0.6) as client:
        with pytest.raises(ol.DeadlineExceededError):
            async with asyncio.timeout(BOUND):
                await client.environments()
    assert 0.5 <= time.monotonic() - started < 3.0  # the trickle alone would take 7 s
    assert await hung_up(trickle)
    assert trickle.sent < 200
    assert unanswered(await proxy.finish()) == []


ENDLESS = {
    "pings": lambda: Forever(ping_frame(), every=0.02, first=task_id_frame(TASK_ID)),
    "chunks": lambda: Forever(sse("chunk", "z" * 512), every=0.005, first=task_id_frame(TASK_ID)),
    "endless-line": lambda: Forever(b"w" * 512, every=0.005, first=task_id_frame(TASK_ID) + b"data: "),
    "silence-after-task-id": lambda: Events((task_id_frame(TASK_ID), ping_frame()), after="hang"),
}


async def test_call_deadline_ends_an_endless_call(proxy: Proxied, hostile_server: HostileServer) -> None:
    """call_timeout bounds each /call fed pings, chunks, one endless line or silence through the proxy (four
    calls at once): CallDeadlineExceededError with the task_id; each tool ran once; the proxy hangs up on
    every upstream stream once its client has gone, and records that."""
    answers = [Noted(make()) for make in ENDLESS.values()]
    hostile_server.on("call", *answers, Silence())
    hostile_server.on("resume", Silence())
    started = time.monotonic()
    caught = await asyncio.gather(
        *(call_once(proxy.url, call_timeout=1.0, heartbeat_timeout=5.0, retry=FAST) for _ in answers),
        return_exceptions=True,
    )
    assert 0.9 <= time.monotonic() - started < 4.0
    for error in caught:
        assert isinstance(error, ol.CallDeadlineExceededError) and error.task_id == TASK_ID, repr(error)
    assert hostile_server.ran == len(ENDLESS)
    for name, answer in zip(ENDLESS, answers, strict=True):
        assert await hung_up(answer), name
    trace = await proxy.finish()
    assert errors_of(trace, "disconnect").count("the client hung up") == len(ENDLESS)
    assert unanswered(trace) == []


BOUNDED = {
    "pings": lambda: Forever(ping_frame() * 64, every=0.001, first=task_id_frame(TASK_ID)),
    "chunks": lambda: Forever(sse("chunk", "z" * 16_000), every=0.001, first=task_id_frame(TASK_ID)),
    "endless-line": lambda: Forever(b"w" * 16_000, every=0.001, first=task_id_frame(TASK_ID) + b"data: "),
}


@pytest.mark.parametrize("make", list(BOUNDED.values()), ids=list(BOUNDED))
async def test_endless_call_is_ended_at_the_proxys_bound(
    hostile_server: HostileServer, tmp_path: Path, make: Any
) -> None:
    """Endless pings, chunks or one endless line: the proxy stops at max_result_bytes (documented) with an error
    event the client raises as ToolError, hangs up on the upstream, and read a bounded amount; sent once."""
    limit = 256 << 10
    answer = Noted(make())
    hostile_server.on("call", answer)
    with proxied(hostile_server, tmp_path / "proxy.parquet", max_result_bytes=limit) as proxy:
        started = time.monotonic()
        with pytest.raises(ol.ToolError, match="max_result_bytes"):
            await call_once(proxy.url, retry=FAST)
        assert time.monotonic() - started < 5.0
        assert await hung_up(answer)
        assert answer.sent < 16 * limit  # the bound plus what the sockets buffer
        assert hostile_server.ran == 1
        assert "max_result_bytes" in errors_of(await proxy.finish(), "call_error")


async def test_call_deadline_before_sending_is_not_outcome_unknown(
    proxy: Proxied, hostile_server: HostileServer
) -> None:
    """A /call still waiting out 429s (passed on by the proxy) when call_timeout passes never ran: a plain
    DeadlineExceededError."""
    hostile_server.on("call", Json({"detail": "busy"}, status=429, headers={"retry-after": "5"}))
    with pytest.raises(ol.DeadlineExceededError) as caught:
        await call_once(proxy.url, call_timeout=0.5, retry=FAST)
    assert not isinstance(caught.value, ol.OutcomeUnknownError)
    assert hostile_server.count("call") == 1


async def test_call_deadline_covers_resumes(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A call cut after task_id again and again, through the proxy, ends at the call deadline; the tool ran once."""
    cut = Events((task_id_frame(TASK_ID), ping_frame()), after="close", delay=0.2)
    hostile_server.on("call", cut).on("resume", cut)
    started = time.monotonic()
    with pytest.raises(ol.CallDeadlineExceededError):
        await call_once(proxy.url, call_timeout=1.0,
                        retry=RetryPolicy(backoff=0.05, max_backoff=0.05, resume_attempts=1000))  # fmt: skip
    assert time.monotonic() - started < 4.0
    assert hostile_server.ran == 1 and hostile_server.count("resume") >= 2
    trace = await proxy.finish()
    assert len(rows(trace, "disconnect")) >= hostile_server.count("resume")  # each cut, and the client's leaving
    assert unanswered(trace) == []


async def test_evaluate_files_malformed_answers_and_unknown_outcomes_as_environment_errors(
    proxy: Proxied, hostile_server: HostileServer
) -> None:
    """evaluate through the proxy: an HTML prompt and a 502 to a /call fail their episodes as the environment's
    typed errors; the tool ran once."""
    from ors_lab.agents.policy import Observation, ToolCall
    from ors_lab.evaluation import aevaluate

    hostile_server.on("num_tasks", Json({"num_tasks": 2}))
    hostile_server.on("prompt", Html(), Normal())
    hostile_server.on("call", Json({"detail": "bad gateway"}, status=502))

    def agent(obs: Observation) -> ToolCall | None:
        return None if obs.step else ToolCall("step", {})

    async with ol.AsyncClient(proxy.url, retry=FAST) as aclient:
        result = await aevaluate(aclient.environment("lab"), agent, split="test", tasks=2, concurrency=1,
                                 progress=False)  # fmt: skip
    assert sorted(result.episodes["error_type"]) == ["MalformedResponseError", "OutcomeUnknownError"]
    assert hostile_server.ran == 1


# -- a /create whose outcome is open is deleted ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [Reply(500, b'{"detail":"boom"}', {"content-type": "application/json"}), Html(), BROKEN_CONNECTIONS["drop"]],
    ids=["500", "html-200", "drop"],
)
async def test_a_create_that_may_have_made_the_session_is_deleted(
    proxy: Proxied, hostile_server: HostileServer, answer: Answer
) -> None:
    """A /create answered 5xx, malformed or dropped (the proxy's 502) may have made the session: it raises a typed
    error, and the session is deleted."""
    hostile_server.on("create", answer)
    async with ol.AsyncClient(proxy.url, retry=ONCE) as client:
        with pytest.raises(ol.ORSError):
            await client.environment("lab").session(split="test", index=0).open()
    assert 1 <= hostile_server.count("create") <= 2
    assert hostile_server.count("delete") == 1


async def test_a_create_the_server_refused_is_not_deleted(proxy: Proxied, hostile_server: HostileServer) -> None:
    """A /create refused with a 4xx, passed on by the proxy, made nothing: no delete is sent."""
    hostile_server.on("create", Reply(422, b'{"detail":"bad index"}', {"content-type": "application/json"}))
    async with ol.AsyncClient(proxy.url, retry=FAST) as client:
        with pytest.raises(ol.ServerError):
            await client.environment("lab").session(split="test", index=0).open()
    assert hostile_server.count("delete") == 0
