"""OpenAIAgent on answers that providers really sent (tests/wild/streams), read by the contract.

Each fixture is served byte for byte by `StreamServer`, in each of its four manners (as stored, in
7-byte writes, with CRLF line ends, with keep-alive comments), to `ol.evaluate` on the `lab`
environment of the ors-sdk reference server: one task, recorded. The first turn's agent events must
be what `tests/wild/reading.py` (a second implementation of the contract) reads from the bytes; the
recorded trace must hold the same events; and the trace replayed offline must give them again.
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
from tests.wild.reading import Reading, read_answer
from tests.wild.stream_server import AFTER_TOOLS, MANNERS, StreamServer, written

STREAMS = Path(__file__).parent / "streams"
MODEL = "wild-model"
JSON_SUFFIX = ".json.body"  # a whole chat.completion: served as application/json; `keepalive` does not apply


def fixtures() -> list[Path]:
    """Every stored answer: `*.sse` streams and `*.json.body` whole completions (their sidecars are `*.json`)."""
    return sorted(p for p in STREAMS.iterdir() if p.suffix == ".sse" or p.name.endswith(JSON_SUFFIX))


def is_json(fixture: Path) -> bool:
    return fixture.name.endswith(JSON_SUFFIX)


def stem(fixture: Path) -> str:
    return fixture.name.removesuffix(JSON_SUFFIX).removesuffix(".sse")


CASES = [pytest.param((f, m), id=f"{stem(f)}-{m}") for f in fixtures() for m in MANNERS
         if not (is_json(f) and m == "keepalive")]  # fmt: skip

pytestmark = pytest.mark.timeout(60)


@dataclass
class Run:
    """One fixture served in one manner to a live evaluation, recorded to `path`."""

    fixture: Path
    manner: str
    reading: Reading
    live: list[AgentEvent]
    requests: list[Any]
    path: Path

    def said(self) -> list[dict[str, Any]]:
        return [e.to_wire() for e in self.live]


@pytest.fixture(scope="module", params=CASES)
def run(request: pytest.FixtureRequest, ors_sdk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The fixture of `request.param` served in its manner to one recorded `lab` episode."""
    fixture, manner = request.param
    data = fixture.read_bytes()
    path = tmp_path_factory.mktemp("wild") / "run.parquet"
    live: list[AgentEvent] = []
    content_type = "application/json" if is_json(fixture) else "text/event-stream"
    with StreamServer(data, manner=manner, content_type=content_type) as llm, ol.Client(ors_sdk_server.url) as client:
        agent = ol.OpenAIAgent(MODEL, base_url=llm.url + "/v1", api_key="test", max_retries=0)
        ol.evaluate(client.environment("lab"), agent, split="train", tasks=1, progress=False, record=path,
                    subscribe=live.append)  # fmt: skip
    return Run(fixture, manner, read_answer(data), live, list(llm.requests), path)


# -- what the events say -------------------------------------------------------------------------------


