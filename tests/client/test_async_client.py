"""AsyncClient against both reference servers (ors-sdk and openreward), started for real."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest

import ors_lab as ol
from ors_lab.demo.launch import ServerProcess
from tests.conftest import REPO_ROOT
from tests.envs import common
from tests.envs.counting_envs import live_sessions, sessions_made


class Sink:
    """A subscriber that keeps the events the client publishes, in order."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)

    def kinds(self, kind: str) -> list[Any]:
        return [event for event in self.events if event.kind == kind]


@pytest.fixture
def url(reference_server: Any) -> str:
    return str(reference_server.url)


async def raw_ping(url: str, sid: str) -> int:
    """Status of a bare POST /ping for a session id, outside the client."""
    async with httpx2.AsyncClient() as http:
        return (await http.post(f"{url}/ping", headers={"X-Session-ID": sid})).status_code


async def test_environments_in_registration_order(url: str) -> None:
    """/list_environments gives the env names, the default first."""
    async with ol.AsyncClient(url) as client:
        assert await client.environments() == common.ENV_NAMES
        assert await client.health() is True


async def test_stateless_endpoints(url: str) -> None:
    """splits, tasks, num_tasks, task (negative index), task_range and tools decode exactly."""
    async with ol.AsyncClient(url) as client:
        lab = client.environment("lab")
        assert [(s.name, s.type) for s in await lab.splits()] == [
            (s["name"], s["type"]) for s in common.LAB_SPLITS_WIRE
        ]
        tasks = await lab.tasks("train")
        assert [t.spec for t in tasks] == common.LAB_TASKS["train"]
        assert all(t.environment == "lab" for t in tasks)
        assert await lab.num_tasks("train") == 3
        assert (await lab.task("train", -1)).spec == common.LAB_TASKS["train"][-1]
        assert [t.spec for t in await lab.task_range("train", 1)] == common.LAB_TASKS["train"][1:]
        assert [t.spec for t in await lab.task_range("train", -2, None)] == common.LAB_TASKS["train"][-2:]
        assert [t.name for t in await lab.tools()] == common.LAB_TOOLS
        echo = client.environment("echo")
        assert [(s.name, s.type) for s in await echo.splits()] == [("dev", "validation")]


async def test_requests_name_their_environment(url: str) -> None:
    """Every environment request goes to /{env}/..., never through the default-env redirect."""
    sink = Sink()
    async with ol.AsyncClient(url, recorder=sink) as client:
        echo = client.environment("echo")
        await echo.tools()
        async with echo.session(split="dev", index=0) as session:
            await session.prompt()
            await session.call("echo", {"text": "x"})
    paths = [httpx2.URL(r.url).path for r in sink.kinds("request")]
    assert {p for p in paths if p.count("/") > 1} == {"/echo/tools", "/echo/prompt", "/echo/call"}
    assert all(r.status < 300 for r in sink.kinds("response"))


async def test_bad_split_is_a_server_error_and_not_retried(url: str) -> None:
    """A 400 raises a ServerError with the server's detail (UnknownSplitError, after asking for the splits it
    names), and the refused request is sent exactly once."""
    sink = Sink()
    async with ol.AsyncClient(url, recorder=sink) as client:
        with pytest.raises(ol.UnknownSplitError) as caught:
            await client.environment("lab").tasks("nope")
    assert isinstance(caught.value, ol.ServerError) and caught.value.status_code == 400
    assert caught.value.detail == "Invalid split"
    assert [httpx2.URL(r.url).path for r in sink.kinds("request")] == ["/lab/tasks", "/lab/splits"]


async def test_session_by_split_and_index(url: str) -> None:
    """A session opened by split/index reads its prompt and task tools and earns the known reward."""
    split, index = common.HINT_INDEX
    task = common.LAB_TASKS[split][index]
    async with ol.AsyncClient(url) as client, client.environment("lab").session(split=split, index=index) as session:
        prompt = await session.prompt()
        assert prompt == [ol.TextBlock(common.lab_prompt(task))]
        names = [t.name for t in await session.tools()]
        assert names[: len(common.LAB_TOOLS)] == common.LAB_TOOLS
        assert names[-1] == "hint"
        result = await session.call("submit", {"answer": task["answer"]})
    assert result == ol.ToolResult(
        ok=True,
        blocks=(ol.TextBlock("Correct!"),),
        reward=1.0,
        finished=True,
        metadata=result.metadata,
    )
    assert len(result.task_id or "") == 32


@pytest.mark.parametrize(("split", "index", "answer"), sorted(common.EXPECTED))
async def test_rewards_equal_what_the_environment_returns(url: str, split: str, index: int, answer: str) -> None:
    """Rewards and finished flags are exactly those the environment is known to give."""
    async with ol.AsyncClient(url) as client, client.environment("lab").session(split=split, index=index) as session:
        result = await session.call("submit", {"answer": answer})
    assert (result.reward, result.finished) == (common.EXPECTED[(split, index, answer)], True)


