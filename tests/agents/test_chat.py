"""The chat-completions decoder (ors_lab/agents/chat.py), on byte streams split at awkward places."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ors_lab.agents.chat import CallPiece, ChatAnswer, TextPiece, ToolCall, tool_input
from ors_lab.protocol.errors import (
    IncompleteStreamError,
    MalformedChunkError,
    ProviderReportedError,
    ProviderStreamError,
)


def sse(*chunks: Any, done: bool = True, end: str = "\n") -> bytes:
    """Chunks (dicts as JSON, strings as they are) as SSE events, with ``[DONE]`` last if asked."""
    events = [c if isinstance(c, str) else json.dumps(c) for c in chunks] + (["[DONE]"] if done else [])
    return "".join(f"data: {e}{end}{end}" for e in events).encode()


def delta(index: int = 0, finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": index, "delta": fields, "finish_reason": finish}]}


def read(data: bytes, *, step: int | None = None, content_type: str | None = None) -> tuple[ChatAnswer, dict[str, str]]:
    """The answer of ``data`` fed ``step`` bytes at a time (whole if None), and its pieces joined by kind."""
    answer = ChatAnswer(content_type=content_type)
    pieces: list[TextPiece | CallPiece] = []
    size = step or len(data) or 1
    for start in range(0, len(data), size):
        pieces += answer.feed(data[start : start + size])
        if answer.error is not None:
            raise answer.error
    pieces += answer.close()
    joined: dict[str, str] = {}
    for piece in pieces:
        if isinstance(piece, TextPiece):
            joined[piece.kind] = joined.get(piece.kind, "") + piece.text
    return answer, joined


def calls(answer: ChatAnswer) -> list[tuple[str, str, str]]:
    return [(c.id, c.name, c.text) for c in answer.calls]


STREAM = sse(
    delta(role="assistant", content=""),
    delta(reasoning_content="Two and "),
    delta(reasoning_content="two: four."),
    delta(content="The answer "),
    delta(content="is 4 — naïve ✓."),
    delta(tool_calls=[{"index": 0, "id": "call_a", "type": "function",
                       "function": {"name": "submit", "arguments": ""}}]),
    delta(tool_calls=[{"index": 0, "function": {"arguments": '{"answer": '}}]),
    delta(tool_calls=[{"index": 0, "function": {"arguments": '"4"}'}}]),
    delta(finish="tool_calls"),
    {"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 42, "completion_tokens": 9,
     "completion_tokens_details": {"reasoning_tokens": 3}, "prompt_tokens_details": {"cached_tokens": 32}}},
)  # fmt: skip


@pytest.mark.parametrize("step", [None, 1, 2, 3, 7, 64])
def test_a_stream_reads_the_same_however_it_is_split(step: int | None) -> None:
    """Reasoning, text, tool calls, finish and usage do not depend on where the network cut the bytes."""
    answer, joined = read(STREAM, step=step)
    assert joined == {"reasoning": "Two and two: four.", "text": "The answer is 4 — naïve ✓."}
    assert calls(answer) == [("call_a", "submit", '{"answer": "4"}')]
    assert tool_input(answer.calls[0]) == {"answer": "4"}
    assert (answer.finish_reason, answer.done, answer.other_choices) == ("tool-calls", True, set())
    assert answer.usage == {"input_tokens": 42, "output_tokens": 9, "reasoning_tokens": 3, "cached_tokens": 32}


@pytest.mark.parametrize("end", ["\r\n", "\r"])
def test_crlf_and_cr_line_ends_and_comments_read_as_lf(end: str) -> None:
    """CRLF or CR line ends and keep-alive comments between events change nothing."""
    data = STREAM.replace(b"\n", end.encode()).replace(
        b"data: [DONE]", b": keep-alive" + end.encode() * 2 + b"data: [DONE]"
    )
    answer, joined = read(data, step=5)
    assert joined["text"] == "The answer is 4 — naïve ✓." and calls(answer) == [("call_a", "submit", '{"answer": "4"}')]


def test_content_parts_are_read_as_parts() -> None:
    """Mistral's list content: thinking parts (text or nested text parts) are reasoning, text parts text."""
    data = sse(
        delta(content=[{"type": "thinking",
                        "thinking": [{"type": "text", "text": "Let me "}, {"type": "text", "text": "think."}]}]),
        delta(content=[{"type": "thinking", "thinking": " More."}]),
        delta(content=[{"type": "text", "text": "Paris"}, {"type": "image_url", "image_url": {"url": "x"}}]),
        delta(finish="stop"),
    )  # fmt: skip
    answer, joined = read(data)
    assert joined == {"reasoning": "Let me think. More.", "text": "Paris"} and answer.finish_reason == "stop"


def test_reasoning_content_wins_over_reasoning() -> None:
    """A delta with both ``reasoning_content`` and ``reasoning`` (the same text twice) gives it once."""
    data = sse(delta(reasoning_content="a", reasoning="a"), delta(reasoning="b"), delta(finish="stop"))
    assert read(data)[1] == {"reasoning": "ab"}


