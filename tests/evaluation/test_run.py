"""evaluate / aevaluate against the real reference servers, with environments whose rewards are known."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow.compute as pc
import pytest

import ors_lab as ol
from ors_lab import (
    AsyncClient,
    Client,
    Environment,
    Recorder,
    ReplayServer,
    ReplayTransport,
    TraceExistsError,
    load_trace,
)
from ors_lab.agents.episode import Episode
from ors_lab.agents.policy import Observation, ToolCall
from ors_lab.analysis import finished_episodes
from ors_lab.demo.agent import DemoAgent
from ors_lab.demo.launch import ServerProcess
from ors_lab.evaluation import aevaluate, evaluate
from ors_lab.events import AgentEvent
from tests.conftest import REPO_ROOT
from tests.envs.common import ECHO_REWARD, ECHO_TASKS, LAB_TASKS
from tests.evaluation.policies import (
    Curious,
    echo_once,
    expected_reward,
    lab_policy,
    slow_lab_policy,
    stepping_policy,
    task_policy,
)


@pytest.fixture
def lab(reference_server: ServerProcess) -> Iterator[Environment]:
    """The `lab` environment on each reference server, through a sync client."""
    with Client(reference_server.url) as client:
        yield client.environment("lab")


def _open_at_once(path: Path) -> int:
    """The most sessions the trace shows open at the same time (open +1, close -1, in seq order)."""
    table = load_trace(path).table
    kinds = table.filter(pc.is_in(table["kind"], value_set=pc.cast(["open", "close"], "string")))["kind"].to_pylist()
    most = now = 0
    for kind in kinds:
        now += 1 if kind == "open" else -1
        most = max(most, now)
    return most


def finished_records(path: Path, environment: str, split: str) -> dict[tuple[str, str, int, int], str]:
    """The episodes of `environment`/`split` the trace holds finished without an error."""
    return {k: v for k, v in finished_episodes(load_trace(path).table).items() if k[:2] == (environment, split)}


def _finished(path: Path, split: str) -> int:
    """How many episodes of `lab`/`split` the trace (or its parts, while it is written) holds finished."""
    if not (path.is_file() or path.with_name(path.name + ".parts").is_dir()):
        return 0
    return len(finished_records(path, "lab", split))


def _unclosed(path: Path) -> set[str]:
    sessions = load_trace(path).sessions
    return set(sessions.loc[sessions["closed"].isna(), "session_id"])


def test_rewards_and_finished_flags_are_what_the_environment_returned(lab: Environment, tmp_path: Path) -> None:
    """Episode and step rewards equal the environment's own rule, for right and wrong answers."""
    result = evaluate(lab, lab_policy, split="train", rollouts=2, concurrency=4, record=tmp_path / "run.parquet")
    episodes = result.episodes
    assert len(episodes) == 6
    keys = sorted(zip(episodes["task_index"], episodes["rollout"], strict=True))
    assert keys == [(i, r) for i in range(3) for r in (0, 1)]
    for row in episodes.itertuples():
        want = expected_reward("train", row.task_index, row.rollout)
        assert (row.reward, row.total_reward, row.final_reward) == (want, want, want)
        assert row.finished is True and row.steps == 1 and row.finish_reason == "stop"
        assert row.success is (want == 1.0) and row.error is pd_na()
    steps = result.steps
    assert list(steps["tool"].unique()) == ["submit"]
    assert [json.loads(text)["answer"] for text in steps["input"]][:2] == [LAB_TASKS["train"][0]["answer"], "wrong"]
    assert list(steps["reward"]) == list(episodes["reward"])
    tasks = result.tasks
    assert list(tasks["success_rate"]) == [0.5, 0.5, 0.5]
    assert list(tasks["pass@1"]) == [0.5, 0.5, 0.5] and list(tasks["pass@2"]) == [1.0, 1.0, 1.0]
    # the trace's own episodes (derived from the wire rows) agree with the evaluation's
    by_session = load_trace(tmp_path / "run.parquet").episodes.set_index("session_id")
    for row in episodes.itertuples():
        assert by_session.loc[row.session_id, "total_reward"] == row.total_reward


def pd_na() -> object:
    import pandas as pd

    return pd.NA


class _Unwritable(ol.events.TextDeltaEvent):
    """An agent's own event type that no trace can hold."""

    def to_json(self) -> str:
        raise ValueError("this event cannot be written")


class _SaysUnwritable:
    """Publishes one event the trace cannot take, then answers its task."""

    async def run(self, episode: Any) -> None:
        episode.publish(_Unwritable(id="odd", delta="?"))
        await episode.call("submit", {"answer": "4"})


def test_an_event_the_trace_cannot_take_fails_its_episode_not_the_trace(
    ors_sdk_server: ServerProcess, tmp_path: Path
) -> None:
    """The recorder is never detached: each episode whose event it cannot write fails by name; every episode
    is in the result and the trace, which stays valid."""
    path = tmp_path / "run.parquet"
    with Client(ors_sdk_server.url) as client:
        result = evaluate(client.environment("lab"), _SaysUnwritable(), split="train", progress=False, record=path)
    tasks = len(LAB_TASKS["train"])
    assert len(result.episodes) == tasks and set(result.errors["error_type"]) == {"EventNotRecordedError"}
    assert all("the text-delta event (_Unwritable)" in error for error in result.errors["error"])
    trace = load_trace(path)
    assert sorted(trace.episodes["error_type"]) == ["EventNotRecordedError"] * tasks
    assert len(trace.sessions) == tasks and not _unclosed(path)


