"""Each episode's conversation in an LLM API's shape (ors_lab/analysis/conversations): each API's requests read
and written again, one API's conversation given in another's, the committed runs' conversations sent back through
the official SDKs to a server that refuses what the APIs refuse (tests/wild/api_rules.py), and `ors-lab export`.

That a conversation is what an agent would send is checked on live runs of the three agents in tests/wild (the
conversation of an episode cut before each of its requests is that request) and of SDK agents in
tests/wild/test_llm_client.py.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

import ors_lab as ol
from ors_lab.analysis import Conversation
from ors_lab.analysis.conversations import FORMATS
from tests.wild.api_rules import MODEL, RulesServer

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings"
COMMITTED = ["demo.parquet", "openai-arithmetic.parquet", "claude-arithmetic.parquet"]
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

# Requests in each API's own shape, with every kind of part a conversation holds: a system prompt, a user's text
# and image, reasoning (signed, redacted, an item of the API's), text, tool calls (one with no arguments), and
# tool outcomes (one failed, one with an image).
REQUESTS: dict[str, dict[str, Any]] = {
    "openai": {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                         {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]},
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "zoom", "arguments": '{"x": 1}'}},
                {"id": "call_2", "type": "function", "function": {"name": "ping", "arguments": ""}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a dot"},
            {"role": "tool", "tool_call_id": "call_2", "content": "error: no such host"},
            {"role": "assistant", "content": "A dot."},
        ],
        "tools": [{"type": "function", "function": {"name": "zoom", "description": "Zoom in.",
                                                    "parameters": {"type": "object"}}}],
    },
    "anthropic": {
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": PNG}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "An image.", "signature": "EqQBsig=="},
                {"type": "redacted_thinking", "data": "EmwKAhgB"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "zoom", "input": {"x": 1}},
                {"type": "tool_use", "id": "toolu_2", "name": "ping", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                    {"type": "text", "text": "a dot"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "error: no such host", "is_error": True}]},
            {"role": "assistant", "content": [{"type": "text", "text": "A dot."}]},
        ],
        "tools": [{"name": "zoom", "description": "Zoom in.", "input_schema": {"type": "object"}}],
    },
    "responses": {
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                         {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "An image."}],
             "encrypted_content": "gAAAAB"},
            {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
             "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
            {"type": "function_call", "call_id": "call_1", "name": "zoom", "arguments": '{"x": 1}', "id": "fc_1",
             "status": "completed"},
            {"type": "function_call", "call_id": "call_2", "name": "ping", "arguments": ""},
            {"type": "function_call_output", "call_id": "call_1", "output": "a dot"},
            {"type": "function_call_output", "call_id": "call_2", "output": "error: no such host"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A dot.",
                                                                  "annotations": []}]},
        ],
        "tools": [{"type": "function", "name": "zoom", "description": "Zoom in.", "parameters": {"type": "object"},
                   "strict": False}],
    },
}  # fmt: skip


@pytest.mark.parametrize("format", list(FORMATS))
def test_each_api_reads_and_writes_its_own_requests_again(format: str) -> None:
    """A request in an API's shape, read and written again in that shape, is the same request: nothing it holds
    is lost (signatures, redacted reasoning, item ids, encrypted reasoning, images, failed calls, empty arguments)."""
    module = FORMATS[format]
    assert module.render(module.read(copy.deepcopy(REQUESTS[format]))) == REQUESTS[format]


def test_in_another_api_what_it_cannot_take_back_is_left_out() -> None:
    """Messages' conversation in chat completions and Responses: no reasoning (neither takes Anthropic's back), the
    tool results as text (a failed one's `error: ...`), the calls with their ids and arguments, the image kept."""
    dialogue = FORMATS["anthropic"].read(copy.deepcopy(REQUESTS["anthropic"]))
    chat = FORMATS["openai"].render(dialogue)
    assert chat["messages"][0] == {"role": "system", "content": "Be brief."}
    assert chat["messages"][2] == {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "toolu_1", "type": "function", "function": {"name": "zoom", "arguments": '{"x":1}'}},
        {"id": "toolu_2", "type": "function", "function": {"name": "ping", "arguments": "{}"}}]}  # fmt: skip
    assert chat["messages"][3:5] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": "a dot"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "error: no such host"},
    ]
    assert chat["messages"][1]["content"][1]["image_url"]["url"] == f"data:image/png;base64,{PNG}"
    items = FORMATS["responses"].render(dialogue)["input"]
    assert [item.get("type", "message") for item in items] == ["message", "message", "function_call", "function_call",
                                                               "function_call_output", "function_call_output",
                                                               "message"]  # fmt: skip
    anthropic_again = FORMATS["anthropic"].render(FORMATS["responses"].read(copy.deepcopy(REQUESTS["responses"])))
    assert [b["type"] for b in anthropic_again["messages"][1]["content"]] == ["text", "tool_use", "tool_use"]


