"""Evaluations on Ray (``ors_lab.evaluation.ray``): one loopback-only local cluster for the session, real
reference servers, real traces, and one two-worker backend (`two`) shared by the tests that need no
backend of their own: its workers start once (seconds each) and serve run after run, as a notebook's do.
The same run gives the same result here and on Ray; the trace is one, naming each session's worker; a
killed worker, Ctrl-C and resume behave as the module docstring says."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import pyarrow.compute as pc
import pytest

import ors_lab as ol
from ors_lab import AgentNotShippableError, AsyncClient, Client, EvaluationInterrupted
from ors_lab.demo.launch import ServerProcess
from ors_lab.evaluation import aevaluate, evaluate
from ors_lab.evaluation.ray import RayBackend, WorkerPool
from ors_lab.events import Event
from ors_lab.feed import FeedReader
from ors_lab.viewer.feed_state import FeedState
from tests.envs.common import ECHO_TASKS, LAB_TASKS
from tests.envs.counting_envs import live_sessions
from tests.evaluation.policies import (
    Curious,
    echo_once,
    expected_reward,
    lab_policy,
    slow_lab_policy,
    slower_lab_policy,
    task_policy,
)
from tests.notebook.test_run_view import figures

pytestmark = pytest.mark.usefixtures("ray_cluster")  # serial, with every test that starts Ray (tests/conftest.py: RAY)


@pytest.fixture(scope="module")
def two(ray_cluster: Any) -> Iterator[RayBackend]:
    """Two workers on the module's 2-CPU cluster, kept for every test of the module that uses them."""
    with RayBackend(workers=2, cpus=0.5) as backend:
        yield backend


@pytest.fixture(scope="module")
def spread(ray_cluster: Any, ors_sdk_server: ServerProcess, openreward_server: ServerProcess) -> Iterator[RayBackend]:
    """Two workers, w0 on the ors-sdk server and w1 on the openreward one (both serve the same `lab`): for
    the tests that spread the workers, or kill one (not one of `two`'s)."""
    with RayBackend(workers=2, cpus=0.5, servers=[ors_sdk_server.url, openreward_server.url]) as backend:
        yield backend


TIMES = ("started", "duration_s", "session_id")
"""What differs between two runs of the same episodes: when and where they ran."""


def _ray_pids() -> set[int]:
    """This process (a Ray driver listens too) and every process it started: Ray's daemons and workers,
    and the session's reference servers (which listen on loopback as well)."""
    me = psutil.Process()
    return {me.pid, *(child.pid for child in me.children(recursive=True))}


def test_every_ray_listener_is_on_loopback(ray_cluster: Any) -> None:
    """`ss -ltnp`: every listening socket of the Ray processes this test session started is bound to 127.0.0.1
    (none to 0.0.0.0, ::, or an external address), and there are such sockets (the GCS, the raylet)."""
    pids = _ray_pids()
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    mine: list[tuple[str, str]] = []
    for line in out.splitlines():
        owners = {int(pid) for pid in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            names = ",".join(re.findall(r'\("([^"]+)"', line))
            mine.append((line.split()[3], names))
    daemons = {name for _, name in mine if "gcs_server" in name or "raylet" in name}
    assert daemons, f"no listener of Ray's daemons found among {mine}"
    loopback = ("127.0.0.1:", "[::ffff:127.0.0.1]:")  # the second: gRPC's IPv6 socket bound to 127.0.0.1 itself
    assert [address for address, _ in mine if not address.startswith(loopback)] == [], mine


def test_import_ors_lab_never_imports_ray() -> None:
    """`import ors_lab`, and `ol.RayBackend`, `ol.evaluate`: Ray stays unimported until a Ray run starts."""
    code = "import sys, ors_lab as ol; ol.RayBackend(workers=2); ol.evaluate; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_ray_and_local_runs_give_the_same_result(
    reference_server: ServerProcess, tmp_path: Path, two: RayBackend
) -> None:
    """The same evaluation here and on two Ray workers: the same episode rewards and outcomes, the same
    `tasks` table; the Ray run's trace is one file whose every session's rows name one worker, both used."""
    path = tmp_path / "ray.parquet"
    with Client(reference_server.url) as client:
        lab = client.environment("lab")
        local = evaluate(lab, lab_policy, split="train", rollouts=6, concurrency=4, progress=False)
        on_ray = evaluate(lab, lab_policy, split="train", rollouts=6, concurrency=4, progress=False, record=path,
                          backend=two)  # fmt: skip
    pd.testing.assert_frame_equal(local.episodes.drop(columns=list(TIMES)), on_ray.episodes.drop(columns=list(TIMES)))
    pd.testing.assert_frame_equal(local.tasks, on_ray.tasks)
    keys = zip(on_ray.episodes["task_index"], on_ray.episodes["rollout"], strict=True)
    assert list(on_ray.episodes["reward"]) == [expected_reward("train", i, r) for i, r in keys]
    trace = ol.load_trace(path)
    assert not trace.partial and not path.with_name(path.name + ".parts").exists()
    table = trace.table.filter(pc.is_valid(trace.table["session_id"]))
    workers = table.group_by("session_id").aggregate([("worker", "count_distinct"), ("worker", "min")])
    assert set(workers["worker_count_distinct"].to_pylist()) == {1}  # one worker per session, on every row
    assert pc.all(pc.is_valid(table["worker"])).as_py()
    assert set(workers["worker_min"].to_pylist()) == {"w0", "w1"}
    pd.testing.assert_frame_equal(trace.episodes.drop(columns=list(TIMES)), on_ray.episodes.drop(columns=list(TIMES)))