def test_multi_step_rewards_reduce_as_documented(ors_sdk_server: ServerProcess) -> None:
    """Three steps of 0.1, 0.2, 0.3: sum 0.6 by default, 0.3 with reward="final", success by threshold."""
    with Client(ors_sdk_server.url) as client:
        lab = client.environment("lab")
        summed = evaluate(lab, stepping_policy, split="train", tasks=1, success_threshold=0.5, progress=False)
        final = evaluate(lab, stepping_policy, split="train", tasks=1, reward="final", success_threshold=0.5,
                         progress=False)  # fmt: skip
    row = summed.episodes.iloc[0]
    assert row["steps"] == 3 and bool(row["finished"])
    assert row["total_reward"] == pytest.approx(0.6) and row["final_reward"] == 0.3
    assert row["reward"] == pytest.approx(0.6) and bool(row["success"])
    assert list(summed.steps["reward"]) == [0.1, 0.2, 0.3]
    assert list(summed.steps["finished"]) == [False, False, True]
    assert final.episodes.iloc[0]["reward"] == 0.3 and not bool(final.episodes.iloc[0]["success"])


def test_step_limit_ends_the_episode_as_length(ors_sdk_server: ServerProcess) -> None:
    """max_steps=2 stops a three-step episode after two calls, unfinished, finish reason "max-steps"."""
    with Client(ors_sdk_server.url) as client:
        result = evaluate(client.environment("lab"), stepping_policy, split="train", tasks=1, max_steps=2,
                          progress=False)  # fmt: skip
    row = result.episodes.iloc[0]
    assert (row["steps"], bool(row["finished"]), row["finish_reason"]) == (2, False, "max-steps")
    assert row["error"] is pd_na()


