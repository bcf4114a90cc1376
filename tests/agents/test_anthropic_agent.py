"""AnthropicAgent with the real anthropic SDK against a local Messages server (tests/wild/stream_server.py)
and the ors-sdk reference server's `lab` environment.

The answers are written here in the shapes of tests/wild/streams/messages (real streams): a thinking
block with its signature at index 0 and a tool call at index 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import ors_lab as ol
from ors_lab.analysis.conversations import anthropic, content_of
from ors_lab.events import AgentEvent
from ors_lab.protocol.models import ImageBlock, TextBlock
from tests.envs.common import IMAGE_CAPTION, LAB_TASKS, PNG_1X1_B64
from tests.wild.stream_server import StreamServer

MODEL = "claude-test"
KEY = "sk-ant-agent-test-key"
REQUEST_ID = "req_011CV5Jab6gR3ZNs9Sj6apiD"  # the shape of the request-id Anthropic sends (coder/aibridge's capture)

pytestmark = pytest.mark.timeout(60)


def event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


def answer(tool: str, partial_json: str, *, thinking: str = "The answer is 4.", signature: str = "EqQBsig==") -> bytes:
    """A Messages stream: thinking (with its signature) at index 0, then a `tool` call at index 1 whose input
    is `partial_json`, stop_reason tool_use."""
    usage = {"input_tokens": 7, "cache_read_input_tokens": 3, "output_tokens": 1}
    message = {"id": "msg_t", "type": "message", "role": "assistant", "model": MODEL, "content": [],
               "stop_reason": None, "usage": usage}  # fmt: skip
    return b"".join([
        event({"type": "message_start", "message": message}),
        event({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        event({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": thinking}}),
        event({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta",
               "signature": signature}}),
        event({"type": "content_block_stop", "index": 0}),
        event({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_t1",
               "name": tool, "input": {}}}),
        event({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
               "partial_json": partial_json}}),
        event({"type": "content_block_stop", "index": 1}),
        event({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
               "usage": {"output_tokens": 9}}),
        event({"type": "message_stop"}),
    ])  # fmt: skip


def run(
    ors_url: str, llm: StreamServer, path: Path | None = None, **options: Any
) -> tuple[ol.EvalResult, list[AgentEvent]]:
    """One recorded episode of the lab's first train task, with every event the subscriber saw."""
    events: list[AgentEvent] = []
    the_agent = ol.AnthropicAgent(MODEL, base_url=llm.url, **{"api_key": KEY, "max_retries": 0, **options})
    with ol.Client(ors_url) as client:
        result = ol.evaluate(client.environment("lab"), the_agent, split="train", tasks=1, progress=False,
                             record=path, subscribe=events.append)  # fmt: skip
    return result, events


def test_the_request_is_what_the_messages_api_expects(ors_sdk_server: Any) -> None:
    """One streamed POST /v1/messages with the key as the SDK sends it, the model, max_tokens, system,
    thinking and the other params as given, the prompt as a text block and the tools with their input_schema;
    the submit call it answers with earns the environment's reward."""
    with StreamServer(answer("submit", json.dumps({"answer": LAB_TASKS["train"][0]["answer"]})), messages=True) as llm:
        result, events = run(ors_sdk_server.url, llm, max_tokens=2048, system="Be brief.", temperature=0.5,
                             thinking={"type": "enabled", "budget_tokens": 1024})  # fmt: skip
    [request] = llm.requests
    [headers] = llm.headers_seen
    assert headers["authorization"] == f"Bearer {KEY}" and headers["anthropic-version"]  # as SDK 2.16 sends it
    assert {k: request[k] for k in ("model", "max_tokens", "system", "temperature", "thinking", "stream")} == {
        "model": MODEL, "max_tokens": 2048, "system": "Be brief.", "temperature": 0.5,
        "thinking": {"type": "enabled", "budget_tokens": 1024}, "stream": True}  # fmt: skip
    [prompt] = request["messages"]
    assert prompt["role"] == "user" and [b["type"] for b in prompt["content"]] == ["text"]
    assert prompt["content"][0]["text"].startswith("What is 2 + 2?")
    submit = next(t for t in request["tools"] if t["name"] == "submit")
    assert set(submit) == {"name", "description", "input_schema"}
    assert submit["input_schema"]["properties"]["answer"]["type"] == "string"
    assert result.episodes["reward"].tolist() == [1.0]
    said = [e.to_wire() for e in events]
    assert [e["delta"] for e in said if e["type"] == "reasoning-delta"] == ["The answer is 4."]
    assert [e for e in said if e["type"] == "usage" and e["scope"] == "call"] == [
        {"type": "usage", "inputTokens": 10, "outputTokens": 9, "reasoningTokens": None, "cachedInputTokens": 3,
         "scope": "call", "model": MODEL}]  # fmt: skip


