"""Retry rules and headers, against a real scripted HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import time

import httpx2
import pytest

import ors_lab as ol
from ors_lab.client.policy import RetryPolicy, retry_after_seconds
from tests.scripted_server import Answer, scripted_server

OK = Answer(200, b'["lab"]')
FAST = RetryPolicy(backoff=0.01)


async def test_api_key_and_headers_are_sent() -> None:
    """api_key goes out as X-API-Key and headers= on every request."""
    with scripted_server(OK) as server:
        async with ol.AsyncClient(server.url, api_key="k-123", headers={"X-Team": "rl"}) as client:
            await client.environments()
            await client.environments()
    for seen in server.requests:
        assert seen.headers["x-api-key"] == "k-123"
        assert seen.headers["x-team"] == "rl"
        assert seen.headers["user-agent"].startswith("ors-lab/")


async def test_no_api_key_header_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a key (none given, none in ORS_API_KEY) no X-API-Key header is sent."""
    monkeypatch.delenv("ORS_API_KEY", raising=False)
    with scripted_server(OK) as server:
        async with ol.AsyncClient(server.url) as client:
            await client.environments()
    assert "x-api-key" not in server.requests[0].headers


@pytest.mark.parametrize("status", [429, 502, 503, 504])
async def test_transient_statuses_are_retried_honouring_retry_after(status: int) -> None:
    """429/502/503/504 to a request (not a first /call) are retried, waiting the Retry-After the server asked for."""
    busy = Answer(status, b'{"detail":"busy"}', {"content-type": "application/json", "retry-after": "0.6"})
    with scripted_server(busy, OK) as server:
        async with ol.AsyncClient(server.url, retry=FAST) as client:
            assert await client.environments() == ["lab"]
    first, second = server.requests
    assert second.at - first.at >= 0.59


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422, 500])
async def test_other_errors_are_final(status: int) -> None:
    """4xx (but 429) and 500 are raised at once as ServerError, never retried."""
    with scripted_server(Answer(status, b'{"detail":"no"}')) as server:
        async with ol.AsyncClient(server.url, retry=FAST) as client:
            with pytest.raises(ol.ServerError) as caught:
                await client.environments()
    assert len(server.requests) == 1
    assert (caught.value.status_code, caught.value.detail) == (status, "no")


async def test_retries_are_bounded() -> None:
    """A server that stays at 503 gets `attempts` requests, then the error is raised."""
    with scripted_server(Answer(503, b'{"detail":"down"}')) as server:
        async with ol.AsyncClient(server.url, retry=RetryPolicy(attempts=3, backoff=0.01)) as client:
            with pytest.raises(ol.ServerError):
                await client.environments()
    assert len(server.requests) == 3


async def test_starting_environment_is_waited_out() -> None:
    """openreward's 503 x-backend-state: starting is waited out beyond the normal attempts."""
    starting = Answer(
        503,
        b'{"detail":"Environment still starting."}',
        {"content-type": "application/json", "x-backend-state": "starting", "retry-after": "0.05"},
    )
    with scripted_server(starting, starting, starting, OK) as server:
        async with ol.AsyncClient(server.url, retry=RetryPolicy(attempts=2)) as client:
            assert await client.environments() == ["lab"]
    assert len(server.requests) == 4


async def test_starting_wait_is_bounded() -> None:
    """Past starting_timeout on the clock (not a sum of Retry-After values), EnvironmentStartingError is raised;
    the last wait is cut to the time left."""
    starting = Answer(
        503,
        b'{"detail":"Environment still starting."}',
        {"content-type": "application/json", "x-backend-state": "starting", "retry-after": "4"},
    )
    with scripted_server(starting) as server:
        async with ol.AsyncClient(server.url, retry=RetryPolicy(starting_timeout=1.0)) as client:
            with pytest.raises(ol.EnvironmentStartingError):
                await client.environments()
    first, second = server.requests  # Retry-After 4 is cut to the 1 s left (a loaded machine may add to it, not 3 s)
    assert 0.99 <= second.at - first.at < 3.0


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_connection_refused_is_retried_then_a_connection_failed_error() -> None:
    """A refused connection (nothing sent) is retried, then raised as ConnectionFailedError(before_sending=True),
    the httpx2.ConnectError as its cause."""
    started = time.monotonic()
    async with ol.AsyncClient(f"http://127.0.0.1:{_closed_port()}", retry=RetryPolicy(backoff=0.1)) as client:
        with pytest.raises(ol.ConnectionFailedError) as caught:
            await client.environments()
    assert time.monotonic() - started >= 0.3  # two backoffs: 0.1 s and 0.2 s
    assert caught.value.before_sending is True
    assert isinstance(caught.value.__cause__, httpx2.ConnectError)


