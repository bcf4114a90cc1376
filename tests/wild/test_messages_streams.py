"""AnthropicAgent on Messages streams that Anthropic's API really sent (tests/wild/streams/messages).

Each stream is served byte for byte by `StreamServer(messages=True)`, in each of its four manners, to
`ol.evaluate` on the `lab` environment of the ors-sdk reference server: one task, recorded. The first
turn's agent events must be what `tests/wild/messages_reading.py` (a second reader, importing nothing
from ors_lab) reads in the bytes; the next request must send back what the answer said (thinking
blocks with their signatures, tool_use blocks, tool_result blocks); the recorded trace must hold the
same events; and the trace replayed offline must give them again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import ors_lab as ol
from ors_lab.events import AGENT_KINDS, AgentEvent
from tests.wild.conversations import before_each_request, sent
from tests.wild.messages_reading import MessagesReading, read_messages
from tests.wild.stream_server import AFTER_TOOL_RESULTS, MANNERS, StreamServer

STREAMS = Path(__file__).parent / "streams" / "messages"
MODEL = "wild-claude"
FIXTURES = sorted(STREAMS.glob("*.sse"))
CASES = [pytest.param((f, m), id=f"{f.stem}-{m}") for f in FIXTURES for m in MANNERS]
REPLAYED = ("whole", "split7")
OVERLOADED = {"overloaded_error": ("provider_overloaded", "ANTHROPIC_529"), "api_error": ("provider_error",
              "ANTHROPIC_500")}  # fmt: skip

pytestmark = pytest.mark.timeout(60)


@dataclass
class Run:
    """One stream served in one manner to a live evaluation, recorded to `path`."""

    fixture: Path
    manner: str
    reading: MessagesReading
    live: list[AgentEvent]
    requests: list[Any]
    path: Path

    def said(self) -> list[dict[str, Any]]:
        return [e.to_wire() for e in self.live]


def agent(base_url: str | None = None, **options: Any) -> ol.AnthropicAgent:
    return ol.AnthropicAgent(MODEL, base_url=base_url, api_key="sk-ant-wild-test", max_retries=0, **options)


@pytest.fixture(scope="module", params=CASES)
def run(request: pytest.FixtureRequest, ors_sdk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The stream of `request.param` served in its manner to one recorded `lab` episode."""
    fixture, manner = request.param
    data = fixture.read_bytes()
    path = tmp_path_factory.mktemp("wild-messages") / "run.parquet"
    live: list[AgentEvent] = []
    with StreamServer(data, manner=manner, messages=True) as llm, ol.Client(ors_sdk_server.url) as client:
        ol.evaluate(client.environment("lab"), agent(llm.url), split="train", tasks=1, progress=False, record=path,
                    subscribe=live.append)  # fmt: skip
    return Run(fixture, manner, read_messages(data), live, list(llm.requests), path)


