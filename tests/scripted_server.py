"""A real HTTP server on 127.0.0.1 that answers from a script, for the failures the reference
servers cannot be made to produce on demand (429, 502, 503 "starting", 500 at a chosen moment).

Each request is recorded (method, path, headers, body, arrival time); answers are taken from the
script in order, and the last one repeats.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    """One scripted response."""

    status: int = 200
    body: bytes = b'{"status":"ok"}'
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})
    stall: float = 0.0  # > 0: announce more bytes than the body, send the body, go silent, then hang up


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


class ScriptedServer:
    """``url``, ``requests`` (what arrived) and ``script`` (what to answer, in order)."""

    def __init__(self, script: list[Answer]) -> None:
        self.script = list(script)
        self.requests: list[Seen] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                owner.requests.append(
                    Seen(
                        self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()
                    )
                )
                answer = owner.script.pop(0) if len(owner.script) > 1 else owner.script[0]
                self.send_response(answer.status)
                for key, value in answer.headers.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(answer.body) + (100 if answer.stall else 0)))
                self.end_headers()
                self.wfile.write(answer.body)
                if answer.stall:
                    self.wfile.flush()
                    time.sleep(answer.stall)
                    self.close_connection = True

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def scripted_server(*script: Answer) -> Iterator[ScriptedServer]:
    """Run a ScriptedServer for the block."""
    server = ScriptedServer(list(script))
    server.start()
    try:
        yield server
    finally:
        server.stop()
