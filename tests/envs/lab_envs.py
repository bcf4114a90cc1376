"""The `lab` and `echo` test environments, written once for both reference servers.

Plain Python: this module imports no SDK. `environments(sdk)` makes the two environment classes on
the SDK module it is handed, `ors` (ors-sdk) or `openreward.environments` (openreward): both name
the same base class, blocks, outputs and `tool` decorator, so the code is the same, and each SDK's
module is a thin adapter that hands its SDK over (`tests/envs/ors_sdk_envs.py`,
`tests/envs/openreward_envs.py`). The data, texts, tool input models and the tally counter are in
`tests/envs/common.py`, which tests import to know what the servers will answer.

No `from __future__ import annotations` here: both SDKs read a tool's annotations with
`get_type_hints`, which cannot resolve the names of the SDK this function is handed (they are its
locals) from text, so the annotations are the objects themselves.
"""

import asyncio
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

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


def environments(sdk: ModuleType) -> tuple[Any, Any]:
    """`Lab` and `Echo`, in registration order ("lab" is the default env), made on the SDK module `sdk`."""
    Environment, ImageBlock, JSONObject, ListToolsOutput, Split, TextBlock, ToolOutput, ToolSpec, tool = (
        sdk.Environment, sdk.ImageBlock, sdk.JSONObject, sdk.ListToolsOutput, sdk.Split, sdk.TextBlock,
        sdk.ToolOutput, sdk.ToolSpec, sdk.tool)  # fmt: skip

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
            hint = ToolSpec(name="hint", description=common.HINT_DESCRIPTION, input_schema=None)
            return ListToolsOutput(tools=[hint])

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
            blocks = [TextBlock(text=common.IMAGE_CAPTION), ImageBlock(data=common.PNG_1X1_B64, mimeType="image/png")]
            return ToolOutput(blocks=blocks)

        @tool
        async def tally(self, params: TallyInput) -> ToolOutput:
            """Sleep `delay` seconds, then add one to the counter `key` and return the new count."""
            await asyncio.sleep(params.delay)
            return _text(str(common.bump(params.key)))

        @tool
        async def tally_big(self, params: TallyBigInput) -> ToolOutput:
            """Add one to the counter `key`, then return n_chars characters: a multi-chunk result whose run is
            counted."""
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

    return Lab, Echo
