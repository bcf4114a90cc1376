"""The one spec-exact Server-Sent Events decoder.

httpx2 ships an SSE reader (derived from httpx-sse), and its ``ServerSentEvent`` is the event type
here too. Its reader drops comment lines, and the ORS keep-alive pings are comments
(``: ping - <time>``), which the recorder must keep; so the byte-level decoding is ours:

- lines end in CRLF, LF or CR, also when a CRLF is split across two network chunks;
- exactly one space after the field colon is stripped (the official ORS clients strip all of
  them, which corrupts outputs whose chunk boundaries fall in runs of spaces);
- several ``data`` lines join with ``\\n``; ``id`` persists across events, ``retry`` is kept;
- comment lines come out as ``SSEComment`` items, in order with the events;
- a leading UTF-8 byte order mark is dropped, and an event cut off by the end of the stream is not
  dispatched (``pending`` says one was).
"""

from __future__ import annotations

from dataclasses import dataclass

from httpx2 import ServerSentEvent

__all__ = ["SSEComment", "SSEDecoder", "SSEItem", "ServerSentEvent"]


@dataclass(frozen=True, slots=True)
class SSEComment:
    """A comment line: ``text`` is everything after the colon, as sent (``" ping - 2026-..."``)."""

    text: str


SSEItem = ServerSentEvent | SSEComment

_BOM = "\ufeff"


class SSEDecoder:
    """Incremental decoder: ``feed(bytes)`` returns the items completed so far, in order."""

    __slots__ = ("_data", "_event", "_fresh", "_last_id", "_parts", "_pending", "_retry", "_skip_lf")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._skip_lf = False
        self._fresh = True
        self._event = ""
        self._data: list[str] = []
        self._last_id = ""
        self._retry: int | None = None
        self._pending = False

    @property
    def pending(self) -> bool:
        """True when bytes or fields of an unfinished event are buffered."""
        return self._pending or any(self._parts)

    def feed(self, chunk: bytes) -> list[SSEItem]:
        """Decode one network chunk; return the events and comments it completed."""
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\n" not in chunk and b"\r" not in chunk:
            if chunk:
                self._parts.append(chunk)
            return []
        if self._parts:
            self._parts.append(chunk)
            chunk = b"".join(self._parts)
            self._parts = []
        lines = chunk.splitlines(keepends=True)
        last = lines[-1]
        if not last.endswith((b"\n", b"\r")):
            self._parts.append(lines.pop())
        elif last.endswith(b"\r"):
            self._skip_lf = True  # a CR at the end of the chunk: a following LF belongs to it
        items: list[SSEItem] = []
        for raw in lines:
            line = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
            item = self._line(line.decode("utf-8", "replace"))
            if item is not None:
                items.append(item)
        return items

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
            self._data.append(value)
            self._pending = True
        elif name == "event":
            self._event = value
            self._pending = True
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        data, event, retry = self._data, self._event, self._retry
        self._data, self._event, self._retry, self._pending = [], "", None, False
        if not data:
            return None  # the spec: an event with no data line is not dispatched
        return ServerSentEvent(event=event or "message", data="\n".join(data), id=self._last_id, retry=retry)
