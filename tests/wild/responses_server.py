"""A Responses API server on 127.0.0.1 that answers with a provider's recorded bytes, byte for byte.

    with ResponsesServer(fixture_bytes, manner="split7") as llm:
        agent = ol.OpenAIResponsesAgent("m", base_url=llm.url + "/v1", api_key="test")

``StreamServer`` (tests/wild/stream_server.py) on ``POST /v1/responses``: a request whose ``input``
holds no ``function_call_output`` (the first of an episode) gets the fixture, written in one of
``MANNERS``, with ``status`` (200, or an error status, then with ``headers`` such as ``retry-after``);
a request with one (the agent's next turn, after tool results) gets ``AFTER_TOOLS``, a real text
answer (``openai-gpt-4o-text.sse``); a subclass answers otherwise by its own ``reply``. With
``cut_at=N`` the first answer is a chunked body of its first N bytes whose end never comes: the
connection drops mid-answer. ``requests`` keeps every request's JSON body, ``headers`` its headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from pathlib import Path
from typing import Any

from tests.wild.stream_server import StreamServer, written

__all__ = ["AFTER_TOOLS", "STREAMS", "ResponsesServer"]

STREAMS = Path(__file__).parent / "streams" / "responses"
AFTER_TOOLS = (STREAMS / "openai-gpt-4o-text.sse").read_bytes()
REASONS = {200: "OK", 429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


def follows_tools(request: Any) -> bool:
    """True for a request that sends tool results back (a ``function_call_output`` input item)."""
    items = request.get("input") if isinstance(request, dict) else None
    return isinstance(items, list) and any(isinstance(i, dict) and i.get("type") == "function_call_output"
                                           for i in items)  # fmt: skip


class ResponsesServer(StreamServer):
    """Serves one fixture's bytes to each episode's first Responses request; see the module docstring."""

    def __init__(self, fixture: bytes, *, manner: str = "whole", content_type: str = "text/event-stream",
                 status: int = 200, headers: dict[str, str] | None = None,
                 cut_at: int | None = None) -> None:  # fmt: skip
        super().__init__(fixture, manner=manner, content_type=content_type)
        self.cut_at = cut_at
        self.status = status
        self.extra_headers = dict(headers or {})
        self.headers: list[dict[str, str]] = []

    def reply(self, request: Any) -> tuple[int, str, dict[str, str], list[bytes]]:
        """The status, content type, extra headers and writes that answer ``request`` (see the module docstring)."""
        if follows_tools(request):
            return 200, "text/event-stream", {}, [AFTER_TOOLS]
        return self.status, self.content_type, self.extra_headers, written(self.fixture, self.manner)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            headers = dict(line.split(":", 1) for line in header_lines if ":" in line)
            headers = {k.strip().lower(): v.strip() for k, v in headers.items()}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            method, path, _ = request_line.split(" ", 2)
            if (method, path) != ("POST", "/v1/responses"):
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            try:
                request = json.loads(body)
            except ValueError:
                request = None
            self.requests.append(request)
            self.headers.append(headers)
            status, content_type, extra, writes = self.reply(request)
            cut = self.cut_at is not None and not follows_tools(request)
            if cut:  # a chunked body whose last chunk never comes: the connection drops mid-answer
                body = b"".join(writes)[: self.cut_at]
                extra, writes = {**extra, "Transfer-Encoding": "chunked"}, [b"%x\r\n%s\r\n" % (len(body), body)]
            lines = "".join(f"{k}: {v}\r\n" for k, v in extra.items())
            writer.write(f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: {content_type}\r\n"
                         f"Cache-Control: no-cache\r\n{lines}Connection: close\r\n\r\n".encode())  # fmt: skip
            await writer.drain()
            for piece in writes:
                writer.write(piece)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
