"""The Responses API decoder (ors_lab/agents/responses.py) on real streams, and OpenAIResponsesAgent's requests,
HTTP errors and replay against a real local server (tests/wild/responses_server.py) and the ORS reference server.

Each stream's expectations come from `tests/wild/responses_reading.py`, a second reading of the bytes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import openai
import pandas as pd
import pytest

import ors_lab as ol
import ors_lab.agents
from ors_lab.agents.chat import CallPiece, EndPiece, Piece, TextPiece
from ors_lab.agents.responses import ResponsesAnswer
from ors_lab.events import AgentEvent
from ors_lab.protocol.errors import IncompleteStreamError, MalformedChunkError, ProviderReportedError
from tests.envs.common import EXPECTED, LAB_TASKS
from tests.wild.responses_reading import read_response
from tests.wild.responses_server import STREAMS, ResponsesServer, follows_tools
from tests.wild.stream_server import written

MODEL = "responses-model"
FIXTURES = sorted(STREAMS.glob("*.sse"))
PARALLEL = (STREAMS / "openai-gpt-4o-parallel-function-calls.sse").read_bytes()

pytestmark = pytest.mark.timeout(60)


def decode(data: bytes, *, step: int | None = None, content_type: str = "text/event-stream") -> tuple[
        ResponsesAnswer, list[Piece], Exception | None]:  # fmt: skip
    """The answer, its pieces and the error it ended with, fed whole or `step` bytes at a time."""
    answer = ResponsesAnswer(content_type=content_type)
    pieces: list[Piece] = []
    writes = [data] if step is None else [data[i : i + step] for i in range(0, len(data), step)]
    try:
        for write in writes:
            pieces += answer.feed(write)
            if answer.error is not None:
                raise answer.error
        pieces += answer.close()
    except Exception as exc:  # the error is what the caller checks
        return answer, pieces, exc
    return answer, pieces, None


def said(pieces: list[Piece]) -> dict[str, Any]:
    """The pieces as the reading has them: texts by kind and the calls (id, name, arguments joined)."""
    texts = {kind: "".join(p.text for p in pieces if isinstance(p, TextPiece) and p.kind == kind)
             for kind in ("text", "reasoning", "refusal")}  # fmt: skip
    calls: dict[str, dict[str, Any]] = {}
    for piece in pieces:
        if isinstance(piece, CallPiece):
            call = calls.setdefault(piece.call.id, {"id": piece.call.id, "name": piece.call.name, "arguments": ""})
            call["arguments"] += piece.arguments
    return {**texts, "calls": list(calls.values())}


def rotated(data: bytes) -> bytes:
    """The stream with every event's item id (``item.id``, ``item_id``) a new one, as GitHub Copilot's gateway sends."""
    count = iter(range(1, 10_000))
    pattern = rb'"(id|item_id)":"(fc|msg|rs)_[0-9a-f]+"'
    return re.sub(pattern, lambda m: b'"%s":"rotated-%d"' % (m[1], next(count)), data)


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_each_done_items_id_ends_its_part(fixture: Path) -> None:
    """A done reasoning item's id (and encrypted content) ends its reasoning part, a done message's its text part, a
    done function call's is its call's metadata: what a conversation sends back. Item ids as the .done event gives."""
    reading = read_response(fixture.read_bytes())
    answer, pieces, _ = decode(fixture.read_bytes(), step=7)
    ends = [p for p in pieces if isinstance(p, EndPiece)]
    wanted = []
    for item in reading.items:
        if item.get("type") == "reasoning":
            said = {"itemId": item["id"]}
            if isinstance(item.get("encrypted_content"), str):
                said["reasoningEncryptedContent"] = item["encrypted_content"]
            wanted.append(EndPiece("reasoning", {"openai": said}))
        elif item.get("type") == "message" and item.get("content"):
            wanted.append(EndPiece("text", {"openai": {"itemId": item["id"]}}))
    assert ends == wanted
    done_calls = [i for i in reading.items if i.get("type") == "function_call"]
    wanted_calls = [{"openai": {"itemId": i["id"]}} for i in done_calls]
    assert [c.metadata for c in answer.calls[: len(done_calls)]] == wanted_calls


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
@pytest.mark.parametrize("step", [None, 1, 7], ids=["whole", "bytewise", "split7"])
def test_the_decoder_reads_what_the_bytes_say(fixture: Path, step: int | None) -> None:
    """Each stream, whole or cut anywhere, decodes to the reading's text, reasoning, refusal, calls, usage,
    finish reason and output items; a failed, errored or cut one to its error."""
    data = fixture.read_bytes()
    reading = read_response(data)
    answer, pieces, error = decode(data, step=step)
    assert said(pieces) == {"text": reading.text, "reasoning": reading.reasoning, "refusal": reading.refusal,
                            "calls": reading.tool_calls}  # fmt: skip
    if reading.error == "provider":
        assert isinstance(error, ProviderReportedError) and reading.error_message in str(error)
    elif reading.error == "incomplete":
        assert isinstance(error, IncompleteStreamError) and "sequence_number" in str(error)
    else:
        assert error is None
        assert (answer.usage, answer.finish_reason, answer.items) == (reading.usage, reading.finish_reason,
                                                                      reading.items)  # fmt: skip
        assert answer.incomplete is (reading.incomplete_reason is not None)


def test_calls_are_found_by_output_index_when_item_ids_change() -> None:
    """With every item id rotated mid-stream, each argument delta still goes to the call at its output_index."""
    data = rotated(PARALLEL)
    assert data != PARALLEL and b'"fc_' not in data
    _, pieces, error = decode(data)
    assert error is None and said(pieces)["calls"] == read_response(PARALLEL).tool_calls


def test_the_whole_arguments_of_done_count_when_no_delta_came() -> None:
    """A call whose arguments come only in .done (no deltas) has those arguments, once."""
    data = b"".join(part for part in re.split(rb"(?<=\n\n)", PARALLEL)
                    if b"response.function_call_arguments.delta" not in part)  # fmt: skip
    _, pieces, error = decode(data)
    assert error is None and said(pieces)["calls"] == read_response(PARALLEL).tool_calls


def test_done_alone_does_not_complete_a_response() -> None:
    """`data: [DONE]` (which some gateways add) stops the reading; without response.completed it is incomplete."""
    cut = PARALLEL[: PARALLEL.index(b"event: response.completed")]
    _, _, error = decode(cut + b"data: [DONE]\n\n")
    assert isinstance(error, IncompleteStreamError) and "sequence_number 20" in str(error)
    answer, _, error = decode(PARALLEL + b"data: [DONE]\n\n")
    assert error is None and answer.finish_reason == "tool-calls"


def test_a_whole_response_object_is_one_turn() -> None:
    """A body that is one JSON response (a stream request answered with JSON) gives its items' pieces and usage."""
    completed = [json.loads(line[6:]) for line in PARALLEL.decode().splitlines() if line.startswith("data: ")][-1]
    body = json.dumps(completed["response"]).encode()
    answer, pieces, error = decode(body, content_type="application/json")
    assert error is None and said(pieces)["calls"] == read_response(PARALLEL).tool_calls
    assert (answer.finish_reason, answer.usage) == ("tool-calls", read_response(PARALLEL).usage)


