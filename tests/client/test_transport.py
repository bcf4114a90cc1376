"""The wire transport's bounded connections, against the real reference servers: many sessions share a
few connections, counted for real from this process's sockets; a request finding them all in use waits
for one (no timeout but ``call_timeout`` counts the wait); a process with a low fd limit opens several
times more sessions than it has file descriptors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

import httpx2
import pytest

import ors_lab as ol
from ors_lab.client import WireTransport
from ors_lab.client.wire import DEFAULT_CONNECTIONS
from ors_lab.demo.launch import ServerProcess
from tests.conftest import REPO_ROOT
from tests.sockets import sockets_to


class PeakConnections:
    """Samples this process's sockets to ``port`` every few milliseconds on the running loop, leaving out those it
    had already (another test's client, on the session's shared server); ``peak`` is the most seen."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.peak = 0
        self.samples = 0
        self._before: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PeakConnections:
        self._before = sockets_to(self.port)
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, len(sockets_to(self.port) - self._before))
            self.samples += 1
            await asyncio.sleep(0.003)


async def _busy_sessions(client: ol.AsyncClient, sessions: int) -> list[ol.AsyncSession]:
    """Open ``sessions`` sessions at once; ping and call on every one of them at once, twice over."""
    lab = client.environment("lab")
    opened = [lab.session(split="train", index=i % 3, view=False) for i in range(sessions)]
    await asyncio.gather(*(session.open() for session in opened))
    for value in (1, 2):
        results = await asyncio.gather(
            *(session.call("step", {"value": value}) for session in opened),
            *(session.ping() for session in opened),
        )
        assert all(result.ok for result in results[:sessions]), [r for r in results[:sessions] if not r.ok][:3]
    await asyncio.sleep(0.3)  # the keep-alive pings (every 0.05 s) of idle sessions, all at once
    return opened


@pytest.mark.parametrize("connections", [4, None], ids=["connections=4", "unbounded"])
async def test_many_sessions_share_the_bounded_connections(
    reference_server: ServerProcess, connections: int | None
) -> None:
    """60 sessions opened, called and pinged at once over connections=4: no error, never more than 4 sockets
    to the server (unbounded, the same work opens many more)."""
    async with ol.AsyncClient(reference_server.url, connections=connections, ping_interval=0.05) as client:
        async with PeakConnections(reference_server.port) as seen:
            opened = await _busy_sessions(client, 60)
            assert all(session.pings >= 3 for session in opened)  # two asked for, and the keep-alive's
            await asyncio.gather(*(session.close() for session in opened))
    assert seen.samples >= 5  # it looked while the sessions worked
    if connections is None:
        assert seen.peak > 8
    else:
        assert seen.peak == connections  # used to the full, never beyond


async def test_a_request_waits_for_a_connection_whatever_its_timeouts(ors_sdk_server: ServerProcess) -> None:
    """With connections=2 held by two 1 s tool calls, a prompt, a ping and a call wait about 1 s for one, and
    succeed: the 0.1 s connect timeout and the 0.3 s request_timeout do not count the wait."""
    timeout = httpx2.Timeout(10.0, connect=0.1)
    async with ol.AsyncClient(ors_sdk_server.url, connections=2, timeout=timeout, request_timeout=0.3) as client:
        lab = client.environment("lab")
        slow = [lab.session(split="train", index=i, view=False) for i in range(2)]
        waiting = lab.session(split="train", index=2, view=False)
        for session in [*slow, waiting]:
            await session.open()
        calls = [asyncio.create_task(session.call("slow", {"seconds": 1.0})) for session in slow]
        await asyncio.sleep(0.2)  # both streams hold their connection now
        started = time.monotonic()
        prompt, _, step = await asyncio.gather(waiting.prompt(), waiting.ping(), waiting.call("step", {"value": 1}))
        waited = time.monotonic() - started
        assert [result.text for result in await asyncio.gather(*calls)] == ["slept", "slept"]
        assert prompt and waiting.pings == 1 and step.ok and step.reward == 0.1
        assert waited > 0.6  # it did wait for a stream to end


