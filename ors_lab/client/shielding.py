"""Cleanup that a cancel cannot cut short: ``await outlast_cancel(session_delete())``.

Cancelling a task (``task.cancel()``, Ctrl-C through the sync client, an ``asyncio.timeout``)
interrupts whatever it awaits. For the steps that put things back (deleting a session on the
server, closing a trace) that is the wrong moment to stop: a ``/delete`` cut off half-way leaves
the session open on the server, and a second cancel arriving while the first one's cleanup runs
used to do exactly that. ``outlast_cancel`` runs the step as a task of its own and waits for it
through any number of cancels, then re-raises the cancellation. ``grace`` bounds how long it keeps
waiting once cancelled (the step itself is then cancelled); the steps given none bound themselves
(a session's delete: ``DELETE_TIMEOUT``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["outlast_cancel"]

T = TypeVar("T")


async def outlast_cancel(step: Awaitable[T], *, grace: float | None = None) -> T:
    """Await ``step`` to its end even if the calling task is cancelled meanwhile (once or many times).

    Returns its result or raises its exception; if the caller was cancelled while waiting, raises
    ``CancelledError`` once ``step`` has ended (its own exception is then retrieved and dropped:
    cleanup steps record their failures themselves). With ``grace``, a cancelled caller waits at
    most ``grace`` seconds more, then ``step`` is cancelled.
    """
    __tracebackhide__ = True
    task = asyncio.ensure_future(step)
    loop = asyncio.get_running_loop()
    cancelled = False
    deadline: float | None = None
    while not task.done():
        timeout = None if deadline is None else max(0.0, deadline - loop.time())
        try:
            await asyncio.wait({task}, timeout=timeout)
        except asyncio.CancelledError:
            cancelled = True
            if grace is not None and deadline is None:
                deadline = loop.time() + grace
            continue
        if deadline is not None and not task.done() and loop.time() >= deadline:
            task.cancel()  # out of grace: the step stops at its next await
            deadline = None
            grace = None
    if cancelled:
        if not task.cancelled():
            task.exception()  # retrieved: the step has reported it its own way
        raise asyncio.CancelledError
    return task.result()
