"""A session: one live episode on one task, opened on first use, kept alive by pings, deleted when it ends.

``AsyncSession`` opens with one ``POST /create`` (a session id made here), pings every
``ping_interval`` seconds, and is deleted however it ends (``close()``, the ``async with`` block,
its client's end); a delete cannot be cut short by a cancel. Its live view, if any, starts through
the display hook (``ors_lab.display.live``) before the ``/create``, so that it sees all of it, and
the session shows itself through ``ors_lab.display.bundle``: it knows nothing of widgets.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import uuid
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import httpx2

from ors_lab import display
from ors_lab.client._send import _dumps
from ors_lab.client.shielding import outlast_cancel
from ors_lab.client.tap import describe_error
from ors_lab.events import CloseEvent, OpenEvent, PingEvent
from ors_lab.protocol.answers import prompt_blocks, tool_specs
from ors_lab.protocol.errors import (
    ConnectionFailedError,
    ORSError,
    OutcomeUnknownError,
    ServerError,
    SessionClosedError,
    SessionNotFoundError,
)
from ors_lab.protocol.models import Block, Task, ToolResult, ToolSpec
from ors_lab.protocol.replay import REPLAY_HEADER, ROLLOUT

if TYPE_CHECKING:  # annotations only: the client makes environments, which make sessions; none imports back up
    from ors_lab.client._environment import AsyncEnvironment

__all__ = ["DELETE_ATTEMPTS", "DELETE_TIMEOUT", "AsyncSession", "delete_session"]

DELETE_TIMEOUT = 10.0
"""The most a session's delete takes, its retries included: how long Ctrl-C or a cancel can wait on a
server that does not answer (a live one answers in milliseconds; deletes of several sessions run at once).
A wait for a free connection comes on top: with more deletes at once than ``connections``, the later
ones wait for the earlier, rather than give up on a session they never got to delete."""
DELETE_ATTEMPTS = 3


def _listing(names: list[str], limit: int = 20) -> str:
    """``a, b, c`` (the first ``limit``, then how many more)."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown}, ... ({len(names)} in all)"


