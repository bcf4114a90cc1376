"""Reading an SSE body chunk by chunk, the one way the client and the recording proxy both do it.

Each network chunk is reported (``chunk`` row with its size), decoded by the spec-exact decoder,
each event and comment reported (``event`` / ``comment`` rows), and, for a ``/call`` body, fed to
the assembler, which yields the result at ``end``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ors_lab.protocol.call import CallAssembler
from ors_lab.protocol.models import ToolResult
from ors_lab.protocol.sse import SSEComment, SSEDecoder

__all__ = ["EXCHANGES", "Emit", "SSETap"]

Emit = Callable[..., None]

EXCHANGES = itertools.count(1)
"""Exchange numbers for the trace: one counter per process, shared by every client and proxy in it,
so that requests recorded into one trace never share a number."""


class SSETap:
    """Feed it the body's chunks; ``feed`` returns the result once, when ``end`` completes it.

    ``assembler`` is None for SSE bodies that are not ``/call`` results (``/create_session``).
    Errors of the assembler (``ToolError``, ``UnknownTaskError``, ``MalformedStreamError``) are
    raised from ``feed`` after the event that caused them was reported.
    """

    __slots__ = ("assembler", "context", "decoder", "emit", "result")

    def __init__(self, emit: Emit | None, assembler: CallAssembler | None, **context: Any) -> None:
        self.emit = emit
        self.assembler = assembler
        self.context = context
        self.decoder = SSEDecoder()
        self.result: ToolResult | None = None

    def feed(self, chunk: bytes) -> ToolResult | None:
        """Take one network chunk; return the result when this chunk completed it."""
        emit, context, assembler = self.emit, self.context, self.assembler
        if emit is not None:
            emit("chunk", size=len(chunk), **context)
        completed = None
        for item in self.decoder.feed(chunk):
            if emit is not None:
                if isinstance(item, SSEComment):
                    emit("comment", comment=item.text, **context)
                else:
                    emit(
                        "event",
                        event=item.event,
                        data=item.data,
                        sse_id=item.id or None,
                        retry_ms=item.retry,
                        **context,
                    )
            if assembler is not None and self.result is None:
                completed = self.result = assembler.feed(item)
        return completed
