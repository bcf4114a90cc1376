"""Replay: a recorded trace served back gives the client exactly what the live server gave."""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2
import pytest

import ors_lab as ol
from ors_lab.replay.forward import ForwardingReplay
from ors_lab.replay.proxy import serve_proxy
from tests.envs import common
from tests.evaluation.policies import expected_reward, lab_policy
from tests.recording.test_proxy import official_client


def script(url: str, transport: Any = None, recorder: Any = None) -> list[Any]:
    """A session-rich script: stateless reads, two sessions, results of every kind."""
    got: list[Any] = []
    with ol.Client(url, transport=transport, recorder=recorder, retry=ol.RetryPolicy(backoff=0.05)) as client:
        got.append(client.environments())
        lab = client.environment("lab")
        got.append([(s.name, s.type) for s in lab.splits()])
        got.append([t.spec for t in lab.tasks("train")])
        got.append(lab.task("test", -1).spec)
        with lab.session(split="train", index=1) as session:
            got.append([b.text for b in session.prompt()])  # type: ignore[union-attr]
            got.append([t.name for t in session.tools()])
            for name, tool_input in (
                ("step", {"value": 2}),
                ("big_output", {"n_chars": 10_000, "fill": " "}),
                ("image", {}),
                ("nope", {}),
                ("submit", {"answer": "Paris"}),
            ):
                result = session.call(name, tool_input)
                got.append((result.ok, result.blocks, result.reward, result.finished, result.error, result.reason))
            try:
                session.call("crash")
            except ol.ToolError as exc:
                got.append(("ToolError", exc.message))
        with client.environment("echo").session(task={"id": "e9", "text": "x"}) as session:
            got.append(session.call("echo", {"text": "hello"}).text)
    return got


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, reference_server: Any) -> tuple[Path, list[Any]]:
    """The script run live against each reference server, recorded."""
    path = tmp_path_factory.mktemp("replay") / f"{reference_server.sdk}.parquet"
    with ol.Recorder(path) as rec:
        live = script(reference_server.url, recorder=rec)
    return path, live


def test_replay_server_gives_the_live_results(recorded: tuple[Path, list[Any]]) -> None:
    """Our client against ReplayServer gets what it got live, and every recorded request is played."""
    path, live = recorded
    with ol.ReplayServer(path, speed=0) as server:
        assert script(server.url) == live
        assert server.unplayed() == []


def test_replay_transport_gives_the_live_results(recorded: tuple[Path, list[Any]]) -> None:
    """The in-process ReplayTransport answers the same, with no socket."""
    path, live = recorded
    transport = ol.ReplayTransport(path)
    assert script("http://replay.invalid", transport=transport) == live
    assert transport.unplayed() == []


def test_replaying_a_replay_records_the_same_trace_shape(recorded: tuple[Path, list[Any]], tmp_path: Path) -> None:
    """A trace recorded against the replay holds the same calls, rewards and events as the original."""
    path, _ = recorded
    again = tmp_path / "again.parquet"
    with ol.ReplayServer(path, speed=0) as server, ol.Recorder(again) as rec:
        script(server.url, recorder=rec)
    before, after = ol.load_trace(path), ol.load_trace(again)
    columns = ["tool", "input", "ok", "reward", "finished", "error", "reason", "outcome", "bytes"]  # not chunks: TCP
    assert before.calls[columns].equals(after.calls[columns])
    kinds = ["event", "data"]
    sse_before = before.events[before.events["kind"] == "event"][kinds].reset_index(drop=True)
    sse_after = after.events[after.events["kind"] == "event"][kinds].reset_index(drop=True)
    ids = sse_before["event"] == "task_id"
    assert sse_before[~ids].equals(sse_after[~ids])
    assert not set(sse_before[ids]["data"]) & set(sse_after[ids]["data"])  # task ids are replaced


