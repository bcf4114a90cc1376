"""Interrupts at seeded moments: Ctrl-C (SIGINT, as the notebook's stop button sends it) in a real
kernel, and cancelling an ``aevaluate`` task, with a fast and a slow agent. Whatever the moment,
the server holds no session afterwards (counted by the server: ``tests/envs/counting_envs.py``),
the trace records a session as closed only if the server dropped it, and the kernel survives.

One server and one kernel serve every moment; the moments are delays drawn from
``random.Random(seed)``, spread from before the run starts to after it ends. Sometimes a second
interrupt follows the first, the case that used to abort the sessions' deletes.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

import ors_lab as ol
from ors_lab import Recorder
from ors_lab.analysis.show import summarize
from ors_lab.client import _session as aclient
from ors_lab.client.aclient import DELETE_ATTEMPTS
from ors_lab.demo.launch import ServerProcess
from ors_lab.evaluation import aevaluate
from ors_lab.replay.check import check_trace
from tests.conftest import REPO_ROOT
from tests.envs.counting_envs import live_sessions
from tests.scripted_server import Answer, scripted_server
from tests.soak import cases

SEED = 16
MOMENTS = cases(25, 8)
"""Moments per (kernel or asyncio) x (fast or slow agent): 32 in all, 100 with ORS_LAB_SOAK=1 (``tests/soak.py``)."""
SECOND_INTERRUPT = 0.3
"""The share of moments where a second interrupt follows the first."""
AGENTS = '''
import asyncio
from ors_lab.agents.policy import ToolCall

def fast_agent(obs):
    """Submit at once: an episode is a few milliseconds of requests."""
    return None if obs.step else ToolCall("submit", {"answer": "4"})

async def slow_agent(obs):
    """Think, then run the slow tool, then submit: interrupts land in the agent and in a /call stream."""
    await asyncio.sleep(0.02)
    if obs.step == 0:
        return ToolCall("slow", {"seconds": 0.05})
    return None if obs.step > 1 else ToolCall("submit", {"answer": "4"})
'''
RUNS = {
    ("kernel", "fast"): ("fast_agent", 40, 0.5),
    ("kernel", "slow"): ("slow_agent", 6, 0.5),
    ("asyncio", "fast"): ("fast_agent", 12, 0.5),
    ("asyncio", "slow"): ("slow_agent", 4, 0.5),
}
"""(where, agent) -> (its name in AGENTS, rollouts of the 3 train tasks, seconds the moments spread over): a
run takes about 0.4 s here, so most moments fall inside one, from its first request to its trace's compaction.
The asyncio runs time one whole run first and spread their moments over its length instead."""


@dataclass
class Tally:
    """What the moments of one case came to."""

    outcomes: dict[str, int] = field(default_factory=dict)
    left_open: list[tuple[int, float, int]] = field(default_factory=list)  # (moment, delay, sessions)
    misrecorded: list[tuple[int, float, int, int]] = field(default_factory=list)  # (moment, delay, trace, server)

    def add(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """An ipykernel from this venv, its Jupyter and IPython state in a temporary folder."""
    home = tmp_path_factory.mktemp("jupyter")
    dirs = {name: str(home / name.lower()) for name in ("IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR",
                                                        "JUPYTER_RUNTIME_DIR")}  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        for name, value in dirs.items():
            patch.setenv(name, value)
        km, kc = start_new_kernel(kernel_name="python3", startup_timeout=60, cwd=str(REPO_ROOT))
        try:
            yield km, kc
        finally:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


def _execute(kc: BlockingKernelClient, code: str, timeout: float = 30.0, **options: Any) -> dict[str, Any]:
    """Run `code` in the kernel and return its execute_reply's content."""
    msg_id = kc.execute(code, **options)
    deadline = time.monotonic() + timeout
    while True:
        reply = kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            _drain(kc)
            content: dict[str, Any] = reply["content"]
            return content


def _cell_end(kc: BlockingKernelClient, msg_id: str, timeout: float = 30.0) -> dict[str, Any]:
    """How a cell ended, from the kernel's outputs: its `error` message's content, {} if none, or
    {"ename": "reply lost"} when the kernel went idle without replying (an interrupt that lands in
    ipykernel's own code, after the cell's code ended, is caught and logged there, and the reply is lost)."""
    deadline = time.monotonic() + timeout
    ended: dict[str, Any] = {}
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "error":
            ended = msg["content"]
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    try:
        while kc.get_shell_msg(timeout=2)["parent_header"].get("msg_id") != msg_id:
            pass
    except queue.Empty:
        return {"ename": "reply lost"}
    return ended


def _drain(kc: BlockingKernelClient) -> None:
    """Drop the kernel's outputs so far: they are not what is checked."""
    with contextlib.suppress(queue.Empty):
        for _ in range(10_000):
            kc.get_iopub_msg(timeout=0.01)


