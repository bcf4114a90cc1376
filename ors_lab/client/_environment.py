"""An environment: its splits, tasks and tools, and sessions on its tasks; a caller's mistake explained.

``AsyncEnvironment`` asks the stateless endpoints of one environment (``/{env}/splits``, ``tasks``,
``task``, ``task_range``, ``num_tasks``, ``tools``), their answers parsed by
``ors_lab.protocol.answers``, and makes ``AsyncSession`` objects. A bare refusal for an unknown
environment, split or task index is turned into the precise error (``_explain``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ors_lab.client._session import AsyncSession, _listing
from ors_lab.events import EventStream
from ors_lab.protocol import answers
from ors_lab.protocol.errors import ORSError, ServerError, TaskIndexError, UnknownEnvironmentError, UnknownSplitError
from ors_lab.protocol.models import Split, Task, ToolSpec
from ors_lab.protocol.replay import EPISODES, REPLAY_HEADER

if TYPE_CHECKING:  # annotations only: the client makes environments; nothing here imports it at run time
    from ors_lab.client._client import AsyncClient

__all__ = ["AsyncEnvironment"]


class AsyncEnvironment:
    """One environment on a server: its splits, tasks and tools, and sessions on its tasks.

    ``events`` is where it and its sessions publish: the client's stream, unless it was given one.
    """

    def __init__(self, client: AsyncClient, name: str, *, events: EventStream | None = None) -> None:
        self.client = client
        self.name = name
        self._events = events if events is not None else client.events

    @property
    def events(self) -> EventStream:
        """Where it publishes, and a session made from it: its stream (given, or the client's), or in code that
        captures into a stream forwarding there (``EventStream.capture``: an evaluation's episode), that one."""
        return self._events.routed()

    def __repr__(self) -> str:
        return f"AsyncEnvironment({self.name!r}, url={self.client.base_url!r})"

    async def _json(self, method: str, path: str, body: Any = None, **options: Any) -> Any:
        __tracebackhide__ = True
        try:
            return await self.client._json(self.events, method, f"/{self.name}/{path}", body, **options)
        except ServerError as exc:
            explained = await self._explain(exc, body)
            if explained is exc:
                raise
            raise explained from None

    async def _explain(self, error: ServerError, body: Any) -> ServerError:
        """The error a caller's mistake deserves, for the bare status a server answers it with: an environment
        the server does not have (a 308 to its default environment, or a 404), a split the environment does not
        have, a task index past the split's end (400 ``Invalid split`` / ``Invalid index``). The facts come from
        the server (its environments, splits or task count); the error itself when they do not show a mistake.
        """
        if type(error) is not ServerError:  # already a precise one (a session not found, a replay mismatch, ...)
            return error
        asked = body if isinstance(body, dict) else {}
        context: dict[str, Any] = {"status_code": error.status_code, "detail": error.detail,
                                   "session_id": error.session_id, "request": error.request}  # fmt: skip
        try:
            if 300 <= error.status_code < 400 or error.status_code == 404:
                names = await self.client.environments()
                if self.name not in names:
                    listed = f"its environments: {_listing(names)}" if names else "it has no environments"
                    return UnknownEnvironmentError(
                        f"unknown environment {self.name!r} at {self.client.base_url}; {listed}",
                        environment=self.name, available=names, **context,
                    )  # fmt: skip
            split, index = asked.get("split"), asked.get("index")
            if error.status_code == 400 and error.detail == "Invalid split" and isinstance(split, str):
                splits = [s.name for s in await self.splits()]
                if split not in splits:
                    return UnknownSplitError(
                        f"unknown split {split!r} of environment {self.name!r}; its splits: {_listing(splits)}",
                        split=split, available=splits, **context,
                    )  # fmt: skip
            if error.status_code == 400 and error.detail == "Invalid index" and isinstance(index, int):
                count = await self.num_tasks(str(split))
                span = f" (0 to {count - 1}, or {-count} to -1 from the end)" if count else ""
                return TaskIndexError(
                    f"no task {index} in split {split!r} of {self.name!r}: it has {count} tasks{span}",
                    split=str(split), index=index, num_tasks=count, **context,
                )  # fmt: skip
        except ORSError:  # the server could not say more: its own answer stands
            return error
        return error

    def _tasks(self, body: Any) -> list[Task]:
        return answers.tasks(body, self.name)

    async def splits(self) -> list[Split]:
        """The environment's splits."""
        __tracebackhide__ = True
        splits: list[Split] = await self._json(
            "GET", "splits", parse=answers.splits,
            expect='[{"name": ..., "type": ...}, ...]',
        )  # fmt: skip
        return splits

    async def tasks(self, split: str) -> list[Task]:
        """Every task of a split."""
        __tracebackhide__ = True
        tasks: list[Task] = await self._json("POST", "tasks", {"split": split}, parse=self._tasks,
                                             expect='{"tasks": [...]}')  # fmt: skip
        return tasks

    async def num_tasks(self, split: str) -> int:
        """How many tasks a split has."""
        __tracebackhide__ = True
        count: int = await self._json("POST", "num_tasks", {"split": split}, parse=answers.task_count,
                                      expect='{"num_tasks": N}')  # fmt: skip
        return count

    async def episodes(self, split: str, rollouts: int = 1) -> list[tuple[int, int]]:
        """The (task index, rollout) pairs an evaluation of ``split`` runs when not told which tasks: each
        task, ``rollouts`` times; from a replay of a trace, the pairs it holds (rollouts below ``rollouts``).

        One ``POST /{env}/num_tasks`` with ``x-ors-lab-replay: episodes``: ``ReplayServer`` and
        ``ReplayTransport`` add the pairs the trace holds to their answer; any other server answers
        the count alone (``ors_lab.protocol.replay``).
        """
        __tracebackhide__ = True
        if rollouts < 1:
            raise ValueError(f"rollouts must be 1 or more, not {rollouts}")
        count, recorded = await self._json(
            "POST", "num_tasks", {"split": split}, extra_headers={REPLAY_HEADER: EPISODES},
            parse=answers.count_and_recorded, expect='{"num_tasks": N}',
        )  # fmt: skip
        if recorded is None:
            return [(index, rollout) for index in range(count) for rollout in range(rollouts)]
        return [(index, rollout) for index, rollout in recorded if rollout < rollouts]

    async def task(self, split: str, index: int) -> Task:
        """One task by position (negative counts from the end)."""
        __tracebackhide__ = True
        task: Task = await self._json(
            "POST", "task", {"split": split, "index": index},
            parse=lambda body: answers.task_of(body, self.name), expect='{"task": {...}}',
        )  # fmt: skip
        return task

    async def task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[Task]:
        """Tasks ``start:stop`` of a split, with Python slice semantics."""
        __tracebackhide__ = True
        tasks: list[Task] = await self._json("POST", "task_range", {"split": split, "start": start, "stop": stop},
                                             parse=self._tasks, expect='{"tasks": [...]}')  # fmt: skip
        return tasks

    async def tools(self) -> list[ToolSpec]:
        """The tools every task of this environment shares."""
        __tracebackhide__ = True
        tools: list[ToolSpec] = await self._json("GET", "tools", parse=answers.tool_specs, expect='{"tools": [...]}')
        return tools

    def session(
        self,
        task: Task | Mapping[str, Any] | None = None,
        *,
        split: str | None = None,
        index: int | None = None,
        secrets: Mapping[str, str] | None = None,
        view: bool = True,
        rollout: int | None = None,
    ) -> AsyncSession:
        """A session on one task, by ``task=`` (a Task or its spec) or by ``split=`` and ``index=``.

        It opens on first use (``await s.call(...)``) and lives until ``close()``; or use it as
        ``async with env.session(split="test", index=0) as s:``, which opens it on entry and deletes
        it on exit. ``view=False``: no live view of this session, whatever ``ol.live_views()`` says (an
        evaluation's episodes, a loop over many sessions). ``rollout``: which rollout of its task this
        session is, for a replay of a trace to give it that rollout's recorded session (``x-ors-lab-replay:
        rollout=N`` on its ``/create``; other servers ignore it). An evaluation's episodes give it.
        """
        if task is not None and (split is not None or index is not None):
            raise ValueError("give either task= or split=/index=, not both")
        if task is None and (split is None or index is None):
            raise ValueError("give either task= or both split= and index=")
        return AsyncSession(self, task=task, split=split, index=index, secrets=secrets, view=view, rollout=rollout)
