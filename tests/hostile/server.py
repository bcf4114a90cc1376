"""A hostile ORS server on 127.0.0.1: a real HTTP/1.1 server whose misbehaviour each test picks.

    server = HostileServer().start()        # or the `hostile_server` fixture (tests/hostile/conftest.py)
    server.on("call", Drop())               # every first /call: read it, then hang up without a word
    server.on("tasks", Html(), Normal())    # the first /tasks gets an HTML page, later ones the real answer
    ...a client at server.url...
    server.ran, server.count("call"), server.requests
    server.reset()                          # every route answers normally again
    server.refuse()                         # from now on, connections are refused (a server gone away)

Until told otherwise it answers as a small well-behaved ORS server, enough for an episode: one
environment ``lab`` with a split ``test`` of one task, a tool ``step``, sessions that open, ping
and close, and a ``/call`` that streams ``task_id`` then ``end`` (reward 1.0) and can be resumed.

Requests are routed by the last segment of their path (``create``, ``ping``, ``delete``, ``call``,
``tasks``, ``prompt``, ``list_environments``, ...), except that a ``/call`` whose body carries a
``task_id`` is the route ``resume``. ``on(route, *answers)`` scripts a route: its answers are used in
order and the last one repeats. An answer writes raw bytes, so it can break HTTP and SSE at any
byte: see the answer classes below (``Reply``, ``Json``, ``Html``, ``Events``, ``Forever``,
``Trickle``, ``Drop``, ``Silence``, ``Raw``, ``Normal``).

It counts what arrived (``requests``) and how many times a tool "ran": ``ran`` is the number of
``/call`` requests received without a ``task_id``, whatever was answered. Endless answers
(``Silence``, ``Forever``, ``Events(after="hang")``) last until the client hangs up or the server
stops; ``stop()`` closes every connection, so a test never leaves a thread behind for long.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "END_OK",
    "Answer",
    "Drop",
    "Events",
    "Forever",
    "HostileServer",
    "Html",
    "Json",
    "Normal",
    "Raw",
    "Reply",
    "Seen",
    "Silence",
    "Trickle",
    "end_frame",
    "ping_frame",
    "sse",
    "task_id_frame",
]

HOST = "127.0.0.1"
RESULT_OK = {"ok": True, "output": {"blocks": [{"text": "done", "detail": None, "type": "text"}], "metadata": None,
                                    "reward": 1.0, "finished": True}}  # fmt: skip


def sse(event: str | None, data: str | bytes) -> bytes:
    """One SSE event, framed with LF (``data`` may hold several lines); no ``event:`` line if None."""
    raw = data.encode() if isinstance(data, str) else data
    head = b"" if event is None else f"event: {event}\n".encode()
    return head + b"".join(b"data: " + line + b"\n" for line in raw.split(b"\n")) + b"\n"


def task_id_frame(task_id: str) -> bytes:
    """The ``task_id`` event."""
    return sse("task_id", task_id)


def end_frame(result: Any = None) -> bytes:
    """The ``end`` event with a result (a successful reward-1.0 result by default)."""
    return sse("end", json.dumps(RESULT_OK if result is None else result))


def ping_frame() -> bytes:
    """A keep-alive comment, as the reference servers send every 10 s."""
    return b": ping - 2026-01-01 00:00:00\n\n"


END_OK = end_frame()


@dataclass
class Seen:
    """One request as it arrived."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    route: str

    @property
    def task_id(self) -> str | None:
        """The ``task_id`` in a JSON body (a /call resume), else None."""
        try:
            value = json.loads(self.body)
        except ValueError:
            return None
        return value.get("task_id") if isinstance(value, dict) else None


class Exchange:
    """What an answer works with: the request, the socket, and the server's stop flag."""

    def __init__(self, server: HostileServer, conn: socket.socket, seen: Seen) -> None:
        self.server = server
        self.conn = conn
        self.seen = seen

    def send(self, data: bytes) -> None:
        self.conn.sendall(data)

    def wait(self, seconds: float | None) -> bool:
        """Sleep; True if the server was stopped meanwhile."""
        return self.server._stopped.wait(seconds)

    def head(self, status: int, headers: dict[str, str], reason: str | None = None) -> None:
        lines = [f"HTTP/1.1 {status} {reason if reason is not None else _REASONS.get(status, 'Whatever')}"]
        lines += [f"{key}: {value}" for key, value in headers.items()]
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def chunk(self, data: bytes) -> None:
        """One chunk of a chunked body (empty data is skipped: it would end the body)."""
        if data:
            self.send(b"%x\r\n%s\r\n" % (len(data), data))

    def hold(self) -> None:
        """Stay silent until the client hangs up or the server stops."""
        self.conn.settimeout(0.05)
        while not self.server._stopped.is_set():
            try:
                if self.conn.recv(65536) == b"":
                    return
            except TimeoutError:
                continue
            except OSError:
                return


_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}

SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}


