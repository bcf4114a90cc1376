"""A session's view, folded: the plain data ``SessionState`` keeps from one session's events.

``SessionFold`` is built only from the events the client publishes for one session (its
``session_id``): the ``/create`` request and the ``open`` event; the ``/prompt`` and
``/task_tools`` answers; each ``/call``'s request (the tool and its input), the ``task_id``,
``chunk``, ``end`` and ``error`` events of its stream as they arrive, and its ``result`` or
``call_error``; retries and drops; every ``ping``; the ``close``. A response ``404 Active
environment not found`` marks the session expired; an open that never succeeded, failed.

What it keeps is bounded whatever the session does: the newest ``FULL_STEPS`` steps keep their
input and output (each output's text cut at ``OUTPUT_CHARS``, images up to ``IMAGE_CHARS``), the
``LISTED_STEPS`` before them one line each, and older steps only in the counts and the total.
A result is parsed for display only up to ``RAW_CHARS`` of JSON; while it streams, the text of
its blocks shows as far as it has arrived. How it is drawn: ``session_render`` (text and HTML)
and ``session_snapshot`` (the front end's data).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from ors_lab.events import (
    CallErrorEvent,
    CloseEvent,
    DisconnectEvent,
    Event,
    OpenEvent,
    RequestEvent,
    ResponseEvent,
    ResultEvent,
    RetryEvent,
    SSEEvent,
)
from ors_lab.protocol.answers import SESSION_NOT_FOUND
from ors_lab.protocol.models import Block, ImageBlock, TextBlock, ToolResult, blocks_from_wire

__all__ = [
    "FULL_STEPS",
    "IMAGE_BUDGET",
    "IMAGE_CHARS",
    "INPUT_CHARS",
    "LISTED_STEPS",
    "OUTPUT_CHARS",
    "RAW_CHARS",
    "SessionFold",
    "partial_text",
]

FULL_STEPS = 5
"""The newest steps shown whole (input and output); older ones are one line each."""
LISTED_STEPS = 50
"""Steps listed at all; older ones are only counted (and summed in the total reward)."""
OUTPUT_CHARS = 4000
"""The most characters of one output's text on screen (the rest is counted)."""
INPUT_CHARS = 2000
"""The most characters of one call's input (indented JSON) on screen."""
INPUT_KEEP_BYTES = 64 * 1024
"""A call's input bigger than this (its request body) is kept as the start of its text only."""
PROMPT_CHARS = 8000
"""The most characters of the prompt's text on screen."""
LINE_CHARS = 120
"""A one-line summary's length."""
IMAGE_CHARS = 256 * 1024
"""The largest image (base64 characters) drawn live; a bigger one is named, not drawn."""
IMAGE_BUDGET = 1024 * 1024
"""The most image data (base64 characters) in one front-end update: the prompt's, then the newest steps'."""
RAW_CHARS = 2 * 1024 * 1024
_NOT_FOUND = SESSION_NOT_FOUND.encode()

_IMAGE_MIME = re.compile(r"image/[\w.+-]{1,40}")
_TEXT_KEY = re.compile(r'"text"\s*:\s*"')
_JSON_STRING = re.compile(r'(?:[^"\\]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*')


def partial_text(raw: str, limit: int = OUTPUT_CHARS) -> str:
    """The text of the ``"text"`` fields in the start of a result's JSON, as far as it has arrived.

    A ``/call`` result streams as slices of one JSON document; this reads the text blocks out of
    a prefix of it (escapes decoded, a cut escape dropped), up to ``limit`` characters. It is a
    preview: the parsed result replaces it at ``end``.
    """
    parts: list[str] = []
    size = 0
    for key in _TEXT_KEY.finditer(raw):
        body = _JSON_STRING.match(raw, key.end())
        if body is None:  # pragma: no cover - the pattern matches the empty string
            continue
        try:
            text = json.loads('"' + body.group() + '"')
        except ValueError:
            continue
        if text and "\ud800" <= text[-1] <= "\udbff":  # half of a pair cut by the slice: the rest is coming
            text = text[:-1]
        parts.append(text[: limit - size])
        size += len(parts[-1])
        if size >= limit:
            break
    return _utf8("\n".join(parts))