def first_turn(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of the first turn: from its block-start to its block-end."""
    start = next(i for i, e in enumerate(events) if e["type"] == "block-start")
    block = events[start]["blockId"]
    end = next(i for i, e in enumerate(events) if e["type"] == "block-end" and e["blockId"] == block)
    return events[start : end + 1]


def joined(events: list[dict[str, Any]], kind: str, *, refusal: bool = False) -> str:
    """The deltas of ``kind`` joined; of text, the answer's (``refusal=False``) or the refusal's part (id refusal-N)."""
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


def call_usage(reading: Reading) -> list[dict[str, Any]]:
    """The call-scope usage events the reading's usage makes (none without usage)."""
    if reading.usage is None:
        return []
    u = reading.usage
    return [{"type": "usage", "inputTokens": u["input_tokens"], "outputTokens": u["output_tokens"],
             "reasoningTokens": u["reasoning_tokens"], "cachedInputTokens": u["cached_tokens"], "scope": "call",
             "model": MODEL}]  # fmt: skip


def expected_calls(reading: Reading, said: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reading's calls, where a call the provider gave no id takes the id the agent gave it."""
    ids = [c["id"] for c in said] + [None] * len(reading.tool_calls)
    return [{**c, "id": ids[i] if c["id"] is None else c["id"]} for i, c in enumerate(reading.tool_calls)]


def test_the_first_turn_says_what_the_bytes_say(run: Run) -> None:
    """The first turn's reasoning, text and tool-call events and its usage are what the contract reads in the bytes."""
    reading, turn = run.reading, first_turn(run.said())
    assert joined(turn, "reasoning-delta") == reading.reasoning
    assert joined(turn, "text-delta") == reading.text  # a refusal is kept apart from the text ...
    assert joined(turn, "text-delta", refusal=True) == reading.refusal  # ... in a text part of its own
    others = reading.other_choices
    summary = turn[-1].get("summary", "")
    assert (f"{others} other choice" in summary) is (others > 0), summary  # n > 1: the turn says what it ignored
    if reading.error is None:
        said = tool_calls(turn)
        assert said == expected_calls(reading, said)
        assert [e["toolCallId"] for e in turn if e["type"] == "tool-input-end"] == [c["id"] for c in said]
        assert [e for e in turn if e["type"] == "usage"] == call_usage(reading)


def test_the_episode_ends_as_the_answer_did(run: Run) -> None:
    """An answer with tool calls goes on to a second turn; one without ends the episode with its finish reason
    in ors_lab's names; a broken answer (error object, malformed chunk, incomplete stream) is a provider
    error, and none of its tool calls runs."""
    reading, said = run.reading, run.said()
    finish = [e["finishReason"] for e in said if e["type"] == "finish"]
    errors = [e for e in said if e["type"] == "error"]
    if reading.error is not None:
        assert [e["source"] for e in errors] == ["provider"], errors
        message = errors[0]["message"]
        if reading.error == "provider":
            assert reading.error_message is not None and reading.error_message in message
        elif reading.error == "malformed":
            assert "malformed chunk" in message and reading.error_message is not None
            number, shown = reading.error_message.removeprefix("malformed chunk ").split(": ", 1)
            assert number in message and shown[:40] in message
        else:
            assert "incomplete stream" in message
        assert "tool-input-available" not in [e["type"] for e in said]
        assert finish == ["error"]
        assert len(run.requests) == 1
        return
    assert errors == []
    if reading.tool_calls:
        assert len(run.requests) == 2 and any(m["role"] == "tool" for m in run.requests[1]["messages"])
        assert [e["blockName"] for e in said if e["type"] == "block-start"] == ["turn 1", "turn 2"]
        assert finish == ["stop"]  # turn 2 is the server's "done."
    else:
        assert len(run.requests) == 1
        if reading.finish_reason is None:  # complete by its [DONE] alone: the contract names no finish reason
            assert len(finish) == 1 and finish != ["error"]
        else:
            assert finish == [reading.finish_reason]


def agent_events(trace: ol.Trace) -> list[dict[str, Any]]:
    """The trace's agent events in wire form, in order (the `episode` row left out: it is stored as a record)."""
    rows = sorted((r for r in trace.table.to_pylist() if r["layer"] == "agent" and r["kind"] in AGENT_KINDS),
                  key=lambda r: r["seq"])  # fmt: skip
    return [json.loads(r["data"]) for r in rows if r["kind"] != "episode"]


def test_the_trace_holds_the_same_events(run: Run) -> None:
    """The recorded trace holds the agent events the subscriber saw live, in the same order."""
    live = [e for e in run.said() if e["type"] != "episode"]
    assert agent_events(ol.load_trace(run.path)) == live


REPLAYED = ("whole", "split7")
"""The manners whose traces are replayed: a replay serves the recorded events, not the live framing, so the
CRLF and keep-alive traces would replay as these do (their recording is checked by the test above)."""


@pytest.mark.parametrize("run", [c for c in CASES if c.values[0][1] in REPLAYED], indirect=True,
                         ids=[c.id for c in CASES if c.values[0][1] in REPLAYED])  # fmt: skip
def test_the_replay_says_it_again(run: Run) -> None:
    """The trace replayed offline (ReplayServer and AgentReplayTransport, nothing live) gives the same events."""
    trace = ol.load_trace(run.path)
    events: list[AgentEvent] = []
    transport = ol.AgentReplayTransport(trace)
    with ol.ReplayServer(trace, speed=0) as server, ol.Client(server.url) as client:
        agent = ol.OpenAIAgent(MODEL, transport=transport, max_retries=0)
        ol.evaluate(client.environment("lab"), agent, split="train", tasks=1, progress=False, subscribe=events.append)
        assert server.unplayed() == []
    assert transport.unplayed() == []
    again = [e.to_wire() for e in events if e.type not in ("start", "episode")]
    assert again == [e for e in run.said() if e["type"] not in ("start", "episode")]


# -- the reader and the server themselves ----------------------------------------------------------------


def read(name: str) -> Reading:
    return read_answer((STREAMS / name).read_bytes())


def test_the_reader_counts_other_choices_and_reads_only_choice_0() -> None:
    """n=3: choice 0's text alone, and the two other indices counted."""
    reading = read("openai-gpt-4o-n3-choices.sse")
    assert (reading.other_choices, reading.finish_reason, reading.error) == (2, "stop", None)
    assert reading.text.startswith('{"city":"San Francisco"') and reading.text.count('{"city"') == 1


def test_the_reader_places_tool_call_deltas_by_id_then_index() -> None:
    """Qwen's "" ids continue the call at their index; a new id at index 0 opens a second call; no index joins one."""
    [qwen] = read("qwen3-max-tool-call.sse").tool_calls
    assert (qwen["id"], qwen["name"]) == ("call_eee11723464a4b9eb8cee71d", "weather")
    assert qwen["arguments"] == '{"location": "San Francisco"}'
    both = read("synthetic-openai-gpt-4o-two-calls-at-index-0.sse").tool_calls
    assert both == read("openai-gpt-4o-parallel-tool-calls.sse").tool_calls and len(both) == 2
    assert [json.loads(c["arguments"])["ticker" if i else "city"] for i, c in enumerate(both)] == ["Edinburgh", "AAPL"]
    [mistral] = read("mistral-small-tool-call-no-index.sse").tool_calls
    assert mistral["id"] == "gSIMJiOkT" and json.loads(mistral["arguments"]) == {"location": "San Francisco"}


def test_the_reader_takes_the_last_usage_and_groq_usage_only_without_one() -> None:
    """A `usage: null` after the usage chunk keeps the usage; x_groq.usage counts when there is no top-level one."""
    assert read("openai-gpt-5-moderation-usage-null.sse").usage == {
        "input_tokens": 13, "output_tokens": 11, "reasoning_tokens": 0, "cached_tokens": 0}  # fmt: skip
    groq = read("groq-compound-x-groq-usage.sse").usage
    assert groq is not None and (groq["input_tokens"], groq["output_tokens"]) == (5003, 359)


def test_the_reader_tells_broken_answers_apart() -> None:
    """An error object, a chunk that is not JSON and a cut stream are "provider", "malformed" and "incomplete"."""
    assert (read("openrouter-minimax-error-chunk.sse").error, read("synthetic-vllm-error-object.sse").error) == (
        "provider", "provider")  # fmt: skip
    assert read("groq-gpt-oss-error-event.sse").error_message.startswith("Tool call validation failed")  # type: ignore[union-attr]
    malformed = read("synthetic-openai-gpt-4.1-malformed-chunk.sse")
    assert malformed.error == "malformed" and malformed.error_message.startswith("malformed chunk 3: ")  # type: ignore[union-attr]
    assert read("synthetic-openai-gpt-4o-cut-before-finish.sse").error == "incomplete"
    assert read("claude-sonnet-4.6-snowflake-no-finish-reason.sse").error is None  # [DONE] alone completes it


def test_the_reader_reads_a_refusal_and_mistral_thinking_parts() -> None:
    """delta.refusal is refusal text (finish "refusal"), not text; Mistral's thinking parts are reasoning."""
    refusal = read("openai-gpt-4o-refusal.sse")
    assert (refusal.text, refusal.finish_reason) == ("", "refusal") and refusal.refusal.startswith("I'm sorry")
    for name in ("mistral-magistral-thinking.sse", "mistral-magistral-chat-completion.json.body"):
        thinking = read(name)
        assert (thinking.reasoning, thinking.text) == (
            "The user is asking for 2+2. This is basic arithmetic. 2+2=4.", "2 + 2 = 4")  # fmt: skip


@pytest.mark.parametrize("manner", MANNERS)
def test_each_manner_sends_the_same_stream(manner: str) -> None:
    """Every manner's writes, joined, read as the stored bytes do (only the framing differs)."""
    data = (STREAMS / "openrouter-claude-sonnet-4.5-reasoning.sse").read_bytes()
    pieces = written(data, manner)
    assert read_answer(b"".join(pieces)) == read_answer(data)
    assert (len(pieces) > 100) is (manner == "split7") and read_answer(AFTER_TOOLS).text == "done."


def test_every_fixture_names_its_source() -> None:
    """Each stored answer has a sidecar naming where it came from; only a synthetic one may lack a source."""
    for fixture in fixtures():
        meta = json.loads((STREAMS / f"{stem(fixture)}.json").read_text())
        assert {"source", "provider", "model", "framing", "had_done", "notes"} <= set(meta)
        assert meta["had_done"] is (b"data: [DONE]" in fixture.read_bytes())
        if not meta.get("synthetic"):
            assert len(meta["source"]["commit"]) == 40 and meta["source"]["repository"].count("/") == 1


def test_the_trace_gives_each_request_again_as_the_conversation(run: Run) -> None:
    """Cut before each request the agent sent, the episode's conversation (chat completions) is that request's
    messages and tools as the server received them: the assistant's content and tool calls and the tool messages
    rebuilt from the recorded events, the earlier turns from the recorded request."""
    assert before_each_request(run.path, "openai") == [sent(r, "openai") for r in run.requests]
