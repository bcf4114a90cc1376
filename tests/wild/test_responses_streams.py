"""OpenAIResponsesAgent on Responses API streams that providers really sent (tests/wild/streams/responses).

Each stream is served byte for byte by `ResponsesServer`, in each of its four manners (as stored, in
7-byte writes, with CRLF line ends, with keep-alive comments), to `ol.evaluate` on the `lab`
environment of the ors-sdk reference server: one task, recorded. The first turn's agent events must be
what `tests/wild/responses_reading.py` (a second reading of the API's events) reads from the bytes; the
next request must carry the first's output items and one `function_call_output` per call; the recorded
trace must hold the same events; and the trace replayed offline must give them again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import ors_lab as ol
from ors_lab.events import AGENT_KINDS, AgentEvent
from ors_lab.recording.redact import Redactor
from tests.wild.conversations import before_each_request, sent
from tests.wild.reading import sse_data
from tests.wild.responses_reading import ResponseReading, read_response
from tests.wild.responses_server import AFTER_TOOLS, STREAMS, ResponsesServer
from tests.wild.stream_server import MANNERS

MODEL = "wild-model"
FIXTURES = sorted(STREAMS.glob("*.sse"))
CASES = [pytest.param((f, m), id=f"{f.stem}-{m}") for f in FIXTURES for m in MANNERS]
REPLAYED = ("whole", "split7")  # as tests/wild/test_streams.py: a replay serves the recorded events, not the framing

pytestmark = pytest.mark.timeout(60)


@dataclass
class Run:
    """One stream served in one manner to a live evaluation, recorded to `path`."""

    fixture: Path
    manner: str
    reading: ResponseReading
    live: list[AgentEvent]
    requests: list[Any]
    path: Path
    result: ol.EvalResult

    def said(self) -> list[dict[str, Any]]:
        return [e.to_wire() for e in self.live]


def agent(url: str | None = None, **options: Any) -> ol.OpenAIResponsesAgent:
    """The agent under test: on the server at `url`, or (without one) on a transport in `options`."""
    base = {"base_url": url + "/v1", "api_key": "test"} if url else {}
    return ol.OpenAIResponsesAgent(MODEL, max_retries=0, **base, **options)


def evaluate(ors_url: str, the_agent: ol.OpenAIResponsesAgent, **options: Any) -> ol.EvalResult:
    with ol.Client(ors_url) as client:
        return ol.evaluate(client.environment("lab"), the_agent, split="train", tasks=1, progress=False, **options)


@pytest.fixture(scope="module", params=CASES)
def run(request: pytest.FixtureRequest, ors_sdk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The stream of `request.param` served in its manner to one recorded `lab` episode."""
    fixture, manner = request.param
    data = fixture.read_bytes()
    path = tmp_path_factory.mktemp("responses") / "run.parquet"
    live: list[AgentEvent] = []
    with ResponsesServer(data, manner=manner) as llm:
        result = evaluate(ors_sdk_server.url, agent(llm.url), record=path, subscribe=live.append)
    return Run(fixture, manner, read_response(data), live, list(llm.requests), path, result)


def outcomes(result: ol.EvalResult) -> list[tuple[Any, ...]]:
    """What two runs of the episodes must agree on: task, rollout, reward, finish, error and the steps' tools."""
    columns = ["task_index", "rollout", "reward", "finished", "finish_reason", "error", "error_type", "steps"]
    rows = result.episodes[columns].astype(object).to_dict("records")
    return [tuple(None if pd.isna(v) else v for v in row.values()) for row in rows]