@pytest.mark.parametrize(
    ("sdk", "flags"),
    [("ors-sdk", ()), ("openreward", ()), ("openreward", ("--no-variant",))],
    ids=["ors-sdk", "openreward", "openreward-redirects"],
)
def test_official_clients_replay_what_the_proxy_recorded(
    request: pytest.FixtureRequest, tmp_path: Path, sdk: str, flags: tuple[str, ...]
) -> None:
    """An official client's session recorded through the proxy replays to identical results."""
    server = request.getfixturevalue(f"{sdk.replace('-', '_')}_server")
    path = tmp_path / "official.parquet"
    with official_client(sdk, *flags) as run_official:
        with ol.Recorder(path) as rec, serve_proxy(server.url, rec) as url:
            live = run_official(url)
        with ol.ReplayServer(path, speed=0) as replay:
            assert run_official(replay.url) == live
            assert replay.unplayed() == []


def test_mismatch_names_the_request_the_field_and_how_to_record(recorded: tuple[Path, list[Any]]) -> None:
    """An unrecorded request raises ReplayMismatchError naming it, the trace, the field and the fix."""
    path, _ = recorded
    with ol.ReplayServer(path, speed=0) as server, ol.Client(server.url) as client:
        with client.environment("lab").session(split="train", index=1) as session:
            session.prompt()
            session.tools()
            with pytest.raises(ol.ReplayMismatchError) as caught:
                session.call("step", {"value": 3})
    message = str(caught.value)
    assert "POST /lab/call" in message
    assert str(path) in message
    assert "input.value: 3 != recorded 2" in message
    assert 'step({"value":2})' in message
    assert "ors-lab proxy" in message
    assert caught.value.status_code == 400
    error = pickle.loads(pickle.dumps(caught.value))  # its fields cross processes with it
    assert error.asked is not None and error.asked.startswith('POST /lab/call {"name":"step","input":{"value":3}')
    assert (error.differs, error.trace) == ("input.value: 3 != recorded 2", str(path))
    assert len(error.nearest) == 3 and 'step({"value":2})' in error.nearest[0]


def test_a_replay_lists_the_episodes_it_holds(demo_server: Any, tmp_path: Path) -> None:
    """Asked with x-ors-lab-replay: episodes, both faces list the trace's sessions per task index (here,
    with no evaluation's episode rows: the n-th session of a task is its rollout n); a live server does not."""
    path = tmp_path / "sessions.parquet"
    with ol.Recorder(path) as rec, ol.Client(demo_server.url, recorder=rec) as client:
        guessing = client.environment("guessing")
        assert guessing.episodes("test", 2) == [(index, rollout) for index in range(10) for rollout in (0, 1)]
        for index in (3, 0, 3):
            with guessing.session(split="test", index=index) as session:
                session.call("guess", {"number": 50})
    with ol.ReplayServer(path, speed=0) as server, ol.Client(server.url) as client:
        assert client.environment("guessing").episodes("test", 5) == [(0, 0), (3, 0), (3, 1)]
    with ol.Client("http://replay", transport=ol.ReplayTransport(path)) as client:
        assert client.environment("guessing").episodes("test") == [(0, 0), (3, 0)]


def test_a_forwarding_replay_lists_every_task(demo_server: Any, tmp_path: Path) -> None:
    """In the new_episodes mode (ForwardingReplay) tasks=None means every task: what the trace lacks is recorded."""
    path = tmp_path / "one-session.parquet"
    with ol.Recorder(path) as rec, ol.Client(demo_server.url, recorder=rec) as client:
        guessing = client.environment("guessing")
        guessing.num_tasks("test")
        with guessing.session(split="test", index=3) as session:
            session.call("guess", {"number": 50})
    with ol.ReplayServer(path, speed=0) as server, ol.Client(server.url) as client:
        assert client.environment("guessing").episodes("test") == [(3, 0)]
    with ForwardingReplay(ol.load_trace(path), demo_server.url) as replay, ol.Client(replay.url) as client:
        assert client.environment("guessing").episodes("test") == [(index, 0) for index in range(10)]


