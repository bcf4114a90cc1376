"""The /call assembler: task_id, chunks, end or error, and every way a stream can go wrong."""

from __future__ import annotations

import json

import pytest

from ors_lab.protocol.call import MAX_RESULT_BYTES, CallAssembler
from ors_lab.protocol.errors import MalformedStreamError, ToolError, UnknownTaskError
from ors_lab.protocol.models import TextBlock, ToolResult, WireFormatError
from ors_lab.protocol.sse import ServerSentEvent, SSEComment, SSEDecoder, SSEItem

TASK_ID = "9511f5dd1f024cd9a28df3676d113b26"
CORRECT = (
    '{"ok":true,"output":{"blocks":[{"text":"Correct!","detail":null,"type":"text"}],'
    '"metadata":{"gold":"16","submitted":"16"},"reward":1.0,"finished":true}}'
)


def ev(name: str, data: str = "") -> ServerSentEvent:
    """An SSE event as the decoder hands it over."""
    return ServerSentEvent(event=name, data=data)


def assemble(items: list[SSEItem], task_id: str | None = None) -> tuple[CallAssembler, ToolResult | None]:
    """Feed every item; return the assembler and the result of the last feed."""
    assembler = CallAssembler(task_id)
    result = None
    for item in items:
        result = assembler.feed(item)
    return assembler, result


# The happy paths


def test_task_id_then_end() -> None:
    """task_id then end gives the result, tagged with the task_id, and completes the stream."""
    assembler = CallAssembler()
    assert assembler.feed(ev("task_id", TASK_ID)) is None
    assert assembler.task_id == TASK_ID
    assert assembler.seen_task_id
    assert assembler.dropped
    result = assembler.feed(ev("end", CORRECT))
    assert result == ToolResult(
        ok=True,
        blocks=(TextBlock("Correct!"),),
        reward=1.0,
        finished=True,
        metadata={"gold": "16", "submitted": "16"},
    )
    assert result.task_id == TASK_ID
    assert assembler.done
    assert not assembler.dropped


TRICKY = json.dumps(
    {
        "ok": True,
        "output": {
            "blocks": [{"text": 'a "quoted"\nline\\ é 😀      end', "detail": None, "type": "text"}],
            "metadata": None,
            "reward": None,
            "finished": False,
        },
    },
    separators=(",", ":"),
)


def test_chunks_reassembled_at_every_boundary() -> None:
    """A result split into chunk + end at any character, inside escapes or space runs, reassembles exactly."""
    expected = ToolResult.from_wire(json.loads(TRICKY))
    assert expected.text == 'a "quoted"\nline\\ é 😀      end'
    for cut in range(1, len(TRICKY)):
        _, result = assemble([ev("task_id", TASK_ID), ev("chunk", TRICKY[:cut]), ev("end", TRICKY[cut:])])
        assert result == expected, cut


def test_many_chunks_reassembled() -> None:
    """Several chunks and the end join in order, with no separator and nothing stripped."""
    parts = [TRICKY[i : i + 5] for i in range(0, len(TRICKY), 5)]
    assert any(part.startswith(" ") for part in parts)
    assert any(part.endswith("\\") for part in parts)  # a cut inside an escape
    items = [ev("task_id", TASK_ID), *(ev("chunk", part) for part in parts[:-1]), ev("end", parts[-1])]
    _, result = assemble(items)
    assert result == ToolResult.from_wire(json.loads(TRICKY))


def test_not_ok_end_is_a_result() -> None:
    """An ``ok:false`` end is a ToolResult with the error (no exception); no reason from ors-sdk."""
    _, result = assemble([ev("task_id", TASK_ID), ev("end", '{"ok":false,"error":"\'nope\' is not a valid tool"}')])
    assert result == ToolResult(ok=False, error="'nope' is not a valid tool")
    assert result.reason is None
    assert result.task_id == TASK_ID


def test_not_ok_end_keeps_openreward_reason() -> None:
    """openreward's extra ``reason`` on an ``ok:false`` end is kept."""
    payload = '{"ok":false,"error":"\'nope\' is not a valid tool","reason":"not_found"}'
    _, result = assemble([ev("task_id", TASK_ID), ev("end", payload)])
    assert result == ToolResult(ok=False, error="'nope' is not a valid tool", reason="not_found")