def test_an_unknown_format_and_a_bad_min_reward_are_refused() -> None:
    """An unknown format is a ValueError naming the three; a min_reward that is not a number a TypeError."""
    trace = ol.load_trace(RECORDINGS / "demo.parquet")
    with pytest.raises(ValueError, match="unknown conversation format 'gemini'; the formats: 'openai', 'anthropic'"):
        trace.conversations("gemini")
    with pytest.raises(TypeError, match="min_reward must be a number or None, not str"):
        trace.conversations("openai", min_reward="1")  # type: ignore[arg-type]


def test_min_reward_keeps_the_episodes_that_earned_it() -> None:
    """`min_reward` keeps the episodes whose reward is at least it, in the episodes' order; None keeps them all."""
    trace = ol.load_trace(RECORDINGS / "demo.parquet")
    episodes = trace.episodes
    everything = trace.conversations("openai")
    assert [c.session_id for c in everything] == list(episodes["session_id"])
    kept = trace.conversations("openai", min_reward=1.0)
    assert [c.session_id for c in kept] == list(episodes[episodes["reward"] >= 1.0]["session_id"])
    assert 0 < len(kept) < len(everything)


def test_a_policys_conversation_is_its_prompt_its_calls_and_what_they_gave() -> None:
    """An episode with no model (the demo's policy): the environment's prompt, then each step's call (the tool and
    input the trace's steps hold) and its result's text, and the session's tools."""
    trace = ol.load_trace(RECORDINGS / "demo.parquet")
    steps, calls = trace.steps, trace.calls
    for conversation in trace.conversations("openai"):
        messages = conversation.messages
        assert messages[0]["role"] == "user" and messages[0]["content"]
        made = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
        mine = steps[steps["session_id"] == conversation.session_id]
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in made] == [
            (tool, json.loads(given)) for tool, given in zip(mine["tool"], mine["input"], strict=True)]  # fmt: skip
        outputs = calls[calls["session_id"] == conversation.session_id]["output"]
        assert [m["content"] for m in messages if m["role"] == "tool"] == list(outputs)
        assert {t["function"]["name"] for t in conversation.tools} >= set(mine["tool"])


def send(format: str, conversation: Conversation, url: str) -> None:
    """The conversation sent to `url` through the API's official SDK (its `params` with it, when it has them)."""
    request = conversation.request()
    params = conversation.params or {"model": MODEL}
    if format == "anthropic":
        client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
        client.messages.create(**{"max_tokens": 64, **params}, **request)
    elif format == "openai":
        openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0).chat.completions.create(**params, **request)
    else:
        openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0).responses.create(**params, **request)


@pytest.mark.parametrize("name", COMMITTED)
@pytest.mark.parametrize("format", list(FORMATS))
def test_committed_runs_go_back_through_the_official_sdks(name: str, format: str) -> None:
    """Every conversation of each committed run, in each API's shape, is taken by that API's official SDK and by a
    server that refuses what the API refuses (tests/wild/api_rules.py), which receives it as given."""
    conversations = ol.load_trace(RECORDINGS / name).conversations(format)
    assert conversations
    with RulesServer() as server:
        for conversation in conversations:
            send(format, conversation, server.url)
    api = {"openai": "chat", "anthropic": "messages", "responses": "responses"}[format]
    received = [{k: v for k, v in body.items() if k in conversations[0].request()} for body in server.accepted[api]]
    assert received == [c.request() for c in conversations]


def test_a_claude_runs_thinking_goes_back_signed() -> None:
    """The committed Claude run, as Messages: each answer's thinking block goes back first, with its signature."""
    for conversation in ol.load_trace(RECORDINGS / "claude-arithmetic.parquet").conversations("anthropic"):
        answers = [m for m in conversation.messages if m["role"] == "assistant"]
        assert answers and all(a["content"][0]["type"] == "thinking" and a["content"][0]["signature"] for a in answers)


def export(*args: str) -> subprocess.CompletedProcess[str]:
    """`ors-lab export ARGS`, run."""
    command = [sys.executable, "-m", "ors_lab.cli", "export", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_export_writes_a_json_line_per_conversation(tmp_path: Path) -> None:
    """`ors-lab export TRACE --format F -o FILE` writes each conversation's `to_json()` as a line (with
    `--min-reward`, those that earned it) and says how many."""
    out = tmp_path / "data.jsonl"
    trace = RECORDINGS / "claude-arithmetic.parquet"
    done = export(str(trace), "--format", "anthropic", "--min-reward", "1", "-o", str(out))
    assert done.returncode == 0, done.stderr
    wanted = [c.to_json() for c in ol.load_trace(trace).conversations("anthropic", min_reward=1)]
    assert [json.loads(line) for line in out.read_text().splitlines()] == wanted
    assert f"{len(wanted)} conversations" in done.stdout and all(line["reward"] >= 1 for line in wanted)


def test_export_refuses_a_format_it_does_not_know(tmp_path: Path) -> None:
    """An unknown --format is refused (exit 2) naming the formats, and nothing is written."""
    out = tmp_path / "data.jsonl"
    done = export(str(RECORDINGS / "demo.parquet"), "--format", "gemini", "-o", str(out))
    assert done.returncode == 2 and "openai" in done.stderr and "anthropic" in done.stderr and not out.exists()
