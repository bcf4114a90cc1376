"""The benchmark workload environment (``/work/shared/perf-anchors.md``), for the ors-sdk server.

``Quiz`` (served as "quiz") has 6 fixed tasks in split "test". An episode gets the prompt, calls
``blob{n: 200}`` twice (a 200-character text block, reward 0.0, not finished) and ``answer`` once
(reward 1.0 when the answer is right, and the episode ends). ``wait{seconds}`` sleeps, for the replay
timing benchmark.

    serve("bench.quiz_env:ENVIRONMENTS")   # from ors_lab.demo.launch, run from the repo root
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ors import Environment, JSONObject, Split, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

from bench.quiz_data import SPLIT, TASKS

__all__ = ["ENVIRONMENTS", "Quiz"]

MAX_BLOB = 1_000_000


class BlobInput(BaseModel):
    """Input of `Quiz.blob`."""

    n: int = Field(ge=0, le=MAX_BLOB, description="How many characters of text to return.")


class WaitInput(BaseModel):
    """Input of `Quiz.wait`."""

    seconds: float = Field(ge=0, le=60, description="How long to wait before answering.")


class AnswerInput(BaseModel):
    """Input of `Quiz.answer`."""

    answer: str = Field(description="Your answer: just the number.")


class Quiz(Environment):
    """Six sums; `blob` returns filler text, `answer` ends the episode with reward 1.0 if right."""

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:  # type: ignore[override]  # ors types it as an lru_cache
        """One split, "test"."""
        return [Split(name=SPLIT, type="test")]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        """The six tasks of "test"."""
        if split != SPLIT:
            raise ValueError(f"unknown split {split!r}; the only split is {SPLIT!r}")
        return [dict(task) for task in TASKS]

    async def get_prompt(self) -> list[TextBlock]:
        """The question."""
        return [TextBlock(text=f"{self.task_spec['question']} Call answer with just the number.")]

    @tool
    async def blob(self, params: BlobInput) -> ToolOutput:
        """Return a text block of exactly n characters (reward 0.0, not finished)."""
        text = ("0123456789" * (params.n // 10 + 1))[: params.n]
        return ToolOutput(blocks=[TextBlock(text=text)], reward=0.0, finished=False)

    @tool
    async def wait(self, params: WaitInput) -> ToolOutput:
        """Wait the given seconds, then answer "waited" (for timing benchmarks)."""
        await asyncio.sleep(params.seconds)
        return ToolOutput(blocks=[TextBlock(text="waited")], reward=None, finished=False)

    @tool
    async def answer(self, params: AnswerInput) -> ToolOutput:
        """Submit the answer: reward 1.0 if right, else 0.0; ends the episode."""
        right = params.answer.strip() == str(self.task_spec["answer"])
        return ToolOutput(
            blocks=[TextBlock(text="Correct!" if right else "Wrong.")],
            reward=1.0 if right else 0.0,
            finished=True,
        )


ENVIRONMENTS: list[type[Environment]] = [Quiz]
