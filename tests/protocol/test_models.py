"""The ORS models: wire round trips, short reprs, text and HTML views, and shape errors."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ors_lab.protocol.models import (
    ImageBlock,
    OtherBlock,
    Split,
    Task,
    TextBlock,
    ToolOutput,
    ToolResult,
    ToolSpec,
    WireFormatError,
    block_from_wire,
)
from ors_lab.protocol.sse import SSEDecoder

PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
TEXT_WIRE = {"text": "a pixel:", "detail": None, "type": "text"}
IMAGE_WIRE = {"data": PIXEL, "mimeType": "image/png", "detail": None, "type": "image"}
IMAGE_RESULT = {
    "ok": True,
    "output": {"blocks": [TEXT_WIRE, IMAGE_WIRE], "metadata": None, "reward": None, "finished": False},
}


def compact(value: object) -> str:
    """JSON as the reference servers write it: no spaces."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# Blocks


def test_text_block_round_trip() -> None:
    """A text block converts from and back to its wire object, detail included."""
    wire = {"text": "hi", "detail": {"lang": "en"}, "type": "text"}
    block = block_from_wire(wire)
    assert block == TextBlock("hi", detail={"lang": "en"})
    assert block.to_wire() == wire
    assert block.type == "text"


def test_image_block_round_trip() -> None:
    """An image block converts from and back to its wire object, with ``mimeType`` as ``mime_type``."""
    block = block_from_wire(IMAGE_WIRE)
    assert block == ImageBlock(PIXEL, "image/png")
    assert block.to_wire() == IMAGE_WIRE


def test_unknown_block_type_kept_as_other_block() -> None:
    """A block of an unmodelled type is kept whole as OtherBlock and converts back unchanged."""
    wire = {"type": "reasoning", "text": "think", "signature": None, "extra": [1, 2]}
    block = block_from_wire(wire)
    assert block == OtherBlock("reasoning", {"text": "think", "signature": None, "extra": [1, 2]})
    assert block.to_wire() == wire


@pytest.mark.parametrize(
    "wire",
    [
        ["text", "hi"],
        {"text": "hi"},
        {"type": 3},
        {"type": "text"},
        {"type": "text", "text": 5},
        {"type": "image", "data": PIXEL},
        {"type": "image", "mimeType": "image/png"},
    ],
    ids=["not-object", "no-type", "type-not-str", "text-missing", "text-not-str", "no-mime", "no-data"],
)
def test_bad_block_shapes(wire: object) -> None:
    """A block of the wrong shape raises WireFormatError."""
    with pytest.raises(WireFormatError):
        block_from_wire(wire)


# ToolOutput and ToolResult


def test_tool_output_round_trip() -> None:
    """ToolOutput converts from and back to its wire object."""
    wire = {"blocks": [TEXT_WIRE, IMAGE_WIRE], "metadata": {"k": [1]}, "reward": 0.5, "finished": True}
    output = ToolOutput.from_wire(wire)
    assert output == ToolOutput((TextBlock("a pixel:"), ImageBlock(PIXEL, "image/png")), {"k": [1]}, 0.5, True)
    assert output.to_wire() == wire


def test_integer_reward_becomes_float() -> None:
    """An integer reward on the wire is read as a float."""
    reward = ToolOutput.from_wire({"blocks": [], "metadata": None, "reward": 1, "finished": False}).reward
    assert reward == 1.0
    assert type(reward) is float


@pytest.mark.parametrize(
    "wire",
    [
        IMAGE_RESULT,
        {"ok": False, "error": "'nope' is not a valid tool"},
        {"ok": False, "error": "Tool input validation error: [...]", "reason": "input_validation"},
    ],
    ids=["ok", "not-ok", "not-ok-reason"],
)
def test_tool_result_round_trip(wire: dict[str, object]) -> None:
    """ToolResult converts from and back to the RunToolOutput object, ok or not."""
    assert ToolResult.from_wire(wire).to_wire() == wire


