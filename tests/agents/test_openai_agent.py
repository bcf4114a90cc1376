"""OpenAIAgent against a real streaming chat-completions server (tests/llm_server.py) and the ORS reference servers.

The scripted model answers every lab task with the `submit` tool, correctly except for "Spell 'cat'
backwards." (it says "cat"), so both rewards of `tests/envs/common.py` EXPECTED appear.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx2
import pandas as pd
import pytest

import ors_lab as ol
from ors_lab.events import AGENT_KINDS, AgentEvent
from ors_lab.recording.reading import read_part
from tests.envs.common import EXPECTED, LAB_TASKS
from tests.llm_server import API_KEY, CACHED_TOKENS, MODEL, PROMPT_TOKENS, LLMServer, Streamed, usage_of

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN = LAB_TASKS["train"]
WRONG = "Spell 'cat' backwards."
ANSWERS = {task["question"]: task["answer"] for tasks in LAB_TASKS.values() for task in tasks} | {WRONG: "cat"}
FIRST = TRAIN[0]["question"]  # "What is 2 + 2?"
WIRE_KINDS = ("request", "response", "chunk", "event")

pytestmark = pytest.mark.timeout(120)


def agent(llm_url: str, **options: Any) -> ol.OpenAIAgent:
    """The agent under test, on the scripted model."""
    return ol.OpenAIAgent(MODEL, base_url=llm_url + "/v1", api_key=API_KEY, **options)


def evaluate(ors_url: str, the_agent: ol.OpenAIAgent, **options: Any) -> ol.EvalResult:
    """`evaluate` on the lab's train split, with a client that is closed afterwards."""
    with ol.Client(ors_url) as client:
        return ol.evaluate(client.environment("lab"), the_agent, split="train", progress=False, **options)


def agent_rows(trace: ol.Trace, session_id: str) -> list[dict[str, Any]]:
    """The session's agent-layer rows of a trace, in order."""
    rows = [r for r in trace.table.to_pylist() if r["layer"] == "agent" and r["session_id"] == session_id]
    return sorted(rows, key=lambda r: r["seq"])


def agent_events(trace: ol.Trace, session_id: str) -> list[dict[str, Any]]:
    """The session's agent events from the trace, in wire form (the `episode` row as `{type, record}`)."""
    return [
        {"type": "episode", "record": json.loads(r["data"])} if r["kind"] == "episode" else json.loads(r["data"])
        for r in agent_rows(trace, session_id)
        if r["kind"] in AGENT_KINDS
    ]


def shape(events: list[dict[str, Any]]) -> list[str]:
    """Event types, with a run of deltas written once as `kind+`."""
    out: list[str] = []
    for event in events:
        kind = event["type"]
        if kind.endswith("-delta") and out and out[-1] == kind + "+":
            continue
        out.append(kind + "+" if kind.endswith("-delta") else kind)
    return out


def deltas(events: list[dict[str, Any]], kind: str, field: str = "delta") -> list[str]:
    """The payloads of every `kind` event, in order."""
    return [e[field] for e in events if e.get("type") == kind]


def records(result: ol.EvalResult) -> list[Any]:
    """Each episode of a result as one object: its row of `episodes` (NA as None), with `steps`, its rows of `steps`."""
    steps = result.steps
    out = []
    for row in result.episodes.to_dict("records"):
        mine = steps[steps["session_id"] == row["session_id"]].to_dict("records")
        fields = {str(k): None if pd.isna(v) else v for k, v in row.items()}
        fields["steps"] = tuple(SimpleNamespace(**{str(k): None if pd.isna(v) else v for k, v in s.items()})
                                for s in mine)  # fmt: skip
        out.append(SimpleNamespace(**fields))
    return out


def comparable(record: Any) -> tuple[Any, ...]:
    """What two runs of one episode must agree on (not session ids, times or durations)."""
    steps = tuple((s.step, s.tool, s.input, s.ok, s.reward, s.finished, s.error) for s in record.steps)
    return (record.task_index, record.rollout, record.reward, record.finished, record.finish_reason,
            record.error, record.error_type, steps)  # fmt: skip


def stream_for(llm: LLMServer, question: str, turn: int = 0) -> Streamed:
    """What the scripted model streamed on `turn` of the conversation about `question`."""
    return [s for s in llm.streamed if s.question == question][turn]


