"""The one assembler for a ``/call`` stream: ``task_id``, then ``chunk``*, then ``end`` or ``error``.

Terminal conditions it recognises (``shared/ors-protocol.md`` section 9):

- ``end``: the chunks and the end payload join into the result JSON (``ok`` true or false);
- ``error`` after ``task_id``: the tool raised on the server (``ToolError``);
- ``error: unknown task_id`` with no ``task_id`` first: a resume the server cannot serve
  (``UnknownTaskError``);
- end of stream with no ``end`` or ``error``: ``dropped`` is true, and ``task_id`` says whether the
  call can be resumed;
- an HTTP error body before any stream is the client's to handle (it never reaches here).

Comments (the ``: ping`` keep-alives) are counted. Events of unknown names are ignored (kept in
``ignored``), so a newer server does not break an older client.

The result is bounded: chunks that join to more than ``max_result_bytes`` (default
``MAX_RESULT_BYTES``, 256 MiB of UTF-8) raise ``MalformedStreamError`` as soon as they cross it, and
what was held is dropped, so an endless chunk stream costs bounded memory.
"""

from __future__ import annotations

import json

from ors_lab.protocol.errors import MalformedStreamError, ToolError, UnknownTaskError
from ors_lab.protocol.models import ToolResult, WireFormatError
from ors_lab.protocol.sse import SSEComment, SSEItem

__all__ = ["MAX_RESULT_BYTES", "CallAssembler"]

UNKNOWN_TASK_ID = "unknown task_id"
MAX_RESULT_BYTES = 256 * 1024 * 1024
"""The default bound on one ``/call`` result: 256 MiB, the UTF-8 size of its JSON (chunks and end joined)."""


class CallAssembler:
    """Feed it the decoded items of one ``/call`` response; it returns the result at ``end``.

    ``feed`` returns None until the terminal event, then the ``ToolResult``; an ``error`` event
    raises ``ToolError`` or ``UnknownTaskError``; a protocol violation raises
    ``MalformedStreamError``, and so does a result over ``max_result_bytes``. Pass ``task_id`` when
    the stream is a resume of a known task.
    """

    __slots__ = ("_announced", "_parts", "_size", "done", "ignored", "max_result_bytes", "pings", "task_id")

    def __init__(self, task_id: str | None = None, *, max_result_bytes: int = MAX_RESULT_BYTES) -> None:
        if max_result_bytes < 1:
            raise ValueError(f"max_result_bytes must be at least 1, not {max_result_bytes!r}")
        self.task_id = task_id
        self.max_result_bytes = max_result_bytes
        self._announced = False  # a task_id event arrived on this stream
        self._parts: list[str] = []
        self._size = 0  # UTF-8 bytes in _parts
        self.pings = 0
        self.ignored = 0
        self.done = False

    @property
    def dropped(self) -> bool:
        """True while no terminal event has arrived (at end of stream: the connection dropped)."""
        return not self.done

    @property
    def seen_task_id(self) -> bool:
        """True once this stream (or the one it resumes) named its task."""
        return self.task_id is not None

    def feed(self, item: SSEItem) -> ToolResult | None:
        """Take one event or comment; return the result when the stream completes."""
        if isinstance(item, SSEComment):
            self.pings += 1
            return None
        if self.done:
            raise MalformedStreamError(f"event {item.event!r} after the end of the stream", task_id=self.task_id)
        event = item.event
        if event == "chunk":
            self._need_task_id(event)
            data = item.data
            size = self._size + (len(data) if data.isascii() else len(data.encode("utf-8", "surrogatepass")))
            if size > self.max_result_bytes:
                raise self._too_big()
            self._size = size
            self._parts.append(data)
            return None
        if event == "end":
            self._need_task_id(event)
            data = item.data
            if (
                self._size + (len(data) if data.isascii() else len(data.encode("utf-8", "surrogatepass")))
                > self.max_result_bytes
            ):
                raise self._too_big()
            self.done = True
            self._parts.append(data)
            payload = "".join(self._parts)
            self._parts = []
            return self._result(payload)
        if event == "task_id":
            if self.task_id is not None and item.data != self.task_id:
                raise MalformedStreamError(
                    f"task_id changed from {self.task_id!r} to {item.data!r}", task_id=self.task_id
                )
            if self._parts:
                raise MalformedStreamError("task_id after chunks", task_id=self.task_id)
            self.task_id = item.data
            self._announced = True
            return None
        if event == "error":
            self.done = True
            if not self._announced and item.data == UNKNOWN_TASK_ID:
                raise UnknownTaskError(
                    "the server does not know this task_id (results are kept 60 s)", task_id=self.task_id
                )
            raise ToolError(item.data, task_id=self.task_id)
        self.ignored += 1
        return None

    def _too_big(self) -> MalformedStreamError:
        """The error for a result over the bound; what was held is dropped, and the stream is over."""
        self.done = True
        self._parts, self._size = [], 0
        return MalformedStreamError(
            f"the result passed {self.max_result_bytes} bytes (max_result_bytes) before its end; "
            "to accept bigger results, raise max_result_bytes (Client(..., max_result_bytes=...))",
            task_id=self.task_id,
        )

    def _need_task_id(self, event: str) -> None:
        if not self._announced:
            raise MalformedStreamError(f"{event!r} event before task_id")

    def _result(self, payload: str) -> ToolResult:
        try:
            return ToolResult.from_wire(json.loads(payload), task_id=self.task_id)
        except (ValueError, WireFormatError, RecursionError, OverflowError) as exc:
            # RecursionError: nested deeper than the parser goes; OverflowError: a number no float holds
            shown = payload if len(payload) <= 200 else f"{payload[:100]}...{payload[-100:]}"
            raise MalformedStreamError(
                f"the result is not a valid RunToolOutput ({exc}); {len(payload)} chars: {shown!r}",
                task_id=self.task_id,
            ) from exc
