"""The exceptions ors_lab raises, in one tree.

::

    ORSError                        anything ors_lab raises on purpose; carries session_id, task_id, request
    ├── InvalidURLError             a server URL without http:// or https://, or without a host (also a ValueError)
    ├── SplitRequiredError          no split given to evaluate, and several (or none) to choose (also a ValueError)
    ├── ServerError                 the server answered an HTTP error status (after the retries allowed)
    │   ├── SessionNotFoundError    404 "Active environment not found": unknown, expired or deleted session
    │   ├── EnvironmentStartingError  503 "x-backend-state: starting" for longer than the client waits
    │   ├── ReplayMismatchError     a replayed trace has no recorded answer for this request
    │   ├── UnknownEnvironmentError the server has no environment of that name (``available``: those it has)
    │   ├── UnknownSplitError       the environment has no split of that name (``available``: its splits)
    │   └── TaskIndexError          no task at that index of the split (``num_tasks``; also an IndexError)
    ├── MalformedResponseError      a 2xx answer that is not what ORS sends there: HTML, not JSON, not UTF-8,
    │                               or JSON of the wrong shape
    ├── ConnectionFailedError       the connection failed (refused, reset, timed out, not HTTP) and the retries
    │                               allowed did not mend it; the httpx2 error is its __cause__
    ├── DeadlineExceededError       a request outlived its total deadline (``request_timeout``, ``call_timeout``)
    │   └── CallDeadlineExceededError   (also an OutcomeUnknownError, below)
    ├── ToolError                   `event: error` on /call: the tool raised on the server (session still usable)
    ├── StreamError                 a /call stream broke, or broke the protocol
    │   ├── MalformedStreamError    events out of order, a result that is not valid JSON, not an SSE response
    │   ├── UnknownTaskError        `error: unknown task_id`: the server no longer holds the task's result
    │   ├── ResumeFailedError       dropped after `task_id`, and every resume with that task_id failed too
    │   └── OutcomeUnknownError     the /call may have reached the server, and no answer proves whether the
    │       │                       tool ran (a drop before `task_id`, a 5xx): it is not sent again
    │       └── CallDeadlineExceededError  ``call_timeout`` passed after the /call may have reached the server
    ├── SessionClosedError          the session was closed (or found dead) before this use
    ├── EventNotRecordedError       the run's trace could not take one of its events (the event is named); the
    │                               episode that published it fails, the trace stays valid
    ├── ProviderError               the agent's LLM provider failed in its answer (an ``error`` event, source provider)
    │   ├── ProviderReportedError   the answer held an error object (OpenAI, vLLM, OpenRouter, LiteLLM shapes):
    │   │                           its message, ``code``, and ``status_code`` when the code is an HTTP status
    │   ├── ProviderStatusError     the answer was an HTTP error status (``status_code``, ``response``), as an SDK
    │   │                           read through ``Episode.llm_client()`` got it
    │   └── ProviderStreamError     the answer broke: cut, not an event stream; says how far it got (bytes,
    │       │                       chunks, the last chunk, a tool call left open)
    │       ├── IncompleteStreamError  it ended with no finish reason and no [DONE]: none of its tools run
    │       └── MalformedChunkError    a chunk that is not a JSON object (``chunk``: its start)
    ├── AgentNotShippableError      an agent a Ray run cannot send to its workers (not picklable; also a TypeError)
    ├── WorkersLostError            every worker of a Ray run died more often than it may be restarted
    └── TraceFormatError            a trace is missing, unreadable, or not an ors_lab trace of this version
        ├── TraceNotFoundError      no trace (nor the parts of one) at the path (also a FileNotFoundError)
        ├── TraceExistsError        a new trace was asked for where one is (also a FileExistsError)
        ├── TraceLockedError        another recorder is writing the trace (``holder``: its pid, host, since)
        └── TraceTooLargeError      a whole-trace frame asked of a trace too large for memory (also a MemoryError)

Every failure the client meets is one of these: a network failure the retries could not mend is a
``ConnectionFailedError`` (the ``httpx2.ConnectError`` or kin stays reachable as ``__cause__``), and
an answer of the wrong form is a ``MalformedResponseError`` or ``MalformedStreamError``, never a
bare ``JSONDecodeError`` or ``KeyError``. An ORS *logic* failure (unknown tool, invalid input,
finished episode) is not an exception: it is a ``ToolResult`` with ``ok=False``.

The errors of a caller's mistake (a URL, an environment, a split, a task index, a trace path) say
what is wrong and what there is instead in one line, without the request context the others add
to their message (it stays in their attributes).

What a /call's error says about the tool: ``OutcomeUnknownError`` (and its
``CallDeadlineExceededError``), or a ``MalformedStreamError`` without a ``task_id`` (the answer was
not ORS): it may or may not have run. ``ToolError``, ``ResumeFailedError``,
``UnknownTaskError``, or any error with a ``task_id``: it ran (its result may be lost). A
``ServerError`` without a ``task_id`` (a 3xx or 4xx: the server refused it; ``EnvironmentStartingError``),
a ``ConnectionFailedError`` (it could not connect) or a plain ``DeadlineExceededError``: it did not
run, and sending it again is safe. The client itself never sends a /call again unless an answer
proved it did not run (``ors_lab/client/policy.py`` has the rules).
"""

