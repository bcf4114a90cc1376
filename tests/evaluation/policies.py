"""Policies for the `lab` test environment whose rewards are known in advance (tests/envs/common.py).

- `lab_policy`: submits the right answer on even rollouts and "wrong" on odd ones, so the
  expected reward of (task, rollout) is `expected_reward(split, index, rollout)`.
- `stepping_policy`: calls `step` with 1, 2, 3: rewards 0.1, 0.2, 0.3, finished at 3.
- `slow_lab_policy`, `slower_lab_policy`: `lab_policy` after an async sleep (to catch runs part-way).
- `task_policy`: submits the answer its task's spec holds (`Observation.task`): reward 1 everywhere.
- `echo_once`: echoes `echo`'s prompt once (reward `ECHO_REWARD`), then stops.
- `Curious`: an agent asking the environment more through what its episode hands it, then right.
"""

from __future__ import annotations

import asyncio

from ors_lab.agents.episode import Episode
from ors_lab.agents.policy import Observation, ToolCall
from tests.envs.common import LAB_TASKS, lab_reward

WRONG = "wrong"


def answer_for(split: str, index: int, rollout: int) -> str:
    """The answer the policy gives: right on even rollouts, wrong on odd ones."""
    return LAB_TASKS[split][index]["answer"] if rollout % 2 == 0 else WRONG


def expected_reward(split: str, index: int, rollout: int) -> float:
    """The reward the environment gives the policy's answer (the environment's own rule)."""
    return lab_reward(LAB_TASKS[split][index], answer_for(split, index, rollout))


def lab_policy(obs: Observation) -> ToolCall | None:
    """Submit once, then stop."""
    if obs.step:
        return None
    assert obs.split is not None and obs.index is not None
    return ToolCall("submit", {"answer": answer_for(obs.split, obs.index, obs.rollout)})


async def slow_lab_policy(obs: Observation) -> ToolCall | None:
    """`lab_policy`, 20 ms later."""
    await asyncio.sleep(0.02)
    return lab_policy(obs)


async def slower_lab_policy(obs: Observation) -> ToolCall | None:
    """`lab_policy`, 100 ms later: a run of 200 episodes at concurrency 8 lasts seconds, to be killed in."""
    await asyncio.sleep(0.1)
    return lab_policy(obs)


def stepping_policy(obs: Observation) -> tuple[str, dict[str, int]]:
    """step(1), step(2), step(3), ... until the episode finishes."""
    return ("step", {"value": obs.step + 1})


def task_policy(obs: Observation) -> ToolCall | None:
    """Submit once the answer the task's spec holds, then stop."""
    assert obs.task is not None
    return None if obs.step else ToolCall("submit", {"answer": obs.task.spec["answer"]})


def echo_once(obs: Observation) -> ToolCall | None:
    """Echo the prompt once, then stop."""
    return None if obs.step else ToolCall("echo", {"text": obs.prompt})


class Curious:
    """Asks the environment more through what its episode hands it (the session's client, an environment got
    from that client, a session of its own on it), then submits the answer of the task that client gave it."""

    async def run(self, episode: Episode) -> None:
        assert episode.split is not None and episode.index is not None
        client = episode.session.client
        env = client.environment(episode.environment)
        await client.environments()
        task = await env.task(episode.split, episode.index)
        [same] = await env.task_range(episode.split, episode.index, episode.index + 1)
        assert same == task
        async with env.session(split=episode.split, index=episode.index, view=False) as own:
            await own.prompt()
        await episode.call("submit", {"answer": task.spec["answer"]})
