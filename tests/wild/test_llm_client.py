"""Agents on the official SDKs, handed `episode.llm_client()`: recorded, published as agent events, replayed.

The agents of tests/wild/sdk_agents.py are written as users write them, with no event code. Each is run by
`ol.evaluate` on the `lab` environment of the ors-sdk reference server against a provider's recorded bytes
(tests/wild/streams, served byte for byte by the stream servers), recorded. The first LLM call's events must
be what the second readers (tests/wild/*_reading.py, importing nothing from ors_lab) read in the bytes; an
error must be published once, typed as the provider's; the trace must hold the same events and no key; and
`ol.evaluate(..., llm_replay=TRACE)` against a replay of the trace, with no LLM server, must give the same
episodes and events again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import ors_lab as ol
from ors_lab.analysis.conversations import FORMATS
from ors_lab.events import AgentEvent
from ors_lab.recording.redact import Redactor
from tests.wild.api_rules import chat_rules, messages_rules, responses_rules
from tests.wild.conversations import sent
from tests.wild.messages_reading import read_messages
from tests.wild.reading import read_answer
from tests.wild.responses_reading import read_response
from tests.wild.responses_server import ResponsesServer
from tests.wild.sdk_agents import KEY, ChatLoop, ClaudeLoop, ResponsesLoop
from tests.wild.stream_server import StreamServer
from tests.wild.test_messages_streams import agent_events, joined, tool_calls

STREAMS = Path(__file__).parent / "streams"
pytestmark = pytest.mark.timeout(60)

REDACTED_KINDS = ("tool-input-available", "tool-output-available", "tool-output-error", "reward", "error")
"""The agent events whose JSON the recorder redacts (a tool call's input and what came of it); the others it keeps."""


@dataclass(frozen=True)
class Case:
    """One SDK agent on one recorded stream."""

    name: str
    fixture: str
    server: Callable[[bytes], Any]
    agent: Callable[[str], ol.Agent]
    read: Callable[[bytes], Any]
    model: str


CASES = {
    c.name: c
    for c in [
        Case("anthropic-thinking-tool", "messages/claude-sonnet-4-aibridge-thinking-tool-index-1.sse",
             lambda d: StreamServer(d, messages=True), lambda u: ClaudeLoop(u), read_messages, "wild-claude"),
        Case("anthropic-parallel-tools", "messages/claude-sonnet-4-aibridge-parallel-tools.sse",
             lambda d: StreamServer(d, messages=True, manner="split7"), lambda u: ClaudeLoop(u), read_messages,
             "wild-claude"),
        Case("anthropic-overloaded", "messages/synthetic-claude-sonnet-4-overloaded-mid-stream.sse",
             lambda d: StreamServer(d, messages=True), lambda u: ClaudeLoop(u), read_messages, "wild-claude"),
        Case("chat-reasoning-tool", "deepseek-reasoner-tool-call.sse", StreamServer,
             lambda u: ChatLoop(u + "/v1"), read_answer, "wild-model"),
        Case("chat-parallel-tools-httpx", "openai-gpt-4o-parallel-tool-calls.sse", StreamServer,
             lambda u: ChatLoop(u + "/v1", client="httpx"), read_answer, "wild-model"),
        Case("chat-tool-sync", "openai-gpt-4.1-tool-call.sse", lambda d: StreamServer(d, manner="split7"),
             lambda u: ChatLoop(u + "/v1", client="sync"), read_answer, "wild-model"),
        Case("responses-reasoning", "responses/openai-gpt-5-reasoning-summary.sse", ResponsesServer,
             lambda u: ResponsesLoop(u + "/v1"), read_response, "wild-model"),
        Case("responses-parallel-calls", "responses/openai-gpt-4o-parallel-function-calls.sse", ResponsesServer,
             lambda u: ResponsesLoop(u + "/v1"), read_response, "wild-model"),
    ]
}  # fmt: skip


@dataclass
class Run:
    case: Case
    reading: Any
    live: list[AgentEvent]
    requests: list[Any]
    path: Path
    url: str

    def said(self) -> list[dict[str, Any]]:
        return [e.to_wire() for e in self.live]


@pytest.fixture(scope="module", params=list(CASES))
def run(request: pytest.FixtureRequest, ors_sdk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The case's agent on its stream, one recorded `lab` episode."""
    case = CASES[request.param]
    data = (STREAMS / case.fixture).read_bytes()
    path = tmp_path_factory.mktemp("llm-client") / "run.parquet"
    live: list[AgentEvent] = []
    with case.server(data) as llm, ol.Client(ors_sdk_server.url) as client:
        ol.evaluate(client.environment("lab"), case.agent(llm.url), split="train", tasks=1, progress=False,
                    record=path, subscribe=live.append)  # fmt: skip
    return Run(case, case.read(data), live, list(llm.requests), path, llm.url)


def first_call(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of the first LLM call's block."""
    start = next(i for i, e in enumerate(events) if e["type"] == "block-start")
    assert events[start]["blockName"] == "llm call 1"
    block = events[start]["blockId"]
    end = next(i for i, e in enumerate(events) if e["type"] == "block-end" and e["blockId"] == block)
    return events[start : end + 1]


def test_the_first_call_says_what_the_bytes_say(run: Run) -> None:
    """The SDK's first answer, read through llm_client(), is published as the reasoning, text, tool-input deltas
    and usage the second reader reads in the bytes, its block summarized by its finish reason."""
    reading, call = run.reading, first_call(run.said())
    assert joined(call, "reasoning-delta") == reading.reasoning
    assert joined(call, "text-delta") == reading.text
    if reading.error is not None:
        return
    assert [(c["id"], c["name"], c["arguments"]) for c in tool_calls(call)] == [
        (c["id"], c["name"], c["arguments"]) for c in reading.tool_calls]  # fmt: skip
    [usage] = [e for e in call if e["type"] == "usage"]
    u = reading.usage
    assert (usage["inputTokens"], usage["outputTokens"], usage["cachedInputTokens"], usage["model"]) == (
        u["input_tokens"], u["output_tokens"], u["cached_tokens"], run.case.model)  # fmt: skip
    assert call[-1]["summary"].startswith(f"finish: {reading.finish_reason}")


def test_the_episode_goes_on_as_the_sdk_saw_it(run: Run) -> None:
    """The agent's tool calls run under the ids the stream gave (so their events join the streamed input), a
    second call follows tool results, and an error in the stream is published once, as the provider's."""
    reading, said = run.reading, run.said()
    errors = [e for e in said if e["type"] == "error"]
    [episode] = [e for e in run.live if e.type == "episode"]
    if reading.error is not None:
        [error] = errors  # llm_client's: the harness does not say it again when the SDK raises it
        assert (error["source"], error["code"], error["retryable"]) == ("provider", "ANTHROPIC_529", True)
        assert error["provider"] == {"name": "anthropic", "statusCode": 200, "requestId": None}
        assert episode.finish_reason == "error"  # type: ignore[attr-defined]
        return
    assert errors == []
    ran = [e["toolCallId"] for e in said if e["type"] == "tool-input-available"]
    assert ran == [c["id"] for c in reading.tool_calls]
    calls = 2 if reading.tool_calls else 1  # an answer that calls no tool ends the episode
    assert len(run.requests) == calls
    assert [e["blockName"] for e in said if e["type"] == "block-start"] == [f"llm call {n + 1}" for n in range(calls)]


def test_the_trace_holds_the_events_and_no_key(run: Run) -> None:
    """The trace holds the agent events seen live, one recorded request per request the server had, and the
    key in no cell."""
    trace = ol.load_trace(run.path)
    redactor = Redactor()  # the recorder's, with its default names: a tool input's "password" is written redacted
    assert agent_events(trace) == [redactor.json(e)[0] if e["type"] in REDACTED_KINDS else e
                                   for e in run.said() if e["type"] != "episode"]  # fmt: skip
    rows = trace.table.to_pylist()
    cells = [v if isinstance(v, str) else v.decode("latin-1") for r in rows for v in r.values()
             if isinstance(v, str | bytes)]  # fmt: skip
    assert cells and not any(KEY in c for c in cells)
    assert len([r for r in rows if r["layer"] == "agent" and r["kind"] == "request"]) == len(run.requests)


def test_llm_replay_says_it_again(run: Run) -> None:
    """`llm_replay=TRACE` answers the agent's SDK from the trace (its LLM server is gone): the same events, episode
    and reward, and every recorded request played."""
    trace = ol.load_trace(run.path)
    events: list[AgentEvent] = []
    transport = ol.AgentReplayTransport(trace)
    with ol.ReplayServer(trace, speed=0) as server, ol.Client(server.url) as client:
        ol.evaluate(client.environment("lab"), run.case.agent(run.url), split="train", tasks=1, progress=False,
                    subscribe=events.append, llm_replay=transport)  # fmt: skip
    assert transport.unplayed() == []
    again = [e.to_wire() for e in events if e.type not in ("start", "episode")]
    assert again == [e for e in run.said() if e["type"] not in ("start", "episode")]
    [live] = [e for e in run.live if e.type == "episode"]
    [replayed] = [e for e in events if e.type == "episode"]
    assert (replayed.reward, replayed.finish_reason, replayed.steps) == (  # type: ignore[attr-defined]
        live.reward, live.finish_reason, live.steps)  # type: ignore[attr-defined]  # fmt: skip


@pytest.mark.parametrize("run", ["chat-reasoning-tool"], indirect=True)
def test_a_request_the_trace_lacks_is_a_replay_mismatch(run: Run, tmp_path: Path) -> None:
    """A replayed agent asking for another model gets the replay's diagnosis: the episode fails with a
    ReplayMismatchError naming what differs, published once."""
    trace = ol.load_trace(run.path)
    events: list[AgentEvent] = []
    with ol.ReplayServer(trace, speed=0) as server, ol.Client(server.url) as client:
        agent = ChatLoop(run.url + "/v1", model="another-model")
        result = ol.evaluate(client.environment("lab"), agent, split="train", tasks=1, progress=False,
                             subscribe=events.append, llm_replay=run.path)  # fmt: skip
    [row] = result.episodes.to_dict("records")
    assert row["error_type"] == "ReplayMismatchError" and "model" in row["error"]
    [error] = [e for e in events if e.type == "error"]
    assert error.code == "ReplayMismatchError" and "another-model" in error.message  # type: ignore[attr-defined]


def test_an_http_error_is_the_providers_structured_error(ors_sdk_server: Any) -> None:
    """A 429 with retry-after and request-id, answered to the SDK through llm_client(), is published once as the
    seed's error: rate_limit_error, ANTHROPIC_429, retryable, retryAfter, and the provider's details."""
    body = json.dumps({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}).encode()
    events: list[AgentEvent] = []
    with (
        StreamServer(body, messages=True, content_type="application/json", status="429 Too Many Requests",
                     headers={"retry-after": "7", "request-id": "req_wild_429"}) as llm,
        ol.Client(ors_sdk_server.url) as client,
    ):  # fmt: skip
        result = ol.evaluate(client.environment("lab"), ClaudeLoop(llm.url), split="train", tasks=1,
                             progress=False, subscribe=events.append)  # fmt: skip
    [error] = [e.to_wire() for e in events if e.type == "error"]
    assert (error["errorType"], error["code"], error["retryable"], error["retryAfter"]) == (
        "rate_limit_error", "ANTHROPIC_429", True, 7.0)  # fmt: skip
    assert error["provider"] == {"name": "anthropic", "statusCode": 429, "requestId": "req_wild_429"}
    assert "slow down" in error["message"]
    [row] = result.episodes.to_dict("records")
    assert row["finish_reason"] == "error" and row["error_type"] == "RateLimitError"


def test_outside_a_listened_run_the_client_only_passes_bytes(ors_sdk_server: Any) -> None:
    """With nobody listening (no record, no subscriber, no view), llm_client() publishes and records nothing, and
    the SDK gets its answer all the same."""
    data = (STREAMS / "openai-gpt-4.1-text.sse").read_bytes()
    with StreamServer(data) as llm, ol.Client(ors_sdk_server.url) as client:
        result = ol.evaluate(client.environment("lab"), ChatLoop(llm.url + "/v1"), split="train", tasks=1,
                             progress=False)  # fmt: skip
        assert len(llm.requests) == 1
    [row] = result.episodes.to_dict("records")
    assert row["error"] is None and row["finish_reason"] == "stop"


def test_the_committed_claude_run_replays_offline() -> None:
    """recordings/claude-arithmetic.parquet (an agent of its own on Anthropic's SDK, recordings/claude_agent.py)
    replays with no server, model or key: the same rewards and agent events; its transcripts hold the thinking,
    the text and the submit calls."""
    from recordings.claude_agent import ClaudeLoop

    path = Path(__file__).resolve().parents[2] / "recordings" / "claude-arithmetic.parquet"
    trace = ol.load_trace(path)
    events: list[AgentEvent] = []
    with ol.ReplayServer(trace, speed=0) as server, ol.Client(server.url) as client:
        result = ol.evaluate(client.environment("arithmetic"), ClaudeLoop("scripted-claude"), split="test", rollouts=2,
                             progress=False, subscribe=events.append, llm_replay=trace)  # fmt: skip
    recorded = trace.episodes.sort_values(["task_index", "rollout"])
    replayed = result.episodes.sort_values(["task_index", "rollout"])
    assert list(replayed["reward"]) == list(recorded["reward"]) and sum(replayed["reward"]) == 16.0
    kinds = ("reasoning-delta", "text-delta", "tool-input-delta", "usage")
    assert sum(e.type in kinds for e in events) == sum(e["type"] in kinds for e in agent_events(trace))
    turns = trace.transcripts
    assert turns["reasoning"].str.contains("I know this one").any()
    assert turns["text"].str.contains("I will submit").any()
    assert turns["tool_calls"].str.startswith("submit(").any() and (turns["block"] == "llm call 1").any()


FORMAT = {"anthropic": "anthropic", "chat": "openai", "responses": "responses"}
"""Each case's API, by the first word of its name, as `Trace.conversations` names it."""
RULES = {"anthropic": messages_rules, "openai": chat_rules, "responses": responses_rules}


def test_the_conversation_is_the_last_request_then_what_came_of_it(run: Run) -> None:
    """The episode's conversation in its SDK's API: the last request the SDK sent, as the server received it, then
    the answer to it and the tool results after it (rebuilt from the events); an API would take all of it back."""
    format = FORMAT[run.case.name.split("-")[0]]
    [conversation] = ol.load_trace(run.path).conversations(format)
    got, last = conversation.request(), sent(run.requests[-1], format)
    field = FORMATS[format].MESSAGES
    assert got[field][: len(last[field])] == last[field]
    assert {k: v for k, v in got.items() if k != field} == {k: v for k, v in last.items() if k != field}
    if run.reading.error is None:  # an answer came: the conversation goes on past the request
        assert len(got[field]) > len(last[field])
    RULES[format](got)
