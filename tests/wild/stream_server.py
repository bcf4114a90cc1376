"""A chat-completions server on 127.0.0.1 that answers with a provider's recorded bytes, byte for byte.

    with StreamServer(fixture_bytes, manner="split7") as llm:
        agent = ol.OpenAIAgent("m", base_url=llm.url + "/v1", api_key="test")

It is a raw asyncio HTTP/1.1 server in a background thread (no framework between the bytes and the
socket): ``POST /v1/chat/completions`` is answered ``200`` with ``Connection: close`` and no length,
so the body on the wire is exactly what is written, and ends when the server closes the connection.
A request without a ``tool`` message (the first of an episode) gets the fixture, written in one of
``MANNERS``:

- ``whole``: as stored, in one write;
- ``split7``: in writes of 7 bytes, each sent on its own (``TCP_NODELAY``, drained one by one);
- ``crlf``: every line end (LF, CR or CRLF) written as CRLF;
- ``keepalive``: a ``: keep-alive`` comment event after each event.

A request with a ``tool`` message (the agent's next turn, after tool results) gets ``AFTER_TOOLS``:
the text "done.", finish_reason stop, then ``[DONE]``. ``content_type`` is ``text/event-stream``, or
``application/json`` for a fixture that is one JSON object. ``requests`` keeps the JSON body of
every request, in order.

``messages=True`` makes it an Anthropic Messages server: ``POST /v1/messages`` is answered, a
request whose last message holds ``tool_result`` blocks gets ``AFTER_TOOL_RESULTS`` (the text
"done.", ``end_turn``), and ``status`` / ``headers`` give the first answer's status line and extra
headers (a ``429 Too Many Requests`` with ``retry-after`` and ``request-id``, say). ``headers_seen``
keeps every request's headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
from typing import Any, Self

__all__ = ["AFTER_TOOLS", "AFTER_TOOL_RESULTS", "MANNERS", "StreamServer", "written"]

MANNERS = ("whole", "split7", "crlf", "keepalive")
_CHUNK = ('{"id":"chatcmpl-wild-after-tools","object":"chat.completion.chunk","created":0,"model":"wild",'
          '"choices":[{"index":0,')  # fmt: skip
AFTER_TOOLS = (
    f'data: {_CHUNK}"delta":{{"role":"assistant","content":"done."}},"finish_reason":null}}]}}\n\n'
    f'data: {_CHUNK}"delta":{{}},"finish_reason":"stop"}}]}}\n\n'
    "data: [DONE]\n\n"
).encode()

_MESSAGE = '{"id":"msg_wild_after_tools","type":"message","role":"assistant","model":"wild","content":[]'
AFTER_TOOL_RESULTS = (
    f'event: message_start\ndata: {{"type":"message_start","message":{_MESSAGE},"stop_reason":null,'
    '"usage":{"input_tokens":3,"output_tokens":1}}}\n\n'
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text",'
    '"text":""}}\n\n'
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta",'
    '"text":"done."}}\n\n'
    'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
    '"usage":{"output_tokens":2}}\n\n'
    'event: message_stop\ndata: {"type":"message_stop"}\n\n'
).encode()


def written(data: bytes, manner: str) -> list[bytes]:
    """The writes that send ``data`` in ``manner``, in order (their concatenation is what goes on the wire)."""
    if manner == "whole":
        return [data]
    if manner == "split7":
        return [data[i : i + 7] for i in range(0, len(data), 7)]
    if manner == "crlf":
        return [re.sub(rb"\r\n|\r|\n", b"\r\n", data)]
    if manner == "keepalive":
        return [data.replace(b"\n\n", b"\n\n: keep-alive\n\n")]
    raise ValueError(f"unknown manner {manner!r}; valid manners: {', '.join(MANNERS)}")


class StreamServer:
    """Serves one fixture's bytes to each episode's first request; see the module docstring."""

    def __init__(
        self,
        fixture: bytes,
        *,
        manner: str = "whole",
        content_type: str = "text/event-stream",
        messages: bool = False,
        status: str = "200 OK",
        headers: dict[str, str] | None = None,
    ) -> None:
        written(b"", manner)  # an unknown manner fails here, before any thread starts
        self.fixture = fixture
        self.manner = manner
        self.content_type = content_type
        self.messages = messages
        self.status = status
        self.headers = dict(headers or {})
        self.requests: list[Any] = []
        self.headers_seen: list[dict[str, str]] = []
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="wild-stream-server", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        port = started.result(timeout=10)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _start(self) -> int:
        self._server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

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
            if (method, path) != ("POST", "/v1/messages" if self.messages else "/v1/chat/completions"):
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            try:
                request = json.loads(body)
            except ValueError:
                request = None
            self.requests.append(request)
            self.headers_seen.append(headers)
            messages = request.get("messages", []) if isinstance(request, dict) else []
            status, extra = "200 OK", ""
            if any(isinstance(m, dict) and m.get("role") == "tool" for m in messages):
                content_type, writes = "text/event-stream", [AFTER_TOOLS]
            elif self.messages and _has_tool_results(messages):
                content_type, writes = "text/event-stream", [AFTER_TOOL_RESULTS]
            else:
                content_type, writes = self.content_type, written(self.fixture, self.manner)
                status, extra = self.status, "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nCache-Control: no-cache\r\n"
                         f"{extra}Connection: close\r\n\r\n".encode())  # fmt: skip
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


def _has_tool_results(messages: list[Any]) -> bool:
    """Whether the last message is a user message holding ``tool_result`` blocks (the agent's next turn)."""
    last = messages[-1] if messages else None
    content = last.get("content") if isinstance(last, dict) else None
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
