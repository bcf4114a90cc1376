"""The Messages decoder (ors_lab.agents.messages) on stream bytes written here, event by event.

The shapes are those of tests/wild/streams/messages (real streams); here each one is cut down to the
point it pins, so that a failure names one behaviour.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ors_lab.agents.chat import CallPiece, EndPiece, TextPiece, tool_input
from ors_lab.agents.messages import MessagesAnswer
from ors_lab.protocol.errors import IncompleteStreamError, MalformedChunkError, ProviderReportedError

STREAMS = Path(__file__).parents[1] / "wild" / "streams" / "messages"


def event(data: dict[str, Any], name: str | None = None) -> bytes:
    """One SSE event: `event: <name or the data's type>`, its data, a blank line."""
    return f"event: {name or data['type']}\ndata: {json.dumps(data)}\n\n".encode()


def start(usage: dict[str, int] | None = None) -> bytes:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": [],
               "stop_reason": None, "usage": usage or {"input_tokens": 10, "output_tokens": 1}}  # fmt: skip
    return event({"type": "message_start", "message": message})


def block(index: int, content: dict[str, Any]) -> bytes:
    return event({"type": "content_block_start", "index": index, "content_block": content})


def delta(index: int, body: dict[str, Any]) -> bytes:
    return event({"type": "content_block_delta", "index": index, "delta": body})


def stop(index: int) -> bytes:
    return event({"type": "content_block_stop", "index": index})


def end(reason: str | None = "end_turn", usage: dict[str, int] | None = None) -> bytes:
    return event({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None},
                  "usage": usage or {"output_tokens": 5}}) + event({"type": "message_stop"})  # fmt: skip


def text_stream(text: str = "Hi") -> bytes:
    return start() + block(0, {"type": "text", "text": ""}) + delta(0, {"type": "text_delta", "text": text}) + stop(0)


def decode(data: bytes, step: int | None = None) -> tuple[MessagesAnswer, list[Any]]:
    """Feed `data` (in pieces of `step` bytes, or whole) and close; the answer and every piece."""
    answer = MessagesAnswer(content_type="text/event-stream")
    pieces: list[Any] = []
    for i in range(0, len(data), step or len(data) or 1):
        pieces += answer.feed(data[i : i + (step or len(data))])
        if answer.error is not None:
            raise answer.error
    pieces += answer.close()
    return answer, pieces


@pytest.mark.parametrize(("stop_reason", "finish"), [("end_turn", "stop"), ("max_tokens", "length"),
                         ("tool_use", "tool-calls"), ("refusal", "refusal"), ("pause_turn", "pause-turn"),
                         ("stop_sequence", "stop-sequence"), ("something_new", "other")])  # fmt: skip
def test_each_stop_reason_is_its_own_finish_reason(stop_reason: str, finish: str) -> None:
    """end_turn, max_tokens, tool_use, refusal, pause_turn and stop_sequence are six distinct finish reasons."""
    answer, _ = decode(text_stream() + end(stop_reason))
    assert (answer.raw_finish, answer.finish_reason) == (stop_reason, finish)


def test_usage_counts_the_cache_in_the_input_and_message_delta_wins() -> None:
    """Input tokens are uncached + cache reads + cache creation; message_delta's counts replace message_start's;
    thinking tokens, never reported, stay None."""
    usage = {"input_tokens": 2, "cache_creation_input_tokens": 22, "cache_read_input_tokens": 13993, "output_tokens": 1}
    answer, _ = decode(start(usage) + text_stream()[len(start()) :] + end(usage={"output_tokens": 61,
                       "cache_read_input_tokens": 14000}))  # fmt: skip
    assert answer.usage == {"input_tokens": 2 + 22 + 14000, "output_tokens": 61, "reasoning_tokens": None,
                            "cached_tokens": 14000}  # fmt: skip
    assert (answer.cache_read_tokens, answer.cache_creation_tokens) == (14000, 22)
    plain, _ = decode(text_stream() + end())
    assert plain.usage == {"input_tokens": 10, "output_tokens": 5, "reasoning_tokens": None, "cached_tokens": None}


def test_a_signature_is_kept_for_the_next_request_and_is_not_reasoning() -> None:
    """thinking_delta pieces are reasoning; signature_delta is the block's signature, sent back with it and given
    with the part's end, never as reasoning."""
    data = (start() + block(0, {"type": "thinking", "thinking": ""}) + delta(0, {"type": "thinking_delta",
            "thinking": "Let me see."}) + delta(0, {"type": "signature_delta", "signature": "EqQBsig=="}) + stop(0)
            + text_stream()[len(start()) :].replace(b'"index": 0', b'"index": 1') + end())  # fmt: skip
    answer, pieces = decode(data)
    assert pieces == [TextPiece("reasoning", "Let me see."), EndPiece("reasoning", {"anthropic": {"signature":
                      "EqQBsig=="}}), TextPiece("text", "Hi")]  # fmt: skip
    assert answer.content() == [{"type": "thinking", "thinking": "Let me see.", "signature": "EqQBsig=="},
                                {"type": "text", "text": "Hi"}]  # fmt: skip