@pytest.fixture
def llm() -> Iterator[LLMServer]:
    """The scripted model, answering the lab's questions."""
    with LLMServer(ANSWERS) as server:
        yield server


# -- one live run, recorded, shared by the trace and replay tests ------------------------------------


@dataclass
class Recorded:
    """A live evaluation recorded to `path`, with what the model streamed and what subscribers saw."""

    path: Path
    result: ol.EvalResult
    live_events: list[AgentEvent]
    llm: LLMServer
    part_bytes: dict[str, bytes]

    @property
    def trace(self) -> ol.Trace:
        return ol.load_trace(self.path)


def _wait_for_parts(parts: Path, episodes: int) -> dict[str, bytes]:
    """The raw bytes of every written part, once the parts hold all `episodes` episode rows."""
    deadline = time.monotonic() + 10
    while True:
        files = sorted(parts.glob("part-*"))
        kinds = [k for f in files for k in read_part(f).column("kind").to_pylist()]
        if kinds.count("episode") >= episodes or time.monotonic() > deadline:
            return {f.name: f.read_bytes() for f in files}
        time.sleep(0.02)


@pytest.fixture(scope="module")
def recorded(reference_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """The lab's train split run live on each reference server and recorded; the model is stopped afterwards."""
    path = tmp_path_factory.mktemp("llm") / f"{reference_server.sdk}.parquet"
    events: list[AgentEvent] = []
    # uncompressed and in small, frequent parts, so that the raw bytes can be searched for the key
    with LLMServer(ANSWERS) as llm, ol.Recorder(path, compression="none", flush_interval=0.01, part_rows=64) as rec:
        result = evaluate(reference_server.url, agent(llm.url), record=rec, subscribe=events.append)
        part_bytes = _wait_for_parts(rec.parts, len(TRAIN))
    return Recorded(path, result, events, llm, part_bytes)


# -- rewards ---------------------------------------------------------------------------------------------


def test_rewards_are_the_environments(reference_server: Any, llm: LLMServer, tmp_path: Path) -> None:
    """A live run with record=PATH gives each task the reward EXPECTED defines for the model's answer."""
    result = evaluate(reference_server.url, agent(llm.url), record=tmp_path / "llm.parquet")
    assert [(r.task_index, r.error) for r in records(result)] == [(0, None), (1, None), (2, None)]
    for record, task in zip(records(result), TRAIN, strict=True):
        answer = ANSWERS[task["question"]]
        assert record.reward == EXPECTED[("train", record.task_index, answer)]
        assert (record.finished, record.finish_reason) == (True, "stop")
        assert [(s.tool, json.loads(s.input)) for s in record.steps] == [("submit", {"answer": answer})]
    assert sorted(r.reward for r in records(result)) == [0.0, 1.0, 1.0]
    assert ol.load_trace(tmp_path / "llm.parquet").episodes["total_reward"].sort_values().tolist() == [0.0, 1.0, 1.0]


def test_requests_are_what_a_provider_expects(reference_server: Any, llm: LLMServer) -> None:
    """Each turn is one streamed POST with the model, the prompt, the key and the session's tools as functions."""
    evaluate(reference_server.url, agent(llm.url))
    assert len(llm.requests) == len(TRAIN)
    prompts = set()
    for seen in llm.requests:
        assert seen.path == "/v1/chat/completions"
        assert seen.headers["authorization"] == f"Bearer {API_KEY}"
        assert (seen.body["model"], seen.body["stream"]) == (MODEL, True)
        [message] = seen.body["messages"]
        assert message["role"] == "user"
        prompts.add(message["content"])
        names = {tool["function"]["name"] for tool in seen.body["tools"]}
        assert {"submit", "step"} <= names
        assert all(tool["type"] == "function" for tool in seen.body["tools"])
        submit = next(t["function"] for t in seen.body["tools"] if t["function"]["name"] == "submit")
        assert submit["parameters"]["properties"]["answer"]["type"] == "string"
    assert prompts == {f"{task['question']} Answer with the submit tool." for task in TRAIN}


def test_a_wrong_key_is_an_episode_error(ors_sdk_server: Any, llm: LLMServer) -> None:
    """A key the provider refuses (401) fails each episode with AuthenticationError; the run still ends."""
    result = evaluate(ors_sdk_server.url, ol.OpenAIAgent(MODEL, base_url=llm.url + "/v1", api_key="sk-wrong"))
    assert [(r.error_type, r.finish_reason, r.reward) for r in records(result)] == [
        ("AuthenticationError", "error", 0.0)
    ] * len(TRAIN)


# -- agent events ----------------------------------------------------------------------------------------


def test_agent_events_follow_the_stream_vocabulary(recorded: Recorded) -> None:
    """Per episode: start, reasoning, text and tool-input parts, the call, reward, finish and episode, in order."""
    trace = recorded.trace
    for record in records(recorded.result):
        events = agent_events(trace, record.session_id)
        assert shape(events) == [
            "start",
            "block-start",
            "reasoning-start", "reasoning-delta+", "reasoning-end",
            "text-start", "text-delta+", "text-end",
            "tool-input-start", "tool-input-delta+", "tool-input-end", "usage",
            "tool-input-available", "tool-output-available", "reward",
            "block-end",
            "finish", "usage", "episode",
        ]  # fmt: skip
        assert events[0] == {"type": "start", "messageId": record.session_id}
        block = events[1]
        assert block == {"type": "block-start", "blockId": block["blockId"], "blockName": "turn 1",
                         "blockType": "turn", "display": "stream", "thread": "main"}  # fmt: skip
        assert next(e for e in events if e["type"] == "block-end") == {"type": "block-end", "blockId": block["blockId"],
                                                                       "summary": "finish: tool-calls"}  # fmt: skip
        assert events[-3] == {"type": "finish", "finishReason": "stop"}


def test_agent_deltas_are_what_the_model_streamed(recorded: Recorded) -> None:
    """Reasoning, text and tool-input deltas are the model's pieces, one event each; ids tie each part together."""
    trace = recorded.trace
    for record in records(recorded.result):
        question = TRAIN[record.task_index]["question"]
        streamed = stream_for(recorded.llm, question)
        events = agent_events(trace, record.session_id)
        assert deltas(events, "reasoning-delta") == streamed.reasoning
        assert deltas(events, "text-delta") == streamed.text
        assert deltas(events, "tool-input-delta", "inputTextDelta") == streamed.arguments
        assert len(streamed.arguments) >= 3
        arguments = "".join(streamed.arguments)
        call_id = streamed.tool_call_id
        assert json.loads(arguments) == {"answer": ANSWERS[question]}
        for part in ("reasoning", "text"):
            ids = {e["id"] for e in events if e["type"].startswith(part + "-")}
            assert len(ids) == 1
        tool_events = [e for e in events if e["type"].startswith(("tool-", "reward"))]
        assert {e["toolCallId"] for e in tool_events} == {call_id}
        start = next(e for e in events if e["type"] == "tool-input-start")
        available = next(e for e in events if e["type"] == "tool-input-available")
        assert start == {"type": "tool-input-start", "toolCallId": call_id, "toolName": "submit"}
        assert available["input"] == json.loads(arguments)
        output = next(e for e in events if e["type"] == "tool-output-available")["output"]
        reward = next(e for e in events if e["type"] == "reward")
        assert output["text"] == ("Correct!" if record.reward == 1.0 else "Incorrect, the answer was tac")
        assert (reward["reward"], reward["finished"]) == (record.reward, True)


def test_subscribers_see_what_the_trace_holds(recorded: Recorded) -> None:
    """The events handed to `subscribe` are the trace's agent events, in the same order."""
    trace = recorded.trace
    for record in records(recorded.result):
        live = [e.to_wire() for e in recorded.live_events if e.session_id == record.session_id]
        stored = agent_events(trace, record.session_id)
        assert [e for e in live if e["type"] != "episode"] == [e for e in stored if e["type"] != "episode"]
        assert (live[-1]["type"], live[-1]["reward"], live[-1]["finished"]) == ("episode", record.reward, True)
        kept = stored[-1]["record"]
        assert (kept["session_id"], kept["reward"], kept["steps"], kept["finish_reason"]) == (
            record.session_id, record.reward, len(record.steps), "stop")  # fmt: skip


def test_usage_is_reported_per_call_and_per_episode(recorded: Recorded) -> None:
    """Each completion's tokens (asked for in its request) are a usage event; the episode's totals follow
    its finish and are the episodes' and tasks' token columns, live and in the trace."""
    assert all(seen.body["stream_options"] == {"include_usage": True} for seen in recorded.llm.requests)
    trace = recorded.trace
    for record in records(recorded.result):
        usage = usage_of(stream_for(recorded.llm, TRAIN[record.task_index]["question"]))
        reasoning = usage["completion_tokens_details"]["reasoning_tokens"]
        totals = {"inputTokens": PROMPT_TOKENS, "outputTokens": usage["completion_tokens"],
                  "reasoningTokens": reasoning, "cachedInputTokens": CACHED_TOKENS}  # fmt: skip
        events = agent_events(trace, record.session_id)
        per_call, per_episode = [e for e in events if e["type"] == "usage"]
        assert per_call == {"type": "usage", **totals, "scope": "call", "model": MODEL}
        assert per_episode == {"type": "usage", **totals, "scope": "episode"}
        assert (record.input_tokens, record.output_tokens, record.reasoning_tokens, record.cached_tokens) == (
            PROMPT_TOKENS, usage["completion_tokens"], reasoning, CACHED_TOKENS)  # fmt: skip
    tasks = recorded.result.tasks
    assert tasks["input_tokens"].tolist() == [PROMPT_TOKENS] * len(TRAIN)
    assert recorded.result.summary()["cached_tokens"].tolist() == [CACHED_TOKENS * len(TRAIN)]
    stored = trace.episodes.set_index("session_id")
    live = recorded.result.episodes.set_index("session_id")
    assert stored.loc[live.index, ["input_tokens", "output_tokens"]].equals(live[["input_tokens", "output_tokens"]])


# -- the LLM traffic in the trace ------------------------------------------------------------------------


def test_llm_traffic_is_in_the_same_trace(recorded: Recorded) -> None:
    """Each episode's chat completion is recorded as agent-layer request, response, chunk and event rows."""
    trace = recorded.trace
    for record in records(recorded.result):
        rows = [r for r in agent_rows(trace, record.session_id) if r["kind"] in WIRE_KINDS]
        kinds = [r["kind"] for r in rows]
        assert kinds[:2] == ["request", "response"]
        assert set(kinds[2:]) == {"chunk", "event"} and "request" not in kinds[2:]
        request, response = rows[0], rows[1]
        assert request["method"] == "POST"
        assert request["url"].endswith("/v1/chat/completions")
        assert json.loads(request["body"])["model"] == MODEL
        assert json.loads(request["headers"])["authorization"] == "<redacted>"
        assert response["status"] == 200
        assert json.loads(response["headers"])["content-type"].startswith("text/event-stream")
        assert {r["exchange"] for r in rows} == {request["exchange"]}
        data = [r["data"] for r in rows if r["kind"] == "event"]
        assert data[-1] == "[DONE]"
        chunks = [json.loads(d) for d in data[:-1]]
        assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
        assert [c for c in chunks if c["choices"]][-1]["choices"][0]["finish_reason"] == "tool_calls"
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == PROMPT_TOKENS
        assert sum(r["size"] for r in rows if r["kind"] == "chunk") > 0


def test_the_api_key_is_in_no_file_written(recorded: Recorded) -> None:
    """The key the model was called with appears in no byte of the trace, its parts, or any cell."""
    key = API_KEY.encode()
    assert all(s.headers["authorization"] == f"Bearer {API_KEY}" for s in recorded.llm.requests)  # it was sent
    files = {p.name: p.read_bytes() for p in recorded.path.parent.rglob("*") if p.is_file()}
    assert recorded.part_bytes and files
    for blob in [*recorded.part_bytes.values(), *files.values()]:
        assert key not in blob
    # the search can see text: uncompressed pages hold the prompts and the LLM's URL as plain bytes
    for needle in (b"/v1/chat/completions", TRAIN[1]["question"].encode()):
        assert any(needle in blob for blob in recorded.part_bytes.values())
        assert needle in files[recorded.path.name]
    cells = [v for row in recorded.trace.table.to_pylist() for v in row.values() if isinstance(v, str | bytes)]
    assert not [v for v in cells if (key if isinstance(v, bytes) else API_KEY) in v]


# -- offline replay --------------------------------------------------------------------------------------


def replay(recorded: Recorded, the_agent: ol.OpenAIAgent, **options: Any) -> tuple[ol.EvalResult, list[AgentEvent]]:
    """The same evaluation against the trace alone: ReplayServer for ORS, AgentReplayTransport for the model."""
    events: list[AgentEvent] = []
    with ol.ReplayServer(recorded.path, speed=0) as server:
        result = evaluate(server.url, the_agent, subscribe=events.append, **options)
        assert server.unplayed() == []
    return result, events


def agent_said(events: list[AgentEvent], session_id: str) -> list[dict[str, Any]]:
    """What the agent said and did in one episode (every event but `start`, whose id is the session's)."""
    return [e.to_wire() for e in events if e.session_id == session_id and e.type not in ("start", "episode")]


def test_replay_is_the_live_run_offline(recorded: Recorded) -> None:
    """With the model stopped, the ORS replay and the agent's replay transport give the same episodes and events."""
    transport = ol.AgentReplayTransport(recorded.path)
    with pytest.raises(httpx2.ConnectError):  # the model is gone: nothing below can have reached it
        httpx2.post(recorded.llm.url + "/v1/chat/completions", json={})
    result, events = replay(recorded, agent(recorded.llm.url, transport=transport))
    assert [comparable(r) for r in records(result)] == [comparable(r) for r in records(recorded.result)]
    assert transport.unplayed() == []
    for live, again in zip(records(recorded.result), records(result), strict=True):
        said_live = agent_said(recorded.live_events, live.session_id)
        said_again = agent_said(events, again.session_id)
        assert said_again == said_live
        assert deltas(said_again, "reasoning-delta") and deltas(said_again, "text-delta")


@pytest.mark.parametrize(
    ("options", "differs"),
    [
        ({"model": "other-model"}, 'body.model: "other-model" != recorded "test-model"'),
        ({"temperature": 0.5}, "body.temperature: 0.5 != recorded null"),
    ],
    ids=["model", "temperature"],
)
def test_a_changed_request_fails_the_replay_by_name(recorded: Recorded, options: dict[str, Any], differs: str) -> None:
    """A request unlike the recorded one fails its episode with ReplayMismatchError naming the field and the trace."""
    options = dict(options)
    model = options.pop("model", MODEL)
    transport = ol.AgentReplayTransport(recorded.path)
    the_agent = ol.OpenAIAgent(model, base_url=recorded.llm.url + "/v1", api_key=API_KEY, transport=transport,
                               **options)  # fmt: skip
    events: list[AgentEvent] = []
    with ol.ReplayServer(recorded.path, speed=0) as server:
        result = evaluate(server.url, the_agent, subscribe=events.append)
    for record in records(result):
        assert (record.error_type, record.finish_reason, record.reward, record.steps) == (
            "ReplayMismatchError", "error", 0.0, ()
        )  # fmt: skip
        assert record.error is not None
        assert "no recorded agent request matches POST /v1/chat/completions" in record.error
        assert f"what differs: {differs}" in record.error
        assert str(recorded.path) in record.error
        assert "to record again" in record.error
    errors = [e.to_wire() for e in events if e.type == "error"]
    assert [(e["errorType"], e["source"], e["code"]) for e in errors] == [
        ("provider_error", "provider", "ReplayMismatchError")
    ] * len(TRAIN)


def test_a_record_path_run_replays_offline(ors_sdk_server: Any, llm: LLMServer, tmp_path: Path) -> None:
    """A run recorded with record=PATH alone replays: the trace holds every request evaluate() makes."""
    path = tmp_path / "llm.parquet"
    live = evaluate(ors_sdk_server.url, agent(llm.url), record=path)
    with ol.ReplayServer(path, speed=0) as server:
        again = evaluate(server.url, agent(llm.url, transport=ol.AgentReplayTransport(path)))
    assert [comparable(r) for r in records(again)] == [comparable(r) for r in records(live)]


RECORD_ONE_TASK = """
import sys, ors_lab as ol
ors_url, llm_url, key, path = sys.argv[1:]
with ol.Recorder(path, append=True) as rec, ol.Client(ors_url) as client:
    agent = ol.OpenAIAgent("test-model", base_url=llm_url + "/v1", api_key=key)
    ol.evaluate(client.environment("lab"), agent, split="train", tasks=1, record=rec, progress=False)
"""


def test_a_trace_of_two_recording_runs_replays(ors_sdk_server: Any, llm: LLMServer, tmp_path: Path) -> None:
    """Two runs appended to one trace by two processes (same exchange numbers) replay from the first run."""
    path = tmp_path / "two-runs.parquet"
    for _ in range(2):
        subprocess.run([sys.executable, "-c", RECORD_ONE_TASK, ors_sdk_server.url, llm.url, API_KEY, str(path)],
                       check=True, cwd=REPO_ROOT, timeout=60)  # fmt: skip
    trace = ol.load_trace(path)
    assert len(set(trace.table.column("run_id").to_pylist())) == 2
    transport = ol.AgentReplayTransport(trace)
    with ol.ReplayServer(trace, speed=0) as server:
        result = evaluate(server.url, agent(llm.url, transport=transport), tasks=1)
    [record] = records(result)
    assert (record.error, record.reward, record.finished) == (None, 1.0, True)
    assert len(transport.unplayed()) == 0


# -- the model's other answers ---------------------------------------------------------------------------


def test_an_answer_without_a_tool_call_ends_the_episode(ors_sdk_server: Any, tmp_path: Path) -> None:
    """A turn with no tool call ends the episode: finish reason "stop", not finished, no steps, no error."""
    with LLMServer(ANSWERS, mode="text") as llm:
        result = evaluate(ors_sdk_server.url, agent(llm.url), record=tmp_path / "text.parquet")
    trace = ol.load_trace(tmp_path / "text.parquet")
    for record in records(result):
        assert (record.finish_reason, record.finished, record.error, record.steps, record.reward) == (
            "stop", False, None, (), 0.0
        )  # fmt: skip
        events = agent_events(trace, record.session_id)
        assert shape(events) == ["start", "block-start", "reasoning-start", "reasoning-delta+", "reasoning-end",
                                 "text-start", "text-delta+", "text-end", "usage", "block-end", "finish", "usage",
                                 "episode"]  # fmt: skip
        streamed = stream_for(llm, TRAIN[record.task_index]["question"])
        assert "".join(deltas(events, "text-delta")) == "".join(streamed.text)
    assert len(llm.requests) == len(TRAIN)


def test_malformed_tool_arguments_go_back_to_the_model(ors_sdk_server: Any, tmp_path: Path) -> None:
    """Arguments that are not JSON: a tool-output-error event and an error tool message, then the model goes on."""
    with LLMServer(ANSWERS, modes={FIRST: "malformed"}) as llm:
        result = evaluate(ors_sdk_server.url, agent(llm.url), record=tmp_path / "bad.parquet")
    bad, *good = records(result)
    assert (bad.error, bad.finished, bad.finish_reason, bad.steps) == (None, False, "stop", ())
    assert [(r.error, r.finished, r.reward) for r in good] == [(None, True, 1.0), (None, True, 0.0)]

    first, second = stream_for(llm, FIRST, 0), stream_for(llm, FIRST, 1)
    arguments = "".join(first.arguments)
    events = agent_events(ol.load_trace(tmp_path / "bad.parquet"), bad.session_id)
    assert "tool-input-available" not in shape(events)
    [error] = [e for e in events if e["type"] == "tool-output-error"]
    assert error["toolCallId"] == first.tool_call_id
    assert error["error"].startswith("the arguments are not one JSON value") and arguments in error["error"]
    assert deltas(events, "text-delta")[-len(second.text) :] == second.text

    conversation = [s.body["messages"] for s in llm.requests if s.body["messages"][0]["content"].startswith(FIRST)]
    assert len(conversation) == 2
    _, assistant, tool = conversation[1]
    assert assistant["tool_calls"] == [
        {"id": first.tool_call_id, "type": "function", "function": {"name": "submit", "arguments": arguments}}
    ]
    assert assistant["content"] == "".join(first.text)
    assert tool == {"role": "tool", "tool_call_id": first.tool_call_id, "content": "error: " + error["error"]}


@pytest.mark.parametrize(
    ("status", "retries", "error_type", "seed_type"),
    [
        (500, 0, "InternalServerError", "provider_error"),
        (429, 2, "RateLimitError", "rate_limit_error"),
        (503, 0, "InternalServerError", "provider_overloaded"),
    ],
    ids=["500", "429-after-retries", "503"],
)
def test_an_llm_http_error_fails_only_its_episode(
    ors_sdk_server: Any, tmp_path: Path, status: int, retries: int, error_type: str, seed_type: str
) -> None:
    """An HTTP error the SDK gives up on fails that episode with the error; the other episodes run to the end."""
    path = tmp_path / "error.parquet"
    with LLMServer(ANSWERS, modes={FIRST: "error"}, error_status=status) as llm:
        result = evaluate(ors_sdk_server.url, agent(llm.url, max_retries=retries), record=path)
    failed, *good = records(result)
    assert (failed.error_type, failed.finish_reason, failed.reward, failed.steps) == (error_type, "error", 0.0, ())
    assert failed.error is not None and f"scripted failure ({status})" in failed.error
    assert [(r.error, r.reward) for r in good] == [(None, 1.0), (None, 0.0)]

    rows = agent_rows(ol.load_trace(path), failed.session_id)
    assert [r["status"] for r in rows if r["kind"] == "response"] == [status] * (retries + 1)
    assert len({r["exchange"] for r in rows if r["kind"] == "request"}) == retries + 1
    [error] = [json.loads(r["data"]) for r in rows if r["kind"] == "error"]
    assert (error["errorType"], error["source"], error["code"]) == (seed_type, "provider", error_type)
    assert error["retryable"] is (status in (429, 503))


def test_a_cut_stream_fails_again_in_replay(ors_sdk_server: Any, tmp_path: Path) -> None:
    """A model stream that broke while recording breaks the same way in replay, after the same deltas."""
    path = tmp_path / "cut.parquet"
    live_events: list[AgentEvent] = []
    with LLMServer(ANSWERS, modes={FIRST: "cut"}) as llm:
        live = evaluate(ors_sdk_server.url, agent(llm.url, max_retries=0), record=path, subscribe=live_events.append)
    cut = records(live)[0]
    assert cut.error_type == "ProviderStreamError"
    assert "the connection was cut while the answer streamed" in cut.error and "bytes of chunk data" in cut.error
    assert "the last chunk:" in cut.error and "reasoning_content" in cut.error  # what came before the cut
    trace = ol.load_trace(path)
    assert any(r["kind"] == "disconnect" and r["layer"] == "agent" for r in trace.table.to_pylist())

    events: list[AgentEvent] = []
    with ol.ReplayServer(trace, speed=0) as server:
        the_agent = agent(llm.url, max_retries=0, transport=ol.AgentReplayTransport(trace))
        again = evaluate(server.url, the_agent, subscribe=events.append)
    assert [comparable(r) for r in records(again)] == [comparable(r) for r in records(live)]
    said = agent_said(events, records(again)[0].session_id)
    assert said == agent_said(live_events, records(live)[0].session_id)
    assert 0 < len(deltas(said, "reasoning-delta")) < len(stream_for(llm, FIRST).reasoning)


async def test_a_given_transport_is_left_open(ors_sdk_server: Any, llm: LLMServer) -> None:
    """A transport handed to the agent is shared by its episodes and never closed by them."""

    class CountingCloses(httpx2.AsyncHTTPTransport):
        closes = 0

        async def aclose(self) -> None:
            self.closes += 1
            await super().aclose()

    transport = CountingCloses()
    try:
        async with ol.AsyncClient(ors_sdk_server.url) as client:
            result = await ol.aevaluate(client.environment("lab"), agent(llm.url, transport=transport),
                                        split="train", concurrency=3, progress=False)  # fmt: skip
        assert [r.reward for r in records(result)] == [1.0, 1.0, 0.0]
        assert transport.closes == 0
    finally:
        await transport.aclose()


# -- the committed trace, replayed as the README shows it ------------------------------------------------

COMMITTED = REPO_ROOT / "recordings" / "openai-arithmetic.parquet"
COMMITTED_MODEL = "scripted-model"


def replay_committed(model: str, **options: Any) -> ol.EvalResult:
    """The README's offline run: the committed trace behind a ReplayServer, and the agent's model replayed."""
    the_agent = ol.OpenAIAgent(model, transport=ol.AgentReplayTransport(COMMITTED))
    with ol.ReplayServer(COMMITTED, speed=0) as server, ol.Client(server.url) as client:
        return ol.evaluate(client.environment("arithmetic"), the_agent, split="test", **options)


@pytest.mark.parametrize("key", [None, "sk-in-the-environment"], ids=["no-key", "key-in-environment"])
def test_a_replayed_model_needs_no_key_and_sends_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: str | None
) -> None:
    """With AgentReplayTransport no API key is needed, none is read from the environment, and no
    Authorization header is sent (so none reaches the trace of the run)."""
    if key is None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", key)
    path = tmp_path / "again.parquet"
    result = replay_committed(COMMITTED_MODEL, rollouts=2, record=path, progress=False)
    assert result.errors.empty and len(result) == 20 and result.summary()["mean_reward"].tolist() == [0.8]
    requests = [r for r in ol.load_trace(path).table.to_pylist() if r["layer"] == "agent" and r["kind"] == "request"]
    assert len(requests) == 20
    assert not [r for r in requests if "authorization" in json.loads(r["headers"])]
    assert key is None or key.encode() not in path.read_bytes()