class AsyncSession:
    """A live episode on one task: ``prompt()``, ``tools()``, ``call()``; kept alive until closed.

    The first of them opens it (``open()`` and ``async with`` open it too); it is then kept alive
    (a ping every 10 s) until ``close()``, the end of the ``async with`` block, or its client's end.
    In a notebook it shows its live view where it opens (``view``), and again when displayed.
    ``events`` is where it publishes for its whole life: its environment's stream when it was made.
    """

    def __init__(
        self,
        environment: AsyncEnvironment,
        *,
        task: Task | Mapping[str, Any] | None,
        split: str | None,
        index: int | None,
        secrets: Mapping[str, str] | None,
        view: bool = True,
        rollout: int | None = None,
    ) -> None:
        self.client = environment.client
        self.environment = environment.name
        self.events = environment.events
        self._env = environment
        self._tools: list[ToolSpec] | None = None  # the last tools() answer, to name them when a call's tool is not
        self.task = task if isinstance(task, Task) or task is None else Task(environment.name, dict(task))
        self.split = split
        self.index = index
        self.rollout = rollout
        self.sid = uuid.uuid4().hex
        self.pings = 0
        self.calls = 0
        self._secrets = dict(secrets) if secrets else None
        self._state = "new"
        self._opening = asyncio.Lock()  # one /create, whichever first use gets there first
        self._dead: ORSError | None = None
        self._pinger: asyncio.Task[None] | None = None
        self._wants_view = view
        self.view: display.Live | None = None
        """The live view, once the session opened with one (started through ``ors_lab.display.live``)."""

    def __repr__(self) -> str:
        where = f"task={self.task!r}" if self.task is not None else f"split={self.split!r}, index={self.index}"
        return f"AsyncSession({self.environment!r}, {where}, sid={self.sid!r}, {self.state})"

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
    def state(self) -> str:
        """``new``, ``opening``, ``open``, ``expired`` (the server no longer knows it) or ``closed``."""
        if self._dead is not None and self._state != "closed":
            return "expired"
        return self._state

    @property
    def closed(self) -> bool:
        """True once the session was closed or found dead."""
        return self._state == "closed" or self._dead is not None

    async def __aenter__(self) -> Self:
        __tracebackhide__ = True
        await self._ensure_open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        __tracebackhide__ = True
        if exc is None:
            await self.close()
            return
        try:
            await self.close()
        except Exception as close_error:  # the block's own exception matters more; the server reaps in 900 s
            exc.add_note(f"ors_lab: deleting session {self.sid} failed too: {close_error!r}")

    async def _json(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        __tracebackhide__ = True
        return await self.client._json(self.events, method, path, body, session_id=self.sid, **options)

    async def open(self) -> None:
        """Create the session on the server (one request) and start its keep-alive pings.

        Not needed before ``prompt()``, ``tools()`` or ``call()``: the first of them opens it.
        """
        __tracebackhide__ = True
        async with self._opening:
            if self._state != "new":
                raise SessionClosedError(f"the session is already {self._state}", session_id=self.sid)
            await self._open()

    async def _ensure_open(self) -> None:
        """Open a new session (once, whatever races to it); raise if it is closed or dead."""
        __tracebackhide__ = True
        if self._state in ("new", "opening"):  # "opening": another first use holds the lock; wait for it
            async with self._opening:
                if self._state == "new":
                    await self._open()
        self._check()

    async def _open(self) -> None:
        __tracebackhide__ = True
        body: dict[str, Any] = {"env_name": self.environment}
        if self.task is not None:
            body["task_spec"] = dict(self.task.spec)
        else:
            body["split"], body["index"] = self.split, self.index
        headers = None if self.rollout is None else {REPLAY_HEADER: f"{ROLLOUT}{self.rollout}"}
        if self._secrets:
            if await self.client._server_flavor(self.events) == "openreward":
                secrets = {name: {"value": value} for name, value in self._secrets.items()}
                headers = {**(headers or {}), "X-Secrets": base64.b64encode(_dumps(secrets)).decode()}
            else:
                body["secrets"] = self._secrets
        if self._wants_view and self.view is None:  # subscribed before the /create, so it sees all of it
            self.view = display.live(self, self.events)
        self._state = "opening"
        self.client._sessions.add(self)
        create = asyncio.ensure_future(self._create(body, headers))
        try:
            await outlast_cancel(create, grace=DELETE_TIMEOUT)
        except BaseException:  # cancelled, or failed: the server may hold the session all the same
            try:
                await self._abandon(create)
            finally:
                self._end_view()
            raise
        self._opened()

    async def _create(self, body: dict[str, Any], headers: dict[str, str] | None) -> Any:
        """``POST /create``; a refusal for an unknown environment, split or task index says so (``_explain``)."""
        __tracebackhide__ = True
        try:
            return await self._json("POST", "/create", body, extra_headers=headers)
        except ServerError as exc:
            explained = await self._env._explain(exc, body)
            if explained is exc:
                raise
            raise explained from None

    def _opened(self) -> None:
        self._state = "open"
        if self.events.active:
            self.events.publish(OpenEvent(session_id=self.sid, environment=self.environment, split=self.split,
                                          task_index=self.index,
                                          task=None if self.task is None else self.task.spec))  # fmt: skip
        self._pinger = asyncio.create_task(self._keep_alive(), name=f"ors-lab ping {self.sid}")

    async def _abandon(self, create: asyncio.Future[Any]) -> None:
        """After a cancel or a failure during ``open``: delete the session unless the server surely never made it.

        It surely did not when it refused the ``/create`` (a 4xx) or the request never left; after a
        5xx, a dropped connection, a malformed answer or a cancel it may have, so it is deleted (a
        delete of a session the server does not know is harmless).
        """
        failed = None if create.cancelled() else create.exception()
        refused = isinstance(failed, ServerError) and failed.status_code < 500
        if refused or (isinstance(failed, ConnectionFailedError) and failed.before_sending):
            self._state = "closed"
            self.client._sessions.discard(self)
            return
        if failed is None and not create.cancelled():
            self._opened()  # it was made: recorded as opened, then closed like any other
        with contextlib.suppress(Exception):  # a failed delete is on its close event; the cancel goes on
            await self.close()

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self.client.ping_interval)
            try:
                await self.ping()
            except SessionNotFoundError as exc:
                self._dead = exc
                return
            except (ORSError, httpx2.HTTPError):
                continue  # a missed ping is not fatal: the server waits 900 s

    async def ping(self) -> None:
        """Tell the server the session is in use (the keep-alive task does this every 10 s)."""
        __tracebackhide__ = True
        await self._json("POST", "/ping")
        self.pings += 1
        if self.events.active:
            self.events.publish(PingEvent(session_id=self.sid))

    def _check(self) -> None:
        __tracebackhide__ = True
        if self._dead is not None:
            raise SessionClosedError(f"the session is dead: {self._dead.message}", session_id=self.sid)
        if self._state != "open":
            hint = "; start a new one with env.session(...)" if self._state == "closed" else ""
            raise SessionClosedError(f"the session is {self._state}{hint}", session_id=self.sid)

    def _next_call(self) -> int:
        self.calls += 1
        return self.calls

    async def prompt(self) -> list[Block]:
        """The task's prompt, as blocks (opens a new session first)."""
        __tracebackhide__ = True
        await self._ensure_open()
        blocks: list[Block] = await self._json(
            "GET", f"/{self.environment}/prompt", parse=prompt_blocks, expect="[block, ...]"
        )
        return blocks

    async def tools(self) -> list[ToolSpec]:
        """The tools of this session: the shared ones, then the task's own (opens a new session first)."""
        __tracebackhide__ = True
        await self._ensure_open()
        tools: list[ToolSpec] = await self._json(
            "GET", f"/{self.environment}/task_tools", parse=tool_specs, expect='{"tools": [...]}'
        )
        self._tools = tools
        return tools

    async def call(self, name: str, input: Mapping[str, Any] | None = None) -> ToolResult:
        """Run a tool; the ``ToolResult`` has ``ok=False`` (not an exception) for ORS logic failures.

        A new session is opened first. For a tool the session does not have, its ``error`` names the tool
        and lists the session's tools.
        """
        __tracebackhide__ = True
        await self._ensure_open()
        result = await self.client._call(self, name, input or {})
        if not result.ok and (result.reason == "not_found" or (result.error or "").endswith("is not a valid tool")):
            result = await self._name_the_tools(result, name)
        return result

    async def _name_the_tools(self, result: ToolResult, name: str) -> ToolResult:
        """A not-found result whose error lists the session's tools (the last ``tools()``, else asked for)."""
        try:
            tools = self._tools if self._tools is not None else await self.tools()
        except ORSError:  # the server's own words stand
            return result
        names = [tool.name for tool in tools]
        if name in names:
            return result
        listed = f"the tools of this session are: {_listing(names)}" if names else "this session has no tools"
        return dataclasses.replace(result, error=f"{result.error or f'no tool {name!r}'}; {listed}")

    async def close(self) -> None:
        """Stop the pings and delete the session on the server (safe to call twice).

        The delete is tried up to ``DELETE_ATTEMPTS`` times within ``DELETE_TIMEOUT`` seconds (not
        counting a wait for a free connection, when all are in use), and a cancel (Ctrl-C) cannot cut
        it short: the cancelled caller waits for it, then gets its ``CancelledError``. The ``close``
        event says whether the server confirmed it (``ok``); a delete that still failed raises its
        error (``OutcomeUnknownError`` when the server never answered in time).
        """
        __tracebackhide__ = True
        await self._close(DELETE_TIMEOUT)

    async def _close(self, bound: float) -> None:
        """``close()``, its delete given ``bound`` seconds at most."""
        __tracebackhide__ = True
        if self._state in ("closed", "new"):
            self._state = "closed"
            return
        self._state = "closed"
        self.client._sessions.discard(self)
        pinger, self._pinger = self._pinger, None
        if pinger is not None:
            pinger.cancel()
        try:
            await outlast_cancel(self._delete(bound))
        finally:
            self._end_view()

    def _end_view(self) -> None:
        """Detach the live view and draw its final state (it stays displayable)."""
        if self.view is not None:
            self.view.close()

    async def _delete(self, bound: float) -> None:
        """``POST /delete`` until the server confirms it (or no longer knows the session), then the close event."""
        __tracebackhide__ = True
        error: Exception | None = None
        try:
            async with asyncio.timeout(bound) as limit:
                for attempt in range(1, DELETE_ATTEMPTS + 1):
                    try:
                        await self._json("POST", "/delete", pause=limit)  # not counting a wait for a connection
                    except SessionNotFoundError:
                        error = None  # the server no longer holds it: nothing left to delete
                    except Exception as exc:  # any failure: try again, then report it
                        error = exc
                        if attempt < DELETE_ATTEMPTS:
                            await asyncio.sleep(self.client.retry.backoff_for(attempt))
                            continue
                    else:
                        error = None
                    break
        except TimeoutError as exc:
            error = OutcomeUnknownError(
                f"the server did not confirm deleting the session within {bound:g} s "
                f"(last error: {describe_error(error) if error is not None else 'none'}); it may still hold "
                "the session until it reaps it (900 s without a ping)",
                session_id=self.sid,
            )
            error.__cause__ = exc
        if self.events.active:
            self.events.publish(CloseEvent(session_id=self.sid, ok=error is None,
                                           error=None if error is None else describe_error(error)))  # fmt: skip
        if error is not None:
            raise error


async def delete_session(env: AsyncEnvironment, sid: str, *, bound: float = DELETE_TIMEOUT) -> None:
    """Delete the session ``sid`` on ``env``'s server: one that no ``AsyncSession`` of this process holds (a Ray
    worker that died had it open). The same ``POST /delete`` as ``AsyncSession.close()``, tried as often, within
    ``bound`` seconds, its ``close`` event on ``env.events``; a delete that still failed raises its error."""
    __tracebackhide__ = True
    session = AsyncSession(env, task=None, split=None, index=None, secrets=None, view=False)
    session.sid = sid
    session._state = "open"  # opened elsewhere: closing it is all that is left
    await session._close(bound)
