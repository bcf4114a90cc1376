"""The client against a hostile ORS server: every misbehaviour ends in a typed error (or the right result),
in bounded time and with a bounded number of requests, and a /call whose outcome is unknown is never re-sent."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest

import ors_lab as ol
from ors_lab.client import policy
from ors_lab.client.policy import RetryPolicy
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
    use_tasks,
)
from tests.hostile.server import (
    Answer,
    Drop,
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


@pytest.fixture
async def client(hostile_server: HostileServer) -> AsyncIterator[ol.AsyncClient]:
    """An AsyncClient on the hostile server with quick retries and short timeouts."""
    async with ol.AsyncClient(hostile_server.url, retry=FAST, timeout=2.0) as made:
        yield made


# -- 1. "starting" and Retry-After: waited by wall clock, with a floor, bounded ---------------------------------------


@pytest.mark.parametrize("retry_after", ["0", "0.001", None])
async def test_starting_with_tiny_retry_after_is_waited_out_by_wall_clock(
    hostile_server: HostileServer, retry_after: str | None
) -> None:
    """A 503 "starting" with Retry-After 0 (tiny, or none) is retried at most every MIN_RETRY_WAIT s, and only
    until starting_timeout has passed on the clock: a handful of requests, then EnvironmentStartingError."""
    hostile_server.on("list_environments", starting(retry_after))
    started = time.monotonic()
    async with ol.AsyncClient(hostile_server.url, retry=RetryPolicy(starting_timeout=1.2)) as client:
        with pytest.raises(ol.EnvironmentStartingError):
            async with asyncio.timeout(BOUND):
                await client.environments()
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 4.0
    assert hostile_server.count() <= 1.2 / policy.MIN_RETRY_WAIT + 2


async def test_starting_then_ready_is_waited_out(hostile_server: HostileServer) -> None:
    """A few "starting" answers, then the real one: the client waits them out beyond `attempts` and returns it."""
    hostile_server.on("list_environments", starting(), starting(), starting(), Normal())
    async with ol.AsyncClient(hostile_server.url, retry=RetryPolicy(attempts=2)) as client:
        assert await client.environments() == ["lab"]
    seen = [s.at for s in hostile_server.requests]
    assert len(seen) == 4
    assert all(b - a >= policy.MIN_RETRY_WAIT * 0.95 for a, b in itertools.pairwise(seen))


async def test_starting_with_a_huge_retry_after_is_capped(hostile_server: HostileServer) -> None:
    """A "starting" Retry-After longer than starting_timeout is cut to the time left, not a reason to give up early
    nor to sleep past the bound."""
    hostile_server.on("list_environments", starting("3600"))
    started = time.monotonic()
    async with ol.AsyncClient(hostile_server.url, retry=RetryPolicy(starting_timeout=0.8)) as client:
        with pytest.raises(ol.EnvironmentStartingError):
            async with asyncio.timeout(BOUND):
                await client.environments()
    assert 0.7 <= time.monotonic() - started < 3.5
    assert hostile_server.count() == 2


@pytest.mark.parametrize("retry_after", ["0", "soon"])
async def test_429_with_retry_after_zero_is_not_a_flood(hostile_server: HostileServer, retry_after: str | None) -> None:
    """429 with Retry-After 0 (or junk) waits at least MIN_RETRY_WAIT between tries, and stops after `attempts`."""
    headers = {"content-type": "application/json"}
    if retry_after is not None:
        headers["retry-after"] = retry_after
    hostile_server.on("list_environments", Reply(429, b'{"detail":"slow down"}', headers))
    async with ol.AsyncClient(hostile_server.url, retry=RetryPolicy(attempts=3, backoff=0.0)) as client:
        with pytest.raises(ol.ServerError) as caught:
            async with asyncio.timeout(BOUND):
                await client.environments()
    assert caught.value.status_code == 429
    seen = [s.at for s in hostile_server.requests]
    assert len(seen) == 3
    assert all(b - a >= policy.MIN_RETRY_WAIT * 0.95 for a, b in itertools.pairwise(seen))


async def test_starting_on_a_first_call_is_waited_out(hostile_server: HostileServer) -> None:
    """A first /call answered "starting" proves nothing ran: it is sent again once the environment is up."""
    hostile_server.on("call", starting(), Normal())
    result = await call_once(hostile_server.url)
    assert (result.ok, result.reward) == (True, 1.0)
    assert hostile_server.count("call") == 2


# -- 2. a /call is re-sent only when the answer proves nothing ran ---------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_first_call_answered_5xx_is_outcome_unknown_and_not_resent(
    hostile_server: HostileServer, status: int
) -> None:
    """A 5xx to a first /call (a gateway may have passed it on) raises OutcomeUnknownError; the tool runs once."""
    hostile_server.on("call", Json({"detail": "upstream hiccup"}, status=status, headers={"retry-after": "0"}))
    with pytest.raises(ol.OutcomeUnknownError) as caught:
        await call_once(hostile_server.url, retry=FAST)
    assert hostile_server.ran == 1
    assert (caught.value.status_code, caught.value.detail) == (status, "upstream hiccup")
    assert caught.value.session_id is not None


async def test_first_call_answered_429_is_sent_again(hostile_server: HostileServer) -> None:
    """A 429 to a first /call proves nothing ran: it is sent again, and the result comes back."""
    hostile_server.on("call", Json({"detail": "busy"}, status=429, headers={"retry-after": "0"}), Normal())
    result = await call_once(hostile_server.url, retry=FAST)
    assert result.ok
    assert hostile_server.count("call") == 2


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_first_call_refused_with_4xx_is_a_server_error(hostile_server: HostileServer, status: int) -> None:
    """A 4xx (not 429) to a first /call is the server refusing it: ServerError, sent once."""
    hostile_server.on("call", Json({"detail": "no"}, status=status))
    with pytest.raises(ol.ServerError) as caught:
        await call_once(hostile_server.url, retry=FAST)
    assert not isinstance(caught.value, ol.OutcomeUnknownError)
    assert hostile_server.ran == 1


@pytest.mark.parametrize("answer", list(FIRST_CALL_DROPS.values()), ids=list(FIRST_CALL_DROPS))
async def test_first_call_dropped_before_task_id_is_outcome_unknown(
    hostile_server: HostileServer, answer: Drop
) -> None:
    """A first /call dropped before its task_id (with no answer, half a head, or a head) is not sent again."""
    hostile_server.on("call", answer)
    with pytest.raises(ol.OutcomeUnknownError):
        await call_once(hostile_server.url, retry=FAST)
    assert hostile_server.ran == 1


async def test_first_call_met_with_silence_is_outcome_unknown(hostile_server: HostileServer) -> None:
    """A first /call the server never answers costs the read timeout, then OutcomeUnknownError; sent once."""
    hostile_server.on("call", Silence())
    started = time.monotonic()
    with pytest.raises(ol.OutcomeUnknownError) as caught:
        await call_once(hostile_server.url, retry=FAST, timeout=0.5)
    assert time.monotonic() - started < 3.0
    assert isinstance(caught.value.__cause__, httpx2.TimeoutException)
    assert hostile_server.ran == 1


async def test_call_dropped_after_task_id_is_resumed_through_5xx(hostile_server: HostileServer) -> None:
    """Dropped after task_id, the call is resumed with it; resumes answered 502/503/504 are tried again."""
    hostile_server.on("call", Events((task_id_frame(TASK_ID),), after="close"))
    hostile_server.on("resume", Json({}, status=502), Json({}, status=503), Json({}, status=504), Normal())
    result = await call_once(hostile_server.url, retry=FAST)
    assert (result.ok, result.task_id) == (True, TASK_ID)
    assert (hostile_server.ran, hostile_server.count("resume")) == (1, 4)


async def test_resume_that_cannot_connect_is_a_failed_resume(hostile_server: HostileServer) -> None:
    """A resume that cannot even connect counts as a failed resume: ResumeFailedError with the task_id (the tool
    ran), not a ConnectionFailedError that would read as "never sent"."""
    hostile_server.on("call", CutThenRefuse())
    with pytest.raises(ol.ResumeFailedError) as caught:
        await call_once(hostile_server.url, retry=RetryPolicy(backoff=0.005, max_backoff=0.01, resume_attempts=2))
    assert caught.value.task_id == TASK_ID
    assert isinstance(caught.value.__cause__, ol.ConnectionFailedError) and caught.value.__cause__.before_sending
    assert hostile_server.ran == 1


# -- 7. every failure is an ORSError -------------------------------------------------------------------------------


@pytest.mark.parametrize(("use", "route", "body"), WRONG_SHAPES, ids=use_id)
async def test_wrongly_shaped_json_is_a_malformed_response(
    client: ol.AsyncClient, hostile_server: HostileServer, use: Any, route: str, body: Any
) -> None:
    """A 200 whose JSON is not the ORS shape raises MalformedResponseError naming the request, never KeyError."""
    hostile_server.on(route, Json(body))
    with pytest.raises(ol.MalformedResponseError) as caught:
        await use(client)
    assert caught.value.request is not None and route in str(caught.value.request.url)
    assert json.dumps(body)[:20] in str(caught.value)


@pytest.mark.parametrize("use", USES, ids=use_id)
@pytest.mark.parametrize("body", NOT_JSON, ids=str)
async def test_a_200_that_is_not_json_is_a_malformed_response(
    client: ol.AsyncClient, hostile_server: HostileServer, use: Any, body: str
) -> None:
    """A 200 that is HTML, empty, cut or not UTF-8 raises MalformedResponseError (not JSONDecodeError), once."""
    hostile_server.on(ROUTES[use], NOT_JSON[body])
    with pytest.raises(ol.MalformedResponseError, match="expected") as caught:
        await use(client)
    assert isinstance(caught.value.__cause__, ValueError)
    assert hostile_server.count(ROUTES[use]) == 1


async def test_html_page_shows_its_start_in_the_error(client: ol.AsyncClient, hostile_server: HostileServer) -> None:
    """The error for an HTML 200 says what was expected and shows the start of the body."""
    hostile_server.on("tasks", Html())
    with pytest.raises(ol.MalformedResponseError) as caught:
        await use_tasks(client)
    message = str(caught.value)
    assert "<!DOCTYPE html>" in message and "text/html" in message and "POST" in message


@pytest.mark.parametrize("answer", list(BROKEN_CONNECTIONS.values()), ids=list(BROKEN_CONNECTIONS))
async def test_broken_connection_is_a_connection_failed_error(
    client: ol.AsyncClient, hostile_server: HostileServer, answer: Any
) -> None:
    """A connection that breaks or is not HTTP gives ConnectionFailedError, the httpx2 error as its cause."""
    hostile_server.on("tasks", answer)
    with pytest.raises(ol.ConnectionFailedError) as caught:
        async with asyncio.timeout(BOUND):
            await use_tasks(client)
    assert isinstance(caught.value.__cause__, httpx2.TransportError)
    assert caught.value.before_sending is False
    assert hostile_server.count() == 1  # it may have reached the server: not sent again


async def test_silent_server_is_a_connection_failed_error_after_the_read_timeout(hostile_server: HostileServer) -> None:
    """A server that never answers costs the read timeout, then ConnectionFailedError (cause: a timeout)."""
    hostile_server.on("list_environments", Silence())
    started = time.monotonic()
    async with ol.AsyncClient(hostile_server.url, timeout=0.5) as client:
        with pytest.raises(ol.ConnectionFailedError) as caught:
            await client.environments()
    assert time.monotonic() - started < 3.0
    assert isinstance(caught.value.__cause__, httpx2.TimeoutException)


async def test_connection_refused_is_retried_then_a_connection_failed_error() -> None:
    """Nothing listening: retried `attempts` times (nothing was sent), then ConnectionFailedError(before_sending)."""
    with HostileServer() as gone:
        url = gone.url
    async with ol.AsyncClient(url, retry=RetryPolicy(attempts=3, backoff=0.05)) as client:
        with pytest.raises(ol.ConnectionFailedError) as caught:
            await client.environments()
    assert caught.value.before_sending is True
    assert isinstance(caught.value.__cause__, httpx2.ConnectError)


async def test_call_refused_connection_is_connection_failed_not_outcome_unknown() -> None:
    """A /call that could not connect at all ran nowhere: ConnectionFailedError, not OutcomeUnknownError."""
    with HostileServer() as server:
        async with ol.AsyncClient(server.url, retry=FAST) as client:
            session = client.environment("lab").session(split="test", index=0)
            await session.open()
            server.stop()
            await asyncio.sleep(0.05)  # let the client see its pooled connection closed
            with pytest.raises(ol.ConnectionFailedError) as caught:
                await session.call("step")
            assert caught.value.before_sending is True
            assert not isinstance(caught.value, ol.OutcomeUnknownError)
            with pytest.raises(ol.ConnectionFailedError):
                await session.close()  # nothing to delete it on either


@pytest.mark.parametrize(("frames", "match"), [c[1:] for c in MALFORMED_CALL_STREAMS],
                         ids=[c[0] for c in MALFORMED_CALL_STREAMS])  # fmt: skip
async def test_malformed_call_streams_are_typed(
    hostile_server: HostileServer, frames: tuple[bytes, ...], match: str
) -> None:
    """A /call stream that breaks the SSE/ORS framing raises MalformedStreamError, and is not sent again."""
    hostile_server.on("call", Events(frames))
    with pytest.raises(ol.MalformedStreamError, match=match):
        await call_once(hostile_server.url, retry=FAST)
    assert hostile_server.ran == 1


async def test_html_200_on_call_is_a_malformed_stream(hostile_server: HostileServer) -> None:
    """An HTML 200 answer to /call raises MalformedStreamError ("expected an SSE stream"), sent once."""
    hostile_server.on("call", Html())
    with pytest.raises(ol.MalformedStreamError, match="expected an SSE stream"):
        await call_once(hostile_server.url, retry=FAST)
    assert hostile_server.ran == 1


async def test_huge_line_comes_back_whole(hostile_server: HostileServer) -> None:
    """A 4 MiB text on one data line, sent in small chunks, comes back exactly."""
    hostile_server.on("call", huge_line_answer())
    result = await call_once(hostile_server.url)
    assert result.text == HUGE_TEXT and result.reward == 0.5


async def test_sync_client_lets_through_only_typed_errors(hostile_server: HostileServer) -> None:
    """The sync Client raises the same typed errors: MalformedResponseError, ConnectionFailedError."""
    hostile_server.on("tasks", Html()).on("list_environments", Drop())

    def run() -> tuple[BaseException, BaseException]:
        with ol.Client(hostile_server.url, retry=FAST) as sync:
            errors = []
            for use in (lambda: sync.environment("lab").tasks("test"), sync.environments):
                try:
                    use()
                except Exception as exc:
                    errors.append(exc)
            return errors[0], errors[1]

    html, dropped = await asyncio.to_thread(run)
    assert isinstance(html, ol.MalformedResponseError)
    assert isinstance(dropped, ol.ConnectionFailedError)


# -- 8. total deadlines ----------------------------------------------------------------------------------------------


async def test_trickled_answer_is_cut_at_the_request_deadline(hostile_server: HostileServer) -> None:
    """A body trickled a byte at a time (each read in time) is cut at request_timeout: DeadlineExceededError."""
    hostile_server.on("list_environments", Trickle(Json(["lab"] * 20), every=0.05))
    started = time.monotonic()
    async with ol.AsyncClient(hostile_server.url, timeout=1.0, request_timeout=0.6) as client:
        with pytest.raises(ol.DeadlineExceededError) as caught:
            async with asyncio.timeout(BOUND):
                await client.environments()
    assert 0.5 <= time.monotonic() - started < 3.0  # the trickle alone would take 7 s
    assert not isinstance(caught.value, ol.OutcomeUnknownError)
    assert caught.value.deadline == 0.6


async def test_request_deadline_defaults_from_the_timeout(hostile_server: HostileServer) -> None:
    """Without request_timeout the deadline is the timeout's connect + read: a trickle cannot outlast it."""
    hostile_server.on("list_environments", Trickle(Json(["lab"] * 40), every=0.05))
    started = time.monotonic()
    async with ol.AsyncClient(hostile_server.url, timeout=httpx2.Timeout(0.4, connect=0.2)) as client:
        with pytest.raises(ol.DeadlineExceededError):
            async with asyncio.timeout(BOUND):
                await client.environments()
    assert 0.5 <= time.monotonic() - started < 3.0  # the trickle alone would take 14 s


