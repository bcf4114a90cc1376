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
ipykernel 7 (``shared/notebook-testing.md``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["Runner"]

T = TypeVar("T")

CLEANUP_TIMEOUT = 30.0
"""After Ctrl-C, how long ``Runner.run`` waits for the cancelled coroutine's cleanup."""


class Runner:
    """Runs coroutines to completion for the sync twins."""

    def __init__(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = asyncio.new_event_loop()
            self._thread: threading.Thread | None = threading.Thread(
                target=self._loop.run_forever, name="ors-lab-loop", daemon=True
            )
            self._thread.start()
        else:
            import nest_asyncio2

            nest_asyncio2.apply(self._loop)
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

        Ctrl-C cancels it; on the private loop thread, ``run`` then waits (up to
        ``CLEANUP_TIMEOUT`` seconds) for the cancelled coroutine to finish its cleanup (deleting
        sessions, closing a trace) before re-raising, so that exiting the script does not cut it short.
        """
        if self._thread is None:
            task = asyncio.ensure_future(coro, loop=self._loop)
            try:
                return self._loop.run_until_complete(task)
            except BaseException:
                task.cancel()
                raise
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("the sync Client was called from its own event loop thread; use AsyncClient there")
        ended = threading.Event()

        async def to_the_end() -> T:
            try:
                return await coro
            finally:
                ended.set()

        future = asyncio.run_coroutine_threadsafe(to_the_end(), self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            ended.wait(CLEANUP_TIMEOUT)
            raise

    def close(self) -> None:
        """Stop the private loop thread (nothing to do on a borrowed loop)."""
        if self._thread is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()
