"""A client's lifetime: ``_ExitGuard`` closes a client left open (its loop ends, it is dropped, or at exit)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Protocol

import httpx2

from ors_lab.client.tap import describe_error

__all__ = ["CLOSING_DELETES", "EXIT_TIMEOUT", "LOGGED_FAILURES"]

log = logging.getLogger(__name__)

EXIT_TIMEOUT = 3.0
"""The most a client closed for its user (left open when its loop ends, dropped, at exit) waits for its deletes."""
CLOSING_DELETES = 64
"""How many sessions a client's close deletes at once."""
LOGGED_FAILURES = 3
"""A client closed for its user logs this many failed deletes one by one, the rest as a count."""


class _Closable(Protocol):
    """What the guard needs of an open session (an ``AsyncSession``): its id, and a bounded close."""

    @property
    def sid(self) -> str: ...

    async def _close(self, bound: float) -> None: ...


class _ExitGuard:
    """Closes a client left open: when its event loop ends, when it is dropped, or when the interpreter exits.

    It holds the client's set of open sessions and its transport, never the client, so a dropped client
    is still collected. On the client's first request in an event loop it starts a task there that only
    waits to be cancelled: ``asyncio.run`` cancels every task left once its coroutine returns, and waits
    for them (a sync client's private loop ends the same way); ``finish``, the client's finalizer, cancels
    it when the client is dropped or the interpreter exits. Cancelled, the task deletes the sessions still
    open (``CLOSING_DELETES`` at a time, ``EXIT_TIMEOUT`` seconds in all; a delete that fails is logged),
    then closes the connections.
    """

    def __init__(self, sessions: set[_Closable], transport: httpx2.AsyncBaseTransport) -> None:
        self.sessions = sessions
        self.transport = transport
        self.loop: asyncio.AbstractEventLoop | None = None
        """The loop watched (kept after its end, so that the requests of its last cleanups do not re-arm)."""
        self.task: asyncio.Task[None] | None = None

    def arm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Watch ``loop``, the running one, where the client makes its first request."""
        self.loop = loop
        self.task = loop.create_task(self._watch(), name="ors-lab client guard")

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(asyncio.CancelledError):
            await loop.create_future()
        if self.task is not asyncio.current_task():
            return  # stood down by aclose(), which closed everything itself
        deadline = loop.time() + EXIT_TIMEOUT
        failures: list[tuple[_Closable, BaseException]] = []
        while True:
            try:
                failures = await self.close(max(deadline - loop.time(), 0.5))
            except asyncio.CancelledError:  # cancelled again, as its loop ends: a close cancelled before it began
                if self.sessions and loop.time() < deadline:  # left its session open; close those again
                    continue
            break
        for session, error in failures[:LOGGED_FAILURES]:
            log.warning("ors_lab: session %s, left open, could not be deleted: %s", session.sid, describe_error(error))
        if len(failures) > LOGGED_FAILURES:
            log.warning("ors_lab: %d more sessions left open could not be deleted", len(failures) - LOGGED_FAILURES)

    async def close(self, bound: float) -> list[tuple[_Closable, BaseException]]:
        """Delete the open sessions (``CLOSING_DELETES`` at a time, ``bound`` seconds in all), then the connections.

        Returns the sessions whose delete failed, with the error. Called by ``aclose()`` it also stands
        the watching task down (the next request arms a new one).
        """
        sessions = list(self.sessions)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + bound
        turns = asyncio.Semaphore(CLOSING_DELETES)

        async def close(session: _Closable) -> None:
            async with turns:
                await session._close(max(deadline - loop.time(), 0.1))

        try:
            results = await asyncio.gather(*(close(session) for session in sessions), return_exceptions=True)
        finally:
            await self.transport.aclose()
            task = self.task
            if task is not asyncio.current_task():
                self.task = self.loop = None
                if task is not None:
                    task.cancel()
        return [(session, result) for session, result in zip(sessions, results, strict=True)
                if isinstance(result, BaseException)]  # fmt: skip

    def finish(self) -> None:
        """Close now, from any thread: the client was dropped, or the interpreter exits (its finalizer).

        The watching task is cancelled on its loop and, where this thread can wait for it, waited for
        (``EXIT_TIMEOUT`` + 1 seconds at most): on a loop running in another thread (a sync client's), or
        on a loop that no longer runs (a notebook kernel's, at exit). On the loop's own thread the loop
        runs the cleanup next. Nothing to do when the client never ran, was closed, or its loop is gone.
        """
        task = self.task
        if task is None or task.done():
            return
        loop = task.get_loop()
        if loop.is_closed():
            return
        if not loop.is_running():
            task.cancel()
            _run_until_done(loop, task, EXIT_TIMEOUT + 1)
            return
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if here:  # the loop runs the cleanup once this finalizer is done
            loop.call_soon(task.cancel)
            return
        ended = threading.Event()

        def cancel() -> None:  # on the loop's thread
            task.add_done_callback(lambda _: ended.set())
            task.cancel()

        with contextlib.suppress(RuntimeError):  # closed meanwhile
            loop.call_soon_threadsafe(cancel)
            ended.wait(EXIT_TIMEOUT + 1)


def _run_until_done(loop: asyncio.AbstractEventLoop, task: asyncio.Task[None], bound: float) -> None:
    """Run ``loop``, which no longer runs, until ``task`` is done (``bound`` seconds at most).

    A run that a stop ends early is run again: a loop that has stopped can still hold a stop its owner
    scheduled, which ends whatever runs it next. ipykernel's shutdown stops the kernel's loop twice, the
    second time from a timer 0.1 s later (``exit_now``); an exit slower than that to reach the finalizers
    (under load) had that stop end the run under the deletes, and nest_asyncio2's ``run_until_complete``
    then leaves the loop stopping, so ``run_forever`` (which clears it) is what runs here. Our own stops
    (the task done, the bound reached) act only while this runs, so none is left for the loop's next run.
    """
    ours = True

    def stop(_: object = None) -> None:
        if ours:
            loop.stop()

    deadline = loop.time() + bound
    task.add_done_callback(stop)
    try:
        while not task.done() and (left := deadline - loop.time()) > 0:
            timer = loop.call_later(left, stop)
            try:
                loop.run_forever()
            finally:
                timer.cancel()
    except Exception:  # closed meanwhile, or another loop runs in this thread
        pass
    finally:
        ours = False
        task.remove_done_callback(stop)
