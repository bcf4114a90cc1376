"""A replay with a way out: what its trace cannot answer goes to an upstream ORS server, recorded.

``ForwardingReplay(trace, upstream, recorder=...)`` serves the trace on 127.0.0.1 as ``ReplayServer``
does, and sends to the upstream, through the recording proxy, what the trace holds no answer to:
a ``/create`` whose task has no unclaimed recorded session (a new episode: then every request of
that session goes upstream too), and stateless requests (``/tools``, ``/tasks``, ...) it never
recorded. A request that differs inside a recorded episode is still a replay mismatch. It is the
pytest plugin's ``new_episodes`` record mode. It does not list the episodes its trace holds
(``ors_lab.protocol.replay``): an evaluation with ``tasks=None`` runs every task, and records those
the trace lacks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Self

from ors_lab.analysis.trace import Trace
from ors_lab.asgi import read_body, serve_app
from ors_lab.events import Subscriber
from ors_lab.protocol.replay import EPISODES, REPLAY_HEADER
from ors_lab.replay.engine import MISMATCH_HEADER, ROOT_STATELESS, STATELESS, Answer, ReplayEngine
from ors_lab.replay.faults import Fault
from ors_lab.replay.proxy import RecordingProxy
from ors_lab.replay.serve import _Cut, replay_app

__all__ = ["ForwardingReplay"]


class _Forward(Exception):
    """Raised by the engine for a request the upstream must answer."""


class _ForwardingEngine(ReplayEngine):
    """Replays recorded episodes; new episodes and unknown stateless requests raise ``_Forward``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.forwarded_sessions: set[str] = set()

    def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Answer:
        if headers.get(REPLAY_HEADER) == EPISODES:  # not just the recorded episodes: the new ones are recorded here
            headers = {name: value for name, value in headers.items() if name != REPLAY_HEADER}
        sid = (headers.get("x-session-id") or "").strip()
        if sid and sid in self.forwarded_sessions:
            raise _Forward
        answer = super().handle(method, path, headers, body)
        if dict(answer.headers).get(MISMATCH_HEADER) != "mismatch":
            return answer
        if path == "/create" and sid:
            self.forwarded_sessions.add(sid)
            raise _Forward
        if path in ROOT_STATELESS or path.endswith(STATELESS):
            raise _Forward
        return answer  # a step inside a recorded episode that differs: a mismatch, as in replay


class ForwardingReplay:
    """The trace served on 127.0.0.1, the upstream behind it: ``with ForwardingReplay(...) as replay:``.

    ``url`` is where to point a client; ``forwarded`` counts the requests the upstream answered
    (published on ``proxy.events``, to which ``recorder`` is subscribed); ``unplayed()`` lists the
    recorded requests never asked for.
    """

    def __init__(
        self,
        trace: Trace,
        upstream: str,
        recorder: Subscriber | None = None,
        *,
        speed: float = 0.0,
        faults: Iterable[Fault | str] = (),
        allow_repeats: bool = False,
    ) -> None:
        self.engine = _ForwardingEngine(trace, speed=speed, faults=faults, allow_repeats=allow_repeats)
        self.proxy = RecordingProxy(upstream, recorder)
        self.forwarded = 0
        self.url = ""
        self._serving: contextlib.ExitStack | None = None

    def unplayed(self) -> list[str]:
        """Recorded requests that were never asked for."""
        return self.engine.unplayed()

    def _app(self) -> Any:
        replay = replay_app(self.engine)
        proxy = self.proxy.app

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await proxy(scope, receive, send)  # lifespan: the proxy closes its upstream client at shutdown
                return
            body = await read_body(receive)

            def again() -> Any:
                given = False

                async def receive_again() -> dict[str, Any]:
                    nonlocal given
                    if not given:
                        given = True
                        return {"type": "http.request", "body": body, "more_body": False}
                    return dict(await receive())

                return receive_again

            try:
                await replay(scope, again(), send)
            except _Forward:
                self.forwarded += 1
                await proxy(scope, again(), send)

        return app

    def __enter__(self) -> Self:
        stack = contextlib.ExitStack()
        self.url = stack.enter_context(serve_app(self._app(), quiet=(_Cut,)))
        self._serving = stack
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._serving is not None:
            self._serving.close()
            self._serving = None