def test_broken_events_are_typed_errors() -> None:
    """An event that is not JSON is a MalformedChunkError naming it; a gateway's typeless error object a
    ProviderReportedError with its code."""
    first = PARALLEL[: PARALLEL.index(b"\n\n") + 2]
    _, _, error = decode(first + b"data: {not json\n\n" + PARALLEL[len(first) :])
    assert isinstance(error, MalformedChunkError) and "malformed event 2" in str(error) and "{not json" in str(error)
    _, _, error = decode(b'data: {"error": {"message": "quota exceeded", "code": 429}}\n\n')
    assert isinstance(error, ProviderReportedError) and (error.code, error.status_code) == (429, 429)


# -- the agent ------------------------------------------------------------------------------------------------


def evaluate(ors_url: str, agent: ol.OpenAIResponsesAgent, **options: Any) -> ol.EvalResult:
    with ol.Client(ors_url) as client:
        return ol.evaluate(client.environment("lab"), agent, split="train", tasks=1, progress=False, **options)


def test_reasoning_and_params_go_into_every_request(ors_sdk_server: Any) -> None:
    """`reasoning=` and the other params are sent as given in each turn; no previous_response_id unless given."""
    reasoning = {"effort": "low", "summary": "auto"}
    with ResponsesServer(PARALLEL) as llm:
        agent = ol.OpenAIResponsesAgent(MODEL, base_url=llm.url + "/v1", api_key="sk-test", reasoning=reasoning,
                                        max_output_tokens=256, instructions="Be brief.")  # fmt: skip
        result = evaluate(ors_sdk_server.url, agent)
    assert result.errors.empty and len(llm.requests) == 2
    for request in llm.requests:
        assert (request["reasoning"], request["max_output_tokens"], request["instructions"]) == (
            reasoning, 256, "Be brief.")  # fmt: skip
        assert "previous_response_id" not in request
    assert {h["authorization"] for h in llm.headers} == {"Bearer sk-test"}


