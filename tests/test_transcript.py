"""The agent's stream rebuilt from its events: deltas joined per part, tool calls per id, parts per turn."""

from __future__ import annotations

from typing import Any

from ors_lab.events import (
    BlockEndEvent,
    BlockStartEvent,
    ErrorEvent,
    ReasoningDeltaEvent,
    ReasoningEndEvent,
    ReasoningStartEvent,
    RewardEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ToolInputAvailableEvent,
    ToolInputDeltaEvent,
    ToolInputEndEvent,
    ToolInputStartEvent,
    ToolOutputAvailableEvent,
    ToolOutputErrorEvent,
)
from ors_lab.transcript import AgentStream, join_stream, output_text


def wire(*events: Any) -> list[dict[str, Any]]:
    """The events as a trace's `data` holds them."""
    return [event.to_wire() for event in events]


def test_deltas_join_per_part_even_interleaved() -> None:
    """Two parts streaming at once each get their own pieces, in order; a reused id after its end is a new part."""
    stream = join_stream(wire(
        ReasoningStartEvent(id="r1"), TextStartEvent(id="t1"),
        ReasoningDeltaEvent(id="r1", delta="Let me"), TextDeltaEvent(id="t1", delta="The answer"),
        ReasoningDeltaEvent(id="r1", delta=" think."), TextDeltaEvent(id="t1", delta=" is 4."),
        ReasoningEndEvent(id="r1"), TextEndEvent(id="t1"),
        TextStartEvent(id="t1"), TextDeltaEvent(id="t1", delta="Again."), TextEndEvent(id="t1"),
    ))  # fmt: skip
    assert [(p.kind, p.text, p.pieces, p.done) for p in stream.parts] == [
        ("reasoning", "Let me think.", 2, True),
        ("text", "The answer is 4.", 2, True),
        ("text", "Again.", 1, True),
    ]
    assert [(p.first, p.last) for p in stream.parts] == [(0, 6), (1, 7), (8, 10)]


def test_a_tool_call_gathers_its_arguments_input_output_and_reward() -> None:
    """Argument deltas join to the JSON the LLM wrote; input, output, reward attach by toolCallId."""
    stream = join_stream(wire(
        ToolInputStartEvent(tool_call_id="c1", tool_name="submit"),
        ToolInputDeltaEvent(tool_call_id="c1", input_text_delta='{"ans'),
        ToolInputDeltaEvent(tool_call_id="c1", input_text_delta='wer": "4"}'),
        ToolInputEndEvent(tool_call_id="c1"),
        ToolInputAvailableEvent(tool_call_id="c1", tool_name="submit", input={"answer": "4"}),
        ToolOutputAvailableEvent(tool_call_id="c1", output={"text": "Correct!", "blocks": []}),
        RewardEvent(tool_call_id="c1", reward=1.0, finished=True),
        ToolInputAvailableEvent(tool_call_id="c2", tool_name="guess", input={"number": 50}),
        ToolOutputErrorEvent(tool_call_id="c2", error="unknown tool", reason="not_found"),
    ))  # fmt: skip
    first, second = stream.parts
    assert (first.kind, first.tool, first.text, first.input, first.reward, first.finished) == (
        "tool-call", "submit", '{"answer": "4"}', {"answer": "4"}, 1.0, True)  # fmt: skip
    assert first.describe() == 'submit({"answer": "4"})' and first.output == {"text": "Correct!", "blocks": []}
    assert second.arguments == '{"number":50}' and (second.error, second.reason) == ("unknown tool", "not_found")


def test_parts_group_into_turns_and_loose_parts_into_their_own() -> None:
    """Parts inside a block are its turn; parts between blocks make one unnamed turn; errors are kept."""
    stream = AgentStream()
    for index, item in enumerate(wire(
        TextStartEvent(id="t0"), TextDeltaEvent(id="t0", delta="Hello."), TextEndEvent(id="t0"),
        BlockStartEvent(block_id="b1", block_name="guess 50"),
        ReasoningStartEvent(id="r1"), ReasoningDeltaEvent(id="r1", delta="Middle."), ReasoningEndEvent(id="r1"),
        ToolInputAvailableEvent(tool_call_id="c1", tool_name="guess", input={"number": 50}),
        RewardEvent(tool_call_id="c1", reward=0.0, finished=False),
        BlockEndEvent(block_id="b1"),
        ErrorEvent(error_type="provider_error", message="overloaded", source="provider", code="APIError"),
        TextStartEvent(id="t9"), TextDeltaEvent(id="t9", delta="Sorry."), TextEndEvent(id="t9"),
    )):  # fmt: skip
        stream.feed(item, at=index)
    turns = stream.turns()
    assert [(t.number, t.name, t.text, t.reasoning) for t in turns] == [
        (1, None, "Hello.", ""), (2, "guess 50", "", "Middle."), (3, None, "Sorry.", "")]  # fmt: skip
    assert [call.describe() for call in turns[1].tool_calls] == ['guess({"number":50})']
    assert turns[2].errors == ["overloaded"] and turns[2].parts[0].reason == "provider_error"


def test_anything_else_is_ignored() -> None:
    """Kinds the stream does not rebuild (start, usage, finish) and unknown ones change nothing."""
    stream = join_stream([{"type": "start", "messageId": "s"}, {"type": "usage", "inputTokens": 3},
                          {"type": "finish", "finishReason": "stop"}, {"type": "something-new"}, {}])  # fmt: skip
    assert stream.parts == [] and stream.turns() == []


def test_output_text_reads_results_and_agent_outputs() -> None:
    """Text blocks joined by newlines, an image as a placeholder; a failed result or junk is None."""
    blocks = [{"type": "text", "text": "a caption"}, {"type": "image", "mimeType": "image/png", "data": "iVBO"},
              {"type": "audio"}]  # fmt: skip
    assert output_text({"ok": True, "output": {"blocks": blocks}}) == "a caption\n[image/png image]\n[audio block]"
    assert output_text({"text": "Correct!", "blocks": [{"type": "text", "text": "Correct!"}]}) == "Correct!"
    assert output_text({"ok": False, "error": "no"}) is None
    assert output_text("not a result") is None and output_text({"ok": True}) is None


def test_what_the_provider_said_of_a_part_is_kept_from_its_end() -> None:
    """A reasoning part's signature and a streamed call's item id (their end events' providerMetadata) are the
    parts' metadata, the same from wire dicts and typed events; a call only made, never streamed, is not streamed."""
    signed = {"anthropic": {"signature": "EqQBsig=="}}
    item = {"openai": {"itemId": "fc_1"}}
    events = [ReasoningStartEvent(id="r1"), ReasoningDeltaEvent(id="r1", delta="Hm."),
              ReasoningEndEvent(id="r1", provider_metadata=signed), ToolInputStartEvent(tool_call_id="c1",
              tool_name="add"), ToolInputEndEvent(tool_call_id="c1", provider_metadata=item),
              ToolInputAvailableEvent(tool_call_id="c2", tool_name="add", input={})]  # fmt: skip
    typed = AgentStream()
    for event in events:
        typed.take(event)
    for stream in (join_stream(wire(*events)), typed):
        assert [(p.kind, p.metadata, p.streamed) for p in stream.parts] == [
            ("reasoning", signed, False), ("tool-call", item, True), ("tool-call", None, False)]  # fmt: skip
