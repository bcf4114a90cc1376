"""The one spec-exact Server-Sent Events decoder.

httpx2 ships an SSE reader (derived from httpx-sse), and its ``ServerSentEvent`` is the event type
here too. Its reader drops comment lines, and the ORS keep-alive pings are comments
(``: ping - <time>``), which the recorder must keep; so the byte-level decoding is ours:

- lines end in CRLF, LF or CR, also when a CRLF is split across two network chunks;
- exactly one space after the field colon is stripped (the official ORS clients strip all of
  them, which corrupts outputs whose chunk boundaries fall in runs of spaces);
- several ``data`` lines join with ``\\n``; ``id`` persists across events, ``retry`` is kept
  (a ``retry`` of more than 18 digits is ignored: the trace holds it in an int64);
- comment lines come out as ``SSEComment`` items, in order with the events;
- a leading UTF-8 byte order mark is dropped, and an event cut off by the end of the stream is not
  dispatched (``pending`` says one was);
- a line longer than ``max_line_bytes`` (default ``MAX_LINE_BYTES``, 16 MiB; the line end not
  counted), or data lines of one event that join to more than that, raise ``MalformedStreamError``.
  The decoder never holds more than the limit of an unfinished line, so a line that never ends, or
  an event that never ends, costs bounded memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from httpx2 import ServerSentEvent

from ors_lab.protocol.errors import MalformedStreamError

__all__ = ["MAX_LINE_BYTES", "SSEComment", "SSEDecoder", "SSEItem", "ServerSentEvent"]

MAX_LINE_BYTES = 16 * 1024 * 1024
"""The default bound on one SSE line, and on the data of one event: 16 MiB.

ORS servers send a ``/call`` result in ``chunk`` events of 4096 characters (at most 16 KiB of
UTF-8), each on one ``data`` line, so this leaves a thousandfold margin. A server that does not
split its results sends the whole result JSON in one ``end`` line: for results bigger than 16 MiB
from such a server, raise the bound (up to the result bound, ``MAX_RESULT_BYTES``, beyond which
the result is refused anyway)."""


@dataclass(frozen=True, slots=True)
class SSEComment:
    """A comment line: ``text`` is everything after the colon, as sent (``" ping - 2026-..."``)."""

    text: str


SSEItem = ServerSentEvent | SSEComment

_BOM = "\ufeff"
_RETRY_DIGITS = 18  # longer retry values are ignored: the trace keeps retry in an int64 (and int() stops at 4300)


class SSEDecoder:
    """Incremental decoder: ``feed(bytes)`` returns the items completed so far, in order.

    A line (or an event's data) over ``max_line_bytes`` raises ``MalformedStreamError`` from the
    ``feed`` that crosses it. When that chunk completed items before the bad line, ``feed`` returns
    them and sets ``error`` instead (check it after each feed); every later ``feed`` raises.
    """

    __slots__ = (
        "_buf",
        "_data",
        "_data_size",
        "_event",
        "_fresh",
        "_last_id",
        "_pending",
        "_retry",
        "_skip_lf",
        "error",
        "max_line_bytes",
    )

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be at least 1, not {max_line_bytes!r}")
        self.max_line_bytes = max_line_bytes
        self._buf = bytearray()  # the unfinished line (a bytearray: a line trickled in bytes costs its bytes)
        self._skip_lf = False
        self._fresh = True
        self._event = ""
        self._data: list[str] = []
        self._data_size = 0  # UTF-8 bytes of the event's data lines and their joining newlines, from the 2nd line on
        self._last_id = ""
        self._retry: int | None = None
        self._pending = False
        self.error: str | None = None  # why the decoder stopped (a bound was crossed), or None

    @property
    def pending(self) -> bool:
        """True when bytes or fields of an unfinished event are buffered."""
        return self._pending or bool(self._buf)

    @property
    def buffered(self) -> int:
        """How many bytes of an unfinished line are held (never more than ``max_line_bytes``)."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> list[SSEItem]:
        """Decode one network chunk; return the events and comments it completed."""
        if self.error is not None:
            raise MalformedStreamError(self.error)
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\n" not in chunk and b"\r" not in chunk:
            if chunk:
                if len(self._buf) + len(chunk) > self.max_line_bytes:
                    raise self._fail(self._line_too_long())
                self._buf += chunk
            return []
        if self._buf:
            chunk = b"".join((self._buf, chunk))
            self._buf.clear()
        lines = chunk.splitlines(keepends=True)
        last = lines[-1]
        if not last.endswith((b"\n", b"\r")):
            self._buf += lines.pop()
        elif last.endswith(b"\r"):
            self._skip_lf = True  # a CR at the end of the chunk: a following LF belongs to it
        error = None
        if len(chunk) > self.max_line_bytes:  # only then can a line be too long: look at each
            lines, error = self._bounded(lines)
        items: list[SSEItem] = []
        try:
            for raw in lines:
                line = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
                item = self._line(line.decode("utf-8", "replace"))
                if item is not None:
                    items.append(item)
        except MalformedStreamError as exc:
            error = exc
        if error is not None:
            self._fail(error)
            if not items:
                raise error
        return items

    def _bounded(self, lines: list[bytes]) -> tuple[list[bytes], MalformedStreamError | None]:
        """The lines before the first one over the limit, and the error for that one (or None)."""
        limit = self.max_line_bytes
        for index, raw in enumerate(lines):
            if len(raw) - (2 if raw.endswith(b"\r\n") else 1) > limit:
                return lines[:index], self._line_too_long()
        if len(self._buf) > limit:
            return lines, self._line_too_long()
        return lines, None

    def _line_too_long(self) -> MalformedStreamError:
        return MalformedStreamError(
            f"an SSE line passed {self.max_line_bytes} bytes (max_line_bytes); ORS servers send lines of "
            "4096 characters, so this stream is not one (if the server does send such lines, raise max_line_bytes)"
        )

    def _fail(self, error: MalformedStreamError) -> MalformedStreamError:
        """Drop what is buffered and keep the error: every later feed raises it again."""
        self.error = error.message
        self._buf, self._data, self._data_size, self._pending = bytearray(), [], 0, False
        return error

    def _line(self, line: str) -> SSEItem | None:
        if self._fresh:
            self._fresh = False
            if line.startswith(_BOM):
                line = line[1:]
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return SSEComment(line[1:])
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            if self._data:  # one line is bounded as a line; more lines in one event, by their total
                self._more_data(value)
            self._data.append(value)
            self._pending = True
        elif name == "event":
            self._event = value
            self._pending = True
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit() and len(value) <= _RETRY_DIGITS:
            self._retry = int(value)
        return None

    def _more_data(self, value: str) -> None:
        """Count a further data line of the event against the limit (the first line counts here too)."""
        size = self._data_size or _utf8_size(self._data[0])
        size += 1 + _utf8_size(value)
        if size > self.max_line_bytes:
            raise MalformedStreamError(
                f"the data lines of one SSE event passed {self.max_line_bytes} bytes (max_line_bytes) "
                "with no blank line to end the event"
            )
        self._data_size = size

    def _dispatch(self) -> ServerSentEvent | None:
        data, event, retry = self._data, self._event, self._retry
        self._data, self._data_size, self._event, self._retry, self._pending = [], 0, "", None, False
        if not data:
            return None  # the spec: an event with no data line is not dispatched
        return ServerSentEvent(event=event or "message", data="\n".join(data), id=self._last_id, retry=retry)


def _utf8_size(text: str) -> int:
    """The length of ``text`` in UTF-8 (``isascii`` is a flag check in CPython: no copy for ASCII)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
