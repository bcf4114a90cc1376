"""Plain Python policies as agents: a function from an ``Observation`` to the next ``ToolCall``.

    def policy(obs: Observation) -> ToolCall | None:
        if obs.last is None:
            return ToolCall("calculator", {"expression": "2 + 2"})
        return ToolCall("submit", {"answer": obs.last.text})

``evaluate(env, policy)`` accepts such a function (sync or async) directly. Returning ``None``
ends the episode; a ``(name, input)`` tuple works as well as a ``ToolCall``. Each step (the
policy's decision and the call it makes) is one block of the agent stream.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ors_lab.agents.episode import Agent, Episode, Step
from ors_lab.protocol.models import Block, Task, ToolResult, ToolSpec

__all__ = ["Observation", "Policy", "PolicyAgent", "ToolCall", "as_agent"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The tool a policy wants called next, and its input."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Observation:
    """What a policy sees before each step: the task, the prompt, the tools, and what happened so far.

    ``task`` is the task's spec (``Episode.task``: None against a replay of a trace recorded without it).
    """

    environment: str
    split: str | None
    index: int | None
    rollout: int
    prompt: str
    blocks: tuple[Block, ...]
    tools: tuple[ToolSpec, ...]
    history: tuple[Step, ...]
    task: Task | None = None

    @property
    def step(self) -> int:
        """How many tool calls were made so far (0 before the first)."""
        return len(self.history)

    @property
    def last(self) -> ToolResult | None:
        """The last tool call's result, or None before the first call."""
        return self.history[-1].result if self.history else None


Action = ToolCall | tuple[str, Mapping[str, Any]] | None
Policy = Callable[[Observation], Action | Awaitable[Action]]


def _tool_call(action: Any) -> ToolCall:
    if isinstance(action, ToolCall):
        return action
    if isinstance(action, tuple) and len(action) == 2 and isinstance(action[0], str) and isinstance(action[1], Mapping):
        return ToolCall(action[0], action[1])
    raise TypeError(f"a policy returns a ToolCall, a (name, input) tuple or None, not {action!r}")


class PolicyAgent:
    """Runs a policy step by step until the episode is done or the policy returns None."""

    def __init__(self, policy: Policy, *, name: str | None = None) -> None:
        self.policy = policy
        self.name = name or getattr(policy, "__qualname__", type(policy).__name__)

    def __repr__(self) -> str:
        return f"PolicyAgent({self.name})"

    async def run(self, episode: Episode) -> None:
        blocks, tools = tuple(episode.prompt), tuple(episode.tools)
        text = episode.prompt_text
        while not episode.done:
            observation = Observation(
                environment=episode.environment,
                split=episode.split,
                index=episode.index,
                rollout=episode.rollout,
                prompt=text,
                blocks=blocks,
                tools=tools,
                history=tuple(episode.steps),
                task=episode.task,
            )
            with episode.block(f"step {observation.step + 1}", block_type="step"):
                action = self.policy(observation)
                if inspect.isawaitable(action):
                    action = await action
                if action is None:
                    return
                call = _tool_call(action)
                await episode.call(call.name, call.input)


def as_agent(agent: Agent | Policy) -> Agent:
    """An ``Agent`` as it is; a callable as a ``PolicyAgent``; anything else is a TypeError."""
    if isinstance(agent, Agent):
        return agent
    if callable(agent):
        return PolicyAgent(agent)
    raise TypeError(f"an agent has an async run(episode) method, or is a policy function; got {agent!r}")