def _utf8(text: str) -> str:
    """``text`` without lone surrogates (a cut ``\\ud83d``), which JSON over the comm cannot carry."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _line(text: str, limit: int = LINE_CHARS) -> str:
    """``text`` on one line, cut at ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _body_text(body: bytes | None, limit: int = 300) -> str:
    """An HTTP error answer's detail (or its start), for a person."""
    if not body:
        return ""
    try:
        value = json.loads(body)
    except ValueError:
        return _line(body[: limit * 2].decode("utf-8", "replace"), limit)
    if isinstance(value, dict) and "detail" in value:
        value = value["detail"]
    return _line(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False), limit)


def _endpoint(url: str) -> str:
    """The last part of a request's path: ``create``, ``prompt``, ``task_tools``, ``call``, ``ping``, ``delete``."""
    return url.partition("?")[0].rstrip("/").rpartition("/")[2]


def _view_blocks(blocks: Sequence[Block], limit: int) -> list[dict[str, Any]]:
    """Blocks as the front end draws them: text cut at ``limit`` characters, images kept when small enough."""
    shown: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            text = block.text
            shown.append({"type": "text", "text": _utf8(text[:limit]), "more": max(0, len(text) - limit)})
        elif isinstance(block, ImageBlock):
            mime = block.mime_type if _IMAGE_MIME.fullmatch(block.mime_type) else None
            small = mime is not None and len(block.data) <= IMAGE_CHARS
            shown.append({"type": "image", "mime": block.mime_type[:60], "data": block.data if small else None,
                          "size": len(block.data)})  # fmt: skip
        else:
            shown.append({"type": str(block.type)[:40]})
    return shown


def _blocks_line(blocks: Sequence[dict[str, Any]]) -> str:
    """What a list of shown blocks says, on one line."""
    parts = []
    for block in blocks:
        if block["type"] == "text":
            parts.append(_line(block["text"]))
        elif block["type"] == "image":
            parts.append(f"[{block['mime']} image]")
        else:
            parts.append(f"[{block['type']} block]")
    return _line(" ".join(part for part in parts if part))


