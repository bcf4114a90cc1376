"""The sync twins: ``Client`` → ``Environment`` → ``Session``, name for name with the async ones.

Each method runs its async twin to completion through a ``Runner`` (see ``runner.py``), so the sync
client works in scripts and inside Jupyter's running loop alike, and sessions keep pinging while
the caller is idle. Ctrl-C during a call cancels it cleanly and raises ``KeyboardInterrupt``
(``Runner.run``); leaving a ``with session:`` block that way still deletes the session.

A notebook works cell by cell: ``s = env.session(...)`` in one cell, ``s.call(...)`` in the next
(the first call opens it), ``s.close()`` whenever. The session lives in between (its pings run on
the kernel's loop while the kernel idles). A client closes what it holds when it is closed, dropped
(with every environment and session made from it) or left open at interpreter exit (a finalizer).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

import httpx2

from ors_lab import display
from ors_lab.client.aclient import (
    DEFAULT_TIMEOUT,
    HEARTBEAT_TIMEOUT,
    PING_INTERVAL,
    AsyncClient,
    AsyncEnvironment,
    AsyncSession,
)
from ors_lab.client.policy import RetryPolicy
from ors_lab.client.runner import Runner
from ors_lab.client.url import server_url
from ors_lab.client.wire import DEFAULT_CONNECTIONS
from ors_lab.events import EventStream, Subscriber
from ors_lab.protocol.call import MAX_RESULT_BYTES
from ors_lab.protocol.models import Block, Split, Task, ToolResult, ToolSpec
from ors_lab.protocol.sse import MAX_LINE_BYTES

__all__ = ["Client", "Environment", "Session"]


class Client:
    """An ORS server, from synchronous code (scripts and notebooks): ``Client(url)``.

    Takes the same arguments as ``AsyncClient`` (``timeout``, ``request_timeout`` and ``call_timeout``
    bound a network step, an exchange and a whole ``call()``; ``connections`` the connections to the
    server, 512 by default, which N tools running at once all hold: see there); ``client.aio`` is the async
    client underneath, and ``client.events`` its event stream. It raises the same typed errors.

    ``with`` (or ``close()``) closes it. One left open closes itself once nothing refers to it (nor to
    an environment or session made from it) and at interpreter exit: its sessions are deleted and its
    connections closed, in a few seconds at most, without a warning.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | httpx2.Timeout = DEFAULT_TIMEOUT,
        transport: httpx2.AsyncBaseTransport | None = None,
        recorder: Subscriber | None = None,
        retry: RetryPolicy | None = None,
        ping_interval: float = PING_INTERVAL,
        heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
        max_result_bytes: int = MAX_RESULT_BYTES,
        max_line_bytes: int = MAX_LINE_BYTES,
        call_timeout: float | None = None,
        request_timeout: float | None = None,
        connections: int | None = DEFAULT_CONNECTIONS,
    ) -> None:
        server_url(base_url)  # a URL without http:// fails here, before a loop thread is started for it
        self._runner = Runner()
        self.aio = AsyncClient(
            base_url,
            api_key=api_key,
            headers=headers,
            timeout=timeout,
            transport=transport,
            recorder=recorder,
            retry=retry,
            ping_interval=ping_interval,
            heartbeat_timeout=heartbeat_timeout,
            max_result_bytes=max_result_bytes,
            max_line_bytes=max_line_bytes,
            call_timeout=call_timeout,
            request_timeout=request_timeout,
            connections=connections,
        )
        self.base_url = self.aio.base_url
        self.events = self.aio.events
        self._finalizer = weakref.finalize(self, _close_left_open, self._runner, self.aio)

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"

    @property
    def runner(self) -> Runner:
        """What runs this client's coroutines: the kernel's loop in Jupyter, else a private loop thread."""
        return self._runner

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every session still open, then the connections."""
        __tracebackhide__ = True
        self._finalizer.detach()
        try:
            self._runner.run(self.aio.aclose())
        finally:
            self._runner.close()

    def health(self) -> bool:
        """True when ``GET /health`` answers ``{"status": "ok"}``."""
        __tracebackhide__ = True
        return self._runner.run(self.aio.health())

    def environments(self) -> list[str]:
        """The environment names the server hosts; the first is its default."""
        __tracebackhide__ = True
        return self._runner.run(self.aio.environments())

    def environment(self, name: str, *, events: EventStream | None = None) -> Environment:
        """One environment by name (no request is made until you use it); ``events`` as in ``AsyncClient``."""
        return Environment(self, self.aio.environment(name, events=events))


def _close_left_open(runner: Runner, aio: AsyncClient) -> None:
    """A client's finalizer (it was dropped, or the interpreter exits): close what it holds, end its loop."""
    aio._guard.finish()
    runner.close()