def first_turn(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    start = next(i for i, e in enumerate(events) if e["type"] == "block-start")
    block = events[start]["blockId"]
    end = next(i for i, e in enumerate(events) if e["type"] == "block-end" and e["blockId"] == block)
    return events[start : end + 1]


def joined(events: list[dict[str, Any]], kind: str) -> str:
    return "".join(e["delta"] for e in events if e["type"] == kind)


def tool_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls the events stream, in order: id, name and input text (deltas joined)."""
    calls: dict[str, dict[str, Any]] = {}
    for event in events:
        if event["type"] == "tool-input-start":
            calls[event["toolCallId"]] = {"id": event["toolCallId"], "name": event["toolName"], "arguments": ""}
        elif event["type"] == "tool-input-delta":
            calls[event["toolCallId"]]["arguments"] += event["inputTextDelta"]
    return list(calls.values())


def test_the_first_turn_says_what_the_bytes_say(run: Run) -> None:
    """The first turn's reasoning, text, tool-input and usage events are what the second reader reads; no
    signature is ever shown as reasoning or text: each thinking block's ends its reasoning part, as its metadata."""
    reading, turn = run.reading, first_turn(run.said())
    assert joined(turn, "reasoning-delta") == reading.reasoning
    assert joined(turn, "text-delta") == reading.text
    assert " IGNORED" not in joined(turn, "text-delta")  # an event with no `event:` line is no event
    shown = json.dumps([e for e in run.said() if e["type"] != "reasoning-end"])
    for signature in reading.signatures:
        assert signature and signature not in shown
    ends = [e.get("providerMetadata") for e in turn if e["type"] == "reasoning-end"]
    assert [m["anthropic"]["signature"] for m in ends if m] == [s for s in reading.signatures if s]
    if reading.error is None:
        assert tool_calls(turn) == [{k: c[k] for k in ("id", "name", "arguments")} for c in reading.tool_calls]
        u = reading.usage
        assert u is not None
        assert [e for e in turn if e["type"] == "usage"] == [
            {"type": "usage", "inputTokens": u["input_tokens"], "outputTokens": u["output_tokens"],
             "reasoningTokens": None, "cachedInputTokens": u["cached_tokens"], "scope": "call", "model": MODEL}
        ]  # fmt: skip


def test_the_episode_ends_as_the_answer_did(run: Run) -> None:
    """A tool_use answer goes on to a second turn that sends back the thinking blocks with their signatures, the
    tool_use blocks and one tool_result per call; max_tokens ends the episode with no call run; any other stop
    ends it with its own finish reason; an error event is a provider error typed by its body."""
    reading, said = run.reading, run.said()
    finish = [e["finishReason"] for e in said if e["type"] == "finish"]
    errors = [e for e in said if e["type"] == "error"]
    if reading.error is not None:
        kind, code = OVERLOADED[reading.error]
        [error] = errors
        assert (error["errorType"], error["code"], error["source"], error["retryable"]) == (
            kind,
            code,
            "provider",
            True,
        )
        assert error["provider"] == {"name": "anthropic", "statusCode": 200, "requestId": None}
        assert reading.error_message is not None and reading.error_message in error["message"]
        assert finish == ["error"] and len(run.requests) == 1
        return
    assert errors == []
    if reading.finish_reason != "tool-calls":
        assert "tool-input-available" not in [e["type"] for e in said]  # a call cut by max_tokens never runs
        assert finish == [reading.finish_reason] and len(run.requests) == 1
        return
    assert len(run.requests) == 2 and finish == ["stop"]  # turn 2 is the server's "done."
    assistant, results = run.requests[1]["messages"][1:]
    assert assistant["role"] == "assistant" and results["role"] == "user"
    thinking = [b for b in assistant["content"] if b["type"] == "thinking"]
    assert [b["signature"] for b in thinking] == reading.signatures
    assert "".join(b["thinking"] for b in thinking) == reading.reasoning
    uses = [b for b in assistant["content"] if b["type"] == "tool_use"]
    assert [(b["id"], b["name"], b["input"]) for b in uses] == [
        (c["id"], c["name"], json.loads(c["arguments"] or "{}")) for c in reading.tool_calls
    ]
    assert [(b["type"], b["tool_use_id"]) for b in results["content"]] == [
        ("tool_result", c["id"]) for c in reading.tool_calls
    ]


def agent_events(trace: ol.Trace) -> list[dict[str, Any]]:
    rows = sorted((r for r in trace.table.to_pylist() if r["layer"] == "agent" and r["kind"] in AGENT_KINDS),
                  key=lambda r: r["seq"])  # fmt: skip
    return [json.loads(r["data"]) for r in rows if r["kind"] != "episode"]


def test_the_trace_holds_the_same_events_and_no_key(run: Run) -> None:
    """The recorded trace holds the agent events the subscriber saw live, in order, and the API key in no cell."""
    trace = ol.load_trace(run.path)
    assert agent_events(trace) == [e for e in run.said() if e["type"] != "episode"]
    cells = [v for row in trace.table.to_pylist() for v in row.values() if isinstance(v, str | bytes)]
    assert cells and not any("sk-ant-wild-test" in (c if isinstance(c, str) else c.decode("latin-1")) for c in cells)
    requests = [r for r in trace.table.to_pylist() if r["layer"] == "agent" and r["kind"] == "request"]
    assert len(requests) == len(run.requests)


@pytest.mark.parametrize("run", [c for c in CASES if c.values[0][1] in REPLAYED], indirect=True,
                         ids=[c.id for c in CASES if c.values[0][1] in REPLAYED])  # fmt: skip
def test_the_replay_says_it_again(run: Run) -> None:
    """The trace replayed offline (ReplayServer and AgentReplayTransport, no key, no server) gives the same
    events, the same episode and the same reward."""
    trace = ol.load_trace(run.path)
    events: list[AgentEvent] = []
    transport = ol.AgentReplayTransport(trace)
    with ol.ReplayServer(trace, speed=0) as server, ol.Client(server.url) as client:
        the_agent = ol.AnthropicAgent(MODEL, transport=transport, max_retries=0)
        ol.evaluate(client.environment("lab"), the_agent, split="train", tasks=1, progress=False,
                    subscribe=events.append)  # fmt: skip
        assert server.unplayed() == []
    assert transport.unplayed() == []
    again = [e.to_wire() for e in events if e.type not in ("start", "episode")]
    assert again == [e for e in run.said() if e["type"] not in ("start", "episode")]
    [live] = [e for e in run.live if e.type == "episode"]
    [replayed] = [e for e in events if e.type == "episode"]
    assert (replayed.reward, replayed.finished, replayed.finish_reason, replayed.steps) == (
        live.reward, live.finished, live.finish_reason, live.steps)  # type: ignore[attr-defined]  # fmt: skip


# -- the reader and the fixtures themselves ------------------------------------------------------------


def test_the_reader_reads_what_the_fixtures_show() -> None:
    """The second reader: index-1 tool calls, {} from an empty partial JSON, cache counts in the input, the
    message_delta's counts winning, an error typed from its body, a cut tool call, an ignored data-only event."""
    read = {f.stem: read_messages(f.read_bytes()) for f in FIXTURES}
    tool = read["claude-sonnet-4-sdk-tool-use-index-1"]
    assert [(c["index"], c["name"], json.loads(c["arguments"])) for c in tool.tool_calls] == [
        (1, "get_weather", {"location": "Paris"})]  # fmt: skip
    assert read["claude-sonnet-4.5-aisdk-tool-no-args"].tool_calls[0]["arguments"] == ""
    thinking = read["claude-sonnet-4-aibridge-thinking-tool-index-1"]
    assert thinking.usage == {"input_tokens": 2 + 22 + 13993, "output_tokens": 61, "reasoning_tokens": None,
                              "cached_tokens": 13993}  # fmt: skip
    assert read["claude-opus-4.5-aisdk-message-delta-usage"].usage["input_tokens"] == 61  # type: ignore[index]
    assert read["synthetic-claude-sonnet-4-overloaded-mid-stream"].error == "overloaded_error"
    assert read["claude-3.7-sonnet-sdk-max-tokens-cut-tool"].finish_reason == "length"
    assert (
        read["synthetic-claude-3-opus-data-without-event"].text == read["claude-3-opus-sdk-text"].text == "Hello there!"
    )
    assert len(read["claude-sonnet-4-aibridge-two-thinking-blocks"].signatures) == 2
    assert read_messages(AFTER_TOOL_RESULTS).text == "done."


def test_every_messages_fixture_names_its_source() -> None:
    """Each stream has a sidecar naming its repository, commit and path, and a line in the README."""
    readme = (STREAMS.parent / "README.md").read_text()
    for fixture in FIXTURES:
        meta = json.loads(fixture.with_suffix(".json").read_text())
        assert {"source", "provider", "model", "framing", "notes"} <= set(meta)
        assert len(meta["source"]["commit"]) == 40 and meta["source"]["repository"].count("/") == 1
        assert f"`messages/{fixture.name}`" in readme


def test_the_trace_gives_each_request_again_as_the_conversation(run: Run) -> None:
    """Cut before each request the agent sent, the episode's conversation (Messages) is that request's system prompt,
    messages and tools as the server received them: the answers (thinking with its signature, text, tool_use) and
    tool results rebuilt from the recorded events, the earlier turns from the recorded request."""
    assert before_each_request(run.path, "anthropic") == [sent(r, "anthropic") for r in run.requests]