class _Step:
    """One ``/call`` as the view knows it."""

    __slots__ = (
        "blocks",
        "call",
        "chars",
        "chunks",
        "ended_ns",
        "error",
        "finished",
        "folded",
        "input",
        "input_line",
        "ok",
        "raw",
        "raw_size",
        "retries",
        "reward",
        "started_ns",
        "status",
        "summary",
        "task_id",
        "too_big",
        "tool",
    )  # fmt: skip

    def __init__(self, call: int, started_ns: int) -> None:
        self.call = call
        self.tool = "?"
        self.input: Any = None  # the input as sent (its text's start when too big to keep)
        self.input_line = ""
        self.folded = False  # only its one-line form is kept
        self.status = "sent"  # sent, running, streaming, resuming, done, error
        self.task_id: str | None = None
        self.retries = 0
        self.chunks = 0
        self.chars = 0
        self.raw: list[str] | None = []  # the result's JSON as it streams (None once parsed, folded or too big)
        self.raw_size = 0
        self.too_big = False
        self.blocks: list[dict[str, Any]] | None = None  # the parsed output, as shown
        self.ok: bool | None = None
        self.reward: float | None = None
        self.finished = False
        self.error: str | None = None
        self.summary = ""
        self.started_ns = started_ns
        self.ended_ns: int | None = None

    @property
    def done(self) -> bool:
        return self.status in ("done", "error")

    def restart(self) -> None:
        """A new attempt of the call: its stream starts again from the top."""
        self.chunks = self.chars = self.raw_size = 0
        self.raw = [] if self.blocks is None else None
        self.too_big = False

    def feed(self, data: str) -> None:
        """A slice of the result's JSON."""
        self.chunks += 1
        self.chars += len(data)
        if self.raw is None:
            return
        if self.raw_size + len(data) > RAW_CHARS:
            self.too_big = True
            keep = RAW_CHARS - self.raw_size  # what fits still feeds the preview
            if keep > 0:
                self.raw.append(data[:keep])
                self.raw_size = RAW_CHARS
            return
        self.raw.append(data)
        self.raw_size += len(data)

    def parse(self, limit: int) -> None:
        """At ``end``: the result's blocks (text cut at ``limit``), if the whole JSON was kept."""
        raw, self.raw = self.raw, None
        if raw is None or self.too_big:
            self.blocks = [{"type": "text", "text": partial_text("".join(raw or ()), limit), "more": 0}]
            return
        try:
            result = ToolResult.from_wire(json.loads("".join(raw)))
        except (ValueError, RecursionError, OverflowError):  # the client raises its own error for this
            return
        self.blocks = _view_blocks(result.blocks, limit) if result.ok else []

    def preview(self, limit: int) -> list[dict[str, Any]]:
        """The output as far as it is known: parsed blocks, or the text streamed so far (``limit`` characters)."""
        if self.blocks is not None:
            return self.blocks
        if self.raw:
            return [{"type": "text", "text": partial_text("".join(self.raw), limit), "more": 0}]
        return []

    def conclude(self) -> None:
        """The one-line summary, once the call is over."""
        if self.error is not None:
            self.summary = _line(self.error)
        else:
            self.summary = _blocks_line(self.preview(LINE_CHARS))

    def fold(self) -> None:
        """Keep only the one-line form (an older step)."""
        self.folded = True
        self.input = None
        self.raw = None
        self.blocks = None