class Answer:
    """How to answer one request; ``serve`` returns True to keep the connection for the next one."""

    def serve(self, exchange: Exchange) -> bool:
        raise NotImplementedError


@dataclass
class Reply(Answer):
    """A whole answer with a Content-Length: any status, headers and body bytes (Retry-After and all)."""

    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})

    def serve(self, exchange: Exchange) -> bool:
        exchange.head(self.status, {**self.headers, "content-length": str(len(self.body))})
        exchange.send(self.body)
        return True


def Json(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    """A JSON answer."""
    return Reply(status, json.dumps(value).encode(), {"content-type": "application/json", **(headers or {})})


def Html(status: int = 200) -> Reply:
    """An HTML page, as a captive portal or a misrouted gateway sends."""
    page = b"<!DOCTYPE html><html><head><title>Sign in</title></head><body><h1>Welcome</h1></body></html>"
    return Reply(status, page, {"content-type": "text/html; charset=utf-8"})


@dataclass
class Events(Answer):
    """A 200 event stream (chunked): these frames, then ``after``.

    ``after``: ``end`` closes the body properly; ``close`` hangs up mid-body (a dropped stream);
    ``hang`` goes silent with the body open. ``delay`` seconds pass before each frame.
    """

    frames: tuple[bytes, ...]
    after: Literal["end", "close", "hang"] = "end"
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=lambda: dict(SSE_HEADERS))

    def serve(self, exchange: Exchange) -> bool:
        exchange.head(200, {**self.headers, "transfer-encoding": "chunked"})
        for frame in self.frames:
            if self.delay and exchange.wait(self.delay):
                return False
            exchange.chunk(frame)
        if self.after == "end":
            exchange.send(b"0\r\n\r\n")
            return True
        if self.after == "hang":
            exchange.hold()
        return False


@dataclass
class Forever(Answer):
    """A 200 event stream that sends ``first``, then ``frame`` every ``every`` seconds, without end.

    Pings without end (``frame=ping_frame()``), endless chunk events, or one line that never ends
    (``frame=b"x" * 1024`` after ``first=b"data: "``).
    """

    frame: bytes
    every: float = 0.01
    first: bytes = b""

    def serve(self, exchange: Exchange) -> bool:
        exchange.head(200, {**SSE_HEADERS, "transfer-encoding": "chunked"})
        exchange.chunk(self.first)
        while not exchange.wait(self.every):
            exchange.chunk(self.frame)
        return False