def test_unknown_task_and_unrecorded_session(recorded: tuple[Path, list[Any]]) -> None:
    """A task no recorded session opened is a mismatch; a session used after delete is 404."""
    path, _ = recorded
    with ol.ReplayServer(path, speed=0) as server, ol.Client(server.url) as client:
        with pytest.raises(ol.ReplayMismatchError, match=r"task\.index: 2 != recorded 1"):
            client.environment("lab").session(split="train", index=2).open()
        session = client.environment("lab").session(split="train", index=1)
        with session:
            session.prompt()
        import httpx2

        assert httpx2.post(f"{server.url}/ping", headers={"X-Session-ID": session.sid}).status_code == 404


def test_repeats_only_when_allowed(recorded: tuple[Path, list[Any]]) -> None:
    """A request asked twice is a mismatch, unless allow_repeats=True."""
    path, _ = recorded

    def twice(server: ol.ReplayServer) -> str:
        with ol.Client(server.url) as client, client.environment("lab").session(split="train", index=1) as session:
            session.prompt()
            return next(b.text for b in session.prompt())  # type: ignore[union-attr]

    with ol.ReplayServer(path, speed=0) as server, pytest.raises(ol.ReplayMismatchError):
        twice(server)
    with ol.ReplayServer(path, speed=0, allow_repeats=True) as server:
        assert twice(server) == common.lab_prompt(common.LAB_TASKS["train"][1])


def test_unplayed_interactions_are_reported(recorded: tuple[Path, list[Any]]) -> None:
    """Recorded requests never asked for are listed, in order."""
    path, _ = recorded
    with ol.ReplayServer(path, speed=0) as server, ol.Client(server.url) as client:
        client.environments()
        unplayed = server.unplayed()
    assert unplayed[0].startswith("#") and "/lab/splits" in unplayed[0]
    assert any("submit" in line for line in unplayed)


def _calls(url: str, faults: list[str], recorder: Any = None) -> list[Any]:
    with ol.Client(url, recorder=recorder, retry=ol.RetryPolicy(backoff=0.05)) as client:
        with client.environment("echo").session(split="dev", index=0) as session:
            return [session.call("echo", {"text": t}).text for t in ("a", "b")]


@pytest.fixture(scope="module")
def echo_trace(tmp_path_factory: pytest.TempPathFactory, ors_sdk_server: Any) -> Path:
    path = tmp_path_factory.mktemp("echo") / "echo.parquet"
    with ol.Recorder(path) as rec:
        assert _calls(ors_sdk_server.url, [], rec) == ["a", "b"]
    return path


class Sink:
    """Keeps the events the client publishes, in order."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)

    def kinds(self, kind: str) -> list[Any]:
        return [event for event in self.events if event.kind == kind]


def test_fault_cut_is_resumed_from_the_recorded_result(echo_trace: Path) -> None:
    """cut:1 drops the stream after task_id; the client resumes with the replay's task id."""
    sink = Sink()
    with ol.ReplayServer(echo_trace, speed=0, faults=["cut:1,tool=echo,times=0"]) as server:
        assert _calls(server.url, [], sink) == ["a", "b"]
    resumes = [e for e in sink.kinds("retry") if e.reason == "resume"]
    assert len(resumes) == 2
    bodies = [json.loads(e.body) for e in sink.kinds("request") if e.url.endswith("/call")]
    assert [b.get("task_id") for b in bodies] == [None, resumes[0].task_id, None, resumes[1].task_id]