@pytest.mark.parametrize("rollouts", [1, 2, 3])
def test_tasks_none_replays_the_episodes_the_committed_trace_holds(rollouts: int) -> None:
    """tasks=None runs the trace's (task, rollout) pairs below `rollouts` (it holds 10 tasks x 2), not more."""
    held = {(r["task_index"], r["rollout"]) for r in ol.load_trace(COMMITTED).table.to_pylist()
            if r["kind"] == "episode" and r["layer"] == "agent"}  # fmt: skip
    result = replay_committed(COMMITTED_MODEL, rollouts=rollouts, progress=False)
    pairs = list(zip(result.episodes["task_index"], result.episodes["rollout"], strict=True))
    assert pairs == sorted(pair for pair in held if pair[1] < rollouts) and result.errors.empty


def test_another_model_name_is_reported_as_a_replay_mismatch(capsys: pytest.CaptureFixture[str]) -> None:
    """A model name unlike the recorded one fails each episode with a ReplayMismatchError: its type and message
    (what was asked, what the trace holds) in the errors table, its type in the summary, both in the run's text."""
    ol.live_views("text")
    result = replay_committed("another-model")
    differs = 'what differs: body.model: "another-model" != recorded "scripted-model"'
    errors = result.errors
    assert len(errors) == 10 and set(errors["error_type"]) == {"ReplayMismatchError"}
    for message in errors["error"]:
        assert message.startswith("no recorded agent request matches POST /v1/chat/completions")
        assert differs in message and str(COMMITTED) in message and "to record again" in message
    assert result.summary()["error_types"].tolist() == ["ReplayMismatchError ×10"]
    assert repr(result).endswith("; 10 errors: ReplayMismatchError ×10)")
    assert "error_types      ReplayMismatchError ×10" in result.table_text()
    shown = capsys.readouterr().err
    line, *rest = shown[shown.rindex("eval arithmetic/test: 10/10") :].splitlines()
    assert line.endswith("mean reward 0.000  errors 10")
    assert rest[0].startswith("  errors: ReplayMismatchError ×10; the last, of task/rollout ")
    assert rest[1].startswith("    ReplayMismatchError: no recorded agent request matches") and f"    {differs}" in rest