async def test_a_call_cut_by_its_deadline_while_waiting_did_not_leave(ors_sdk_server: ServerProcess) -> None:
    """A call whose call_timeout passes while it waits for a connection is a plain DeadlineExceededError (it
    never left, so the tool did not run), not an outcome unknown."""
    shared = WireTransport(connections=1)
    key = uuid.uuid4().hex
    async with (
        ol.AsyncClient(ors_sdk_server.url, transport=shared) as holder,
        ol.AsyncClient(ors_sdk_server.url, transport=shared, call_timeout=0.3) as waiter,
    ):
        holding = holder.environment("lab").session(split="train", index=0, view=False)
        waiting = waiter.environment("lab").session(split="train", index=0, view=False)
        await holding.open()
        await waiting.open()
        call = asyncio.create_task(holding.call("slow", {"seconds": 1.0}))
        await asyncio.sleep(0.2)
        with pytest.raises(ol.DeadlineExceededError) as raised:
            await waiting.call("tally", {"key": key})
        assert not isinstance(raised.value, ol.OutcomeUnknownError)
        assert "waited for a free connection" in str(raised.value)
        assert (await call).text == "slept"
        assert (await holding.call("tally_count", {"key": key})).text == "0"  # the tool never ran


def test_connections_are_checked_and_belong_to_the_default_transport(ors_sdk_server: ServerProcess) -> None:
    """A connections= that is not a whole number above 0 is refused, and so is one given beside transport=."""
    for wrong in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="connections must be a whole number"):
            ol.Client(ors_sdk_server.url, connections=wrong)  # type: ignore[arg-type]
    for connections in (8, None):
        with pytest.raises(ValueError, match="bound that transport instead"):
            ol.AsyncClient(ors_sdk_server.url, transport=WireTransport(), connections=connections)
    assert ol.AsyncClient(ors_sdk_server.url)._transport.connections == DEFAULT_CONNECTIONS  # type: ignore[attr-defined]
    with ol.Client(ors_sdk_server.url, connections=3) as client:  # the sync twin passes it on
        assert client.aio._transport.connections == 3  # type: ignore[attr-defined]


FD_LIMIT = 256
SESSIONS = 3 * FD_LIMIT

LOW_FD_CHILD = """
import asyncio, json, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, {limit}))
import ors_lab as ol

async def main(url):
    errors = []
    async with ol.AsyncClient(url, connections=64, ping_interval=0.3) as client:
        lab = client.environment("lab")
        sessions = [lab.session(split="train", index=i % 3, view=False) for i in range({sessions})]
        for result in await asyncio.gather(*(s.open() for s in sessions), return_exceptions=True):
            if result is not None:
                errors.append(repr(result))
        await asyncio.sleep(0.5)  # a round of keep-alive pings of every session
        results = await asyncio.gather(*(s.call("step", {{"value": 1}}) for s in sessions), return_exceptions=True)
        errors += [repr(r) for r in results if not isinstance(r, ol.ToolResult) or not r.ok]
        pings = sum(s.pings for s in sessions)
        closed = await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
        errors += [repr(r) for r in closed if r is not None]
    print(json.dumps({{"errors": errors[:5], "error_count": len(errors), "pings": pings,
                      "limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}}))

asyncio.run(main(sys.argv[1]))
"""


def test_a_process_with_256_file_descriptors_opens_768_sessions(ors_sdk_server: ServerProcess) -> None:
    """Under RLIMIT_NOFILE=256, 768 sessions opened at once, pinged, called and closed: 0 errors."""
    child = LOW_FD_CHILD.format(limit=FD_LIMIT, sessions=SESSIONS)
    done = subprocess.run(
        [sys.executable, "-c", child, ors_sdk_server.url], cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=120, check=False, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["limit"] == FD_LIMIT
    assert report["error_count"] == 0, report["errors"]
    assert report["pings"] >= SESSIONS  # every session's keep-alive ran at least once
