"""The hostile cases shared by the client's tests (test_client.py) and the same cases through the recording
proxy (test_through_proxy.py): retry policies, bounds, the scripted answers, and one use per ORS request."""

from __future__ import annotations

import asyncio
from typing import Any

import ors_lab as ol
from ors_lab.client.policy import RetryPolicy
from tests.hostile.server import (
    END_OK,
    Answer,
    Drop,
    Events,
    Html,
    Raw,
    Reply,
    end_frame,
    sse,
    task_id_frame,
)

TASK_ID = "feedfacefeedfacefeedfacefeedface"
FAST = RetryPolicy(backoff=0.01, max_backoff=0.05)
STARTING = {"content-type": "application/json", "x-backend-state": "starting", "retry-after": "0"}
BOUND = 8.0  # no test may take longer than this, whatever the client does wrong


def starting(retry_after: str | None = "0") -> Reply:
    """openreward's 503 while the environment starts, with this Retry-After (None: no header)."""
    headers = dict(STARTING)
    if retry_after is None:
        del headers["retry-after"]
    else:
        headers["retry-after"] = retry_after
    return Reply(503, b'{"detail":"Environment still starting."}', headers)


async def call_once(url: str, **options: Any) -> ol.ToolResult:
    """Open a session on `lab`, run `step` once, close; bounded by BOUND."""
    async with asyncio.timeout(BOUND), ol.AsyncClient(url, **options) as client:
        async with client.environment("lab").session(split="test", index=0) as session:
            return await session.call("step", {"n": 1})


class CutThenRefuse(Answer):
    """Send task_id, hang up, and stop listening: every resume finds nothing to connect to."""

    def serve(self, exchange: Any) -> bool:
        Events((task_id_frame(TASK_ID),), after="close").serve(exchange)
        exchange.server.refuse()
        return False


# -- one use per ORS request, and what each one gets wrong ----------------------------------------------------------


async def use_tasks(client: ol.AsyncClient) -> Any:
    return await client.environment("lab").tasks("test")


async def use_num_tasks(client: ol.AsyncClient) -> Any:
    return await client.environment("lab").num_tasks("test")


async def use_task(client: ol.AsyncClient) -> Any:
    return await client.environment("lab").task("test", 0)


async def use_splits(client: ol.AsyncClient) -> Any:
    return await client.environment("lab").splits()


async def use_tools(client: ol.AsyncClient) -> Any:
    return await client.environment("lab").tools()


async def use_environments(client: ol.AsyncClient) -> Any:
    return await client.environments()


async def use_health(client: ol.AsyncClient) -> Any:
    return await client.health()


async def use_open(client: ol.AsyncClient) -> Any:
    async with client.environment("lab").session(split="test", index=0):
        pass


async def use_prompt(client: ol.AsyncClient) -> Any:
    async with client.environment("lab").session(split="test", index=0) as session:
        return await session.prompt()


async def use_task_tools(client: ol.AsyncClient) -> Any:
    async with client.environment("lab").session(split="test", index=0) as session:
        return await session.tools()


def use_id(value: Any) -> str | None:
    """A test id for a use (its request's name), None for other parameters."""
    name = getattr(value, "__name__", None)
    return name.removeprefix("use_") if name else None


WRONG_SHAPES = [
    (use_environments, "list_environments", {"environments": ["lab"]}),
    (use_splits, "splits", [{"title": "test"}]),
    (use_tasks, "tasks", {"task": []}),
    (use_tasks, "tasks", {"tasks": "all of them"}),
    (use_tasks, "tasks", {"tasks": [1, 2]}),
    (use_num_tasks, "num_tasks", {"num_tasks": "many"}),
    (use_num_tasks, "num_tasks", {"num_tasks": None}),
    (use_num_tasks, "num_tasks", ["1"]),
    (use_task, "task", {"tasks": {}}),
    (use_tools, "tools", {"tools": [{"description": "no name"}]}),
    (use_tools, "tools", None),
    (use_prompt, "prompt", {"text": "not a list"}),
    (use_prompt, "prompt", [{"type": "text"}]),
    (use_task_tools, "task_tools", {"tools": 3}),
]

NOT_JSON = {
    "html": Html(),
    "empty": Reply(200, b"", {"content-type": "application/json"}),
    "truncated": Reply(200, b'{"tasks": [', {"content-type": "application/json"}),
    "invalid-utf8": Reply(200, b'{"tasks": [{"id": "\xff\xfe"}]}', {"content-type": "application/json"}),
}
USES = [use_environments, use_health, use_splits, use_tasks, use_num_tasks, use_task, use_tools, use_open,
        use_prompt, use_task_tools]  # fmt: skip
ROUTES = {use_environments: "list_environments", use_health: "health", use_splits: "splits", use_tasks: "tasks",
          use_num_tasks: "num_tasks", use_task: "task", use_tools: "tools", use_open: "create",
          use_prompt: "prompt", use_task_tools: "task_tools"}  # fmt: skip

BROKEN_CONNECTIONS = {
    "drop": Drop(),
    "cut-body": Drop(b'HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n["la'),
    "not-http": Raw(b"SPDY/9 nonsense\r\n\r\n"),
    "bad-length": Raw(b"HTTP/1.1 200 OK\r\ncontent-length: banana\r\n\r\n[]"),
}

FIRST_CALL_DROPS = {
    "nothing": Drop(),
    "status-line": Drop(b"HTTP/1.1 200 OK\r\n"),
    "head": Drop(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"),
}

MALFORMED_CALL_STREAMS = [
    ("chunk-first", (sse("chunk", "x"), END_OK), "before task_id"),
    ("bad-json", (task_id_frame(TASK_ID), sse("end", "{not json")), "not a valid RunToolOutput"),
    ("invalid-utf8", (task_id_frame(TASK_ID), sse("end", b'{"ok": true, \xff}')), "not a valid RunToolOutput"),
    ("wrong-type", (task_id_frame(TASK_ID), sse("end", '{"ok": "yes"}')), "not a valid RunToolOutput"),
    ("wrong-shape", (task_id_frame(TASK_ID), sse("end", "[1, 2]")), "not a valid RunToolOutput"),
    ("two-task-ids", (task_id_frame(TASK_ID), task_id_frame("0" * 32)), "task_id changed"),
]

HUGE_TEXT = "y" * (4 << 20)


def huge_line_answer() -> Events:
    """A /call whose result holds HUGE_TEXT (4 MiB) on one data line, sent in 64 KiB chunks."""
    result_wire = {"ok": True, "output": {"blocks": [{"text": HUGE_TEXT, "detail": None, "type": "text"}],
                                          "metadata": None, "reward": 0.5, "finished": False}}  # fmt: skip
    end = end_frame(result_wire)
    pieces = tuple(end[i : i + 65536] for i in range(0, len(end), 65536))
    return Events((task_id_frame(TASK_ID), *pieces))
