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
from tests.hostile.server import (
    END_OK,
    Answer,
    Drop,
    Events,
    Forever,
    HostileServer,
    Html,
    Json,
    Normal,
    Raw,
    Reply,
    Silence,
    Trickle,
    end_frame,
    ping_frame,
    sse,
    task_id_frame,
)

TASK_ID = "feedfacefeedfacefeedfacefeedface"
FAST = RetryPolicy(backoff=0.01, max_backoff=0.05)
STARTING = {"content-type": "application/json", "x-backend-state": "starting", "retry-after": "0"}
BOUND = 8.0  # no test here may take longer than this, whatever the client does wrong


def starting(retry_after: str | None = "0") -> Reply:
    """openreward's 503 while the environment starts, with this Retry-After (None: no header)."""
    headers = dict(STARTING)
    if retry_after is None:
        del headers["retry-after"]
    else:
        headers["retry-after"] = retry_after
    return Reply(503, b'{"detail":"Environment still starting."}', headers)


async def call_once(url: str, **options: Any) -> ol.ToolResult:
    """Open a session on `lab`, run `step` once, close; bounded by BOUND."""
    async with asyncio.timeout(BOUND), ol.AsyncClient(url, **options) as client:
        async with client.environment("lab").session(split="test", index=0) as session:
            return await session.call("step", {"n": 1})


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