class SessionFold:
    """One session as plain data, folded from its events (see the module docstring)."""

    kinds: ClassVar[Iterable[str] | None] = (
        "open", "request", "response", "event", "disconnect", "retry", "result", "call_error", "ping", "close",
    )  # fmt: skip

    def __init__(
        self,
        session_id: str,
        *,
        environment: str | None = None,
        split: str | None = None,
        index: int | None = None,
        task: Any = None,
        state: str = "new",
        calls: int = 0,
        pings: int = 0,
        output_chars: int = OUTPUT_CHARS,
    ) -> None:
        self.session_id = session_id
        self.output_chars = output_chars
        self.environment = environment
        self.split = split
        self.index = index
        self.task = dict(task) if task is not None else None
        self._seed = state  # the session's own state when the view was made (a view made after the fact)
        self._seed_calls = calls
        self.opening = False
        self.opened = False
        self.closed = False
        self.expired = False
        self.ended = False
        self.open_error: str | None = None
        self.close_error: str | None = None
        self.opened_ns: int | None = None
        self.closed_ns: int | None = None
        self.pings = pings
        self.last_ping_ns: int | None = None
        self.retries = 0
        self.prompt: list[dict[str, Any]] | None = None
        self.tools: list[str] | None = None
        self.steps: dict[int, _Step] = {}
        self.earlier = 0  # steps no longer listed
        self.step_count = 0
        self.total_reward: float | None = None
        self.last_reward: float | None = None
        self.finished = False
        self._exchanges: dict[int, str] = {}
        self._handlers = {
            "request": self._request, "response": self._response, "event": self._sse, "disconnect": self._disconnect,
            "retry": self._retry, "result": self._result, "call_error": self._call_error, "open": self._open,
            "ping": self._ping, "close": self._close,
        }  # fmt: skip

    # -- what it shows ------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """``new``, ``opening``, ``open``, ``closed``, ``expired`` (the server lost it) or ``failed`` (never opened)."""
        if self.expired:
            return "expired"
        if self.opened:
            return "closed" if self.closed else "open"
        if self.closed or self.ended:
            return "failed" if self.opening else "closed"
        if self.opening:
            return "opening"
        return self._seed

    @property
    def error(self) -> str | None:
        """Why the session failed, or its delete did (None when nothing went wrong)."""
        if self.state == "failed":
            return self.open_error or "the session could not be opened"
        return self.close_error

    @property
    def label(self) -> str:
        """The task, in a few characters: ``test#0``, or the spec's id."""
        if self.split is not None and self.index is not None:
            return f"{self.split}#{self.index}"
        if self.task:
            for key in ("id", "task_id", "name"):
                if isinstance(self.task.get(key), str | int):
                    return _line(str(self.task[key]), 40)
            return _line(json.dumps(self.task, ensure_ascii=False, default=str), 40)
        return "?"

    @property
    def step_total(self) -> int:
        """The steps made: those seen, else as many as the session had made when the view was made."""
        return self.step_count or self._seed_calls

    def done(self) -> bool:
        return self.closed or self.ended

    def finish(self) -> None:
        """The session is done with its view (closed, or its open failed): what was not seen will not come."""
        self.ended = True

    def heartbeat(self, now_ns: int | None = None) -> str:
        """``last ping N s ago`` or ``no ping yet`` (for an open session; empty otherwise)."""
        if self.state != "open":
            return ""
        if self.last_ping_ns is None:
            return "no ping yet"
        now_ns = time.monotonic_ns() if now_ns is None else now_ns
        return f"last ping {max(0, (now_ns - self.last_ping_ns) // 1_000_000_000)} s ago"

    # -- what it takes ------------------------------------------------------------------------

    def apply(self, event: Event) -> bool:
        if event.session_id != self.session_id:
            return False
        handler = self._handlers.get(event.kind)
        return handler(event) if handler is not None else False

    def _request(self, event: Event) -> bool:
        assert isinstance(event, RequestEvent)
        if event.agent:
            return False
        endpoint = _endpoint(event.url)
        if event.exchange is not None:
            if len(self._exchanges) > 256:  # answers that never came (cancelled): forget them
                self._exchanges.clear()
            self._exchanges[event.exchange] = endpoint
        if endpoint == "create":
            self.opening = True
            return True
        if endpoint != "call" or event.call is None:
            return False
        step = self.steps.get(event.call)
        if step is not None:  # another attempt, or a resume by task_id
            step.restart()
            step.status = "resuming" if step.task_id is not None else "sent"
            return True
        step = self._new_step(event.call, event.t_ns)
        raw = event.body or b"{}"
        if len(raw) > INPUT_KEEP_BYTES:  # too big to keep: its start, as text
            text = raw[:INPUT_CHARS].decode("utf-8", "replace")
            name = re.search(r'"name"\s*:\s*"([^"]{0,80})"', text)
            step.tool = name.group(1) if name else "?"
            step.input = _utf8(text) + f" … ({len(raw):,} bytes)"
            step.input_line = _line(text)
            return True
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        if isinstance(body, dict):
            step.tool = _line(str(body.get("name", "?")), 80)
            step.input = value = body.get("input")
            step.input_line = _line(json.dumps(value, ensure_ascii=False, default=str))
        return True

    def _new_step(self, call: int, t_ns: int) -> _Step:
        step = self.steps[call] = _Step(call, t_ns)
        self.step_count += 1
        while len(self.steps) > LISTED_STEPS:
            del self.steps[next(iter(self.steps))]
            self.earlier += 1
        self._fold()
        return step

    def _fold(self) -> None:
        """Fold the finished steps older than the newest ``FULL_STEPS`` to one line each."""
        listed = list(self.steps.values())
        for step in listed[:-FULL_STEPS]:
            if step.done and not step.folded:
                step.fold()

    def _response(self, event: Event) -> bool:
        assert isinstance(event, ResponseEvent)
        if event.agent:
            return False
        endpoint = self._exchanges.pop(event.exchange, "") if event.exchange is not None else ""
        if event.status >= 400:
            if event.status == 404 and _NOT_FOUND in (event.body or b"") and endpoint != "create":
                self.expired = True
            problem = f"HTTP {event.status}: {_body_text(event.body)}"
            if endpoint == "create":
                self.open_error = problem
            elif event.call is not None and event.call in self.steps:
                self.steps[event.call].error = problem
            return True
        if event.status >= 300 or event.body is None or endpoint not in ("prompt", "task_tools"):
            return False
        if len(event.body) > RAW_CHARS:  # not parsed a second time for the view
            if endpoint == "prompt":
                self.prompt = [{"type": "text", "text": "", "more": len(event.body)}]
            return endpoint == "prompt"
        try:
            body = json.loads(event.body)
            if endpoint == "prompt":
                self.prompt = _view_blocks(blocks_from_wire(body), PROMPT_CHARS)
            else:
                self.tools = [_line(str(tool.get("name")), 60) for tool in body["tools"][:100]]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # the client reports a bad answer
            return False
        return True

    def _sse(self, event: Event) -> bool:
        assert isinstance(event, SSEEvent)
        step = self.steps.get(event.call) if event.call is not None and not event.agent else None
        if step is None:
            return False
        name = event.event
        if name == "chunk":
            step.feed(event.data)
            step.status = "streaming"
        elif name == "end":
            step.feed(event.data)
            step.parse(self.output_chars)
        elif name == "task_id":
            step.task_id = event.data
            step.status = "running"
        elif name == "error":
            step.error = _line(event.data, 400)
        else:
            return False
        return True

    def _disconnect(self, event: Event) -> bool:
        assert isinstance(event, DisconnectEvent)
        if event.agent:
            return False
        if event.call is not None and event.call in self.steps:
            step = self.steps[event.call]
            if not step.done:
                step.status = "resuming"
            return True
        if self.opening and not self.opened:
            self.open_error = event.error
            return True
        return False

    def _retry(self, event: Event) -> bool:
        assert isinstance(event, RetryEvent)
        self.retries += 1
        if event.call is not None and event.call in self.steps:
            step = self.steps[event.call]
            step.retries += 1
            step.error = None
        elif self.opening and not self.opened:
            self.open_error = None
        return True

    def _result(self, event: Event) -> bool:
        assert isinstance(event, ResultEvent)
        step = self.steps.get(event.call)
        if step is None:  # listed no more: it still counts
            step = _Step(event.call, event.t_ns)
        step.status = "done"
        step.ok, step.reward, step.finished, step.ended_ns = event.ok, event.reward, event.finished, event.t_ns
        step.task_id = event.task_id or step.task_id
        if not event.ok:
            step.error = (event.error or "failed") + (f" ({event.reason})" if event.reason else "")
            step.blocks = step.blocks or []
        else:
            step.error = None
        step.raw = None
        step.conclude()
        if event.reward is not None:
            self.total_reward = (self.total_reward or 0.0) + event.reward
        self.last_reward = event.reward
        self.finished = self.finished or event.finished
        self._fold()
        return True

    def _call_error(self, event: Event) -> bool:
        assert isinstance(event, CallErrorEvent)
        if event.error.startswith("SessionNotFoundError"):
            self.expired = True
        step = self.steps.get(event.call)
        if step is None:
            return True
        step.status = "error"
        step.error = _line(event.error, 400)
        step.ended_ns = event.t_ns
        step.raw = None
        step.conclude()
        self._fold()
        return True

    def _open(self, event: Event) -> bool:
        assert isinstance(event, OpenEvent)
        self.opening = self.opened = True
        self.open_error = None
        self.opened_ns = event.t_ns
        self.environment = event.environment or self.environment
        if event.split is not None:
            self.split, self.index = event.split, event.task_index
        if event.task is not None:
            self.task = dict(event.task)
        return True

    def _ping(self, event: Event) -> bool:
        self.pings += 1
        self.last_ping_ns = event.t_ns
        return True

    def _close(self, event: Event) -> bool:
        assert isinstance(event, CloseEvent)
        self.closed = True
        self.closed_ns = event.t_ns
        self.close_error = None if event.ok else f"the delete failed: {event.error}"
        return True
