"""What an evaluation asks of its environment besides its episodes, so that its trace describes it.

- ``describe(env, events)``, once per run: the server's environments, the environment's splits and
  its shared tools, published on the run's stream. A replay of the run's trace answers them, so a
  ``ReplayServer(trace)`` explored in a notebook says what the live server said.
- ``TaskSpecs``: each task's spec (``env.task(split, index)``), asked once per task by the first of
  its episodes to start, shared by its other rollouts (``Episode.task``), recorded and replayed.
- ``the_split(env, split)``: the split to run when none is given, the environment's only one.

A trace recorded before evaluations asked these holds no answer to them: replayed, each of these
requests gets a ``ReplayMismatchError``, and the run goes on without it (``Episode.task`` is None).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterable

from ors_lab.client import AsyncEnvironment
from ors_lab.events import EventStream
from ors_lab.protocol.errors import ReplayMismatchError, SplitRequiredError
from ors_lab.protocol.models import Task

__all__ = ["TaskSpecs", "describe", "the_split"]


async def the_split(env: AsyncEnvironment, split: str | None) -> str:
    """``split`` when given; else the environment's only split, and ``SplitRequiredError`` (a ``ValueError``)
    naming its splits when it has several, or none."""
    __tracebackhide__ = True
    if split is not None:
        return split
    names = [s.name for s in await env.splits()]
    if len(names) == 1:
        return names[0]
    has = f"has {len(names)} splits: {', '.join(names)}" if names else "lists no splits"
    raise SplitRequiredError(f"environment {env.name!r} {has}; pass split= to say which one to evaluate",
                             environment=env.name, available=names)  # fmt: skip


async def describe(env: AsyncEnvironment, events: EventStream) -> None:
    """Ask the server's environments, and ``env``'s splits and shared tools, publishing the exchanges on
    ``events`` (the run's stream: ``env`` and its client publish there, ``EventStream.capture``)."""
    __tracebackhide__ = True
    with events.capture():
        for ask in (env.client.environments, env.splits, env.tools):
            with contextlib.suppress(ReplayMismatchError):  # a replay of a trace recorded without them
                await ask()


class TaskSpecs:
    """The specs of a run's tasks: each asked for once (``env.task(split, index)``) by the first of its episodes
    to ask, whose other rollouts wait for that answer and share it. A task some episodes were ``expect``ed of is
    let go once the last of them took it; any other is kept while this lives. An ask that failed is not kept
    (the next rollout asks again). Against a replay of a trace recorded before evaluations asked for their
    tasks, a task's spec is None.

    The requests are ``env``'s: on the stream of the episode asking, when ``env`` publishes on a stream the
    episode captures (``EventStream.capture``).
    """

    def __init__(self, env: AsyncEnvironment, split: str) -> None:
        self._env = env
        self._split = split
        self._expected: dict[int, int] = {}  # task index -> episodes still to ask
        self._specs: dict[int, Task | None] = {}
        self._asking: dict[int, asyncio.Lock] = {}  # kept for a task until its spec is in: one ask at a time

    def __repr__(self) -> str:
        return f"TaskSpecs({self._env.name!r}, {self._split!r}, {len(self._specs)} held)"

    def expect(self, indices: Iterable[int]) -> None:
        """One more episode of each index given (an index twice: two) will ask."""
        for index, count in Counter(indices).items():
            self._expected[index] = self._expected.get(index, 0) + count

    async def get(self, index: int) -> Task | None:
        """Task ``index``'s spec, asked for if no episode of it asked before (or the asks before failed)."""
        __tracebackhide__ = True
        try:
            if index not in self._specs:
                async with self._asking.setdefault(index, asyncio.Lock()):
                    if index not in self._specs:
                        self._specs[index] = await self._ask(index)
                        del self._asking[index]  # its waiters hold the lock; later askers find the spec
            return self._specs[index]
        finally:
            left = self._expected.get(index)
            if left is not None and left <= 1:  # its last expected episode: nothing will ask again
                del self._expected[index]
                self._specs.pop(index, None)
            elif left is not None:
                self._expected[index] = left - 1

    async def _ask(self, index: int) -> Task | None:
        __tracebackhide__ = True
        try:
            return await self._env.task(self._split, index)
        except ReplayMismatchError:  # a replay of a trace recorded before runs asked for their tasks
            return None