def test_ray_episodes_get_their_tasks_the_split_and_record_what_their_agents_ask(
    ors_sdk_server: ServerProcess, tmp_path: Path, two: RayBackend
) -> None:
    """On Ray workers as here: each episode is given its task (asked once per task by each worker at most),
    what its agent asks through its episode's client is in the trace and replays, and without split= an
    environment's only split is run."""
    path = tmp_path / "ray.parquet"
    with Client(ors_sdk_server.url) as client:
        lab = client.environment("lab")
        told = evaluate(lab, task_policy, split="train", rollouts=4, progress=False, record=path, backend=two)
        curious = evaluate(lab, Curious(), split="test", progress=False, record=path, backend=two)
        echo = evaluate(client.environment("echo"), echo_once, progress=False, backend=two)
    assert told.errors.empty and set(told.episodes["reward"]) == {1.0}
    table = ol.load_trace(path).table
    requests = table.filter(pc.equal(table["kind"], "request"))
    asked = Counter(url.split("/", 3)[3] for url in requests["url"].to_pylist())
    bodies = [json.loads(body) for body, url in zip(requests["body"].to_pylist(), requests["url"].to_pylist(),
                                                     strict=True) if url.endswith("/lab/task")]  # fmt: skip
    train = Counter(body["index"] for body in bodies if body["split"] == "train")
    assert set(train) == {0, 1, 2} and max(train.values()) <= 2  # each train task asked at most once per worker
    assert curious.errors.empty and asked["lab/task_range"] == len(LAB_TASKS["test"])
    with ol.ReplayServer(path, speed=0) as server, Client(server.url) as client:
        again = evaluate(client.environment("lab"), Curious(), split="test", progress=False)
    assert again.errors.empty, list(again.errors["error"])
    assert list(again.episodes["reward"]) == list(curious.episodes["reward"])
    assert echo.split == "dev" and list(echo.episodes["split"]) == ["dev"] * len(ECHO_TASKS["dev"])