@pytest.mark.parametrize(
    "answer",
    [
        Forever(ping_frame(), every=0.02, first=task_id_frame(TASK_ID)),
        Forever(sse("chunk", "z" * 512), every=0.005, first=task_id_frame(TASK_ID)),
        Forever(b"w" * 512, every=0.005, first=task_id_frame(TASK_ID) + b"data: "),
        Events((task_id_frame(TASK_ID), ping_frame()), after="hang"),
    ],
    ids=["pings", "chunks", "endless-line", "silence-after-task-id"],
)
async def test_call_deadline_ends_an_endless_call(hostile_server: HostileServer, answer: Any) -> None:
    """call_timeout bounds a /call fed pings, chunks or one endless line forever: CallDeadlineExceededError,
    an OutcomeUnknownError carrying the task_id; the tool ran once."""
    hostile_server.on("call", answer)
    hostile_server.on("resume", answer)
    started = time.monotonic()
    with pytest.raises(ol.CallDeadlineExceededError) as caught:
        await call_once(hostile_server.url, call_timeout=1.0, heartbeat_timeout=5.0, retry=FAST)
    assert 0.9 <= time.monotonic() - started < 4.0
    assert isinstance(caught.value, ol.OutcomeUnknownError) and isinstance(caught.value, ol.DeadlineExceededError)
    assert caught.value.task_id == TASK_ID and caught.value.deadline == 1.0
    assert hostile_server.ran == 1


