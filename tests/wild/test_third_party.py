"""OpenAIAgent against an OpenAI-compatible server written by others (stubllm, tests/wild/third_party.py), live,
on the lab environment of the ors-sdk reference server; faults through tests/wild/fault_proxy.py.

What is asserted is how ors_lab reads a streamed chat completion: stubllm streams parallel tool calls
all at ``index: 0``, told apart by their ``id`` alone, and ends a tool-call turn with ``[DONE]`` and
no ``finish_reason``; a stream that stops with neither is an "incomplete stream" and runs none of
its calls; a chunk that is not JSON is named in the error; every such failure is the provider's.
The model's answers are scripted in ``lab_script``: t0 two turns (step, then a wrong submit), t1
two calls in one turn (tally, then a right submit), t2 text only.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import psutil
import pytest

import ors_lab as ol
from tests.envs.common import EXPECTED, LAB_TASKS, step_result
from tests.wild.fault_proxy import Disconnect, FaultProxy, Malformed, Status, Truncate
from tests.wild.third_party import API_KEY, MODEL, PINNED, TEXT_ANSWER, ThirdPartyLLM, lab_script

pytestmark = pytest.mark.timeout(60)

TRAIN = LAB_TASKS["train"]
QUESTIONS = [task["question"] for task in TRAIN]


def agent(llm_url: str, **options: Any) -> ol.OpenAIAgent:
    """The agent under test on a chat-completions server at ``llm_url``; no retries (they would only slow a test)."""
    return ol.OpenAIAgent(MODEL, base_url=llm_url + "/v1", api_key=API_KEY, **{"max_retries": 0, **options})


def evaluate(ors_url: str, the_agent: ol.OpenAIAgent, **options: Any) -> ol.EvalResult:
    """``evaluate`` on the lab's train split, with a client closed afterwards."""
    with ol.Client(ors_url) as client:
        return ol.evaluate(client.environment("lab"), the_agent, split="train", progress=False, **options)


def tally(ors_url: str, key: str) -> int:
    """The lab server's tally of ``key`` (read with the `tally_count` tool, which changes nothing)."""
    with ol.Client(ors_url) as client, client.environment("lab").session(split="train", index=0) as session:
        return int(session.call("tally_count", {"key": key}).text)


def records(result: ol.EvalResult) -> dict[int, Any]:
    """Each episode by task index: its row of ``episodes`` (NA as None) with ``steps``, its rows of ``steps``
    (``input`` decoded)."""
    steps = result.steps
    out = {}
    for row in result.episodes.to_dict("records"):
        mine = steps[steps["session_id"] == row["session_id"]].to_dict("records")
        fields = {str(k): None if pd.isna(v) else v for k, v in row.items()}
        fields["steps"] = tuple(
            SimpleNamespace(**{str(k): None if pd.isna(v) else v for k, v in s.items()}) for s in mine
        )
        for step in fields["steps"]:
            step.input = json.loads(step.input)  # the frame holds it as JSON text
        out[int(row["task_index"])] = SimpleNamespace(**fields)
    return out


def comparable(record: Any) -> tuple[Any, ...]:
    """What two runs of one episode must agree on (not session ids, times or durations)."""
    steps = tuple((s.step, s.tool, s.input, s.ok, s.reward, s.finished, s.error) for s in record.steps)
    return (
        record.task_index,
        record.reward,
        record.finished,
        record.finish_reason,
        record.error,
        record.error_type,
        steps,
    )


def agent_events(trace: ol.Trace, session_id: str) -> list[dict[str, Any]]:
    """The agent events (wire form) of one session of a trace, in order."""
    rows = [r for r in trace.table.to_pylist() if r["layer"] == "agent" and r["session_id"] == session_id]
    return [
        json.loads(r["data"])
        for r in sorted(rows, key=lambda r: r["seq"])
        if r["kind"] not in ("request", "response", "chunk", "event", "disconnect", "episode")
    ]


# -- the server, and one clean live run recorded ---------------------------------------------------------


@dataclass
class Live:
    """The scripted stubllm, the tally key its t1 answer uses, and one clean run recorded to ``path``."""

    llm: ThirdPartyLLM
    key: str
    path: Path
    result: ol.EvalResult
    tally_runs: int  # how many times `tally` ran on the lab server during the clean run