def test_the_key_comes_from_anthropic_api_key(ors_sdk_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without api_key= the key is $ANTHROPIC_API_KEY; with neither, the episode fails saying so, sending nothing."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env")
    with StreamServer(answer("submit", '{"answer": "4"}'), messages=True) as llm:
        run(ors_sdk_server.url, llm, api_key=None)
    assert llm.headers_seen[0]["authorization"] == "Bearer sk-ant-from-env"
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with StreamServer(answer("submit", '{"answer": "4"}'), messages=True) as llm:
        result, _ = run(ors_sdk_server.url, llm, api_key=None)
    assert llm.requests == [] and "ANTHROPIC_API_KEY" in result.episodes["error"].tolist()[0]


ERRORS = [
    ("429 Too Many Requests", "rate_limit_error", "rate_limit_error", {"retry-after": "7"}, 7.0),
    ("529 Overloaded", "overloaded_error", "provider_overloaded", {"retry-after": "2"}, 2.0),
    ("500 Internal Server Error", "api_error", "provider_error", {}, None),
]


@pytest.mark.parametrize(("status", "kind", "error_type", "extra", "retry_after"), ERRORS,
                         ids=[e[1] for e in ERRORS])  # fmt: skip
def test_http_errors_are_the_seeds_structured_errors(
    ors_sdk_server: Any, tmp_path: Path, status: str, kind: str, error_type: str, extra: dict[str, str],
    retry_after: float | None,
) -> None:  # fmt: skip
    """HTTP 429, 529 and 500 are `error` events from source provider, retryable, with retryAfter from retry-after,
    code ANTHROPIC_<status> and provider {name, statusCode, requestId from request-id}; the replay says the same."""
    body = json.dumps({"type": "error", "error": {"type": kind, "message": "try later"}, "request_id": REQUEST_ID})
    code = int(status.split()[0])
    headers = {"request-id": REQUEST_ID, "x-should-retry": "true", **extra}
    path = tmp_path / "error.parquet"
    with StreamServer(body.encode(), messages=True, status=status, headers=headers,
                      content_type="application/json") as llm:  # fmt: skip
        result, events = run(ors_sdk_server.url, llm, path)
    [error] = [e.to_wire() for e in events if e.type == "error"]
    assert error == {"type": "error", "errorType": error_type, "message": error["message"], "source": "provider",
                     "retryable": True, **({"retryAfter": retry_after} if retry_after is not None else {}),
                     "code": f"ANTHROPIC_{code}",
                     "provider": {"name": "anthropic", "statusCode": code, "requestId": REQUEST_ID}}  # fmt: skip
    assert "try later" in error["message"]
    assert result.episodes["finish_reason"].tolist() == ["error"] and len(llm.requests) == 1
    replayed: list[AgentEvent] = []
    trace = ol.load_trace(path)
    with ol.ReplayServer(trace, speed=0) as server, ol.Client(server.url) as client:
        the_agent = ol.AnthropicAgent(MODEL, transport=ol.AgentReplayTransport(trace), max_retries=0)
        ol.evaluate(client.environment("lab"), the_agent, split="train", tasks=1, progress=False,
                    subscribe=replayed.append)  # fmt: skip
    assert [e.to_wire() for e in replayed if e.type == "error"] == [error]


