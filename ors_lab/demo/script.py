"""A short scripted session on each demo environment, printed as it goes (``ors-lab demo``).

Arithmetic: read the prompt, work the task's expression out with the ``calculator`` tool, submit
the number. Guessing: binary search with the ``guess`` tool, one step per guess, each with its
reward. The demo tasks carry their worked expression so the script needs no language model.
"""

from __future__ import annotations

from collections.abc import Callable

from ors_lab.client import Client, Session
from ors_lab.protocol.models import Block, TextBlock, ToolResult

__all__ = ["guess_by_bisection", "run_scripted_demo", "solve_arithmetic"]

Printer = Callable[[str], None]


def _text(blocks: list[Block]) -> str:
    return "\n".join(b.text if isinstance(b, TextBlock) else repr(b) for b in blocks)


def _step(session: Session, name: str, tool_input: dict[str, object], out: Printer) -> ToolResult:
    result = session.call(name, tool_input)
    reward = "" if result.reward is None else f"  reward={result.reward:g}"
    finished = "  finished" if result.finished else ""
    out(f"  call {name}({tool_input}) -> {result.text!r}{reward}{finished}")
    return result


def solve_arithmetic(session: Session, out: Printer = print) -> list[ToolResult]:
    """Calculate the task's expression, then submit the result; returns both steps' results."""
    expression = str(session.task.spec["expression"]) if session.task else ""
    value = _step(session, "calculator", {"expression": expression}, out)
    return [value, _step(session, "submit", {"answer": value.text}, out)]


def guess_by_bisection(session: Session, out: Printer = print) -> list[ToolResult]:
    """Play the guessing game by halving the range each turn; returns every step's result."""
    spec = session.task.spec if session.task else {}
    low, high = int(spec.get("low", 1)), int(spec.get("high", 100))
    steps: list[ToolResult] = []
    while True:
        middle = (low + high) // 2
        result = _step(session, "guess", {"number": middle}, out)
        steps.append(result)
        if result.finished or not result.ok:
            return steps
        if result.text == "higher":
            low = middle + 1
        else:
            high = middle - 1


def run_scripted_demo(client: Client, *, split: str = "test", index: int = 0, out: Printer = print) -> float:
    """Run one episode on each demo environment, printing it; returns the total reward."""
    total = 0.0
    for name, play in (("arithmetic", solve_arithmetic), ("guessing", guess_by_bisection)):
        env = client.environment(name)
        task = env.task(split, index)
        tools = ", ".join(t.name for t in env.tools())
        out(f"\n== {name} (split {split!r}, task {index}; tools: {tools})")
        with env.session(task=task) as session:
            out("  prompt: " + _text(session.prompt()).replace("\n", "\n          "))
            steps = play(session, out)
        episode = sum(r.reward or 0.0 for r in steps)
        total += episode
        out(f"  episode reward {episode:g} in {len(steps)} tool calls")
    out(f"\ntotal reward {total:g}")
    return total