def _exists(path: Path) -> bool:
    """A trace (or the parts of one being written) is at `path`."""
    return path.is_file() or path.with_name(path.name + ".parts").is_dir()


def _closed_in_trace(path: Path) -> tuple[int, int]:
    """(sessions the trace shows opened, of them the ones it shows closed) as `ors-lab show` counts them."""
    if not _exists(path):
        return 0, 0
    sessions = ol.load_trace(path).sessions
    return len(sessions), int(sessions["closed"].notna().sum())


def _check(tally: Tally, moment: int, delay: float, live: Path, before: set[str], trace: Path) -> None:
    now = live_sessions(live)
    leaked = len(now - before)
    if leaked:
        tally.left_open.append((moment, round(delay, 3), leaked))
    opened, closed = _closed_in_trace(trace)
    if opened - closed != leaked:  # the trace says closed exactly for the sessions the server dropped
        tally.misrecorded.append((moment, round(delay, 3), opened - closed, leaked))


@pytest.mark.parametrize("agent", ["fast", "slow"])
def test_interrupting_evaluate_in_a_kernel_leaves_no_session_open(
    agent: str,
    counting_server: tuple[ServerProcess, Path],
    kernel: tuple[KernelManager, BlockingKernelClient],
    tmp_path: Path,
) -> None:
    """SIGINT at seeded moments of a notebook's evaluate: no session left on the server, the kernel lives,
    and the user gets one line, with the partial result kept."""
    server, live = counting_server
    km, kc = kernel
    name, rollouts, span = RUNS["kernel", agent]
    first_run = f"len(ol.evaluate(lab, {name}, split='train', progress=False).episodes)"  # imports what it needs
    setup = _execute(kc, f"import ors_lab as ol\nclient = ol.Client({server.url!r})\nlab = client.environment('lab')\n"
                         f"{AGENTS}\n{first_run}")  # fmt: skip
    assert setup["status"] == "ok", setup
    rng = random.Random(f"{SEED}-kernel-{agent}")
    tally = Tally()
    for moment in range(MOMENTS):
        delay = rng.uniform(0.0, span)
        again = rng.random() < SECOND_INTERRUPT
        second = rng.uniform(0.0, 0.1)
        trace = tmp_path / f"run{moment}.parquet"
        before = live_sessions(live)
        msg_id = kc.execute(  # the error it ends with must not abort the probe that follows
            f"_ = ol.evaluate(lab, {name}, split='train', rollouts={rollouts}, record={str(trace)!r}, progress=False)",
            stop_on_error=False,
        )
        time.sleep(delay)
        km.interrupt_kernel()
        if again:
            time.sleep(second)
            km.interrupt_kernel()
        try:
            content = _cell_end(kc, msg_id)
        except queue.Empty:
            pytest.fail(f"no end of the cell at moment {moment} ({delay:.3f} s, again: {again}); "
                        f"kernel alive: {km.is_alive()}")  # fmt: skip
        assert km.is_alive(), f"the kernel died at moment {moment} ({delay:.3f} s)"
        outcome = content.get("ename", "ok")
        tally.add(outcome)
        if outcome == "EvaluationInterrupted":
            assert len(content["traceback"]) == 1, content["traceback"]  # one line, no frames
            assert "all sessions closed" in content["evalue"] or "before it started" in content["evalue"]
        probe = _execute(kc, "", user_expressions={"episodes": "len(ol.last_result().episodes)"})
        assert probe["status"] == "ok", f"the kernel did not answer after moment {moment}"
        if outcome == "EvaluationInterrupted" and _exists(trace):  # the partial result: the episodes of the trace
            episodes = probe["user_expressions"]["episodes"]
            assert episodes["status"] == "ok", (moment, delay, content["evalue"], episodes)
            assert int(episodes["data"]["text/plain"]) == len(ol.load_trace(trace).episodes), (
                moment,
                delay,
                again,
                content["evalue"],
            )
        _check(tally, moment, delay, live, before, trace)
    assert not tally.left_open, f"sessions left open on the server (moment, delay, count): {tally.left_open}"
    assert not tally.misrecorded, f"trace vs server (moment, delay, unclosed in trace, on server): {tally.misrecorded}"
    assert tally.outcomes.get("EvaluationInterrupted", 0) >= MOMENTS // 3, tally.outcomes  # moments do land in runs


