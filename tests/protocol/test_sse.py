"""The SSE decoder: line ends, field parsing, comments, BOM, UTF-8 and byte streams split anywhere."""

from __future__ import annotations

import pytest

from ors_lab.protocol.call import CallAssembler
from ors_lab.protocol.errors import MalformedStreamError
from ors_lab.protocol.sse import MAX_LINE_BYTES, ServerSentEvent, SSEComment, SSEDecoder, SSEItem

PING = " ping - 2026-11-29 23:36:49.633846+00:00"


def decode(*chunks: bytes) -> list[SSEItem]:
    """Feed the chunks to one decoder, in order; return every item it produced."""
    decoder = SSEDecoder()
    items: list[SSEItem] = []
    for chunk in chunks:
        items.extend(decoder.feed(chunk))
    return items


def pieces(data: bytes, size: int) -> list[bytes]:
    """``data`` cut into pieces of ``size`` bytes (the last one shorter)."""
    return [data[i : i + size] for i in range(0, len(data), size)]


def event(data: str, name: str = "message", id: str = "", retry: int | None = None) -> ServerSentEvent:
    """The event the decoder should produce."""
    return ServerSentEvent(event=name, data=data, id=id, retry=retry)


# Line ends


@pytest.mark.parametrize("eol", [b"\r\n", b"\n", b"\r"], ids=["CRLF", "LF", "CR"])
def test_each_line_end(eol: bytes) -> None:
    """CRLF, LF and CR each end a line, and a blank line ends an event."""
    stream = b"event: task_id" + eol + b"data: abc" + eol + eol + b"event: end" + eol + b"data: {}" + eol + eol
    assert decode(stream) == [event("abc", "task_id"), event("{}", "end")]


def test_mixed_line_ends_in_one_stream() -> None:
    """CR, LF and CRLF mixed in one stream each end exactly one line."""
    stream = b"data: a\r\ndata: b\ndata: c\r\r\nevent: e\rdata: d\n\n"
    assert decode(stream) == [event("a\nb\nc"), event("d", "e")]


def test_crlf_split_across_feeds_is_one_line_end() -> None:
    """A CR ending one feed and an LF starting the next are one line end, not a blank line."""
    assert decode(b"data: a\r", b"\ndata: b\r\n\r\n") == [event("a\nb")]


def test_crlf_split_at_event_end_dispatches_once() -> None:
    """An event's closing CRLF split across feeds dispatches it once, with nothing spurious after."""
    assert decode(b"data: a\r\n\r", b"\n", b"data: b\r", b"\n\r", b"\n") == [event("a"), event("b")]


def test_cr_at_feed_end_then_other_byte_still_ends_the_line() -> None:
    """A CR at the end of a feed ends its line even when the next feed does not start with LF."""
    assert decode(b"data: a\r", b"\r") == [event("a")]


def test_empty_feed_between_cr_and_lf_changes_nothing() -> None:
    """An empty feed between the CR and LF of a CRLF does not turn the LF into a blank line."""
    assert decode(b"data: a\r", b"", b"\ndata: b\r\n\r\n") == [event("a\nb")]


# Fields


def test_exactly_one_space_after_colon_is_stripped() -> None:
    """One space after the colon is stripped; further spaces are data, and no space strips nothing."""
    stream = b"data:  x\n\ndata:x\n\ndata: x \n\ndata:\n\n"
    assert decode(stream) == [event(" x"), event("x"), event("x "), event("")]


def test_field_without_colon_has_empty_value() -> None:
    """A line with no colon is a field whose value is empty (``data`` adds an empty line)."""
    assert decode(b"data\n\ndata\ndata\n\nevent\ndata: x\n\n") == [event(""), event("\n"), event("x")]


def test_unknown_field_is_ignored() -> None:
    """A field name the spec does not define is ignored."""
    assert decode(b"foo: bar\ndata: x\nDATA: y\n\n") == [event("x")]


def test_multiline_data_joined_with_newline() -> None:
    """Several data lines in one event join with a single newline, with no trailing newline."""
    assert decode(b"data: line one\ndata: line two\ndata: \n\n") == [event("line one\nline two\n")]