from __future__ import annotations

import traceback
from types import TracebackType
from typing import Any

__all__ = [
    "AgentNotShippableError",
    "CallDeadlineExceededError",
    "ConnectionFailedError",
    "DeadlineExceededError",
    "EnvironmentStartingError",
    "EventNotRecordedError",
    "IncompleteStreamError",
    "InvalidURLError",
    "MalformedChunkError",
    "MalformedResponseError",
    "MalformedStreamError",
    "ORSError",
    "OutcomeUnknownError",
    "ProviderError",
    "ProviderReportedError",
    "ProviderStatusError",
    "ProviderStreamError",
    "ReplayMismatchError",
    "ResumeFailedError",
    "ServerError",
    "SessionClosedError",
    "SessionNotFoundError",
    "SplitRequiredError",
    "StreamError",
    "TaskIndexError",
    "ToolError",
    "TraceExistsError",
    "TraceFormatError",
    "TraceLockedError",
    "TraceNotFoundError",
    "TraceTooLargeError",
    "UnknownEnvironmentError",
    "UnknownSplitError",
    "UnknownTaskError",
    "WorkersLostError",
]


class ORSError(Exception):
    """Base class: a failure with the ORS context it happened in."""

    context_in_message = True
    """Whether ``str()`` ends with the session, task_id and request (not for a caller's mistakes: their
    message says it all)."""

    def __init__(
        self,
        message: str,
        *,
        session_id: str | None = None,
        task_id: str | None = None,
        request: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.session_id = session_id
        self.task_id = task_id
        self.request = request

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle with the keyword fields (errors cross process boundaries in parallel runs)."""
        return (_rebuild, (type(self), self.message, dict(vars(self))))

    def __str__(self) -> str:
        if not self.context_in_message:
            return self.message
        context = [
            f"{name}={value}"
            for name, value in (
                ("session", self.session_id),
                ("task_id", self.task_id),
                ("request", _describe(self.request)),
            )
            if value
        ]
        return f"{self.message} ({', '.join(context)})" if context else self.message

    def _render_traceback_(self) -> list[str]:
        """How IPython and Jupyter show it: their own traceback without the frames ors_lab hides
        (``__tracebackhide__``), so a cell's error ends at the cell's line, then the message."""
        return _ipython_traceback(self)


def _ipython_traceback(error: BaseException) -> list[str]:
    """IPython's rendering of ``error`` with the hidden frames left out, not shown as its last frame: IPython
    always shows the frame that raised, which for ors_lab is a line of the library, not the caller's."""
    from IPython import get_ipython  # deferred: IPython is optional, and only an IPython shell calls this

    shell = get_ipython()
    tb = error.__traceback__
    if shell is None:
        return traceback.format_exception(error)
    formatter = shell.InteractiveTB
    if getattr(formatter, "skip_hidden", True):  # ``%config`` can turn the hiding off, for debugging
        kept = []
        while tb is not None:
            if not tb.tb_frame.f_locals.get("__tracebackhide__", False):
                kept.append(tb)
            tb = tb.tb_next
        for entry in reversed(kept):
            tb = TracebackType(tb, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    stb: list[str] = formatter.structured_traceback(type(error), error, tb)
    return stb


def _rebuild(cls: type[ORSError], message: str, state: dict[str, Any]) -> ORSError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


def _describe(request: Any) -> str | None:
    """``POST http://host/env/call`` for an httpx2 request, else its str."""
    if request is None:
        return None
    method, url = getattr(request, "method", None), getattr(request, "url", None)
    return f"{method} {url}" if method and url else str(request)


class ServerError(ORSError):
    """The server answered with an HTTP error status; ``status_code`` and ``detail`` say what."""

    def __init__(self, message: str, *, status_code: int, detail: Any = None, **context: Any) -> None:
        super().__init__(message, **context)
        self.status_code = status_code
        self.detail = detail


class SessionNotFoundError(ServerError):
    """The server does not know the session: never created, deleted, or reaped after 900 s idle."""


class EnvironmentStartingError(ServerError):
    """The environment was still starting (503, ``x-backend-state: starting``) when the wait ran out."""


class ReplayMismatchError(ServerError):
    """A replay server or transport found no recorded request like this one; ``detail`` says why.

    Its fields, when the replay sent them (``ors_lab.protocol.replay``): ``asked``, the request as the
    replay saw it; ``differs``, where it differs from what the trace holds (``body.model: "a" !=
    recorded "b"``); ``nearest``, the nearest unplayed recorded requests; ``trace``, the trace replayed.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        detail: Any = None,
        asked: str | None = None,
        differs: str | None = None,
        nearest: list[str] | None = None,
        trace: str | None = None,
        **context: Any,
    ) -> None:
        super().__init__(message, status_code=status_code, detail=detail, **context)
        self.asked = asked
        self.differs = differs
        self.nearest = list(nearest or [])
        self.trace = trace


class UnknownEnvironmentError(ServerError):
    """The server has no environment of this name (``environment``); ``available`` lists the ones it has."""

    context_in_message = False

    def __init__(self, message: str, *, environment: str, available: list[str], **context: Any) -> None:
        super().__init__(message, **context)
        self.environment = environment
        self.available = list(available)


class UnknownSplitError(ServerError):
    """The environment has no split of this name (``split``); ``available`` lists its splits."""

    context_in_message = False

    def __init__(self, message: str, *, split: str, available: list[str], **context: Any) -> None:
        super().__init__(message, **context)
        self.split = split
        self.available = list(available)


class TaskIndexError(ServerError, IndexError):
    """No task at ``index`` of ``split``, which has ``num_tasks`` (None when that could not be learnt)."""

    context_in_message = False

    def __init__(self, message: str, *, split: str, index: int, num_tasks: int | None, **context: Any) -> None:
        super().__init__(message, **context)
        self.split = split
        self.index = index
        self.num_tasks = num_tasks


class InvalidURLError(ORSError, ValueError):
    """A server URL that is not ``http://`` or ``https://`` with a host; ``url`` is what was given."""

    context_in_message = False

    def __init__(self, message: str, *, url: str, **context: Any) -> None:
        super().__init__(message, **context)
        self.url = url


class SplitRequiredError(ORSError, ValueError):
    """``evaluate`` was given no split, and ``environment`` has several (or none) to choose from: ``available``."""

    context_in_message = False

    def __init__(self, message: str, *, environment: str, available: list[str], **context: Any) -> None:
        super().__init__(message, **context)
        self.environment = environment
        self.available = list(available)


class MalformedResponseError(ORSError):
    """A 2xx answer whose body is not what ORS sends there: not JSON (an HTML page), not UTF-8, or JSON
    of another shape. The message says what was expected and shows the start of the body."""


class ConnectionFailedError(ORSError):
    """The connection failed and the retries allowed did not mend it: refused, reset, timed out, or not HTTP.

    The ``httpx2`` error is the ``__cause__``. ``before_sending`` is True when the request provably never
    reached the server (it could not connect), so sending it again is safe, even for a /call.
    """

    def __init__(self, message: str, *, before_sending: bool = False, **context: Any) -> None:
        super().__init__(message, **context)
        self.before_sending = before_sending


class DeadlineExceededError(ORSError):
    """A request outlived its total deadline (``deadline`` seconds): ``request_timeout`` for one exchange,
    ``call_timeout`` for a whole /call. Raised as such, the request never ran (a /call that may have run
    raises ``CallDeadlineExceededError``). Not a ``TimeoutError``: that is the episode timeout's, in ``evaluate``.
    """

    def __init__(self, message: str, *, deadline: float | None = None, **context: Any) -> None:
        super().__init__(message, **context)
        self.deadline = deadline


class ToolError(ORSError):
    """The tool raised on the server (``event: error``); the session stays usable."""


class StreamError(ORSError):
    """A /call stream broke, or did not follow the protocol."""


class MalformedStreamError(StreamError):
    """The stream is not ORS: events out of order, a result that is not JSON, or not SSE at all."""


class UnknownTaskError(StreamError):
    """The server answered ``error: unknown task_id``: the task's result is gone (kept 60 s) or never was."""


class ResumeFailedError(StreamError):
    """The stream dropped after ``task_id`` and resuming with that task_id failed every time."""


class OutcomeUnknownError(StreamError):
    """A /call may have reached the server, and nothing proves whether the tool ran.

    The connection or stream dropped before ``task_id``, or a first /call was answered with a 5xx (a
    gateway's 502 or 504 can come after the tool ran; ``status_code`` and ``detail`` are then set).
    Tools are not idempotent, so the call is not sent again: check the environment's state instead.
    """

    def __init__(self, message: str, *, status_code: int | None = None, detail: Any = None, **context: Any) -> None:
        super().__init__(message, **context)
        self.status_code = status_code
        self.detail = detail


class CallDeadlineExceededError(DeadlineExceededError, OutcomeUnknownError):
    """``call_timeout`` (or ``request_timeout`` for the answer's head) passed after the /call may have reached
    the server. Both a ``DeadlineExceededError`` and an ``OutcomeUnknownError``: a handler for either catches
    it, and the one for unknown outcomes must, since the tool may have run. With ``task_id`` set, the server
    had accepted the call: the tool ran or is running, and only its result is missing.
    """


class SessionClosedError(ORSError):
    """The session is closed, or was found dead (for example reaped by the server)."""


class EventNotRecordedError(ORSError):
    """The run's trace could not take an event (``kind``: its kind); the episode that published it fails."""

    def __init__(self, message: str, *, kind: str | None = None, **context: Any) -> None:
        super().__init__(message, **context)
        self.kind = kind


class ProviderError(ORSError):
    """The agent's LLM provider failed in its answer; published as an ``error`` event from source ``provider``."""

    status_code: int | None = None


class ProviderReportedError(ProviderError):
    """The answer held an error object; ``code`` is its code (or type), ``status_code`` the code when it is
    an HTTP status (so a 429 in the stream is a rate limit, as a 429 answer is)."""

    def __init__(self, message: str, *, code: Any = None, **context: Any) -> None:
        super().__init__(message, **context)
        self.code = code
        status = code if isinstance(code, int) else int(code) if isinstance(code, str) and code.isdigit() else None
        self.status_code = status if status is not None and 400 <= status < 600 else None


class ProviderStatusError(ProviderError):
    """The provider answered with an HTTP error status (``status_code``); ``response`` is the answer."""

    def __init__(self, message: str, *, response: Any, **context: Any) -> None:
        super().__init__(message, **context)
        self.response = response
        self.status_code = response.status_code


class ProviderStreamError(ProviderError):
    """The answer broke, or is not an event stream; the message says how far it got."""


class IncompleteStreamError(ProviderStreamError):
    """The answer ended with no finish reason and no ``[DONE]``: it was cut short, and none of its tools run."""


class MalformedChunkError(ProviderStreamError):
    """A chunk of the answer is not a JSON object; ``chunk`` is its start, as sent."""

    def __init__(self, message: str, *, chunk: str = "", **context: Any) -> None:
        super().__init__(message, **context)
        self.chunk = chunk


class AgentNotShippableError(ORSError, TypeError):
    """A Ray run's agent cannot be sent to its workers (it does not pickle: an open connection, a lock, a
    lambda's unpicklable closure); raised before any work starts. Pass a picklable agent, or a factory
    (``RayBackend(agent_factory=...)``) that each worker calls to make its own."""

    context_in_message = False


class WorkersLostError(ORSError):
    """Every worker of a Ray run died more often than ``RayBackend.restarts`` allows; the episodes they had
    not finished are not in the result (the trace holds them as failed, and ``resume=True`` runs them)."""

    context_in_message = False


class TraceFormatError(ORSError):
    """A trace is missing, unreadable, not an ors_lab trace, or of a schema version this one cannot read."""


class TraceNotFoundError(TraceFormatError, FileNotFoundError):
    """No trace at ``path``: neither the file nor the parts of an unfinished recording."""

    context_in_message = False

    def __init__(self, message: str, *, path: str, **context: Any) -> None:
        super().__init__(message, **context)
        self.path = path


class TraceExistsError(TraceFormatError, FileExistsError):
    """A new trace was asked for at ``path``, and a trace (or the parts of one) is there; the message says
    how to continue it or replace it, in the caller's own terms (keyword arguments, or command-line flags)."""

    context_in_message = False

    def __init__(self, message: str, *, path: str, **context: Any) -> None:
        super().__init__(message, **context)
        self.path = path


class TraceLockedError(TraceFormatError):
    """Another recorder holds the trace's lock: one writer per trace at a time.

    ``path`` is the trace; ``holder`` what its lock file says of the writer (``pid``, ``host``,
    ``run_id``, ``since``), empty when it said nothing readable.
    """

    def __init__(self, message: str, *, path: str | None = None, holder: dict[str, Any] | None = None,
                 **context: Any) -> None:  # fmt: skip
        super().__init__(message, **context)
        self.path = path
        self.holder = dict(holder or {})


class TraceTooLargeError(TraceFormatError, MemoryError):
    """A frame of every row (``trace.events``) was asked of a trace of more rows than fit in memory at
    once; the message names the trace, its rows, and the paged and projected reads to use instead."""