RETRY_AFTER, REQUEST_ID = "7", "req_0f3a9c2b4d5e6f708192a3b4c5d6e7f8"


def test_a_429_is_a_rate_limit_error_with_its_retry_after_live_and_replayed(ors_sdk_server: Any,
                                                                            tmp_path: Path) -> None:  # fmt: skip
    """A 429 with retry-after and x-request-id fails the episode with RateLimitError, published as a retryable
    rate_limit_error with retry_after from the header; the trace keeps the status and the request id, and the
    replay fails the same way."""
    body = (STREAMS / "http-429-rate-limit.json.body").read_bytes()
    path = tmp_path / "429.parquet"
    live: list[AgentEvent] = []
    headers = {"retry-after": RETRY_AFTER, "x-request-id": REQUEST_ID}
    with ResponsesServer(body, content_type="application/json", status=429, headers=headers) as llm:
        agent = ol.OpenAIResponsesAgent(MODEL, base_url=llm.url + "/v1", api_key="sk-test", max_retries=0)
        result = evaluate(ors_sdk_server.url, agent, record=path, subscribe=live.append)
    [episode] = result.episodes.to_dict("records")
    assert (episode["error_type"], episode["finish_reason"]) == ("RateLimitError", "error")
    assert "Rate limit exceeded. Please try again in 20 seconds." in episode["error"]
    [error] = [e.to_wire() for e in live if e.type == "error"]
    assert (error["errorType"], error["source"], error["code"], error["retryable"], error["retryAfter"]) == (
        "rate_limit_error", "provider", "RateLimitError", True, 7.0)  # fmt: skip
    [response] = [r for r in ol.load_trace(path).table.to_pylist() if r["layer"] == "agent" and r["kind"] == "response"]
    assert response["status"] == 429 and json.loads(response["headers"])["x-request-id"] == REQUEST_ID

    again: list[AgentEvent] = []
    with ol.ReplayServer(path, speed=0) as server:
        replayed = evaluate(server.url, ol.OpenAIResponsesAgent(MODEL, transport=ol.AgentReplayTransport(path),
                                                                max_retries=0), subscribe=again.append)  # fmt: skip
    assert replayed.episodes["error_type"].tolist() == ["RateLimitError"]
    assert [e.to_wire() for e in again if e.type == "error"] == [error]


@pytest.mark.parametrize("name", ["github-copilot-gpt-5.3-codex-id-rotation", "openai-gpt-4o-max-output-tokens"])
async def test_the_sdk_stream_helper_raises_where_the_agent_reads_on(name: str, ors_sdk_server: Any) -> None:
    """The SDK's responses.stream() raises on rotated ids and on an incomplete response; the agent, reading the
    raw events, ends those episodes with no error (finish stop, and length)."""
    data = (STREAMS / f"{name}.sse").read_bytes()
    with ResponsesServer(data) as llm:
        client = openai.AsyncOpenAI(base_url=llm.url + "/v1", api_key="sk-test", max_retries=0)
        with pytest.raises(RuntimeError):
            async with client.responses.stream(model=MODEL, input="hi") as stream:
                async for _ in stream:
                    pass
                await stream.get_final_response()
        await client.close()
        agent = ol.OpenAIResponsesAgent(MODEL, base_url=llm.url + "/v1", api_key="sk-test")
        async with ol.AsyncClient(ors_sdk_server.url) as ors:
            result = await ol.aevaluate(ors.environment("lab"), agent, split="train", tasks=1, progress=False)
    assert result.errors.empty
    assert result.episodes["finish_reason"].tolist() == [read_response(data).finish_reason]


def test_the_agent_is_public() -> None:
    """`ol.OpenAIResponsesAgent` is the agents package's, and both export it."""
    assert ol.OpenAIResponsesAgent is ors_lab.agents.OpenAIResponsesAgent
    assert "OpenAIResponsesAgent" in ol.__all__ and "OpenAIResponsesAgent" in ors_lab.agents.__all__
    assert repr(ol.OpenAIResponsesAgent("m", base_url="http://127.0.0.1:1/v1")) == (
        "OpenAIResponsesAgent('m', base_url='http://127.0.0.1:1/v1')")  # fmt: skip


# -- a whole evaluation with rewards, live and replayed ------------------------------------------------------

TRAIN = LAB_TASKS["train"]
WRONG = "Spell 'cat' backwards."
ANSWERS = {task["question"]: task["answer"] for task in TRAIN} | {WRONG: "cat"}
REASONING = ["**Reading the task**\n\n", "The question is short; ", "I answer with submit."]
USAGE = {"input_tokens": 40, "input_tokens_details": {"cached_tokens": 8}, "output_tokens": 20,
         "output_tokens_details": {"reasoning_tokens": 12}, "total_tokens": 60}  # fmt: skip