def test_a_refusal_is_kept_apart_with_its_own_finish_reason() -> None:
    """``delta.refusal`` text is a refusal piece, and the answer's finish reason says refusal."""
    data = sse(delta(refusal="I can't "), delta(refusal="help with that."), delta(finish="stop"))
    answer, joined = read(data)
    assert joined == {"refusal": "I can't help with that."} and answer.finish_reason == "refusal"


def test_calls_without_index_are_placed_by_id_then_by_order() -> None:
    """Index-less deltas: a new id starts a call, a known id continues it, a bare delta goes to the latest call."""
    data = sse(
        delta(tool_calls=[{"id": "c1", "type": "function", "function": {"name": "submit", "arguments": '{"text": '}}]),
        delta(tool_calls=[{"function": {"arguments": '"15"}'}}]),
        delta(tool_calls=[{"id": "c2", "type": "function",
                           "function": {"name": "submit", "arguments": '{"text": "16"}'}}]),
        delta(finish="tool_calls"),
    )  # fmt: skip
    answer, _ = read(data)
    assert calls(answer) == [("c1", "submit", '{"text": "15"}'), ("c2", "submit", '{"text": "16"}')]


def test_several_calls_at_index_0_with_different_ids_stay_apart() -> None:
    """A new id at an index already used starts a new call; a later id-less delta at that index continues it."""
    data = sse(
        delta(tool_calls=[{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}}]),
        delta(tool_calls=[{"index": 0, "id": "b", "function": {"name": "g", "arguments": '{"x"'}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": ": 1}"}}]),
        delta(tool_calls=[{"index": 1, "function": {"name": "h", "arguments": "{}"}}]),
        delta(finish="tool_calls"),
    )
    answer, _ = read(data)
    assert [(c.id, c.name, c.text) for c in answer.calls][:2] == [("a", "f", "{}"), ("b", "g", '{"x": 1}')]
    assert (answer.calls[2].name, answer.calls[2].text) == ("h", "{}") and answer.calls[2].id.startswith("call-")


@pytest.mark.parametrize(
    ("arguments", "why"),
    [('{"text": "15"}{"text": "16"}', "not one JSON value"), ("[1]", "must be a JSON object"), ('{"a": ', "not one")],
)
def test_arguments_that_are_not_one_json_object_are_refused(arguments: str, why: str) -> None:
    """Two JSON values run together, a non-object or a cut object is never a tool's input."""
    with pytest.raises(ValueError, match=why):
        tool_input(ToolCall("c", "submit", 0, [arguments]))
    assert tool_input(ToolCall("c", "submit", 0, [])) == {} and tool_input(ToolCall("c", "f", 0, [" "])) == {}


@pytest.mark.parametrize(
    "data",
    [
        sse(delta(content="half"),
            delta(tool_calls=[{"index": 0, "id": "c", "function": {"name": "f", "arguments": '{"a"'}}]), done=False),
        b'data: {"choices": [{"index": 0, "delta": {"content": "cut mid-event"',
        b"",
    ],
    ids=["no-finish-no-done", "cut-mid-event", "empty"],
)  # fmt: skip
def test_a_stream_cut_short_is_an_incomplete_stream(data: bytes) -> None:
    """No finish reason and no [DONE]: ``IncompleteStreamError`` saying how far it got and the call left open."""
    cut = "incomplete stream: the answer ended with no finish_reason and no \\[DONE\\]"
    with pytest.raises(IncompleteStreamError, match=cut) as caught:
        read(data, step=4)
    if b"arguments" in data:
        assert "tool call c (f) was open" in str(caught.value)


def test_a_finish_without_done_or_done_without_finish_is_complete() -> None:
    """Either end marker completes an answer (servers omit one or the other)."""
    assert read(sse(delta(content="a"), delta(finish="stop"), done=False))[0].finish_reason == "stop"
    assert read(sse(delta(content="a")))[0].finish_reason == "stop"


@pytest.mark.parametrize(
    ("chunk", "message", "status"),
    [
        ({"error": {"message": "Rate limit reached", "type": "requests", "code": "429"}}, "Rate limit reached", 429),
        ({"object": "error", "message": "max_tokens is too large", "type": "BadRequestError", "code": 400},
         "max_tokens is too large", 400),
        ({"id": "gen-1", "object": "chat.completion.chunk", "error": {"code": 502, "message": "Provider returned error",
          "metadata": {"raw": "upstream overloaded"}}, "choices": [{"index": 0, "delta": {"content": ""},
          "finish_reason": "error"}]}, "Provider returned error: upstream overloaded", 502),
        ({"error": "litellm.APIConnectionError: boom"}, "litellm.APIConnectionError: boom", None),
        ({"error": {"message": "Overloaded", "type": "overloaded_error"}}, "Overloaded", None),
    ],
    ids=["openai", "vllm", "openrouter", "litellm-text", "typed"],
)  # fmt: skip
def test_error_objects_in_every_shape_are_the_providers(
    chunk: dict[str, Any], message: str, status: int | None
) -> None:
    """An error object mid-stream is a ``ProviderReportedError`` with its message; a status code counts as one."""
    answer = ChatAnswer()
    pieces = answer.feed(sse(delta(content="so far"), chunk))
    assert pieces == [TextPiece("text", "so far")]  # what came before the error is kept
    assert isinstance(answer.error, ProviderReportedError) and message in str(answer.error)
    assert answer.error.status_code == status
    with pytest.raises(ProviderReportedError):
        answer.feed(b"data: [DONE]\n\n")


@pytest.mark.parametrize("data", ["not json", "[1, 2]", '{"choices": [', "null"])
def test_a_malformed_chunk_is_the_providers_and_names_the_chunk(data: str) -> None:
    """A chunk that is not a JSON object: ``MalformedChunkError`` (a provider error) with its number and text."""
    answer = ChatAnswer()
    pieces = answer.feed(sse(delta(content="ok"), data))
    assert pieces == [TextPiece("text", "ok")]
    assert isinstance(answer.error, MalformedChunkError) and isinstance(answer.error, ProviderStreamError)
    assert "malformed chunk 2 of the answer (not a JSON object)" in str(answer.error) and answer.error.chunk == data


def test_a_whole_json_completion_is_one_turn() -> None:
    """A ``chat.completion`` object sent to a stream request: its text, reasoning, calls, finish and usage."""
    whole = {"object": "chat.completion", "model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls",
             "message": {"role": "assistant", "content": "Calling.", "reasoning_content": "Hmm.", "tool_calls": [
                 {"id": "c9", "type": "function", "function": {"name": "submit", "arguments": '{"answer": "4"}'}}]}}],
             "usage": {"prompt_tokens": 5, "completion_tokens": 7}}  # fmt: skip
    for content_type in ("application/json", None):
        answer, joined = read(json.dumps(whole, indent=1).encode(), step=9, content_type=content_type)
        assert joined == {"reasoning": "Hmm.", "text": "Calling."} and calls(answer) == [
            ("c9", "submit", '{"answer": "4"}')
        ]
        assert answer.finish_reason == "tool-calls" and answer.usage is not None and answer.usage["output_tokens"] == 7
    with pytest.raises(ProviderReportedError, match="bad key"):
        read(b'{"error": {"message": "bad key", "code": 401}}', content_type="application/json")