def test_repeated_identical_task_id_is_fine() -> None:
    """The same task_id sent again (as on a resumed stream) is accepted."""
    assembler, result = assemble([ev("task_id", TASK_ID), ev("task_id", TASK_ID), ev("end", CORRECT)])
    assert result is not None
    assert assembler.task_id == TASK_ID


def test_resume_with_matching_task_id_event() -> None:
    """A resumed assembler (task_id given) accepts the server's task_id event with the same id."""
    assembler, result = assemble([ev("task_id", TASK_ID), SSEComment(" ping"), ev("end", CORRECT)], TASK_ID)
    assert result is not None
    assert result.task_id == TASK_ID
    assert assembler.pings == 1


def test_pings_counted() -> None:
    """Comments (the keep-alive pings) are counted and do not disturb the result, even after the end."""
    items = [SSEComment(" ping - 1"), ev("task_id", TASK_ID), SSEComment(" ping - 2"), ev("chunk", CORRECT[:9])]
    assembler, _ = assemble(items)
    assert assembler.pings == 2
    assert assembler.feed(ev("end", CORRECT[9:])) is not None
    assert assembler.feed(SSEComment(" ping - 3")) is None
    assert assembler.pings == 3


def test_unknown_events_ignored_and_counted() -> None:
    """Events of unknown names (a newer server) are ignored, counted, and do not end the stream."""
    items = [ev("task_id", TASK_ID), ev("progress", "50%"), ev("message", "x"), ev("chunk", CORRECT[:20])]
    assembler, result = assemble(items)
    assert result is None
    assert assembler.ignored == 2
    assert assembler.feed(ev("end", CORRECT[20:])) is not None


# Terminal errors


def test_error_after_task_id_raises_tool_error() -> None:
    """``error`` after task_id raises ToolError with the server's message and the task_id."""
    assembler = CallAssembler()
    assembler.feed(ev("task_id", TASK_ID))
    with pytest.raises(ToolError) as caught:
        assembler.feed(ev("error", "boom: deliberate failure"))
    assert caught.value.message == "boom: deliberate failure"
    assert caught.value.task_id == TASK_ID
    assert assembler.done
    assert not assembler.dropped


def test_unknown_task_id_without_task_id_raises_unknown_task() -> None:
    """``error: unknown task_id`` with no task_id before it raises UnknownTaskError."""
    assembler = CallAssembler()
    with pytest.raises(UnknownTaskError):
        assembler.feed(ev("error", "unknown task_id"))
    assert assembler.done


def test_unknown_task_id_on_resume_raises_unknown_task() -> None:
    """A resume (assembler given the task_id) answered only by ``error: unknown task_id`` raises UnknownTaskError."""
    assembler = CallAssembler(task_id=TASK_ID)
    with pytest.raises(UnknownTaskError):
        assembler.feed(ev("error", "unknown task_id"))


def test_unknown_task_id_text_after_task_id_is_a_tool_error() -> None:
    """After a task_id event, an error reading ``unknown task_id`` is the tool's own failure."""
    assembler = CallAssembler()
    assembler.feed(ev("task_id", TASK_ID))
    with pytest.raises(ToolError) as caught:
        assembler.feed(ev("error", "unknown task_id"))
    assert not isinstance(caught.value, UnknownTaskError)


# Protocol violations


@pytest.mark.parametrize("name", ["chunk", "end"])
def test_chunk_or_end_before_task_id(name: str) -> None:
    """A chunk or end before any task_id raises MalformedStreamError."""
    with pytest.raises(MalformedStreamError, match="before task_id"):
        CallAssembler().feed(ev(name, CORRECT))


def test_invalid_json_at_end_gives_length() -> None:
    """A result that is not JSON raises MalformedStreamError whose message gives the payload length."""
    assembler = CallAssembler()
    assembler.feed(ev("task_id", TASK_ID))
    assembler.feed(ev("chunk", '{"ok"'))
    with pytest.raises(MalformedStreamError, match="7 chars") as caught:
        assembler.feed(ev("end", ":t"))
    assert caught.value.task_id == TASK_ID
    assert isinstance(caught.value.__cause__, ValueError)


def test_invalid_long_json_message_is_bounded() -> None:
    """For a long invalid result the message gives the length but shows only its two ends."""
    payload = '{"ok":true,"output":' + "x" * 10_000
    with pytest.raises(MalformedStreamError, match=f"{len(payload)} chars") as caught:
        assemble([ev("task_id", TASK_ID), ev("end", payload)])
    assert len(str(caught.value)) < 600