def scripted(number: int, answer: str) -> bytes:
    """A Responses stream in the shape of the real ones here: a reasoning summary, then a `submit` call."""
    out: list[str] = []
    sequence = iter(range(10_000))

    def event(kind: str, **fields: Any) -> None:
        data = json.dumps({"type": kind, **fields, "sequence_number": next(sequence)}, separators=(",", ":"))
        out.append(f"event: {kind}\ndata: {data}\n\n")

    response = {"id": f"resp_{number}", "object": "response", "status": "in_progress", "model": MODEL, "output": []}
    reasoning = {"id": f"rs_{number}", "type": "reasoning", "summary": []}
    arguments = json.dumps({"answer": answer})
    call = {"id": f"fc_{number}", "type": "function_call", "status": "in_progress", "arguments": "",
            "call_id": f"call_{number}", "name": "submit"}  # fmt: skip
    event("response.created", response=response)
    event("response.output_item.added", output_index=0, item=reasoning)
    for piece in REASONING:
        event("response.reasoning_summary_text.delta", item_id=reasoning["id"], output_index=0, summary_index=0,
              delta=piece)  # fmt: skip
    done = [{**reasoning, "summary": [{"type": "summary_text", "text": "".join(REASONING)}]},
            {**call, "status": "completed", "arguments": arguments}]  # fmt: skip
    event("response.output_item.done", output_index=0, item=done[0])
    event("response.output_item.added", output_index=1, item=call)
    for piece in (arguments[:3], arguments[3:11], arguments[11:]):
        event("response.function_call_arguments.delta", item_id=call["id"], output_index=1, delta=piece)
    event("response.function_call_arguments.done", item_id=call["id"], output_index=1, arguments=arguments)
    event("response.output_item.done", output_index=1, item=done[1])
    event("response.completed", response={**response, "status": "completed", "output": done, "usage": USAGE})
    return "".join(out).encode()


class ScriptedModel(ResponsesServer):
    """Answers each lab question with `submit` (wrongly for WRONG), then, after the tool's output, with text."""

    def __init__(self) -> None:
        super().__init__(b"")

    def reply(self, request: Any) -> tuple[int, str, dict[str, str], list[bytes]]:
        prompt = request["input"][0]["content"]
        if follows_tools(request):
            return super().reply(request)
        question = next(q for q in ANSWERS if prompt.startswith(q))
        return 200, "text/event-stream", {}, written(scripted(len(self.requests), ANSWERS[question]), "split7")


def outcomes(result: ol.EvalResult) -> list[tuple[Any, ...]]:
    """Each episode's task, reward, finish and error, and its steps' tools and inputs."""
    steps = result.steps
    rows = []
    for row in result.episodes.to_dict("records"):
        mine = steps[steps["session_id"] == row["session_id"]]
        error = None if pd.isna(row["error"]) else row["error"]
        tools = list(zip(mine["tool"], mine["input"], strict=True))
        rows.append((row["task_index"], row["reward"], row["finished"], row["finish_reason"], error, tools))
    return rows


def test_an_evaluation_with_rewards_replays_offline(ors_sdk_server: Any, tmp_path: Path) -> None:
    """A live run gives each task the environment's reward for the model's answer (its call known by call_id);
    the trace replayed offline gives the same episodes, rewards and agent events, with nothing left unplayed."""
    path = tmp_path / "responses.parquet"
    live: list[AgentEvent] = []
    with ScriptedModel() as llm:
        agent = ol.OpenAIResponsesAgent(MODEL, base_url=llm.url + "/v1", api_key="sk-test")
        with ol.Client(ors_sdk_server.url) as client:
            result = ol.evaluate(client.environment("lab"), agent, split="train", progress=False, record=path,
                                 subscribe=live.append)  # fmt: skip
    rewards = {row["task_index"]: row["reward"] for row in result.episodes.to_dict("records")}
    assert rewards == {i: EXPECTED[("train", i, ANSWERS[t["question"]])] for i, t in enumerate(TRAIN)}
    assert sorted(rewards.values()) == [0.0, 1.0, 1.0] and result.errors.empty
    assert len(llm.requests) == len(TRAIN)  # submit finishes each episode: one response each
    calls = [e.to_wire() for e in live if e.type == "tool-input-available"]
    assert sorted(c["toolCallId"] for c in calls) == [f"call_{n}" for n in range(1, len(TRAIN) + 1)]  # not fc_
    per_call = [e.to_wire() for e in live if e.type == "usage" and e.scope == "call"]
    assert per_call[0] == {"type": "usage", "inputTokens": 40, "outputTokens": 20, "reasoningTokens": 12,
                           "cachedInputTokens": 8, "scope": "call", "model": MODEL}  # fmt: skip

    again: list[AgentEvent] = []
    transport = ol.AgentReplayTransport(path)
    with ol.ReplayServer(path, speed=0) as server, ol.Client(server.url) as client:
        replayed = ol.evaluate(client.environment("lab"), ol.OpenAIResponsesAgent(MODEL, transport=transport),
                               split="train", progress=False, subscribe=again.append)  # fmt: skip
        assert server.unplayed() == []
    assert transport.unplayed() == [] and outcomes(replayed) == outcomes(result)
    assert sorted(map(json.dumps, per_episode(again))) == sorted(map(json.dumps, per_episode(live)))
    assert any(e["type"] == "reasoning-delta" for said in per_episode(again) for e in said)