async def test_call_deadline_before_sending_is_not_outcome_unknown(hostile_server: HostileServer) -> None:
    """A /call still waiting out 429s when call_timeout passes never ran: a plain DeadlineExceededError."""
    hostile_server.on("call", Json({"detail": "busy"}, status=429, headers={"retry-after": "5"}))
    with pytest.raises(ol.DeadlineExceededError) as caught:
        await call_once(hostile_server.url, call_timeout=0.5, retry=FAST)
    assert not isinstance(caught.value, ol.OutcomeUnknownError)
    assert hostile_server.count("call") == 1


async def test_call_deadline_covers_resumes(hostile_server: HostileServer) -> None:
    """Resumes count against the same call_timeout: a call cut after task_id again and again ends at the deadline."""
    cut = Events((task_id_frame(TASK_ID), ping_frame()), after="close", delay=0.05)  # ~10 resumes in the second
    hostile_server.on("call", cut).on("resume", cut)
    policy_ = RetryPolicy(backoff=0.05, max_backoff=0.05, resume_attempts=1000)
    started = time.monotonic()
    with pytest.raises(ol.CallDeadlineExceededError):
        await call_once(hostile_server.url, call_timeout=1.0, retry=policy_)
    assert time.monotonic() - started < 4.0
    assert hostile_server.ran == 1 and hostile_server.count("resume") >= 2