def test_tool_calls_are_keyed_by_index_and_empty_input_is_an_empty_object() -> None:
    """Blocks start at index 1 and interleave; each input_json_delta joins its own call; no JSON at all is {}."""
    data = (start() + block(1, {"type": "tool_use", "id": "toolu_a", "name": "look", "input": {}})
            + block(2, {"type": "tool_use", "id": "toolu_b", "name": "ping", "input": {}})
            + delta(1, {"type": "input_json_delta", "partial_json": '{"q": '})
            + delta(2, {"type": "input_json_delta", "partial_json": ""})
            + delta(1, {"type": "input_json_delta", "partial_json": '"x"}'})
            + stop(1) + stop(2) + end("tool_use"))  # fmt: skip
    answer, pieces = decode(data)
    assert [(c.id, c.name, c.index, tool_input(c)) for c in answer.calls] == [
        ("toolu_a", "look", 1, {"q": "x"}), ("toolu_b", "ping", 2, {})]  # fmt: skip
    assert [(p.call.id, p.started, p.arguments) for p in pieces if isinstance(p, CallPiece)] == [
        ("toolu_a", True, ""), ("toolu_b", True, ""), ("toolu_a", False, '{"q": '),
        ("toolu_a", False, '"x"}')]  # fmt: skip
    assert [b["input"] for b in answer.content()] == [{"q": "x"}, {}]


def test_ping_is_a_heartbeat_and_an_event_without_a_name_is_ignored() -> None:
    """`event: ping` is counted and says nothing; a data-only event (no `event:` line) is skipped, as the SDK does."""
    nameless = b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"NO"}}\n\n'
    answer, pieces = decode(text_stream() + b'event: ping\ndata: {"type": "ping"}\n\n' + nameless + end())
    assert pieces == [TextPiece("text", "Hi")] and answer.pings == 1


def test_an_error_event_is_typed_by_its_body_on_an_http_200() -> None:
    """`event: error` with overloaded_error is a ProviderReportedError coded overloaded_error, status 529 (as the
    API's own 529 would be), after the pieces before it."""
    data = text_stream("partial") + event({"type": "error", "error": {"type": "overloaded_error",
                                          "message": "Overloaded"}})  # fmt: skip
    answer = MessagesAnswer(content_type="text/event-stream")
    assert answer.feed(data) == [TextPiece("text", "partial")]
    assert isinstance(answer.error, ProviderReportedError)
    assert (answer.error.code, answer.error.status_code) == ("overloaded_error", 529)
    assert "Overloaded" in str(answer.error)
    with pytest.raises(ProviderReportedError):
        answer.close()