def per_episode(events: list[AgentEvent]) -> list[list[dict[str, Any]]]:
    """What the agent said and did in each episode (every event but `start` and `episode`, whose ids differ)."""
    sessions = dict.fromkeys(e.session_id for e in events if e.session_id)
    return [[e.to_wire() for e in events if e.session_id == s and e.type not in ("start", "episode")]
            for s in sessions]  # fmt: skip


def test_a_last_event_without_its_blank_line_is_not_read() -> None:
    """A stream whose response.completed lacks its closing blank line (as some SDK fixtures end) never completes:
    the SSE specification drops an event the bytes end in, so the answer is incomplete and its calls never run."""
    unended = PARALLEL.removesuffix(b"\n")
    answer, pieces, error = decode(unended)
    assert isinstance(error, IncompleteStreamError) and read_response(unended).error == "incomplete"
    assert said(pieces)["calls"] == read_response(PARALLEL).tool_calls and not answer.complete


def test_a_connection_cut_mid_answer_runs_no_tool_live_or_replayed(ors_sdk_server: Any, tmp_path: Path) -> None:
    """A connection dropped inside a function call's arguments fails the episode with a ProviderStreamError saying
    how far the answer got and the call left open; no tool runs, and the replay fails the same way."""
    cut_at = PARALLEL.index(b'"delta":"ell"')  # inside the first call's arguments
    path = tmp_path / "cut.parquet"
    live: list[AgentEvent] = []
    with ResponsesServer(PARALLEL, cut_at=cut_at) as llm:
        agent = ol.OpenAIResponsesAgent(MODEL, base_url=llm.url + "/v1", api_key="sk-test", max_retries=0)
        result = evaluate(ors_sdk_server.url, agent, record=path, subscribe=live.append)
    [episode] = result.episodes.to_dict("records")
    assert (episode["error_type"], episode["finish_reason"], episode["steps"]) == ("ProviderStreamError", "error", 0)
    message = episode["error"]
    assert "the connection was cut while the answer streamed" in message and "sequence_number 6" in message
    assert "tool call call_sKC7OABqf2A2PTLCm0CLeRWV (secret_retrieval_tool) was open" in message
    deltas = [e.to_wire()["inputTextDelta"] for e in live if e.type == "tool-input-delta"]
    assert deltas == ["{", '"password', '":', '"m']  # the deltas before the cut
    assert not [e for e in live if e.type == "tool-input-available"]
    assert any(r["kind"] == "disconnect" and r["layer"] == "agent" for r in ol.load_trace(path).table.to_pylist())

    again: list[AgentEvent] = []
    with ol.ReplayServer(path, speed=0) as server:
        agent = ol.OpenAIResponsesAgent(MODEL, transport=ol.AgentReplayTransport(path), max_retries=0)
        replayed = evaluate(server.url, agent, subscribe=again.append)
    assert replayed.episodes["error_type"].tolist() == ["ProviderStreamError"]
    assert per_episode(again) == per_episode(live)


def test_arguments_of_an_item_never_added_go_to_no_other_call() -> None:
    """When a gateway skips the second call's output_item.added, its argument deltas do not join the first call;
    its output_item.done opens it with its whole arguments."""
    second_added = re.search(
        rb"event: response.output_item.added\n[^\n]*call_OdR3s3xop0vtgkDyWRMLafuH[^\n]*\n\n", PARALLEL
    )
    assert second_added is not None
    _, pieces, error = decode(PARALLEL.replace(second_added[0], b""))
    assert error is None and said(pieces)["calls"] == read_response(PARALLEL).tool_calls