@dataclass
class Trickle(Answer):
    """A whole, valid answer sent ``size`` bytes at a time, ``every`` seconds apart."""

    answer: Reply
    every: float = 0.1
    size: int = 1

    def serve(self, exchange: Exchange) -> bool:
        body = self.answer.body
        head = [f"HTTP/1.1 {self.answer.status} {_REASONS.get(self.answer.status, 'Whatever')}"]
        head += [f"{k}: {v}" for k, v in {**self.answer.headers, "content-length": str(len(body))}.items()]
        exchange.send(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        for start in range(0, len(body), self.size):
            if exchange.wait(self.every):
                return False
            exchange.send(body[start : start + self.size])
        return True


@dataclass
class Drop(Answer):
    """Hang up after reading the request, or after sending ``partial`` bytes (a head, part of a body)."""

    partial: bytes = b""

    def serve(self, exchange: Exchange) -> bool:
        if self.partial:
            exchange.send(self.partial)
        return False


@dataclass
class Silence(Answer):
    """Read the request and never answer (a frozen server); the connection stays open."""

    def serve(self, exchange: Exchange) -> bool:
        exchange.hold()
        return False


@dataclass
class Raw(Answer):
    """Send these bytes exactly (status line and all: anything at all), then hang up unless ``keep``."""

    data: bytes
    keep: bool = False

    def serve(self, exchange: Exchange) -> bool:
        exchange.send(self.data)
        return self.keep


@dataclass
class Normal(Answer):
    """The well-behaved answer for the route (what the server gives when nothing is scripted)."""

    def serve(self, exchange: Exchange) -> bool:
        return exchange.server._normal(exchange.seen).serve(exchange)


class HostileServer:
    """``url``, ``requests`` (what arrived), ``ran`` (first /calls received) and ``on()`` to script answers."""

    def __init__(self, environment: str = "lab") -> None:
        self.environment = environment
        self.requests: list[Seen] = []
        self._scripts: dict[str, list[Answer]] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._conns: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._task_ids = (f"{n:032x}" for n in itertools.count(0xABC0001))
        self._listener = socket.create_server((HOST, 0))
        self._listener.settimeout(0.05)  # closing a socket does not wake accept(): look at the stop flag often
        self.port = int(self._listener.getsockname()[1])
        self.url = f"http://{HOST}:{self.port}"
        self._acceptor = threading.Thread(target=self._accept, name="hostile-accept", daemon=True)

    def __repr__(self) -> str:
        return f"HostileServer({self.url!r}, requests={len(self.requests)}, ran={self.ran})"

    # -- what a test uses ---------------------------------------------------------------------

    def on(self, route: str, *answers: Answer) -> HostileServer:
        """Answer ``route`` with these, in order; the last one repeats. No answers: back to normal."""
        with self._lock:
            if answers:
                self._scripts[route] = list(answers)
            else:
                self._scripts.pop(route, None)
        return self

    def reset(self) -> HostileServer:
        """Forget every script: each route answers normally again (what was received is kept)."""
        with self._lock:
            self._scripts.clear()
        return self

    @property
    def ran(self) -> int:
        """How many /call requests arrived without a task_id: the times the tool would have run."""
        return sum(1 for seen in self.requests if seen.route == "call")

    def count(self, route: str | None = None) -> int:
        """Requests received on ``route`` (all of them if None)."""
        return sum(1 for seen in self.requests if route is None or seen.route == route)

    def start(self) -> HostileServer:
        self._acceptor.start()
        return self

    def refuse(self) -> None:
        """Stop accepting connections (new ones are refused); the open ones go on. An answer may call it."""
        with contextlib.suppress(OSError):
            self._listener.close()

    def stop(self) -> None:
        """Stop accepting, close every connection (ending endless answers), and let the threads go."""
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                conn.close()
        for thread in [self._acceptor, *self._threads]:
            if thread.is_alive():
                thread.join(timeout=2)

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the server ---------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with self._lock:
                self._conns.add(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), name="hostile-conn", daemon=True)
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = bytearray()
        try:
            while not self._stopped.is_set():
                seen = self._read_request(conn, buffer)
                if seen is None:
                    return
                self.requests.append(seen)
                conn.settimeout(None)
                if not self._answer_for(seen).serve(Exchange(self, conn, seen)):
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._conns.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def _read_request(self, conn: socket.socket, buffer: bytearray) -> Seen | None:
        conn.settimeout(0.05)
        while b"\r\n\r\n" not in buffer:
            if not self._recv(conn, buffer):
                return None
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        buffer[:] = rest
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, path, _ = [*request_line.split(" "), "", ""][:3]
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = self._read_chunked(conn, buffer)
            if body is None:
                return None
        else:
            length = int(headers.get("content-length") or 0)
            while len(buffer) < length:
                if not self._recv(conn, buffer):
                    return None
            body, buffer[:] = bytes(buffer[:length]), buffer[length:]
        path_only = path.split("?", 1)[0]
        route = path_only.rstrip("/").rsplit("/", 1)[-1]
        seen = Seen(method, path, headers, body, time.monotonic(), route)
        if route == "call" and seen.task_id is not None:
            seen.route = "resume"
        return seen

    def _read_chunked(self, conn: socket.socket, buffer: bytearray) -> bytes | None:
        body = bytearray()
        while True:
            while b"\r\n" not in buffer:
                if not self._recv(conn, buffer):
                    return None
            size_line, _, rest = bytes(buffer).partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            while len(rest) < size + 2:
                if not self._recv(conn, buffer):
                    return None
                size_line, _, rest = bytes(buffer).partition(b"\r\n")
            body += rest[:size]
            buffer[:] = rest[size + 2 :]
            if size == 0:
                return bytes(body)

    def _recv(self, conn: socket.socket, buffer: bytearray) -> bool:
        """Read more bytes; False when the client hung up or the server stopped."""
        while not self._stopped.is_set():
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            if not data:
                return False
            buffer += data
            return True
        return False

    def _answer_for(self, seen: Seen) -> Answer:
        with self._lock:
            script = self._scripts.get(seen.route)
            if script:
                return script.pop(0) if len(script) > 1 else script[0]
        return self._normal(seen)

    def _normal(self, seen: Seen) -> Answer:
        """What a well-behaved ORS server (ors-sdk's shapes) answers."""
        env, route = self.environment, seen.route
        task = {"id": 0, "question": "1+1"}
        tool = {"name": "step", "description": "take a step", "input_schema": {"type": "object", "properties": {}}}
        answers: dict[str, Any] = {
            "health": {"status": "ok"},
            "list_environments": [env],
            "splits": [{"name": "test", "type": "test"}],
            "tasks": {"tasks": [task]},
            "task_range": {"tasks": [task]},
            "num_tasks": {"num_tasks": 1},
            "task": {"task": task},
            "tools": {"tools": [tool]},
            "task_tools": {"tools": [tool]},
            "prompt": [{"text": "What is 1+1?", "detail": None, "type": "text"}],
            "create": {"sid": seen.headers.get("x-session-id", "")},
            "ping": {"status": "ok"},
            "delete": {"status": "ok"},
        }
        if route in answers:
            return Json(answers[route])
        if route == "call":
            return Events((task_id_frame(next(self._task_ids)), END_OK))
        if route == "resume":
            return Events((task_id_frame(str(seen.task_id)), END_OK))
        return Json({"detail": "Not Found"}, status=404)
