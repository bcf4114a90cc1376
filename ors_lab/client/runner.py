"""Run the async client from synchronous code, in a script or inside a running event loop.

Two ways, chosen once, when the sync ``Client`` is made:

- **A loop is already running in this thread** (Jupyter's kernel, or code under
  ``asyncio.run``): ``nest_asyncio2`` is applied to that loop (lazily, only then) and each call
  runs to completion on it. Session keep-alive tasks live on the kernel's loop, which keeps running
  while the notebook sits idle between cells, so pings go on.
- **No loop is running** (a script): a private loop runs in a daemon thread for the client's
  life, and calls are handed to it. Its keep-alive tasks run between calls too; this is what the
  official ``ors-sdk`` sync client gets wrong, letting idle sessions be reaped.

``nest_asyncio2`` rather than ``nest_asyncio``: the latter breaks JupyterLab's Run All on
ipykernel 7 (``shared/notebook-testing.md``). Of what ``nest_asyncio2.apply`` patches, the loop's
re-entrant ``run_until_complete`` / ``_run_once`` are kept, and asyncio's own (C) ``Task`` and
``Future`` are put back in place of the pure-Python ones it sets for the whole process
(``_keep_native_tasks``): every task and future of the kernel would otherwise run in Python, the
evaluation's and the kernel's own, for the rest of the session. The nested ``_run_once`` also drops
cancelled timers as asyncio's own does (``_prune_cancelled_timers``).

Ctrl-C (and the notebook's stop button, which sends SIGINT) becomes a cancel of the running call:
its cleanup runs as a cancelled task's does (sessions deleted, a trace closed), more Ctrl-C do not
cut it short (``CLEANUP_TIMEOUT`` bounds the wait), then a bare ``KeyboardInterrupt`` is raised from
``run``. For the call's duration a handler of ours takes SIGINT (on the main thread; in a script only
in place of Python's default one), so the signal never raises inside whatever code happens to run:
on Jupyter's loop, the library's, the HTTP connections' or the kernel's own tasks (which could kill the kernel);
in a script, a finalizer that a garbage collection runs in the main thread as the call starts, where
Python swallows the ``KeyboardInterrupt`` ("Exception ignored in ...") and the call went on to its end.
The script's wait also wakes every ``WAKE_EVERY`` seconds: a signal that arrives just as the main
thread enters its wait does not wake it, and Python runs its handler only at the thread's next step.

``close()`` ends the private loop as ``asyncio.run`` ends its own: every task still on it is cancelled
and waited for (``ENDING_TIMEOUT`` at most), so a client running there closes its sessions first.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import signal
import sys
import threading
import time
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["Runner"]

T = TypeVar("T")

CLEANUP_TIMEOUT = 30.0
"""After Ctrl-C, how long ``Runner.run`` waits for the cancelled coroutine's cleanup (deleting its
sessions, closing a trace) before raising ``KeyboardInterrupt`` anyway."""


BLOCKED_AFTER = 2.0
"""After a first Ctrl-C whose cancel the loop has not run for this long, the next one interrupts whatever
holds the loop (see ``_SigintCancels``)."""

WAKE_EVERY = 0.1
"""How often a script's sync call wakes from its wait, to run a Ctrl-C handler whose wake-up it missed."""

ENDING_TIMEOUT = 5.0
"""How long ``Runner.close`` waits for the tasks it cancels (a client's own cleanup takes at most 3 s)."""


