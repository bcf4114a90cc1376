"""Serving our own ASGI apps (the recording proxy, the replay server) with uvicorn on 127.0.0.1.

``serve_app(app)`` runs uvicorn in a background thread with its own event loop for the duration of
a ``with`` block and yields the base URL; ``run_app(app)`` serves in the foreground until SIGINT or
SIGTERM (the command line). ``listen(port)`` takes the port first, so that a command can fail with one
clear ``OSError`` before it creates anything, and hand the socket to ``run_app(sock=...)``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["HOST", "lifespan", "listen", "read_body", "run_app", "serve_app"]

HOST = "127.0.0.1"


def _config(app: Any, port: int) -> Any:
    import uvicorn  # the server: loaded when one is served

    return uvicorn.Config(
        app,
        host=HOST,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="auto",
        interface="asgi3",  # every app here is one; uvicorn's guess takes a bound method for ASGI2
        timeout_keep_alive=60,
        timeout_graceful_shutdown=2,
    )


async def lifespan(receive: Any, send: Any) -> None:
    """Answer an ASGI ``lifespan`` scope: none of our apps has anything to start or stop."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def read_body(receive: Any) -> bytes:
    """The whole request body of an ASGI ``http`` scope."""
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if not message.get("more_body"):
            return body


class _Quiet(logging.Filter):
    """Drops uvicorn's error log for exceptions an app raises on purpose (to drop a connection)."""

    def __init__(self, quiet: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.quiet = quiet

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (error is not None and isinstance(error, self.quiet))


def _quieten(quiet: tuple[type[BaseException], ...]) -> None:
    logger = logging.getLogger("uvicorn.error")
    if quiet and not any(isinstance(f, _Quiet) and f.quiet == quiet for f in logger.filters):
        logger.addFilter(_Quiet(quiet))


@contextlib.contextmanager
def serve_app(
    app: Any, *, port: int = 0, startup_timeout: float = 10.0, quiet: tuple[type[BaseException], ...] = ()
) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (``port=0``: a free port) in a thread; yield ``http://127.0.0.1:PORT``.

    A port in use is an ``OSError`` that names it. Exceptions of the ``quiet`` types end their
    connection without being logged.
    """
    import uvicorn  # the server: loaded when one is served

    _quieten(quiet)
    sock = listen(port)  # a port in use is an OSError here, before any thread starts
    server = uvicorn.Server(_config(app, sock.getsockname()[1]))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="ors-lab-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"the server did not start on {HOST}:{port}")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{HOST}:{bound}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def listen(port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:``port`` (0: a free one), or an ``OSError`` that says which port.

    Made as a TCP socket by name (``IPPROTO_TCP``), with ``TCP_NODELAY``: asyncio sets ``TCP_NODELAY`` only
    on the connections of such a socket, and without it each response written in two parts (head, then
    body) waits for the client's delayed ACK, some 40 ms."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {HOST}:{port} ({exc.strerror})") from None
    return sock


def run_app(
    app: Any,
    *,
    port: int = 0,
    on_ready: Any = None,
    quiet: tuple[type[BaseException], ...] = (),
    sock: socket.socket | None = None,
) -> None:
    """Serve ``app`` on 127.0.0.1 in the foreground until SIGINT or SIGTERM (on ``sock`` if given)."""
    import asyncio  # with uvicorn, only when serving in the foreground

    import uvicorn  # the server: loaded when one is served

    _quieten(quiet)
    if sock is None:
        sock = listen(port)
    server = uvicorn.Server(_config(app, sock.getsockname()[1]))

    async def main() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():  # noqa: ASYNC110  uvicorn offers no start event
            await asyncio.sleep(0.01)
        if server.started and on_ready is not None:
            on_ready(f"http://{HOST}:{server.servers[0].sockets[0].getsockname()[1]}")
        await task

    with sock:  # uvicorn's server owns it while it serves; closed here whatever happens
        asyncio.run(main())