class Environment:
    """One environment on a server: its splits, tasks and tools, and sessions on its tasks."""

    def __init__(self, client: Client, aio: AsyncEnvironment) -> None:
        self._client = client  # kept: the client lives (and keeps its sessions) while this does
        self._runner = client.runner
        self.aio = aio
        self.name = aio.name

    def __repr__(self) -> str:
        return f"Environment({self.name!r}, url={self.aio.client.base_url!r})"

    @property
    def events(self) -> EventStream:
        """Where it publishes (``AsyncEnvironment.events``)."""
        return self.aio.events

    @property
    def runner(self) -> Runner:
        """What runs this environment's coroutines (its client's runner)."""
        return self._runner

    def splits(self) -> list[Split]:
        """The environment's splits."""
        __tracebackhide__ = True
        return self._runner.run(self.aio.splits())

    def tasks(self, split: str) -> list[Task]:
        """Every task of a split."""
        __tracebackhide__ = True
        return self._runner.run(self.aio.tasks(split))

    def num_tasks(self, split: str) -> int:
        """How many tasks a split has."""
        __tracebackhide__ = True
        return self._runner.run(self.aio.num_tasks(split))

    def episodes(self, split: str, rollouts: int = 1) -> list[tuple[int, int]]:
        """The (task index, rollout) pairs an evaluation of ``split`` runs when not told which tasks (each
        task ``rollouts`` times; from a replay of a trace, the pairs it holds)."""
        __tracebackhide__ = True
        return self._runner.run(self.aio.episodes(split, rollouts))

    def task(self, split: str, index: int) -> Task:
        """One task by position (negative counts from the end)."""
        __tracebackhide__ = True
        return self._runner.run(self.aio.task(split, index))

    def task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[Task]:
        """Tasks ``start:stop`` of a split, with Python slice semantics."""
        __tracebackhide__ = True
        return self._runner.run(self.aio.task_range(split, start, stop))

    def tools(self) -> list[ToolSpec]:
        """The tools every task of this environment shares."""
        __tracebackhide__ = True
        return self._runner.run(self.aio.tools())

    def session(
        self,
        task: Task | Mapping[str, Any] | None = None,
        *,
        split: str | None = None,
        index: int | None = None,
        secrets: Mapping[str, str] | None = None,
        view: bool = True,
        rollout: int | None = None,
    ) -> Session:
        """A session on one task, by ``task=`` or by ``split=`` and ``index=``.

        Its first ``prompt()``, ``tools()`` or ``call()`` opens it, and it lives until ``close()`` (or
        its client's end): a notebook's cells can share it. ``with env.session(...) as s:`` is the
        scoped form: opened on entry, deleted on exit. ``view=False``: no live view of this session,
        whatever ``ol.live_views()`` says. ``rollout``: which rollout of its task this session is, for a replay
        to give it that rollout's recorded session (``AsyncEnvironment.session``).
        """
        aio = self.aio.session(task, split=split, index=index, secrets=secrets, view=view, rollout=rollout)
        return Session(self._client, aio)


class Session:
    """A live episode on one task: ``prompt()``, ``tools()``, ``call()``; kept alive until closed.

    The first of them opens it (so do ``open()`` and ``with``). In a notebook it shows its live view
    in the cell that opens it, updated in place by the calls of later cells; displaying it shows the
    same view.
    """

    def __init__(self, client: Client, aio: AsyncSession) -> None:
        self._client = client  # kept: the client lives (and keeps this session open) while this does
        self._runner = client.runner
        self.aio = aio
        self.sid = aio.sid
        self.environment = aio.environment
        self.task = aio.task
        self.events = aio.events

    def __repr__(self) -> str:
        return repr(self.aio).replace("AsyncSession(", "Session(", 1)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """As the display draws it (its live view, else its card), or its text without one."""
        return display.bundle(self) or {"text/plain": repr(self)}

    def _display_(self) -> display.Shown:
        """marimo's display protocol (asked before ``_repr_html_``): the bundle, so a live view's widget."""
        return display.Shown(self._repr_mimebundle_())

    def _repr_html_(self) -> str | None:
        bundle = display.bundle(self)
        return None if bundle is None else bundle.get("text/html")

    @property
    def view(self) -> display.Live | None:
        """The live view, once the session opened with one."""
        return self.aio.view

    @property
    def pings(self) -> int:
        """Keep-alive pings sent so far."""
        return self.aio.pings

    @property
    def closed(self) -> bool:
        """True once the session was closed or found dead."""
        return self.aio.closed

    @property
    def state(self) -> str:
        """``new``, ``opening``, ``open``, ``expired`` or ``closed`` (as ``AsyncSession.state``)."""
        return self.aio.state

    def __enter__(self) -> Self:
        self._runner.run(self.aio.__aenter__())
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        __tracebackhide__ = True
        self._runner.run(self.aio.__aexit__(exc_type, exc, tb))

    def open(self) -> None:
        """Create the session on the server and start its keep-alive pings (the first call does it too)."""
        __tracebackhide__ = True
        self._runner.run(self.aio.open())

    def ping(self) -> None:
        """Tell the server the session is in use (done every 10 s on its own)."""
        __tracebackhide__ = True
        self._runner.run(self.aio.ping())

    def prompt(self) -> list[Block]:
        """The task's prompt, as blocks (opens a new session first)."""
        __tracebackhide__ = True
        return self._runner.run(self.aio.prompt())

    def tools(self) -> list[ToolSpec]:
        """The tools of this session: the shared ones, then the task's own (opens a new session first)."""
        __tracebackhide__ = True
        return self._runner.run(self.aio.tools())

    def call(self, name: str, input: Mapping[str, Any] | None = None) -> ToolResult:
        """Run a tool (opening a new session first); ``ok=False`` in the result for ORS logic failures."""
        __tracebackhide__ = True
        return self._runner.run(self.aio.call(name, input))

    def close(self) -> None:
        """Stop the pings and delete the session on the server (safe to call twice)."""
        __tracebackhide__ = True
        self._runner.run(self.aio.close())
