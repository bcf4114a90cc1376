"""The test environments on the openreward reference server (`from openreward.environments import ...`).

Serve with `serve("tests.envs.openreward_envs:ENVIRONMENTS", sdk="openreward")`. The data and texts are
in `tests/envs/common.py`; `tests/envs/ors_sdk_envs.py` is the same code on ors-sdk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from openreward.environments import (
    Environment,
    ImageBlock,
    JSONObject,
    ListToolsOutput,
    Split,
    TextBlock,
    ToolOutput,
    ToolSpec,
    tool,
)

from tests.envs import common
from tests.envs.common import (
    BigOutputInput,
    EchoInput,
    SlowInput,
    StepInput,
    SubmitInput,
    TallyBigInput,
    TallyCountInput,
    TallyInput,
)


def _text(text: str, **fields: object) -> ToolOutput:
    """A ToolOutput of one text block (plus reward, finished, metadata as given)."""
    return ToolOutput(blocks=[TextBlock(text=text)], **fields)


class Lab(Environment):
    """The main test environment: known rewards, multi-step, big, slow, crashing and image tools."""

    def __init__(self, task_spec: JSONObject | None = None, secrets: Mapping[str, str] | None = None) -> None:
        """Keep the task and the secrets the server passed."""
        super().__init__(task_spec=task_spec or {}, secrets=dict(secrets or {}))
        self.secrets = dict(secrets or {})

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        """`train` as a Split object and `test` as a bare string."""
        return [Split(name="train", type="train"), "test"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        """The fixed tasks of `split`."""
        return [dict(task) for task in common.LAB_TASKS[split]]

    async def get_prompt(self) -> list[TextBlock]:
        """The question."""
        return [TextBlock(text=common.lab_prompt(self.task_spec))]

    def list_task_tools(self) -> ListToolsOutput:
        """A `hint` tool on tasks that have a hint."""
        if "hint" not in self.task_spec:
            return ListToolsOutput(tools=[])
        return ListToolsOutput(tools=[ToolSpec(name="hint", description=common.HINT_DESCRIPTION, input_schema=None)])

    @tool(shared=False)
    async def hint(self) -> ToolOutput:
        """Get a hint for this task (only offered on tasks that have one)."""
        return _text(str(self.task_spec.get("hint", common.NO_HINT)))

    @tool
    async def submit(self, params: SubmitInput) -> ToolOutput:
        """Submit an answer: reward 1.0 if correct, else 0.0; ends the episode."""
        reward = common.lab_reward(self.task_spec, params.answer)
        return _text(common.submit_text(reward, self.task_spec), reward=reward, finished=True)

    @tool
    async def step(self, params: StepInput) -> ToolOutput:
        """Take a step: reward value / 10, finished once value >= 3."""
        text, reward, finished = common.step_result(params.value)
        return _text(text, reward=reward, finished=finished)

    @tool
    async def big_output(self, params: BigOutputInput) -> ToolOutput:
        """Return one text block of exactly n_chars characters (fill repeated)."""
        return _text(common.fill_text(params.n_chars, params.fill))

    @tool
    async def slow(self, params: SlowInput) -> ToolOutput:
        """Sleep for the given seconds, then say "slept"."""
        await asyncio.sleep(params.seconds)
        return _text("slept")

    @tool
    async def crash(self) -> ToolOutput:
        """Raise an exception on purpose."""
        raise RuntimeError(common.CRASH_MESSAGE)

    @tool
    async def image(self) -> ToolOutput:
        """Return a caption and a 1x1 PNG image."""
        return ToolOutput(
            blocks=[
                TextBlock(text=common.IMAGE_CAPTION),
                ImageBlock(data=common.PNG_1X1_B64, mimeType="image/png"),
            ]
        )

    @tool
    async def tally(self, params: TallyInput) -> ToolOutput:
        """Sleep `delay` seconds, then add one to the counter `key` and return the new count."""
        await asyncio.sleep(params.delay)
        return _text(str(common.bump(params.key)))

    @tool
    async def tally_big(self, params: TallyBigInput) -> ToolOutput:
        """Add one to the counter `key`, then return n_chars characters: a multi-chunk result whose run is counted."""
        common.bump(params.key)
        return _text(common.tally_big_text(params.n_chars))

    @tool
    async def tally_count(self, params: TallyCountInput) -> ToolOutput:
        """Return the counter `key` without changing it."""
        return _text(str(common.tally_of(params.key)))

    @tool
    async def secret_keys(self) -> ToolOutput:
        """Return the sorted names of the secrets this session received."""
        return _text(common.secret_names_text(self.secrets))


class Echo(Environment):
    """A second, non-default environment with one tool."""

    @classmethod
    def list_splits(cls) -> Sequence[Split | str]:
        """One bare, non-standard split name."""
        return ["dev"]

    @classmethod
    def list_tasks(cls, split: str) -> Sequence[JSONObject]:
        """The fixed tasks of `split`."""
        return [dict(task) for task in common.ECHO_TASKS[split]]

    async def get_prompt(self) -> list[TextBlock]:
        """What to echo."""
        return [TextBlock(text=common.echo_prompt(self.task_spec))]

    @tool
    async def echo(self, params: EchoInput) -> ToolOutput:
        """Return the text unchanged, with reward 0.5."""
        return _text(params.text, reward=common.ECHO_REWARD, finished=False)


ENVIRONMENTS: list[type[Environment]] = [Lab, Echo]