def test_valid_json_of_wrong_shape() -> None:
    """A JSON result that is not a RunToolOutput raises MalformedStreamError caused by WireFormatError."""
    with pytest.raises(MalformedStreamError) as caught:
        assemble([ev("task_id", TASK_ID), ev("end", '{"ok":"yes"}')])
    assert isinstance(caught.value.__cause__, WireFormatError)


def test_deeply_nested_result_is_malformed_not_a_recursion_error() -> None:
    """A result nested deeper than the JSON parser goes raises MalformedStreamError, not RecursionError."""
    with pytest.raises(MalformedStreamError, match="not a valid RunToolOutput"):
        assemble([ev("task_id", TASK_ID), ev("end", "[" * 100_000)])


def test_reward_too_big_for_a_float_is_malformed_not_an_overflow_error() -> None:
    """A reward of 400 digits (no float holds it) raises MalformedStreamError, not OverflowError."""
    with pytest.raises(MalformedStreamError, match="not a valid RunToolOutput"):
        assemble([ev("task_id", TASK_ID), ev("end", '{"ok":true,"output":{"reward":' + "9" * 400 + "}}")])


def test_task_id_changing_raises() -> None:
    """A second task_id event with a different id raises MalformedStreamError."""
    with pytest.raises(MalformedStreamError, match="task_id changed"):
        assemble([ev("task_id", TASK_ID), ev("task_id", "0" * 32)])


def test_task_id_differing_from_resumed_one_raises() -> None:
    """On a resume, a task_id event naming another task raises MalformedStreamError."""
    with pytest.raises(MalformedStreamError, match="task_id changed"):
        assemble([ev("task_id", "0" * 32)], task_id=TASK_ID)


def test_task_id_after_chunks_raises() -> None:
    """A task_id event after chunks have started raises MalformedStreamError."""
    with pytest.raises(MalformedStreamError, match="after chunks"):
        assemble([ev("task_id", TASK_ID), ev("chunk", "{"), ev("task_id", TASK_ID)])


def test_event_after_end_raises() -> None:
    """Any event after the terminal one raises MalformedStreamError."""
    assembler, _ = assemble([ev("task_id", TASK_ID), ev("end", CORRECT)])
    with pytest.raises(MalformedStreamError, match="after the end"):
        assembler.feed(ev("end", CORRECT))


# Dropped streams


def test_dropped_at_eof_without_terminal() -> None:
    """A stream that stops after task_id and a chunk is ``dropped``, with the task_id to resume with."""
    assembler, result = assemble([ev("task_id", TASK_ID), ev("chunk", CORRECT[:10])])
    assert result is None
    assert assembler.dropped
    assert assembler.seen_task_id
    assert assembler.task_id == TASK_ID


def test_dropped_before_task_id() -> None:
    """A stream that stops before task_id is ``dropped`` with no task_id (the outcome is unknown)."""
    assembler, _ = assemble([SSEComment(" ping")])
    assert assembler.dropped
    assert not assembler.seen_task_id


# The result bound: max_result_bytes


def test_default_result_limit_is_256_mib() -> None:
    """The default result bound is 256 MiB."""
    assert MAX_RESULT_BYTES == 256 * 1024 * 1024
    assert CallAssembler().max_result_bytes == MAX_RESULT_BYTES


def test_result_of_exactly_the_limit_passes() -> None:
    """A result whose JSON is exactly max_result_bytes long, in chunks, is assembled."""
    parts = [TRICKY[i : i + 7] for i in range(0, len(TRICKY), 7)]
    items = [ev("task_id", TASK_ID), *(ev("chunk", part) for part in parts[:-1]), ev("end", parts[-1])]
    _, result = assemble_bounded(items, len(TRICKY.encode()))
    assert result == ToolResult.from_wire(json.loads(TRICKY))