def test_content_parts_run_the_same_recorded_or_not(ors_sdk_server: Any, tmp_path: Path) -> None:
    """Mistral's list content is read as parts, and a recorded run returns what an unrecorded one does."""
    with LLMServer(ANSWERS, mode="parts") as llm:
        plain_events: list[AgentEvent] = []
        plain = evaluate(ors_sdk_server.url, agent(llm.url), subscribe=plain_events.append)
        path = tmp_path / "parts.parquet"
        recorded_events: list[AgentEvent] = []
        recorded = evaluate(ors_sdk_server.url, agent(llm.url), record=path, subscribe=recorded_events.append)
        streamed = stream_for(llm, FIRST)
    assert len(records(plain)) == len(records(recorded)) == len(TRAIN)
    assert [comparable(r) for r in records(recorded)] == [comparable(r) for r in records(plain)]
    assert plain.errors.empty and recorded.errors.empty and recorded.episodes["reward"].sum() >= 2
    first = records(recorded)[0].session_id
    said = agent_said(recorded_events, first)
    assert "".join(deltas(said, "reasoning-delta")) == "".join(streamed.reasoning)
    assert "".join(deltas(said, "text-delta")) == "".join(streamed.text)
    trace = ol.load_trace(path)
    assert len(trace.episodes) == len(TRAIN) and agent_events(trace, first)[1:-1] == said
