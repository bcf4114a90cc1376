"""Evaluations on Ray (``ors_lab.evaluation.ray``): one loopback-only local cluster for the session, real
reference servers, real traces. The same run gives the same result here and on Ray; the trace is one,
naming each session's worker; a killed worker, Ctrl-C and resume behave as the module docstring says."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import pyarrow.compute as pc
import pytest

import ors_lab as ol
from ors_lab import AgentNotShippableError, AsyncClient, Client
from ors_lab.demo.launch import ServerProcess
from ors_lab.evaluation import aevaluate, evaluate
from ors_lab.evaluation.ray import RayBackend
from ors_lab.events import Event
from ors_lab.feed import FeedReader, FeedState
from tests.evaluation.policies import expected_reward, lab_policy, slow_lab_policy, slower_lab_policy
from tests.notebook.test_run_view import figures

pytestmark = pytest.mark.usefixtures("ray_cluster")

TWO = RayBackend(workers=2, cpus=0.5)
"""Two workers on the session's 2-CPU cluster."""
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


def test_ray_and_local_runs_give_the_same_result(reference_server: ServerProcess, tmp_path: Path) -> None:
    """The same evaluation here and on two Ray workers: the same episode rewards and outcomes, the same
    `tasks` table; the Ray run's trace is one file whose every session's rows name one worker, both used."""
    path = tmp_path / "ray.parquet"
    with Client(reference_server.url) as client:
        lab = client.environment("lab")
        local = evaluate(lab, lab_policy, split="train", rollouts=6, concurrency=4, progress=False)
        on_ray = evaluate(lab, lab_policy, split="train", rollouts=6, concurrency=4, progress=False, record=path,
                          backend=TWO)  # fmt: skip
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


class LockedAgent:
    """A policy holding a lock: it does not pickle."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, obs: Any) -> Any:
        return lab_policy(obs)


def test_an_agent_that_does_not_pickle_fails_before_any_work(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """A clear typed error (also a TypeError), raised before a trace or a session is made; a factory ships it."""
    path = tmp_path / "run.parquet"
    with Client(ors_sdk_server.url) as client:
        lab = client.environment("lab")
        with pytest.raises(AgentNotShippableError, match="LockedAgent cannot be sent to Ray workers") as caught:
            evaluate(lab, LockedAgent(), split="train", record=path, progress=False, backend=TWO)
        assert isinstance(caught.value, TypeError)
        assert not path.exists() and not path.with_name(path.name + ".parts").exists()
        made = evaluate(lab, LockedAgent(), split="train", rollouts=2, progress=False,
                        backend=RayBackend(workers=1, cpus=0.5, agent_factory=LockedAgent))  # fmt: skip
    assert list(made.episodes["reward"]) == [expected_reward("train", i, r) for i in range(3) for r in range(2)]


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


def _worker_pids() -> list[int]:
    """The processes of this session's Ray actors running episodes."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if any("_Worker" in part for part in child.cmdline()):
                found.append(child.pid)
        except psutil.Error:
            continue
    return found


async def test_a_killed_worker_loses_only_its_unfinished_episodes(
    ors_sdk_server: ServerProcess, tmp_path: Path
) -> None:
    """SIGKILL one of two workers mid-run: its unfinished episodes are recorded failed and run again; the
    result has every pair once, right; no pair finished without an error twice."""
    path = tmp_path / "run.parquet"
    ended = EpisodesEnded(6)
    async with AsyncClient(ors_sdk_server.url) as client:
        run = asyncio.create_task(aevaluate(client.environment("lab"), slower_lab_policy, split="test", rollouts=20,
                                            concurrency=4, record=path, progress=False, subscribe=ended,
                                            backend=TWO))  # fmt: skip
        await asyncio.wait_for(ended.reached.wait(), timeout=120)
        pids = _worker_pids()
        assert len(pids) == 2, pids
        os.kill(pids[0], signal.SIGKILL)
        result = await asyncio.wait_for(run, timeout=120)
    keys = list(zip(result.episodes["task_index"], result.episodes["rollout"], strict=True))
    assert sorted(keys) == [(i, r) for i in range(2) for r in range(20)]
    assert list(result.episodes["reward"]) == [expected_reward("test", i, r) for i, r in keys]
    assert result.errors.empty
    rows = _episode_rows(path)
    lost = [row for row in rows if row["error_type"] == "WorkerDiedError"]
    assert lost, "the killed worker had episodes running"
    good = Counter((row["task_index"], row["rollout"]) for row in rows if row["error"] is None)
    assert good == dict.fromkeys(keys, 1)