class _SigintCancels:
    """While a nested run lasts, Ctrl-C cancels its task instead of raising ``KeyboardInterrupt`` wherever
    the loop happens to stand (inside the HTTP connections, inside the kernel's own tasks: that is what killed kernels).

    The first SIGINT schedules the cancel; later ones are ignored (the cleanup is bounded), unless the
    loop has still not run the cancel ``BLOCKED_AFTER`` seconds after the first: then synchronous code
    holds the loop (an agent calling ``time.sleep``), and the SIGINT raises ``KeyboardInterrupt`` where
    it stands, as Python would. Only on the main thread, only when no other run of ours already listens,
    and never when SIGINT is ignored; with ``default_only``, only in place of Python's default handler
    (a script's own handler keeps SIGINT).
    """

    active = False

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.task: asyncio.Future[Any] | None = None
        self.requested = self.delivered = False
        self.first = 0.0
        """When the first SIGINT came (``time.monotonic()``)."""
        self._previous: Any = None
        self._installed = False

    def install(self, *, default_only: bool = False) -> None:
        if _SigintCancels.active or threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGINT)
        if previous in (signal.SIG_IGN, None) or (default_only and previous is not signal.default_int_handler):
            return
        self._previous = previous
        signal.signal(signal.SIGINT, self._on_sigint)
        self._installed = _SigintCancels.active = True

    def uninstall(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = _SigintCancels.active = False

    def _on_sigint(self, signum: int, frame: object) -> None:
        if self.requested:
            if not self.delivered and time.monotonic() - self.first > BLOCKED_AFTER:
                raise KeyboardInterrupt  # synchronous code holds the loop: interrupt it where it stands
            return
        self.requested, self.first = True, time.monotonic()
        self.loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:  # on the loop, which only runs once the task is made
        self.delivered = True
        if self.task is not None:
            self.task.cancel()


class Runner:
    """Runs coroutines to completion for the sync twins."""

    def __init__(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = asyncio.new_event_loop()
            self._thread: threading.Thread | None = threading.Thread(
                target=_run_until_stopped, args=(self._loop,), name="ors-lab-loop", daemon=True
            )
            self._thread.start()
        else:
            import nest_asyncio2  # deferred: needed only inside a running loop (a notebook kernel)

            nest_asyncio2.apply(self._loop)
            _keep_native_tasks(self._loop)
            _prune_cancelled_timers(self._loop)
            self._thread = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop every coroutine of this runner runs on."""
        return self._loop

    @property
    def nested(self) -> bool:
        """True when running on a loop that was already running (Jupyter), False for the private thread."""
        return self._thread is None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the runner's loop and return its result.

        Ctrl-C cancels it: the coroutine unwinds as a cancelled task does (deleting its sessions,
        closing a trace), ``run`` waits for that (``CLEANUP_TIMEOUT`` seconds at most; more Ctrl-C
        meanwhile do not cut it short), then raises a bare ``KeyboardInterrupt``. The signal is turned
        into the cancel (see ``_SigintCancels``), so it never lands inside the library's, the kernel's
        or a finalizer's code.

        An exception of ``coro`` is raised as it is, its traceback without the event loop's frames
        (``_without_loop_frames``); the runner's frames are hidden from pytest's and IPython's tracebacks.
        """
        __tracebackhide__ = True
        if self._thread is None:
            return self._run_nested(coro)
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("the sync Client was called from its own event loop thread; use AsyncClient there")
        return self._run_in_thread(coro)

    def _run_nested(self, coro: Coroutine[Any, Any, T]) -> T:
        __tracebackhide__ = True
        interrupt = _SigintCancels(self._loop)
        task: asyncio.Task[T] | None = None
        try:
            interrupt.install()  # first: from here on Ctrl-C cannot land between making the task and running it
            task = interrupt.task = asyncio.ensure_future(coro, loop=self._loop)
            return self._loop.run_until_complete(task)
        except BaseException as exc:
            if task is None:
                coro.close()
            elif not task.done():  # a KeyboardInterrupt raised past the cancel: still let the task clean up
                task.cancel()
                self._loop.run_until_complete(asyncio.wait({task}, timeout=CLEANUP_TIMEOUT))
                if not task.done():
                    task.add_done_callback(_retrieve)
            if interrupt.requested or isinstance(exc, KeyboardInterrupt):
                raise KeyboardInterrupt from None
            exc.__traceback__ = _without_loop_frames(exc.__traceback__)  # what the bare raise raises with
            raise
        finally:
            interrupt.uninstall()

    def _run_in_thread(self, coro: Coroutine[Any, Any, T]) -> T:
        __tracebackhide__ = True
        interrupt = _SigintCancels(self._loop)
        interrupt.install(default_only=True)  # first: from here on a Ctrl-C is recorded, never raised mid-way
        ended = threading.Event()
        tasks: list[asyncio.Task[T]] = []

        def start() -> None:  # on the loop thread
            if interrupt.requested:  # Ctrl-C came before the call began: it never starts
                coro.close()
                ended.set()
                return
            task = interrupt.task = self._loop.create_task(coro)
            task.add_done_callback(lambda _: ended.set())
            tasks.append(task)

        def cancel() -> None:  # on the loop thread, after start (callbacks run in order)
            if tasks:
                tasks[0].cancel()
            else:  # Ctrl-C came before start was even scheduled
                coro.close()
                ended.set()

        try:
            self._loop.call_soon_threadsafe(start)
            _wait_for(ended, interrupt)
        except KeyboardInterrupt:  # raised here all the same: SIGINT is not ours, or a Ctrl-C found the loop held
            self._loop.call_soon_threadsafe(cancel)
            _wait_through_interrupts(ended, CLEANUP_TIMEOUT)
            self._retrieve_later(tasks)
            raise KeyboardInterrupt from None
        finally:
            interrupt.uninstall()
        if interrupt.requested:
            self._retrieve_later(tasks)
            raise KeyboardInterrupt from None
        task = tasks[0]
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error.with_traceback(_without_loop_frames(error.__traceback__))
        return task.result()

    def _retrieve_later(self, tasks: list[asyncio.Task[T]]) -> None:
        """Mark an interrupted call's error as seen, now or (cleanup still running) when it ends."""
        if tasks:
            self._loop.call_soon_threadsafe(tasks[0].add_done_callback, _retrieve)

    def close(self) -> None:
        """End the private loop as ``asyncio.run`` ends its own, and stop its thread (nothing to do on a borrowed loop).

        Every task still on the loop is cancelled and waited for (``ENDING_TIMEOUT`` seconds at most), so
        the clients running there close what they hold; then the loop stops and its thread closes it.
        """
        thread = self._thread
        if thread is None or not thread.is_alive() or self._loop.is_closed():
            return
        loop = self._loop
        if threading.current_thread() is thread:  # from a callback on the loop itself: it cannot wait for itself
            loop.create_task(_end_tasks(ENDING_TIMEOUT)).add_done_callback(lambda _: loop.stop())
            return
        ending = asyncio.run_coroutine_threadsafe(_end_tasks(ENDING_TIMEOUT), loop)
        with contextlib.suppress(Exception):  # past the bound, synchronous code holds the loop: stop it all the same
            ending.result(timeout=ENDING_TIMEOUT + 1)
        with contextlib.suppress(RuntimeError):  # already closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


def _keep_native_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Undo the part of ``nest_asyncio2.apply`` that makes ``asyncio.Task`` and ``asyncio.Future`` the pure-Python
    classes (on Python before 3.14), for the whole process: their C twins run a task's step and a future's callbacks
    at a fraction of the CPU.

    Nesting does not need them: the patched ``_run_once`` takes the running task out of asyncio's current tasks
    around each callback it runs (and puts it back), so a nested run steps C tasks as a plain loop does; on 3.14
    nest_asyncio2 keeps the C classes itself. Only when nest_asyncio2 patched both asyncio and this loop (another
    patcher's loop, such as the archived ``nest_asyncio``'s, is left as it is), and only where asyncio has its C
    accelerator. Tasks and futures made meanwhile stay as they are: asyncio awaits either kind.
    """
    try:
        import _asyncio  # CPython's C accelerator of asyncio: optional
    except ImportError:  # no C accelerator: asyncio is pure Python anyway
        return
    if not (hasattr(asyncio, "_nest_asyncio2") and hasattr(type(loop), "_nest_asyncio2")):
        return
    asyncio.Task = asyncio.tasks.Task = asyncio.tasks._CTask = _asyncio.Task  # type: ignore[misc,attr-defined]
    asyncio.Future = asyncio.futures.Future = asyncio.futures._CFuture = _asyncio.Future  # type: ignore[misc,attr-defined]
    tornado = sys.modules.get("tornado.concurrent")  # nest_asyncio2 made tornado's Future the Python one too
    if tornado is not None and getattr(tornado, "Future", None) is asyncio.futures._PyFuture:  # type: ignore[attr-defined]
        tornado.Future = _asyncio.Future  # type: ignore[attr-defined]


PRUNE_FROM = 100
"""Timers on the heap from which the nested loop drops the cancelled ones once they are most of it (asyncio's own
threshold)."""


def _prune_cancelled_timers(loop: asyncio.AbstractEventLoop) -> None:
    """Give the loop's nested ``_run_once`` (nest_asyncio2's) asyncio's own clean-up of cancelled timers.

    nest_asyncio2's ``_run_once`` only takes cancelled timers off the top of the heap, so every timeout a request sets
    and cancels (some 35 an episode) stays on it until its deadline: each push and pop compares more timers (in
    Python), and their memory is held. Before each pass, when cancelled timers are most of the heap, the heap is made
    again without them, as asyncio's own ``_run_once`` does (one pass over it per as many cancels: linear in all).
    Only on a loop class nest_asyncio2 patched; once.
    """
    cls: Any = type(loop)
    nested = cls._run_once
    if not hasattr(cls, "_nest_asyncio2") or getattr(nested, "prunes", False):
        return

    def _run_once(self: Any) -> None:
        scheduled = self._scheduled
        if len(scheduled) > PRUNE_FROM and self._timer_cancelled_count * 2 > len(scheduled):
            kept = []
            for handle in scheduled:
                if handle._cancelled:
                    handle._scheduled = False
                else:
                    kept.append(handle)
            heapq.heapify(kept)
            self._scheduled = kept
            self._timer_cancelled_count = 0
        nested(self)

    _run_once.prunes = True  # type: ignore[attr-defined]
    cls._run_once = _run_once


def _run_until_stopped(loop: asyncio.AbstractEventLoop) -> None:
    """The private loop thread: run the loop until ``Runner.close`` stops it, then close it."""
    try:
        loop.run_forever()
    finally:
        loop.close()


async def _end_tasks(bound: float) -> None:
    """Cancel every other task of this loop and wait for them, ``bound`` seconds at most."""
    current = asyncio.current_task()
    tasks = {task for task in asyncio.all_tasks() if task is not current}
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=bound)


def _wait_for(ended: threading.Event, interrupt: _SigintCancels) -> None:
    """Wait for ``ended``; after a Ctrl-C, ``CLEANUP_TIMEOUT`` seconds at most.

    It wakes every ``WAKE_EVERY`` seconds: a SIGINT that arrives as the thread enters the wait does not
    interrupt it, and its handler runs only at the thread's next Python step.
    """
    while not ended.wait(WAKE_EVERY):
        if interrupt.requested and time.monotonic() - interrupt.first > CLEANUP_TIMEOUT:
            return


def _wait_through_interrupts(ended: threading.Event, bound: float) -> None:
    """Wait for ``ended``, ``bound`` seconds at most, whatever more Ctrl-C come meanwhile."""
    deadline = time.monotonic() + bound
    while not ended.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        with contextlib.suppress(KeyboardInterrupt):
            ended.wait(left)


_LOOP_MODULES = ("asyncio.", "nest_asyncio2", "concurrent.futures")


def _without_loop_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the frames of the event loop's machinery (asyncio's tasks and futures, nest_asyncio2): in a
    traceback they stand between the caller's line and the library's, saying only how a coroutine was run."""
    kept: list[TracebackType] = []
    while tb is not None:
        if not str(tb.tb_frame.f_globals.get("__name__", "")).startswith(_LOOP_MODULES):
            kept.append(tb)
        tb = tb.tb_next
    rebuilt = None
    for entry in reversed(kept):
        rebuilt = TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a finished task's exception as seen (the interrupt is what is reported)."""
    if not task.cancelled():
        task.exception()