def test_other_choices_are_counted_and_ignored() -> None:
    """With n > 1, choice 0 alone is read; the other choices' indices are counted."""
    data = sse(delta(0, content="A"), delta(1, content="B"), delta(2, content="C"), delta(0, content="a"),
               delta(1, finish="stop"), delta(0, finish="length"))  # fmt: skip
    answer, joined = read(data)
    assert joined == {"text": "Aa"} and answer.other_choices == {1, 2} and answer.finish_reason == "length"


def test_a_choice_without_delta_gives_its_finish_reason_only() -> None:
    """Azure's content-filter chunks (no delta, or delta null) and prompt-filter chunks (no choices) read cleanly."""
    data = sse(
        {"choices": [], "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}]},
        delta(content="Hi"),
        {"choices": [{"index": 0, "finish_reason": "stop", "content_filter_results": {}}]},
        {"choices": [{"index": 0, "delta": None, "finish_reason": None, "content_filter_offsets": {}}],
         "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
    )  # fmt: skip
    answer, joined = read(data)
    assert joined == {"text": "Hi"} and answer.finish_reason == "stop" and answer.usage is not None


def test_usage_is_the_last_one_or_groqs() -> None:
    """Cumulative usage in every chunk: the last counts; Groq's ``x_groq.usage`` when there is no other."""
    data = sse({**delta(content="a"), "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
               {**delta(finish="stop"), "usage": {"prompt_tokens": 1, "completion_tokens": 2}})  # fmt: skip
    assert read(data)[0].usage == {
        "input_tokens": 1,
        "output_tokens": 2,
        "reasoning_tokens": None,
        "cached_tokens": None,
    }
    groq = sse(
        delta(content="a"), {**delta(finish="stop"), "x_groq": {"usage": {"prompt_tokens": 8, "completion_tokens": 4}}}
    )
    assert read(groq)[0].usage == {
        "input_tokens": 8,
        "output_tokens": 4,
        "reasoning_tokens": None,
        "cached_tokens": None,
    }


@pytest.mark.parametrize(("raw", "name"), [("stop", "stop"), ("length", "length"), ("tool_calls", "tool-calls"),
                                           ("function_call", "tool-calls"), ("content_filter", "content-filter"),
                                           ("eos", "other")])  # fmt: skip
def test_finish_reasons_are_named_as_ors_lab_names_them(raw: str, name: str) -> None:
    """The model's own ``length`` stays ``length``; an unknown reason is ``other``."""
    assert read(sse(delta(content="x"), delta(finish=raw)))[0].finish_reason == name
