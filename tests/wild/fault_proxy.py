"""A fault-injecting HTTP proxy on 127.0.0.1 between an agent and a chat-completions server.

    with FaultProxy(llm.url) as proxy:
        proxy.fault = Truncate("capital of France", after=3, split_arguments=True)
        ...an agent at proxy.url + "/v1"...
        proxy.hits, proxy.requests

Requests are read one at a time per connection (as HTTP/1.1 clients send them, with the request
parsing of tests/cutting_proxy.py) and forwarded to the upstream on a connection of their own. A
request whose body contains the fault's ``when`` text (the first ``times`` of them) gets the fault:

- ``Status(when, status, headers)``: answered here with that status and an OpenAI error body
  (``Retry-After`` and all in ``headers``); the upstream never sees it.
- ``Disconnect(when, after, into)``: the upstream's event stream, its first ``after`` events and
  ``into`` bytes of the next, then the connection closes mid-body.
- ``Truncate(when, after)``: the first ``after`` events, then the body ends properly (no
  ``finish_reason`` and no ``[DONE]`` if they came later).
- ``Malformed(when, after, data)``: an event whose data is ``data`` (not JSON) put in after the
  first ``after`` events; the rest of the stream follows, ``[DONE]`` and all.

With ``split_arguments``, each tool-call delta of the stream is first cut in two deltas, the
second one with the call's ``index`` and the rest of ``function.arguments`` alone (as OpenAI streams
them): a fault placed between the two leaves a call with partial arguments. Events are counted
after that split. The upstream's answer is read whole before anything is sent on: the streams
here are short and finite.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import threading
from dataclasses import dataclass, field

from tests.cutting_proxy import _BLOCK_END, HOST, LoopbackProxy, _parse_head, _read_body

__all__ = ["Disconnect", "Fault", "FaultProxy", "Malformed", "Status", "Truncate", "openai_error"]

_REASONS = {429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


def openai_error(status: int) -> bytes:
    """An OpenAI error body for ``status``."""
    kind = {429: "rate_limit_error", 503: "server_overloaded"}.get(status, "server_error")
    message = f"fault proxy: injected {status}"
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": kind}}).encode()


@dataclass
class Fault:
    """What is done to the first ``times`` requests whose body contains ``when`` (see the module doc)."""

    when: str
    times: int = field(default=1, kw_only=True)
    split_arguments: bool = field(default=False, kw_only=True)

    def edit(self, events: list[bytes]) -> tuple[list[bytes], bool]:
        """The events to send and whether the body then ends properly (False: the connection closes)."""
        return events, True


@dataclass
class Status(Fault):
    """Answer ``status`` with ``headers`` and an OpenAI error body, without asking the upstream."""

    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Disconnect(Fault):
    """The first ``after`` events and ``into`` bytes of the next one, then hang up."""

    after: int = 0
    into: int = 0

    def edit(self, events: list[bytes]) -> tuple[list[bytes], bool]:
        rest = events[self.after][: self.into] if self.into and self.after < len(events) else b""
        return [*events[: self.after], *([rest] if rest else [])], False


@dataclass
class Truncate(Fault):
    """The first ``after`` events, then the body ends properly."""

    after: int = 0

    def edit(self, events: list[bytes]) -> tuple[list[bytes], bool]:
        return events[: self.after], True


@dataclass
class Malformed(Fault):
    """An event of ``data`` (sent as is: not JSON) after the first ``after`` events, then the rest."""

    after: int = 0
    data: bytes = b'{"choices": [{"index": 0, "delta": {"content": "cut sh'

    def edit(self, events: list[bytes]) -> tuple[list[bytes], bool]:
        return [*events[: self.after], b"data: " + self.data + b"\n\n", *events[self.after :]], True


def split_events(body: bytes) -> list[bytes]:
    """An SSE body as its blocks, each with the blank line that ends it (a last unended one kept as is)."""
    blocks, start = [], 0
    for match in _BLOCK_END.finditer(body):
        blocks.append(body[start : match.end()])
        start = match.end()
    if start < len(body):
        blocks.append(body[start:])
    return blocks


def split_tool_arguments(event: bytes) -> list[bytes]:
    """A ``data:`` event whose delta has tool calls, as two events per call (see the module doc)."""
    text = event.decode()
    if not text.startswith("data: ") or text.startswith("data: [DONE]"):
        return [event]
    chunk = json.loads(text[len("data: ") :])
    choices = chunk.get("choices") or []
    calls = (choices[0].get("delta") or {}).get("tool_calls") if choices else None
    if not calls:
        return [event]
    out = []
    for call in calls:
        arguments = (call.get("function") or {}).get("arguments") or ""
        half = len(arguments) // 2
        head = copy.deepcopy(call)
        head["function"]["arguments"] = arguments[:half]
        tail = {"index": call.get("index", 0), "function": {"arguments": arguments[half:]}}
        for part in (head, tail):
            piece = copy.deepcopy(chunk)
            piece["choices"][0]["delta"] = {"tool_calls": [part]}
            out.append(b"data: " + json.dumps(piece).encode() + b"\n\n")
    return out


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


class FaultProxy(LoopbackProxy):
    """A proxy on 127.0.0.1 in front of ``upstream_url`` that applies ``fault`` (None: passes all through).

    ``requests`` holds every request body that arrived, ``hits`` how many got the fault.
    """

    NAME = "fault-proxy"

    def __init__(self, upstream_url: str) -> None:
        super().__init__(upstream_url)
        if self.upstream_host != HOST:
            raise ValueError(f"upstream_url must look like http://127.0.0.1:PORT, not {upstream_url!r}")
        self.fault: Fault | None = None
        self.requests: list[bytes] = []
        self.hits = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FaultProxy({self.url} -> {self.upstream_port}, fault={self.fault!r}, hits={self.hits})"

    def _take(self, body: bytes) -> Fault | None:
        """Note the request; the fault it gets, if any."""
        with self._lock:
            self.requests.append(body)
            fault = self.fault
            if fault is None or fault.when.encode() not in body or fault.times <= 0:
                return None
            fault.times -= 1
            self.hits += 1
            return fault

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one client connection, a request at a time."""
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                _, headers = _parse_head(head)
                raw, body = await _read_body(reader, headers)
                fault = self._take(body)
                if isinstance(fault, Status):
                    answer = openai_error(fault.status)
                    lines = [
                        f"HTTP/1.1 {fault.status} {_REASONS.get(fault.status, 'Error')}",
                        "content-type: application/json",
                        f"content-length: {len(answer)}",
                        *(f"{k}: {v}" for k, v in fault.headers.items()),
                    ]
                    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + answer)
                    await writer.drain()
                    continue
                if not await self._forward(head + raw, writer, fault):
                    return
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _forward(self, request: bytes, writer: asyncio.StreamWriter, fault: Fault | None) -> bool:
        """Ask the upstream and pass its answer on, edited by ``fault``; False if the connection must close."""
        up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        try:
            up_writer.write(request)
            await up_writer.drain()
            head = await up_reader.readuntil(b"\r\n\r\n")
            status, headers = _parse_head(head)
            raw, body = await _read_body(up_reader, headers)
        finally:
            up_writer.close()
            with contextlib.suppress(Exception):
                await up_writer.wait_closed()
        streaming = status == 200 and headers.get("content-type", "").startswith("text/event-stream")
        if fault is None or not streaming:
            writer.write(head + raw)
            await writer.drain()
            return True
        events = split_events(body)
        if fault.split_arguments:
            events = [piece for event in events for piece in split_tool_arguments(event)]
        events, ends = fault.edit(events)
        lines = [
            line
            for line in head.decode("latin-1").split("\r\n")[:-2]
            if not line.lower().startswith(("content-length:", "transfer-encoding:"))
        ]
        writer.write(("\r\n".join([*lines, "transfer-encoding: chunked"]) + "\r\n\r\n").encode("latin-1"))
        for event in events:
            writer.write(_chunked(event))
            await writer.drain()
        if ends:
            writer.write(b"0\r\n\r\n")
        await writer.drain()
        return ends