@pytest.mark.parametrize("agent", ["fast", "slow"])
async def test_cancelling_aevaluate_leaves_no_session_open(
    agent: str, counting_server: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    """Cancelling an aevaluate task at seeded moments (at times twice): no session left open on the server."""
    server, live = counting_server
    namespace: dict[str, Any] = {}
    exec(AGENTS, namespace)  # the same agents as the kernel runs
    name, rollouts, _ = RUNS["asyncio", agent]
    policy = namespace[name]
    rng = random.Random(f"{SEED}-asyncio-{agent}")
    tally = Tally()
    async with ol.AsyncClient(server.url) as client:
        lab = client.environment("lab")
        started = time.monotonic()  # one whole run first: the moments spread over its length on this machine now
        whole = tmp_path / "whole.parquet"
        await aevaluate(lab, policy, split="train", rollouts=rollouts, record=whole, progress=False)
        span = time.monotonic() - started
        for moment in range(MOMENTS):
            delay = rng.uniform(0.0, span)
            again = rng.random() < SECOND_INTERRUPT
            second = rng.uniform(0.0, 0.1)
            trace = tmp_path / f"run{moment}.parquet"
            before = live_sessions(live)
            run = asyncio.create_task(
                aevaluate(lab, policy, split="train", rollouts=rollouts, record=trace, progress=False)
            )
            await asyncio.sleep(delay)
            run.cancel()
            if again:
                await asyncio.sleep(second)
                run.cancel()
            await asyncio.wait({run}, timeout=30)
            assert run.done(), f"the cancelled run did not end at moment {moment} ({delay:.3f} s)"
            tally.add("cancelled" if run.cancelled() else "finished")
            if run.cancelled() and _exists(trace):  # it got as far as opening its trace: it kept a partial result
                partial = ol.last_result()
                assert partial is not None and partial.trace == str(trace), (moment, delay)
            _check(tally, moment, delay, live, before, trace)
    assert not tally.left_open, f"sessions left open on the server (moment, delay, count): {tally.left_open}"
    assert not tally.misrecorded, f"trace vs server (moment, delay, unclosed in trace, on server): {tally.misrecorded}"
    assert tally.outcomes.get("cancelled", 0) >= MOMENTS // 3, tally.outcomes


async def test_a_delete_the_server_refuses_is_retried_then_recorded_as_failed(tmp_path: Path) -> None:
    """A /delete answered 500 every time is tried 3 times; the trace's close row says it failed, and `ors-lab show`
    and `ors-lab check` count the session as unclosed (it used to be recorded as closed)."""
    path = tmp_path / "run.parquet"
    refused = Answer(500, b'{"detail":"disk on fire"}')
    with (
        scripted_server(Answer(200, b'{"sid":"x"}'), refused, refused, refused, refused) as server,
        Recorder(path) as rec,
    ):
        async with ol.AsyncClient(server.url, recorder=rec, retry=ol.RetryPolicy(backoff=0.01)) as client:
            session = client.environment("lab").session(split="test", index=0)
            await session.open()
            with pytest.raises(ol.ServerError, match="disk on fire"):
                await session.close()
        assert [seen.path for seen in server.requests] == ["/create"] + ["/delete"] * DELETE_ATTEMPTS
    trace = ol.load_trace(path)
    close = trace.table.filter(pc.equal(trace.table["kind"], "close")).to_pylist()
    assert [(row["ok"], row["error"]) for row in close] == [(False, "ServerError: HTTP 500: disk on fire")]
    assert trace.sessions["closed"].isna().all()
    shown = summarize(trace)
    assert re.search(r"lab\s+1\s+1\s", shown), shown  # environment, sessions, unclosed
    assert "sessions whose delete failed  1" in shown
    violations = [v for v in check_trace(trace) if v.rule == "session-closed"]
    assert len(violations) == 1 and "disk on fire" in violations[0].message


async def test_a_delete_the_server_never_answers_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling a close whose /delete hangs (a frozen server) waits DELETE_TIMEOUT, not the 60 s read timeout, and
    the close row records the delete as failed."""
    monkeypatch.setattr(aclient, "DELETE_TIMEOUT", 0.5)
    path = tmp_path / "run.parquet"
    frozen = Answer(200, b"{", stall=30)
    with scripted_server(Answer(200, b'{"sid":"x"}'), frozen) as server, Recorder(path) as rec:
        async with ol.AsyncClient(server.url, recorder=rec) as client:
            session = client.environment("lab").session(split="test", index=0)
            await session.open()
            closing = asyncio.create_task(session.close())
            await asyncio.sleep(0.1)
            started = time.monotonic()
            closing.cancel()
            await asyncio.sleep(0.05)
            closing.cancel()  # a second cancel does not cut the delete short either
            with pytest.raises(asyncio.CancelledError):
                await closing
            assert 0.2 < time.monotonic() - started < 2
    close = ol.load_trace(path).table.filter(pc.equal(ol.load_trace(path).table["kind"], "close")).to_pylist()
    assert [row["ok"] for row in close] == [False]
    assert "did not confirm deleting the session within 0.5 s" in close[0]["error"]
