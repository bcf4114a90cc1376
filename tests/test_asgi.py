"""The servers ors_lab starts (replay, proxy, feed, watch page): their sockets."""

from __future__ import annotations

import socket
import statistics
import time
from typing import Any

import httpx

from ors_lab.asgi import listen, serve_app


async def _two_part_answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An answer written as the replay server writes one: its head, then its body."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def test_a_two_part_answer_goes_out_without_waiting_for_a_delayed_ack() -> None:
    """The listening socket is TCP by name with TCP_NODELAY, so its connections have it too: an answer written in
    two parts reaches a keep-alive client at once (without it, each waited some 40 ms for the client's delayed ACK
    of the head before the body left)."""
    sock = listen(0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        sock.close()
    with serve_app(_two_part_answer) as url, httpx.Client() as client:
        took = []
        for _ in range(30):
            started = time.perf_counter()
            assert client.post(url, content=b'{"split":"test"}').text == "ok"
            took.append(time.perf_counter() - started)
    assert statistics.median(took) < 0.02, f"median {statistics.median(took) * 1e3:.1f} ms a request"