CAPTURED_RESULTS = ["50_call_submit_correct", "56_call_image", "57_call_unknown_tool"]


def captured_end(capture, server: str, name: str) -> str:
    """The data of the ``end`` event in a capture."""
    (end,) = [item for item in SSEDecoder().feed(capture(server, name).body) if getattr(item, "event", "") == "end"]
    return end.data


@pytest.mark.parametrize("name", CAPTURED_RESULTS)
@pytest.mark.parametrize("server", ["ors-sdk", "openreward"])
def test_captured_result_reencodes_to_same_object(capture, server: str, name: str) -> None:
    """The result JSON of captures 50, 56 and 57 re-encodes through ToolResult to the same JSON object."""
    wire = json.loads(captured_end(capture, server, name))
    assert ToolResult.from_wire(wire).to_wire() == wire


@pytest.mark.parametrize("name", CAPTURED_RESULTS)
@pytest.mark.parametrize("server", ["ors-sdk", "openreward"])
def test_captured_result_reencodes_to_same_bytes(capture, server: str, name: str) -> None:
    """to_wire keeps the servers' key order, so compact JSON of it is the captured payload byte for byte."""
    data = captured_end(capture, server, name)
    assert compact(ToolResult.from_wire(json.loads(data)).to_wire()) == data


def test_tool_result_not_ok_fields() -> None:
    """An ``ok:false`` result carries error and reason and no output."""
    result = ToolResult.from_wire({"ok": False, "error": "gone", "reason": "episode_finished"})
    assert (result.ok, result.error, result.reason, result.blocks) == (False, "gone", "episode_finished", ())
    assert result.output is None


def test_task_id_not_compared() -> None:
    """Two results that differ only in task_id compare equal."""
    assert ToolResult.from_wire(IMAGE_RESULT, task_id="a") == ToolResult.from_wire(IMAGE_RESULT, task_id="b")


def test_models_are_frozen() -> None:
    """The models are frozen: assigning a field raises."""
    result = ToolResult.from_wire(IMAGE_RESULT)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.reward = 1.0  # type: ignore[misc]


# Views: repr, text, output, HTML


def test_tool_result_short_repr() -> None:
    """An ok result's repr shows ok, reward, finished and the block count only."""
    result = ToolResult(ok=True, blocks=(TextBlock("a"), ImageBlock(PIXEL, "image/png")), reward=1.0, finished=True)
    assert repr(result) == "ToolResult(ok=True, reward=1.0, finished=True, blocks=2)"


def test_tool_result_not_ok_repr() -> None:
    """A failed result's repr shows the error (cut at 80 chars) and the reason when there is one."""
    assert repr(ToolResult(ok=False, error="no", reason="not_found")) == (
        "ToolResult(ok=False, error='no', reason='not_found')"
    )
    assert repr(ToolResult(ok=False, error="e" * 100)) == f"ToolResult(ok=False, error='{'e' * 77}...')"


def test_block_reprs() -> None:
    """Text blocks show their text (cut, with the length, past 60 chars); image blocks their type and size."""
    assert repr(TextBlock("Correct!")) == "TextBlock('Correct!')"
    assert repr(TextBlock("x" * 61)) == f"TextBlock('{'x' * 57}...', chars=61)"
    assert repr(ImageBlock(PIXEL, "image/png")) == f"ImageBlock('image/png', base64_chars={len(PIXEL)})"


def test_tool_result_text() -> None:
    """``.text`` joins the text blocks with newlines, skipping other blocks; for a failure it is the error."""
    blocks = (TextBlock("one"), ImageBlock(PIXEL, "image/png"), OtherBlock("reasoning", {}), TextBlock("two"))
    assert ToolResult(ok=True, blocks=blocks).text == "one\ntwo"
    assert ToolResult(ok=False, error="bad").text == "bad"