async def test_session_by_task_spec_and_multi_step(url: str) -> None:
    """A session opened with task= runs several steps with their known rewards."""
    spec = common.LAB_TASKS["test"][0]
    async with ol.AsyncClient(url) as client, client.environment("lab").session(task=spec) as session:
        assert session.task == ol.Task("lab", spec)
        results = [await session.call("step", {"value": v}) for v in (1, 2, 3)]
    assert [(r.text, r.reward, r.finished) for r in results] == [common.step_result(v) for v in (1, 2, 3)]


async def test_session_on_a_non_default_environment(url: str) -> None:
    """Sessions on the non-default `echo` environment work by split/index and by task."""
    async with ol.AsyncClient(url) as client:
        echo = client.environment("echo")
        async with echo.session(split="dev", index=1) as session:
            assert (await session.prompt())[0].text == common.echo_prompt(common.ECHO_TASKS["dev"][1])
            result = await session.call("echo", {"text": "hi"})
        async with echo.session(task=await echo.task("dev", 0)) as session:
            again = await session.call("echo", {"text": "yo"})
    assert (result.text, result.reward, result.finished) == ("hi", common.ECHO_REWARD, False)
    assert again.text == "yo"


async def test_ten_thousand_spaces_come_back_exactly(url: str) -> None:
    """10,000 spaces (4096-char chunk boundaries inside the run) come back as 10,000 characters."""
    async with ol.AsyncClient(url) as client, client.environment("lab").session(split="test", index=0) as session:
        result = await session.call("big_output", {"n_chars": 10_000, "fill": " "})
    assert result.text == " " * 10_000