def test_result_one_byte_over_the_limit_raises() -> None:
    """One UTF-8 byte over max_result_bytes (counted in bytes, not characters) is a MalformedStreamError."""
    result = json.dumps(json.loads(TRICKY), separators=(",", ":"), ensure_ascii=False)
    limit = len(result.encode()) - 1
    assert len(result) <= limit  # in characters it would fit: the non-ASCII text makes it too big
    assert assemble_bounded([ev("task_id", TASK_ID), ev("end", result)], limit + 1)[1] is not None
    for cut in (1, len(result) // 2, len(result) - 1):
        items = [ev("task_id", TASK_ID), ev("chunk", result[:cut]), ev("end", result[cut:])]
        with pytest.raises(MalformedStreamError, match="max_result_bytes") as caught:
            assemble_bounded(items, limit)
        assert caught.value.task_id == TASK_ID


def test_endless_chunks_raise_once_the_limit_is_crossed() -> None:
    """An endless chunk stream raises as soon as the chunks pass the limit, and drops what it held."""
    assembler = CallAssembler(max_result_bytes=10_000)
    assembler.feed(ev("task_id", TASK_ID))
    fed = 0
    with pytest.raises(MalformedStreamError, match="10000 bytes"):
        while fed < 1_000_000:
            assembler.feed(ev("chunk", "x" * 1000))
            fed += 1000
    assert fed <= 10_000
    assert assembler.done
    assert assembler._parts == []
    with pytest.raises(MalformedStreamError):
        assembler.feed(ev("chunk", "x"))  # nothing more is taken after the error


def test_result_limit_must_be_positive() -> None:
    """A limit below 1 is a ValueError naming the option."""
    with pytest.raises(ValueError, match="max_result_bytes"):
        CallAssembler(max_result_bytes=0)


def assemble_bounded(items: list[SSEItem], limit: int) -> tuple[CallAssembler, ToolResult | None]:
    """Feed every item to an assembler bounded at ``limit`` bytes."""
    assembler = CallAssembler(max_result_bytes=limit)
    result = None
    for item in items:
        result = assembler.feed(item)
    return assembler, result


# The real captures


def run(body: bytes) -> tuple[CallAssembler, list[ServerSentEvent], ToolResult | Exception | None]:
    """Decode and assemble a captured body; return the assembler, its events and the outcome."""
    items = SSEDecoder().feed(body)
    events = [item for item in items if isinstance(item, ServerSentEvent)]
    assembler = CallAssembler()
    outcome: ToolResult | Exception | None = None
    try:
        for item in items:
            outcome = assembler.feed(item) or outcome
    except (ToolError, UnknownTaskError) as exc:
        outcome = exc
    return assembler, events, outcome


# What each /call capture ends in: "ok", "not ok", an exception class name, or "dropped".
TERMINALS = {
    "34a_secret_keys_body": "ok",
    "34b_secret_keys_header": "ok",
    "45_call_slow_12s_pings": "ok",
    "50_call_submit_correct": "ok",
    "51_call_after_finished": {"ors-sdk": "ok", "openreward": "not ok"},  # openreward's episode latch
    "52_call_submit_wrong": "ok",
    "53_call_big_10000": "ok",
    "53b_call_big_spaces": "ok",
    "54_call_big_3900": "ok",
    "55a_call_json_exactly_4096": "ok",
    "55b_call_json_4097": "ok",
    "56_call_image": "ok",
    "57_call_unknown_tool": "not ok",
    "58_call_bad_tool_input": "not ok",
    "59_call_missing_required_input": "not ok",
    "60_call_crash": "ToolError",
    "60b_call_after_crash": "ok",
    "62a_reconnect_midstream_first": "dropped",
    "62b_reconnect_midstream_resume": "ok",
    "64_call_no_accept_header": "ok",
    "65a_reconnect_expiry_first": "ok",
    "65b_reconnect_after_30s": "ok",
    "65c_reconnect_after_65s": "UnknownTaskError",
    "67_call_default_env_redirect_follow": "ok",
    "68_call_other_env_path": "ok",
    "69_call_echo_env": "ok",
    "70_reconnect_after_completion": "ok",
    "71_reconnect_again": "ok",
    "72_reconnect_other_name_input": "ok",
    "73_reconnect_unknown_task_id": "UnknownTaskError",
    "75_reconnect_to_crashed_task": "ToolError",
    "79a_call_slow_blocking_12s": "ok",
    "80_concurrent_other_tool": "ok",
    "80_concurrent_same_tool_1": "ok",
    "80_concurrent_same_tool_2": "ok",
    "96_call_sync_accept_json": "ok",
}


def test_every_call_capture_reaches_its_terminal(call_capture) -> None:
    """Every captured /call stream ends as recorded: a result (ok or not), ToolError, UnknownTaskError or a drop."""
    expected = TERMINALS.get(call_capture.name)
    assert expected is not None, f"{call_capture} is not in TERMINALS: add what it should end in"
    if isinstance(expected, dict):
        expected = expected[call_capture.server]
    assembler, _, outcome = run(call_capture.body)
    if isinstance(outcome, ToolResult):
        got = "ok" if outcome.ok else "not ok"
        assert outcome.task_id == assembler.task_id
    elif isinstance(outcome, Exception):
        got = type(outcome).__name__
    else:
        got = "dropped" if assembler.dropped else "nothing"
    assert got == expected
    assert assembler.ignored == 0


@pytest.mark.parametrize("server", ["ors-sdk", "openreward"])
def test_capture_50_correct_submit(capture, server: str) -> None:
    """50: the correct answer gives reward 1.0 and finished true."""
    _, events, result = run(capture(server, "50_call_submit_correct").body)
    assert isinstance(result, ToolResult)
    assert (result.ok, result.reward, result.finished, result.text) == (True, 1.0, True, "Correct!")
    assert result.task_id == events[0].data


@pytest.mark.parametrize(("server", "reason"), [("ors-sdk", None), ("openreward", "not_found")])
def test_capture_57_unknown_tool(capture, server: str, reason: str | None) -> None:
    """57: an unknown tool is an ``ok:false`` result (openreward adds reason ``not_found``)."""
    _, _, result = run(capture(server, "57_call_unknown_tool").body)
    assert result == ToolResult(ok=False, error="'nope' is not a valid tool", reason=reason)


@pytest.mark.parametrize("server", ["ors-sdk", "openreward"])
def test_capture_60_crash(capture, server: str) -> None:
    """60: a tool that raised gives ToolError 'boom: deliberate failure' with the stream's task_id."""
    _, events, error = run(capture(server, "60_call_crash").body)
    assert isinstance(error, ToolError)
    assert error.message == "boom: deliberate failure"
    assert error.task_id == events[0].data


@pytest.mark.parametrize("server", ["ors-sdk", "openreward"])
def test_capture_73_unknown_task_id(capture, server: str) -> None:
    """73: a made-up task_id is answered with UnknownTaskError and no task_id event."""
    assembler, events, error = run(capture(server, "73_reconnect_unknown_task_id").body)
    assert isinstance(error, UnknownTaskError)
    assert [e.event for e in events] == ["error"]
    assert not assembler.seen_task_id


@pytest.mark.parametrize("server", ["ors-sdk", "openreward"])
def test_capture_73_unknown_task_id_on_resume(capture, server: str) -> None:
    """73 fed to an assembler resuming that task_id (how a client resumes) raises UnknownTaskError."""
    with pytest.raises(UnknownTaskError):
        assemble(SSEDecoder().feed(capture(server, "73_reconnect_unknown_task_id").body), TASK_ID)


@pytest.mark.parametrize("server", ["ors-sdk", "openreward"])
def test_capture_55a_exactly_4096_is_a_single_end(capture, server: str) -> None:
    """55a: a result of exactly 4096 chars arrives as one end event, no chunk, and decodes."""
    _, events, result = run(capture(server, "55a_call_json_exactly_4096").body)
    assert [(e.event, len(e.data)) for e in events[1:]] == [("end", 4096)]
    assert isinstance(result, ToolResult)
    assert result.ok


@pytest.mark.parametrize("server", ["ors-sdk", "openreward"])
def test_capture_55b_4097_is_chunk_then_one_char_end(capture, server: str) -> None:
    """55b: a result of 4097 chars arrives as a 4096-char chunk and a 1-char end, and decodes."""
    _, events, result = run(capture(server, "55b_call_json_4097").body)
    assert [(e.event, len(e.data)) for e in events[1:]] == [("chunk", 4096), ("end", 1)]
    assert isinstance(result, ToolResult)
    assert result.ok


@pytest.mark.parametrize("server", ["ors-sdk", "openreward"])
def test_capture_45_ping_counted(capture, server: str) -> None:
    """45: the keep-alive ping of a 12 s tool is counted and the result still arrives."""
    assembler, _, result = run(capture(server, "45_call_slow_12s_pings").body)
    assert assembler.pings == 1
    assert isinstance(result, ToolResult)
