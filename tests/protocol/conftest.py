"""Test material for the protocol core: the reference servers' SSE captures in ``tests/protocol/captures``.

The captures (ors-sdk 0.1.0 and openreward 0.1.167, taken on 127.0.0.1; their README says how) are kept in
the repository, byte for byte (``.gitattributes``: no line-end conversion). Each file is ``#`` comment lines,
the curl command, then ``curl -i`` output with CRLF kept.

- ``sse_capture`` (a test argument) runs the test once per SSE response in the captures;
- ``call_capture`` runs it once per SSE response of ``/call`` (every one but ``/create_session``);
- the ``capture`` fixture loads one by server and name: ``capture("ors-sdk", "50_call_submit_correct")``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

CAPTURES = Path(__file__).resolve().parent / "captures"
SERVERS = ("ors-sdk", "openreward")

_CURL_URL = re.compile(rb"^\$ curl .*?(https?://\S+)", re.MULTILINE)


@dataclass(frozen=True)
class Capture:
    """One SSE response from a capture file: which server, which exchange, the URL and the raw body."""

    server: str
    name: str
    url: str
    body: bytes

    def __str__(self) -> str:
        return f"{self.server}/{self.name}"


def sse_body(raw: bytes) -> bytes | None:
    """The body of the ``200`` response in a ``curl -i`` capture, or None when it is not SSE."""
    start = raw.find(b"HTTP/1.1 200")
    if start < 0:
        return None
    end = raw.find(b"\r\n\r\n", start)
    if end < 0:
        return None
    headers = raw[start:end].decode("latin-1").lower().split("\r\n")[1:]
    if not any(h.startswith("content-type:") and "text/event-stream" in h for h in headers):
        return None
    return raw[end + 4 :]


def _load(path: Path, server: str) -> Capture | None:
    raw = path.read_bytes()
    body = sse_body(raw)
    url = _CURL_URL.search(raw)
    if body is None or url is None:
        return None
    return Capture(server, path.name.removesuffix(".txt"), url.group(1).decode(), body)


@cache
def sse_captures() -> tuple[Capture, ...]:
    """Every SSE response among the captures of both servers (``.timed.txt`` files excluded)."""
    found = []
    for server in SERVERS:
        for path in sorted((CAPTURES / server).glob("*.txt")):
            if not path.name.endswith(".timed.txt") and (capture := _load(path, server)) is not None:
                found.append(capture)
    return tuple(found)


def _is_call(capture: Capture) -> bool:
    return capture.url.endswith("/call")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for argument, keep in (("sse_capture", lambda _: True), ("call_capture", _is_call)):
        if argument not in metafunc.fixturenames:
            continue
        selected = [capture for capture in sse_captures() if keep(capture)]
        assert selected, f"no SSE captures found under {CAPTURES}"
        metafunc.parametrize(argument, selected, ids=str)


@pytest.fixture
def capture() -> Callable[[str, str], Capture]:
    """A loader of one SSE capture by server and file stem."""

    def load(server: str, name: str) -> Capture:
        loaded = _load(CAPTURES / server / f"{name}.txt", server)
        assert loaded is not None, f"{server}/{name}.txt is not an SSE capture"
        return loaded

    return load