def test_a_stream_cut_before_its_stop_reason_is_incomplete() -> None:
    """Bytes that end before any stop_reason raise IncompleteStreamError naming the open tool call."""
    data = start() + block(1, {"type": "tool_use", "id": "toolu_cut", "name": "look", "input": {}})
    data += delta(1, {"type": "input_json_delta", "partial_json": '{"q": "x'})
    with pytest.raises(IncompleteStreamError, match="tool call toolu_cut \\(look\\) at index 1 was open"):
        decode(data)


def test_a_last_event_without_its_blank_line_is_not_needed() -> None:
    """The SDK's fixture ends inside message_stop (never dispatched): the stop_reason already completes it."""
    answer, pieces = decode((STREAMS / "claude-3-opus-sdk-text.sse").read_bytes())
    assert (answer.complete, answer.stopped, answer.finish_reason) == (True, False, "stop")
    assert "".join(p.text for p in pieces) == "Hello there!"


def test_data_that_is_not_json_is_a_malformed_chunk() -> None:
    """An event whose data is not a JSON object stops the answer with MalformedChunkError quoting it."""
    with pytest.raises(MalformedChunkError, match="malformed event 2"):
        decode(start() + b"event: content_block_start\ndata: {not json\n\n" + end())


def test_a_whole_message_body_is_one_turn() -> None:
    """A JSON message (not a stream) gives its blocks, its whole tool input and its stop reason; a JSON error
    body is the provider's error."""
    whole = {"id": "msg_w", "type": "message", "role": "assistant", "model": "claude-test", "stop_reason": "tool_use",
             "content": [{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "toolu_w", "name": "look",
                         "input": {"q": 1}}], "usage": {"input_tokens": 4, "output_tokens": 2}}  # fmt: skip
    answer = MessagesAnswer(content_type="application/json")
    answer.feed(json.dumps(whole).encode())
    pieces = answer.close()
    assert pieces[0] == TextPiece("text", "ok") and tool_input(answer.calls[0]) == {"q": 1}
    assert answer.finish_reason == "tool-calls" and answer.content()[1]["input"] == {"q": 1}
    error = MessagesAnswer(content_type="application/json")
    error.feed(b'{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}')
    with pytest.raises(ProviderReportedError, match="slow down") as raised:
        error.close()
    assert raised.value.status_code == 429


@pytest.mark.parametrize("fixture", sorted(STREAMS.glob("*.sse")), ids=lambda p: p.stem)
def test_the_bytes_may_arrive_one_at_a_time(fixture: Path) -> None:
    """Each real stream fed byte by byte gives the pieces, calls, usage and finish it gives whole."""
    data = fixture.read_bytes()

    def outcome(step: int | None) -> Any:
        try:
            answer, pieces = decode(data, step)
        except ProviderReportedError as exc:
            return ("error", exc.code)
        calls = [(c.id, c.name, c.text) for c in answer.calls]
        merged = [(p.kind, p.text) for p in pieces if isinstance(p, TextPiece)]
        return merged, calls, answer.usage, answer.finish_reason, answer.content()

    whole = outcome(None)
    assert outcome(1) == whole


def test_server_tool_blocks_go_back_as_they_came_and_are_not_calls() -> None:
    """A server_tool_use block (its input streamed), its result and a redacted_thinking block are sent back as the
    API gave them, and none of them is a tool call for the agent to run."""
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"type": "web_search_result",
              "url": "https://example.org/", "title": "Example", "encrypted_content": "Eq=="}]}  # fmt: skip
    data = (start() + block(0, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}) + stop(0)
            + block(1, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}})
            + delta(1, {"type": "input_json_delta", "partial_json": '{"query": '})
            + delta(1, {"type": "input_json_delta", "partial_json": '"ors"}'}) + stop(1)
            + block(2, result) + stop(2) + end("end_turn"))  # fmt: skip
    answer, pieces = decode(data)
    assert answer.calls == [] and pieces == [EndPiece("reasoning", {"anthropic": {"redactedData": "EmwKAhgBEgy3va"}})]
    assert answer.content() == [
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "ors"}},
        result,
    ]