async def test_sixteen_mebibytes_byte_exact(url: str) -> None:
    """A 16 MiB output with spaces, escapes and non-ASCII arrives byte for byte."""
    fill = ' a"\\ü\n\t€  '
    n = 16 * 1024 * 1024
    expected = (fill * (n // len(fill) + 1))[:n]
    async with ol.AsyncClient(url) as client, client.environment("lab").session(split="test", index=0) as session:
        result = await session.call("big_output", {"n_chars": n, "fill": fill})
    assert result.text.encode() == expected.encode()


async def test_image_blocks(url: str) -> None:
    """An image tool returns a text block and an ImageBlock holding the PNG."""
    async with ol.AsyncClient(url) as client, client.environment("lab").session(split="test", index=0) as session:
        result = await session.call("image")
    text, image = result.blocks
    assert text == ol.TextBlock(common.IMAGE_CAPTION)
    assert isinstance(image, ol.ImageBlock)
    assert image.mime_type == "image/png"
    assert base64.b64decode(image.data) == common.PNG_1X1


async def test_logic_failures_are_data(url: str, reference_server: Any) -> None:
    """Unknown tool and invalid input give ok=False results, with openreward's reason."""
    async with ol.AsyncClient(url) as client, client.environment("lab").session(split="test", index=0) as session:
        unknown = await session.call("nope", {})
        invalid = await session.call("step", {"value": "not a number"})
    assert not unknown.ok and "'nope' is not a valid tool" in (unknown.error or "")
    assert not invalid.ok and "validation" in (invalid.error or "")
    if reference_server.sdk == "openreward":
        assert (unknown.reason, invalid.reason) == ("not_found", "input_validation")
    else:
        assert (unknown.reason, invalid.reason) == (None, None)


async def test_tool_that_raises_is_typed_and_session_survives(url: str) -> None:
    """`event: error` raises ToolError carrying session and task ids; the session stays usable."""
    async with ol.AsyncClient(url) as client, client.environment("lab").session(split="test", index=0) as session:
        with pytest.raises(ol.ToolError) as caught:
            await session.call("crash")
        assert caught.value.message == common.CRASH_MESSAGE
        assert caught.value.session_id == session.sid
        assert len(caught.value.task_id or "") == 32
        assert caught.value.request is not None
        after = await session.call("step", {"value": 1})
    assert after.ok and after.reward == 0.1


async def test_secrets_reach_the_environment(url: str) -> None:
    """Secrets arrive on both servers (body field for ors-sdk, X-Secrets header for openreward)."""
    secrets = {"API_TOKEN": "t0p", "OTHER": "s3cret"}
    async with (
        ol.AsyncClient(url) as client,
        client.environment("lab").session(split="test", index=0, secrets=secrets) as session,
    ):
        result = await session.call("secret_keys")
    assert result.text == ", ".join(sorted(secrets))


async def test_unknown_session_is_typed(url: str) -> None:
    """A session deleted behind the client's back gives SessionNotFoundError with its id."""
    async with ol.AsyncClient(url) as client, client.environment("lab").session(split="test", index=0) as session:
        async with httpx2.AsyncClient() as http:
            await http.post(f"{url}/delete", headers={"X-Session-ID": session.sid})
        with pytest.raises(ol.SessionNotFoundError) as caught:
            await session.call("step", {"value": 1})
        assert caught.value.session_id == session.sid
        assert caught.value.status_code == 404
        with pytest.raises(ol.SessionNotFoundError):
            await session.prompt()


async def test_expired_session_is_found_dead_by_the_keep_alive(url: str) -> None:
    """When the server forgets a session (as its 900 s reaper does), the next use says it is dead."""
    async with ol.AsyncClient(url, ping_interval=0.1) as client:
        session = client.environment("lab").session(split="test", index=0)
        async with session:
            async with httpx2.AsyncClient() as http:
                await http.post(f"{url}/delete", headers={"X-Session-ID": session.sid})
            await asyncio.sleep(0.5)
            assert session.closed
            with pytest.raises(ol.SessionClosedError, match="dead"):
                await session.call("step", {"value": 1})


async def test_session_is_deleted_on_exception_and_cancel(url: str) -> None:
    """Leaving the session block by an exception or a cancellation deletes the session."""
    async with ol.AsyncClient(url) as client:
        env = client.environment("lab")
        with pytest.raises(RuntimeError):
            async with env.session(split="test", index=0) as failed:
                raise RuntimeError("agent bug")
        assert await raw_ping(url, failed.sid) == 404

        opened = asyncio.Event()
        sids: list[str] = []

        async def episode() -> None:
            async with env.session(split="test", index=0) as session:
                sids.append(session.sid)
                opened.set()
                await session.call("slow", {"seconds": 30})

        task = asyncio.create_task(episode())
        await opened.wait()
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await raw_ping(url, sids[0]) == 404


def creates(sink: Sink) -> list[Any]:
    """The /create requests the client sent."""
    return [r for r in sink.kinds("request") if httpx2.URL(r.url).path == "/create"]


@pytest.mark.parametrize("first", ["prompt", "tools", "call"])
async def test_a_new_session_opens_on_first_use(url: str, first: str) -> None:
    """prompt(), tools() or call() on a new session opens it (one /create); it then lives until close()."""
    sink = Sink()
    async with ol.AsyncClient(url, recorder=sink, ping_interval=0.1) as client:
        session = client.environment("lab").session(split="test", index=0)
        uses = {"prompt": session.prompt, "tools": session.tools, "call": lambda: session.call("step", {"value": 1})}
        await uses[first]()
        assert session.state == "open"
        await asyncio.sleep(0.5)  # it lives between uses: its pings go on
        assert session.pings >= 2 and await raw_ping(url, session.sid) == 200
        result = await session.call("submit", {"answer": common.LAB_TASKS["test"][0]["answer"]})
        assert (result.reward, result.finished) == (1.0, True)
        await session.close()
    assert len(creates(sink)) == 1
    assert await raw_ping(url, session.sid) == 404


async def test_two_first_calls_racing_create_one_session(url: str) -> None:
    """Two first uses at once on a new session send one /create between them, and both are answered."""
    sink = Sink()
    async with ol.AsyncClient(url, recorder=sink) as client:
        session = client.environment("echo").session(split="dev", index=0)
        first, second = await asyncio.gather(session.call("echo", {"text": "a"}), session.call("echo", {"text": "b"}))
        assert (first.text, second.text) == ("a", "b")
        assert len(creates(sink)) == 1
        async with session:  # the scoped form takes over an open session: entered as it is, deleted on exit
            assert len(creates(sink)) == 1
    assert session.state == "closed"
    assert await raw_ping(url, session.sid) == 404


async def test_closed_session_cannot_be_used(url: str) -> None:
    """Calls on a closed session raise SessionClosedError, saying to start a new one, without touching the network."""
    sink = Sink()
    async with ol.AsyncClient(url, recorder=sink) as client:
        session = client.environment("lab").session(split="test", index=0)
        async with session:
            pass
        sent = len(sink.kinds("request"))
        with pytest.raises(ol.SessionClosedError, match=r"closed; start a new one with env\.session"):
            await session.prompt()
        with pytest.raises(ol.SessionClosedError, match="closed"):
            await session.call("step", {"value": 1})
        with pytest.raises(ol.SessionClosedError, match="already closed"):
            await session.open()
        assert len(sink.kinds("request")) == sent


LEFT_OPEN_IN_ASYNCIO_RUN = """
import asyncio, gc, sys
import ors_lab as ol

async def main():
    client = ol.AsyncClient(sys.argv[1])
    session = client.environment("lab").session(split="test", index=0)
    print((await session.call("step", {"value": 1})).reward)
    idle = ol.AsyncClient(sys.argv[1])  # one more, with connections and no session, dropped before the end
    await idle.environments()
    del idle
    gc.collect()

asyncio.run(main())
"""


def test_a_client_left_open_in_asyncio_run_deletes_its_sessions_without_a_warning(
    counting_server: tuple[ServerProcess, Path],
) -> None:
    """An AsyncClient never closed, in asyncio.run: when the run ends its session is deleted and its connections
    closed, silently (no "Unclosed client session" or "Unclosed connector"); a dropped one closes its own."""
    server, live = counting_server
    made, before = sessions_made(live), live_sessions(live)
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", LEFT_OPEN_IN_ASYNCIO_RUN, server.url],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.strip() == str(common.step_result(1)[1])
    assert sessions_made(live) - made == 1 and live_sessions(live) == before


async def test_session_arguments_are_checked() -> None:
    """session() needs exactly one of task= or split=/index=."""
    async with ol.AsyncClient("http://127.0.0.1:9") as client:
        env = client.environment("lab")
        with pytest.raises(ValueError, match="either task= or"):
            env.session()
        with pytest.raises(ValueError, match="either task= or"):
            env.session(split="test")
        with pytest.raises(ValueError, match="not both"):
            env.session({"id": "x"}, split="test", index=0)


async def test_slow_tool_streams_pings_and_session_keeps_alive(quick_ping_server: Any) -> None:
    """A tool running past the server's ping interval gets `: ping` comments on its stream and session pings
    meanwhile (every 10 s by default; here the server's every 2 s and the client's every 1 s)."""
    url = quick_ping_server.url
    async with ol.AsyncClient(url) as default:
        assert default.ping_interval == 10.0
    sink = Sink()
    async with (
        ol.AsyncClient(url, recorder=sink, ping_interval=1.0) as client,
        client.environment("lab").session(split="test", index=0) as session,
    ):
        result = await session.call("slow", {"seconds": common.QUICK_PING_S + 1})
        assert session.pings >= 1
    assert result.text == "slept"
    comments = sink.kinds("comment")
    assert len(comments) >= 1
    assert comments[0].comment.startswith(" ping - ")


async def test_stream_cut_after_task_id_is_resumed_and_tool_runs_once(url: str, cutting_proxy: Any) -> None:
    """A stream dropped after task_id is resumed with it; the tool ran exactly once."""
    proxy = cutting_proxy(url)
    key = uuid.uuid4().hex
    sink = Sink()
    policy = ol.RetryPolicy(backoff=0.05)
    async with (
        ol.AsyncClient(proxy.url, recorder=sink, retry=policy) as client,
        client.environment("lab").session(split="test", index=0) as session,
    ):
        result = await session.call("tally", {"key": key, "delay": 0.3})
        count = await session.call("tally_count", {"key": key})
    assert result.text == "1"
    assert count.text == "1"
    assert proxy.cuts == 2 and proxy.resumes == 2  # the proxy cuts both calls once
    resume = [r for r in sink.kinds("retry") if r.reason == "resume"]
    assert [r.task_id for r in resume] == [result.task_id, count.task_id]
    bodies = [json.loads(r.body) for r in sink.kinds("request") if httpx2.URL(r.url).path == "/lab/call"]
    assert [b.get("task_id") for b in bodies[:2]] == [None, result.task_id]


async def test_stream_cut_before_task_id_is_not_sent_again(url: str, cutting_proxy: Any) -> None:
    """A stream dropped before task_id raises OutcomeUnknownError and the call is never re-sent."""
    proxy = cutting_proxy(url, cut_before_task_id=True)
    key = uuid.uuid4().hex
    sink = Sink()
    async with ol.AsyncClient(proxy.url, recorder=sink) as client:
        async with client.environment("lab").session(split="test", index=0) as session:
            with pytest.raises(ol.OutcomeUnknownError) as caught:
                await session.call("tally", {"key": key})
            assert caught.value.session_id == session.sid
        calls = [r for r in sink.kinds("request") if httpx2.URL(r.url).path == "/lab/call"]
    assert len(calls) == 1


async def test_resumes_are_bounded(url: str, cutting_proxy: Any) -> None:
    """When every resume drops too, ResumeFailedError comes after the configured number of resumes."""
    proxy = cutting_proxy(url, cut_all=True)
    policy = ol.RetryPolicy(backoff=0.01, resume_attempts=2)
    async with ol.AsyncClient(proxy.url, retry=policy) as client:
        async with client.environment("lab").session(split="test", index=0) as session:
            with pytest.raises(ol.ResumeFailedError) as caught:
                await session.call("step", {"value": 1})
            assert caught.value.task_id is not None
    assert proxy.cuts == 3