@pytest.mark.parametrize(
    "answer",
    [Drop(), Drop(b"HTTP/1.1 200 OK\r\n"), Drop(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")],
    ids=["nothing", "status-line", "head"],
)
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


class CutThenRefuse(Answer):
    """Send task_id, hang up, and stop listening: every resume finds nothing to connect to."""

    def serve(self, exchange: Any) -> bool:
        Events((task_id_frame(TASK_ID),), after="close").serve(exchange)
        exchange.server.refuse()
        return False


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


async def _tasks(client: ol.AsyncClient) -> Any:
    return await client.environment("lab").tasks("test")


async def _num_tasks(client: ol.AsyncClient) -> Any:
    return await client.environment("lab").num_tasks("test")


async def _task(client: ol.AsyncClient) -> Any:
    return await client.environment("lab").task("test", 0)


async def _splits(client: ol.AsyncClient) -> Any:
    return await client.environment("lab").splits()


async def _tools(client: ol.AsyncClient) -> Any:
    return await client.environment("lab").tools()


async def _environments(client: ol.AsyncClient) -> Any:
    return await client.environments()


async def _health(client: ol.AsyncClient) -> Any:
    return await client.health()


async def _open(client: ol.AsyncClient) -> Any:
    async with client.environment("lab").session(split="test", index=0):
        pass


async def _prompt(client: ol.AsyncClient) -> Any:
    async with client.environment("lab").session(split="test", index=0) as session:
        return await session.prompt()


async def _task_tools(client: ol.AsyncClient) -> Any:
    async with client.environment("lab").session(split="test", index=0) as session:
        return await session.tools()


WRONG_SHAPES = [
    (_environments, "list_environments", {"environments": ["lab"]}),
    (_splits, "splits", [{"title": "test"}]),
    (_tasks, "tasks", {"task": []}),
    (_tasks, "tasks", {"tasks": "all of them"}),
    (_tasks, "tasks", {"tasks": [1, 2]}),
    (_num_tasks, "num_tasks", {"num_tasks": "many"}),
    (_num_tasks, "num_tasks", {"num_tasks": None}),
    (_num_tasks, "num_tasks", ["1"]),
    (_task, "task", {"tasks": {}}),
    (_tools, "tools", {"tools": [{"description": "no name"}]}),
    (_tools, "tools", None),
    (_prompt, "prompt", {"text": "not a list"}),
    (_prompt, "prompt", [{"type": "text"}]),
    (_task_tools, "task_tools", {"tools": 3}),
]


@pytest.mark.parametrize(("use", "route", "body"), WRONG_SHAPES, ids=lambda v: getattr(v, "__name__", None))
async def test_wrongly_shaped_json_is_a_malformed_response(
    client: ol.AsyncClient, hostile_server: HostileServer, use: Any, route: str, body: Any
) -> None:
    """A 200 whose JSON is not the ORS shape raises MalformedResponseError naming the request, never KeyError."""
    hostile_server.on(route, Json(body))
    with pytest.raises(ol.MalformedResponseError) as caught:
        await use(client)
    assert caught.value.request is not None and route in str(caught.value.request.url)
    assert json.dumps(body)[:20] in str(caught.value)


NOT_JSON = {
    "html": Html(),
    "empty": Reply(200, b"", {"content-type": "application/json"}),
    "truncated": Reply(200, b'{"tasks": [', {"content-type": "application/json"}),
    "invalid-utf8": Reply(200, b'{"tasks": [{"id": "\xff\xfe"}]}', {"content-type": "application/json"}),
}
USES = [_environments, _health, _splits, _tasks, _num_tasks, _task, _tools, _open, _prompt, _task_tools]
ROUTES = {_environments: "list_environments", _health: "health", _splits: "splits", _tasks: "tasks",
          _num_tasks: "num_tasks", _task: "task", _tools: "tools", _open: "create", _prompt: "prompt",
          _task_tools: "task_tools"}  # fmt: skip


@pytest.mark.parametrize("use", USES, ids=lambda use: use.__name__.strip("_"))
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
        await _tasks(client)
    message = str(caught.value)
    assert "<!DOCTYPE html>" in message and "text/html" in message and "POST" in message


@pytest.mark.parametrize(
    "answer",
    [Drop(), Drop(b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n[\"la"), Raw(b"SPDY/9 nonsense\r\n\r\n"),
     Raw(b"HTTP/1.1 200 OK\r\ncontent-length: banana\r\n\r\n[]")],
    ids=["drop", "cut-body", "not-http", "bad-length"],
)  # fmt: skip
async def test_broken_connection_is_a_connection_failed_error(
    client: ol.AsyncClient, hostile_server: HostileServer, answer: Any
) -> None:
    """A connection that breaks or is not HTTP gives ConnectionFailedError, the httpx2 error as its cause."""
    hostile_server.on("tasks", answer)
    with pytest.raises(ol.ConnectionFailedError) as caught:
        async with asyncio.timeout(BOUND):
            await _tasks(client)
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


@pytest.mark.parametrize(
    ("frames", "match"),
    [
        ((sse("chunk", "x"), END_OK), "before task_id"),
        ((task_id_frame(TASK_ID), sse("end", "{not json")), "not a valid RunToolOutput"),
        ((task_id_frame(TASK_ID), sse("end", b'{"ok": true, \xff}')), "not a valid RunToolOutput"),
        ((task_id_frame(TASK_ID), sse("end", '{"ok": "yes"}')), "not a valid RunToolOutput"),
        ((task_id_frame(TASK_ID), sse("end", "[1, 2]")), "not a valid RunToolOutput"),
        ((task_id_frame(TASK_ID), task_id_frame("0" * 32)), "task_id changed"),
    ],
    ids=["chunk-first", "bad-json", "invalid-utf8", "wrong-type", "wrong-shape", "two-task-ids"],
)
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
    text = "y" * (4 << 20)
    result_wire = {"ok": True, "output": {"blocks": [{"text": text, "detail": None, "type": "text"}],
                                          "metadata": None, "reward": 0.5, "finished": False}}  # fmt: skip
    end = end_frame(result_wire)
    pieces = tuple(end[i : i + 65536] for i in range(0, len(end), 65536))
    hostile_server.on("call", Events((task_id_frame(TASK_ID), *pieces)))
    result = await call_once(hostile_server.url)
    assert result.text == text and result.reward == 0.5


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
    cut = Events((task_id_frame(TASK_ID), ping_frame()), after="close", delay=0.2)
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