def test_concurrency_is_a_hard_limit_on_open_sessions(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """With concurrency=3, the trace never shows more than three sessions open, and shows three."""
    path = tmp_path / "run.parquet"
    with Client(ors_sdk_server.url) as client:
        result = evaluate(client.environment("lab"), slow_lab_policy, split="train", rollouts=6, concurrency=3,
                          record=path, progress=False)  # fmt: skip
    assert len(result) == 18
    assert _open_at_once(path) == 3
    assert not _unclosed(path)


def test_a_failing_episode_is_recorded_and_the_run_goes_on(lab: Environment, tmp_path: Path) -> None:
    """A tool that raises fails its episode (error kept, reward 0, session closed); the others run."""

    def policy(obs: Observation) -> ToolCall | None:
        if obs.index == 1 and not obs.step:
            return ToolCall("crash")
        return lab_policy(obs)

    path = tmp_path / "run.parquet"
    result = evaluate(lab, policy, split="train", rollouts=2, record=path, progress=False)
    episodes = result.episodes
    failed = episodes[episodes["task_index"] == 1]
    assert list(failed["error_type"]) == ["ToolError", "ToolError"]
    assert all("boom" in text for text in failed["error"])
    assert list(failed["reward"]) == [0.0, 0.0] and not failed["success"].any()
    assert list(failed["finish_reason"]) == ["error", "error"]
    others = episodes[episodes["task_index"] != 1]
    assert others["error"].isna().all()
    assert list(others["reward"]) == [
        expected_reward("train", i, r) for i, r in zip(others["task_index"], others["rollout"], strict=True)
    ]
    assert list(result.errors["error_type"]) == ["ToolError", "ToolError"]
    assert not _unclosed(path)
    errors = load_trace(path).events
    agent_errors = errors[(errors["layer"] == "agent") & (errors["kind"] == "error")]
    assert len(agent_errors) == 2 and set(agent_errors["reason"]) == {"tool_error"}
    assert {json.loads(data)["code"] for data in agent_errors["data"]} == {"ToolError"}


def test_an_agent_exception_fails_only_its_episode(ors_sdk_server: ServerProcess) -> None:
    """An exception in the agent's own code is the episode's error (the platform's internal error); the run goes on."""

    def policy(obs: Observation) -> ToolCall | None:
        if obs.index == 2:
            raise ValueError("policy bug")
        return lab_policy(obs)

    seen: list[dict[str, object]] = []
    with Client(ors_sdk_server.url) as client:
        result = evaluate(client.environment("lab"), policy, split="train", progress=False,
                          subscribe=lambda event: seen.append(event.to_wire()))  # fmt: skip
    episodes = result.episodes.set_index("task_index")
    assert episodes.loc[2, "error_type"] == "ValueError" and episodes.loc[2, "error"] == "policy bug"
    assert episodes.loc[0, "error"] is pd_na() and episodes.loc[0, "reward"] == 1.0
    errors = [event for event in seen if event["type"] == "error"]
    assert errors == [
        {"type": "error", "errorType": "internal_error", "message": "policy bug", "source": "platform",
         "retryable": False, "code": "ValueError"}
    ]  # fmt: skip


def test_timeout_fails_a_slow_episode_and_closes_its_session(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """timeout= ends an episode that takes too long: error TimeoutError, session deleted, run goes on."""

    async def dawdle(obs: Observation) -> ToolCall | None:
        if obs.index == 0:
            await asyncio.sleep(30)
        return lab_policy(obs)

    path = tmp_path / "run.parquet"
    started = time.monotonic()
    with Client(ors_sdk_server.url) as client:
        result = evaluate(client.environment("lab"), dawdle, split="train", timeout=0.5, record=path, progress=False)
    assert time.monotonic() - started < 10
    episodes = result.episodes.set_index("task_index")
    assert episodes.loc[0, "error_type"] == "TimeoutError"
    assert episodes.loc[0, "error"] == "timeout after 0.5 s"
    assert episodes.loc[1, "reward"] == 1.0
    assert not _unclosed(path)


async def test_cancelling_deletes_open_sessions_and_leaves_a_resumable_trace(
    ors_sdk_server: ServerProcess, tmp_path: Path
) -> None:
    """Cancel part-way: CancelledError, every session closed, the trace whole; resume finishes the rest."""
    path = tmp_path / "run.parquet"
    ended: list[AgentEvent] = []
    eight = asyncio.Event()

    def count(event: AgentEvent) -> None:
        if event.type == "episode":
            ended.append(event)
            if len(ended) >= 8:
                eight.set()

    async with AsyncClient(ors_sdk_server.url) as client:
        lab = client.environment("lab")
        run = asyncio.create_task(aevaluate(lab, slow_lab_policy, split="train", rollouts=20, concurrency=4,
                                            record=path, progress=False, subscribe=count))  # fmt: skip
        await asyncio.wait_for(eight.wait(), timeout=60)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        trace = load_trace(path)
        assert not trace.partial
        assert not _unclosed(path)
        done = len(finished_records(path, "lab", "train"))
        assert 8 <= done < 60
        result = await aevaluate(lab, lab_policy, split="train", rollouts=20, record=path, progress=False)
    assert result.resumed == done
    keys = list(zip(result.episodes["task_index"], result.episodes["rollout"], strict=True))
    assert sorted(keys) == [(i, r) for i in range(3) for r in range(20)]
    assert list(result.episodes["reward"]) == [expected_reward("train", i, r) for i, r in keys]
    assert _episode_rows_per_key(path) == dict.fromkeys(keys, 1)


def _episode_rows_per_key(path: Path) -> dict[tuple[int, int], int]:
    table = load_trace(path).table
    counts: dict[tuple[int, int], int] = {}
    for text in table.filter(pc.equal(table["kind"], "episode"))["data"].to_pylist():
        record = json.loads(text)
        key = (record["task_index"], record["rollout"])
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_resume_skips_finished_pairs_and_reruns_failed_ones(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """A second run on the same trace runs only what is missing or failed; each pair ends up once."""
    path = tmp_path / "run.parquet"
    calls: list[tuple[int, int]] = []
    failed: set[int] = set()

    def flaky(obs: Observation) -> ToolCall | None:
        assert obs.index is not None
        calls.append((obs.index, obs.rollout))
        if obs.index == 1 and 1 not in failed:
            failed.add(1)
            raise RuntimeError("first try fails")
        return lab_policy(obs)

    with Client(ors_sdk_server.url) as client:
        lab = client.environment("lab")
        first = evaluate(lab, flaky, split="train", tasks=[0, 1], record=path, progress=False)
        assert list(first.episodes["error_type"].fillna("-")) == ["-", "RuntimeError"]
        calls.clear()
        second = evaluate(lab, flaky, split="train", record=path, progress=False)
    assert sorted(set(calls)) == [(1, 0), (2, 0)]
    assert second.resumed == 1
    assert list(second.episodes["reward"]) == [1.0, 1.0, 1.0]
    assert second.episodes["error"].isna().all()
    # the trace keeps the failed attempt, and one finished episode per pair
    assert finished_records(path, "lab", "train").keys() == {("lab", "train", i, 0) for i in range(3)}


def test_resume_sees_every_episode_a_callers_recorder_still_holds(
    ors_sdk_server: ServerProcess, tmp_path: Path
) -> None:
    """With the caller's Recorder (rows not yet written: an hour-long flush interval), resume skips what it ran."""
    calls: list[tuple[int, int]] = []

    def counted(obs: Observation) -> ToolCall | None:
        assert obs.index is not None
        calls.append((obs.index, obs.rollout))
        return lab_policy(obs)

    with Client(ors_sdk_server.url) as client, Recorder(tmp_path / "run.parquet", flush_interval=3600) as rec:
        lab = client.environment("lab")
        first = evaluate(lab, counted, split="train", tasks=2, record=rec, progress=False)
        calls.clear()
        second = evaluate(lab, counted, split="train", tasks=2, record=rec, progress=False)
    assert len(first) == 2 and second.resumed == 2 and calls == []
    assert list(second.episodes["reward"]) == list(first.episodes["reward"])


def test_resume_false_refuses_an_existing_trace(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """resume=False never adds to a trace that exists."""
    path = tmp_path / "run.parquet"
    with Client(ors_sdk_server.url) as client:
        lab = client.environment("lab")
        evaluate(lab, lab_policy, split="test", record=path, progress=False)
        before = path.read_bytes()
        with pytest.raises(TraceExistsError, match=r"pass resume=True to continue it, record=ol\.Recorder\(path, "
                           r"overwrite=True\) to replace it"):  # fmt: skip
            evaluate(lab, lab_policy, split="test", record=path, resume=False, progress=False)
    assert path.read_bytes() == before


def test_a_run_that_fails_before_its_first_episode_leaves_no_trace_it_made(
    ors_sdk_server: ServerProcess, tmp_path: Path
) -> None:
    """An unknown environment or split fails the run before any session: the trace it created is removed, while
    an existing trace it was to continue keeps every episode it held."""
    made, kept = tmp_path / "new.parquet", tmp_path / "kept.parquet"
    with Client(ors_sdk_server.url) as client:
        evaluate(client.environment("lab"), lab_policy, split="test", record=kept, progress=False)
        for env, split in (("nope", "test"), ("lab", "nope")):
            for record in (made, kept):
                with pytest.raises((ol.UnknownEnvironmentError, ol.UnknownSplitError)):
                    evaluate(client.environment(env), lab_policy, split=split, record=record, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.parquet"]
    assert len(load_trace(kept).episodes) == len(LAB_TASKS["test"])


def test_a_fully_resumed_run_shows_the_resumed_figures(
    ors_sdk_server: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose every episode is in its trace prints the resumed episodes' mean reward, never `nan`, even
    when a reward function gave some episode no number (the mean is over the episodes with one, as pandas')."""
    path = tmp_path / "run.parquet"
    unscored = LAB_TASKS["train"][0]["answer"]

    def reward(steps: list[Any]) -> float:
        """The last step's reward, but none (NaN) for the first task's answer."""
        return math.nan if steps[-1].input.get("answer") == unscored else float(steps[-1].reward)

    ol.live_views("text")
    with Client(ors_sdk_server.url) as client:
        lab = client.environment("lab")
        first = evaluate(lab, lab_policy, split="train", tasks=[0, 1], reward=reward, record=path)
        capsys.readouterr()
        second = evaluate(lab, lab_policy, split="train", tasks=[0, 1], reward=reward, record=path)
    lines = capsys.readouterr().err.splitlines()
    assert second.resumed == 2 and math.isnan(first.episodes["reward"].iloc[0])
    assert lines and all("nan" not in line for line in lines), lines
    assert lines[-1].startswith("eval lab/train: 2/2 episodes (2 resumed)") and "mean reward 1.000" in lines[-1]


def test_the_progress_line_names_the_runs_own_success_threshold(
    ors_sdk_server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rewards below a threshold of 2.0: the live progress says no episode reached success_threshold=2.0."""
    ol.live_views("text")
    with Client(ors_sdk_server.url) as client:
        result = evaluate(client.environment("lab"), lab_policy, split="train", tasks=2, success_threshold=2.0)
    last = capsys.readouterr().err.splitlines()[-1]
    assert result.episodes["success"].sum() == 0 and result.episodes["reward"].max() == 1.0
    assert "no episode reached success_threshold=2.0" in last, last


KILLED_RUN = textwrap.dedent(
    """
    import sys
    from ors_lab import Client
    from ors_lab.evaluation import evaluate
    from tests.evaluation.policies import slower_lab_policy

    with Client(sys.argv[1]) as client:
        evaluate(client.environment("lab"), slower_lab_policy, split="test", rollouts=100, concurrency=8,
                 record=sys.argv[2], progress=False)
    """
)


def test_resume_after_sigkill_runs_each_pair_exactly_once(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """200 episodes, SIGKILLed part-way, then resumed: each (task, rollout) once, with its right reward."""
    path = tmp_path / "run.parquet"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, ors_sdk_server.url, str(path)], env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if _finished(path, "test") >= 40:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    partial = load_trace(path)
    assert partial.partial
    killed_done = len(finished_records(path, "lab", "test"))
    assert 40 <= killed_done < 200
    with Client(ors_sdk_server.url) as client:
        result = evaluate(client.environment("lab"), lab_policy, split="test", rollouts=100, concurrency=8,
                          record=path, progress=False)  # fmt: skip
    assert result.resumed == killed_done
    episodes = result.episodes
    keys = list(zip(episodes["task_index"], episodes["rollout"], strict=True))
    assert sorted(keys) == [(i, r) for i in range(2) for r in range(100)]
    assert list(episodes["reward"]) == [expected_reward("test", i, r) for i, r in keys]
    assert _episode_rows_per_key(path) == dict.fromkeys(keys, 1)
    assert not load_trace(path).partial


INTERRUPTED_RUN = textwrap.dedent(
    """
    import sys
    import ors_lab
    from ors_lab import Client
    from ors_lab.evaluation import evaluate
    from tests.evaluation.policies import slow_lab_policy

    with Client(sys.argv[1]) as client:
        print("started", flush=True)
        try:
            evaluate(client.environment("lab"), slow_lab_policy, split="train", rollouts=200, concurrency=4,
                     record=sys.argv[2], progress=False)
        except KeyboardInterrupt as exc:
            print(len(exc.result.episodes), exc.result is ors_lab.last_result(), flush=True)
            raise
    """
)


def test_ctrl_c_stops_cleanly(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """SIGINT during a sync evaluate: sessions deleted, the trace compacted and valid, the partial result kept,
    and one short message (EvaluationInterrupted, a KeyboardInterrupt), not a traceback through the library."""
    path = tmp_path / "run.parquet"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED_RUN, ors_sdk_server.url, str(path)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not path.with_name(path.name + ".parts").is_dir():
        time.sleep(0.05)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert err.splitlines()[-1].startswith("ors_lab.evaluation.run.EvaluationInterrupted: evaluate interrupted: ")
    assert "all sessions closed" in err and "asyncio" not in err and len(err.splitlines()) <= 10, err
    trace = load_trace(path)
    assert not trace.partial
    assert len(trace.sessions) > 0
    assert not _unclosed(path)
    assert out.split() == [str(len(trace.episodes)), "True"]  # the partial result: every episode begun


NESTED_RUN = textwrap.dedent(
    """
    import asyncio, sys
    from ors_lab import Client
    from ors_lab.evaluation import evaluate
    from tests.evaluation.policies import lab_policy

    async def main():
        with Client(sys.argv[1]) as client:  # inside a running loop, as in Jupyter
            result = evaluate(client.environment("lab"), lab_policy, split="train", rollouts=2, progress=False)
        print(list(result.episodes["reward"]))

    asyncio.run(main())
    """
)


def test_sync_evaluate_runs_inside_a_running_loop(ors_sdk_server: ServerProcess) -> None:
    """The sync evaluate works on an already running loop (nest_asyncio2, as in a notebook)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", NESTED_RUN, ors_sdk_server.url], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str([expected_reward("train", i, r) for i in range(3) for r in (0, 1)])


def test_demo_agent_streams_its_reasoning_into_the_trace(demo_server: ServerProcess, tmp_path: Path) -> None:
    """The demo agent's events are agent rows of the trace, in the seed's order, with their rollout."""
    path = tmp_path / "run.parquet"
    with Client(demo_server.url) as client:
        result = evaluate(client.environment("arithmetic"), DemoAgent(), split="test", tasks=[0], rollouts=2,
                          record=path, progress=False)  # fmt: skip
    assert list(result.episodes["reward"]) == [1.0, 1.0]
    events = load_trace(path).events
    agent = events[events["layer"] == "agent"]
    sid = result.episodes["session_id"][1]
    mine = agent[agent["session_id"] == sid]
    kinds = [k for i, k in enumerate(mine["kind"]) if k != "reasoning-delta" or mine["kind"].iloc[i - 1] != k]
    assert kinds == [
        "start",
        "block-start", "reasoning-start", "reasoning-delta", "reasoning-end", "tool-input-available",
        "tool-output-available", "block-end",
        "block-start", "reasoning-start", "reasoning-delta", "reasoning-end", "text-start", "text-delta",
        "text-end", "tool-input-available", "tool-output-available", "reward", "block-end",
        "finish", "episode",
    ]  # fmt: skip
    blocks = [json.loads(data) for data in mine[mine["kind"] == "block-start"]["data"]]
    assert [block["blockName"] for block in blocks] == ["check", "answer"]
    assert set(mine["rollout"]) == {1}
    deltas = mine[mine["kind"] == "reasoning-delta"]["data"].map(lambda text: json.loads(text)["delta"])
    assert "".join(deltas).startswith("The problem reads: ")
    reward = mine[mine["kind"] == "reward"].iloc[0]
    assert (reward["reward"], reward["finished"], reward["tool"], reward["call"]) == (1.0, True, "submit", 2)
    # the ORS rows of the same episode are there too, under the same session id
    wire = events[(events["session_id"] == sid) & (events["layer"] != "agent")]
    assert {"request", "response", "result", "open", "close"} <= set(wire["kind"])


@pytest.fixture(scope="module")
def two_tasks_recorded(tmp_path_factory: pytest.TempPathFactory, demo_server: ServerProcess) -> Path:
    """A trace of the demo agent on guessing test tasks 1 and 4 only, two rollouts each."""
    path = tmp_path_factory.mktemp("subset") / "two-tasks.parquet"
    with Client(demo_server.url) as client:
        evaluate(client.environment("guessing"), DemoAgent(), split="test", tasks=[1, 4], rollouts=2, record=path,
                 progress=False)  # fmt: skip
    return path


@pytest.mark.parametrize("face", ["ReplayServer", "ReplayTransport"])
@pytest.mark.parametrize(("rollouts", "pairs"), [(1, [(1, 0), (4, 0)]), (2, [(1, 0), (1, 1), (4, 0), (4, 1)])])
def test_tasks_none_against_a_replay_runs_the_episodes_its_trace_holds(
    two_tasks_recorded: Path, face: str, rollouts: int, pairs: list[tuple[int, int]]
) -> None:
    """tasks=None replays the (task, rollout) pairs the trace recorded (below `rollouts`), not all 10 tasks."""
    with contextlib.ExitStack() as stack:
        if face == "ReplayServer":
            client = stack.enter_context(Client(stack.enter_context(ReplayServer(two_tasks_recorded, speed=0)).url))
        else:
            client = stack.enter_context(Client("http://replay", transport=ReplayTransport(two_tasks_recorded)))
        result = evaluate(client.environment("guessing"), DemoAgent(), split="test", rollouts=rollouts,
                          progress=False)  # fmt: skip
    assert list(zip(result.episodes["task_index"], result.episodes["rollout"], strict=True)) == pairs
    assert result.errors.empty and set(result.episodes["reward"]) == {1.0}


def test_tasks_none_against_a_live_server_runs_every_task(demo_server: ServerProcess) -> None:
    """A live server ignores the replay's header: tasks=None is every task of the split, rollouts times."""
    with Client(demo_server.url) as client:
        env = client.environment("guessing")
        assert env.episodes("test", 2) == [(index, rollout) for index in range(10) for rollout in range(2)]
        result = evaluate(env, DemoAgent(), split="test", progress=False)
    assert list(result.episodes["task_index"]) == list(range(10))


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"rollouts": 0}, ValueError, "rollouts must be 1 or more"),
        ({"concurrency": 0}, ValueError, "concurrency must be 1 or more"),
        ({"max_steps": 0}, ValueError, "max_steps must be 1 or more"),
        ({"tasks": 9}, ValueError, "has 3 tasks"),
        ({"tasks": [0, 7]}, ValueError, r"task indices \[7\] are outside"),
        ({"tasks": [1, 1]}, ValueError, "use rollouts="),
        ({"reward": "median"}, ValueError, "unknown reward reduction 'median'; use one of sum, final, max"),
    ],
)
def test_bad_arguments_fail_clearly(
    ors_sdk_server: ServerProcess, options: dict[str, object], error: type[Exception], message: str
) -> None:
    """Bad arguments raise a clear error before (or instead of) running anything."""
    with Client(ors_sdk_server.url) as client, pytest.raises(error, match=message):
        evaluate(client.environment("lab"), lab_policy, split="train", progress=False, **options)  # type: ignore[arg-type]


def test_an_agent_must_be_an_agent_or_a_policy(ors_sdk_server: ServerProcess) -> None:
    """Passing something that is neither an Agent nor a callable is a TypeError naming it."""
    with Client(ors_sdk_server.url) as client, pytest.raises(TypeError, match="async run"):
        evaluate(client.environment("lab"), 42, split="train", progress=False)  # type: ignore[arg-type]


# -- the run's event stream ----------------------------------------------------------------------------


async def test_two_evaluations_on_one_client_record_into_their_own_traces(
    ors_sdk_server: ServerProcess, tmp_path: Path
) -> None:
    """Two evaluations at once on one client: each trace holds its own episodes only; the client is left as it was."""
    async with AsyncClient(ors_sdk_server.url) as client:
        lab = client.environment("lab")
        first, second = await asyncio.gather(
            aevaluate(lab, slow_lab_policy, split="train", rollouts=3, record=tmp_path / "a.parquet", progress=False),
            aevaluate(lab, slow_lab_policy, split="test", rollouts=3, record=tmp_path / "b.parquet", progress=False),
        )
        assert client.recorder is None and not client.events.active and lab.events is client.events
    for result, name, split in ((first, "a", "train"), (second, "b", "test")):
        trace = load_trace(tmp_path / f"{name}.parquet")
        assert set(trace.sessions["session_id"]) == set(result.episodes["session_id"])
        assert set(trace.events["split"].dropna()) == {split}
        assert len(trace.episodes) == len(result.episodes) == 3 * len(LAB_TASKS[split])


def test_the_trace_and_the_result_are_one_model(lab: Environment, tmp_path: Path) -> None:
    """evaluate(..., record=p).episodes equals load_trace(p).episodes; so do its steps and tasks."""
    path = tmp_path / "run.parquet"
    result = evaluate(lab, stepping_policy, split="train", rollouts=2, max_steps=2, record=path, progress=False)
    trace = load_trace(path)
    assert len(result.episodes) == 6 and result.steps["step"].max() == 2
    assert result.episodes.equals(trace.episodes)
    assert result.steps.equals(trace.steps)
    assert result.tasks.equals(trace.tasks)


def test_a_recorder_on_the_client_sees_the_run_too(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """The run's stream forwards to its client's: a client's recorder holds the run's wire and agent rows."""
    with Recorder(tmp_path / "client.parquet") as rec, Client(ors_sdk_server.url, recorder=rec) as client:
        result = evaluate(client.environment("lab"), lab_policy, split="train", progress=False)
    trace = load_trace(tmp_path / "client.parquet")
    assert trace.episodes.equals(result.episodes)
    assert {"request", "result", "start", "episode", "block-start"} <= set(trace.events["kind"])


def test_a_raising_or_slow_subscriber_breaks_and_slows_nothing(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """A subscriber that raises, and a buffered one that takes a second an event, joined mid-run: the run ends as
    fast, every episode right and recorded; the late one saw only what came after it joined."""
    path = tmp_path / "run.parquet"
    late: list[AgentEvent] = []
    joined: list[object] = []

    def slow(event: AgentEvent) -> None:
        late.append(event)
        time.sleep(1.0)

    with Client(ors_sdk_server.url) as client:
        lab = client.environment("lab")

        def watch(event: AgentEvent) -> None:
            if event.type == "finish" and joined:
                raise RuntimeError("a broken widget")
            if event.type == "episode" and not joined:  # a widget displayed mid-run
                joined.append(client.events.subscribe(slow, buffer=10))

        started = time.monotonic()
        result = evaluate(lab, lab_policy, split="train", rollouts=20, concurrency=4, record=path, progress=False,
                          subscribe=watch)  # fmt: skip
        elapsed = time.monotonic() - started
        (subscription,) = joined
    assert elapsed < 20  # a subscriber that blocked would take a second per event: minutes
    assert list(result.episodes["reward"]) == [expected_reward("train", i, r) for i in range(3) for r in range(20)]
    assert len(load_trace(path).episodes) == 60
    assert late and late[0].t_ns > 0 and subscription.dropped > 0  # type: ignore[attr-defined]
    first_seen = late[0].t_ns
    assert all(event.t_ns >= first_seen for event in late)


# -- what an episode does against the environment: recorded, and replayed -------------------------------


def _requests(path: Path) -> Counter[str]:
    """How many requests of each `METHOD /path` the trace holds."""
    table = load_trace(path).table
    requests = table.filter(pc.equal(table["kind"], "request"))
    pairs = zip(requests["method"].to_pylist(), requests["url"].to_pylist(), strict=True)
    return Counter(f"{method} {urlsplit(url).path}" for method, url in pairs)


def _bodies(path: Path, what: str) -> list[Any]:
    """The JSON bodies of the trace's `what` (`METHOD /path`) requests, in order."""
    method, route = what.split(" ")
    table = load_trace(path).table
    rows = table.filter(pc.equal(table["kind"], "request")).to_pylist()
    return [json.loads(row["body"]) for row in rows if row["method"] == method and urlsplit(row["url"]).path == route]


def test_what_an_agent_asks_through_its_episodes_client_is_recorded_and_replays(
    reference_server: ServerProcess, tmp_path: Path
) -> None:
    """What an agent asks through its session's client (the environments, a task, a task range, a session of
    its own) is in the run's trace, and the run replays against it: same rewards, no mismatch."""
    path = tmp_path / "run.parquet"
    with Client(reference_server.url) as client:
        live = evaluate(client.environment("lab"), Curious(), split="train", concurrency=3, record=path,
                        progress=False)  # fmt: skip
    assert live.errors.empty and list(live.episodes["reward"]) == [1.0, 1.0, 1.0]
    assert _requests(path)["POST /lab/task_range"] == 3  # the agent's: one an episode
    sessions = set(load_trace(path).sessions["session_id"])
    assert len(sessions) == 6 and set(live.episodes["session_id"]) < sessions  # the episodes', and the agent's own
    with ReplayServer(path, speed=0) as server, Client(server.url) as client:
        again = evaluate(client.environment("lab"), Curious(), split="train", concurrency=3, progress=False)
    assert again.errors.empty, list(again.errors["error"])
    assert list(again.episodes["reward"]) == list(live.episodes["reward"])


async def test_two_evaluations_on_one_client_each_record_what_their_agents_ask(
    ors_sdk_server: ServerProcess, tmp_path: Path
) -> None:
    """Two evaluations at once on one client, their agents asking through their episodes' client: each trace
    holds its own agent's requests and sessions only, and the client is left as it was."""
    async with AsyncClient(ors_sdk_server.url) as client:
        lab = client.environment("lab")
        await asyncio.gather(
            aevaluate(lab, Curious(), split="train", record=tmp_path / "a.parquet", progress=False),
            aevaluate(lab, Curious(), split="test", record=tmp_path / "b.parquet", progress=False),
        )
        assert not client.events.active and lab.events is client.events
    for name, split in (("a", "train"), ("b", "test")):
        path = tmp_path / f"{name}.parquet"
        ranges = _bodies(path, "POST /lab/task_range")
        assert len(ranges) == len(LAB_TASKS[split]) and {body["split"] for body in ranges} == {split}
        sessions = load_trace(path).sessions
        assert len(sessions) == 2 * len(LAB_TASKS[split]) and set(sessions["split"]) == {split}


class Recall:
    """Submits the answer of the task its episode was given, and keeps each episode's task."""

    def __init__(self) -> None:
        self.tasks: dict[tuple[int | None, int], ol.Task | None] = {}

    async def run(self, episode: Episode) -> None:
        self.tasks[(episode.index, episode.rollout)] = episode.task
        assert episode.task is not None
        await episode.call("submit", {"answer": episode.task.spec["answer"]})


def test_each_episode_is_given_its_task_asked_once_per_task(reference_server: ServerProcess, tmp_path: Path) -> None:
    """`episode.task` is its task's spec as `env.task` gives it, asked once per task for all its rollouts (at
    once), recorded: an evaluation of the trace's replay gives its episodes the same tasks."""
    path = tmp_path / "run.parquet"
    agent, replayed = Recall(), Recall()
    with Client(reference_server.url) as client:
        lab = client.environment("lab")
        tasks = {index: lab.task("train", index) for index in range(3)}
        result = evaluate(lab, agent, split="train", rollouts=3, concurrency=9, record=path, progress=False)
    assert agent.tasks == {(index, rollout): tasks[index] for index in range(3) for rollout in range(3)}
    assert result.errors.empty and set(result.episodes["reward"]) == {1.0}
    assert _requests(path)["POST /lab/task"] == 3
    assert sorted(body["index"] for body in _bodies(path, "POST /lab/task")) == [0, 1, 2]
    with ReplayServer(path, speed=0) as server, Client(server.url) as client:
        again = evaluate(client.environment("lab"), replayed, split="train", rollouts=3, concurrency=9,
                         progress=False)  # fmt: skip
    assert again.errors.empty and replayed.tasks == agent.tasks


def test_a_policy_sees_its_task(ors_sdk_server: ServerProcess) -> None:
    """A plain policy's `Observation.task` is its episode's task: answering from it is right on every task."""
    with Client(ors_sdk_server.url) as client:
        result = evaluate(client.environment("lab"), task_policy, split="test", progress=False)
    assert list(result.episodes["reward"]) == [1.0] * len(LAB_TASKS["test"])


def test_a_trace_recorded_before_runs_asked_for_their_tasks_still_replays() -> None:
    """The committed demo trace (recorded before an evaluation described its environment and asked for its
    tasks) replays an evaluation as before: every episode as recorded, no mismatch, `episode.task` None."""
    seen: list[ol.Task | None] = []

    class Watching(DemoAgent):
        async def run(self, episode: Episode) -> None:
            seen.append(episode.task)
            await super().run(episode)

    trace = REPO_ROOT / "recordings" / "demo.parquet"
    with ReplayServer(trace, speed=0) as server, Client(server.url) as client:
        result = evaluate(client.environment("arithmetic"), Watching(pace=0), split="test", rollouts=2,
                          progress=False)  # fmt: skip
    assert result.errors.empty and len(result.episodes) == 20
    assert seen == [None] * 20


# -- the split, when none is given --------------------------------------------------------------------


def test_without_a_split_an_environment_with_one_split_is_run_on_it(
    reference_server: ServerProcess, tmp_path: Path
) -> None:
    """evaluate() without split= on `echo`, whose only split is `dev`, runs `dev`: its result and trace say so."""
    path = tmp_path / "run.parquet"
    with Client(reference_server.url) as client:
        result = evaluate(client.environment("echo"), echo_once, record=path, progress=False)
    assert result.split == "dev" and repr(result).startswith("EvalResult(echo/dev: 2 episodes")
    assert list(result.episodes["split"]) == ["dev"] * len(ECHO_TASKS["dev"])
    assert list(result.episodes["reward"]) == [ECHO_REWARD] * len(ECHO_TASKS["dev"])
    assert set(load_trace(path).episodes["split"]) == {"dev"}


async def test_without_a_split_an_environment_with_several_is_a_clear_error(
    reference_server: ServerProcess, tmp_path: Path
) -> None:
    """aevaluate() without split= on `lab` (train and test) raises SplitRequiredError, a ValueError naming the
    splits and saying to pass split=, before any session or trace is made."""
    path = tmp_path / "run.parquet"
    async with AsyncClient(reference_server.url) as client:
        with pytest.raises(ValueError, match=r"^environment 'lab' has 2 splits: train, test; pass split= to say "
                           r"which one to evaluate$") as caught:  # fmt: skip
            await aevaluate(client.environment("lab"), lab_policy, record=path, progress=False)
    assert isinstance(caught.value, ol.SplitRequiredError)
    assert (caught.value.environment, caught.value.available) == ("lab", ["train", "test"])
    assert os.listdir(tmp_path) == []  # no trace, nor its parts


FIRST_EPISODE = """
import sys, time
import ors_lab as ol

heavy = ("pandas", "pyarrow", "numpy", "httpx", "ors_lab.agents.turn", "ors_lab.analysis.paired")
seen = {}

class Agent:
    async def run(self, episode):
        if not seen:
            seen["modules"] = [m for m in heavy if m in sys.modules]
        await episode.call("submit", {"answer": "15"})

with ol.Client(sys.argv[1]) as client:
    env = client.environment("lab")
    client.environments()  # connected
    recorder = ol.Recorder(sys.argv[2], flush_interval=60)  # its writer thread converts nothing before the close
    result = ol.evaluate(env, Agent(), split="train", tasks=2, record=recorder, progress=True)
    recorder.close()
print(seen["modules"], len(result.episodes), ol.load_trace(sys.argv[2]).summary()["episodes"].iloc[0])
"""


def test_a_fresh_processs_first_episode_runs_before_the_heavy_libraries_are_imported(
    ors_sdk_server: ServerProcess, tmp_path: Path
) -> None:
    """In a fresh process, a recorded evaluate() with its progress shown reaches its agent's first call with none of
    pandas, pyarrow, numpy and httpx imported (they load for the result, the trace's writing and what asks for them),
    nor the LLM answers' decoders (for an agent that reads one) or the paired statistics (for a run with a baseline),
    and the run's result and trace are whole."""
    done = subprocess.run([sys.executable, "-c", FIRST_EPISODE, ors_sdk_server.url, str(tmp_path / "run.parquet")],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[] 2 2"