async def test_non_sse_answer_to_call_is_malformed() -> None:
    """A 200 /call answer that is not an SSE stream raises MalformedStreamError."""
    with scripted_server(Answer(200, b'{"sid":"x"}'), Answer(200, b'{"ok":true}')) as server:
        async with ol.AsyncClient(server.url) as client:
            async with client.environment("lab").session(split="test", index=0) as session:
                with pytest.raises(ol.MalformedStreamError, match="expected an SSE stream"):
                    await session.call("step", {"value": 1})


@pytest.mark.parametrize(
    ("value", "expected"),
    [("2", 2.0), ("0.5", 0.5), (None, None), ("soon", None), ("-3", 0.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
     ("nan", None)],
)  # fmt: skip
def test_retry_after_parsing(value: str | None, expected: float | None) -> None:
    """Retry-After is read as seconds or an HTTP date (in the past: 0); junk is ignored."""
    assert retry_after_seconds(value) == expected


@pytest.mark.parametrize(
    "options",
    [{"attempts": 0}, {"resume_attempts": -1}, {"backoff": -1.0}, {"starting_timeout": float("inf")},
     {"max_retry_after": float("nan")}],
    ids=str,
)  # fmt: skip
def test_retry_policy_refuses_unbounded_settings(options: dict[str, float]) -> None:
    """A RetryPolicy whose bounds are not finite numbers of seconds (or counts) is refused at once."""
    with pytest.raises(ValueError, match=next(iter(options))):
        RetryPolicy(**options)


SSE = {"content-type": "text/event-stream; charset=utf-8"}
TASK_ID = "0123456789abcdef0123456789abcdef"
END = b'event: end\r\ndata: {"ok":true,"output":{"blocks":[],"metadata":null,"reward":0.5,"finished":false}}\r\n\r\n'


async def test_silent_stream_counts_as_dropped_and_is_resumed() -> None:
    """A /call stream silent past heartbeat_timeout after its task_id is resumed with that task_id."""
    announced = f"event: task_id\r\ndata: {TASK_ID}\r\n\r\n".encode()
    script = [
        Answer(200, b'{"sid":"s"}'),
        Answer(200, announced, SSE, stall=3.0),
        Answer(200, announced + END, SSE),
        Answer(200, b'{"sid":"s"}'),
    ]
    with scripted_server(*script) as server:
        async with ol.AsyncClient(server.url, heartbeat_timeout=0.3, retry=FAST) as client:
            async with client.environment("lab").session(split="test", index=0) as session:
                started = time.monotonic()
                result = await session.call("step", {"value": 1})
                assert time.monotonic() - started < 2.0
    assert (result.reward, result.task_id) == (0.5, TASK_ID)
    calls = [json.loads(seen.body) for seen in server.requests if seen.path == "/lab/call"]
    assert calls == [
        {"name": "step", "input": {"value": 1}},
        {"name": "step", "input": {"value": 1}, "task_id": TASK_ID},
    ]


async def test_silent_stream_before_task_id_is_outcome_unknown() -> None:
    """A /call stream silent before any task_id is not re-sent: OutcomeUnknownError."""
    script = [Answer(200, b'{"sid":"s"}'), Answer(200, b": hello\r\n\r\n", SSE, stall=3.0), Answer(200, b"{}")]
    with scripted_server(*script) as server:
        async with ol.AsyncClient(server.url, heartbeat_timeout=0.3, retry=FAST) as client:
            async with client.environment("lab").session(split="test", index=0) as session:
                with pytest.raises(ol.OutcomeUnknownError):
                    await session.call("step", {"value": 1})
    assert [seen.path for seen in server.requests].count("/lab/call") == 1


async def test_close_failure_does_not_hide_the_blocks_error() -> None:
    """If deleting the session fails while an exception leaves the block, that exception wins."""
    with scripted_server(Answer(200, b'{"sid":"s"}'), Answer(400, b'{"detail":"cannot delete"}')) as server:
        async with ol.AsyncClient(server.url) as client:
            with pytest.raises(RuntimeError, match="agent bug") as caught:
                async with client.environment("lab").session(split="test", index=0):
                    raise RuntimeError("agent bug")
    assert "deleting session" in "".join(caught.value.__notes__)
