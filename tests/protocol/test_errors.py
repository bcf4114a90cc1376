"""The exception tree: the classes drawn in the errors module docstring, and what their messages carry."""

from __future__ import annotations

import pickle
import re
from typing import Any

import httpx2
import pytest

from ors_lab.protocol import errors
from ors_lab.protocol.errors import (
    CallDeadlineExceededError,
    ConnectionFailedError,
    DeadlineExceededError,
    InvalidURLError,
    MalformedStreamError,
    ORSError,
    OutcomeUnknownError,
    ServerError,
    SessionNotFoundError,
    StreamError,
    TaskIndexError,
    ToolError,
    TraceExistsError,
    TraceNotFoundError,
    UnknownEnvironmentError,
    UnknownSplitError,
)
from tests.conftest import REPO_ROOT

# One line of the drawn tree: "│   ├── Name    description" (the root has no connector).
_TREE_LINE = re.compile(r"^((?:[│ ]   )*)(?:[├└]── )?([A-Z]\w+)\s")


def drawn_tree() -> dict[str, set[str]]:
    """Each class in the docstring's tree mapped to the names of its parents (the root to Exception); a class
    with two bases is drawn under each."""
    doc = errors.__doc__ or ""
    block = doc.split("::", 1)[1].split("\n\n")[1]
    parents: dict[str, set[str]] = {}
    stack: list[str] = []
    for line in block.splitlines():
        match = _TREE_LINE.match(line.removeprefix("    "))
        if not match:
            continue  # a description carried onto the next line
        indent, name = match.groups()
        depth = len(indent) // 4 + (1 if stack else 0)
        del stack[depth:]
        parents.setdefault(name, set()).add(stack[-1] if stack else "Exception")
        stack.append(name)
    return parents


TREE = drawn_tree()


def test_tree_drawing_parsed() -> None:
    """The docstring's tree parses into the expected shape (a guard for the tests built on it)."""
    assert TREE["ORSError"] == {"Exception"}
    assert TREE["SessionNotFoundError"] == {"ServerError"}
    assert TREE["OutcomeUnknownError"] == {"StreamError"}
    assert TREE["SessionClosedError"] == {"ORSError"}
    assert TREE["CallDeadlineExceededError"] == {"DeadlineExceededError", "OutcomeUnknownError"}
    assert TREE["TaskIndexError"] == {"ServerError"} and TREE["TraceNotFoundError"] == {"TraceFormatError"}
    assert TREE["TraceTooLargeError"] == {"TraceFormatError"}
    assert TREE["AgentNotShippableError"] == {"ORSError"} and TREE["WorkersLostError"] == {"ORSError"}
    assert TREE["SplitRequiredError"] == {"ORSError"} and TREE["EventNotRecordedError"] == {"ORSError"}
    assert TREE["IncompleteStreamError"] == TREE["MalformedChunkError"] == {"ProviderStreamError"}
    assert TREE["ProviderStreamError"] == TREE["ProviderReportedError"] == {"ProviderError"}
    assert len(TREE) == 35


@pytest.mark.parametrize(("name", "parents"), sorted(TREE.items()))
def test_class_has_drawn_parent(name: str, parents: set[str]) -> None:
    """Every class drawn in the docstring exists and derives directly from the parents drawn above it, and from
    a built-in exception only when its line says so ("also a FileNotFoundError")."""
    cls = getattr(errors, name)
    expected = {Exception if parent == "Exception" else getattr(errors, parent) for parent in parents}
    builtin = {base for base in cls.__bases__ if base.__module__ == "builtins" and base is not Exception}
    assert set(cls.__bases__) - builtin == expected
    line = next(line for line in (errors.__doc__ or "").splitlines() if re.search(rf"(── |^    ){name}\b", line))
    for base in builtin:
        assert re.search(rf"also an? {base.__name__}", line), line


def test_tree_lists_every_exception() -> None:
    """The drawn tree and the module's ``__all__`` name the same classes."""
    assert set(TREE) == set(errors.__all__)


def test_str_includes_context() -> None:
    """str() gives the message, then the session, the task_id and ``METHOD URL`` of an httpx2 request."""
    request = httpx2.Request("POST", "http://127.0.0.1:8080/gsm8k/call")
    error = ToolError("boom", session_id="s1", task_id="abc123", request=request)
    assert str(error) == "boom (session=s1, task_id=abc123, request=POST http://127.0.0.1:8080/gsm8k/call)"
    assert (error.message, error.session_id, error.task_id, error.request) == ("boom", "s1", "abc123", request)


def test_str_without_context_is_the_message() -> None:
    """With no context, str() is just the message."""
    assert str(StreamError("dropped")) == "dropped"


def test_str_with_partial_context() -> None:
    """Only the context given appears in str()."""
    assert str(MalformedStreamError("bad", task_id="t1")) == "bad (task_id=t1)"
    assert str(ORSError("gone", session_id="s9")) == "gone (session=s9)"


def test_str_of_request_without_method_and_url() -> None:
    """A request object that is not an httpx2 request is shown with its str()."""
    assert str(ORSError("x", request="GET /health")) == "x (request=GET /health)"


def test_server_error_keeps_status_and_detail() -> None:
    """ServerError (and its subclasses) keep status_code and detail next to the usual context."""
    detail = [{"type": "missing", "loc": ["body", "input"], "msg": "Field required"}]
    error = ServerError("validation failed", status_code=422, detail=detail, session_id="s1")
    assert (error.status_code, error.detail, error.session_id) == (422, detail, "s1")
    assert str(error) == "validation failed (session=s1)"
    missing = SessionNotFoundError("no session", status_code=404, detail="Active environment not found")
    assert (missing.status_code, missing.detail) == (404, "Active environment not found")
    assert isinstance(missing, ORSError)