class LockedAgent:
    """A policy holding a lock: it does not pickle."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, obs: Any) -> Any:
        return lab_policy(obs)


def test_an_agent_that_does_not_pickle_fails_before_any_work(
    ors_sdk_server: ServerProcess, tmp_path: Path, two: RayBackend
) -> None:
    """A clear typed error (also a TypeError), raised before a trace or a session is made; a factory ships it.
    `close()` (here the end of the backend's `with` block) ends the backend's worker processes."""
    path = tmp_path / "run.parquet"
    with Client(ors_sdk_server.url) as client:
        lab = client.environment("lab")
        with pytest.raises(AgentNotShippableError, match="LockedAgent cannot be sent to Ray workers") as caught:
            evaluate(lab, LockedAgent(), split="train", record=path, progress=False, backend=two)
        assert isinstance(caught.value, TypeError)
        assert not path.exists() and not path.with_name(path.name + ".parts").exists()
        with RayBackend(workers=1, cpus=0.5, agent_factory=LockedAgent) as factory:
            made = evaluate(lab, LockedAgent(), split="train", rollouts=2, progress=False, backend=factory)
            worker = psutil.Process(next(iter(factory.pool.pids[0])))
    assert list(made.episodes["reward"]) == [expected_reward("train", i, r) for i in range(3) for r in range(2)]
    _, alive = psutil.wait_procs([worker], timeout=10)  # the `with` block's end closed the backend: its worker ended
    assert alive == [] and factory.pool.actors == []


def _episode_rows(path: Path) -> list[dict[str, Any]]:
    table = ol.load_trace(path).table
    return [json.loads(text) for text in table.filter(pc.equal(table["kind"], "episode"))["data"].to_pylist()]


class EpisodesEnded:
    """``subscribe=``: ``reached`` is set once ``count`` episodes have ended (on the run's loop)."""

    def __init__(self, count: int) -> None:
        self.count, self.seen = count, 0
        self.reached = asyncio.Event()

    def __call__(self, event: Event) -> None:
        self.seen += event.kind == "episode"
        if self.seen >= self.count:
            self.reached.set()


async def test_a_killed_worker_loses_only_its_unfinished_episodes(
    ors_sdk_server: ServerProcess, tmp_path: Path, spread: RayBackend
) -> None:
    """SIGKILL one of two workers mid-run: its unfinished episodes are recorded failed and run again; the
    result has every pair once, right; no pair finished without an error twice; Ray restarts it."""
    path = tmp_path / "run.parquet"
    ended = EpisodesEnded(6)
    backend = spread
    async with AsyncClient(ors_sdk_server.url) as client:
        run = asyncio.create_task(aevaluate(client.environment("lab"), slower_lab_policy, split="test", rollouts=20,
                                            concurrency=4, record=path, progress=False, subscribe=ended,
                                            backend=backend))  # fmt: skip
        await asyncio.wait_for(ended.reached.wait(), timeout=120)
        pids = [max(pids) for pids in backend.pool.pids]
        assert len(set(pids)) == 2, pids
        os.kill(pids[0], signal.SIGKILL)
        result = await asyncio.wait_for(run, timeout=120)
    assert len(backend.pool.pids[0]) == 2  # w0 restarted: a second process
    keys = list(zip(result.episodes["task_index"], result.episodes["rollout"], strict=True))
    assert sorted(keys) == [(i, r) for i in range(2) for r in range(20)]
    assert list(result.episodes["reward"]) == [expected_reward("test", i, r) for i, r in keys]
    assert result.errors.empty
    rows = _episode_rows(path)
    lost = [row for row in rows if row["error_type"] == "WorkerDiedError"]
    assert lost, "the killed worker had episodes running"
    good = Counter((row["task_index"], row["rollout"]) for row in rows if row["error"] is None)
    assert good == dict.fromkeys(keys, 1)


class HeldPolicy:
    """`lab_policy` once the file `go` exists: until then every episode waits at its first step, session open."""

    def __init__(self, go: Path) -> None:
        self.go = go

    async def __call__(self, obs: Any) -> Any:
        while not self.go.exists():  # noqa: ASYNC110  the test, in another process, makes the file
            await asyncio.sleep(0.01)
        return lab_policy(obs)


class Started:
    """``subscribe=``: ``reached`` is set once ``count`` episodes have started (their `start` reached the driver)."""

    def __init__(self, count: int) -> None:
        self.count, self.seen = count, 0
        self.reached = asyncio.Event()

    def __call__(self, event: Event) -> None:
        self.seen += event.kind == "start"
        if self.seen >= self.count:
            self.reached.set()


async def test_a_killed_worker_s_open_sessions_are_deleted_by_the_driver(
    counting_server: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    """SIGKILL a worker while its 4 sessions are open on the server (their `start` reached the driver): the driver
    deletes them rather than leave them to the server's 900 s reaper; once the run has ended the server holds none of
    the run's sessions, and the trace has each closed."""
    server, live = counting_server
    before = live_sessions(live)
    path, go = tmp_path / "run.parquet", tmp_path / "go"
    started = Started(4)
    with RayBackend(workers=1, cpus=0, shard=2) as backend:  # its own: killing one of `two`'s tells on other tests
        async with AsyncClient(server.url) as client:
            run = asyncio.create_task(aevaluate(client.environment("lab"), HeldPolicy(go), split="test", rollouts=2,
                                                concurrency=4, record=path, progress=False, subscribe=started,
                                                backend=backend))  # fmt: skip
            reached = asyncio.ensure_future(started.reached.wait())  # all 4 pairs: no other starts before go
            await asyncio.wait({reached, run}, timeout=120, return_when=asyncio.FIRST_COMPLETED)
            assert reached.done(), (started.seen, run.done() and run.exception())
            while len(live_sessions(live) - before) < 4:  # the server's count is a file
                assert not run.done(), run
                await asyncio.sleep(0.01)
            os.kill(max(backend.pool.pids[0]), signal.SIGKILL)
            go.touch()  # the episodes run again on the restarted worker, and end
            result = await asyncio.wait_for(run, timeout=120)
    lost = [row for row in _episode_rows(path) if row["error_type"] == "WorkerDiedError"]
    assert len(lost) == 4
    assert live_sessions(live) - before == set()
    sessions = ol.load_trace(path).sessions
    assert len(sessions) == 8 and sessions["closed"].notna().all()
    keys = list(zip(result.episodes["task_index"], result.episodes["rollout"], strict=True))
    assert sorted(keys) == [(i, r) for i in range(2) for r in range(2)] and result.errors.empty


async def test_cancelling_stops_every_worker_and_resume_finishes_the_run(
    ors_sdk_server: ServerProcess, tmp_path: Path, two: RayBackend
) -> None:
    """Cancel a Ray run part-way: every session deleted, the trace whole; `resume=True` on Ray runs only
    what the trace does not hold finished, each pair once, on the same worker processes (kept between runs)."""
    path = tmp_path / "run.parquet"
    ended = EpisodesEnded(8)
    async with AsyncClient(ors_sdk_server.url) as client:
        lab = client.environment("lab")
        run = asyncio.create_task(aevaluate(lab, slow_lab_policy, split="train", rollouts=20, concurrency=4,
                                            record=path, progress=False, subscribe=ended, backend=two))  # fmt: skip
        await asyncio.wait_for(ended.reached.wait(), timeout=120)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        trace = ol.load_trace(path)
        assert not trace.partial
        sessions = trace.sessions
        assert len(sessions) and sessions["closed"].notna().all()  # every session opened was deleted
        done = sum(1 for row in _episode_rows(path) if row["error"] is None)
        assert 8 <= done < 60
        processes = [set(pids) for pids in two.pool.pids]
        result = await aevaluate(lab, lab_policy, split="train", rollouts=20, record=path, progress=False,
                                 backend=two)  # fmt: skip
    assert [set(pids) for pids in two.pool.pids] == processes and all(len(pids) == 1 for pids in processes)
    assert result.resumed == done
    keys = list(zip(result.episodes["task_index"], result.episodes["rollout"], strict=True))
    assert sorted(keys) == [(i, r) for i in range(3) for r in range(20)]
    assert list(result.episodes["reward"]) == [expected_reward("train", i, r) for i, r in keys]
    good = Counter((row["task_index"], row["rollout"]) for row in _episode_rows(path) if row["error"] is None)
    assert good == dict.fromkeys(keys, 1)


def test_the_live_feed_shows_a_ray_run_as_a_local_one(ors_sdk_server: ServerProcess, two: RayBackend) -> None:
    """A feed reader of a Ray run ends with the run's own figures; `subscribe=` saw every episode."""
    state = FeedState("")
    seen: list[Event] = []
    with Client(ors_sdk_server.url) as client, ol.Feed(0) as feed:
        reader = FeedReader(feed.url, state.take).start()
        reader.wait_ready()
        result = evaluate(client.environment("lab"), lab_policy, split="train", rollouts=4, feed=feed,
                          progress=False, subscribe=seen.append, backend=two)  # fmt: skip
    assert reader.wait(10) and reader.status == "ended"  # the feed closed: the reader reads to its end
    assert state.run is not None
    snap: dict[str, Any] = state.run.snapshot()
    assert {name: snap[name] for name in ("done", "mean", "stderr", "pass", "errors", "tokens")} == figures(result)
    assert sum(event.kind == "episode" for event in seen) == len(result) == 12


def test_servers_spread_the_workers_over_several_ors_servers(
    ors_sdk_server: ServerProcess, openreward_server: ServerProcess, tmp_path: Path, spread: RayBackend
) -> None:
    """`servers=[a, b]`: worker w0 opens its sessions on a, w1 on b (the trace's /create URLs say so)."""
    path = tmp_path / "run.parquet"
    with Client(ors_sdk_server.url) as client:
        result = evaluate(client.environment("lab"), lab_policy, split="train", rollouts=4, record=path,
                          progress=False, backend=spread)  # fmt: skip
    assert list(result.episodes["reward"]) == [expected_reward("train", i, r) for i in range(3) for r in range(4)]
    table = ol.load_trace(path).table
    creates = table.filter(pc.and_(pc.equal(table["kind"], "request"), pc.match_substring(table["url"], "/create")))
    where = {(w, url.split("/create")[0]) for w, url in zip(creates["worker"].to_pylist(), creates["url"].to_pylist(),
                                                               strict=True)}  # fmt: skip
    assert where == {("w0", ors_sdk_server.url), ("w1", openreward_server.url)}


@pytest.mark.usefixtures("sigint_raises")
def test_ctrl_c_on_a_sync_ray_run_stops_every_worker_and_keeps_the_partial_result(
    counting_server: tuple[ServerProcess, Path], two: RayBackend
) -> None:
    """A real SIGINT to this process once the first episode has ended: `evaluate` raises
    `EvaluationInterrupted` (a KeyboardInterrupt) as a local run does, with the partial result (also
    `last_result()`); every worker stops its episodes and the server holds none of the run's sessions."""
    import ray

    server, live = counting_server
    before = live_sessions(live)
    interrupted = threading.Event()

    def ctrl_c_after_the_first_episode(event: Event) -> None:
        if event.kind == "episode" and not interrupted.is_set():
            interrupted.set()
            threading.Timer(0.0, os.kill, (os.getpid(), signal.SIGINT)).start()

    with Client(server.url) as client, pytest.raises(EvaluationInterrupted) as caught:
        evaluate(client.environment("lab"), slow_lab_policy, split="train", rollouts=20, concurrency=4,
                 progress=False, subscribe=ctrl_c_after_the_first_episode, backend=two)  # fmt: skip
    partial = caught.value.result
    assert partial is not None and partial is ol.last_result()
    assert 1 <= len(partial) < 60
    ended = partial.episodes[partial.episodes["finish_reason"].notna()]  # as a local run's: every episode begun
    keys = zip(ended["task_index"], ended["rollout"], strict=True)
    assert len(ended) >= 1 and list(ended["reward"]) == [expected_reward("train", i, r) for i, r in keys]
    assert ray.get([actor.running.remote() for actor in two.pool.actors], timeout=30) == [0, 0]
    assert live_sessions(live) - before == set()


class SlowPool(WorkerPool):
    """A pool whose actors are made slowly: a thread about to make one first waits (2 s at most) for another thread
    to be about to make one too, so two threads readying the pool at once both get that far unless one waits."""

    def __init__(self) -> None:
        super().__init__()
        self.both = threading.Barrier(2)
        self.made = 0

    def _make(self, backend: RayBackend, n: int) -> Any:
        with contextlib.suppress(threading.BrokenBarrierError):  # the other thread did not come: it waits its turn
            self.both.wait(timeout=2)
        self.made += 1
        return super()._make(backend, n)


def test_two_threads_starting_runs_at_once_make_one_set_of_workers() -> None:
    """Two threads readying one backend's workers at the same moment (each run's start does): one set of
    actors is made, and both runs get it."""
    backend = RayBackend(workers=1, cpus=0.5)
    pool = SlowPool()
    go = threading.Barrier(2)
    got: list[list[Any]] = []

    def start_a_run() -> None:
        go.wait(timeout=10)
        got.append(list(pool.ready(backend)))

    threads = [threading.Thread(target=start_a_run) for _ in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert pool.made == 1 and len(pool.actors) == 1
        assert len(got) == 2 and got[0] == got[1] == pool.actors
    finally:
        pool.close()


def test_bad_backend_arguments_fail_clearly() -> None:
    with pytest.raises(ValueError, match="workers must be 1 or more"):
        RayBackend(workers=0)
    with pytest.raises(ValueError, match="restarts must be 0 or more"):
        RayBackend(restarts=-1)


def test_llm_replay_answers_the_workers_agents_from_the_trace(two: RayBackend) -> None:
    """On Ray, `llm_replay=` reaches every worker: each opens the trace and its episodes' `llm_client()` answer
    from it (the committed Claude run, an agent of its own on Anthropic's SDK), with the rewards as recorded
    and the model's thinking on the run's stream."""
    from recordings.claude_agent import ClaudeLoop

    path = Path(__file__).resolve().parents[2] / "recordings" / "claude-arithmetic.parquet"
    trace = ol.load_trace(path)
    thinking: list[str] = []
    with ol.ReplayServer(trace, speed=0) as server, Client(server.url) as client:
        arithmetic = client.environment("arithmetic")
        def think(event: Event) -> None:
            if event.type == "reasoning-delta":
                thinking.append(event.delta)  # type: ignore[attr-defined]

        result = evaluate(arithmetic, ClaudeLoop("scripted-claude"), split="test", rollouts=2, progress=False,
                          backend=two, llm_replay=path, subscribe=think)  # fmt: skip
        with pytest.raises(TypeError, match="on Ray, llm_replay takes a trace's path"):
            evaluate(arithmetic, ClaudeLoop("x"), split="test", progress=False, backend=two,
                     llm_replay=ol.AgentReplayTransport(trace))  # fmt: skip
    keys = ["task_index", "rollout"]
    replayed = result.episodes.sort_values(keys).reset_index(drop=True)
    recorded = trace.episodes.sort_values(keys).reset_index(drop=True)
    assert list(replayed["reward"]) == list(recorded["reward"]) and replayed["error"].isna().all()
    assert "I know this one" in "".join(thinking)
