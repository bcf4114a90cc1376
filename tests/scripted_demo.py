"""Scripted sync sessions on the demo environments, for tests that record a known run by hand.

Arithmetic: work the task's expression out with ``calculator`` (the session must be opened with the
task spec, which carries it), then ``submit``. Guessing: binary search with ``guess``.
"""

from __future__ import annotations

from ors_lab.client import Session
from ors_lab.protocol.models import ToolResult


def solve_arithmetic(session: Session) -> list[ToolResult]:
    """Calculate the task's expression, then submit the result; returns both steps' results."""
    expression = str(session.task.spec["expression"]) if session.task else ""
    value = session.call("calculator", {"expression": expression})
    return [value, session.call("submit", {"answer": value.text})]


def guess_by_bisection(session: Session) -> list[ToolResult]:
    """Play the guessing game by halving the range each turn; returns every step's result."""
    spec = session.task.spec if session.task else {}
    low, high = int(spec.get("low", 1)), int(spec.get("high", 100))
    steps: list[ToolResult] = []
    while True:
        middle = (low + high) // 2
        result = session.call("guess", {"number": middle})
        steps.append(result)
        if result.finished or not result.ok:
            return steps
        if result.text == "higher":
            low = middle + 1
        else:
            high = middle - 1
