"""Plain HTTP for tests that talk to ORS servers directly: urllib, a raw socket, a tiny SSE parser.

The ors_lab client is built separately; these helpers only need the standard library, and follow
the wire as `shared/ors-protocol.md` describes it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
TIMEOUT = 30.0


@dataclass(frozen=True)
class Response:
    """A finished HTTP response."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class Event:
    """One server-sent event (comments are not kept)."""

    event: str
    data: str


def request(
    method: str, url: str, body: Any = None, headers: Mapping[str, str] | None = None, *, timeout: float = TIMEOUT
) -> Response:
    """Send one request (JSON body if given) and return the response, whatever its status."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return Response(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return Response(err.code, {k.lower(): v for k, v in err.headers.items()}, err.read())


def get_json(url: str, path: str, **headers: str) -> Any:
    """GET a JSON endpoint that must answer 200."""
    resp = request("GET", url + path, headers=headers)
    assert resp.status == 200, (path, resp)
    return resp.json()


def post_json(url: str, path: str, body: Any, **headers: str) -> Any:
    """POST to a JSON endpoint that must answer 200."""
    resp = request("POST", url + path, body, headers)
    assert resp.status == 200, (path, resp)
    return resp.json()


def create(url: str, body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> str:
    """POST /create with a fresh X-Session-ID and return it."""
    sid = str(uuid.uuid4())
    resp = request("POST", url + "/create", dict(body), {"X-Session-ID": sid, **(headers or {})})
    assert resp.status == 200, resp
    assert resp.json() == {"sid": sid}
    return sid


def delete(url: str, sid: str) -> None:
    """POST /delete for a session."""
    resp = request("POST", url + "/delete", None, {"X-Session-ID": sid})
    assert resp.status == 200, resp


@contextlib.contextmanager
def session(
    url: str, env_name: str, split: str, index: int, headers: Mapping[str, str] | None = None, **extra: Any
) -> Iterator[str]:
    """A session on task (split, index) of `env_name`, deleted afterwards; yields the sid."""
    sid = create(url, {"env_name": env_name, "split": split, "index": index, **extra}, headers)
    try:
        yield sid
    finally:
        delete(url, sid)


def parse_sse(raw: bytes) -> list[Event]:
    """Parse an SSE body as the spec says (CR/LF/CRLF, one space stripped, data lines joined)."""
    events: list[Event] = []
    name, data, seen = "message", [], False
    for line in raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line:
            if seen:
                events.append(Event(name, "\n".join(data)))
            name, data, seen = "message", [], False
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name, seen = value, True
        elif field == "data":
            data.append(value)
            seen = True
    return events


def call(url: str, env: str, sid: str, name: str, tool_input: Mapping[str, Any], **extra: Any) -> list[Event]:
    """POST /{env}/call and return the stream's events."""
    resp = request(
        "POST", f"{url}/{env}/call", {"name": name, "input": dict(tool_input), **extra}, {"X-Session-ID": sid}
    )
    assert resp.status == 200, resp
    assert resp.headers["content-type"].startswith("text/event-stream"), resp
    return parse_sse(resp.body)


def result_of(events: list[Event]) -> Any:
    """The RunToolOutput JSON of a finished stream: task_id, chunks, end."""
    assert events[0].event == "task_id", events
    assert events[-1].event == "end", events
    assert all(e.event == "chunk" for e in events[1:-1]), events
    return json.loads("".join(e.data for e in events[1:]))


def call_result(url: str, env: str, sid: str, name: str, tool_input: Mapping[str, Any], **extra: Any) -> Any:
    """Call a tool and return its RunToolOutput JSON."""
    return result_of(call(url, env, sid, name, tool_input, **extra))


def output_text(result: Any) -> str:
    """The text of the single text block of a successful RunToolOutput."""
    assert result["ok"] is True, result
    (block,) = result["output"]["blocks"]
    assert block["type"] == "text", block
    return str(block["text"])


def raw_exchange(
    url: str, method: str, path: str, body: Any, headers: Mapping[str, str], timeout: float = TIMEOUT
) -> bytes:
    """Send one HTTP/1.1 request on a raw socket and return every byte received until EOF."""
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    payload = json.dumps(body).encode()
    head = [f"{method} {path} HTTP/1.1", f"Host: {parts.hostname}:{parts.port}", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    head.append(f"Content-Length: {len(payload)}")
    received = bytearray()
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        while chunk := sock.recv(65536):
            received += chunk
    return bytes(received)


def split_response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, lower-cased headers, raw body) of a raw HTTP response."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    assert sep, raw
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split(" ")[1]), headers, body


def dechunk(raw: bytes) -> tuple[bytes, bool]:
    """Decode a chunked body that may have been cut: (the data received, whether it was complete)."""
    data = bytearray()
    while raw:
        size_line, sep, rest = raw.partition(b"\r\n")
        if not sep:
            return bytes(data), False
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return bytes(data), True
        data += rest[:size]
        if len(rest) < size + 2:
            return bytes(data), False
        raw = rest[size + 2 :]
    return bytes(data), False