def first_turn(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of the first turn: from its block-start to its block-end."""
    start = next(i for i, e in enumerate(events) if e["type"] == "block-start")
    block = events[start]["blockId"]
    end = next(i for i, e in enumerate(events) if e["type"] == "block-end" and e["blockId"] == block)
    return events[start : end + 1]


def joined(events: list[dict[str, Any]], kind: str, *, refusal: bool = False) -> str:
    """The deltas of `kind` joined; of text, the answer's (`refusal=False`) or the refusal's part (id refusal-N)."""
    return "".join(e["delta"] for e in events
                   if e["type"] == kind and e["id"].startswith("refusal-") is refusal)  # fmt: skip


def tool_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls the events stream, in the order they start: id, name and arguments (deltas joined)."""
    calls: dict[str, dict[str, Any]] = {}
    for event in events:
        if event["type"] == "tool-input-start":
            calls[event["toolCallId"]] = {"id": event["toolCallId"], "name": event["toolName"], "arguments": ""}
        elif event["type"] == "tool-input-delta":
            calls[event["toolCallId"]]["arguments"] += event["inputTextDelta"]
    return list(calls.values())


def test_the_first_turn_says_what_the_bytes_say(run: Run) -> None:
    """The first turn's reasoning, text, refusal and tool-call events and its usage are what the bytes say."""
    reading, turn = run.reading, first_turn(run.said())
    assert joined(turn, "reasoning-delta") == reading.reasoning
    assert joined(turn, "text-delta") == reading.text
    assert joined(turn, "text-delta", refusal=True) == reading.refusal
    assert tool_calls(turn) == reading.tool_calls
    assert [e["toolCallId"] for e in turn if e["type"] == "tool-input-end"] == [c["id"] for c in reading.tool_calls]
    usage = [e for e in turn if e["type"] == "usage"]
    if reading.usage is None:
        assert usage == []
    else:
        u = reading.usage
        assert usage == [{"type": "usage", "inputTokens": u["input_tokens"], "outputTokens": u["output_tokens"],
                          "reasoningTokens": u["reasoning_tokens"], "cachedInputTokens": u["cached_tokens"],
                          "scope": "call", "model": MODEL}]  # fmt: skip


def test_the_first_request_is_what_the_api_takes(run: Run) -> None:
    """The first request streams the prompt with the session's tools flat ({type, name, parameters}), and
    no previous_response_id."""
    first = run.requests[0]
    assert (first["model"], first["stream"]) == (MODEL, True)
    assert "previous_response_id" not in first
    assert first["input"] == [{"role": "user", "content": "What is 2 + 2? Answer with the submit tool."}]
    submit = next(t for t in first["tools"] if t["name"] == "submit")
    assert (submit["type"], submit["strict"], "function" in submit) == ("function", False, False)
    assert submit["parameters"]["properties"]["answer"]["type"] == "string"


def test_the_episode_ends_as_the_response_did(run: Run) -> None:
    """A response with calls is followed by one that sends every output item back and one function_call_output
    per call, keyed by call_id (not the item id); an incomplete one ends with its reason and runs no call; a
    failed, errored or cut one is a provider error, and none of its calls runs."""
    reading, said = run.reading, run.said()
    finish = [e["finishReason"] for e in said if e["type"] == "finish"]
    errors = [e for e in said if e["type"] == "error"]
    ran = [e for e in said if e["type"] == "tool-input-available"]
    if reading.error is not None:
        assert [(e["source"], e["errorType"]) for e in errors] == [("provider", "provider_error")], errors
        assert reading.error_message is not None and reading.error_message in errors[0]["message"]
        assert (finish, ran, len(run.requests)) == (["error"], [], 1)
        return
    assert errors == []
    if reading.tool_calls and reading.incomplete_reason is None:
        assert len(run.requests) == 2
        second = run.requests[1]
        assert second["input"][:1] == run.requests[0]["input"] and "previous_response_id" not in second
        assert second["input"][1 : 1 + len(reading.items)] == reading.items
        outputs = second["input"][1 + len(reading.items) :]
        assert [(o["type"], o["call_id"]) for o in outputs] == [("function_call_output", c["id"])
                                                                 for c in reading.tool_calls]  # fmt: skip
        assert {o["call_id"] for o in outputs}.isdisjoint(i.get("id") for i in reading.items)
        assert [e["toolCallId"] for e in ran] == [c["id"] for c in reading.tool_calls]
        assert finish == [read_response(AFTER_TOOLS).finish_reason]
    else:
        assert (len(run.requests), ran) == (1, [])
        assert finish == [reading.finish_reason]


def agent_events(trace: ol.Trace) -> list[dict[str, Any]]:
    """The trace's agent events in wire form, in order (the `episode` row left out: it is stored as a record)."""
    rows = sorted((r for r in trace.table.to_pylist() if r["layer"] == "agent" and r["kind"] in AGENT_KINDS),
                  key=lambda r: r["seq"])  # fmt: skip
    return [json.loads(r["data"]) for r in rows if r["kind"] != "episode"]


def test_the_trace_holds_the_exchange_and_the_events(run: Run) -> None:
    """The trace holds each request to /v1/responses with its key redacted, its answer's events as sent, and
    the agent events the subscriber saw live, in the same order."""
    trace = ol.load_trace(run.path)
    rows = [r for r in trace.table.to_pylist() if r["layer"] == "agent"]
    requests = [r for r in rows if r["kind"] == "request"]
    assert len(requests) == len(run.requests)
    assert all(r["url"].endswith("/v1/responses") for r in requests)
    assert {json.loads(r["headers"])["authorization"] for r in requests} == {"<redacted>"}
    first = requests[0]["exchange"]
    data = [r["data"] for r in rows if r["kind"] == "event" and r["exchange"] == first]
    last = [json.loads(d)["type"] for d in data if d != "[DONE]"][-1]
    assert last == json.loads(sse_data(run.fixture.read_bytes())[-1])["type"]  # the answer's last event, as sent
    redactor = Redactor()  # the recorder's, with its default names: a tool input's "password" is written redacted
    assert agent_events(trace) == [redactor.json(e)[0] for e in run.said() if e["type"] != "episode"]


@pytest.mark.parametrize("run", [c for c in CASES if c.values[0][1] in REPLAYED], indirect=True,
                         ids=[c.id for c in CASES if c.values[0][1] in REPLAYED])  # fmt: skip
def test_the_replay_says_it_again(run: Run) -> None:
    """The trace replayed offline (ReplayServer and AgentReplayTransport, nothing live) gives the same episode,
    reward and events."""
    trace = ol.load_trace(run.path)
    events: list[AgentEvent] = []
    transport = ol.AgentReplayTransport(trace)
    with ol.ReplayServer(trace, speed=0) as server:
        result = evaluate(server.url, agent(transport=transport), subscribe=events.append)
        assert server.unplayed() == []
    assert transport.unplayed() == []
    again = [e.to_wire() for e in events if e.type not in ("start", "episode")]
    assert again == [e for e in run.said() if e["type"] not in ("start", "episode")]
    assert outcomes(result) == outcomes(run.result)


# -- the reader itself ------------------------------------------------------------------------------------


def read(name: str) -> ResponseReading:
    return read_response((STREAMS / f"{name}.sse").read_bytes())


def test_the_reader_reads_each_stream_as_its_notes_say() -> None:
    """Parallel calls by call_id, a summary as reasoning, max_output_tokens as length, a refusal, cached
    tokens, rotated ids, failed / error / cut streams: the reader says what each stream's sidecar says."""
    parallel = read("openai-gpt-4o-parallel-function-calls")
    assert [(c["id"], json.loads(c["arguments"])) for c in parallel.tool_calls] == [
        ("call_sKC7OABqf2A2PTLCm0CLeRWV", {"password": "mellon"}),
        ("call_OdR3s3xop0vtgkDyWRMLafuH", {"password": "radiance"})]  # fmt: skip
    assert [i["id"][:3] for i in parallel.items] == ["fc_", "fc_"]
    summary = read("openai-gpt-5-reasoning-summary")
    assert summary.reasoning.startswith("**Exploring prime numbers**") and summary.text == "3"
    assert summary.usage == {"input_tokens": 32, "output_tokens": 839, "reasoning_tokens": 832, "cached_tokens": 0}
    cut = read("openai-gpt-4o-max-output-tokens")
    assert (cut.finish_reason, cut.incomplete_reason, cut.error) == ("length", "max_output_tokens", None)
    refusal = read("openai-gpt-4o-refusal")
    assert (refusal.text, refusal.refusal, refusal.finish_reason) == ("", "I'm sorry, I can't assist with that.",
                                                                      "refusal")  # fmt: skip
    assert read("openai-gpt-5.2-codex-cached-input-tokens").usage == {
        "input_tokens": 16909, "output_tokens": 54, "reasoning_tokens": 0, "cached_tokens": 15744}  # fmt: skip
    rotated = read("github-copilot-gpt-5.3-codex-id-rotation")
    assert rotated.reasoning == "**Counting character occurrences**" and rotated.text.startswith("There are **3**")
    assert [read(n).error for n in ("aibridge-response-failed", "aibridge-error-event",
                                    "synthetic-openai-gpt-4o-cut-before-completed")] == [
        "provider", "provider", "incomplete"]  # fmt: skip


def test_every_stream_names_its_source() -> None:
    """Each stored stream has a sidecar naming its repository, commit and path; the README lists each."""
    listed = (STREAMS.parent / "README.md").read_text()
    for fixture in [*FIXTURES, STREAMS / "http-429-rate-limit.json.body"]:
        name = fixture.name.removesuffix(".json.body").removesuffix(".sse")
        meta = json.loads((STREAMS / f"{name}.json").read_text())
        assert {"source", "provider", "model", "framing", "had_done", "notes"} <= set(meta)
        assert len(meta["source"]["commit"]) == 40 and meta["source"]["repository"].count("/") == 1
        assert f"`responses/{fixture.name}`" in listed


def written(item: dict[str, Any]) -> dict[str, Any]:
    """An input item as a conversation writes it: what the API needs of it (a server's output item also has its
    status, annotations and log probabilities), a reasoning item's summary as one text."""
    kept = {k: v for k, v in item.items() if k not in ("status", "logprobs")}
    if item.get("type") == "message" and item.get("role") == "assistant":
        kept["content"] = [{"type": "output_text", "text": "".join(c.get("text", "") for c in item["content"]),
                            "annotations": []}]  # fmt: skip
    if item.get("type") == "reasoning":
        text = "".join(s["text"] for s in item.get("summary") or [])
        kept["summary"] = [{"type": "summary_text", "text": text}] if text else []
        kept = {k: v for k, v in kept.items() if k in ("type", "id", "summary") or v is not None}
    return kept


def test_the_trace_gives_each_request_again_as_the_conversation(run: Run) -> None:
    """Cut before each request the agent sent, the episode's conversation (Responses) is that request's input items
    and tools as the server received them (each output item as the API needs it back: `written`), the answer's items
    rebuilt from the recorded events, keyed by the same item and call ids."""
    def normal(fields: dict[str, Any]) -> dict[str, Any]:
        return {**fields, "input": [written(item) for item in fields["input"]]}

    got = [normal(fields) for fields in before_each_request(run.path, "responses")]
    assert got == [normal(sent(r, "responses")) for r in run.requests]
