"""The bundled demo environments, served by the ors-sdk reference server.

- `Arithmetic` ("arithmetic", the default env): word problems with a `calculator` and a
  `submit` tool; one step, reward 1.0 or 0.0.
- `Guessing` ("guessing"): guess a number between 1 and 100 in at most 7 tries, told "higher"
  or "lower" after each wrong guess; a multi-step episode.

Task lists are fixed: they come from a `random.Random(1234)` seeded inside the generating
functions, so every import and every process computes the same tasks.
"""

from __future__ import annotations

import ast
import functools
import operator
import random
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

from ors import Environment, JSONObject, Split, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

__all__ = [
    "ENVIRONMENTS",
    "Arithmetic",
    "CalculatorError",
    "Guessing",
    "arithmetic_tasks",
    "calculate",
    "guessing_tasks",
]

SEED = 1234
ARITHMETIC_SPLITS = {"train": 20, "test": 10}
GUESSING_SPLITS = {"train": 10, "test": 10}
GUESS_LOW, GUESS_HIGH, MAX_GUESSES = 1, 100, 7
MAX_EXPRESSION_CHARS = 200

Task = dict[str, str | int]


# --------------------------------------------------------------------------------------------
# Task lists


def _problem(rng: random.Random) -> tuple[str, str, int]:
    """One word problem, the expression that solves it, and its (positive whole-number) answer."""
    kind = rng.randrange(6)
    if kind == 0:
        trays, rolls = rng.randint(3, 15), rng.randint(4, 12)
        sold = rng.randint(1, trays * rolls - 1)
        text = f"A baker has {trays} trays of {rolls} rolls and sells {sold}. How many are left?"
        return text, f"{trays} * {rolls} - {sold}", trays * rolls - sold
    if kind == 1:
        shelves, books = rng.randint(3, 12), rng.randint(10, 40)
        out = rng.randint(1, shelves * books - 1)
        text = (
            f"A library has {shelves} shelves with {books} books each. {out} books are checked out. "
            f"How many books are still on the shelves?"
        )
        return text, f"{shelves} * {books} - {out}", shelves * books - out
    if kind == 2:
        friends, each = rng.randint(2, 6), rng.randint(2, 5)
        packs, per_pack = rng.randint(2, 8), rng.randint(5, 10)
        packs = max(packs, (friends * each) // per_pack + 1)
        text = (
            f"Sam buys {packs} packs of {per_pack} stickers and gives {each} stickers to each of "
            f"{friends} friends. How many stickers does Sam keep?"
        )
        return text, f"{packs} * {per_pack} - {friends} * {each}", packs * per_pack - friends * each
    if kind == 3:
        speed, hours, extra = rng.randint(40, 90), rng.randint(2, 6), rng.randint(5, 60)
        text = (
            f"A train travels at {speed} km per hour for {hours} hours and then {extra} km more. "
            f"How many kilometres does it travel in total?"
        )
        return text, f"{speed} * {hours} + {extra}", speed * hours + extra
    if kind == 4:
        children, share = rng.randint(2, 9), rng.randint(3, 12)
        text = (
            f"{children * share} apples are shared equally among {children} children. "
            f"How many apples does each child get?"
        )
        return text, f"{children * share} / {children}", share
    rows, trees = rng.randint(4, 12), rng.randint(5, 15)
    lost = rng.randint(1, rows * trees // 3)
    text = f"A farmer plants {rows} rows of {trees} trees, and {lost} trees die. How many trees survive?"
    return text, f"{rows} * {trees} - {lost}", rows * trees - lost


@functools.cache
def _arithmetic_tasks() -> dict[str, tuple[Task, ...]]:
    """Every arithmetic split, generated once from the fixed seed."""
    rng = random.Random(SEED)
    splits: dict[str, tuple[Task, ...]] = {}
    for split, count in ARITHMETIC_SPLITS.items():
        tasks: list[Task] = []
        for index in range(count):
            question, expression, answer = _problem(rng)
            tasks.append(
                {
                    "id": f"arithmetic-{split}-{index}",
                    "question": question,
                    "expression": expression,
                    "answer": str(answer),
                }
            )
        splits[split] = tuple(tasks)
    return splits


@functools.cache
def _guessing_tasks() -> dict[str, tuple[Task, ...]]:
    """Every guessing split, generated once from the fixed seed."""
    rng = random.Random(SEED)
    splits: dict[str, tuple[Task, ...]] = {}
    for split, count in GUESSING_SPLITS.items():
        splits[split] = tuple(
            {
                "id": f"guessing-{split}-{index}",
                "low": GUESS_LOW,
                "high": GUESS_HIGH,
                "secret": rng.randint(GUESS_LOW, GUESS_HIGH),
                "max_guesses": MAX_GUESSES,
            }
            for index in range(count)
        )
    return splits


def arithmetic_tasks(split: str) -> list[Task]:
    """The arithmetic tasks of `split` ("train" or "test"), as fresh dicts."""
    return [dict(task) for task in _split_of(_arithmetic_tasks(), split)]


def guessing_tasks(split: str) -> list[Task]:
    """The guessing tasks of `split` ("train" or "test"), as fresh dicts."""
    return [dict(task) for task in _split_of(_guessing_tasks(), split)]


def _split_of(splits: Mapping[str, tuple[Task, ...]], split: str) -> tuple[Task, ...]:
    """Look a split up, or raise ValueError naming the valid ones."""
    try:
        return splits[split]
    except KeyError:
        raise ValueError(f"unknown split {split!r}; valid splits are {', '.join(splits)}") from None


# --------------------------------------------------------------------------------------------
# A tiny safe calculator (no eval)


class CalculatorError(ValueError):
    """The expression is not arithmetic on numbers with + - * / and parentheses."""


_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
_UNARY: dict[type[ast.unaryop], Callable[[Fraction], Fraction]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}


def _evaluate(node: ast.AST) -> Fraction:
    """Evaluate one node of a parsed expression exactly, allowing only numbers and + - * /."""
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(repr(node.value))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise CalculatorError("division by zero")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    what = type(node.op).__name__ if isinstance(node, ast.BinOp | ast.UnaryOp) else type(node).__name__
    raise CalculatorError(f"unsupported syntax: {what} (only numbers, + - * / and parentheses)")


def _format_number(value: Fraction) -> str:
    """A whole number without a decimal point, anything else as a float."""
    return str(value.numerator) if value.denominator == 1 else repr(float(value))


def calculate(expression: str) -> str:
    """Evaluate `expression` (numbers, + - * /, parentheses) exactly and return it as text.

    Raises CalculatorError for anything else, division by zero, or more than 200 characters.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not an expression: {exc.msg}") from None
    return _format_number(_evaluate(tree))


def _as_number(text: str) -> Fraction | None:
    """Parse an answer as an exact number ("66", " 66.0 ", "1,000"), or None."""
    try:
        return Fraction(text.strip().replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def _same_answer(submitted: str, gold: str) -> bool:
    """Numeric comparison when both parse as numbers, else exact comparison after stripping."""
    a, b = _as_number(submitted), _as_number(gold)
    if a is not None and b is not None:
        return a == b
    return submitted.strip() == gold.strip()


# --------------------------------------------------------------------------------------------
# Environments


class SubmitInput(BaseModel):
    """Input of `Arithmetic.submit`."""

    answer: str = Field(description="Your final answer: just the number, e.g. 42.")


class CalculatorInput(BaseModel):
    """Input of `Arithmetic.calculator`."""

    expression: str = Field(
        description="Arithmetic on numbers with + - * / and parentheses, e.g. (12 * 8) - 30.",
        max_length=MAX_EXPRESSION_CHARS,
    )


class GuessInput(BaseModel):
    """Input of `Guessing.guess`."""

    number: int = Field(description="Your guess: a whole number within the game's range.")


def _spec_int(task_spec: JSONObject, key: str) -> int:
    """A whole-number field of a task spec, or ValueError."""
    value = task_spec.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"task spec field {key!r} must be a whole number, not {value!r}")
    return value


def _text(text: str) -> list[TextBlock]:
    """One text block."""
    return [TextBlock(text=text)]


class Arithmetic(Environment):
    """Arithmetic word problems: work it out (a calculator helps), then submit the number."""

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:  # type: ignore[override]  # ors types it as an lru_cache
        """A train and a test split."""
        return [Split(name="train", type="train"), Split(name="test", type="test")]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[Mapping[str, str | int]]:
        """The fixed problems of `split`."""
        return arithmetic_tasks(split)

    async def get_prompt(self) -> list[TextBlock]:
        """The word problem and how to answer."""
        return _text(
            f"{self.task_spec['question']}\n\n"
            "You may use the calculator tool. When you know the answer, call submit with just the number."
        )

    @tool
    async def submit(self, params: SubmitInput) -> ToolOutput:
        """Submit your final answer (a number). Ends the episode: reward 1.0 if correct, else 0.0."""
        gold = str(self.task_spec["answer"])
        correct = _same_answer(params.answer, gold)
        return ToolOutput(
            blocks=_text("Correct!" if correct else f"Incorrect, the answer was {gold}"),
            metadata={"gold": gold, "submitted": params.answer},
            reward=1.0 if correct else 0.0,
            finished=True,
        )

    @tool
    async def calculator(self, params: CalculatorInput) -> ToolOutput:
        """Evaluate an arithmetic expression with + - * / and parentheses, e.g. (12 * 8) - 30."""
        try:
            result = calculate(params.expression)
        except CalculatorError as exc:
            result = f"error: {exc}"
        return ToolOutput(blocks=_text(result), reward=None, finished=False)


class Guessing(Environment):
    """A guessing game: find the secret number; after each wrong guess you hear higher or lower."""

    def __init__(self, task_spec: JSONObject | None = None, secrets: Mapping[str, str] | None = None) -> None:
        """Start a game for `task_spec` with no guesses made."""
        super().__init__(task_spec=task_spec or {}, secrets=dict(secrets or {}))
        self.guesses: list[int] = []
        self.over = False

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:  # type: ignore[override]  # ors types it as an lru_cache
        """A train and a test split."""
        return [Split(name="train", type="train"), Split(name="test", type="test")]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[Mapping[str, str | int]]:
        """The fixed games of `split`."""
        return guessing_tasks(split)

    async def get_prompt(self) -> list[TextBlock]:
        """The rules of the game."""
        low, high, tries = self.task_spec["low"], self.task_spec["high"], self.task_spec["max_guesses"]
        return _text(
            f"I am thinking of a whole number between {low} and {high} (inclusive). "
            f"Find it with the guess tool. After each guess I answer 'higher' (my number is higher "
            f"than your guess), 'lower' (it is lower) or 'correct'. You have {tries} guesses."
        )

    @tool
    async def guess(self, params: GuessInput) -> ToolOutput:
        """Guess the number. Answers higher, lower or correct; reward 1.0 when you find it."""
        secret, allowed = _spec_int(self.task_spec, "secret"), _spec_int(self.task_spec, "max_guesses")
        if self.over:
            return ToolOutput(blocks=_text(f"the game is over, the number was {secret}"), reward=None, finished=True)
        self.guesses.append(params.number)
        used = len(self.guesses)
        metadata = {"guesses": used, "remaining": allowed - used}
        if params.number == secret:
            self.over = True
            return ToolOutput(blocks=_text("correct"), metadata=metadata, reward=1.0, finished=True)
        if used >= allowed:
            self.over = True
            text = f"out of guesses, the number was {secret}"
            return ToolOutput(blocks=_text(text), metadata=metadata, reward=0.0, finished=True)
        text = "higher" if secret > params.number else "lower"
        return ToolOutput(blocks=_text(text), metadata=metadata, reward=0.0, finished=False)


ENVIRONMENTS: list[type[Environment]] = [Arithmetic, Guessing]
