"""The servers' answers, parsed: each endpoint's JSON into models, and an error answer into its typed error.

The one place the client reads what a server answers (the ``/call`` stream has its own:
``call.py``). Each parser takes decoded JSON and raises ``TypeError``, ``ValueError`` (or
``WireFormatError``) saying what is missing; ``decode`` turns that into a ``MalformedResponseError``
naming what was expected. ``server_error`` reads a refusal: a session the server does not know,
a replay's mismatch, an environment still starting, or a plain ``ServerError``. No I/O: the
answers come read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2

from ors_lab.protocol.errors import (
    EnvironmentStartingError,
    MalformedResponseError,
    OutcomeUnknownError,
    ServerError,
    SessionNotFoundError,
)
from ors_lab.protocol.models import Block, Split, Task, ToolSpec, blocks_from_wire
from ors_lab.protocol.replay import MISMATCH, RECORDED_EPISODES, REPLAY_HEADER, mismatch_error

__all__ = [
    "SESSION_NOT_FOUND",
    "array",
    "body_of",
    "count_and_recorded",
    "decode",
    "detail_of",
    "environment_names",
    "object_field",
    "outcome_unknown_error",
    "prompt_blocks",
    "server_error",
    "splits",
    "task_count",
    "task_of",
    "tasks",
    "tool_specs",
]

SESSION_NOT_FOUND = "Active environment not found"
"""The ``detail`` of a 404 for a session the server does not know (unknown, deleted, or reaped)."""


def object_field(body: Any, key: str) -> Any:
    """``body[key]`` of a JSON object, or a ValueError saying what is missing."""
    if not isinstance(body, dict):
        raise TypeError(f"expected a JSON object with {key!r}, got a JSON {type(body).__name__}")
    if key not in body:
        raise ValueError(f"the object has no {key!r} (it has {sorted(body)[:10]})")
    return body[key]


def array(value: Any, what: str) -> list[Any]:
    """``value``, a JSON array, or a TypeError naming ``what`` it should have been."""
    if not isinstance(value, list):
        raise TypeError(f"{what}: expected a JSON array, got a JSON {type(value).__name__}")
    return value


def environment_names(body: Any) -> list[str]:
    """``GET /list_environments``: the names."""
    names = array(body, "environments")
    if not all(isinstance(name, str) for name in names):
        raise TypeError(f"environments: expected names (strings), got {names!r:.80}")
    return names


def task_count(body: Any) -> int:
    """``POST /{env}/num_tasks``: the count."""
    count = object_field(body, "num_tasks")
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"num_tasks: expected an integer, got {count!r:.40}")
    return count


def count_and_recorded(body: Any) -> tuple[int, list[tuple[int, int]] | None]:
    """A ``num_tasks`` answer's count, and the episodes a replay recorded (``ors_lab.protocol.replay``), if any."""
    count = task_count(body)
    pairs = body.get(RECORDED_EPISODES)
    if pairs is None:
        return count, None
    recorded = []
    for pair in array(pairs, RECORDED_EPISODES):
        if not (isinstance(pair, list) and len(pair) == 2 and all(type(n) is int and n >= 0 for n in pair)):
            raise TypeError(f"{RECORDED_EPISODES}: expected [task index, rollout] pairs, got {pair!r:.40}")
        recorded.append((pair[0], pair[1]))
    return count, sorted(recorded)


def tool_specs(body: Any) -> list[ToolSpec]:
    """``GET /{env}/tools`` and ``/task_tools``: the tools."""
    return [ToolSpec.from_wire(tool) for tool in array(object_field(body, "tools"), "tools")]


def splits(body: Any) -> list[Split]:
    """``GET /{env}/splits``: the splits."""
    return [Split.from_wire(split) for split in array(body, "splits")]


def tasks(body: Any, environment: str) -> list[Task]:
    """``POST /{env}/tasks`` and ``/task_range``: the tasks of ``environment``."""
    return [Task.from_wire(spec, environment) for spec in array(object_field(body, "tasks"), "tasks")]


def task_of(body: Any, environment: str) -> Task:
    """``POST /{env}/task``: the task."""
    return Task.from_wire(object_field(body, "task"), environment)


def prompt_blocks(body: Any) -> list[Block]:
    """``GET /{env}/prompt``: the blocks."""
    return list(blocks_from_wire(body))


def _show(content: bytes, limit: int = 200) -> str:
    """The start of a body, for an error message."""
    text = repr(content[:limit].decode("utf-8", "replace"))
    return text + "..." if len(content) > limit else text


def decode(response: httpx2.Response, session_id: str | None, parse: Callable[[Any], Any] | None, expect: str) -> Any:
    """The JSON of a 2xx answer (UTF-8, as JSON is), shaped by ``parse``; else MalformedResponseError."""
    content = response.content
    try:
        value = json.loads(content)
        return value if parse is None else parse(value)
    except (ValueError, KeyError, IndexError, TypeError) as exc:  # ValueError: JSON, UTF-8, WireFormatError
        kind = response.headers.get("content-type") or "no content-type"
        raise MalformedResponseError(
            f"expected {expect} (ORS JSON), got a {response.status_code} answer ({kind}, {len(content)} bytes) "
            f"that is not: {type(exc).__name__}: {exc}; it starts {_show(content)}",
            session_id=session_id,
            request=response.request,
        ) from exc


def body_of(response: httpx2.Response) -> Any:
    """An answer's JSON, else its text."""
    try:
        return response.json()
    except ValueError:
        return response.text


def detail_of(response: httpx2.Response) -> Any:
    """An error answer's ``detail`` (FastAPI's), else its whole body."""
    body = body_of(response)
    return body.get("detail", body) if isinstance(body, dict) else body


def server_error(
    response: httpx2.Response, session_id: str | None, task_id: str | None = None, *, starting_timeout: float
) -> ServerError:
    """The typed error for a refusal (``starting_timeout``: how long the client waited for a starting environment)."""
    detail = detail_of(response)
    status = response.status_code
    context: dict[str, Any] = {"session_id": session_id, "task_id": task_id, "request": response.request}
    message = f"HTTP {status}: {detail}"
    if status == 404 and detail == SESSION_NOT_FOUND:
        return SessionNotFoundError(
            f"{message} (the session is unknown, deleted, or was reaped after 900 s idle)",
            status_code=status,
            detail=detail,
            **context,
        )
    if response.headers.get(REPLAY_HEADER) == MISMATCH:
        return mismatch_error(status, body_of(response), **context)
    if status == 503 and response.headers.get("x-backend-state", "").lower() == "starting":
        return EnvironmentStartingError(
            f"{message} (still starting after {starting_timeout:g} s)",
            status_code=status,
            detail=detail,
            **context,
        )
    return ServerError(message, status_code=status, detail=detail, **context)


def outcome_unknown_error(
    response: httpx2.Response, session_id: str, name: str, request: httpx2.Request
) -> OutcomeUnknownError:
    """A first /call answered with a 5xx: a gateway may have passed it on before failing."""
    detail = detail_of(response)
    return OutcomeUnknownError(
        f"HTTP {response.status_code} to {name!r}: {detail}; the request may have reached the environment, "
        "so the tool may or may not have run, and the call is not sent again",
        status_code=response.status_code,
        detail=detail,
        session_id=session_id,
        request=request,
    )
