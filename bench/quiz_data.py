"""The quiz's tasks and answers, with no SDK import (the benchmark's client workers import this).

`bench/quiz_env.py` serves them; `bench/client.py` checks each episode's prompt and submits the
right answer, so every episode must end with reward 1.0.
"""

from __future__ import annotations

__all__ = ["SPLIT", "TASKS", "expected_answer"]

SPLIT = "test"
TASKS: tuple[dict[str, str], ...] = tuple(
    {"id": f"quiz-{SPLIT}-{i}", "question": f"What is {a} + {b}?", "answer": str(a + b)}
    for i, (a, b) in enumerate([(2, 3), (7, 8), (12, 30), (41, 1), (100, 23), (9, 9)])
)


def expected_answer(index: int) -> str:
    """The right answer to task `index` of split "test"."""
    return TASKS[index]["answer"]