def test_tool_output_images_go_back_as_image_blocks(ors_sdk_server: Any) -> None:
    """The `image` tool's caption and PNG go back in a tool_result as a text block and a base64 image block,
    after the assistant's thinking block (with its signature) and tool_use block (input {} from empty JSON)."""
    with StreamServer(answer("image", "", signature="sig-of-image"), messages=True) as llm:
        run(ors_sdk_server.url, llm)
    assert len(llm.requests) == 2
    _, assistant, results = llm.requests[1]["messages"]
    assert assistant == {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "The answer is 4.", "signature": "sig-of-image"},
        {"type": "tool_use", "id": "toolu_t1", "name": "image", "input": {}}]}  # fmt: skip
    assert results == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_t1", "content": [
        {"type": "text", "text": IMAGE_CAPTION},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_1X1_B64}}]}]}  # fmt: skip


def test_input_that_is_not_json_is_never_run(ors_sdk_server: Any) -> None:
    """A tool_use whose input is not one JSON object is not run: its tool_result is an error saying why."""
    with StreamServer(answer("submit", '{"answer": '), messages=True) as llm:
        _, events = run(ors_sdk_server.url, llm)
    assert "tool-input-available" not in [e.type for e in events]
    [result] = llm.requests[1]["messages"][2]["content"]
    assert result["is_error"] is True and result["content"].startswith("error: the arguments are not one JSON value")


def test_prompt_images_become_image_blocks() -> None:
    """ORS text and image blocks become Messages text and base64 image blocks, in order."""
    blocks = [TextBlock(text="Look:"), ImageBlock(data=PNG_1X1_B64, mime_type="image/png")]
    assert anthropic.content(content_of(blocks)) == [
        {"type": "text", "text": "Look:"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_1X1_B64}}]  # fmt: skip


def replay(path: Path) -> tuple[ol.EvalResult, list[AgentEvent]]:
    """The recorded episode again, from its trace alone: no model server, no key."""
    events: list[AgentEvent] = []
    trace = ol.load_trace(path)
    transport = ol.AgentReplayTransport(trace)
    with ol.ReplayServer(trace, speed=0) as server, ol.Client(server.url) as client:
        the_agent = ol.AnthropicAgent(MODEL, transport=transport, max_retries=0)
        result = ol.evaluate(client.environment("lab"), the_agent, split="train", tasks=1, progress=False,
                             subscribe=events.append)  # fmt: skip
        assert server.unplayed() == []
    assert transport.unplayed() == []
    return result, events


def comparable(result: ol.EvalResult, events: list[AgentEvent]) -> tuple[Any, ...]:
    """What a live run and its replay must agree on: the episodes' outcomes and the agent events."""
    columns = ["task_index", "reward", "finished", "finish_reason", "steps", "error_type"]
    said = [e.to_wire() for e in events if e.type not in ("start", "episode")]
    return result.episodes[columns].to_dict("records"), said


def test_a_rewarded_run_replays_offline(ors_sdk_server: Any, tmp_path: Path) -> None:
    """A recorded run whose thinking-then-submit answer earned 1.0 replays with no server or key: the same
    episode, reward and agent events."""
    path = tmp_path / "claude.parquet"
    with StreamServer(answer("submit", '{"answer": "4"}'), messages=True) as llm:
        live = run(ors_sdk_server.url, llm, path)
    assert live[0].episodes["reward"].tolist() == [1.0]
    assert comparable(*replay(path)) == comparable(*live)


def test_a_stream_cut_before_its_stop_reason_runs_no_tool(ors_sdk_server: Any, tmp_path: Path) -> None:
    """An answer whose bytes end inside its tool call (no stop_reason) is an incomplete-stream provider error: the
    call is not run, and the replay fails the same way after the same deltas."""
    whole = answer("submit", '{"answer": "4"}')
    cut = whole[: whole.index(b'event: content_block_stop\ndata: {"type": "content_block_stop", "index": 1}')]
    path = tmp_path / "cut.parquet"
    with StreamServer(cut, messages=True) as llm:
        live = run(ors_sdk_server.url, llm, path)
    [error] = [e.to_wire() for e in live[1] if e.type == "error"]
    assert error["source"] == "provider" and "incomplete stream" in error["message"]
    assert "tool call toolu_t1 (submit) at index 1 was open" in error["message"]
    assert "tool-input-available" not in [e.type for e in live[1]] and len(llm.requests) == 1
    assert comparable(*replay(path)) == comparable(*live)