@pytest.mark.parametrize(("fault", "waits"), [("status:429", 1.0), ("status:503-starting", 1.0)])
def test_fault_status_before_the_stream_is_retried(echo_trace: Path, fault: str, waits: float) -> None:
    """Injected 429/503-starting (they prove the tool did not run) are retried, honouring Retry-After, and then
    the recording answers."""
    sink = Sink()
    with ol.ReplayServer(echo_trace, speed=0, faults=[fault]) as server:
        assert _calls(server.url, [], sink) == ["a", "b"]
    statuses = [e.status for e in sink.kinds("response") if e.call == 1]
    assert statuses[0] == int(fault.split(":")[1][:3])
    assert statuses[-1] == 200
    retry = sink.kinds("retry")[0]
    assert retry.backoff == (waits or 0.05)


@pytest.mark.parametrize("status", [500, 502])
def test_fault_5xx_is_an_unknown_outcome(echo_trace: Path, status: int) -> None:
    """An injected 5xx to a first /call is not retried (the tool may have run): OutcomeUnknownError."""
    with ol.ReplayServer(echo_trace, speed=0, faults=[f"status:{status}"]) as server:
        with pytest.raises(ol.OutcomeUnknownError) as c:
            _calls(server.url, [])
    assert c.value.status_code == status


def test_fault_malformed_and_stall(echo_trace: Path) -> None:
    """malformed breaks the end payload (MalformedStreamError); stall delays the stream."""
    with ol.ReplayServer(echo_trace, speed=0, faults=["malformed"]) as server:
        with pytest.raises(ol.MalformedStreamError, match="not a valid RunToolOutput"):
            _calls(server.url, [])
    with ol.ReplayServer(echo_trace, speed=0, faults=["stall:0.6"]) as server:
        started = time.monotonic()
        assert _calls(server.url, []) == ["a", "b"]
        assert time.monotonic() - started >= 0.6


@pytest.mark.parametrize(
    ("text", "message"),
    [("boom", "unknown fault 'boom'"), ("cut", "needs a value"), ("cut:x", "number of events"),
     ("status:abc", "HTTP status"), ("stall:1,who=me", "tool=NAME or times=N")],
)  # fmt: skip
def test_bad_faults_are_refused(text: str, message: str) -> None:
    """A malformed fault string raises ValueError saying what is valid."""
    with pytest.raises(ValueError, match=message):
        ol.Fault.parse(text)


def test_bad_arguments(echo_trace: Path) -> None:
    """Only 127.0.0.1 is served; speed is not negative; a missing trace is a TraceFormatError."""
    with pytest.raises(ValueError, match=r"127\.0\.0\.1"):
        ol.ReplayServer(echo_trace, host="0.0.0.0")
    with pytest.raises(ValueError, match="speed"):
        ol.ReplayServer(echo_trace, speed=-1)
    with pytest.raises(ol.TraceFormatError):
        ol.ReplayServer(echo_trace.with_name("missing.parquet"))


SLOW_S = common.QUICK_PING_S + 0.5
"""How long the slow call runs: one ping, then half a second to its end."""


@pytest.fixture(scope="module")
def slow_trace(tmp_path_factory: pytest.TempPathFactory, quick_ping_ors_sdk_server: Any) -> Path:
    """A call that ran SLOW_S (2.5 s), with its ping at QUICK_PING_S (2 s)."""
    path = tmp_path_factory.mktemp("slow") / "slow.parquet"
    with ol.Recorder(path) as rec, ol.Client(quick_ping_ors_sdk_server.url, recorder=rec) as client:
        with client.environment("lab").session(split="test", index=0) as session:
            session.call("slow", {"seconds": SLOW_S})
    return path


def _ping_and_end(url: str, faults: list[str] | None = None) -> tuple[list[float], float]:
    sink = Sink()
    with ol.Client(url, recorder=sink) as client, client.environment("lab").session(split="test", index=0) as s:
        started = time.monotonic()
        assert s.call("slow", {"seconds": SLOW_S}).text == "slept"
    pings = [e.t_ns / 1e9 - started for e in sink.kinds("comment")]
    end = sink.kinds("result")[0].t_ns / 1e9 - started
    return pings, end