def test_server_error_detail_defaults_to_none() -> None:
    """ServerError's detail is None unless given."""
    assert ServerError("teapot", status_code=418).detail is None


@pytest.mark.parametrize(
    "error",
    [
        ServerError("teapot", status_code=418, detail={"a": 1}, session_id="s1"),
        ConnectionFailedError("refused", before_sending=True, session_id="s1"),
        DeadlineExceededError("slow", deadline=2.5, task_id="t1"),
        OutcomeUnknownError("502", status_code=502, detail="bad gateway", session_id="s1"),
        CallDeadlineExceededError("slow call", deadline=1.0, session_id="s1", task_id="t1"),
        UnknownEnvironmentError("unknown", environment="nope", available=["lab"], status_code=308),
        UnknownSplitError("unknown", split="nope", available=["test"], status_code=400, detail="Invalid split"),
        TaskIndexError("no task", split="test", index=9, num_tasks=2, status_code=400, session_id="s1"),
        InvalidURLError("not a URL", url="127.0.0.1:8080"),
        TraceNotFoundError("no trace at x.parquet", path="x.parquet"),
        TraceExistsError("x.parquet already holds a trace", path="x.parquet"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_errors_pickle_with_their_fields(error: ORSError) -> None:
    """Errors cross processes whole: the class, the message, the context and their own fields."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_call_deadline_is_both_a_deadline_and_an_unknown_outcome() -> None:
    """CallDeadlineExceededError is caught by handlers for either of its meanings, with both sets of fields."""
    error = CallDeadlineExceededError("slow call", deadline=1.0, task_id="t1")
    assert isinstance(error, DeadlineExceededError) and isinstance(error, OutcomeUnknownError)
    assert (error.deadline, error.status_code, error.task_id) == (1.0, None, "t1")
    assert not isinstance(DeadlineExceededError("x"), TimeoutError)


def test_a_callers_mistake_is_its_message_alone() -> None:
    """The errors of a caller's mistake are one line without the request context the others add; the context
    stays in their fields, and each is also the built-in exception a Python caller would catch."""
    request = httpx2.Request("POST", "http://127.0.0.1:8080/nope/num_tasks")
    error = UnknownEnvironmentError("unknown environment 'nope'", environment="nope", available=["lab", "echo"],
                                    status_code=308, request=request)  # fmt: skip
    assert str(error) == "unknown environment 'nope'" and error.request is request
    assert (error.environment, error.available, error.status_code) == ("nope", ["lab", "echo"], 308)
    assert isinstance(TaskIndexError("x", split="s", index=5, num_tasks=2, status_code=400), IndexError)
    assert isinstance(InvalidURLError("x", url="u"), ValueError)
    assert isinstance(TraceNotFoundError("x", path="p"), FileNotFoundError)
    assert isinstance(TraceExistsError("x", path="p"), FileExistsError)


def test_outside_ipython_the_traceback_rendering_is_pythons() -> None:
    """``_render_traceback_`` (IPython's hook) falls back to Python's own format when no IPython shell runs."""
    try:
        raise ToolError("boom", session_id="s1")
    except ToolError as exc:
        lines = exc._render_traceback_()
    assert lines[0].startswith("Traceback") and lines[-1] == "ors_lab.protocol.errors.ToolError: boom (session=s1)\n"


KERNEL_CELLS = {
    "replay": ('c = ol.Client("http://replay", transport=ol.ReplayTransport({trace!r}))\n'
               'c.environment("guessing").task("nope", 99)', "ReplayMismatchError: no recorded request matches"),
    "environment": ('ol.evaluate(ol.Client({url!r}).environment("nope"), DemoAgent(), progress=False)',
                    "UnknownEnvironmentError: unknown environment 'nope' at"),
    "trace": ('ol.load_trace("missing.parquet")', "TraceNotFoundError: no trace at missing.parquet"),
}  # fmt: skip
_FRAME = re.compile(r"^(Cell In\[\d+\], line \d+|File [^\n]*:\d+, in )", re.MULTILINE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_in_a_kernel_a_cells_error_is_its_line_and_the_message(demo_server: Any) -> None:
    """In a real Jupyter kernel the error output of a cell that met an ORS error is one frame, the cell's own line,
    then the message: no frame of the library (through the sync runner on the kernel's loop), no skipped-frames
    marker, no frame of asyncio or nest_asyncio2."""
    from tests.notebook.kernel import Kernel

    trace = str(REPO_ROOT / "recordings" / "demo.parquet")
    with Kernel() as kernel:
        setup = kernel.run("import ors_lab as ol\nfrom ors_lab.demo.agent import DemoAgent")
        assert not setup.problems(), setup.problems()
        for name, (code, message) in KERNEL_CELLS.items():
            cell = kernel.run(code.format(trace=trace, url=demo_server.url))
            (error,) = cell.of("error")
            text = _ANSI.sub("", "\n".join(error["content"]["traceback"]))
            frames = _FRAME.findall(text)
            assert len(frames) == 1 and frames[0].startswith("Cell In["), (name, text)
            assert code.splitlines()[-1].format(trace=trace, url=demo_server.url) in text, (name, text)
            assert message in text.splitlines()[-1] or message in text, (name, text)
            assert "skipping hidden" not in text and "ors_lab/" not in text, (name, text)
            assert len(text.splitlines()) <= 12, (name, text)