async def test_sync_client_takes_call_timeout(hostile_server: HostileServer) -> None:
    """Client(call_timeout=...) bounds a /call the same way."""
    hostile_server.on("call", Forever(ping_frame(), every=0.02, first=task_id_frame(TASK_ID)))

    def run() -> BaseException | None:
        with ol.Client(hostile_server.url, call_timeout=0.5, request_timeout=5.0) as sync:
            with sync.environment("lab").session(split="test", index=0) as session:
                try:
                    session.call("step")
                except Exception as exc:
                    return exc
        return None

    assert isinstance(await asyncio.to_thread(run), ol.CallDeadlineExceededError)


async def test_evaluate_files_malformed_answers_and_unknown_outcomes_as_environment_errors(
    hostile_server: HostileServer,
) -> None:
    """In evaluate, an HTML prompt and a 502 to a /call fail their episodes as the environment's errors
    (source "tool", typed), not as the agent's own (source "platform", internal_error)."""
    from ors_lab.agents.policy import Observation, ToolCall
    from ors_lab.evaluation import aevaluate

    hostile_server.on("num_tasks", Json({"num_tasks": 2}))
    hostile_server.on("prompt", Html(), Normal())
    hostile_server.on("call", Json({"detail": "bad gateway"}, status=502))

    def policy(obs: Observation) -> ToolCall | None:
        return None if obs.step else ToolCall("step", {})

    seen: list[dict[str, Any]] = []
    async with ol.AsyncClient(hostile_server.url, retry=FAST) as aclient:
        result = await aevaluate(aclient.environment("lab"), policy, split="test", tasks=2, concurrency=1,
                                 progress=False, subscribe=lambda event: seen.append(event.to_wire()))  # fmt: skip
    assert sorted(result.episodes["error_type"]) == ["MalformedResponseError", "OutcomeUnknownError"]
    errors = [event for event in seen if event["type"] == "error"]
    assert sorted(event["code"] for event in errors) == ["MalformedResponseError", "OutcomeUnknownError"]
    assert {(event["source"], event["errorType"]) for event in errors} == {("tool", "tool_error")}
    assert hostile_server.ran == 1


# -- a /create whose outcome is open is deleted ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [Reply(500, b'{"detail":"boom"}', {"content-type": "application/json"}), Html(), Drop()],
    ids=["500", "html-200", "drop"],
)
async def test_a_create_that_may_have_made_the_session_is_deleted(
    hostile_server: HostileServer, client: ol.AsyncClient, answer: Answer
) -> None:
    """A /create answered 5xx, malformed or not at all may have made the session: it raises, and is deleted."""
    hostile_server.on("create", answer)
    with pytest.raises(ol.ORSError):
        await client.environment("lab").session(split="test", index=0).open()
    assert hostile_server.count("create") == 1
    assert hostile_server.count("delete") == 1


async def test_a_create_the_server_refused_is_not_deleted(
    hostile_server: HostileServer, client: ol.AsyncClient
) -> None:
    """A /create refused with a 4xx made nothing: no delete is sent."""
    hostile_server.on("create", Reply(422, b'{"detail":"bad index"}', {"content-type": "application/json"}))
    with pytest.raises(ol.ServerError):
        await client.environment("lab").session(split="test", index=0).open()
    assert hostile_server.count("delete") == 0