@pytest.fixture(scope="module")
def live(ors_sdk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """stubllm started for this module, and the lab's train split evaluated on it once, recorded."""
    key = f"wild-{uuid.uuid4().hex}"
    workdir = tmp_path_factory.mktemp("wild")
    with ThirdPartyLLM(lab_script(key), workdir) as llm:
        path = workdir / "clean.parquet"
        before = tally(ors_sdk_server.url, key)
        result = evaluate(ors_sdk_server.url, agent(llm.url), record=path)
        yield Live(llm, key, path, result, tally(ors_sdk_server.url, key) - before)


def test_stubllm_serves_on_loopback_the_pinned_version(live: Live) -> None:
    """The wild server is the stubllm pinned in pyproject.toml, in its own process, listening on 127.0.0.1 only."""
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert f'"stubllm=={PINNED}"' in pyproject and importlib.metadata.version("stubllm") == PINNED
    process = psutil.Process(live.llm.pid)
    assert process.pid != os.getpid()
    assert {c.laddr for c in process.net_connections("inet") if c.status == "LISTEN"} == {("127.0.0.1", live.llm.port)}


def test_a_two_turn_episode_gets_the_environments_rewards(live: Live) -> None:
    """t0: step then a wrong submit, over two turns: the steps' rewards are the environment's, summed."""
    record = records(live.result)[0]
    step_reward = step_result(1)[1]
    submit_reward = EXPECTED[("train", 0, "5")]
    assert [(s.tool, s.input, s.reward, s.finished) for s in record.steps] == [
        ("step", {"value": 1}, step_reward, False),
        ("submit", {"answer": "5"}, submit_reward, True),
    ]
    assert (record.error, record.finished, record.reward) == (None, True, pytest.approx(step_reward + submit_reward))


def test_a_text_answer_ends_its_episode(live: Live) -> None:
    """t2: a turn of text only (finish reason stop) ends the episode with that text and no step."""
    record = records(live.result)[2]
    assert (record.error, record.steps, record.finish_reason, record.finished) == (None, (), "stop", False)
    events = agent_events(ol.load_trace(live.path), record.session_id)
    assert "".join(e["delta"] for e in events if e["type"] == "text-delta") == TEXT_ANSWER


def test_parallel_calls_each_run_once_with_their_own_arguments(live: Live) -> None:
    """t1: two calls in one turn, both at index 0 with their own ids: each runs once, with its own arguments."""
    record = records(live.result)[1]
    assert [(s.tool, s.input) for s in record.steps] == [("tally", {"key": live.key}), ("submit", {"answer": "Paris"})]
    assert live.tally_runs == 1
    assert (record.error, record.finished, record.reward) == (None, True, EXPECTED[("train", 1, "Paris")])
    events = agent_events(ol.load_trace(live.path), record.session_id)
    assert [(e["toolCallId"], e["toolName"], e["input"]) for e in events if e["type"] == "tool-input-available"] == [
        ("call_wild_t1_tally", "tally", {"key": live.key}),
        ("call_wild_t1_submit", "submit", {"answer": "Paris"}),
    ]
    assert not [e for e in events if e["type"] in ("tool-output-error", "error")]


def test_the_trace_replays_offline_with_the_same_rewards(live: Live) -> None:
    """The recorded run, replayed with no model and no environment server, gives the same episodes and rewards."""
    transport = ol.AgentReplayTransport(live.path)
    with ol.ReplayServer(live.path, speed=0) as server:
        again = evaluate(server.url, agent(live.llm.url, transport=transport))
        assert server.unplayed() == []
    assert transport.unplayed() == []
    assert {i: comparable(r) for i, r in records(again).items()} == {
        i: comparable(r) for i, r in records(live.result).items()
    }
    assert again.summary()["mean_reward"].tolist() == live.result.summary()["mean_reward"].tolist()


# -- faults between the agent and the server ----------------------------------------------------------------

SPLIT = {"split_arguments": True}
FAULTS = {
    # t1's stream, split: tally head, tally tail, submit head, submit tail, [DONE]
    "disconnect": (Disconnect(QUESTIONS[1], after=3, into=20, **SPLIT), 1, "provider_error"),
    "truncated": (Truncate(QUESTIONS[1], after=3, **SPLIT), 1, "provider_error"),
    # t0's first stream: the step call, [DONE]; the bad chunk comes after the whole call
    "malformed": (Malformed(QUESTIONS[0], after=1), 0, "provider_error"),
    "429": (Status(QUESTIONS[0], status=429, headers={"retry-after": "7"}), 0, "rate_limit_error"),
    "500": (Status(QUESTIONS[0], status=500), 0, "provider_error"),
    "503": (Status(QUESTIONS[0], status=503), 0, "provider_overloaded"),
}


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_fault_fails_only_its_episode_as_a_provider_error(
    live: Live, ors_sdk_server: Any, tmp_path: Path, name: str
) -> None:
    """A broken answer fails only its episode, as a typed provider error, and none of that turn's tools runs."""
    template, task, seed_type = FAULTS[name]
    fault = dataclasses.replace(template)  # its own count of `times`
    path = tmp_path / f"{name}.parquet"
    with FaultProxy(live.llm.url) as proxy:
        proxy.fault = fault
        before = tally(ors_sdk_server.url, live.key)
        result = evaluate(ors_sdk_server.url, agent(proxy.url), record=path)
        tally_runs = tally(ors_sdk_server.url, live.key) - before
    assert proxy.hits == 1
    clean, got = records(live.result), records(result)
    failed = got[task]
    assert (failed.finish_reason, failed.finished, failed.steps, failed.reward) == ("error", False, (), 0.0)
    assert failed.error is not None and failed.error_type is not None
    assert failed.session_id in set(result.errors["session_id"])
    if task == 1:
        assert tally_runs == 0  # the whole tally call came before the fault: it must not run either

    events = agent_events(ol.load_trace(path), failed.session_id)
    [error] = [e for e in events if e["type"] == "error"]
    assert (error["errorType"], error["source"]) == (seed_type, "provider")
    assert error["retryable"] is (name in ("429", "503"))
    assert error.get("retryAfter") == (7.0 if name == "429" else None)
    if name in ("429", "500", "503"):
        assert f"fault proxy: injected {name}" in error["message"]
    if isinstance(fault, Malformed):  # the chunk is named: its number (the 2nd data event) and its first 200 characters
        assert re.search(r"chunk\D{0,3}2\b", error["message"]) and fault.data.decode()[:200] in error["message"]
    assert not [e for e in events if e["type"] in ("tool-input-available", "tool-output-available")]

    assert {i: comparable(r) for i, r in got.items() if i != task} == {
        i: comparable(r) for i, r in clean.items() if i != task
    }
