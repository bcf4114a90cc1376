"""The bundled demo agent: solves the demo environments without a language model, thinking aloud.

- **arithmetic**: reads the word problem, recognises which of the six kinds it is, writes the
  expression that solves it, checks it with the ``calculator`` tool and ``submit``\\ s the number.
- **guessing**: halves the range with the ``guess`` tool until it hears ``correct``.

Everything it thinks is streamed as ``reasoning`` deltas (word by word, ``pace`` seconds apart:
0 in batch runs, a little in a notebook to watch it), and it states its answer as ``text``; each
thought with the call it leads to is one turn (a ``block``).
"""

from __future__ import annotations

import asyncio
import re

from ors_lab.agents.episode import Episode

__all__ = ["DemoAgent", "expression_for"]

# (pattern over the question, expression built from its numbers)
_PROBLEMS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"has (\d+) trays of (\d+) rolls and sells (\d+)"), "{0} * {1} - {2}"),
    (re.compile(r"has (\d+) shelves with (\d+) books each\. (\d+) books are checked out"), "{0} * {1} - {2}"),
    (
        re.compile(r"buys (\d+) packs of (\d+) stickers and gives (\d+) stickers to each of (\d+) friends"),
        "{0} * {1} - {3} * {2}",
    ),
    (re.compile(r"travels at (\d+) km per hour for (\d+) hours and then (\d+) km more"), "{0} * {1} + {2}"),
    (re.compile(r"(\d+) apples are shared equally among (\d+) children"), "{0} / {1}"),
    (re.compile(r"plants (\d+) rows of (\d+) trees, and (\d+) trees die"), "{0} * {1} - {2}"),
]


def expression_for(question: str) -> str | None:
    """The expression that answers a demo word problem, or None for a problem it does not know."""
    for pattern, template in _PROBLEMS:
        found = pattern.search(question)
        if found:
            return template.format(*found.groups())
    return None


class DemoAgent:
    """Plays the demo environments (``arithmetic``, ``guessing``); see the module docstring."""

    def __init__(self, *, pace: float = 0.0) -> None:
        self.pace = pace

    def __repr__(self) -> str:
        return f"DemoAgent(pace={self.pace})"

    async def _think(self, episode: Episode, thought: str) -> None:
        with episode.reasoning() as out:
            for index, word in enumerate(thought.split(" ")):
                out.write(word if index == 0 else " " + word)
                if self.pace:
                    await asyncio.sleep(self.pace)

    async def _say(self, episode: Episode, text: str) -> None:
        with episode.text() as out:
            out.write(text)

    async def run(self, episode: Episode) -> None:
        tools = {spec.name for spec in episode.tools}
        if "guess" in tools:
            await self._guess(episode)
        elif {"calculator", "submit"} <= tools:
            await self._solve(episode)
        else:
            await self._say(episode, f"I only know the demo environments; these tools are new to me: {sorted(tools)}")

    async def _solve(self, episode: Episode) -> None:
        question = episode.prompt_text.split("\n\n")[0]
        expression = expression_for(question)
        if expression is None:
            await self._think(episode, "I do not recognise this kind of problem, so I will not guess.")
            return
        with episode.block("check"):
            await self._think(episode, f"The problem reads: {question} So the answer is {expression}. Let me check it.")
            value = await episode.call("calculator", {"expression": expression})
        with episode.block("answer"):
            await self._think(episode, f"The calculator says {value.text}.")
            await self._say(episode, f"The answer is {value.text}.")
            await episode.call("submit", {"answer": value.text})

    async def _guess(self, episode: Episode) -> None:
        low, high = _range(episode.prompt_text)
        while not episode.done:
            middle = (low + high) // 2
            with episode.block(f"guess {middle}"):
                await self._think(episode, f"The number is between {low} and {high}, so I guess the middle, {middle}.")
                result = await episode.call("guess", {"number": middle})
                if not result.ok or result.finished:
                    await self._say(episode, f"Found it: {middle}." if result.text == "correct" else result.text)
                    return
            if result.text == "higher":
                low = middle + 1
            else:
                high = middle - 1


def _range(prompt: str) -> tuple[int, int]:
    found = re.search(r"between (\d+) and (\d+)", prompt)
    return (int(found.group(1)), int(found.group(2))) if found else (1, 100)