def test_id_persists_across_events() -> None:
    """The last id applies to every later event until another id line changes it."""
    stream = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\nid\ndata: d\n\n"
    assert decode(stream) == [event("a", id="1"), event("b", id="1"), event("c", id="2"), event("d")]


def test_id_containing_nul_is_ignored() -> None:
    """An id value containing NUL is ignored and the previous id stays."""
    assert decode(b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n") == [event("a", id="1"), event("b", id="1")]


def test_retry_digits_kept_others_ignored() -> None:
    """``retry`` of ASCII digits is kept as an int; anything else (sign, dot, letters, other digits) is ignored."""
    stream = (
        b"retry: 3000\ndata: a\n\n"
        b"retry: 30x\ndata: b\n\n"
        b"retry: -1\ndata: c\n\n"
        b"retry: 1.5\ndata: d\n\n"
        + "retry: \uff13\ndata: e\n\n".encode()  # a fullwidth digit: str.isdigit() but not ASCII
        + b"retry:\ndata: f\n\n"
    )
    assert decode(stream) == [event("a", retry=3000)] + [event(d) for d in "bcdef"]


def test_event_without_data_is_not_dispatched() -> None:
    """An event with no data line is dropped, and its event name does not leak into the next event."""
    assert decode(b"event: end\n\nid: 5\n\nevent: x\n\ndata: y\n\n") == [event("y", id="5")]


def test_default_event_name_is_message() -> None:
    """An event with no ``event`` line, or an empty one, is named ``message``."""
    assert decode(b"data: a\n\nevent:\ndata: b\n\n") == [event("a"), event("b")]


# Comments


def test_ping_comment_surfaces_in_order() -> None:
    """A ``: ping`` comment comes out as SSEComment with the text after the colon, between the events."""
    stream = (
        b"event: task_id\r\ndata: abc\r\n\r\n"
        b": ping - 2026-11-29 23:36:49.633846+00:00\r\n\r\n"
        b'event: end\r\ndata: {"ok":true}\r\n\r\n'
    )
    assert decode(stream) == [event("abc", "task_id"), SSEComment(PING), event('{"ok":true}', "end")]


def test_comment_inside_event_does_not_interrupt_it() -> None:
    """A comment between the lines of an event comes out first and leaves the event whole."""
    assert decode(b"event: e\n:\n: x:y\ndata: z\n\n") == [SSEComment(""), SSEComment(" x:y"), event("z", "e")]


# BOM and UTF-8


def test_leading_bom_dropped() -> None:
    """A UTF-8 BOM at the very start of the stream is dropped."""
    assert decode(b"\xef\xbb\xbfdata: x\n\n") == [event("x")]


def test_leading_bom_split_across_feeds_dropped() -> None:
    """A leading BOM whose bytes arrive in separate feeds is still dropped."""
    assert decode(b"\xef", b"\xbb", b"\xbfdata: x\n\n") == [event("x")]


def test_bom_after_stream_start_is_kept() -> None:
    """Only one BOM, only at stream start, is dropped: later BOMs stay part of the line."""
    assert decode(b"data: a\n\n\xef\xbb\xbfdata: b\n\n") == [event("a")]  # field "\ufeffdata" is unknown
    assert decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: c\n\n") == []
    assert decode(b"data: \xef\xbb\xbfd\n\n") == [event("\ufeffd")]


@pytest.mark.parametrize("text", ["é", "€", "😀", "café € 😀"])
def test_utf8_character_split_across_feeds(text: str) -> None:
    """A multi-byte UTF-8 character split between feeds at any byte decodes whole."""
    stream = f"data: {text}\r\n\r\n".encode()
    for cut in range(1, len(stream)):
        assert decode(stream[:cut], stream[cut:]) == [event(text)], cut
    assert decode(*pieces(stream, 1)) == [event(text)]


# pending


def test_pending_after_truncated_event() -> None:
    """``pending`` is true while an event is cut off (fields or bytes buffered) and false once it ends."""
    decoder = SSEDecoder()
    assert not decoder.pending
    assert decoder.feed(b'event: end\r\ndata: {"ok"') == []
    assert decoder.pending  # an unfinished line is buffered
    assert decoder.feed(b":true}\r\n") == []
    assert decoder.pending  # the fields are complete but the event is not
    assert decoder.feed(b"\r\n") == [event('{"ok":true}', "end")]
    assert not decoder.pending


def test_pending_false_after_comment_only() -> None:
    """A complete comment leaves nothing pending."""
    decoder = SSEDecoder()
    assert decoder.feed(b": ping\r\n\r\n") == [SSEComment(" ping")]
    assert not decoder.pending


# Split anywhere

AWKWARD = (
    b"\xef\xbb\xbf: hi\r\n"
    b"event: task_id\r\ndata: abc\r\n\r\n"
    b"id: 7\rdata: caf\xc3\xa9 \xe2\x82\xac\r\r"
    b"data:  two\ndata:x\n\n"
    b": ping\r\n\r\n"
    b'retry: 10\nevent: end\r\ndata: {"ok":true}\r\n\r\n'
)
AWKWARD_ITEMS = [
    SSEComment(" hi"),
    event("abc", "task_id"),
    event("café €", id="7"),
    event(" two\nx", id="7"),
    SSEComment(" ping"),
    event('{"ok":true}', "end", id="7", retry=10),
]


def test_awkward_stream_in_one_feed() -> None:
    """The reference stream (BOM, all line ends, comments, UTF-8, spaces) decodes as expected in one feed."""
    assert decode(AWKWARD) == AWKWARD_ITEMS


def test_awkward_stream_split_at_every_pair_of_points() -> None:
    """Cutting the reference stream into three non-empty pieces, at every pair of points, changes nothing."""
    size = len(AWKWARD)
    for i in range(1, size - 1):
        for j in range(i + 1, size):
            assert decode(AWKWARD[:i], AWKWARD[i:j], AWKWARD[j:]) == AWKWARD_ITEMS, (i, j)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_awkward_stream_in_fixed_pieces(size: int) -> None:
    """Feeding the reference stream in pieces of a few bytes changes nothing."""
    assert decode(*pieces(AWKWARD, size)) == AWKWARD_ITEMS


# Real captures


def test_capture_same_items_however_split(sse_capture) -> None:
    """A captured SSE body decodes to the same items fed whole, in 7-byte pieces and byte by byte."""
    decoder = SSEDecoder()
    whole = decoder.feed(sse_capture.body)
    assert whole
    assert not decoder.pending
    assert decode(*pieces(sse_capture.body, 7)) == whole
    assert decode(*pieces(sse_capture.body, 1)) == whole


@pytest.mark.parametrize("server", ["ors-sdk", "openreward"])
def test_big_spaces_result_keeps_every_space(capture, server: str) -> None:
    """53b: 10,000 chars of spaces in 4096-char chunks decode to a 10,000-char text (official clients: 9,890)."""
    items = decode(*pieces(capture(server, "53b_call_big_spaces").body, 7))
    events = [item for item in items if isinstance(item, ServerSentEvent)]
    assert [(e.event, len(e.data)) for e in events[1:]] == [("chunk", 4096), ("chunk", 4096), ("end", 2028)]
    assert events[2].data.startswith("  ")  # this chunk starts inside a run of spaces: all are kept
    assembler = CallAssembler()
    results = [assembler.feed(item) for item in items]
    result = results[-1]
    assert result is not None
    assert len(result.text) == 10_000
    assert set(result.text) == {"é", " ", "\n"}


# Bounds: a line, or the data of one event, longer than max_line_bytes is a MalformedStreamError


def test_default_line_limit_is_16_mib() -> None:
    """The default line bound is 16 MiB: a thousand times the 4096-character chunks ORS servers send."""
    assert MAX_LINE_BYTES == 16 * 1024 * 1024
    assert SSEDecoder().max_line_bytes == MAX_LINE_BYTES


@pytest.mark.parametrize("eol", [b"\r\n", b"\n", b"\r"], ids=["CRLF", "LF", "CR"])
def test_line_of_exactly_the_limit_passes(eol: bytes) -> None:
    """A line of exactly max_line_bytes (its end not counted) decodes, whole or byte by byte."""
    line = b"data: " + b"x" * 94
    stream = line + eol + eol
    assert len(line) == 100
    for chunks in ([stream], pieces(stream, 1), pieces(stream, 7)):
        decoder = SSEDecoder(max_line_bytes=100)
        items = [item for chunk in chunks for item in decoder.feed(chunk)]
        assert items == [event("x" * 94)]


@pytest.mark.parametrize("size", [1, 7, 100, 1000])
def test_line_over_the_limit_raises_however_split(size: int) -> None:
    """A line one byte over max_line_bytes raises MalformedStreamError, whether it is complete or not."""
    for stream in (b"data: " + b"x" * 95 + b"\n\n", b"data: " + b"x" * 95):
        decoder = SSEDecoder(max_line_bytes=100)
        with pytest.raises(MalformedStreamError, match="max_line_bytes"):
            for chunk in pieces(stream, size):
                decoder.feed(chunk)


def test_comment_and_unknown_field_lines_are_bounded_too() -> None:
    """Every kind of line is bounded, not only data lines."""
    for line in (b":" + b"c" * 100, b"x" * 101, b"event: " + b"e" * 94):
        with pytest.raises(MalformedStreamError, match="max_line_bytes"):
            SSEDecoder(max_line_bytes=100).feed(line + b"\n")


def test_endless_line_buffers_at_most_the_limit() -> None:
    """A line that never ends raises once the limit is crossed; the decoder never held more than the limit."""
    decoder = SSEDecoder(max_line_bytes=10_000)
    decoder.feed(b"event: chunk\ndata: ")
    fed = 0
    with pytest.raises(MalformedStreamError, match="10000 bytes"):
        while fed < 1_000_000:
            decoder.feed(b"x" * 1000)
            fed += 1000
            assert decoder.buffered <= 10_000
    assert fed <= 10_000


def test_event_data_lines_together_are_bounded() -> None:
    """Data lines without a blank line between them join into one event: their total is bounded too."""
    decoder = SSEDecoder(max_line_bytes=100)
    assert decoder.feed(b"data: " + b"x" * 60 + b"\n") == []
    with pytest.raises(MalformedStreamError, match="event"):
        for _ in range(100):
            decoder.feed(b"data: " + b"x" * 60 + b"\n")


def test_event_data_at_the_limit_passes() -> None:
    """Data lines joining to exactly max_line_bytes (with their newlines) make one event."""
    decoder = SSEDecoder(max_line_bytes=100)
    assert decoder.feed(b"data: " + b"a" * 49 + b"\ndata: " + b"b" * 50 + b"\n\n") == [
        event("a" * 49 + "\n" + "b" * 50)
    ]


def test_limit_resets_after_each_line_and_event() -> None:
    """Many lines and events, each under the limit, never add up to an error."""
    decoder = SSEDecoder(max_line_bytes=100)
    stream = (b"event: chunk\ndata: " + b"x" * 90 + b"\n\n") * 1000
    assert len(decoder.feed(stream)) == 1000
    for chunk in pieces(stream, 33):
        decoder.feed(chunk)


def test_line_limit_must_be_positive() -> None:
    """A limit below 1 is a ValueError naming the option."""
    with pytest.raises(ValueError, match="max_line_bytes"):
        SSEDecoder(max_line_bytes=0)


@pytest.mark.parametrize("digits", [19, 20, 5000])
def test_retry_too_long_for_the_trace_is_ignored(digits: int) -> None:
    """A retry of 19 digits or more is ignored (it may not fit the trace's int64; 5000 digits broke int())."""
    assert decode(b"retry: " + b"9" * digits + b"\ndata: x\n\n") == [event("x")]
    assert decode(b"retry: " + b"9" * 18 + b"\ndata: x\n\n") == [event("x", retry=10**18 - 1)]


def test_trickled_line_costs_its_bytes_not_a_python_object_per_byte() -> None:
    """A line sent one byte at a time is held in about its own size (bounded by the limit), not 40x that."""
    import tracemalloc

    limit = 100_000
    decoder = SSEDecoder(max_line_bytes=limit)
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        with pytest.raises(MalformedStreamError):
            for _ in range(limit + 1):
                decoder.feed(b"x")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - start < 3 * limit