async def test_cancelling_stops_every_worker_and_resume_finishes_the_run(
    ors_sdk_server: ServerProcess, tmp_path: Path
) -> None:
    """Cancel a Ray run part-way: every session deleted, the trace whole; `resume=True` on Ray runs only
    what the trace does not hold finished, each pair once."""
    path = tmp_path / "run.parquet"
    ended = EpisodesEnded(8)
    async with AsyncClient(ors_sdk_server.url) as client:
        lab = client.environment("lab")
        run = asyncio.create_task(aevaluate(lab, slow_lab_policy, split="train", rollouts=20, concurrency=4,
                                            record=path, progress=False, subscribe=ended, backend=TWO))  # fmt: skip
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
        result = await aevaluate(lab, lab_policy, split="train", rollouts=20, record=path, progress=False,
                                 backend=TWO)  # fmt: skip
    assert result.resumed == done
    keys = list(zip(result.episodes["task_index"], result.episodes["rollout"], strict=True))
    assert sorted(keys) == [(i, r) for i in range(3) for r in range(20)]
    assert list(result.episodes["reward"]) == [expected_reward("train", i, r) for i, r in keys]
    good = Counter((row["task_index"], row["rollout"]) for row in _episode_rows(path) if row["error"] is None)
    assert good == dict.fromkeys(keys, 1)


def test_the_live_feed_shows_a_ray_run_as_a_local_one(ors_sdk_server: ServerProcess) -> None:
    """A feed reader of a Ray run ends with the run's own figures; `subscribe=` saw every episode."""
    state = FeedState("")
    seen: list[Event] = []
    with Client(ors_sdk_server.url) as client, ol.Feed(0) as feed:
        reader = FeedReader(feed.url, state.take).start()
        reader.wait_ready()
        result = evaluate(client.environment("lab"), lab_policy, split="train", rollouts=4, feed=feed,
                          progress=False, subscribe=seen.append, backend=TWO)  # fmt: skip
    assert reader.wait(10) and reader.status == "ended"  # the feed closed: the reader reads to its end
    assert state.run is not None
    snap: dict[str, Any] = state.run.snapshot()
    assert {name: snap[name] for name in ("done", "mean", "stderr", "pass", "errors", "tokens")} == figures(result)
    assert sum(event.kind == "episode" for event in seen) == len(result) == 12


def test_servers_spread_the_workers_over_several_ors_servers(
    ors_sdk_server: ServerProcess, openreward_server: ServerProcess, tmp_path: Path
) -> None:
    """`servers=[a, b]`: worker w0 opens its sessions on a, w1 on b (the trace's /create URLs say so)."""
    path = tmp_path / "run.parquet"
    servers = [ors_sdk_server.url, openreward_server.url]
    with Client(ors_sdk_server.url) as client:
        result = evaluate(client.environment("lab"), lab_policy, split="train", rollouts=4, record=path,
                          progress=False, backend=RayBackend(workers=2, cpus=0.5, servers=servers))  # fmt: skip
    assert list(result.episodes["reward"]) == [expected_reward("train", i, r) for i in range(3) for r in range(4)]
    table = ol.load_trace(path).table
    creates = table.filter(pc.and_(pc.equal(table["kind"], "request"), pc.match_substring(table["url"], "/create")))
    where = {(w, url.split("/create")[0]) for w, url in zip(creates["worker"].to_pylist(), creates["url"].to_pylist(),
                                                               strict=True)}  # fmt: skip
    assert where == {("w0", ors_sdk_server.url), ("w1", openreward_server.url)}


def test_bad_backend_arguments_fail_clearly() -> None:
    with pytest.raises(ValueError, match="workers must be 1 or more"):
        RayBackend(workers=0)
    with pytest.raises(ValueError, match="restarts must be 0 or more"):
        RayBackend(restarts=-1)