@pytest.mark.serial  # wall-clock timing
def test_timing_is_replayed_at_speed(slow_trace: Path) -> None:
    """At speed 1 the ping and end come when they came; at speed 10 ten times sooner; no-pings drops it."""
    recorded = ol.load_trace(slow_trace).events
    head = recorded[recorded["kind"] == "response"]
    call_head = head[head["call"] == 1]["t_ns"].iloc[0]
    ping_ns = recorded[recorded["kind"] == "comment"]["t_ns"].iloc[0] - call_head
    with ol.ReplayServer(slow_trace, speed=1.0) as server:
        pings, end = _ping_and_end(server.url)
    assert len(pings) == 1
    assert abs(pings[0] - ping_ns / 1e9) < 0.1  # a loaded machine's scheduling: tens of ms late
    assert SLOW_S - 0.1 < end < SLOW_S + 0.2
    with ol.ReplayServer(slow_trace, speed=10.0) as server:
        pings, end = _ping_and_end(server.url)
    assert abs(pings[0] - ping_ns / 1e10) < 0.05
    assert SLOW_S / 10 - 0.05 < end < SLOW_S / 10 + 0.15
    with ol.ReplayServer(slow_trace, speed=0, faults=["no-pings"]) as server:
        pings, end = _ping_and_end(server.url)
    assert pings == []
    assert end < 0.5


def test_replay_command_serves_a_trace_until_terminated(echo_trace: Path) -> None:
    """`ors-lab replay TRACE --speed 0 --fault ...` serves the trace; SIGTERM stops it and lists what went unplayed."""
    import os
    import re
    import signal
    import subprocess
    import sys

    fault = "status:503-starting"
    cmd = [sys.executable, "-m", "ors_lab.cli", "replay", str(echo_trace), "--speed", "0", "--fault", fault]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    with proc.stdout:
        try:
            found = re.search(r"http://127\.0\.0\.1:\d+", proc.stdout.readline())
            assert found
            with ol.Client(found.group(0), retry=ol.RetryPolicy(backoff=0.05)) as client:
                with client.environment("echo").session(split="dev", index=0) as session:
                    assert session.call("echo", {"text": "a"}).text == "a"  # after the injected 503 starting
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            rest = proc.stdout.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "1 recorded requests were not played" in rest
    assert 'echo({"text":"b"})' in rest


