"""The exception tree: the classes drawn in the errors module docstring, and what their messages carry."""

from __future__ import annotations

import pickle
import re

import httpx2
import pytest

from ors_lab.protocol import errors
from ors_lab.protocol.errors import (
    CallDeadlineExceededError,
    ConnectionFailedError,
    DeadlineExceededError,
    MalformedStreamError,
    ORSError,
    OutcomeUnknownError,
    ServerError,
    SessionNotFoundError,
    StreamError,
    ToolError,
)

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
    assert len(TREE) == 18


@pytest.mark.parametrize(("name", "parents"), sorted(TREE.items()))
def test_class_has_drawn_parent(name: str, parents: set[str]) -> None:
    """Every class drawn in the docstring exists and derives directly from the parents drawn above it."""
    cls = getattr(errors, name)
    expected = {Exception if parent == "Exception" else getattr(errors, parent) for parent in parents}
    assert set(cls.__bases__) == expected


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