def test_tool_result_output() -> None:
    """``.output`` rebuilds the ToolOutput of an ok result."""
    result = ToolResult.from_wire(IMAGE_RESULT)
    assert result.output == ToolOutput.from_wire(IMAGE_RESULT["output"])


def test_html_shows_images() -> None:
    """The HTML view of a result with an image block contains an ``<img`` with a data URL."""
    page = ToolResult.from_wire(IMAGE_RESULT)._repr_html_()
    assert f'<img src="data:image/png;base64,{PIXEL}"' in page
    assert "a pixel:" in page


def test_html_escapes_text() -> None:
    """The HTML view escapes the text of blocks and errors."""
    page = ToolResult(ok=True, blocks=(TextBlock("<script>alert('x') & </script>"),))._repr_html_()
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
    assert "&amp;" in page
    assert "<b>" not in ToolResult(ok=False, error="<b>bold</b>")._repr_html_()


def test_html_puts_the_outcome_and_reward_first_and_the_task_id_last() -> None:
    """A result's HTML reads outcome, reward and finished before its blocks, and its task_id after them."""
    page = ToolResult(ok=True, blocks=(TextBlock("Correct!"),), reward=1.0, finished=True, task_id="f00d")._repr_html_()
    order = [page.index(word) for word in ("outcome", "reward", "finished", "Correct!", "task_id f00d")]
    assert order == sorted(order)
    assert 'style="color:hsl(120, 65%, 45%)">1</b>' in page  # the reward on the shared colour scale


def test_html_of_a_failed_result_shows_the_error_and_reason_first() -> None:
    """An ok=False result's HTML says it failed, then the server's error and reason, escaped."""
    page = ToolResult(ok=False, error="'nope' is <not> a tool", reason="invalid")._repr_html_()
    assert page.index("failed") < page.index("&#x27;nope&#x27; is &lt;not&gt; a tool") < page.index("invalid")
    assert "<not>" not in page


def test_html_cuts_long_text_and_says_how_much() -> None:
    """A text block over the HTML limit is cut, and the view counts the characters left out."""
    page = TextBlock("x" * 25_000)._repr_html_()
    assert "x" * 20_000 in page and "x" * 20_001 not in page
    assert "5,000 more characters" in page


def test_html_of_blocks_task_tool_and_split() -> None:
    """Blocks, tasks, tools and splits show themselves in HTML, every value escaped."""
    assert f'src="data:image/png;base64,{PIXEL}"' in ImageBlock(PIXEL, "image/png")._repr_html_()
    assert "&lt;i&gt;hi&lt;/i&gt;" in TextBlock("<i>hi</i>")._repr_html_()
    task = Task("lab", {"id": "t0", "question": "<b>2 + 2</b>?"})._repr_html_()
    assert "&lt;b&gt;2 + 2&lt;/b&gt;?" in task and "<b>2" not in task
    assert task.index("question") < task.index(">id<")  # ids last
    schema = {"type": "object", "properties": {"answer": {"type": "string", "description": "Yours."}}}
    tool = ToolSpec("submit", "Submit <an> answer.", {**schema, "required": ["answer"]})._repr_html_()
    assert "Submit &lt;an&gt; answer." in tool
    assert "<td>answer</td><td>string</td><td>yes</td><td>Yours.</td>" in tool
    assert "no parameters" in ToolSpec("hint")._repr_html_()
    split = Split("train", "train")._repr_html_()
    assert "<b>train</b>" in split


# Shape errors