def test_replay_command_refuses_a_bad_fault(echo_trace: Path) -> None:
    """A malformed --fault is a usage error naming the valid kinds."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "ors_lab.cli", "replay", str(echo_trace), "--fault", "explode"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "unknown fault 'explode'" in done.stderr


def test_replay_transport_serves_a_sync_httpx2_client(echo_trace: Path) -> None:
    """ReplayTransport also answers a plain sync httpx2.Client: JSON, and SSE read to the end."""
    import httpx2

    with httpx2.Client(transport=ol.ReplayTransport(echo_trace), base_url="http://replay") as http:
        unrecorded = http.get("/list_environments")  # this trace never asked for it
        assert (unrecorded.status_code, unrecorded.headers["x-ors-lab-replay"]) == (400, "mismatch")
        sid = {"X-Session-ID": "mine"}
        created = http.post("/create", headers=sid, json={"env_name": "echo", "split": "dev", "index": 0})
        assert created.json() == {"sid": "mine"}
        body = http.post("/echo/call", headers=sid, json={"name": "echo", "input": {"text": "a"}}).text
    assert body.startswith("event: task_id\r\ndata: ")
    assert '"text":"a"' in body
    assert body.endswith("\r\n\r\n")


# -- a replay of an evaluation, explored -----------------------------------------------------------------


def _described(client: ol.Client) -> dict[str, Any]:
    """What a notebook asks of a server about `lab`: its environments, splits, tools, and train tasks 0 and 2."""
    lab = client.environment("lab")
    return {"environments": client.environments(), "splits": lab.splits(), "tools": lab.tools(),
            "tasks": [lab.task("train", index) for index in (0, 2)]}  # fmt: skip


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory, reference_server: Any) -> tuple[Path, dict[str, Any]]:
    """An evaluation of lab's train tasks 0 and 2 on each reference server, recorded (its own trace, nothing
    but the run), and what the live server says of lab."""
    path = tmp_path_factory.mktemp("evaluated") / f"{reference_server.sdk}.parquet"
    with ol.Client(reference_server.url) as client:
        live = _described(client)
        ol.evaluate(client.environment("lab"), lab_policy, split="train", tasks=[0, 2], rollouts=2, record=path,
                    progress=False)  # fmt: skip
    return path, live


@pytest.mark.parametrize("face", ["ReplayServer", "ReplayTransport"])
def test_a_replayed_evaluation_answers_what_describes_its_environment(
    evaluated: tuple[Path, dict[str, Any]], face: str
) -> None:
    """A replay of an evaluation's trace answers environments(), splits(), tools() and task() of the tasks it
    ran as the live server did, for a notebook exploring it."""
    path, live = evaluated
    if face == "ReplayServer":
        with ol.ReplayServer(path, speed=0) as server, ol.Client(server.url) as client:
            assert _described(client) == live
    else:
        with ol.Client("http://replay.invalid", transport=ol.ReplayTransport(path)) as client:
            assert _described(client) == live


def test_an_evaluation_describes_its_environment_once_per_run(evaluated: tuple[Path, dict[str, Any]]) -> None:
    """The trace of one run of 4 episodes holds one request for the environments, the splits and the tools,
    and one for each task it ran, outside any session."""
    path, _ = evaluated
    table = ol.load_trace(path).table
    rows = [row for row in table.to_pylist() if row["kind"] == "request" and row["session_id"] is None]
    asked = Counter(f"{row['method']} {row['url'].split('/', 3)[3]}" for row in rows)
    described = ("GET list_environments", "GET lab/splits", "GET lab/tools", "POST lab/task")
    assert [asked[what] for what in described] == [1, 1, 1, 2]


class FirstCreateLate(httpx2.AsyncBaseTransport):
    """A transport that holds back the first ``/create`` of each task 0.3 s, so its other rollouts' overtake it."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner
        self.seen: set[tuple[Any, Any]] = set()
        self.overtaken = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/create":
            body = json.loads(request.content)
            task = (body.get("split"), body.get("index"))
            if task not in self.seen:
                self.seen.add(task)
                self.overtaken += 1
                await asyncio.sleep(0.3)
        return await self.inner.handle_async_request(request)


def test_each_rollout_gets_its_own_recorded_session_whatever_the_order(ors_sdk_server: Any, tmp_path: Path) -> None:
    """A replay gives an evaluation's episode its own rollout's recorded session, though the /creates of a
    task's rollouts come in another order than when recorded (lab_policy answers right on even rollouts
    and wrong on odd ones: a session of the other rollout would meet a call it never recorded)."""
    path = tmp_path / "run.parquet"
    with ol.Client(ors_sdk_server.url) as client:
        recorded = ol.evaluate(client.environment("lab"), lab_policy, split="train", tasks=[0, 2], rollouts=3,
                               concurrency=1, record=path, progress=False)  # fmt: skip
    late = FirstCreateLate(ol.ReplayTransport(path, speed=0))
    with ol.Client("http://replay.invalid", transport=late) as client:
        again = ol.evaluate(client.environment("lab"), lab_policy, split="train", tasks=[0, 2], rollouts=3,
                            concurrency=6, progress=False)  # fmt: skip
    assert late.overtaken == 2
    assert again.errors.empty, again.errors.to_dict("records")
    columns = ["task_index", "rollout", "reward"]
    assert again.episodes[columns].sort_values(columns[:2]).to_dict("records") == recorded.episodes[
        columns
    ].sort_values(columns[:2]).to_dict("records")
    assert sorted(again.episodes["reward"]) == sorted(expected_reward("train", i, r) for i in (0, 2) for r in range(3))
