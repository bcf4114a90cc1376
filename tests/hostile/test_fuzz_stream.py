"""Property-based fuzzing of the SSE decoder and the /call assembler (Hypothesis).

Any bytes, cut anywhere, give a result, a typed error (an ``ORSError``) or nothing yet: never another
exception, and the decoder never holds more than its line bound. Well-formed ORS ``/call`` streams
(``task_id``, pings and comments, ``chunk``* and ``end``; CRLF, LF and CR line ends; a BOM; any
network cuts) give exactly the result their JSON says, however they are cut, or the typed error
their size calls for. Each defect the fuzzing found is pinned by an ``@example``.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ors_lab.client.tap import BodyReader
from ors_lab.protocol.call import MAX_RESULT_BYTES, CallAssembler
from ors_lab.protocol.errors import MalformedStreamError, ORSError
from ors_lab.protocol.models import ToolResult
from ors_lab.protocol.sse import MAX_LINE_BYTES, ServerSentEvent, SSEComment, SSEDecoder, SSEItem

FUZZ = settings(
    database=None,
    deadline=None,
    max_examples=400,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
WELL_FORMED = settings(FUZZ, max_examples=200)  # each example is a whole stream: fewer, for the time budget
TASK_ID = "0123456789abcdef0123456789abcdef"

# Arbitrary streams: fragments that mean something to SSE and ORS, and bytes that mean nothing.
TOKENS = [
    b"event:",
    b"event: ",
    b"data:",
    b"data: ",
    b"id: ",
    b"retry: ",
    b":",
    b" ",
    b"\r",
    b"\n",
    b"\r\n",
    b"\r\n\r\n",
    b"task_id",
    b"chunk",
    b"end",
    b"error",
    b"unknown task_id",
    TASK_ID.encode(),
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xc3",
    b"\x00",
    b'{"ok":true,"output":{"blocks":[{"text":"hi","type":"text"}],"reward":1.0,"finished":true}}',
    b'{"ok":false,"error":"no"}',
    b'{"ok":true,"output":{"reward":',
    b"}}",
    b"[",
    b"1e999",
]
fragments = st.one_of(
    st.sampled_from(TOKENS),
    st.binary(max_size=12),
    st.integers(1, 1500).map(lambda n: b"[" * n),  # deep nesting for the JSON parser
    st.integers(1, 5000).map(lambda n: b"9" * n),  # long numbers: retry values, rewards
)
soups = st.lists(fragments, max_size=40).map(b"".join)
texts = st.characters(codec="utf-8")  # what a server can send raw in UTF-8: no lone surrogates
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(texts, max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(texts, max_size=8), inner, max_size=4),
    max_leaves=12,
)
payload_texts = st.one_of(
    st.text(max_size=40),
    st.integers(1, 3000).map(lambda n: "[" * n),  # nested deeper than a recursive parser goes
    st.builds(  # numbers too long for int() or too big for a float, where the result has numbers
        lambda key, n: '{"ok":true,"output":{"%s":%s}}' % (key, "9" * n),  # noqa: UP031
        st.sampled_from(["reward", "metadata", "finished"]),
        st.integers(1, 5000),
    ),
    json_values.map(lambda value: json.dumps(value, allow_nan=True)),
    st.builds(
        lambda ok, value, key: json.dumps({"ok": ok, key: value}),
        st.booleans(),
        json_values,
        st.sampled_from(["output", "error", "reason"]),
    ),
    st.builds(
        lambda reward, blocks, finished: json.dumps(
            {"ok": True, "output": {"blocks": blocks, "reward": reward, "finished": finished}}
        ),
        json_values,
        json_values,
        json_values,
    ),
)


@st.composite
def event_streams(draw: st.DrawFn) -> bytes:
    """Events of ORS and other names with hostile payloads and fields, rendered as SSE, with noise put in."""
    rnd = draw(st.randoms(use_true_random=False))
    out = []
    for index in range(draw(st.integers(0, 6))):
        if index == 0 and rnd.random() < 0.7:
            name = "task_id"  # most streams start as ORS ones do, so the payloads reach the assembler
        else:
            name = draw(st.sampled_from(["task_id", "chunk", "end", "error", "message", "other", ""]))
        data = TASK_ID if name == "task_id" and rnd.random() < 0.7 else draw(payload_texts)
        lines = [f"event: {name}", *(f"data: {part}" for part in data.splitlines() or [""])]
        if rnd.random() < 0.2:
            lines.append(f"retry: {'9' * draw(st.integers(1, 5000))}")
        if rnd.random() < 0.2:
            lines.append("id: " + rnd.choice(["1", "a", "x\0y"]))
        eol = rnd.choice(["\r\n", "\n", "\r"])
        out.append(eol.join([*lines, "", ""]).encode("utf-8", "surrogatepass"))
    body = b"".join(out)
    for noise in draw(st.lists(fragments, max_size=3)):  # noise at random places
        at = rnd.randint(0, len(body))
        body = body[:at] + noise + body[at:]
    return body


raw_streams = st.one_of(soups, event_streams())
line_bounds = st.sampled_from([1, 8, 64, 4096, MAX_LINE_BYTES])
result_bounds = st.sampled_from([1, 16, 256, 8192, MAX_RESULT_BYTES])


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` cut at ``points`` (any order, repeats and ends allowed: empty pieces are fed too)."""
    bounds = [0, *sorted(p % (len(data) + 1) for p in points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@dataclass
class Outcome:
    """What feeding a stream gave: the items (or result), then the typed error that stopped it, if any."""

    items: list[SSEItem]
    error: type[ORSError] | None


def decode_all(pieces: list[bytes], max_line_bytes: int) -> Outcome:
    """Feed the pieces to one decoder, then an empty feed (which raises an error held back); check the bound."""
    decoder = SSEDecoder(max_line_bytes)
    items: list[SSEItem] = []
    try:
        for piece in [*pieces, b""]:
            items.extend(decoder.feed(piece))
            assert decoder.buffered <= max_line_bytes
    except ORSError as exc:
        return Outcome(items, type(exc))
    return Outcome(items, None)


def read_all(pieces: list[bytes], reader: BodyReader) -> tuple[ToolResult | None, ORSError | None]:
    """Feed the pieces to a BodyReader until the result, a typed error or the end of the bytes."""
    result = None
    try:
        for piece in pieces:
            got = reader.feed(piece)
            assert reader.decoder.buffered <= reader.decoder.max_line_bytes
            if got is not None:
                assert result is None, "a second result"
                assert isinstance(got, ToolResult)
                result = got
    except ORSError as exc:
        return result, exc
    return result, None


# Any bytes


@FUZZ
@given(raw_streams, st.lists(st.integers(0, 10_000), max_size=8), line_bounds, result_bounds, st.booleans())
@example(
    b"event: task_id\ndata: x\n\nevent: end\ndata: " + b"[" * 100_000 + b"\n\n",
    [],
    MAX_LINE_BYTES,
    MAX_RESULT_BYTES,
    False,
)
@example(b"event: task_id\ndata: x\n\nevent: end\ndata: {\"ok\":true,\"output\":{\"reward\":" + b"9" * 400 + b"}}\n\n",
         [], MAX_LINE_BYTES, MAX_RESULT_BYTES, False)  # fmt: skip
@example(b"retry: " + b"9" * 5000 + b"\ndata: x\n\n", [], MAX_LINE_BYTES, MAX_RESULT_BYTES, False)
def test_any_bytes_give_a_result_a_typed_error_or_nothing(
    data: bytes, points: list[int], max_line_bytes: int, max_result_bytes: int, resume: bool
) -> None:
    """Any bytes, cut anywhere, through the /call reader: a ToolResult, an ORSError, or nothing yet."""
    assembler = CallAssembler(TASK_ID if resume else None, max_result_bytes=max_result_bytes)
    reader = BodyReader(None, assembler, max_line_bytes=max_line_bytes)
    result, _ = read_all(cut(data, points), reader)
    assert result is None or result.task_id == assembler.task_id


@FUZZ
@given(raw_streams, st.lists(st.integers(0, 10_000), max_size=8), line_bounds)
@example(b"retry: " + b"9" * 5000 + b"\ndata: x\n\n", [], MAX_LINE_BYTES)
@example(b"retry: 99999999999999999999\ndata: x\n\n", [], MAX_LINE_BYTES)
def test_any_bytes_decode_the_same_however_cut(data: bytes, points: list[int], max_line_bytes: int) -> None:
    """The decoder gives the same items, and the same error after them, fed whole or cut anywhere."""
    whole = decode_all([data], max_line_bytes)
    assert decode_all(cut(data, points), max_line_bytes) == whole
    if len(data) <= 4096:
        assert decode_all(cut(data, list(range(len(data)))), max_line_bytes) == whole  # byte by byte
    for item in whole.items:
        if isinstance(item, ServerSentEvent) and item.retry is not None:
            assert 0 <= item.retry < 2**63  # it fits the trace's int64 column


# Any items, to the assembler alone

assembler_items = st.one_of(
    st.builds(SSEComment, st.text(max_size=10)),
    st.builds(
        lambda name, data: ServerSentEvent(event=name, data=data),
        st.sampled_from(["task_id", "chunk", "end", "error", "message", "other"]),
        st.one_of(payload_texts, st.just(TASK_ID), st.just("unknown task_id")),
    ),
)


ordered_items = st.builds(  # task_id, the payload in chunks, end: hostile payloads reach the JSON parser
    lambda payload, size: [
        ServerSentEvent(event="task_id", data=TASK_ID),
        *(ServerSentEvent(event="chunk", data=payload[i : i + size]) for i in range(0, len(payload) - 1, size)),
        ServerSentEvent(event="end", data=payload[-1:]),
    ],
    payload_texts,
    st.integers(1, 4096),
)


@FUZZ
@given(st.lists(assembler_items, max_size=12) | ordered_items, st.one_of(st.none(), st.just(TASK_ID)), result_bounds)
@example([ServerSentEvent(event="task_id", data="t"), ServerSentEvent(event="end", data="[" * 100_000)], None,
         MAX_RESULT_BYTES)  # fmt: skip
@example([ServerSentEvent(event="task_id", data="t"),
          ServerSentEvent(event="end", data='{"ok":true,"output":{"reward":' + "9" * 400 + "}}")], None,
         MAX_RESULT_BYTES)  # fmt: skip
def test_any_items_give_a_result_a_typed_error_or_nothing(
    items: list[SSEItem], task_id: str | None, max_result_bytes: int
) -> None:
    """Any sequence of events and comments: the assembler returns a ToolResult, raises an ORSError, or waits."""
    assembler = CallAssembler(task_id, max_result_bytes=max_result_bytes)
    try:
        for item in items:
            result = assembler.feed(item)
            assert result is None or isinstance(result, ToolResult)
    except ORSError:
        return


# Well-formed /call streams

EOLS = ["\r\n", "\n", "\r"]


@dataclass
class CallStream:
    """A well-formed /call body and what it must give."""

    body: bytes
    expected: ToolResult
    payload_bytes: int  # the UTF-8 size of the result JSON
    longest_line: int  # in bytes, line ends not counted
    comments: int

    def __repr__(self) -> str:
        return f"CallStream({self.body!r})"


PINGS = [" ping - 2026-11-29 23:36:49.633846+00:00", "", " keep-alive", " \x85\u2028 not line ends in bytes", ":"]


@st.composite
def call_streams(draw: st.DrawFn) -> CallStream:
    """A /call body as an ORS server could send it, with the freedoms SSE allows.

    The result JSON is drawn; the framing choices (line ends, comments, field order, spaces) come
    from one seeded ``random.Random``, which keeps the generation fast.
    """
    if draw(st.booleans()):
        value: dict[str, object] = {
            "ok": True,
            "output": {
                "blocks": [{"text": draw(st.text(texts, max_size=200)), "detail": None, "type": "text"}],
                "metadata": draw(json_values),
                "reward": draw(st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(-9, 9)),
                "finished": draw(st.booleans()),
            },
        }
    else:
        value = {"ok": False, "error": draw(st.text(texts, max_size=50))}
    payload = json.dumps(value, separators=(",", ":"), ensure_ascii=draw(st.booleans()))
    size = draw(st.sampled_from([1, 3, 7, 64, 4096]))
    slices = [payload[i : i + size] for i in range(0, len(payload), size)]
    rnd = draw(st.randoms(use_true_random=False))
    lines: list[str] = []  # each line of the body, without its end

    def comments(most: int) -> None:
        for _ in range(rnd.randint(0, most)):
            lines.append(":" + rnd.choice(PINGS))

    def field(name: str, value: str) -> str:
        space = " " if value.startswith(" ") or rnd.random() < 0.5 else ""  # one space is stripped: keep it
        return f"{name}:{space}{value}"

    def send(name: str, data: str) -> None:
        comments(2)
        fields = [field("event", name), field("data", data)]
        if rnd.random() < 0.2:
            fields.append(field("id", rnd.choice(["7", "", " x y", "é"])))
        if rnd.random() < 0.2:
            fields.append(field("retry", str(rnd.randint(0, 10**6))))
        rnd.shuffle(fields)
        for line in fields:
            lines.append(line)
            comments(1 if rnd.random() < 0.2 else 0)  # a comment inside an event does not end it
        lines.append("")

    send("task_id", TASK_ID)
    if rnd.random() < 0.3:
        send("progress", "50%")  # an event of an unknown name is ignored
    for piece in slices[:-1]:
        send("chunk", piece)
    send("end", slices[-1])

    bom = rnd.random() < 0.3
    eols = rnd.choice([["\r\n"], ["\n"], ["\r"], EOLS])  # one line end for the stream, or any mix
    body = ["\ufeff"] if bom else []
    previous = ""
    for line in lines:
        eol = rnd.choice(eols)
        if previous == "\r" and not line and eol == "\n":
            eol = "\r\n"  # CR then a blank line's LF would read as one CRLF
        body += (line, eol)
        previous = eol
    encoded = [line.encode() for line in lines]
    if bom:
        encoded[0] = b"\xef\xbb\xbf" + encoded[0]
    return CallStream(
        body="".join(body).encode(),
        expected=ToolResult.from_wire(json.loads(payload), task_id=TASK_ID),
        payload_bytes=len(payload.encode()),
        longest_line=max(map(len, encoded)),
        comments=sum(1 for line in lines if line.startswith(":")),
    )


@WELL_FORMED
@given(call_streams(), st.lists(st.integers(0, 100_000), max_size=10))
def test_well_formed_call_gives_its_exact_result_however_cut(stream: CallStream, points: list[int]) -> None:
    """A well-formed /call stream, cut anywhere, gives exactly its result, tagged with its task_id."""
    for pieces in (cut(stream.body, points), [stream.body]):
        assembler = CallAssembler()
        result, error = read_all(pieces, BodyReader(None, assembler))
        assert error is None
        assert result == stream.expected
        assert result.task_id == TASK_ID
        assert assembler.pings == stream.comments


@WELL_FORMED
@given(call_streams(), st.lists(st.integers(0, 100_000), max_size=10), st.integers(-2, 1), st.integers(-2, 1))
def test_well_formed_call_within_the_bounds_or_a_typed_error(
    stream: CallStream, points: list[int], line_margin: int, result_margin: int
) -> None:
    """Bounds at, under and over a stream's longest line and result size: the result, or MalformedStreamError."""
    max_line_bytes = max(1, stream.longest_line + line_margin)
    max_result_bytes = max(1, stream.payload_bytes + result_margin)
    reader = BodyReader(None, CallAssembler(max_result_bytes=max_result_bytes), max_line_bytes=max_line_bytes)
    result, error = read_all(cut(stream.body, points), reader)
    if stream.longest_line <= max_line_bytes and stream.payload_bytes <= max_result_bytes:
        assert error is None
        assert result == stream.expected
    else:
        assert result is None
        assert isinstance(error, MalformedStreamError)
        assert "max_line_bytes" in error.message or "max_result_bytes" in error.message