@pytest.mark.parametrize(
    "wire",
    [
        ["ok"],
        {"error": "no ok"},
        {"ok": "true", "output": IMAGE_RESULT["output"]},
        {"ok": 1, "output": IMAGE_RESULT["output"]},
        {"ok": True},
        {"ok": True, "output": [1]},
        {"ok": True, "output": {"blocks": {}, "metadata": None, "reward": None, "finished": False}},
        {"ok": True, "output": {"blocks": [], "metadata": None, "reward": "1.0", "finished": False}},
        {"ok": True, "output": {"blocks": [], "metadata": None, "reward": None, "finished": "yes"}},
    ],
    ids=[
        "not-object",
        "ok-missing",
        "ok-string",
        "ok-int",
        "output-missing",
        "output-not-object",
        "blocks-not-list",
        "reward-string",
        "finished-string",
    ],
)
def test_bad_result_shapes(wire: object) -> None:
    """A RunToolOutput of the wrong shape raises WireFormatError (a ValueError)."""
    with pytest.raises(WireFormatError):
        ToolResult.from_wire(wire)
    assert issubclass(WireFormatError, ValueError)


def test_boolean_reward_rejected() -> None:
    """A JSON ``true`` is not a reward: ``"reward": true`` raises WireFormatError (bool is not a number)."""
    with pytest.raises(WireFormatError):
        ToolOutput.from_wire({"blocks": [], "metadata": None, "reward": True, "finished": False})


def test_failed_result_without_error_rejected() -> None:
    """``{"ok": false}`` with no error string raises WireFormatError instead of an error reading 'None'."""
    with pytest.raises(WireFormatError):
        ToolResult.from_wire({"ok": False})


# Split, ToolSpec, Task


def test_split_from_wire() -> None:
    """A split converts from ``{"name", "type"}``."""
    assert Split.from_wire({"name": "dev", "type": "validation"}) == Split("dev", "validation")


@pytest.mark.parametrize("wire", ["train", {"type": "train"}, {"name": 1, "type": "train"}])
def test_bad_split_shapes(wire: object) -> None:
    """A split that is not an object with a string name raises WireFormatError."""
    with pytest.raises(WireFormatError):
        Split.from_wire(wire)


BIG_OUTPUT_SCHEMA = {
    "properties": {
        "n_chars": {"default": 10000, "title": "N Chars", "type": "integer"},
        "fill": {"default": "x", "title": "Fill", "type": "string"},
    },
    "title": "BigInput",
    "type": "object",
}


def test_tool_spec_from_wire() -> None:
    """A tool converts from ``{"name", "description", "input_schema"}``; its repr lists the parameters sorted."""
    wire = {"name": "big_output", "description": "Return one large text block.", "input_schema": BIG_OUTPUT_SCHEMA}
    spec = ToolSpec.from_wire(wire)
    assert spec == ToolSpec("big_output", "Return one large text block.", BIG_OUTPUT_SCHEMA)
    assert repr(spec) == "ToolSpec('big_output', params=['fill', 'n_chars'])"


def test_tool_spec_without_schema() -> None:
    """A tool with a null input_schema and no description reads as no parameters and an empty description."""
    spec = ToolSpec.from_wire({"name": "crash", "input_schema": None})
    assert spec == ToolSpec("crash", "", None)
    assert repr(spec) == "ToolSpec('crash', params=[])"


@pytest.mark.parametrize("wire", [["crash"], {"description": "x"}, {"name": None}])
def test_bad_tool_spec_shapes(wire: object) -> None:
    """A tool that is not an object with a string name raises WireFormatError."""
    with pytest.raises(WireFormatError):
        ToolSpec.from_wire(wire)


def test_task_repr_is_short() -> None:
    """A task's repr shows the environment and its spec, cut at 80 chars."""
    assert repr(Task("gsm8k", {"id": "t0"})) == "Task('gsm8k', {'id': 't0'})"
    long = repr(Task("gsm8k", {"question": "q" * 200}))
    assert long.startswith("Task('gsm8k', {'question': 'qqq")
    assert long.endswith("...)")
    assert len(long) < 110


def test_task_from_wire() -> None:
    """Task converts from the wire like the other models (the models module docstring promises from_wire)."""
    assert callable(getattr(Task, "from_wire", None)), "Task has no from_wire"
